"""Golden models of COARSE: sync-core ring synchronization, the DENSE central server, the CCI path timing
model, the routing profiler's equations, tensor partitioning, pipelined push/pull and the dual-synchronization
optimizer (pure numpy; the RTL in :mod:`syncfabric.hdl.coarse` and the host in :mod:`syncfabric.host.coarse`
are checked against these).

Sync-core scheme (one group, ``p`` devices on a ring)
    A chunk is ``p`` *entries* of ``entry_bytes``. The core at ring position ``r`` loads its chunk into LocalBuf;
    in reduce-scatter step ``s`` (``0 <= s < p-1``) it sends entry ``(r - s) mod p`` (its LocalBuf entry for
    ``s = 0``, else the SendBuf entry it computed in step ``s-1``) to the next core's RecvBuf and reduces the
    received entry ``(r - 1 - s) mod p`` with its LocalBuf entry into SendBuf; after ``p-1`` steps it holds entry
    ``(r + 1) mod p`` fully reduced. All-gather step ``t`` sends entry ``(r + 1 - t) mod p`` and copies the
    received entry ``(r - t) mod p`` into SendBuf. So entry ``e`` is reduced along the ring starting at position
    ``e``: ``acc = x[e]; acc = acc (+) x[e+1]; ...; acc (+) x[e+p-1]`` (positions modulo ``p``), which fixes every
    floating-point bit. Group ``g`` takes chunks ``g, g+G, g+2G, ...`` of the buffer; even groups run the ring
    in increasing device order, odd groups in decreasing order (device ``d`` has position ``(-d) mod p``), so
    two groups use both directions of every link.
"""

import math

import numpy as np

from .arith import reduce_bytes
from .types import DType, dtype_bytes

__all__ = ["ring_positions", "chunk_bytes_for", "sync_chunk", "coarse_allreduce", "dense_allreduce",
           "proxy_reduce", "PathModel", "crossover_size", "full_bandwidth_size", "partition",
           "pipeline_time", "fifo_time", "dual_sync_time", "optimal_m", "coarse_ring_cycles",
           "dense_cycles", "ring_bound_cycles"]


def ring_positions(n_devices, group):
    """Ring position of every device for ``group``: even groups ``d``, odd groups ``(-d) mod n``."""
    if n_devices < 2:
        raise ValueError(f"a ring needs at least 2 devices, not {n_devices}")
    if group < 0:
        raise ValueError(f"group must be >= 0, not {group}")
    return [d if group % 2 == 0 else (-d) % n_devices for d in range(n_devices)]


def chunk_bytes_for(n_devices, entry_bytes):
    """Bytes of one sync-core chunk: one entry per device."""
    return n_devices * entry_bytes


def sync_chunk(chunks, dtype, op, positions=None):
    """Reduce one chunk held by every device in the sync-core order; returns the reduced chunk (bytes).

    ``chunks[d]`` is device ``d``'s chunk (``p`` entries of equal size); ``positions[d]`` its ring position
    (default ``d``)."""
    p = len(chunks)
    chunks = [np.asarray(c, dtype=np.uint8) for c in chunks]
    size = chunks[0].size
    if any(c.size != size for c in chunks):
        raise ValueError("every device's chunk must have the same size")
    if size % p or (size // p) % dtype_bytes(dtype):
        raise ValueError(f"chunk of {size} bytes is not {p} entries of whole {DType(dtype).name} elements")
    positions = list(range(p)) if positions is None else list(positions)
    if sorted(positions) != list(range(p)):
        raise ValueError(f"positions {positions} are not a permutation of 0..{p - 1}")
    at = {pos: d for d, pos in enumerate(positions)}     # ring position -> device
    entry = size // p
    out = np.empty(size, dtype=np.uint8)
    for e in range(p):
        sl = slice(e * entry, (e + 1) * entry)
        acc = chunks[at[e]][sl]
        for k in range(1, p):
            acc = reduce_bytes(acc, chunks[at[(e + k) % p]][sl], dtype, op)
        out[sl] = acc
    return out


def coarse_allreduce(buffers, dtype, op, entry_bytes, n_groups=1):
    """All-reduce of ``buffers`` (one byte array per device) by the sync cores of ``n_groups`` groups.

    The buffer length must be a whole number of chunks (``p * entry_bytes``); chunk ``k`` is synchronized by
    group ``k mod n_groups``. Returns the reduced buffer (identical on every device)."""
    p = len(buffers)
    bufs = [np.asarray(b, dtype=np.uint8) for b in buffers]
    n = bufs[0].size
    if any(b.size != n for b in bufs):
        raise ValueError("every device's buffer must have the same size")
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, not {n_groups}")
    chunk = chunk_bytes_for(p, entry_bytes)
    if n % chunk:
        raise ValueError(f"buffer of {n} bytes is not a whole number of {chunk}-byte chunks")
    out = np.empty(n, dtype=np.uint8)
    for k in range(n // chunk):
        sl = slice(k * chunk, (k + 1) * chunk)
        out[sl] = sync_chunk([b[sl] for b in bufs], dtype, op, ring_positions(p, k % n_groups))
    return out


def dense_allreduce(buffers, dtype, op):
    """DENSE: the central server adds the workers' buffers in worker order ``((x0 (+) x1) (+) x2) ...``."""
    bufs = [np.asarray(b, dtype=np.uint8) for b in buffers]
    acc = bufs[0].copy()
    for b in bufs[1:]:
        acc = reduce_bytes(acc, b, dtype, op)
    return acc


def proxy_reduce(contributions, dtype, op):
    """A shard synchronized by proxies: ``contributions`` maps proxy -> list of ``(client, bytes)``.

    Each proxy first reduces its own clients' contributions in client order, then the proxies' partial sums are
    reduced in proxy order (the order a ring of sync cores starting at the lowest proxy uses for one entry)."""
    partial = []
    for proxy in sorted(contributions):
        items = sorted(contributions[proxy], key=lambda cb: cb[0])
        if items:
            partial.append(dense_allreduce([b for _, b in items], dtype, op))
    if not partial:
        raise ValueError("no contributions")
    return dense_allreduce(partial, dtype, op)


# ---- CCI path timing --------------------------------------------------------------------------------------

class PathModel:
    """Time of one transfer over a CCI/serial-bus path: ``latency + bytes / bandwidth`` (seconds, bytes/s).

    ``full_duplex``: pushes and pulls on the path overlap (each direction has the full bandwidth)."""

    def __init__(self, latency_s, bandwidth_Bps, full_duplex=True):
        if latency_s < 0 or bandwidth_Bps <= 0:
            raise ValueError(f"bad path: latency {latency_s} s, bandwidth {bandwidth_Bps} B/s")
        self.latency_s = float(latency_s)
        self.bandwidth_Bps = float(bandwidth_Bps)
        self.full_duplex = full_duplex

    def time(self, nbytes):
        """Seconds to move ``nbytes`` in one transfer."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def __repr__(self):
        return f"PathModel({self.latency_s * 1e6:.2f} us, {self.bandwidth_Bps / 1e9:.2f} GB/s)"


def crossover_size(t_lat, t_bw, lo=1, hi=1 << 34):
    """Smallest size ``S`` with ``t_bw(S) <= t_lat(S)`` (bisection on whole bytes); ``None`` if ``t_bw`` is never
    faster up to ``hi``. ``t_lat``/``t_bw`` map a size to a time and must cross at most once."""
    if t_bw(lo) <= t_lat(lo):
        return lo
    if t_bw(hi) > t_lat(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if t_bw(mid) <= t_lat(mid):
            hi = mid
        else:
            lo = mid
    return hi


def full_bandwidth_size(sizes, times, fraction=0.95):
    """S': the smallest tested size whose bandwidth reaches ``fraction`` of the best tested bandwidth."""
    sizes, times = list(sizes), list(times)
    if not sizes or len(sizes) != len(times):
        raise ValueError("sizes and times must be non-empty and of equal length")
    bw = [s / t for s, t in zip(sizes, times)]
    best = max(bw)
    return min(s for s, b in zip(sizes, bw) if b >= fraction * best)


def partition(nbytes, shard_bytes, align=1):
    """``(offset, length)`` shards of a tensor of ``nbytes``: ``shard_bytes`` each (a multiple of ``align``), the
    last one shorter."""
    if nbytes < 1:
        raise ValueError(f"a tensor has at least one byte, not {nbytes}")
    if shard_bytes < align or shard_bytes % align:
        raise ValueError(f"shard size {shard_bytes} is not a positive multiple of {align}")
    return [(o, min(shard_bytes, nbytes - o)) for o in range(0, nbytes, shard_bytes)]


def pipeline_time(sizes, path, sync_time=lambda n: 0.0):
    """Finish time of pushing items of ``sizes`` in order, each synchronized (``sync_time``) and pulled, on a
    full-duplex path: pushes back to back on the upstream direction, pulls on the downstream one, a pull starts
    when its item is synchronized and the previous pull is done (Fig. 9)."""
    push_done = pull_done = 0.0
    for n in sizes:
        push_done = push_done + path.time(n)
        ready = push_done + sync_time(n)
        if not path.full_duplex:
            ready = max(ready, push_done)
        pull_done = max(pull_done, ready) + path.time(n)
        if not path.full_duplex:
            push_done = pull_done
    return pull_done


def fifo_time(sizes, path, sync_time=lambda n: 0.0):
    """Whole tensors in FIFO order (no partitioning): the same pipeline with one item per tensor."""
    return pipeline_time(sizes, path, sync_time)


# ---- dual synchronization ---------------------------------------------------------------------------------

def dual_sync_time(m, n, p, bw_proxy, bw_gpu, t_fp, t_bp):
    """T_train for ``m`` of ``n`` bytes synchronized by proxies (paper section III-F)."""
    if not 0 <= m <= n:
        raise ValueError(f"m={m} must be in 0..{n}")
    f = 2 * (p - 1) / p
    return max(t_fp + t_bp + f * (n - m) / bw_gpu, t_fp + f * m / bw_proxy)


def optimal_m(n, p, bw_proxy, bw_gpu, t_fp, t_bp, layer_bytes=None):
    """The ``m`` minimizing :func:`dual_sync_time`; returns ``(m, T_train)``.

    Without ``layer_bytes`` ``m`` is continuous (where the two terms meet, clamped to ``0..n``). With
    ``layer_bytes`` (the model's tensors in forward order) ``m`` is a sum of the *last* layers' sizes (the
    tensors back-propagation produces first), every split is evaluated and the best is returned."""
    if p < 2:
        raise ValueError("dual synchronization needs p >= 2")
    f = 2 * (p - 1) / p
    if layer_bytes is None:
        # t_bp + f (n - m)/bw_gpu = f m / bw_proxy
        m = (t_bp + f * n / bw_gpu) / (f / bw_proxy + f / bw_gpu)
        m = min(max(m, 0.0), float(n))
        return m, dual_sync_time(m, n, p, bw_proxy, bw_gpu, t_fp, t_bp)
    sizes = list(layer_bytes)
    if sum(sizes) != n:
        raise ValueError(f"layer sizes add up to {sum(sizes)}, not n={n}")
    best, m = None, 0
    for k in range(len(sizes) + 1):
        m = sum(sizes[len(sizes) - k:])
        t = dual_sync_time(m, n, p, bw_proxy, bw_gpu, t_fp, t_bp)
        if best is None or t < best[1]:
            best = (m, t)
    return best


# ---- cycle models (same link parameters for every scheme) ------------------------------------------------

def ring_bound_cycles(nbytes, p, beat_bytes, rate=1.0):
    """Link-bandwidth bound of a ring all-reduce of ``nbytes``: ``2(p-1)/p * nbytes / (beat_bytes * rate)``."""
    return 2 * (p - 1) / p * nbytes / (beat_bytes * rate)


def coarse_ring_cycles(nbytes, p, beat_bytes, entry_bytes, n_groups, rate=1.0, latency=1, alu_latency=5,
                       dram_cycles_per_chunk=0):
    """Cycles of the sync cores on ``nbytes`` per device: each group runs its chunks one after another; a chunk
    is ``2(p-1)`` steps, each sending one entry (``entry_bytes / beat_bytes / rate`` cycles) and then waiting
    the link latency and the ALU latency before the next step may send its result; groups share nothing but the
    links (odd groups use the other direction), so with ``G`` groups ``min(G, 2)`` chunks are on the wire at
    once."""
    chunk = p * entry_bytes
    chunks = math.ceil(nbytes / chunk)
    per_group = math.ceil(chunks / n_groups)
    beats = entry_bytes / beat_bytes
    share = max(1, math.ceil(n_groups / 2))       # groups of one direction share that direction of a link
    step = max(beats * share / rate, beats + latency + alu_latency + 2)
    return per_group * (2 * (p - 1) * step + dram_cycles_per_chunk)


def dense_cycles(nbytes, p, beat_bytes, rate=1.0, latency=1):
    """DENSE on one central device: every worker pushes ``nbytes`` and pulls ``nbytes`` through the server's one
    port (``rate`` flits per cycle per direction): ``p * nbytes`` each way, pushes and pulls overlapped."""
    return p * nbytes / (beat_bytes * rate) + 2 * latency
