"""Parameter storage on a memory device: tensor id -> location and versions, copy-on-write, epoch snapshots."""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ParameterStorage", "Snapshot", "Location"]


@dataclass(frozen=True)
class Location:
    """Where a tensor lives: device, byte offset in its DRAM, allocated bytes (a multiple of ``align``)."""
    device: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Snapshot:
    """The version of every tensor at the end of an epoch (versions are immutable, so this is a checkpoint)."""
    epoch: int
    versions: dict = field(default_factory=dict)


class ParameterStorage:
    """Key-value table of one memory device: ``tensor id -> Location`` and a list of immutable versions.

    ``put`` makes a new version only when the bytes differ from the current one (copy-on-write: an unchanged
    parameter costs nothing); ``snapshot(epoch)`` records the current version of every tensor; ``restore``
    brings every tensor back to a snapshot (for instance after a worker failed mid-epoch). Memory is allocated
    in units of ``align`` bytes from ``capacity``."""

    def __init__(self, device=0, capacity=1 << 30, align=64):
        if capacity < 1 or align < 1:
            raise ValueError("capacity and align must be positive")
        self.device, self.capacity, self.align = device, capacity, align
        self._next = 0
        self.locations = {}
        self._versions = {}         # id -> list of read-only arrays
        self.snapshots = {}
        self.copies = 0             # versions created by put (copy-on-write count)

    def allocate(self, tensor_id, nbytes):
        """Reserve device memory for ``tensor_id`` (idempotent for the same size)."""
        if nbytes < 1:
            raise ValueError(f"tensor {tensor_id!r}: size must be positive, not {nbytes}")
        loc = self.locations.get(tensor_id)
        if loc is not None:
            if loc.nbytes < nbytes:
                raise ValueError(f"tensor {tensor_id!r} has {loc.nbytes} bytes allocated, not {nbytes}")
            return loc
        size = -(-nbytes // self.align) * self.align
        if self._next + size > self.capacity:
            raise MemoryError(f"device {self.device}: {size} bytes for {tensor_id!r} exceed the capacity "
                              f"({self.capacity - self._next} bytes free)")
        loc = self.locations[tensor_id] = Location(self.device, self._next, size)
        self._next += size
        return loc

    def put(self, tensor_id, data):
        """Store ``data`` (bytes-like) as the tensor's value; returns the version number now current."""
        data = np.frombuffer(bytes(np.asarray(data, dtype=np.uint8).tobytes()), dtype=np.uint8)
        self.allocate(tensor_id, data.size)
        versions = self._versions.setdefault(tensor_id, [])
        if versions and versions[-1].size == data.size and np.array_equal(versions[-1], data):
            return len(versions) - 1
        versions.append(data)       # frombuffer of bytes: read-only, so no one can change a stored version
        self.copies += 1
        return len(versions) - 1

    def get(self, tensor_id, version=None):
        """The tensor's bytes (current version, or ``version``)."""
        if tensor_id not in self._versions:
            raise KeyError(f"no tensor {tensor_id!r} on device {self.device}")
        versions = self._versions[tensor_id]
        return versions[-1 if version is None else version].copy()

    def version(self, tensor_id):
        """Current version number of ``tensor_id``."""
        return len(self._versions[tensor_id]) - 1

    def __contains__(self, tensor_id):
        return tensor_id in self._versions

    def snapshot(self, epoch):
        """Checkpoint at the end of ``epoch``: the current version of every tensor (no data copied)."""
        snap = Snapshot(epoch, {t: len(v) - 1 for t, v in self._versions.items()})
        self.snapshots[epoch] = snap
        return snap

    def restore(self, snapshot):
        """Roll every tensor back to ``snapshot`` (a :class:`Snapshot` or an epoch number); tensors created after
        it are dropped. Versions after the snapshot are discarded."""
        if not isinstance(snapshot, Snapshot):
            if snapshot not in self.snapshots:
                raise KeyError(f"no snapshot of epoch {snapshot}")
            snapshot = self.snapshots[snapshot]
        for t in list(self._versions):
            if t not in snapshot.versions:
                del self._versions[t]
            else:
                del self._versions[t][snapshot.versions[t] + 1:]
        return snapshot
