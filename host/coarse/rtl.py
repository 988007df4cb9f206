"""The COARSE host on the RTL: the parameter clients' push/pull and the proxies' synchronization go through
:class:`~syncfabric.hdl.coarse.system.CoarseSystem` simulated on Verilator (or Icarus), with this process playing
every GPU.

::

    from syncfabric.host.coarse.rtl import CoarseRtl, RtlCoarseService

    with CoarseRtl(n_devices=4, n_groups=2, beat_bytes=8, entry_beats=4) as rtl:
        svc = RtlCoarseService(rtl, "fp32", "sum")
        for c in range(4):
            svc.push(c, "w0", grads[c])           # MEM_WR flits over GPU c's CCI link into device c's DRAM
        svc.synchronize()                         # sync cores programmed through CCI registers, ring all-reduce
        out = svc.pull(0, "w0")                   # MEM_RD flits back
        assert out == svc.expected("w0")          # the golden sync-core order, byte for byte

Layers: :class:`CoarseRtl` is the driver of the system (CCI reads/writes, sync-core registers by
name in :func:`~syncfabric.hdl.coarse.layouts.core_register_map`, one ring all-reduce); it talks to a
:class:`CciBackend` (the simulator server :class:`syncfabric.host.transports.coarse.remote.RemoteCoarse`, or any object with the same
``call``).
:class:`RtlCoarseService` is the parameter service on it: each client's proxy is the sync-core service of its
own memory device (the one behind its CCI port), parameter storage allocates every tensor at the same DRAM
offset on every device (so one ring all-reduce covers it), and proxies synchronize every tensor that all
clients pushed, adjacent tensors in one run of the sync cores.
"""

from abc import ABC, abstractmethod

import numpy as np

from ...hdl.coarse.layouts import CORE_SPACE, core_mode, core_register_map
from ...hdl.common.regmap import RegisterMapError
from ...sim.golden.coarse import chunk_bytes_for, coarse_allreduce, ring_positions
from ...sim.golden.types import DType, ReduceOp, dtype_bytes
from .storage import ParameterStorage

__all__ = ["CciBackend", "CoarseRtl", "RtlCoarseService", "MismatchError", "SIMULATORS", "run_round"]

#: Simulators that run the system top.
SIMULATORS = ("verilator", "icarus")


class MismatchError(AssertionError):
    """A pulled tensor differs from the golden model (the message names the client and the first byte)."""


class CciBackend(ABC):
    """What :class:`CoarseRtl` needs from a backend: ``call(op, *args)`` with the requests of
    :mod:`syncfabric.tb.coarse.test_server` (``write``, ``read``, ``reg_write``, ``reg_read``, ``batch``,
    ``dram``, ``cycles``, ``links``, ``idle``), and ``close()``."""

    @abstractmethod
    def call(self, op, *args):
        """One request; returns its value."""

    @abstractmethod
    def close(self):
        """End the simulation."""


def _dtype(value):
    return DType.parse(value) if isinstance(value, str) else DType(value)


def _op(value):
    return ReduceOp.parse(value) if isinstance(value, str) else ReduceOp(value)


class CoarseRtl:
    """Driver of a COARSE system top of ``n_devices`` memory devices with ``n_groups`` sync cores each
    (``beat_bytes`` per CCI beat, ``entry_beats`` per sync-core entry), every link at ``latency`` cycles, ring
    links at ``ring_rate`` flits per cycle, ``mem_bytes`` of DRAM per device, ``window`` CCI requests in flight
    per GPU, ``cci_depth`` host requests outstanding in each device's CCI target (None: the RTL's default),
    ``ram_queue`` items in each channel queue of the testbench's DRAM model (cocotbext-axi's own 2 limit
    single-beat writes to about 0.73 per cycle: a model limit, not the design's).
    ``sum_parts`` (0: none) parts of ``sum_part_beats`` beats in the system's BytePS summation service
    (:class:`~syncfabric.host.coarse.summation.RtlSummationService` drives it). ``stall``: the probability that
    a link stalls in a cycle (random backpressure; cycle counts then vary with ``seed``).
    ``backend``: an already open :class:`CciBackend` (default: start one on ``sim``). The first use of
    a geometry builds its Verilator model (about a minute; cached by content afterwards)."""

    def __init__(self, n_devices=4, n_groups=1, beat_bytes=16, entry_beats=16, *, sim="verilator", latency=4,
                 ring_rate=(1, 1), mem_bytes=1 << 16, window=32, cci_depth=None, ram_queue=8, seed=1,
                 sum_parts=0, sum_part_beats=4, stall=0.0, backend=None, progress=False):
        if n_devices < 2:
            raise ValueError(f"a COARSE ring needs at least 2 devices, not {n_devices}")
        if n_groups < 1:
            raise ValueError(f"a device needs at least one sync core (n_groups >= 1), not {n_groups}")
        if beat_bytes < 4 or beat_bytes & (beat_bytes - 1):
            raise ValueError(f"beat_bytes must be a power of two >= 4, not {beat_bytes}")
        if entry_beats < 1:
            raise ValueError(f"entry_beats must be >= 1, not {entry_beats}")
        if not 1 <= window <= 256:
            raise ValueError(f"window must be in 1..256 (8-bit CCI tags), not {window}")
        if cci_depth is not None and not 1 <= cci_depth <= 256:
            raise ValueError(f"cci_depth must be in 1..256, not {cci_depth}")
        if not 1 <= ram_queue <= 64:
            raise ValueError(f"ram_queue must be in 1..64, not {ram_queue}")
        if not 1 <= latency <= 64:
            raise ValueError(f"link latency must be in 1..64 cycles, not {latency}")
        if mem_bytes < beat_bytes or mem_bytes > CORE_SPACE:
            raise ValueError(f"mem_bytes must be in {beat_bytes}..{CORE_SPACE}, not {mem_bytes}")
        if sum_parts < 0 or (sum_parts and (sum_part_beats < 1 or sum_part_beats & (sum_part_beats - 1))):
            raise ValueError(f"the summation service needs sum_parts >= 0 and a power-of-two sum_part_beats, not "
                             f"{sum_parts} parts of {sum_part_beats} beats")
        if not 0 <= stall < 1:
            raise ValueError(f"stall must be a probability in [0, 1), not {stall}")
        if sim not in SIMULATORS and backend is None:
            raise ValueError(f"simulator {sim!r} is not one of {', '.join(SIMULATORS)}")
        self.n, self.groups, self.beat_bytes, self.entry_beats = n_devices, n_groups, beat_bytes, entry_beats
        self.mem_bytes, self.window, self.latency, self.ring_rate = mem_bytes, window, latency, tuple(ring_rate)
        self.cci_depth, self.ram_queue = cci_depth, ram_queue
        self.sum_parts, self.sum_part_beats = sum_parts, sum_part_beats
        #: The host's replay of the summation service's state (:mod:`syncfabric.host.coarse.summation`).
        self.summation_state = None
        #: The sync cores' control registers (addresses, access types, the status fields of START).
        self.regmap = core_register_map(beat_bytes)
        #: Bytes of one sync-core chunk (one entry per device).
        self.chunk_bytes = chunk_bytes_for(n_devices, entry_beats * beat_bytes)
        if backend is None:
            from ..transports.coarse.remote import RemoteCoarse
            params = {"n_devices": n_devices, "n_groups": n_groups, "beat_bytes": beat_bytes,
                      "entry_beats": entry_beats}
            if cci_depth is not None:
                params["cci_depth"] = cci_depth
            if sum_parts:
                params.update(sum_parts=sum_parts, sum_part_beats=sum_part_beats)
            backend = RemoteCoarse(params, sim=sim, latency=latency, ring_rate=ring_rate,
                                   mem_bytes=mem_bytes, window=window, ram_queue=ram_queue, seed=seed, stall=stall,
                                   progress=progress)
        self.backend = backend

    # -- context ---------------------------------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """End the simulation."""
        self.backend.close()

    # -- checks ----------------------------------------------------------------------------------------------
    def _device(self, d):
        if not isinstance(d, (int, np.integer)) or not 0 <= d < self.n:
            raise ValueError(f"no device {d!r}: the system has devices 0..{self.n - 1}")
        return int(d)

    def _range(self, addr, nbytes):
        if addr % self.beat_bytes or nbytes % self.beat_bytes:
            raise ValueError(f"address {addr:#x} and length {nbytes} must be whole {self.beat_bytes}-byte beats "
                             f"(CCI moves one beat per request)")
        if addr < 0 or nbytes < 0 or addr + nbytes > self.mem_bytes:
            raise ValueError(f"{nbytes} bytes at {addr:#x} fall outside the device's {self.mem_bytes} bytes of "
                             f"DRAM")

    # -- CCI accesses ----------------------------------------------------------------------------------------
    def cycles(self):
        """Clock cycles simulated so far."""
        return int(self.backend.call("cycles"))

    def links(self):
        """Flits sent so far on every link (``h{d}_req``, ``h{d}_rsp``, ``r{d}_cw``, ``r{d}_ccw``)."""
        return dict(self.backend.call("links"))

    def write(self, d, addr, data):
        """GPU ``d`` writes ``data`` (whole beats) into device ``d``'s DRAM at ``addr`` over CCI."""
        data = bytes(data)
        self._range(addr, len(data))
        self.backend.call("write", self._device(d), addr, data)

    def read(self, d, addr, nbytes):
        """GPU ``d`` reads ``nbytes`` (whole beats) of device ``d``'s DRAM at ``addr`` over CCI."""
        self._range(addr, nbytes)
        return bytes(self.backend.call("read", self._device(d), addr, nbytes))

    def write_all(self, addr, buffers):
        """Every GPU ``d`` writes ``buffers[d]`` at ``addr`` at the same time; returns the cycles it took."""
        if len(buffers) != self.n:
            raise ValueError(f"{len(buffers)} buffers for {self.n} devices")
        reqs = []
        for d, b in enumerate(buffers):
            b = bytes(b)
            self._range(addr, len(b))
            reqs.append(("write", d, addr, b))
        t0 = self.cycles()
        self.backend.call("batch", reqs)
        return self.cycles() - t0

    def read_all(self, addr, nbytes):
        """Every GPU reads ``nbytes`` at ``addr`` at the same time; returns ``(buffers, cycles)``."""
        self._range(addr, nbytes)
        t0 = self.cycles()
        out = self.backend.call("batch", [("read", d, addr, nbytes) for d in range(self.n)])
        return [bytes(b) for b in out], self.cycles() - t0

    def sum_write(self, d, addr, data):
        """GPU ``d`` writes ``data`` (whole beats) at ``addr`` of the summation service (its worker ``d`` port)."""
        self.backend.call("sum_write", self._device(d), int(addr), bytes(data))

    def sum_read(self, d, addr, nbytes):
        """GPU ``d`` reads ``nbytes`` (whole beats) at ``addr`` of the summation service."""
        return bytes(self.backend.call("sum_read", self._device(d), int(addr), int(nbytes)))

    def batch(self, reqs):
        """Requests ``(op, d, ...)`` of :meth:`write`, :meth:`read`, :meth:`sum_write`, :meth:`sum_read` and
        ``("sum_transact", d, [(opcode, addr, data), ...])`` (GPU ``d``'s CCI requests to the summation service,
        sent as one stream; its value is the responses' data) at once (each GPU runs its own in order, the GPUs
        concurrently); returns ``(values, cycles)``."""
        t0 = self.cycles()
        out = self.backend.call("batch", [(op, self._device(d), *args) for op, d, *args in reqs])
        return out, self.cycles() - t0

    def dram(self, d, addr, nbytes):
        """Device ``d``'s DRAM by back door (no CCI traffic, no simulated time)."""
        return bytes(self.backend.call("dram", self._device(d), addr, nbytes))

    def reg_write(self, d, core, reg, value):
        """Write sync-core register ``reg`` (its name in :attr:`regmap`, any case) of core ``core`` on device
        ``d``."""
        self.backend.call("reg_write", self._device(d), self._core(core), self._reg(reg), int(value))

    def reg_read(self, d, core, reg):
        """Read sync-core register ``reg`` of core ``core`` on device ``d``."""
        return int(self.backend.call("reg_read", self._device(d), self._core(core), self._reg(reg)))

    def _core(self, core):
        if not 0 <= core < self.groups:
            raise ValueError(f"no sync core {core}: each device has cores 0..{self.groups - 1}")
        return core

    def _reg(self, reg):
        """The name of register ``reg`` in :attr:`regmap` (what the backend's ``reg_write``/``reg_read`` take);
        raises the map's :class:`~syncfabric.hdl.common.regmap.RegisterMapError` for an unknown one."""
        name = reg.upper() if isinstance(reg, str) else None
        if name is None or name not in self.regmap:
            names = ", ".join(r.name for r in self.regmap.registers())
            raise RegisterMapError(f"no sync-core register {reg!r} (one of {names})")
        return self.regmap.register(name).name

    # -- synchronization -------------------------------------------------------------------------------------
    def allreduce(self, base, nbytes, dtype="fp32", op="sum", timeout_cycles=1_000_000, poll_cycles=32):
        """Ring all-reduce by the sync cores of ``nbytes`` (whole ``groups x chunk_bytes``) at ``base`` on every
        device: registers programmed through every GPU's CCI port, START, status polled until DONE. Returns
        the cycles from START to the poll that saw every core done; raises RuntimeError on a core's ERROR or
        a timeout."""
        dtype, op = _dtype(dtype), _op(op)
        span = self.groups * self.chunk_bytes
        if nbytes <= 0 or nbytes % span:
            raise ValueError(f"{nbytes} bytes is not a whole number of {span}-byte spans ({self.groups} groups x "
                             f"{self.chunk_bytes}-byte chunks)")
        self._range(base, nbytes)
        program = []
        for d in range(self.n):
            for g in range(self.groups):
                for reg, value in (("BASE", base + g * self.chunk_bytes), ("STRIDE", span),
                                   ("CHUNKS", nbytes // span), ("RANK", ring_positions(self.n, g)[d]),
                                   ("RANKS", self.n), ("MODE", core_mode(dtype, op))):
                    program.append(("reg_write", d, g, self._reg(reg), value))
        self.backend.call("batch", program)
        t0 = self.cycles()
        status_bits = self.regmap.register("START")     # reading START returns the status
        self.backend.call("batch", [("reg_write", d, g, "START", 1)
                                    for d in range(self.n) for g in range(self.groups)])
        while True:
            status = self.backend.call("batch", [("reg_read", d, g, "START")
                                                 for d in range(self.n) for g in range(self.groups)])
            if any(status_bits.field("ERROR").extract(s) for s in status):
                raise RuntimeError(f"a sync core reported an error (status per device and core: {status})")
            if all(status_bits.field("DONE").extract(s) for s in status):
                return self.cycles() - t0
            if self.cycles() - t0 > timeout_cycles:
                raise RuntimeError(f"the sync cores did not finish within {timeout_cycles} cycles "
                                   f"(status {status})")
            self.backend.call("idle", poll_cycles)


class RtlCoarseService:
    """The parameter service (clients, proxies, storage) on a :class:`CoarseRtl` system, for ``dtype``/``op``.

    ``push(client, id, data)`` writes the tensor over the client's CCI link into its device's DRAM at the
    tensor's :class:`~syncfabric.host.coarse.storage.Location` (the same on every device; storage allocates in
    whole sync spans, the tail padded with zeros); :meth:`synchronize` runs the sync cores over every tensor all
    clients pushed; ``pull(client, id)`` reads the result back over CCI. :meth:`expected` is the golden
    sync-core result (:func:`~syncfabric.sim.golden.coarse.coarse_allreduce`) of the pushed bytes; :meth:`check`
    compares pulled bytes with it."""

    def __init__(self, rtl, dtype="fp32", op="sum"):
        self.rtl, self.dtype, self.op = rtl, _dtype(dtype), _op(op)
        self.span = rtl.groups * rtl.chunk_bytes
        self.storages = [ParameterStorage(d, rtl.mem_bytes, align=self.span) for d in range(rtl.n)]
        self.pushed = {}            # tensor id -> {client: bytes pushed (unpadded)}
        self.synced = set()

    def _location(self, tensor_id, nbytes):
        locs = [s.allocate(tensor_id, nbytes) for s in self.storages]
        assert len({loc.offset for loc in locs}) == 1     # symmetric: every storage allocated in the same order
        return locs[0]

    def _raw(self, tensor_id, data):
        raw = np.asarray(data).view(np.uint8).reshape(-1).tobytes() if not isinstance(data, (bytes, bytearray)) \
            else bytes(data)
        if not raw or len(raw) % dtype_bytes(self.dtype):
            raise ValueError(f"tensor {tensor_id!r}: {len(raw)} bytes is not a whole number of "
                             f"{self.dtype.name} elements")
        return raw

    def _padded(self, raw, loc):
        return raw + bytes(loc.nbytes - len(raw))

    def _begin_push(self, client, tensor_id, raw):
        self.rtl._device(client)
        got = self.pushed.setdefault(tensor_id, {})
        if tensor_id in self.synced:             # a new round of this tensor
            got.clear()
            self.synced.discard(tensor_id)
        if client in got:
            raise ValueError(f"client {client} pushed {tensor_id!r} twice before it was synchronized")
        if got and len(next(iter(got.values()))) != len(raw):
            raise ValueError(f"client {client} pushed {len(raw)} bytes of {tensor_id!r}, others "
                             f"{len(next(iter(got.values())))}")
        loc = self._location(tensor_id, len(raw))
        if loc.nbytes < len(raw):
            raise ValueError(f"tensor {tensor_id!r} holds {loc.nbytes} bytes, not {len(raw)}")
        return loc

    def push(self, client, tensor_id, data):
        """Client ``client`` pushes its gradient of ``tensor_id`` (bytes or a numpy array of the element type)."""
        raw = self._raw(tensor_id, data)
        loc = self._begin_push(client, tensor_id, raw)
        self.rtl.write(client, loc.offset, self._padded(raw, loc))
        self.pushed[tensor_id][client] = raw

    def push_all(self, tensor_id, buffers):
        """Every client pushes its buffer of ``tensor_id`` at once; returns the cycles the pushes took."""
        if len(buffers) != self.rtl.n:
            raise ValueError(f"{len(buffers)} buffers for {self.rtl.n} clients")
        raws = [self._raw(tensor_id, b) for b in buffers]
        if len({len(r) for r in raws}) != 1:
            raise ValueError(f"tensor {tensor_id!r}: clients push different sizes {[len(r) for r in raws]}")
        for c, raw in enumerate(raws):
            loc = self._begin_push(c, tensor_id, raw)
            self.pushed[tensor_id][c] = raw
        return self.rtl.write_all(loc.offset, [self._padded(r, loc) for r in raws])

    def pending(self):
        """Tensors every client pushed and the proxies have not synchronized yet, by DRAM offset."""
        ids = [t for t, got in self.pushed.items() if len(got) == self.rtl.n and t not in self.synced]
        return sorted(ids, key=lambda t: self.storages[0].locations[t].offset)

    def synchronize(self):
        """Synchronize every tensor all clients pushed (adjacent tensors in one run of the sync cores; a tensor
        only some clients pushed waits). Returns ``{tensor id: cycles of the run that synchronized it}``."""
        runs, out = [], {}
        for t in self.pending():
            loc = self.storages[0].locations[t]
            if runs and runs[-1][1] == loc.offset:
                runs[-1][1] += loc.nbytes
                runs[-1][2].append(t)
            else:
                runs.append([loc.offset, loc.offset + loc.nbytes, [t]])
        for start, end, ids in runs:
            cycles = self.rtl.allreduce(start, end - start, self.dtype, self.op)
            for t in ids:
                out[t] = cycles
                self.synced.add(t)
        return out

    def _synced_location(self, tensor_id):
        if tensor_id not in self.pushed:
            raise KeyError(f"no client pushed {tensor_id!r}")
        if tensor_id not in self.synced:
            raise ValueError(f"{tensor_id!r} is not synchronized yet ({len(self.pushed[tensor_id])} of "
                             f"{self.rtl.n} clients pushed it)")
        return self.storages[0].locations[tensor_id], len(next(iter(self.pushed[tensor_id].values())))

    def pull(self, client, tensor_id):
        """The synchronized ``tensor_id`` (bytes), read by client ``client`` over its CCI link."""
        loc, n = self._synced_location(tensor_id)
        return self.rtl.read(client, loc.offset, loc.nbytes)[:n]

    def pull_all(self, tensor_id):
        """Every client pulls ``tensor_id`` at once; returns ``(buffers, cycles)``."""
        loc, n = self._synced_location(tensor_id)
        bufs, cycles = self.rtl.read_all(loc.offset, loc.nbytes)
        return [b[:n] for b in bufs], cycles

    def expected(self, tensor_id):
        """The golden sync-core result of the pushed bytes of ``tensor_id``."""
        loc, n = self._synced_location(tensor_id)
        got = self.pushed[tensor_id]
        bufs = [np.frombuffer(self._padded(got[c], loc), dtype=np.uint8) for c in range(self.rtl.n)]
        return coarse_allreduce(bufs, self.dtype, self.op, self.rtl.entry_beats * self.rtl.beat_bytes,
                                self.rtl.groups).tobytes()[:n]

    def check(self, tensor_id, pulled):
        """Raise :class:`MismatchError` unless every client's ``pulled[client]`` equals :meth:`expected`."""
        want = self.expected(tensor_id)
        for c, got in enumerate(pulled):
            if bytes(got) != want:
                bad = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                           min(len(got), len(want)))
                raise MismatchError(f"{tensor_id!r}: client {c} pulled bytes that differ from the golden sync-core "
                                    f"result first at byte {bad} ({self.dtype.name} {self.op.name})")


def run_round(rtl, sizes, dtype="fp32", op="sum", seed=1):
    """One training round through the RTL: every client pushes a seeded random tensor of each size in
    ``sizes`` (bytes, whole elements; all clients at once), the proxies synchronize them in one call, every
    client pulls each tensor; every pulled byte is checked against the golden sync-core result
    (:class:`MismatchError` otherwise). Returns a report: per tensor ``bytes``, ``push_cycles``,
    ``pull_cycles``, ``link_bound`` (flits one host link carries for the padded tensor at one flit per
    cycle) and ``sync_cycles`` (of the sync-core run that covered it)."""
    from ..run import random_inputs
    svc = RtlCoarseService(rtl, dtype, op)
    eb = dtype_bytes(svc.dtype)
    if not sizes:
        raise ValueError("no tensor sizes given")
    for n in sizes:
        if n <= 0 or n % eb:
            raise ValueError(f"a tensor of {n} bytes is not a whole, positive number of {svc.dtype.name} elements "
                             f"({eb} bytes)")
    total = sum(-(-n // svc.span) * svc.span for n in sizes)
    if total > rtl.mem_bytes:
        raise ValueError(f"the tensors take {total} bytes of DRAM (whole {svc.span}-byte spans); the devices "
                         f"have {rtl.mem_bytes}")
    rng = np.random.default_rng(seed)
    rows = []
    for k, n in enumerate(sizes):
        bufs = random_inputs("allreduce", n // eb, rtl.n, svc.dtype, 0, rng)
        tid = f"t{k}"
        push = svc.push_all(tid, bufs)
        rows.append({"tensor": tid, "bytes": n, "padded": svc.storages[0].locations[tid].nbytes,
                     "push_cycles": push})
    synced = svc.synchronize()
    for row in rows:
        pulled, cycles = svc.pull_all(row["tensor"])
        svc.check(row["tensor"], pulled)
        row["pull_cycles"] = cycles
        row["sync_cycles"] = synced[row["tensor"]]
        row["link_bound"] = row["padded"] // rtl.beat_bytes
    return {"devices": rtl.n, "groups": rtl.groups, "beat_bytes": rtl.beat_bytes, "entry_beats": rtl.entry_beats,
            "latency": rtl.latency, "window": rtl.window, "cci_depth": rtl.cci_depth,
            "ram_queue": rtl.ram_queue, "dtype": svc.dtype.name, "op": svc.op.name,
            "tensors": rows, "checked": True}
