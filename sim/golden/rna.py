"""RNA, the dissertation's randomized non-blocking all-reduce (chapter 5), as a protocol: a discrete-event
simulation of the workers, the controller, the collectives and the parameter server, on a real (small) model
whose convergence the protocol's staleness affects.

The protocol, as the dissertation describes it (section 5.1-5.2) and this model runs it:

- **Workers** run a compute thread and a communication thread. The compute thread never waits for the network:
  it computes iteration after iteration on the newest parameters it has, and each finished gradient (tagged with
  the parameter version it was computed on) enters the rank's queue of waiting gradients.
- **The controller** starts a round when the previous collective is done: it sends a probe tagged with the round
  (iteration) id to ``probes`` random ranks (q = 2: the power of two choices; q = 1: a random initiator). A probed
  rank replies when it holds a waiting gradient (at once if it already does). The first reply to arrive makes that
  rank the **initiator**; the other probes of the round expire (a reply to them is ignored, the id has moved on);
  replies arriving together are accepted in probe order (one is taken, the others expire).
- **External activation**: the initiator's activation pulls every rank of the group into the ring all-reduce
  (``probe_ms`` after the reply). A rank with waiting gradients contributes them, **merged** with weights linear in
  their version (``g' = sum((t - (k - tau) + 1) g_t) / sum(t - (k - tau) + 1)``, ``tau`` the largest gap kept)
  after dropping those more than ``staleness`` versions old; a rank with none contributes a **null** tensor (zeros,
  count 0: the engine's NULL flag), so the ring never changes shape.
- **Weights**: the collective returns the sum and the number of contributors ``sum(w)`` (the engine's count lane);
  every rank applies ``x <- x - (sum(w) * lr) * sum(g) / sum(w)`` (the learning rate scaled by the contributors,
  the linear scaling rule), so the ranks of a group keep identical parameters.
- **Barrier** (Horovod, the baseline): every rank computes one gradient on the current parameters, the ring waits
  for the slowest, every rank contributes.
- **Hierarchical mode** (section 5.2): ranks are grouped (:func:`group_ranks`: split into faster and slower halves
  while the slowest minus the fastest mean iteration exceeds the mean, recursively); RNA runs inside each group
  with its own controller; after each group round the group's initiator pushes the group's parameters to the
  **parameter server** (the group's update: its averaged gradient times its learning rate), the server applies
  it to the global model, the initiator pulls the global model and broadcasts it inside the group. Groups run
  asynchronously, as workers of a parameter server do; the server serves one push-pull at a time.

Time is simulated in milliseconds: compute per iteration comes from a :class:`Delays` profile (a base time per
rank, uniform random delay per rank and iteration, a slow group's larger delay), collectives take what the
:class:`Collectives` object says (the performance model's ring time, or the engines' measured cycles,
``host/rna.py``). The statistical side is a real model (:class:`LeastSquares`), so staleness and null
contributions cost iterations the way they cost accuracy in training, and the figure of merit is the
dissertation's: simulated time to a target loss.
"""

from dataclasses import dataclass
import math

import numpy as np

__all__ = ["Delays", "LeastSquares", "Collectives", "SumCollectives", "RnaSettings", "Round", "RnaResult",
           "group_ranks", "profile_ranks", "merge_gradients", "simulate", "MODES"]

#: ``barrier``: the all-reduce waits for every rank (Horovod); ``rna``: probes, initiator, null contributions.
MODES = ("barrier", "rna")


@dataclass(frozen=True)
class Delays:
    """Compute time per iteration of each rank: ``base_ms`` (a number, or one per rank: deterministic
    heterogeneity) plus a delay drawn uniformly from ``[0, jitter_ms]`` per rank and iteration (the
    dissertation's injected straggler delay, after Hop), or from ``slow_ms`` for the ranks in ``slow_ranks``."""
    base_ms: object = 100.0
    jitter_ms: float = 0.0
    slow_ranks: tuple = ()
    slow_ms: tuple = (50.0, 100.0)

    def __post_init__(self):
        base = self.base_ms if isinstance(self.base_ms, (tuple, list)) else (self.base_ms,)
        if any(not math.isfinite(float(b)) or float(b) <= 0 for b in base):
            raise ValueError(f"base compute time {self.base_ms!r}: expected positive milliseconds")
        lo, hi = self.slow_ms
        if not (0 <= self.jitter_ms and 0 <= lo <= hi):
            raise ValueError(f"delays: jitter {self.jitter_ms} ms and slow range {self.slow_ms} must be >= 0 "
                             f"and ordered")

    def base(self, rank):
        return float(self.base_ms[rank] if isinstance(self.base_ms, (tuple, list)) else self.base_ms)

    def draw(self, rng, rank):
        if rank in self.slow_ranks:
            return self.base(rank) + rng.uniform(*self.slow_ms)
        return self.base(rank) + (rng.uniform(0.0, self.jitter_ms) if self.jitter_ms else 0.0)

    def mean(self, rank):
        if rank in self.slow_ranks:
            return self.base(rank) + sum(self.slow_ms) / 2
        return self.base(rank) + self.jitter_ms / 2


class LeastSquares:
    """The statistical side: linear least squares on synthetic data, ``samples`` rows per rank, minibatch
    gradients of ``batch`` rows, float32 like the engines' reductions. :meth:`loss` is the excess mean squared
    error over the exact solution (0 at convergence, the noise floor removed), on every rank's data."""

    def __init__(self, ranks, dim=32, samples=256, batch=16, noise=0.1, seed=0):
        if ranks < 1 or dim < 1 or samples < 1 or not 1 <= batch <= samples:
            raise ValueError(f"least squares: ranks {ranks}, dim {dim}, samples {samples}, batch {batch}: "
                             f"need positive sizes and 1 <= batch <= samples")
        rng = np.random.default_rng(seed)
        self.ranks, self.dim, self.batch = ranks, dim, batch
        self.w_true = rng.normal(size=dim)
        self.X = rng.normal(size=(ranks, samples, dim)) / math.sqrt(dim)
        self.y = self.X @ self.w_true + noise * rng.normal(size=(ranks, samples))
        flat_x, flat_y = self.X.reshape(-1, dim), self.y.reshape(-1)
        w_opt = np.linalg.lstsq(flat_x, flat_y, rcond=None)[0]
        # the excess loss is a quadratic form around the exact solution: 0.5 (x - w)' (X'X / N) (x - w)
        self._w_opt, self._hessian = w_opt, flat_x.T @ flat_x / len(flat_y)

    def initial(self):
        return np.zeros(self.dim, dtype=np.float32)

    def gradient(self, x, rank, rng):
        idx = rng.integers(0, self.X.shape[1], size=self.batch)
        xb, yb = self.X[rank, idx], self.y[rank, idx]
        return (xb.T @ (xb @ x.astype(np.float64) - yb) / self.batch).astype(np.float32)

    def loss(self, x):
        e = x.astype(np.float64) - self._w_opt
        return float(e @ self._hessian @ e) / 2


class Collectives:
    """What the protocol needs from the collectives: :meth:`allreduce` of the members' contributions (a rank's
    array, or None for a null contribution) returning (sum as float32, contributors, milliseconds), and
    :meth:`broadcast` of ``data`` from ``root`` to ``ranks`` returning milliseconds. Implementations: the
    performance model (:class:`SumCollectives` with a time function) and the engines (``host/rna.py``)."""

    def allreduce(self, ranks, contributions):
        raise NotImplementedError

    def broadcast(self, ranks, root, data):
        raise NotImplementedError


class SumCollectives(Collectives):
    """Sums in rank order in float32; times from ``allreduce_ms(n)`` and ``broadcast_ms(n)`` (n: the ranks in
    the collective), e.g. the performance model's ring on the model's gradient bytes."""

    def __init__(self, allreduce_ms, broadcast_ms=None):
        self.allreduce_ms, self.broadcast_ms = allreduce_ms, broadcast_ms or allreduce_ms

    def allreduce(self, ranks, contributions):
        total, n = None, 0
        for r in ranks:
            c = contributions[r]
            if c is not None:
                total = c.astype(np.float32).copy() if total is None else total + c
                n += 1
        if total is None:
            raise ValueError("an all-reduce with no contribution")      # the initiator always has one
        return total, n, float(self.allreduce_ms(len(ranks)))

    def broadcast(self, ranks, root, data):
        return float(self.broadcast_ms(len(ranks)))


@dataclass(frozen=True)
class RnaSettings:
    """``mode`` (:data:`MODES`); ``probes``: q, the ranks probed per round (clipped to the group); ``staleness``:
    the largest version gap a waiting gradient may have and still be merged; ``lr``: the learning rate per
    contributor; ``probe_ms``: one way of a probe, reply or activation message; ``groups``: None (one group),
    ``"auto"`` (:func:`group_ranks` on a profile of :attr:`profile_iters` iterations per rank) or a list of rank
    lists; ``ps_ms``: the parameter server's push-pull of one group's parameters."""
    mode: str = "rna"
    probes: int = 2
    staleness: int = 4
    lr: float = 0.05
    probe_ms: float = 0.05
    groups: object = None
    ps_ms: float = 5.0
    profile_iters: int = 20

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"RNA mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.mode == "rna" and self.probes < 1:
            raise ValueError(f"RNA probes {self.probes}: need at least 1 (1: a random initiator)")
        if self.staleness < 0 or self.lr <= 0 or self.probe_ms < 0 or self.ps_ms < 0:
            raise ValueError(f"RNA settings: staleness {self.staleness} >= 0, lr {self.lr} > 0, probe "
                             f"{self.probe_ms} ms and server {self.ps_ms} ms >= 0 expected")


@dataclass
class Round:
    """One group round: ``group`` (index), ``start``/``activate``/``end`` (ms), ``initiator`` (None in barrier
    mode), ``probed`` ranks, ``expired`` probes, ``contributors`` (the count lane), ``nulls``, the stale
    gradients ``dropped`` at the merge, ``response_ms`` (probe sent to the first probed rank being ready),
    ``loss`` after the round's update."""
    group: int
    start: float
    activate: float
    end: float
    initiator: object
    probed: tuple
    expired: int
    contributors: int
    nulls: int
    dropped: int
    response_ms: float
    loss: float


@dataclass
class RnaResult:
    """Rounds in time order, the groups, and per rank: gradients ``computed``, ``applied`` (merged into a
    contribution), ``dropped`` (too stale) and ``waiting`` at the end (``computed == applied + dropped +
    waiting``). ``time_to(loss)`` is the simulated time of the first round reaching ``loss``."""
    rounds: list
    groups: list
    computed: list
    applied: list
    dropped: list
    waiting: list
    params: object = None
    server_pushes: int = 0

    def time_to(self, loss):
        return next((r.end for r in self.rounds if r.loss <= loss), math.inf)

    @property
    def end_ms(self):
        return self.rounds[-1].end if self.rounds else 0.0

    def summary(self):
        rounds = self.rounds
        n = max(len(rounds), 1)
        return {"rounds": len(rounds), "end_ms": self.end_ms,
                "round_ms": float(np.mean([r.end - r.start for r in rounds])) if rounds else 0.0,
                "contributors": float(np.mean([r.contributors for r in rounds])) if rounds else 0.0,
                "nulls": sum(r.nulls for r in rounds) / n, "expired": sum(r.expired for r in rounds),
                "dropped": sum(self.dropped), "final_loss": rounds[-1].loss if rounds else math.nan,
                "median_response_ms": float(np.median([r.response_ms for r in rounds])) if rounds else 0.0}


def merge_gradients(queue, version, staleness):
    """Merge a rank's waiting gradients ``queue`` (a list of (version, gradient)) for a round at ``version``:
    drop those more than ``staleness`` versions old, weight the rest linearly by version (the oldest kept
    weighs 1). Returns (merged float32 gradient or None, gradients merged, gradients dropped)."""
    kept = [(v, g) for v, g in queue if version - v <= staleness]
    dropped = len(queue) - len(kept)
    if not kept:
        return None, 0, dropped
    if len(kept) == 1:
        return kept[0][1], 1, dropped
    oldest = min(v for v, _ in kept)
    weights = np.array([v - oldest + 1 for v, _ in kept], dtype=np.float64)
    merged = sum(w * g.astype(np.float64) for w, (_, g) in zip(weights, kept)) / weights.sum()
    return merged.astype(np.float32), len(kept), dropped


def group_ranks(times):
    """The hierarchical mode's grouping rule: ``times`` maps rank -> mean iteration time. While the slowest
    minus the fastest exceeds the mean (zeta > v), split into the ranks at or under the mean and those over it,
    recursively. Returns the groups (lists of ranks, fastest group first)."""
    ranks = sorted(times, key=lambda r: (times[r], r))
    vals = [times[r] for r in ranks]
    mean = sum(vals) / len(vals)
    if len(ranks) < 2 or vals[-1] - vals[0] <= mean:
        return [sorted(ranks)]
    fast = {r: times[r] for r in ranks if times[r] <= mean}
    slow = {r: times[r] for r in ranks if times[r] > mean}
    return group_ranks(fast) + group_ranks(slow)


def profile_ranks(delays, n, iters, seed):
    """Each rank's mean iteration time over ``iters`` drawn iterations (what a profiling epoch measures)."""
    rng = np.random.default_rng([seed, 7])
    return {r: float(np.mean([delays.draw(rng, r) for _ in range(iters)])) for r in range(n)}


class _Worker:
    def __init__(self, rank, rng, delays):
        self.rank, self.rng, self.delays = rank, rng, delays
        self.queue = []                 # (version, gradient)
        self.end = None                 # end of the iteration under way
        self.start_params = self.start_version = None
        self.computed = self.applied = self.dropped = 0

    def start(self, t, params, version):
        self.start_params, self.start_version = params, version
        self.end = t + self.delays.draw(self.rng, self.rank)


class _Group:
    def __init__(self, index, ranks, params):
        self.index, self.ranks, self.params = index, ranks, params
        self.version = 0
        self.ctl_rng = None


def simulate(task, delays, settings, collectives, n, *, rounds=None, until_ms=None, target_loss=None, seed=1):
    """Run the protocol on ``n`` ranks until ``rounds`` group rounds, ``until_ms`` or ``target_loss`` (at least
    one bound). ``task``: :class:`LeastSquares`-like (``initial``, ``gradient``, ``loss``). Returns
    :class:`RnaResult`."""
    if n < 1:
        raise ValueError(f"RNA ranks {n}: need at least 1")
    if rounds is None and until_ms is None and target_loss is None:
        raise ValueError("simulate: give rounds, until_ms or target_loss (it would run for ever)")
    if getattr(task, "ranks", n) != n:
        raise ValueError(f"the task holds data for {task.ranks} ranks, the run has {n}")
    if isinstance(delays.base_ms, (tuple, list)) and len(delays.base_ms) != n:
        raise ValueError(f"delays give {len(delays.base_ms)} base compute times for {n} ranks")
    groups = settings.groups
    if groups == "auto":
        groups = group_ranks(profile_ranks(delays, n, settings.profile_iters, seed))
    groups = [sorted(int(r) for r in g) for g in (groups or [range(n)])]
    flat = sorted(r for g in groups for r in g)
    if flat != list(range(n)):
        raise ValueError(f"RNA groups {groups}: every rank 0..{n - 1} exactly once")
    x0 = task.initial()
    workers = [_Worker(r, np.random.default_rng([seed, 1, r]), delays) for r in range(n)]
    grps = [_Group(i, g, x0) for i, g in enumerate(groups)]
    for g in grps:
        g.ctl_rng = np.random.default_rng([seed, 2, g.index])
        if settings.mode == "rna":
            for r in g.ranks:
                workers[r].start(0.0, g.params, 0)
    hier = len(grps) > 1
    server, server_free, pushes = x0, 0.0, 0     # the parameter server's global model
    out = []

    def advance(w, t, g):
        # the compute thread: finish every iteration ending by t, start the next on the group's parameters
        while w.end is not None and w.end <= t:
            w.queue.append((w.start_version, task.gradient(w.start_params, w.rank, w.rng)))
            w.computed += 1
            w.start(w.end, g.params, g.version)

    def run_round(g, t0):
        """One group round from t0 to the all-reduce's end; returns (Round without loss, sum, contributors)."""
        members = g.ranks
        contribs, expired, probed, initiator, dropped = {}, 0, (), None, 0
        if settings.mode == "barrier":
            for r in members:
                workers[r].start(t0, g.params, g.version)
            ready = max(workers[r].end for r in members)
            t_act = ready + 2 * settings.probe_ms           # readiness to the coordinator, then the go
            for r in members:
                w = workers[r]
                contribs[r] = task.gradient(w.start_params, r, w.rng)
                w.computed += 1
                w.applied += 1
                w.end = None
        else:
            q = min(settings.probes, len(members))
            probed = tuple(int(r) for r in g.ctl_rng.choice(members, q, replace=False))
            ready, ready_ranks = t0 + settings.probe_ms, []
            while True:     # advance the probed ranks only as far as the first is ready (no further)
                for r in probed:
                    w = workers[r]
                    advance(w, ready, g)
                    fresh = [(v, x) for v, x in w.queue if g.version - v <= settings.staleness]
                    w.dropped += len(w.queue) - len(fresh)      # a stale gradient is overwritten, not a reply
                    dropped += len(w.queue) - len(fresh)
                    w.queue = fresh
                ready_ranks = [r for r in probed if workers[r].queue]
                if ready_ranks:
                    break
                ready = min(workers[r].end for r in probed)
            initiator = ready_ranks[0]          # replies at the same time: the first in probe order wins
            expired = len(probed) - 1           # the other probes expire: a later reply carries an old id
            t_act = ready + 2 * settings.probe_ms           # the reply, then the external activation
            for r in members:
                w = workers[r]
                advance(w, t_act, g)
                merged, used, gone = merge_gradients(w.queue, g.version, settings.staleness)
                w.queue = []
                w.applied += used
                w.dropped += gone
                dropped += gone
                contribs[r] = merged
            assert contribs[initiator] is not None, "the initiator replied with a gradient"
        total, count, ms = collectives.allreduce(members, contribs)
        end = t_act + ms
        rnd = Round(g.index, t0, t_act, end, initiator, probed, expired, count,
                    sum(1 for r in members if contribs[r] is None), dropped, ready - t0, math.nan)
        return rnd, total, count

    def apply(g, t, params, new_version=True):
        if settings.mode == "rna":
            for r in g.ranks:
                advance(workers[r], t, g)       # iterations started before t used the old parameters
        g.params = params
        g.version += new_version

    # Group rounds in the order their results reach the server (one group: in order).
    pending = []
    for g in grps:
        rnd, total, count = run_round(g, 0.0)
        pending.append((rnd.end, g.index, rnd, total, count))
    while pending:
        pending.sort(key=lambda p: (p[0], p[1]))
        _, gi, rnd, total, count = pending.pop(0)
        g = grps[gi]
        avg = total.astype(np.float32) / np.float32(count)
        new = (g.params - np.float32(settings.lr * count) * avg).astype(np.float32)
        end = rnd.end
        update = new - g.params
        apply(g, end, new)
        if hier:
            # the initiator pushes the group's update, the server applies it to the global model, the
            # initiator pulls that and broadcasts it inside the group
            server = (server + update).astype(np.float32)
            server_free = max(end, server_free) + settings.ps_ms
            pushes += 1
            new = server
            root = rnd.initiator if rnd.initiator is not None else g.ranks[0]
            end = rnd.end = server_free + collectives.broadcast(g.ranks, root, new)
            apply(g, end, new, new_version=False)
        rnd.loss = task.loss(server if hier else new)
        out.append(rnd)
        if (rounds is not None and len(out) >= rounds) or (until_ms is not None and end >= until_ms) or \
                (target_loss is not None and rnd.loss <= target_loss):
            break
        nxt, total, count = run_round(g, end)
        pending.append((nxt.end, g.index, nxt, total, count))
    out.sort(key=lambda r: r.end)
    return RnaResult(out, groups, [w.computed for w in workers], [w.applied for w in workers],
                     [w.dropped for w in workers], [len(w.queue) for w in workers],
                     params=[g.params for g in grps], server_pushes=pushes)
