"""The host API: a whole emulated system - every NPU endpoint with its engine and memory - driven from Python
the way NCCL-style libraries are used.

::

    from syncfabric.host.system import System

    with System("examples/ring4.yaml") as sys:           # or System({"topology": "ring:4"})
        send = sys.register(4096)                         # a buffer at the same address on every endpoint
        recv = sys.register(4096)
        for r in range(sys.size):
            send.write(r, np.full(1024, r, np.float32))
        req = sys.world.allreduce(send, recv, 1024, "fp32", "sum")
        req.wait(timeout_us=100)                          # the engines run while the host waits
        print(recv.read(0, "fp32"), req.cycles)

Concepts:

* :class:`System` - built from a configuration (:mod:`syncfabric.host.config`): it opens the simulator
  backend, brings every engine up (rings, spill window) and creates :attr:`System.world`.
* :class:`Buffer` - a registered memory region, symmetric: the same address on every endpoint. Registration
  claims one of the engine's memory windows (descriptors may only name memory inside a window), so an
  engine of ``n_windows`` windows holds that many registrations; :meth:`Buffer.view` names part of one.
* :class:`Communicator` - a set of ranks with an engine communicator id; :meth:`System.split` makes one from
  a rank list. Collectives return a :class:`Request`.
* :class:`Request` - ``wait()`` / ``test()``; a failed completion raises :class:`CollectiveError` with the
  engine's status code, detail and the descriptor; a timeout raises :class:`RequestTimeout` and leaves the
  request pending.

Every bad call is refused before anything is posted, with a :class:`UsageError` (or
:class:`RegistrationError`, :class:`CommunicatorError`) naming the problem; the system stays usable.
"""

import itertools

import numpy as np

from ..hdl.ace.regs import IRQ_CPL, IRQ_ERROR
from ..hdl.ace.retry import replay_timeout
from ..hdl.common.layouts import completion_layout
from ..hdl.system.top import system_links
from ..sim.golden.algorithms import default_algorithm, generate, supported_algorithms
from ..sim.golden.arith import bf16_from_float32, float32_from_bf16
from ..sim.golden.chunking import COLLECTIVES, buffer_counts, decomposition_for, normalize_collective
from ..sim.golden.executor import NULL_COLLECTIVES, landing_deadlock
from ..sim.golden.topology import Torus, parse as parse_topology
from ..sim.golden.types import Collective, DType, ReduceOp, Status, dtype_bytes
from .config import MIN_MEMORY, ConfigError, load_config
from .driver import SyncAceDriver, status_name
from .bringup import MemoryLayout, bring_up, descriptor, load_programs, memory_layout
from .job import engine_chunk_bytes
from .transport import run_sync

__all__ = ["System", "Communicator", "Buffer", "Request", "SyncfabricError", "UsageError", "RegistrationError",
           "CommunicatorError", "CollectiveError", "RequestTimeout", "ConfigError", "COLLECTIVES", "sub_topology",
           "MemoryLayout", "memory_layout"]

#: Byte alignment of registered buffers (a beat of every engine profile).
ALIGN = 64
_COUNT_MAX = (1 << 32) - 1


class SyncfabricError(Exception):
    """Base of the host API's errors."""


class UsageError(SyncfabricError, ValueError):
    """A call the API refuses before posting anything (bad dtype, count, buffer, root, ...)."""


class RegistrationError(SyncfabricError, ValueError):
    """Memory registration failed (no window left, no memory left) or a buffer is not registered."""


class CommunicatorError(SyncfabricError, ValueError):
    """A communicator cannot be made (ranks that do not form a sub-topology, no engine id left) or is freed."""


class RequestTimeout(SyncfabricError, TimeoutError):
    """:meth:`Request.wait` ran out of time; the request is still pending and may be waited on again."""


class CollectiveError(SyncfabricError):
    """The engine completed a collective with an error status on some rank.

    ``rank``: the first failing rank; ``status`` its status name (``"OUT_OF_WINDOW"``, ...), ``code`` the
    numeric status, ``detail`` the completion's detail word, ``descriptor`` the descriptor that rank posted;
    ``failures`` maps every failing rank to its ``(status, detail)``."""

    def __init__(self, request, failures):
        self.request = request
        self.failures = failures
        self.rank = min(failures)
        self.status, self.detail = failures[self.rank]
        self.code = int(Status[self.status]) if self.status in Status.__members__ else None
        self.descriptor = request.descriptors[self.rank]
        super().__init__(f"{request.collective} on {request.comm!r} failed: rank {self.rank} completed "
                         f"{self.status} (detail {self.detail:#x})"
                         + (f", {len(failures) - 1} more rank(s) failed" if len(failures) > 1 else "")
                         + f"; descriptor {_short(self.descriptor)}")


def _short(desc):
    return ", ".join(f"{k}={v:#x}" if k in ("src", "dst") else f"{k}={v}" for k, v in desc.items()
                     if k in ("collective", "dtype", "op", "flags", "comm", "root", "count", "src", "dst"))


def _open_backend(config, progress=False):
    if config.backend == "serial":
        from .serial import SerialBoard, SerialBoards
        ser = config.serial
        kind = SerialBoards if isinstance(ser["port"], list) else SerialBoard
        return kind(ser["port"], ser["baud"], timeout=ser["timeout_s"], quiet_s=ser["quiet_s"])
    if config.backend == "amaranth":
        from .transports.ace.stepped import SteppedSystem
        return SteppedSystem(config.engine, config.topology, latency=config.latency, rate=config.rate,
                             mem_bytes=config.memory_bytes, seed=config.seed)
    from .transports.ace.remote import RemoteSystem
    return RemoteSystem(config.engine, config.topology, latency=config.latency, rate=config.rate,
                        mem_bytes=config.memory_bytes, seed=config.seed, sim=config.backend, progress=progress)


class Buffer:
    """A registered region of ``nbytes`` at byte address ``addr`` on every endpoint (or a view into one)."""

    def __init__(self, system, addr, nbytes, window=None, parent=None, communicators=None):
        self.system, self.addr, self.nbytes = system, addr, nbytes
        self.window, self.parent = window, parent
        self._communicators = communicators
        self._registered = parent is None
        #: rank -> the element type of the numpy data last written through this object (or collected into it;
        #: None after raw bytes): a collective of another type on this object is refused. Kept per object, not
        #: per region, so views of one registration may hold different types.
        self._holds = {}

    @property
    def communicators(self):
        """The communicators whose collectives may use the buffer (None: every one; a view: its parent's)."""
        return (self.parent or self)._communicators

    @property
    def registered(self):
        """True while the region (for a view: its parent) is registered."""
        return self.parent.registered if self.parent is not None else self._registered

    def view(self, offset, nbytes):
        """The part ``[offset, offset + nbytes)`` of this buffer (shares its registration)."""
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise UsageError(f"view [{offset}, {offset + nbytes}) outside the buffer's {self.nbytes} bytes")
        root = self.parent or self
        return Buffer(self.system, self.addr + offset, nbytes, parent=root)

    def _check(self, rank):
        if not self.registered:
            raise RegistrationError(f"{self!r} is not registered (deregistered)")
        self.system._check_rank(rank)

    def write(self, rank, data, offset=0, dtype=None):
        """Write ``data`` at ``offset`` of endpoint ``rank``'s copy: bytes (taken as they are), or a numpy array
        of an element type the engine has (float32, float16, int32; unsigned integers and int8 are element
        bits or raw bytes, as the golden model stores them; bf16 values with ``dtype="bf16"``). ``dtype`` (a
        syncfabric dtype name) converts the array to that type first (floats rounded to nearest even, integers
        checked for range); an array of any other type (float64, int64, ...) is refused rather than written as
        bytes the engine would misread. This buffer object remembers the type, and a collective of another
        type on it is refused."""
        self._check(rank)
        holds = None
        if isinstance(data, np.ndarray):
            data, holds = _engine_array(data, dtype)
            raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False).view(np.uint8)
            raw = raw.tobytes()
        else:
            if dtype is not None:
                raise UsageError(f"write: dtype={dtype!r} converts numpy arrays; bytes are written as they are")
            raw = bytes(data)
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise UsageError(f"write: offset must be an integer, got {offset!r}")
        offset = int(offset)
        if offset < 0 or offset + len(raw) > self.nbytes:
            raise UsageError(f"writing {len(raw)} bytes at offset {offset} overflows the {self.nbytes}-byte buffer")
        self.system.transports[rank].write_mem(self.addr + offset, raw)
        self._holds[int(rank)] = holds

    def read(self, rank, dtype=None, count=None, offset=0, float32=False):
        """Endpoint ``rank``'s copy: ``count`` elements of ``dtype`` (a syncfabric dtype name or numpy dtype;
        None: raw bytes) from ``offset``. bf16 elements come as their uint16 bits, or with ``float32=True`` as
        float32 values (exact: bf16 is the top half of a float32)."""
        self._check(rank)
        if float32:
            if dtype is None or _numpy_dtype(dtype) != np.uint16 or not isinstance(dtype, str):
                raise UsageError(f"read: float32=True converts bf16 elements, not {dtype!r}")
            return float32_from_bf16(self.read(rank, dtype, count, offset))
        if dtype is None:
            n = self.nbytes - offset if count is None else count
            np_dtype = np.uint8
        else:
            np_dtype = _numpy_dtype(dtype)
            size = np.dtype(np_dtype).itemsize
            n = ((self.nbytes - offset) // size if count is None else count) * size
        if offset < 0 or n < 0 or offset + n > self.nbytes:
            raise UsageError(f"reading {n} bytes at offset {offset} overflows the {self.nbytes}-byte buffer")
        raw = self.system.transports[rank].read_mem(self.addr + offset, n)
        return np.frombuffer(raw, dtype=np_dtype).copy()

    def __repr__(self):
        kind = "view" if self.parent is not None else f"window {self.window}"
        return f"Buffer({self.nbytes} B at {self.addr:#x}, {kind})"


#: numpy element types a write takes as they are, and the engine type each holds (None: raw bytes)
#: (unsigned integers are element bit patterns, the golden model's storage types, of no one type)
_ARRAY_TYPES = {np.dtype(np.float32): DType.FP32, np.dtype(np.float16): DType.FP16,
                np.dtype(np.int32): DType.INT32, np.dtype(np.uint8): None, np.dtype(np.int8): None,
                np.dtype(np.uint16): None, np.dtype(np.uint32): None}


def _engine_array(data, dtype):
    """``data`` as an array of an engine element type, and that type (None: raw bytes); ``dtype`` converts."""
    if dtype is None:
        dt = np.dtype(data.dtype).newbyteorder("=")
        if dt not in _ARRAY_TYPES:
            raise UsageError(f"write: a {data.dtype} array is not an element type of the engine (float32, float16, "
                             f"int32; unsigned integers as element bits; bf16 as write(..., dtype='bf16')): "
                             f"convert it first, e.g. data.astype(np.float32), or pass dtype='fp32' to convert")
        return data, _ARRAY_TYPES[dt]
    try:
        dt = DType.parse(dtype)
    except ValueError as e:
        raise UsageError(f"write: {e}") from None
    if dt == DType.BF16:
        if data.dtype == np.uint16:                       # bf16 bits already
            return data, dt
        return bf16_from_float32(np.asarray(data, dtype=np.float32)), dt
    target = {DType.FP32: np.float32, DType.FP16: np.float16, DType.INT32: np.int32}[dt]
    if dt == DType.INT32:
        if not np.issubdtype(data.dtype, np.integer):
            raise UsageError(f"write: a {data.dtype} array as int32 would truncate; round it first")
        info = np.iinfo(np.int32)
        if data.size and (data.min() < info.min or data.max() > info.max):
            raise UsageError(f"write: values outside int32's {info.min}..{info.max}")
    return data.astype(target), dt


def _numpy_dtype(dtype):
    if isinstance(dtype, str):
        try:
            dt = DType.parse(dtype)
        except ValueError as e:
            raise UsageError(str(e)) from None
        return {DType.FP32: np.float32, DType.FP16: np.float16, DType.INT32: np.int32, DType.BF16: np.uint16}[dt]
    return np.dtype(dtype)


class Request:
    """An outstanding collective. :meth:`wait` blocks (running the simulation) until every member rank has
    completed it; :meth:`test` checks without blocking. After completion ``cycles`` is the engines' own
    measure (descriptor fetch to completion, the largest over the ranks), ``elapsed_cycles`` the simulated
    time from the first post to the last completion seen, ``contributors`` the count lane per rank;
    ``chunk_bytes`` the engines' chunk size when it was posted (it fixes the reduction order)."""

    def __init__(self, comm, collective, cookie, descriptors, post_cycle):
        self.comm, self.collective, self.cookie = comm, collective, cookie
        self.descriptors = descriptors          # rank -> descriptor dict
        self.completions = {}                   # rank -> completion dict
        self.post_cycle = post_cycle
        self.done_cycle = None

    @property
    def done(self):
        return len(self.completions) == len(self.descriptors)

    @property
    def cycles(self):
        return max((c["cycles"] for c in self.completions.values()), default=0) if self.done else None

    @property
    def elapsed_cycles(self):
        return None if self.done_cycle is None else self.done_cycle - self.post_cycle

    @property
    def time_us(self):
        """:attr:`cycles` in microseconds at the system's clock."""
        return None if not self.done else self.comm.system.config.cycles_to_us(self.cycles)

    @property
    def contributors(self):
        return {r: c["contributors"] for r, c in sorted(self.completions.items())}

    def test(self):
        """True if every rank has completed (raises :class:`CollectiveError` if one failed)."""
        self.comm.system.progress()
        return self._result()

    def wait(self, timeout_cycles=None, timeout_us=None):
        """Block until done; raises :class:`RequestTimeout` after ``timeout_cycles`` simulated cycles (or
        ``timeout_us`` microseconds at the system clock; None: no limit), :class:`CollectiveError` if a rank
        failed. Returns the request."""
        system = self.comm.system
        if timeout_us is not None:
            timeout_cycles = int(timeout_us * system.config.clock_mhz)
        start = system.now
        while True:
            system.progress()
            if self._result():
                return self
            waiting = sorted(set(self.descriptors) - set(self.completions))
            hung = system._hung(waiting)
            if hung:
                raise RequestTimeout(f"{self.collective} on {self.comm!r}: the watchdog of rank(s) {hung} saw no "
                                     f"transfer for {system.watchdog_cycles} cycles with the collective in flight "
                                     f"(a dead link, or a rank that did not post): it cannot finish; "
                                     f"System.reset() or Communicator.abort() aborts it")
            left = None
            if timeout_cycles is not None:
                left = timeout_cycles - (system.now - start)
                if left <= 0:
                    raise RequestTimeout(f"{self.collective} on {self.comm!r}: ranks {waiting} have not completed "
                                         f"after {timeout_cycles} cycles")
            system._wait_irq(waiting[0], left)

    def _result(self):
        if not self.done:
            return False
        bad = {r: (c["status_name"], c["detail"]) for r, c in self.completions.items() if c["status"] != Status.OK}
        if bad:
            raise CollectiveError(self, bad)
        return True

    def __repr__(self):
        state = "done" if self.done else f"{len(self.completions)}/{len(self.descriptors)} ranks done"
        return f"Request({self.collective} on {self.comm!r}, {state})"


class Communicator:
    """Ranks ``ranks`` (system ranks, in communicator-rank order) on ``topology`` with engine id ``comm_id``.
    Collectives follow NCCL's conventions for ``count`` (elements per rank; the output count of
    reduce-scatter, the input count of all-gather, the count per peer of all-to-all)."""

    def __init__(self, system, comm_id, ranks, topology):
        self.system, self.id, self.ranks = system, comm_id, tuple(ranks)
        self.topology = parse_topology(topology)
        self.size = len(self.ranks)
        self.loaded = set()             # (collective, root) with programs on the engines
        self.last_use = {}              # (collective, root) -> when it was last posted (for eviction)
        self.freed = False
        self._algorithms = {}           # collective -> algorithm chosen by set_algorithm
        self._tags = itertools.count(1)

    def __repr__(self):
        return f"Communicator({self.id}, {self.topology.spec}, ranks {list(self.ranks)})"

    # -- algorithms ------------------------------------------------------------------------------------------
    def algorithm(self, collective):
        """The algorithm ``collective`` runs with on this communicator (its topology's default unless
        :meth:`set_algorithm` chose another)."""
        coll = normalize_collective(collective)
        return self._algorithms.get(coll) or default_algorithm(coll, self.topology)

    def set_algorithm(self, collective, algorithm=None):
        """Run ``collective`` with ``algorithm`` on this communicator from its next call (None: the topology's
        default), as ``NCCL_ALGO`` does for NCCL. The choices are
        :func:`~syncfabric.sim.golden.algorithms.supported_algorithms` (e.g. ``hierarchical-rotated`` for an
        all-reduce on a torus, ``async`` for an all-to-all with one-hop routes). A loaded program of another
        algorithm is replaced at the next call, which first waits for the system's requests in flight."""
        if self.freed:
            raise CommunicatorError(f"{self!r} has been freed")
        try:
            coll = normalize_collective(collective)
        except ValueError as e:
            raise UsageError(str(e)) from None
        allowed = supported_algorithms(coll, self.topology)
        algo = allowed[0] if algorithm is None else str(algorithm).strip().lower()
        if algo not in allowed:
            raise UsageError(f"{coll} on {self!r}: algorithm {algorithm!r} is not one of {', '.join(allowed)}")
        if algo == self.algorithm(coll):
            return
        self._algorithms[coll] = algo
        for key in [k for k in self.loaded if k[0] == coll]:
            self.loaded.discard(key)
            self.system._programs.pop((self.id, *key), None)

    # -- collectives -----------------------------------------------------------------------------------------
    def allreduce(self, send, recv, count, dtype="fp32", op="sum", *, null_ranks=()):
        """Every rank gets the reduction of all ranks' ``count`` elements. ``recv=None`` or ``recv is send``:
        in place. ``null_ranks`` (communicator ranks) contribute nothing (partial all-reduce, op sum only);
        each completion's ``contributors`` says how many did."""
        return self._post("allreduce", send, recv, count, dtype, op, null_ranks=null_ranks)

    def reduce_scatter(self, send, recv, count, dtype="fp32", op="sum", *, null_ranks=()):
        """Rank r gets segment r (``count`` elements) of the reduction of every rank's ``size * count``."""
        return self._post("reduce_scatter", send, recv, count, dtype, op, null_ranks=null_ranks)

    def allgather(self, send, recv, count, dtype="fp32"):
        """Every rank gets all ranks' ``count`` elements, in rank order."""
        return self._post("allgather", send, recv, count, dtype, "sum")

    def alltoall(self, send, recv, count, dtype="fp32"):
        """Segment d (``count`` elements) of rank s's send buffer lands in segment s of rank d's receive buffer."""
        return self._post("alltoall", send, recv, count, dtype, "sum")

    def broadcast(self, send, recv, count, dtype="fp32", *, root=0):
        """Every rank gets ``root``'s ``count`` elements (``send`` is read on the root only)."""
        return self._post("broadcast", send, recv, count, dtype, "sum", root=root)

    def reduce(self, send, recv, count, dtype="fp32", op="sum", *, root=0, null_ranks=()):
        """``root`` gets the reduction of every rank's ``count`` elements (``recv`` is written on the root)."""
        return self._post("reduce", send, recv, count, dtype, op, root=root, null_ranks=null_ranks)

    def barrier(self):
        """Completes on every rank once all ranks have entered it."""
        return self._post("barrier", None, None, 0, "fp32", "sum")

    def prepare(self, *collectives, roots=(0,)):
        """Load the programs of ``collectives`` (all seven by default) now rather than at first use (loading
        waits for every outstanding request of the system). When they do not all fit the engines, the ones
        loaded first make room for the later ones (and are loaded again when used)."""
        for coll in collectives or COLLECTIVES:
            for root in (roots if coll in ("broadcast", "reduce") else (0,)):
                self.system._ensure_program(self, coll, root)

    def free(self):
        """Release the engine communicator id (waits for the communicator's outstanding requests)."""
        self.system._free_comm(self)

    def abort(self):
        """Abort this communicator, as ``ncclCommAbort`` does: its requests in flight fail (status ``ABORTED``,
        or ``TIMEOUT`` on a rank whose watchdog fired) and the communicator is freed (the world communicator
        stays: it cannot be freed). The engines' abort is engine-wide, so this is :meth:`System.reset`: the
        requests of every other communicator in flight fail too, and their communicators stay usable."""
        system = self.system
        if self.freed:
            raise CommunicatorError(f"{self!r} has been freed")
        system.reset()
        if self is not system.world:
            system._release_comm(self)

    # -- posting ---------------------------------------------------------------------------------------------
    def _post(self, coll, send, recv, count, dtype, op, *, root=0, null_ranks=()):
        system = self.system
        if self.freed:
            raise CommunicatorError(f"{self!r} has been freed")
        try:
            dt, rop = DType.parse(dtype), ReduceOp.parse(op)
        except ValueError as e:
            raise UsageError(f"{coll}: {e}") from None
        engine = system.config.engine
        if Collective.parse(coll).reduces and not engine.supports(dt):
            raise UsageError(f"{coll}: this system's engines reduce only {', '.join(engine.dtypes)} (engine.dtypes), "
                             f"not {dt.name.lower()}")
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 0 <= count <= _COUNT_MAX:
            raise UsageError(f"{coll}: count must be an integer in 0..{_COUNT_MAX}, got {count!r}")
        count = int(count)
        if coll in ("broadcast", "reduce"):
            if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
                raise UsageError(f"{coll}: root {root!r} is not a rank of {self!r} (0..{self.size - 1})")
            root = int(root)
        if count == 0 and coll != "barrier":       # torch's rule: a collective of nothing is a no-op
            req = Request(self, coll, None, {}, system.now)
            req.done_cycle = system.now
            return req
        null = sorted(set(null_ranks))
        if null:
            if coll not in NULL_COLLECTIVES or rop != ReduceOp.SUM:
                raise UsageError(f"{coll}: null contributions need {', '.join(NULL_COLLECTIVES)} with op sum")
            if any(not 0 <= r < self.size for r in null):
                raise UsageError(f"{coll}: null ranks {null} outside 0..{self.size - 1}")
        eb = dtype_bytes(dt)
        in_place = coll != "barrier" and (recv is None or recv is send)
        if in_place and coll == "alltoall":
            raise UsageError("alltoall: in-place is not supported; pass a separate receive buffer")
        addrs = {}
        for cr, sr in enumerate(self.ranks):
            n_in, n_out = buffer_counts(coll, count, self.size, cr, root)
            src = dst = 0
            if coll != "barrier":
                buf = send if send is not None else recv
                for what, b in (("send", send), ("recv", recv if not in_place else send)):
                    if b is None and ((what == "send" and n_in) or (what == "recv" and n_out)):
                        raise UsageError(f"{coll}: rank {cr} needs a {what} buffer")
                    if b is not None:
                        if not isinstance(b, Buffer) or b.system is not system:
                            raise RegistrationError(f"{coll}: the {what} buffer is not a Buffer of this system "
                                                    f"(register memory with System.register)")
                        if not b.registered:
                            raise RegistrationError(f"{coll}: the {what} buffer {b!r} is not registered")
                        if b.communicators is not None and self not in b.communicators:
                            raise UsageError(f"{coll}: the {what} buffer {b!r} is registered for other "
                                             f"communicators than {self!r} (System.register(..., "
                                             f"communicators=...))")
                        if b.addr % eb:
                            raise UsageError(f"{coll}: the {what} buffer at {b.addr:#x} is not aligned to the "
                                             f"{eb}-byte {dt.name.lower()} element")
                        held = b._holds.get(sr)
                        if what == "send" and n_in and held is not None and held != dt:
                            raise UsageError(f"{coll}: rank {sr}'s send buffer holds {held.name.lower()} data "
                                             f"(its last write), the collective is {dt.name.lower()}: write the "
                                             f"data as {dt.name.lower()} (Buffer.write(..., dtype="
                                             f"'{dt.name.lower()}')) or post the collective with its type")
                if in_place:
                    if buf is None:
                        raise UsageError(f"{coll}: no buffer given")
                    seg = count * eb
                    need = max(n_in, n_out) * eb
                    if buf.nbytes < need:
                        raise UsageError(f"{coll}: in place, rank {cr} needs {need} bytes, the buffer has "
                                         f"{buf.nbytes}")
                    src = dst = buf.addr
                    if coll == "reduce_scatter":
                        dst = buf.addr + cr * seg
                    elif coll == "allgather":
                        src = buf.addr + cr * seg
                else:
                    if n_in and send.nbytes < n_in * eb:
                        raise UsageError(f"{coll}: rank {cr} sends {n_in * eb} bytes ({n_in} x {dt.name.lower()}), "
                                         f"the send buffer has {send.nbytes}")
                    if n_out and recv.nbytes < n_out * eb:
                        raise UsageError(f"{coll}: rank {cr} receives {n_out * eb} bytes, the receive buffer has "
                                         f"{recv.nbytes}")
                    src = send.addr if send is not None else 0
                    dst = recv.addr if recv is not None else 0
            addrs[sr] = (src, dst, cr)
        prog_root = root if coll in ("broadcast", "reduce") else 0
        system._ensure_program(self, coll, prog_root)
        if system.config.chunk_bytes == "auto":
            system._choose_chunk(self, coll, prog_root, count, eb)
        system._check_landing(self, coll, root, count, eb)
        cookie = next(system._cookies)
        tag = next(self._tags) & 0xFFFF
        descs = {}
        for sr, (src, dst, cr) in addrs.items():
            descs[sr] = descriptor(coll, dt, rop, comm=self.id, root=root, tag=tag, count=count, src=src, dst=dst,
                                   cookie=cookie, in_place=in_place, null=cr in null)
        req = Request(self, coll, cookie, descs, system.now)
        req.chunk_bytes = system.chunk_bytes
        out = recv if recv is not None else send
        if out is not None:
            for sr in descs:                        # what the collective leaves there is of its type
                out._holds[sr] = dt
        system._requests[cookie] = req
        for sr, desc in descs.items():
            system.drivers[sr].post(desc)
        return req


def sub_topology(topology, ranks):
    """The topology spec a communicator of the ranks ``ranks`` of ``topology`` runs on. They must form a
    sub-topology the links connect directly: all ranks, or on a torus the ranks of a line or a plane (every
    rank sharing the coordinates of the dimensions left out), which is a torus with those dimensions of size
    1 using the same ports. Raises :class:`CommunicatorError` otherwise."""
    topo = parse_topology(topology)
    ranks = sorted(set(ranks))
    n = topo.n_endpoints
    if ranks == list(range(n)):
        return topo.spec
    if isinstance(topo, Torus) and len(ranks) > 1 and all(0 <= r < n for r in ranks):
        dims = topo.dims

        def coords(r):
            return (r % dims[0], r // dims[0] % dims[1], r // (dims[0] * dims[1]))
        cs = [coords(r) for r in ranks]
        varying = [len({c[d] for c in cs}) > 1 for d in range(3)]
        members = [r for r in range(n) if all(varying[d] or coords(r)[d] == cs[0][d] for d in range(3))]
        if members == ranks:
            return "torus:{}x{}x{}".format(*(dims[d] if varying[d] else 1 for d in range(3)))
    raise CommunicatorError(f"ranks {ranks} do not form a sub-topology of {topo.spec} its links connect "
                            f"directly (all ranks, or a line or plane of a torus)")


class System:
    """An emulated system built from ``config`` (a YAML path, YAML text, a dict or a
    :class:`~syncfabric.host.config.SystemConfig`; ``overrides`` replace top-level keys, e.g.
    ``backend="verilator"``). ``progress``: say what is happening while a simulator model builds. Use it as a
    context manager, or call :meth:`close`."""

    def __init__(self, config=None, *, progress=False, **overrides):
        from .config import SystemConfig
        self.config = config if isinstance(config, SystemConfig) and not overrides else load_config(
            config.source if isinstance(config, SystemConfig) else config, **overrides)
        cfg = self.config.engine
        self.backend = _open_backend(self.config, progress)
        if self.config.backend == "serial":
            self._adopt_board()
        self.transports = list(self.backend.transports)
        self.drivers = [SyncAceDriver(t, cfg) for t in self.transports]
        for drv in self.drivers:
            drv.sram_split = self.config.sram_split
            drv.buffer_budget = self.config.buffers
        self.size = len(self.drivers)
        #: Where rings, spill window and buffers are in each endpoint's memory.
        self.layout = lay = memory_layout(self.config.memory_bytes, cfg)
        links = system_links(self.config.topology, self.config.latency, self.config.rate)
        for rank, drv in enumerate(self.drivers):
            # the link retransmission's timer from the links' round trips
            run_sync(bring_up(drv.driver, lay,
                              replay_timeout=replay_timeout(cfg, links, rank) if cfg.replay_flits else None))
        #: The engines' chunk (CHUNK_BEATS in bytes) and the largest the loaded programs allow.
        self.chunk_bytes = self._chunk_limit = None
        self._chunk_choices = {}
        self._heap = [(lay.data_base, self.config.memory_bytes - lay.data_base)]     # free (base, size), sorted
        self._windows = list(range(cfg.n_windows))
        self._buffers = []
        self._comm_ids = list(range(cfg.n_comms))
        self._requests = {}             # cookie -> Request, outstanding
        self._cookies = itertools.count(1)
        self._programs = {}             # (comm id, collective, root) -> head program
        self._uses = itertools.count(1)
        #: Cycles to wait for outstanding requests before loading programs or freeing a communicator.
        self.drain_timeout_cycles = 2_000_000
        #: The engines' progress watchdog (:meth:`set_watchdog`; 0: off).
        self.watchdog_cycles = 0
        #: The engines' step timeout (:meth:`set_step_timeout`; 0: off).
        self.step_timeout_cycles = 0
        self.world = self._new_comm(list(range(self.size)), self.config.topology)
        if self.config.faults:
            self.set_link_faults(**self.config.faults)
        if self.config.step_timeout:
            self.set_step_timeout(self.config.step_timeout)

    def _adopt_board(self):
        """A board's memory and clock are what it was built with: check the configuration against them."""
        board, cfg = self.backend, self.config
        try:
            if board.n_endpoints != cfg.n_endpoints:
                hint = ("" if board.n_endpoints > cfg.n_endpoints else
                        "; a board of a ring of boards holds one rank: list every board's device in serial.port")
                raise ConfigError(f"topology: the board has {board.n_endpoints} endpoints, {cfg.topology} has "
                                  f"{cfg.n_endpoints}{hint}")
            if cfg.memory_bytes is not None and cfg.memory_bytes != board.mem_bytes:
                raise ConfigError(f"memory.bytes: the board has {board.mem_bytes} bytes per endpoint, the "
                                  f"configuration says {cfg.memory_bytes}")
            if board.mem_bytes < MIN_MEMORY:
                raise ConfigError(f"the board has {board.mem_bytes} bytes of memory per endpoint; the host needs "
                                  f"at least {MIN_MEMORY} (rings, the spill window and 4 KiB of buffers): "
                                  f"build it with more (syncfabric build --mem-bytes)")
        except ConfigError:
            board.close()
            raise
        clock = cfg.clock_mhz if "clock_mhz" in (cfg.source or {}) else board.clk_hz / 1e6
        self.config = cfg.replace(memory_bytes=board.mem_bytes, clock_mhz=clock)

    # -- context -------------------------------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stop the simulation (outstanding requests are abandoned)."""
        self.backend.close()

    @property
    def now(self):
        """Simulated clock cycles so far."""
        return self.backend.now

    def advance(self, cycles):
        """Let ``cycles`` clock cycles pass without host activity (the engines keep running)."""
        self.backend.idle(cycles)

    def set_npu_share(self, share, ranks=None):
        """From now on each NPU of ``ranks`` (default all) takes ``share`` (0..1) of its memory port for its
        own compute: the engine gets about ``1 - share`` of the port's beats (``docs/api.md``)."""
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < 1:
            raise UsageError(f"memory share {share!r} must be a number in [0, 1)")
        for r in (range(self.size) if ranks is None else ranks):
            self._check_rank(r)
            self.backend.set_npu_share(r, share)

    def compute(self, cycles, share=0.5, ranks=None):
        """An emulated compute phase: ``cycles`` clock cycles during which the NPUs of ``ranks`` (default
        all) take ``share`` of their memory ports; collectives in flight keep running on what is left."""
        self.set_npu_share(share, ranks)
        try:
            self.advance(cycles)
        finally:
            self.set_npu_share(0.0, ranks)

    # -- faults: the watchdog, dead links, abort -----------------------------------------------------------
    def set_watchdog(self, cycles):
        """Arm every engine's progress watchdog: an engine holding a collective that moves nothing on any port
        for ``cycles`` cycles raises its interrupt, and :meth:`Request.wait` then raises
        :class:`RequestTimeout` naming the rank instead of waiting out its own timeout (0: off, the default).
        A rank that posts much later than its peers leaves them waiting without transfers too: set it above
        the longest such wait."""
        if isinstance(cycles, bool) or not isinstance(cycles, (int, np.integer)) or not 0 <= cycles < 1 << 32:
            raise UsageError(f"watchdog cycles {cycles!r}: expected a whole number 0..{(1 << 32) - 1} (0 = off)")
        for drv in self.drivers:
            drv.set_watchdog(int(cycles))
        self.watchdog_cycles = int(cycles)

    def set_step_timeout(self, cycles):
        """Arm every engine's step timeout: a step that waits ``cycles`` cycles for its grant (a message that
        does not come, credits a dead link does not return) is given up, and the engine completes its command
        ``TIMEOUT`` by itself, skipping the command's remaining steps; a link that takes no flit for as long
        is declared down (:meth:`links_down`) and its flits are dropped (0: off, the default). The requests
        fail with :class:`CollectiveError` (``TIMEOUT``) instead of waiting for the watchdog. Messages of the
        given-up command may still be on the links: :meth:`reset` (or :meth:`Communicator.abort`) before the
        next collective. Set it above the longest wait a healthy run sees (a rank posting late)."""
        if isinstance(cycles, bool) or not isinstance(cycles, (int, np.integer)) or not 0 <= cycles < 1 << 32:
            raise UsageError(f"step timeout cycles {cycles!r}: expected a whole number 0..{(1 << 32) - 1} "
                             f"(0 = off)")
        for drv in self.drivers:
            drv.set_step_timeout(int(cycles))
        self.step_timeout_cycles = int(cycles)

    def links_down(self):
        """``{rank: [port, ...]}`` of the link ports the step timeout declared down (empty when none is)."""
        return {r: ports for r, drv in enumerate(self.drivers) if (ports := drv.links_down())}

    def stall_link(self, rank, port, stalled=True):
        """Hold the link leaving ``rank``'s link port ``port`` stalled (a dead link: nothing moves on it), or
        release it with ``stalled=False``. Simulator backends only."""
        self._check_rank(rank)
        for li, row in enumerate(system_links(self.config.topology, self.config.latency, self.config.rate)):
            if row[:2] == (rank, port):
                try:
                    self.backend.set_link_stall(li, stalled)
                except Exception as e:
                    raise UsageError(str(e)) from None
                return
        raise UsageError(f"rank {rank} has no link on port {port} in {self.config.topology}")

    def set_link_faults(self, flip=0.0, stall=0.0, rank=None, port=None, drop=0.0, dup=0.0):
        """Random link faults from now on: every link (or only the one leaving ``rank``'s port ``port``) flips
        a random data bit of a flit it carries with probability ``flip`` per flit, holds its ready low
        with probability ``stall`` per cycle, and loses / duplicates a flit with probability ``drop`` /
        ``dup`` per flit (all in [0, 1), drawn by the link models; 0 turns them off). Without link
        retransmission (``engine.replay_flits`` 0) a corrupted packet fails its collective on every rank
        whose result depends on it (``LINK_CRC`` or ``PROTOCOL``, ``docs/engine.md`` section 14), and lost or
        duplicated flits are refused; with it, the links recover every fault and collectives complete OK
        (section 15). Simulator backends only."""
        from ..hdl.system.link import fault_threshold

        if (drop or dup) and not self.config.engine.replay_flits:
            raise UsageError("set_link_faults: lost or duplicated flits are recovered only by link retransmission "
                             "(engine.replay_flits > 0)")
        try:
            values = tuple(fault_threshold(float(p)) for p in (flip, stall, drop, dup))
        except (TypeError, ValueError) as e:
            raise UsageError(f"set_link_faults: {e}") from None
        if (rank is None) != (port is None):
            raise UsageError("set_link_faults: give both rank and port (one link), or neither (every link)")
        if rank is not None:
            self._check_rank(rank)
        found = False
        for li, row in enumerate(system_links(self.config.topology, self.config.latency, self.config.rate)):
            if rank is None or row[:2] == (rank, port):
                found = True
                try:
                    self.backend.set_link_faults(li, *values)
                except Exception as e:
                    raise UsageError(str(e)) from None
        if not found:
            raise UsageError(f"rank {rank} has no link on port {port} in {self.config.topology}")

    def reset(self, timeout_cycles=100_000):
        """Abort every engine and leave the system empty and usable: every request in flight fails (status
        ``ABORTED``, or ``TIMEOUT`` on a rank whose watchdog fired; completions already written are kept),
        while registrations, communicators and loaded programs stay. The engines are held in reset together
        (each first closes its memory port, ``CTRL.abort``) for twice the longest link latency, so that
        nothing still on a link reaches an engine that has left reset."""
        self.progress()
        hung = set(self._hung(range(self.size)))
        for drv in self.drivers:
            drv.abort_hold()
        for drv in self.drivers:
            drv.wait_quiet(timeout_cycles)
        rows = system_links(self.config.topology, self.config.latency, self.config.rate)
        self.advance(2 * max(row[4] for row in rows) + 16)
        for drv in self.drivers:
            drv.abort_release()
        blank = {name: 0 for name in completion_layout().members}
        for req in list(self._requests.values()):
            for r in req.descriptors:
                if r not in req.completions:
                    status = Status.TIMEOUT if r in hung else Status.ABORTED
                    req.completions[r] = {**blank, "cookie": req.cookie, "status": int(status),
                                          "status_name": status.name}
            req.done_cycle = self.now
            del self._requests[req.cookie]

    def _hung(self, ranks):
        """The ranks of ``ranks`` whose watchdog has fired (none while it is off)."""
        if not self.watchdog_cycles:
            return []
        return [r for r in ranks if self.drivers[r].hung()]

    def _check_rank(self, rank):
        if not (isinstance(rank, (int, np.integer)) and 0 <= rank < self.size):
            raise UsageError(f"rank {rank!r} is not an endpoint of {self.config.topology} (0..{self.size - 1})")

    # -- memory ----------------------------------------------------------------------------------------------
    def register(self, nbytes, *, communicators=None):
        """Allocate and register ``nbytes`` on every endpoint (the same address everywhere); returns a
        :class:`Buffer`. Claims one engine memory window per endpoint. ``communicators`` (a list of
        :class:`Communicator`) restricts the buffer to their collectives: the engines refuse (``OUT_OF_WINDOW``)
        a descriptor of another communicator that names it, and a communicator freed later loses access."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise UsageError(f"register: expected a positive byte count, got {nbytes!r}")
        if communicators is not None:
            communicators = tuple(communicators)
            for c in communicators:
                if not isinstance(c, Communicator) or c.system is not self or c.freed:
                    raise UsageError(f"register: {c!r} is not a live communicator of this system")
        if not self._windows:
            raise RegistrationError(f"register: all {self.config.engine.n_windows} memory windows of the engines "
                                    f"are in use; register fewer, larger buffers and use Buffer.view")
        size = -(-int(nbytes) // ALIGN) * ALIGN
        for k, (base, free) in enumerate(self._heap):
            if free >= size:
                break
        else:
            raise RegistrationError(f"register: no {size} contiguous bytes left in the endpoints' "
                                    f"{self.config.memory_bytes}-byte memories (memory.bytes)")
        self._heap[k] = (base + size, free - size)
        if free == size:
            del self._heap[k]
        window = self._windows.pop(0)
        buf = Buffer(self, base, int(nbytes), window, communicators=communicators)
        self._open_window(buf)
        self._buffers.append(buf)
        return buf

    def _open_window(self, buf):
        """Write ``buf``'s window on every engine, open to the communicators it is registered for."""
        size = -(-buf.nbytes // ALIGN) * ALIGN
        for r, drv in enumerate(self.drivers):
            comms = None if buf.communicators is None else [c.id for c in buf.communicators if r in c.ranks]
            drv.add_window(buf.window, buf.addr, size, comms)

    def deregister(self, buf):
        """Release ``buf`` (its window and memory). Refused while an outstanding request uses it."""
        if not isinstance(buf, Buffer) or buf.parent is not None or buf.system is not self:
            raise RegistrationError(f"deregister: {buf!r} is not a buffer this system registered")
        if not buf._registered:
            raise RegistrationError(f"deregister: {buf!r} is already deregistered")
        size = -(-buf.nbytes // ALIGN) * ALIGN
        for req in self._requests.values():
            for d in req.descriptors.values():
                if buf.addr <= d["src"] < buf.addr + size or buf.addr <= d["dst"] < buf.addr + size:
                    raise RegistrationError(f"deregister: {req!r} still uses {buf!r}; wait for it first")
        for drv in self.drivers:
            drv.add_window(buf.window, 0, 0)
        buf._registered = False
        self._windows.append(buf.window)
        self._buffers.remove(buf)
        self._heap.append((buf.addr, size))
        self._heap.sort()
        merged = []
        for base, n in self._heap:
            if merged and merged[-1][0] + merged[-1][1] == base:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((base, n))
        self._heap = merged

    # -- communicators ---------------------------------------------------------------------------------------
    def split(self, ranks):
        """A communicator of the system ranks ``ranks`` (see :func:`sub_topology` for the rank sets that
        work). Communicator rank order is the system rank order."""
        ranks = sorted(set(int(r) for r in ranks))
        for r in ranks:
            self._check_rank(r)
        return self._new_comm(ranks, sub_topology(self.config.topology, ranks))

    def _new_comm(self, ranks, topology):
        if not self._comm_ids:
            raise CommunicatorError(f"all {self.config.engine.n_comms} engine communicators are in use; free one "
                                    f"first (Communicator.free)")
        return Communicator(self, self._comm_ids.pop(0), ranks, topology)

    def _free_comm(self, comm):
        if comm.freed:
            raise CommunicatorError(f"{comm!r} is already freed")
        if comm is self.world:
            raise CommunicatorError("the world communicator cannot be freed")
        self._drain(f"freeing {comm!r}", comm)
        self._release_comm(comm)

    def _release_comm(self, comm):
        for sr in comm.ranks:
            self.drivers[sr].write_fields("COMM_CFG", comm.id, enable=0)
        for buf in self._buffers:       # its engine id goes to the next communicator: close the windows to it
            if buf.communicators is not None and comm in buf.communicators:
                buf._communicators = tuple(c for c in buf.communicators if c is not comm)
                self._open_window(buf)
        for key in [k for k in self._programs if k[0] == comm.id]:
            del self._programs[key]
        comm.freed = True
        self._comm_ids.append(comm.id)

    # -- programs --------------------------------------------------------------------------------------------
    def _ensure_program(self, comm, coll, root):
        """Load the program of ``coll`` (``root``) on ``comm``'s engines unless it is there. When the engines'
        program table or instruction memory is full, the programs ``comm`` used least recently make room
        (they are loaded again when next used)."""
        key = (coll, root)
        comm.last_use[key] = next(self._uses)
        if key in comm.loaded:
            return
        progs = generate(coll, comm.algorithm(coll), comm.topology, root=root)
        head = progs[0]
        try:
            chunk = engine_chunk_bytes(self.config.engine, head.n_blocks, segments=head.segments,
                                       n_slots=head.n_slots)
        except ValueError as e:
            raise UsageError(f"{coll} on {comm!r}: {e}") from None
        # the engines must be idle: programs, partitions and CHUNK_BEATS change under no command
        self._drain(f"loading the {coll} program")
        keep = sorted(comm.loaded, key=lambda k: comm.last_use.get(k, 0))     # least recently used first
        while True:
            wanted = set(keep) | {key}
            try:
                self._load_programs(comm, coll, sorted(wanted))
                break
            except UsageError:
                if not keep:        # it does not fit alone; the engines hold nothing of comm's now
                    for k in comm.loaded:
                        self._programs.pop((comm.id, *k), None)
                    comm.loaded = set()
                    raise
                keep.pop(0)
        for k in comm.loaded - wanted:
            self._programs.pop((comm.id, *k), None)
        comm.loaded = wanted
        self._programs[(comm.id, coll, root)] = head
        self._chunk_limit = min(chunk, self._chunk_limit or chunk)
        if self.config.chunk_bytes == "max" or self.chunk_bytes is None or self.chunk_bytes > self._chunk_limit:
            self._set_chunk(self._chunk_limit)

    def _set_chunk(self, chunk):
        """Write ``chunk`` (bytes) to every engine's CHUNK_BEATS unless it is there (the engines must be idle)."""
        if chunk != self.chunk_bytes:
            self.chunk_bytes = chunk
            for drv in self.drivers:
                drv.write("CHUNK_BEATS", chunk // self.config.engine.beat_bytes)

    def _choose_chunk(self, comm, coll, root, count, eb):
        """``driver.chunk_bytes: auto``: the chunk the model ranks fastest for this collective (at most what
        the loaded programs allow; :mod:`syncfabric.host.chunksize`), remembered per collective and size.
        Changing CHUNK_BEATS waits for the outstanding requests first."""
        from .chunksize import choose_chunk_bytes

        n_in, n_out = buffer_counts(coll, count, comm.size, 0, root)
        nbytes = max(n_in, n_out) * eb
        head = self._programs[(comm.id, coll, root)]
        key = (comm.topology.spec, coll, head.algorithm, root, nbytes, self._chunk_limit)
        if key not in self._chunk_choices:
            self._chunk_choices[key] = choose_chunk_bytes(
                self.config.engine, head, coll, comm.topology, nbytes, algorithm=head.algorithm,
                latency=self.config.latency, rate=None if self.config.rate is None else float(self.config.rate),
                buffers=self.config.buffers, largest=self._chunk_limit).chunk_bytes
        chunk = self._chunk_choices[key]
        if chunk != self.chunk_bytes:
            self._drain(f"changing the chunk size for {coll} to {chunk} B")
            self._set_chunk(chunk)

    def _load_programs(self, comm, coll, wanted):
        """Replace ``comm``'s programs on every rank's engine with those of ``wanted`` ((collective, root)
        pairs); :class:`UsageError` if they do not fit."""
        for cr, sr in enumerate(comm.ranks):
            progs = [generate(c, comm.algorithm(c), comm.topology, root=rt)[cr] for c, rt in wanted]
            try:
                run_sync(load_programs(self.drivers[sr].driver, comm.id, cr, comm.topology, progs))
            except (ValueError, MemoryError) as e:
                raise UsageError(f"{coll} on {comm!r}: its programs do not fit the engine ({e})") from None

    def _check_landing(self, comm, coll, root, count, eb):
        cfg = self.config.engine
        head = self._programs[(comm.id, coll, root)]
        d = decomposition_for(coll, comm.size, max(1, count), eb, head.n_blocks, self.chunk_bytes,
                              cfg.packet_bytes, cfg.beat_bytes)
        beats = max(1, -(-d.slot_bytes // cfg.beat_bytes))
        progs = generate(coll, head.algorithm, comm.topology, root=root)        # the programs loaded
        stuck = landing_deadlock(progs, comm.topology, cfg.landing_headers, cfg.landing_beats, beats)
        if stuck:
            enough = next((h for h in (1 << k for k in range(2, 8)) if h > cfg.landing_headers
                           and not landing_deadlock(progs, comm.topology, h, cfg.landing_beats, beats)), None)
            fix = (f"set engine.landing_headers: {enough} in the system configuration (the engine's landing "
                   f"buffers hold that many message headers per port and FSM)" if enough is not None else
                   "no landing_headers up to 128 is enough: use a larger engine.landing_beats or a smaller count")
            raise UsageError(f"{coll} on {comm!r} needs more landing buffer space per port and FSM than the "
                             f"engine has (landing_headers {cfg.landing_headers}; it would never finish): {fix}")

    def _drain(self, why, comm=None):
        """Wait for the outstanding requests (of ``comm``, or all); a request that does not finish within
        :attr:`drain_timeout_cycles` raises :class:`RequestTimeout` instead of hanging."""
        for req in list(self._requests.values()):
            if comm is None or req.comm is comm:
                try:
                    req.wait(timeout_cycles=self.drain_timeout_cycles)
                except RequestTimeout as e:
                    raise RequestTimeout(f"{why} waits for {req!r}, which did not finish: {e}") from None

    # -- completions -----------------------------------------------------------------------------------------
    def progress(self):
        """Collect the completions every endpoint has written and hand them to their requests."""
        ranks = sorted({r for req in self._requests.values() for r in req.descriptors if r not in req.completions})
        for r in ranks:
            self._collect(r)

    def _collect(self, rank):
        for cpl in self.drivers[rank].poll():
            req = self._requests.get(cpl["cookie"])
            if req is None:
                continue
            req.completions[rank] = cpl
            if req.done:
                req.done_cycle = self.now
                del self._requests[req.cookie]

    def _wait_irq(self, rank, timeout_cycles):
        drv = self.drivers[rank]
        drv.write("IRQ", IRQ_CPL | IRQ_ERROR)   # clear, then look again: nothing that lands in between is lost
        self._collect(rank)
        if any(rank in req.descriptors and rank not in req.completions for req in self._requests.values()):
            self.transports[rank].wait_irq(timeout_cycles)

    @property
    def outstanding(self):
        """Requests posted and not yet completed."""
        return list(self._requests.values())
