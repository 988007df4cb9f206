"""``torch.distributed`` on the engine RTL: the process-group backend ``"syncfabric"``.

::

    import torch, torch.distributed as dist
    import syncfabric.host.torchdist            # registers the backend

    dist.init_process_group("syncfabric", rank=rank, world_size=4)   # torchrun / mp.spawn as with gloo
    dist.all_reduce(t)                           # runs on the simulated engines, bit for bit the RTL's result

One process per rank, as torch launches them. The ranks share one simulated system: rank 0 starts a
collective server (:mod:`syncfabric.host.collserver`, a process of its own that owns the
:class:`~syncfabric.host.system.System`) and publishes its address in torch's store; every rank connects to it.
Each collective call sends the rank's input to the server; when every member of the group has called, the
server runs the collective on the engines and answers each rank with its output, which the returned work
object copies into the rank's tensors.

The system: ``pg_options`` of ``init_process_group`` (a YAML path, YAML text or a dict, as for
:class:`~syncfabric.host.system.System`), else the ``SYNCFABRIC_TORCH_CONFIG`` environment variable (the same),
else :func:`default_config` (a ring of ``small`` engines, one per rank, on Verilator). ``SYNCFABRIC_TORCH_LOG=1``
makes the server log each rank's arrival and departure on standard error. Its topology must have
as many endpoints as the job has ranks; sub-groups (``dist.new_group``) are communicators of the engines
(:meth:`~syncfabric.host.system.System.split`: the ranks must be a sub-topology the links connect).

Operations: ``all_reduce`` (SUM, MAX, MIN; AVG as a sum scaled on the rank), ``reduce_scatter_tensor``,
``all_gather_into_tensor`` and ``all_gather`` (list form), ``all_to_all_single`` (equal splits),
``broadcast``, ``reduce``, ``barrier``; every one also with ``async_op=True``. CPU tensors of float32,
float16, bfloat16 and int32. Anything else - another element type, PRODUCT or a bitwise reduction, uneven
all-to-all splits, point-to-point sends, scatter and gather - raises a ``RuntimeError`` naming what is not
supported and what is. Zero-element tensors are no-ops (torch's rule). MAX and MIN follow IEEE 754-2019
``maximum``/``minimum`` (a NaN wins; -0 < +0), where gloo takes ``std::max``'s order-dependent answer
(``docs/arithmetic.md``).

:func:`stats` gives this process's count of collectives and the engines' cycles they took;
:func:`partial_all_reduce` is RNA's partial all-reduce (a rank may contribute nothing and the result says how
many did).
"""

import atexit
import concurrent.futures
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["BACKEND", "SyncfabricProcessGroup", "default_config", "stats", "reset_stats", "partial_all_reduce",
           "DTYPES"]

#: The backend's name for ``init_process_group``.
BACKEND = "syncfabric"
#: torch element types the engines reduce and move, and their syncfabric names.
DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "int32"}
_REDUCE = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.MAX: "max", dist.ReduceOp.MIN: "min", dist.ReduceOp.AVG: "sum"}
#: The server's operation names as torch calls them (the profiler annotations' names).
_TORCH_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all"}
_STORE_KEY = "syncfabric/server"
_SEEN_KEY = "syncfabric/failure-seen"
_ENV = "SYNCFABRIC_TORCH_CONFIG"


def default_config(world_size):
    """The system a job gets when it names none: a unidirectional ring of ``small`` engines, one per rank
    (two ranks: ``ring:2``), on Verilator, 4 MiB of memory per NPU."""
    return {"topology": f"ring:{world_size}", "backend": "verilator", "engine": {"profile": "small"},
            "memory": {"bytes": "4MiB"}}


def _config(options, world_size):
    if options is None:
        options = os.environ.get(_ENV) or None
    if options is None:
        return default_config(world_size)
    from .config import load_config
    conf = load_config(options)         # checked here, so a bad one fails on rank 0 with the key named
    if conf.n_endpoints != world_size:
        raise ValueError(f"syncfabric: the system's topology {conf.topology} has {conf.n_endpoints} endpoints, "
                         f"the job {world_size} ranks")
    return conf.source


# -- statistics ------------------------------------------------------------------------------------------------
_STATS = {"collectives": 0, "cycles": 0, "time_us": 0.0, "by_op": {}}
_STATS_LOCK = threading.Lock()


def stats():
    """This process's collectives on the engines so far: ``collectives``, the engines' ``cycles`` and
    ``time_us`` (at the system's clock) summed over them, and ``by_op`` (operation -> [count, cycles])."""
    with _STATS_LOCK:
        return {**_STATS, "by_op": {k: list(v) for k, v in _STATS["by_op"].items()}}


def reset_stats():
    with _STATS_LOCK:
        _STATS.update(collectives=0, cycles=0, time_us=0.0, by_op={})


def _count(op, info):
    with _STATS_LOCK:
        c = info.get("cycles") or 0
        _STATS["collectives"] += 1
        _STATS["cycles"] += c
        _STATS["time_us"] += info.get("time_us") or 0.0
        entry = _STATS["by_op"].setdefault(op, [0, 0])
        entry[0] += 1
        entry[1] += c


# -- the connection to the server --------------------------------------------------------------------------------
class _Client:
    """This process's connection to the collective server; a thread takes the answers and completes the calls
    waiting for them."""

    def __init__(self, address, key, rank, server=None):
        self.conn = Client(address, authkey=key)
        self.rank, self.server = rank, server
        self.lock = threading.Lock()
        self.waiting = {}                   # (gid, seq) or ("group", gid) -> concurrent future
        self.closed = False
        self.conn.send(("hello", rank))
        self.reader = threading.Thread(target=self._read, name="syncfabric-client", daemon=True)
        self.reader.start()

    def call(self, key, msg):
        fut = concurrent.futures.Future()
        with self.lock:
            if self.closed:
                raise RuntimeError("syncfabric: the connection to the collective server is closed")
            self.waiting[key] = fut
            self.conn.send(msg)
        return fut

    def _read(self):
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "group":
                key, value, err = ("group", msg[1]), None, msg[2]
            else:
                key = (msg[1], msg[2])
                value, err = (msg[3:], None) if msg[0] == "done" else (None, msg[3])
            with self.lock:
                fut = self.waiting.pop(key, None)
            if fut is None:
                continue
            if err:
                fut.set_exception(RuntimeError(f"syncfabric: {err}"))
            else:
                fut.set_result(value)
        with self.lock:
            self.closed = True
            left, self.waiting = self.waiting, {}
        for fut in left.values():
            fut.set_exception(RuntimeError("syncfabric: the collective server went away"))

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.conn.send(("bye",))
            except OSError:
                pass
        self.reader.join(timeout=10)
        self.conn.close()
        if self.server is not None:
            try:
                self.server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.server.kill()


_CLIENT = None


def _start_server(config, world_size):
    key = secrets.token_bytes(16)
    env = dict(os.environ, SYNCFABRIC_SERVER_KEY=key.hex())
    cmd = [sys.executable, "-m", "syncfabric.host.collserver", "--world", str(world_size), "--config",
           json.dumps(config)]
    if os.environ.get("SYNCFABRIC_TORCH_LOG"):
        cmd.append("--log")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    atexit.register(lambda: proc.poll() is None and proc.kill())
    first = proc.stdout.readline().split()
    if first[:1] != ["listening"]:
        proc.kill()
        raise RuntimeError("syncfabric: the collective server did not start (see its output above)")
    host, port = first[1], int(first[2])
    status = proc.stdout.readline().strip()
    if status != "ready":
        proc.wait()
        return None, key, proc, status or "the collective server stopped while building the system"
    return (host, port), key, proc, None


def _fail_all(store, world_size, message):
    """Rank 0 could not start the server: tell the other ranks through the store, and wait (up to 30 s) until
    they have read it - rank 0's store goes away with its process."""
    store.set(_STORE_KEY, json.dumps({"error": message}))
    deadline = time.monotonic() + 30
    while store.add(_SEEN_KEY, 0) < world_size - 1 and time.monotonic() < deadline:
        time.sleep(0.05)


def _connect(store, rank, world_size, options):
    global _CLIENT
    if rank == 0:
        try:
            address, key, proc, err = _start_server(_config(options, world_size), world_size)
        except Exception as e:
            _fail_all(store, world_size, f"{type(e).__name__}: {e}")
            raise
        if err:
            _fail_all(store, world_size, err)
            raise RuntimeError(f"syncfabric: {err}")
        store.set(_STORE_KEY, json.dumps({"host": address[0], "port": address[1], "key": key.hex()}))
    else:
        proc = None
    info = json.loads(store.get(_STORE_KEY))
    if "error" in info:
        store.add(_SEEN_KEY, 1)
        raise RuntimeError(f"syncfabric: rank 0 could not start the collective server: {info['error']}")
    _CLIENT = _Client((info["host"], info["port"]), bytes.fromhex(info["key"]), rank, proc)
    atexit.register(_CLIENT.close)
    return _CLIENT


# -- work objects ----------------------------------------------------------------------------------------------
class _Work(dist.Work):
    """A collective in flight: completes when the server answers; ``finish`` copies the answer into the
    caller's tensors first. ``get_future()`` gives ``outputs`` (DDP's communication hooks read it)."""

    def __init__(self, fut, outputs, finish, op, timeout_s=None):
        super().__init__()
        self._fut, self._op, self._timeout_s = fut, op, timeout_s
        self._tfut = torch.futures.Future()
        self._outputs = outputs
        #: What the server said of the collective once done: the engines' ``cycles``, ``time_us`` and
        #: ``contributors`` per global rank.
        self.info = {}
        fut.add_done_callback(lambda f: self._complete(f, finish, op))

    def _complete(self, fut, finish, op):
        try:
            value = fut.result()
            if value is not None:
                result, info = value
                finish(result)
                self.info = info
                _count(op, info)
        except BaseException as e:      # the future carries it to whoever waits
            self._tfut.set_exception(e)
            return
        self._tfut.set_result(self._outputs)

    def wait(self, timeout=None):
        """Block until the collective is done; raises what it raised, or ``RuntimeError`` after ``timeout`` (a
        ``timedelta``; none or zero: the process group's timeout)."""
        limit = timeout.total_seconds() if timeout is not None else 0
        limit = limit if limit > 0 else self._timeout_s
        done, _ = concurrent.futures.wait([self._fut], timeout=limit)
        if not done:
            raise RuntimeError(f"syncfabric: {self._op} did not complete within {limit:g} s (a rank of the group "
                               f"has not called it, or the simulation is that slow; the process group's timeout)")
        self._tfut.wait()           # raises what the collective raised
        return True

    def is_completed(self):
        return self._tfut.done()

    def is_success(self):
        return self._tfut.done() and self._fut.exception() is None

    def exception(self):
        return self._fut.exception() if self._fut.done() else None

    def get_future(self):
        return self._tfut

    def result(self):
        return self._outputs


def _done_work(outputs):
    fut = concurrent.futures.Future()
    fut.set_result(None)
    return _Work(fut, outputs, lambda _: None, None)


def _unsupported(what):
    raise RuntimeError(f"syncfabric: {what} is not supported (the backend runs all_reduce, reduce_scatter_tensor, "
                       f"all_gather_into_tensor, all_gather, all_to_all_single with equal splits, broadcast, "
                       f"reduce and barrier on CPU tensors; reductions of float32, float16, bfloat16 and int32, "
                       f"data movement of any type in whole 2-byte words)")


def _as_numpy(t):
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def _into(t, arr):
    """Copy the engine's answer ``arr`` (numpy, bf16 as uint16 bits) into tensor ``t``."""
    if t.dtype == torch.bfloat16:
        src = torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    else:
        src = torch.from_numpy(np.ascontiguousarray(arr))
    with torch.no_grad():
        t.view(-1).copy_(src.reshape(-1))


#: Words the engines move a tensor of another element type in (its bytes unchanged): 4-byte int32, else
#: 2-byte fp16 bit patterns (a move never looks at the values).
_WORDS = ((4, "int32", np.int32), (2, "fp16", np.float16))


def _encoding(t, unit):
    """How a data-movement collective carries tensor ``t``: ``(dtype name, words per element or None, numpy
    type)``. Its own type where the engines have it; else its bytes as words that divide ``unit`` elements (a
    slice of an all-to-all, a whole tensor otherwise)."""
    if t.dtype in DTYPES:
        return DTYPES[t.dtype], None, None
    nbytes = unit * t.element_size()
    for size, name, np_type in _WORDS:
        if nbytes % size == 0:
            return name, size, np_type
    _unsupported(f"moving {unit} x {t.dtype} ({nbytes} bytes: not whole 2-byte words)")


def _encode(t, enc):
    name, size, np_type = enc
    if size is None:
        return _as_numpy(t)
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().view(np_type).copy()


def _decode(t, arr, enc):
    if enc[1] is None:
        _into(t, arr)
        return
    raw = torch.from_numpy(np.ascontiguousarray(arr).view(np.uint8)).view(t.dtype)
    with torch.no_grad():
        t.view(-1).copy_(raw)


def _words(t, enc, elements):
    """Engine elements carrying ``elements`` of ``t``."""
    return elements if enc[1] is None else elements * t.element_size() // enc[1]


class SyncfabricProcessGroup(dist.ProcessGroup):
    """A torch process group whose collectives run on the simulated engines (see the module docstring)."""

    def __init__(self, client, gid, rank, size, global_ranks, owns_client=False, timeout=None):
        super().__init__(rank, size)
        self._client, self._gid, self._global = client, gid, list(global_ranks)
        #: seconds a work object's ``wait()`` waits (the ``timeout`` of ``init_process_group``/``new_group``)
        self._timeout_s = timeout.total_seconds() if timeout is not None else None
        self._owns_client = owns_client     # the world group: its shutdown ends the connection
        self._seq = 0
        self._seq_lock = threading.Lock()

    def getBackendName(self):
        return BACKEND

    def __repr__(self):
        return f"SyncfabricProcessGroup(rank {self.rank()} of {self.size()}, global ranks {self._global})"

    # -- plumbing ------------------------------------------------------------------------------------------
    def _check(self, tensors, op, reduces=True):
        """Refuse what the engines cannot do; a collective that only moves data takes any element type."""
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                _unsupported(f"{op} of a {type(t).__name__}")
            if t.device.type != "cpu":
                _unsupported(f"{op} of a tensor on {t.device}")
            if reduces and t.dtype not in DTYPES:
                _unsupported(f"{op} of {t.dtype}")
            if t.is_sparse:
                _unsupported(f"{op} of a sparse tensor")
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) > 1:
            _unsupported(f"{op} mixing element types {sorted(map(str, dtypes))}")

    def _one(self, tensors, op, reduces=True):
        """The single tensor of a one-tensor call, checked."""
        self._check(tensors, op, reduces)
        if len(tensors) != 1:
            _unsupported(f"{op} of {len(tensors)} tensors at once")
        return tensors[0]

    def _reduce_name(self, opts, op):
        rop = opts.reduceOp
        for k, name in _REDUCE.items():
            if rop == k:
                return name, rop == dist.ReduceOp.AVG
        kind = getattr(rop, "op", rop)
        _unsupported(f"{op} with {getattr(kind, 'name', kind)} (SUM, MAX, MIN and AVG are)")

    def _call(self, op, meta, data, outputs, finish):
        with self._seq_lock:
            seq = self._seq
            self._seq += 1
        # in a torch.profiler trace, as the other backends' annotations (sim/perf/trace.py reads it back)
        label = f"{BACKEND}:{_TORCH_NAMES.get(op, op)}"
        if "dtype" in meta:
            label += f"#{meta['dtype']}x{meta['count']}"
        with torch.profiler.record_function(label):
            fut = self._client.call((self._gid, seq), ("op", self._gid, seq, op, meta, data))
        return _Work(fut, outputs, finish, op, self._timeout_s)

    # -- collectives -----------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        t = self._one(tensors, "all_reduce")
        red, avg = self._reduce_name(opts, "all_reduce")
        if avg and not t.is_floating_point():
            _unsupported(f"all_reduce AVG of {t.dtype}")
        if t.numel() == 0:
            return _done_work(tensors)
        n = self.size()

        def finish(res):
            _into(t, res)
            if avg:
                with torch.no_grad():
                    t.div_(n)
        return self._call("allreduce", {"dtype": DTYPES[t.dtype], "count": t.numel(), "reduce": red},
                          _as_numpy(t), tensors, finish)

    def allreduce_coalesced(self, tensors, opts=None):
        _unsupported("all_reduce_coalesced")

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        self._check([output, input], "reduce_scatter_tensor")
        red, avg = self._reduce_name(opts, "reduce_scatter_tensor")
        n = self.size()
        if input.numel() != n * output.numel():
            raise ValueError(f"syncfabric: reduce_scatter_tensor: the input has {input.numel()} elements, "
                             f"{n} x the output's {output.numel()} expected")
        if avg and not output.is_floating_point():
            _unsupported(f"reduce_scatter_tensor AVG of {output.dtype}")
        if output.numel() == 0:
            return _done_work([output])

        def finish(res):
            _into(output, res)
            if avg:
                with torch.no_grad():
                    output.div_(n)
        return self._call("reduce_scatter", {"dtype": DTYPES[output.dtype], "count": output.numel(),
                                             "reduce": red}, _as_numpy(input), [output], finish)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter(self, outputs, input_lists, opts=None):
        if len(outputs) != 1 or len(input_lists) != 1:
            _unsupported("reduce_scatter of several tensors at once")
        flat = torch.cat([x.reshape(-1) for x in input_lists[0]])
        return self.reduce_scatter_single(outputs[0], flat, opts)

    def all_gather_single(self, output, input, opts=None):
        self._check([output, input], "all_gather_into_tensor", reduces=False)
        n = self.size()
        if output.numel() != n * input.numel():
            raise ValueError(f"syncfabric: all_gather_into_tensor: the output has {output.numel()} elements, "
                             f"{n} x the input's {input.numel()} expected")
        if input.numel() == 0:
            return _done_work([output])
        enc = _encoding(input, input.numel())
        return self._call("allgather", {"dtype": enc[0], "count": _words(input, enc, input.numel())},
                          _encode(input, enc), [output], lambda res: _decode(output, res, enc))

    _allgather_base = all_gather_single

    def allgather(self, output_lists, inputs, opts=None):
        if len(output_lists) != 1 or len(inputs) != 1:
            _unsupported("all_gather of several tensors at once")
        outs, inp = output_lists[0], inputs[0]
        self._check(list(outs) + [inp], "all_gather", reduces=False)
        if len(outs) != self.size() or any(o.numel() != inp.numel() for o in outs):
            raise ValueError(f"syncfabric: all_gather: expected {self.size()} output tensors of {inp.numel()} "
                             f"elements")
        if inp.numel() == 0:
            return _done_work(output_lists)
        enc = _encoding(inp, inp.numel())
        k = _words(inp, enc, inp.numel())

        def finish(res):
            for i, o in enumerate(outs):
                _decode(o, res[i * k:(i + 1) * k], enc)
        return self._call("allgather", {"dtype": enc[0], "count": k}, _encode(inp, enc), output_lists, finish)

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        self._check([output, input], "all_to_all_single", reduces=False)
        n = self.size()
        for splits in (output_splits, input_splits):
            if splits and any(s != splits[0] for s in splits):
                _unsupported(f"all_to_all_single with uneven splits {list(splits)}")
        if input.numel() != output.numel() or input.numel() % n:
            _unsupported(f"all_to_all_single of {input.numel()} elements into {output.numel()} on {n} ranks "
                         f"(equal slices only)")
        k = input.numel() // n
        for splits in (output_splits, input_splits):
            if splits and input.shape[0] and splits[0] * (input.numel() // input.shape[0]) != k:
                _unsupported(f"all_to_all_single with splits {list(splits)} of {input.numel()} elements")
        if k == 0:
            return _done_work([output])
        enc = _encoding(input, k)
        return self._call("alltoall", {"dtype": enc[0], "count": _words(input, enc, k)}, _encode(input, enc),
                          [output], lambda res: _decode(output, res, enc))

    alltoall_base = all_to_all_single

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        t = self._one(tensors, "broadcast", reduces=False)
        if t.numel() == 0:
            return _done_work(tensors)
        root = opts.rootRank
        enc = _encoding(t, t.numel())
        data = _encode(t, enc) if self.rank() == root else None
        return self._call("broadcast", {"dtype": enc[0], "count": _words(t, enc, t.numel()), "root": root}, data,
                          tensors, lambda res: _decode(t, res, enc))

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        t = self._one(tensors, "reduce")
        red, avg = self._reduce_name(opts, "reduce")
        if avg:
            _unsupported("reduce with AVG")
        if t.numel() == 0:
            return _done_work(tensors)
        root = opts.rootRank

        def finish(res):
            if res is not None:
                _into(t, res)
        return self._call("reduce", {"dtype": DTYPES[t.dtype], "count": t.numel(), "reduce": red, "root": root},
                          _as_numpy(t), tensors, finish)

    def barrier(self, opts=None):
        return self._call("barrier", {}, None, [], lambda res: None)

    def partial_allreduce(self, tensor, contribute):
        """RNA's partial all-reduce: sum ``tensor`` over the ranks that contribute (a rank that does not
        contributes nothing, whatever its tensor holds); once the work is done, ``work.info["contributors"]``
        maps each global rank to the number of ranks that contributed."""
        self._check([tensor], "partial all_reduce")
        if tensor.numel() == 0:
            return _done_work([tensor])
        return self._call("allreduce", {"dtype": DTYPES[tensor.dtype], "count": tensor.numel(), "reduce": "sum",
                                        "null": not contribute}, _as_numpy(tensor), [tensor],
                          lambda res: _into(tensor, res))

    # -- what the engine does not do ---------------------------------------------------------------------------
    def send(self, tensors, dst, tag=0):
        _unsupported("send (point-to-point)")

    def recv(self, tensors, src, tag=0):
        _unsupported("recv (point-to-point)")

    def recv_anysource(self, tensors, tag=0):
        _unsupported("recv (point-to-point)")

    def scatter(self, outputs, inputs, opts=None):
        _unsupported("scatter")

    def gather(self, outputs, inputs, opts=None):
        _unsupported("gather")

    def alltoall(self, outputs, inputs, opts=None):
        _unsupported("all_to_all with tensor lists (use all_to_all_single)")

    def shutdown(self):
        global _CLIENT
        if self._owns_client:
            self._client.close()
            if _CLIENT is self._client:
                _CLIENT = None


def partial_all_reduce(tensor, contribute=True, group=None):
    """Sum ``tensor`` in place over the ranks of ``group`` (default: the world) that ``contribute``; returns
    the number of ranks that did (the RNA scaling: divide by it for the mean of the contributions). A rank
    that does not contribute still receives the sum. Synchronous."""
    pg = group or dist.distributed_c10d._get_default_group()
    if not isinstance(pg, SyncfabricProcessGroup):
        raise RuntimeError(f"syncfabric: partial_all_reduce needs a {BACKEND!r} process group, not {pg!r}")
    work = pg.partial_allreduce(tensor, contribute)
    work.wait()
    if work.exception() is not None:
        raise work.exception()
    counts = [c for c in (work.info.get("contributors") or {}).values() if c is not None]
    return max(counts) if counts else pg.size()


def _create(opts, backend_options):
    global _CLIENT
    rank, size = opts.group_rank, opts.group_size
    ranks = list(opts.global_ranks_in_group) or list(range(size))     # the default group names none
    owns = _CLIENT is None or _CLIENT.closed
    if owns:
        if ranks != list(range(size)):
            raise RuntimeError("syncfabric: the first process group of a job must be the world")
        _connect(opts.store, rank, size, backend_options)
    if ranks != sorted(ranks):
        raise RuntimeError(f"syncfabric: group ranks {ranks} must be in increasing order")
    gid = str(opts.group_id)
    err = _CLIENT.call(("group", gid), ("group", gid, ranks)).result()
    if err:
        raise RuntimeError(f"syncfabric: group {ranks}: {err}")
    return SyncfabricProcessGroup(_CLIENT, gid, rank, size, ranks, owns_client=owns, timeout=opts.timeout)


def register():
    """Register the backend with torch (done when this module is imported)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])


register()
