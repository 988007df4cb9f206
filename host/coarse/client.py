"""The COARSE parameter client (one per GPU): push/pull with tensor routing and partitioning, and the
parameter service that joins clients, proxies and storage."""

import numpy as np

from ...sim.golden.coarse import dense_allreduce, optimal_m, partition, pipeline_time
from ...sim.golden.types import DType, ReduceOp, dtype_bytes
from .profiler import Profiler
from .proxy import Proxy, ProxyScheduler
from .storage import ParameterStorage

__all__ = ["ParameterClient", "CoarseService", "DenseService"]


class ParameterClient:
    """Push/pull interface of one worker GPU.

    ``push(tensor_id, data)``: a tensor smaller than the routing threshold S goes whole to LatProxy; a larger
    one is cut into shards of S' bytes (whole elements) that go to BwProxy one after another, so pushes and
    pulls of consecutive shards overlap on the full-duplex path. ``pull(tensor_id)`` reassembles the
    synchronized shards. The routing table is rebuilt by the profiler every ``reprofile_every`` iterations
    (``None``: only at start)."""

    def __init__(self, index, service, profiler, reprofile_every=None):
        self.index, self.service, self.profiler = index, service, profiler
        self.reprofile_every = reprofile_every
        self.iteration = 0
        self.table = profiler.table(index)
        self.history = {}           # tensor id -> [(key, proxy, offset, length)]
        self.tables = [self.table]

    def shards(self, nbytes):
        """``(proxy, offset, length)`` of each shard of a tensor of ``nbytes``."""
        proxy = self.table.proxy_for(nbytes)
        if proxy == self.table.lat_proxy and nbytes < self.table.threshold:
            return [(proxy, 0, nbytes)]
        align = dtype_bytes(self.service.dtype)
        size = max(align, self.table.shard_bytes // align * align)
        return [(proxy, o, n) for o, n in partition(nbytes, size, align)]

    def push(self, tensor_id, data):
        """Push one tensor's local gradient (bytes or a numpy array of the service's element type)."""
        raw = np.asarray(data).view(np.uint8).reshape(-1)
        if raw.size == 0 or raw.size % dtype_bytes(self.service.dtype):
            raise ValueError(f"tensor {tensor_id!r}: {raw.size} bytes is not a whole number of "
                             f"{DType(self.service.dtype).name} elements")
        plan = []
        for k, (proxy, off, n) in enumerate(self.shards(raw.size)):
            key = (tensor_id, k)
            self.service.proxies[proxy].enqueue(self.index, key, raw[off:off + n].copy())
            plan.append((key, proxy, off, n))
        self.history[tensor_id] = plan
        return len(plan)

    def pull(self, tensor_id):
        """The synchronized tensor (bytes), reassembled from its shards."""
        if tensor_id not in self.history:
            raise KeyError(f"client {self.index} never pushed {tensor_id!r}")
        plan = self.history[tensor_id]
        out = np.empty(plan[-1][2] + plan[-1][3], dtype=np.uint8)
        for key, proxy, off, n in plan:
            out[off:off + n] = self.service.storages[proxy].get(key)
        return out

    def end_iteration(self):
        """Count an iteration; re-profile when due. Returns True if the routing table changed."""
        self.iteration += 1
        if self.reprofile_every and self.iteration % self.reprofile_every == 0:
            new = self.profiler.table(self.index)
            changed = new != self.table
            self.table = new
            self.tables.append(new)
            return changed
        return False

    def push_pull_time(self, sizes, paths, partitioned=True):
        """Model time of pushing and pulling tensors of ``sizes`` (bytes) in order over ``paths[client]``, with
        or without partitioning (proxy synchronization time not included)."""
        items = []
        for n in sizes:
            if partitioned:
                items += [(p, ln) for p, _, ln in self.shards(n)]
            else:
                items.append((self.table.proxy_for(n), n))
        # shards to different proxies use different paths; the client's link carries them in order
        return sum(pipeline_time([ln for p, ln in items if p == proxy], paths[self.index][proxy])
                   for proxy in {p for p, _ in items})


class CoarseService:
    """``n`` clients, ``n`` proxies (one per memory device) with storage, and the proxy scheduler.

    ``measure(client, proxy, nbytes) -> seconds`` feeds the profiler; ``discipline`` is the proxies' queueing
    (``"per_client"`` or ``"fcfs"``). One iteration: every client pushes its tensors, :meth:`synchronize`
    reduces every shard across the proxies and stores the result (copy-on-write) on each proxy that holds a
    push of it, then clients pull. :meth:`end_epoch` snapshots every storage; :meth:`restore` rolls back."""

    def __init__(self, n, dtype="fp32", op="sum", measure=None, discipline="per_client", reprofile_every=None,
                 capacity=1 << 30):
        if n < 1:
            raise ValueError("need at least one client")
        self.n, self.dtype, self.op = n, DType.parse(dtype) if isinstance(dtype, str) else DType(dtype), \
            ReduceOp.parse(op) if isinstance(op, str) else ReduceOp(op)
        if measure is None:
            from .profiler import model_measure, profile_paths
            measure = model_measure(profile_paths("p100", n))
        self.proxies = [Proxy(i, discipline) for i in range(n)]
        self.storages = [ParameterStorage(i, capacity) for i in range(n)]
        self.scheduler = ProxyScheduler(self.proxies, n, self.dtype, self.op)
        self.profiler = Profiler(measure, n)
        self.clients = [ParameterClient(i, self, self.profiler, reprofile_every) for i in range(n)]
        self.epoch = 0

    def synchronize(self):
        """Synchronize every pushed shard (raises :class:`~.proxy.SyncDeadlock` if the proxies deadlock)."""
        holders = {}
        for p in self.proxies:
            for key, _ in p.data:
                holders.setdefault(key, set()).add(p.index)
        done = self.scheduler.drain()
        for key, value in done.items():
            for proxy in holders[key]:
                self.storages[proxy].put(key, value)
        return done

    def end_epoch(self):
        """Snapshot every storage at the end of the current epoch; returns the epoch number."""
        for s in self.storages:
            s.snapshot(self.epoch)
        self.epoch += 1
        return self.epoch - 1

    def restore(self, epoch):
        """Restore every storage to the snapshot of ``epoch`` (after a worker failure) and drop queued pushes."""
        for s in self.storages:
            s.restore(epoch)
        for p in self.proxies:
            p.queues.clear()
            p.data.clear()
        self.epoch = epoch + 1

    def dual_plan(self, layer_bytes, bw_proxy, bw_gpu, t_fp, t_bp):
        """Split of the model for dual synchronization: ``(m, T_train)`` from :func:`optimal_m`; the last layers
        (``m`` bytes) go to the proxies, the first ones are all-reduced by the GPUs."""
        return optimal_m(sum(layer_bytes), self.n, bw_proxy, bw_gpu, t_fp, t_bp, layer_bytes)

    def gpu_allreduce(self, buffers):
        """The GPU side of dual synchronization (buffers reduced in rank order, as :func:`dense_allreduce`)."""
        return dense_allreduce(buffers, self.dtype, self.op)


class DenseService:
    """DENSE baseline: one memory device (``server``) runs the central parameter server; every client pushes
    there, the server reduces in worker order and every client pulls the result."""

    def __init__(self, n, dtype="fp32", op="sum", server=0):
        if not 0 <= server < n:
            raise ValueError(f"server {server} outside 0..{n - 1}")
        self.n, self.server = n, server
        self.dtype = DType.parse(dtype) if isinstance(dtype, str) else DType(dtype)
        self.op = ReduceOp.parse(op) if isinstance(op, str) else ReduceOp(op)
        self.storage = ParameterStorage(server)
        self.pending = {}

    def push(self, client, tensor_id, data):
        """Push of one client; the tensor is reduced and stored once all ``n`` pushed."""
        got = self.pending.setdefault(tensor_id, {})
        if client in got:
            raise ValueError(f"client {client} pushed {tensor_id!r} twice")
        got[client] = np.asarray(data).view(np.uint8).reshape(-1).copy()
        if len(got) == self.n:
            del self.pending[tensor_id]
            self.storage.put(tensor_id, dense_allreduce([got[c] for c in range(self.n)], self.dtype, self.op))

    def pull(self, tensor_id):
        """The reduced tensor."""
        return self.storage.get(tensor_id)
