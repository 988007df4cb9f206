"""Sven, the dissertation's sparse-model (DLRM) training system (chapter 6): its four-stage inter-batch pipeline
as a discrete-event simulation, and its hot-based embedding placement with the importance-weight eviction,
each on a real (small) input: stage times, and an access stream over embedding rows.

**The pipeline** (section 6.1.2). One iteration of DLRM training is, in dependency order: the sparse forward
(embedding lookup, ``SFP``), the forward all-to-all of the looked-up embeddings (``fa2a``), the dense forward
(``FP``), the backward (``BP``), the backward all-to-all of the embedding gradients (``ba2a``), the all-reduce of
the dense gradients (``allreduce``), the sparse backward (the embedding update, ``SBP``) and the dense optimizer
(``opt``); the default execution adds an input re-distribution all-to-all (``input_a2a``) first. Sequentially
(eq. 6.1) an iteration costs the sum of them. Sven's pipeline (eq. 6.2) moves the input re-distribution to the
CPU-only cluster and runs four globally synchronized stages, each pairing a compute task with a communication
task of a *different* iteration:

1. ``SFP(t+1) + FP(t-1)`` beside ``fa2a(t)``;
2. ``BP`` beside ``ba2a`` (of an older iteration, whose gradients are stashed);
3. ``SBP`` beside ``allreduce``;
4. ``opt``;

so a round costs ``max(t_SFP + t_FP, t_fa2a) + max(t_BP, t_ba2a) + max(t_allreduce, t_SBP) + t_opt``. The model
(:func:`pipeline`) does not hard-code which iteration runs where: each stage slot starts, on the compute and the
communication stream, the oldest iteration's task of the slot's kind whose inputs are complete and whose output
FIFO queue (capacity 2, as Sven's) has room; the slot ends when both streams finish (the collectives are global
synchronizations: no rank moves to the next stage before them). The iteration offsets of eq. 6.2 and the staleness
come out of that rule. **Staleness** of an iteration is how many earlier iterations' updates its reads miss: the
sparse forward reads the embedding tables (updated by ``SBP``), the dense forward the dense weights (``opt``);
the dissertation bounds it by three.

**Placement** (section 6.1.3). Embedding accesses follow a power law (:class:`ZipfStream`: rows drawn with
probability ``~ 1 / rank**s``, each access a click with probability ``click``). With ``m_G`` rows of device
memory and ``m_H`` of host memory, ``alpha = m_G / (m_G + m_H)``. Policies (:func:`place`): ``hot`` (the static
partition: the top ``alpha`` fraction of rows by access frequency in a warm-up stage, on the GPU), ``random`` (a
random ``alpha`` fraction: the dissertation's baseline of Table 6.4), ``lru`` (an LRU cache of ``m_G`` rows) and ``importance``
(eq. 6.3: ``w <- (1 - beta) w + beta (p k + n l)`` per batch, ``p``/``n`` the row's positive/negative samples in the
batch; the dissertation does not say how rows move, so this model chooses: every row's weight decays each batch
(a row not accessed has ``p = n = 0``), and after each batch the ``m_G`` rows of largest weight are the GPU's,
the rows that left and entered counted as migrations). A lookup reads ``dim`` values per access from the memory
that holds the row; :func:`lookup_time` turns the hit ratio into time from the two memories' bandwidths.
"""

from collections import OrderedDict
from dataclasses import dataclass, field, fields

import numpy as np

__all__ = ["Stages", "PipelineResult", "pipeline", "closed_form", "sequential_time", "STAGE_SLOTS",
           "ZipfStream", "PlacementResult", "place", "lookup_time", "POLICIES", "QUEUE_CAPACITY"]

#: Sven's FIFO queues between stages hold two tensors.
QUEUE_CAPACITY = 2

#: The four stages of eq. 6.2: (compute tasks, communication tasks) of each slot.
STAGE_SLOTS = ((("sfp", "fp"), ("fa2a",)), (("bp",), ("ba2a",)), (("sbp",), ("allreduce",)), (("opt",), ()))

#: What each task needs done first (same iteration), eq. 6.1's dependency order.
_NEEDS = {"sfp": (), "fa2a": ("sfp",), "fp": ("fa2a",), "bp": ("fp",), "ba2a": ("bp",), "allreduce": ("bp",),
          "sbp": ("ba2a",), "opt": ("allreduce",)}
_ORDER = ("sfp", "fa2a", "fp", "bp", "ba2a", "allreduce", "sbp", "opt")


@dataclass(frozen=True)
class Stages:
    """Time of each task of one iteration (any unit; the CLI uses ms). ``input_a2a`` is the input
    re-distribution the sequential execution pays and Sven's pipeline moves to the CPU-only cluster."""
    sfp: float
    fp: float
    fa2a: float
    bp: float
    ba2a: float
    allreduce: float
    sbp: float
    opt: float
    input_a2a: float = 0.0

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if not v >= 0 or v == float("inf"):
                raise ValueError(f"stage time {f.name}={v!r}: must be finite and >= 0")

    @property
    def compute(self):
        """Compute-stream work of one iteration."""
        return self.sfp + self.fp + self.bp + self.sbp + self.opt

    @property
    def communication(self):
        """Communication-stream work of one iteration (the pipeline's: no input re-distribution)."""
        return self.fa2a + self.ba2a + self.allreduce


def closed_form(st, n):
    """Eq. 6.2: ``n`` pipelined iterations in steady state."""
    return n * (max(st.sfp + st.fp, st.fa2a) + max(st.bp, st.ba2a) + max(st.allreduce, st.sbp) + st.opt)


def sequential_time(st, n):
    """Eq. 6.1: ``n`` iterations one task after the other."""
    return n * sum(getattr(st, f.name) for f in fields(st))


@dataclass
class PipelineResult:
    """``time`` of ``n`` iterations; ``throughput`` iterations per unit time; ``busy``: each task kind's busy
    fraction of ``time``; ``staleness``: per iteration, the updates its reads miss; ``rounds``: four-stage rounds
    run (``n`` plus fill and drain); ``max_queue``: the fullest FIFO queue seen; ``starts``: each task's start,
    keyed ``(kind, iteration)``; ``slots``: the tasks of each stage slot in order, compute then communication
    (what a program runs: :file:`examples/sven_train.py`)."""
    time: float
    n: int
    busy: dict
    staleness: list
    rounds: int
    max_queue: int
    starts: dict
    slots: list = field(default_factory=list)

    @property
    def throughput(self):
        return self.n / self.time if self.time else float("inf")


def _sequential(st, n):
    t, starts, busy, slots = 0.0, {}, {k: 0.0 for k in _ORDER}, []
    for i in range(n):
        t += st.input_a2a
        for k in _ORDER:
            slots.append([(k, i)])
            starts[(k, i)] = t
            t += getattr(st, k)
            busy[k] += getattr(st, k)
    busy["input_a2a"] = n * st.input_a2a
    return PipelineResult(t, n, {k: v / t if t else 0.0 for k, v in busy.items()}, [0] * n, 0, 1, starts, slots)


def pipeline(st, n, pipelined=True, capacity=QUEUE_CAPACITY):
    """Simulate ``n`` iterations with stage times ``st`` (:class:`Stages`), Sven's four-stage pipeline or (with
    ``pipelined=False``) the sequential execution. Returns a :class:`PipelineResult`."""
    if n < 1:
        raise ValueError(f"iterations {n}: need at least 1")
    if capacity < 1:
        raise ValueError(f"queue capacity {capacity}: need at least 1")
    if not pipelined:
        return _sequential(st, n)
    done = {k: 0 for k in _ORDER}          # tasks of each kind finished (iterations 0..done-1: in order)
    started = {k: 0 for k in _ORDER}       # next iteration of each kind to start
    consumers = {k: [c for c in _ORDER if k in _NEEDS[c]] for k in _ORDER}
    busy = {k: 0.0 for k in _ORDER}
    starts, staleness, slots = {}, [0] * n, []
    t, rounds, max_queue = 0.0, 0, 0
    while done["opt"] < n or done["sbp"] < n:
        rounds += 1
        if rounds > 4 * n + 16:
            raise RuntimeError("the pipeline made no progress (a dependency the stage slots cannot meet)")
        for comp, comm in STAGE_SLOTS:
            # which tasks run this slot: decided from what was complete when the slot began
            ready, before = dict(done), dict(started)
            run = []
            for stream in (comp, comm):
                for k in stream:
                    i = started[k]
                    if i >= n or any(ready[d] <= i for d in _NEEDS[k]):
                        continue
                    # the FIFO queue to each consumer: outputs produced and not yet taken
                    if any(started[k] - started[c] >= capacity for c in consumers[k]):
                        continue
                    run.append((k, i))
            if run:
                slots.append(run)
            clock = {0: t, 1: t}       # each stream runs its tasks of the slot one after the other
            for k, i in run:
                started[k] = i + 1
                lane = 0 if k in comp else 1
                starts[(k, i)] = clock[lane]
                clock[lane] += getattr(st, k)
                if k == "sfp":      # reads the embedding tables: updates of SBP applied so far
                    staleness[i] = max(staleness[i], i - done["sbp"])
                elif k == "fp":     # reads the dense weights: updates of opt applied so far
                    staleness[i] = max(staleness[i], i - done["opt"])
            for k in _ORDER:
                if consumers[k]:
                    # occupancy while the slot starts: this slot's outputs beside those not yet taken
                    max_queue = max(max_queue, max(started[k] - before[c] for c in consumers[k]))
            comp_t = sum(getattr(st, k) for k, _ in run if k in comp)
            comm_t = sum(getattr(st, k) for k, _ in run if k in comm)
            for k, _ in run:
                busy[k] += getattr(st, k)
                done[k] += 1
            t += max(comp_t, comm_t)
    return PipelineResult(t, n, {k: v / t if t else 0.0 for k, v in busy.items()}, staleness, rounds, max_queue,
                          starts, slots)


# ---- placement ----------------------------------------------------------------------------------------------

#: ``hot``: static top-alpha by frequency; ``random``: a random alpha fraction; ``lru``: an LRU cache of m_G
#: rows; ``importance``: eq. 6.3's weights, the top m_G rows after every batch.
POLICIES = ("hot", "random", "lru", "importance")


@dataclass(frozen=True)
class ZipfStream:
    """``batches`` batches of ``batch`` accesses over ``rows`` embedding rows, row ``r`` (0 the hottest)
    drawn with probability ``~ 1 / (r + 1)**s``; each access a positive sample (click) with probability
    ``click``. Rows are shuffled (``perm``) so the hottest row is not row 0: a policy cannot cheat by index."""
    rows: int = 10000
    s: float = 1.05
    batches: int = 200
    batch: int = 1024
    click: float = 0.05
    seed: int = 0

    def probabilities(self):
        p = 1.0 / np.arange(1, self.rows + 1) ** self.s
        p /= p.sum()
        perm = np.random.default_rng(self.seed + 1).permutation(self.rows)
        out = np.empty(self.rows)
        out[perm] = p
        return out

    def draw(self):
        """(rows accessed, click flags): two arrays of shape ``(batches, batch)``."""
        if self.rows < 1 or self.batches < 1 or self.batch < 1:
            raise ValueError("a stream needs at least one row, batch and access")
        rng = np.random.default_rng(self.seed)
        ids = rng.choice(self.rows, size=(self.batches, self.batch), p=self.probabilities())
        return ids, rng.random(ids.shape) < self.click


@dataclass
class PlacementResult:
    """``hit_ratio``: accesses served from GPU memory; ``migrations``: rows moved between memories."""
    policy: str
    alpha: float
    gpu_rows: int
    hits: int
    accesses: int
    migrations: int

    @property
    def hit_ratio(self):
        return self.hits / self.accesses if self.accesses else 0.0


def _gpu_rows(alpha, rows):
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha {alpha!r}: the GPU's fraction of rows must be in [0, 1]")
    return int(round(alpha * rows))


def place(stream, alpha, policy="hot", beta=0.1, k=10.0, l=1.0, seed=0, warmup=0.2):
    """Serve ``stream`` (:class:`ZipfStream`) with ``alpha * rows`` rows on the GPU under ``policy``.

    As Sven's profiling placement, the first ``warmup`` fraction of the batches is a warm-up stage that records
    each row's accesses; hits are counted on the batches after it, for every policy (LRU's cache and the
    importance weights are warmed on the same batches). ``hot`` partitions once from the warm-up's counts;
    ``importance`` starts from the same partition and then follows eq. 6.3 with decay ``beta`` and importance
    factors ``k`` (positive) and ``l`` (negative)."""
    if policy not in POLICIES:
        raise ValueError(f"placement policy {policy!r}: one of {', '.join(POLICIES)}")
    if not 0 <= warmup < 1:
        raise ValueError(f"warm-up fraction {warmup!r}: must be in [0, 1)")
    m_g = _gpu_rows(alpha, stream.rows)
    ids, clicks = stream.draw()
    w0 = min(int(round(warmup * stream.batches)), stream.batches - 1)
    total = ids[w0:].size
    if policy == "lru":
        return _lru(stream, alpha, m_g, ids, w0)
    on_gpu = np.zeros(stream.rows, bool)
    if policy == "random":
        on_gpu[np.random.default_rng(seed).choice(stream.rows, m_g, replace=False)] = True
        return PlacementResult(policy, alpha, m_g, int(on_gpu[ids[w0:]].sum()), total, 0)
    counts = np.bincount(ids[:w0].ravel(), minlength=stream.rows)
    on_gpu[_top(counts, m_g)] = True
    if policy == "hot":
        return PlacementResult(policy, alpha, m_g, int(on_gpu[ids[w0:]].sum()), total, 0)
    w = counts.astype(float) / max(w0, 1)   # start from the profile, in per-batch units
    hits = migrations = 0
    for b in range(w0, stream.batches):
        hits += int(on_gpu[ids[b]].sum())
        p = np.bincount(ids[b], weights=clicks[b], minlength=stream.rows)
        n = np.bincount(ids[b], minlength=stream.rows) - p
        w = (1 - beta) * w + beta * (p * k + n * l)
        want = np.zeros(stream.rows, bool)
        want[_top(w, m_g)] = True
        migrations += int((want & ~on_gpu).sum())   # each row that enters evicts one that leaves
        on_gpu = want
    return PlacementResult(policy, alpha, m_g, hits, total, migrations)


def _top(score, m):
    """Indices of the ``m`` largest scores (ties by index, so results are deterministic)."""
    if m <= 0:
        return np.array([], int)
    return np.argsort(-score, kind="stable")[:m]


def _lru(stream, alpha, m_g, ids, w0):
    cache, hits, misses = OrderedDict(), 0, 0
    start = w0 * stream.batch       # accesses of the warm-up fill the cache and are not counted
    for j, r in enumerate(ids.ravel().tolist()):
        if r in cache:
            hits += j >= start
            cache.move_to_end(r)
        elif m_g:
            misses += j >= start
            cache[r] = None
            if len(cache) > m_g:
                cache.popitem(last=False)
    # a miss that brings the row in is a migration (the row is copied to the GPU)
    return PlacementResult("lru", alpha, m_g, hits, ids.size - start, misses)


def lookup_time(result, dim, gpu_bw, host_bw, dtype_bytes=4, migrate_bw=None):
    """Seconds to read (lookup) and read-modify-write (update) the accessed rows of ``result``'s stream: hits
    at ``gpu_bw``, misses at ``host_bw`` (bytes/s; zero-copy reads over PCIe), and each migration's row copied
    at ``migrate_bw`` (default ``host_bw``). Returns ``(lookup_s, update_s)``."""
    row = dim * dtype_bytes
    miss = result.accesses - result.hits
    move = result.migrations * row / (migrate_bw or host_bw)
    lookup = result.hits * row / gpu_bw + miss * row / host_bw + move
    return lookup, 2 * (lookup - move) + move
