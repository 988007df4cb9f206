"""Event-driven model of training iterations: one NPU's compute stream and the network's collective stream.

Compute runs the layers in order (forward, then for each layer from the last: input gradient, weight
gradient), each kernel timed by the roofline of :func:`~.system.compute_time` with the SMs and memory
bandwidth the endpoint configuration leaves to compute. A weight gradient issues its all-reduce when it is
computed; the network runs one collective at a time, choosing among the issued ones the most recent (LIFO:
the first layers' gradients, needed first by the next forward pass, go first; ACE section V). The forward pass
of layer ``i`` waits for layer ``i``'s all-reduce of the previous iteration; a model-parallel embedding waits
for its all-to-all (forward: before the next layer; backward: before the iteration ends). BaselineNoOverlap
issues one all-reduce of all gradients after back-propagation and waits for it.

With ``embedding_side`` (ACE section VI-D, Fig. 12), a model-parallel embedding's lookup and update leave the
compute stream for a side stream with their own SMs and memory bandwidth (taken from compute): the lookup of
iteration ``k + 1`` starts when iteration ``k`` does and issues its all-to-all as soon as it finishes; the
update of iteration ``k`` runs when its backward all-to-all has finished, and the iteration does not wait for it.

Collective times come from :func:`~.collective.collective_time` (cached per size). The iteration time is the
steady state: the time between the ends of the last two simulated iterations; exposed communication is that
minus the compute time of one iteration.
"""

from dataclasses import dataclass, field

from .collective import collective_time
from .system import SystemParams, compute_time

__all__ = ["IterationResult", "simulate", "Interval"]


@dataclass(frozen=True)
class Interval:
    """A busy interval of the compute stream or the network: ``kind`` is fwd/wg/ig/wait or a collective."""

    start: float
    end: float
    kind: str
    layer: str
    sent: float = 0.0
    issued: float = None
    iteration: int = None
    phase: str = None


@dataclass
class IterationResult:
    """Steady-state iteration: ``time`` = ``compute`` + ``exposed``; ``timeline``: compute intervals (waits
    included) and ``network``: collective intervals with the bytes each NPU sent; ``history``: every collective
    the simulation ran, with its issue time, iteration and pass (``fwd``/``bwd``, the pass that issued it);
    ``passes``: ``(iteration, pass, start, end)`` of each pass of the compute stream."""

    workload: str
    config: str
    topology: str
    time: float
    compute: float
    exposed: float
    iterations: int
    timeline: list = field(default_factory=list)
    network: list = field(default_factory=list)
    collectives: int = 0
    history: list = field(default_factory=list)
    passes: list = field(default_factory=list)

    def as_dict(self):
        return {"workload": self.workload, "config": self.config, "topology": self.topology, "time_s": self.time,
                "compute_s": self.compute, "exposed_s": self.exposed, "collectives": self.collectives}


class _Network:
    """One collective at a time, LIFO among the issued ones."""

    def __init__(self, timer):
        self.timer = timer
        self.pending = []      # (issue time, seq, id, collective, bytes, layer)
        self.free = 0.0
        self.done = {}
        self.log = []
        self.seq = 0

    def issue(self, t, cid, coll, nbytes, layer):
        self.seq += 1
        self.pending.append((t, self.seq, cid, coll, nbytes, layer))

    def _start_next(self):
        s = max(self.free, min(p[0] for p in self.pending))
        cands = [p for p in self.pending if p[0] <= s]
        pick = max(cands, key=lambda p: p[1])
        self.pending.remove(pick)
        issued, _, cid, coll, nbytes, layer = pick
        res = self.timer(coll, nbytes)
        self.free = s + res.time
        self.done[cid] = self.free
        phase = "fwd" if cid[0] == "a2a-f" else "bwd"
        self.log.append(Interval(s, self.free, coll, layer, res.sent, issued, cid[1], phase))

    def run_until(self, t):
        """Start every collective that can start by ``t`` (the compute stream has issued all up to ``t``)."""
        while self.pending and max(self.free, min(p[0] for p in self.pending)) <= t:
            self._start_next()

    def wait(self, cid):
        """Finish time of collective ``cid`` (compute is blocked: nothing new is issued meanwhile)."""
        while cid not in self.done:
            if not self.pending:
                raise RuntimeError(f"collective {cid} was never issued")
            self._start_next()
        return self.done[cid]


def simulate(workload, topology, ep, system=None, iterations=3, algorithm=None, compute_s=None,
             embedding_side=None):
    """Simulate ``iterations`` (>= 2) training iterations of ``workload`` (:class:`~.workload.Workload`) on
    ``topology`` with endpoint configuration ``ep``; returns an :class:`IterationResult` for the last one.
    ``compute_s``: compute per iteration to use instead of the roofline's total (e.g.
    :func:`~.system.paper_compute`); the layers keep the roofline's shares of it. ``embedding_side``: ``(SMs,
    memory bandwidth)`` of the side stream that runs the model-parallel embeddings' lookups and updates off the
    critical path (see the module docstring); compute keeps the rest."""
    if iterations < 2:
        raise ValueError("simulate needs at least 2 iterations for a steady state")
    system = system or SystemParams()
    sms, mem = ep.compute_share(system)
    side = None
    if embedding_side is not None:
        side_sms, side_mem = embedding_side
        if not (0 < side_sms < sms and 0 < side_mem < mem):
            raise ValueError(f"embedding side stream ({side_sms} SMs, {side_mem / 1e9:g} GB/s) must take part of "
                             f"what compute has ({sms} SMs, {mem / 1e9:g} GB/s)")
        sms, mem = sms - side_sms, mem - side_mem
    cache = {}

    def timer(coll, nbytes):
        key = (coll, nbytes)
        if key not in cache:
            cache[key] = collective_time(coll, nbytes, topology, ep, system, algorithm)
        return cache[key]

    net = _Network(timer)
    layers = workload.layers
    kt = [(compute_time(l.fwd_flops, l.fwd_bytes, system, sms, mem),
           compute_time(l.wg_flops, l.wg_bytes, system, sms, mem),
           compute_time(l.ig_flops, l.ig_bytes, system, sms, mem)) for l in layers]
    if embedding_side is not None:
        # (lookup, update) on the side stream; the compute stream no longer runs them
        side = {i: (compute_time(l.fwd_flops, l.fwd_bytes, system, side_sms, side_mem),
                    compute_time(l.wg_flops, l.wg_bytes, system, side_sms, side_mem))
                for i, l in enumerate(layers) if l.alltoall_bytes}
        kt = [(0.0, 0.0, c) if i in side else (a, b, c) for i, (a, b, c) in enumerate(kt)]
    compute_per_iter = sum(a + b + (c if i else 0.0) for i, (a, b, c) in enumerate(kt))
    if compute_s is not None:
        if side is not None:
            raise ValueError("a given compute per iteration has no share for the embedding side stream")
        if compute_s <= 0:
            raise ValueError(f"compute_s must be positive, got {compute_s}")
        f = compute_s / compute_per_iter
        kt = [(a * f, b * f, c * f) for a, b, c in kt]
        compute_per_iter = compute_s
    t = 0.0
    timeline = []
    ends = []
    n_coll = 0

    def run(kind, name, dt):
        nonlocal t
        if dt > 0:
            timeline.append(Interval(t, t + dt, kind, name))
        t += dt
        net.run_until(t)

    def wait(cid, name):
        nonlocal t
        done = net.wait(cid)
        if done > t:
            timeline.append(Interval(t, done, "wait", name))
            t = done
        net.run_until(t)

    side_free = 0.0
    passes = []

    def side_run(kind, name, ready, dt):
        nonlocal side_free
        s = max(side_free, ready)
        side_free = s + dt
        if dt > 0:
            timeline.append(Interval(s, side_free, kind, name))
        return side_free

    def lookups(k):
        """The side stream's lookup for iteration ``k``; its all-to-all is issued when it finishes."""
        nonlocal n_coll
        for i, (lookup, _) in side.items():
            done = side_run("lookup", layers[i].name, t, lookup)
            net.issue(done, ("a2a-f", k, i), "alltoall", layers[i].alltoall_bytes, layers[i].name)
            n_coll += k < iterations

    for it in range(iterations):
        passes.append([it, "fwd", t, None])
        if side is not None:
            if it == 0:
                lookups(0)
            lookups(it + 1)
            if it:      # the previous iteration's updates, once their gradients arrived
                for i, (_, update) in side.items():
                    side_run("update", layers[i].name, net.wait(("a2a-b", it - 1, i)), update)
        for i, l in enumerate(layers):
            if it and l.allreduce_bytes and ep.overlap:
                wait(("ar", it - 1, i), l.name)
            run("fwd", l.name, kt[i][0])
            if l.alltoall_bytes:
                if side is None:
                    net.issue(t, ("a2a-f", it, i), "alltoall", l.alltoall_bytes, l.name)
                    n_coll += 1
                wait(("a2a-f", it, i), l.name)
        passes[-1][3] = t
        passes.append([it, "bwd", t, None])
        bwd_a2a = []
        for i in range(len(layers) - 1, -1, -1):
            l = layers[i]
            if i:
                run("ig", l.name, kt[i][2])
            if l.alltoall_bytes:
                net.issue(t, ("a2a-b", it, i), "alltoall", l.alltoall_bytes, l.name)
                n_coll += 1
                bwd_a2a.append(("a2a-b", it, i))
            run("wg", l.name, kt[i][1])
            if l.allreduce_bytes and ep.overlap:
                net.issue(t, ("ar", it, i), "allreduce", l.allreduce_bytes, l.name)
                n_coll += 1
        if not ep.overlap:
            net.issue(t, ("ar", it, "all"), "allreduce", workload.allreduce_bytes, "all")
            n_coll += 1
            wait(("ar", it, "all"), "all")
        if side is None:
            for cid in bwd_a2a:
                wait(cid, layers[cid[2]].name)
        passes[-1][3] = t
        ends.append(t)
    it_time = ends[-1] - ends[-2]
    start = ends[-2]
    tl = [iv for iv in timeline if iv.end > start]
    nw = [iv for iv in net.log if iv.end > start and iv.start < ends[-1]]
    return IterationResult(workload.name, ep.name, str(topology), it_time, compute_per_iter,
                           max(0.0, it_time - compute_per_iter), iterations, tl, nw,
                           n_coll // iterations, list(net.log), [tuple(p) for p in passes])
