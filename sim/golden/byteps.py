"""Golden model of BytePS (communication + summation services): the inter-machine time model, the CPU/GPU split
of summation work, the bucket placement of parts, and the summation service itself (pure numpy).

Notation: ``n`` GPU machines, ``k`` CPU machines, ``M`` model bytes, ``B`` NIC bandwidth per machine.
``k' = min(k, n)``; ``D = n^2 + k'n - 2k'``; each CPU summation service sums ``M_cpu = 2(n-1)M/D`` bytes, each
GPU one ``M_gpu = (n-k')M/D``, and the iteration takes ``2n(n-1)M/(DB)``.

Placement: a tensor is cut into parts of at most ``part_bytes``; part ``i`` (a global index shared by every
worker) falls in bucket ``i mod D``; buckets ``0 .. 2(n-1)k'-1`` belong to the CPU services (``2(n-1)`` each),
the other ``n(n-k')`` to the GPU services (``n-k'`` each), so a service's share of the parts is its share of the
bytes (``M_cpu`` or ``M_gpu``) and the same part from every worker meets at one service.
"""

import math

import numpy as np

from .arith import reduce_bytes
from .types import DType, ReduceOp

__all__ = ["effective_cpu", "bucket_count", "cpu_share", "gpu_share", "byteps_time", "allreduce_time",
           "ps_time", "speedup_over_allreduce", "server_of_bucket", "place_parts", "split_parts",
           "SummationService", "pcie_time", "optimal_x"]


def _check(n, k):
    if n < 1 or k < 0:
        raise ValueError(f"need n >= 1 GPU machines and k >= 0 CPU machines, not n={n}, k={k}")
    if n == 1 and k > 0:        # D = n^2 + k'n - 2k' = 0 buckets: the shares divided by zero
        raise ValueError(f"n=1 GPU machine has nothing to synchronize through k={k} CPU machines; need n >= 2 "
                         f"or k = 0")


def _check_model(M, B):
    # 0 or a negative bandwidth divided by zero or gave negative times; a negative model size negative bytes
    for value, what in ((M, "model size {!r}: expected a positive number of bytes"),
                        (B, "bandwidth {!r}: expected a positive number of bytes per second")):
        try:
            ok = math.isfinite(float(value)) and float(value) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(what.format(value))


def effective_cpu(n, k):
    """k' = min(k, n): CPU machines beyond n add nothing."""
    _check(n, k)
    return min(k, n)


def bucket_count(n, k):
    """D = n^2 + k'n - 2k'."""
    kk = effective_cpu(n, k)
    return n * n + kk * n - 2 * kk


def cpu_share(n, k, M):
    """Bytes summed by each CPU summation service (Eq. 1)."""
    return 2 * (n - 1) * M / bucket_count(n, k)


def gpu_share(n, k, M):
    """Bytes summed by each GPU-machine summation service (Eq. 2)."""
    return (n - effective_cpu(n, k)) * M / bucket_count(n, k)


def byteps_time(n, k, M, B):
    """Iteration communication time max(t_g, t_c) = 2n(n-1)M/(DB) (Eq. 6)."""
    _check_model(M, B)
    t_g = (M + (n - 2) * gpu_share(n, k, M)) / B
    t_c = n * cpu_share(n, k, M) / B if effective_cpu(n, k) else 0.0
    return max(t_g, t_c)


def allreduce_time(n, M, B):
    """Ring all-reduce: 2(n-1)M/(nB)."""
    _check(n, 0)
    _check_model(M, B)
    return 2 * (n - 1) * M / (n * B)


def ps_time(n, k, M, B):
    """Non-colocated parameter server with k CPU servers: max(M/B, nM/(kB))."""
    _check_model(M, B)
    if k < 1:
        raise ValueError("a non-colocated PS needs k >= 1 servers")
    return max(M / B, n * M / (k * B))


def speedup_over_allreduce(n, k):
    """D / n^2 (Eq. 7)."""
    return bucket_count(n, k) / (n * n)


def server_of_bucket(bucket, n, k):
    """``("cpu", j)`` or ``("gpu", j)``: the summation service owning ``bucket`` (0 <= bucket < D)."""
    D, kk = bucket_count(n, k), effective_cpu(n, k)
    if not 0 <= bucket < D:
        raise ValueError(f"bucket {bucket} outside 0..{D - 1}")
    cpu_buckets = 2 * (n - 1) * kk
    if bucket < cpu_buckets:
        return ("cpu", bucket // (2 * (n - 1)))
    return ("gpu", (bucket - cpu_buckets) // (n - kk))


def split_parts(tensor_bytes, part_bytes=4 << 20):
    """Parts of every tensor (a list of byte sizes): ``(tensor, offset, length)`` in global index order."""
    if part_bytes < 1:
        raise ValueError("part_bytes must be positive")
    parts = []
    for t, size in enumerate(tensor_bytes):
        parts += [(t, o, min(part_bytes, size - o)) for o in range(0, size, part_bytes)]
    return parts


def place_parts(n_parts, n, k):
    """Service of each global part index: ``server_of_bucket(i mod D)``."""
    D = bucket_count(n, k)
    return [server_of_bucket(i % D, n, k) for i in range(n_parts)]


class SummationService:
    """Receives ``n`` contributions per part, sums them in worker order, returns the sum only when all ``n``
    arrived (synchronous mode); in asynchronous mode (BytePS section 5: workers push delta parameters, the
    service keeps the latest parameters) holds ``w`` per part: a push applies ``w = w (+) dw`` at once (the
    first push of a part sets ``w = dw``, the initial parameters) and answers ``w``; :meth:`pull` returns the
    current ``w`` without waiting for any worker."""

    def __init__(self, n_workers, dtype, op="sum", asynchronous=False):
        if n_workers < 1:
            raise ValueError("a summation service needs at least one worker")
        self.n, self.asynchronous = n_workers, asynchronous
        self.dtype, self.op = DType.parse(dtype), ReduceOp.parse(op)
        self.pending = {}       # part -> {worker: bytes}
        self.weights = {}

    def push(self, part, worker, data):
        """Contribution of ``worker`` for ``part``; returns the summed part once every worker pushed, else None.
        A second push of the same part by one worker before the sum is returned raises ``ValueError``."""
        if not 0 <= worker < self.n:
            raise ValueError(f"worker {worker} outside 0..{self.n - 1}")
        data = np.asarray(data, dtype=np.uint8)
        if self.asynchronous:
            w = self.weights.get(part)
            self.weights[part] = data.copy() if w is None else reduce_bytes(w, data, self.dtype, self.op)
            return self.weights[part].copy()
        got = self.pending.setdefault(part, {})
        if worker in got:
            raise ValueError(f"worker {worker} pushed part {part} twice")
        if got and next(iter(got.values())).size != data.size:
            raise ValueError(f"part {part}: contributions of different sizes")
        got[worker] = data.copy()
        if len(got) < self.n:
            return None
        del self.pending[part]
        acc = got[0]
        for w in range(1, self.n):
            acc = reduce_bytes(acc, got[w], self.dtype, self.op)
        return acc

    def pull(self, part):
        """Asynchronous mode: the current parameters of ``part`` (a copy), or None if no worker pushed it."""
        if not self.asynchronous:
            raise ValueError("pull is the asynchronous mode's read; a synchronous push returns the sum")
        w = self.weights.get(part)
        return None if w is None else w.copy()


# ---- intra-machine (PCIe) model ---------------------------------------------------------------------------

def pcie_time(x, m, M, b_ns, b_sc):
    """J(x): time of CPU-assisted aggregation with a fraction ``x`` summed on the GPUs (m GPUs per switch)."""
    return max((x + (2 * m - 1) * (1 - x) / m) * M / b_ns, (m * x + 1 - x) * M / b_sc)


def optimal_x(m, rho):
    """x* = clamp((2m-1-rho m)/((m-1)(rho m+1)), 0, 1)."""
    if m < 2:
        return 0.0
    return min(max((2 * m - 1 - rho * m) / ((m - 1) * (rho * m + 1)), 0.0), 1.0)
