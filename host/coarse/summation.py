"""BytePS's summation service on the RTL: the service placed in :class:`~syncfabric.hdl.coarse.system.CoarseSystem`
(``sum_parts`` > 0), driven over every GPU's CCI path to it, every pulled byte checked against the golden
:class:`~syncfabric.sim.golden.byteps.SummationService` replayed in the order the service accepts the requests.

::

    from syncfabric.host.coarse.rtl import CoarseRtl
    from syncfabric.host.coarse.summation import RtlSummationService

    with CoarseRtl(2, 1, 8, 4, sum_parts=4, sum_part_beats=4) as rtl:
        svc = RtlSummationService(rtl, "fp32", "sum")          # MODE written through worker 0's CCI path
        svc.run({0: [("push", 0, g0), ("pull", 0)],            # worker 0 pushes part 0 and pulls its sum;
                 1: [("push", 0, g1), ("pull", 0)]})           # the pull waits in the RTL for worker 1's push

Synchronous mode: the workers' scripts of one :meth:`~RtlSummationService.run` go at once (the GPUs
concurrently); a pull is answered once every worker pushed the part, so the sum does not depend on the
interleaving. Asynchronous mode (BytePS section 5): a push is applied at once and a pull answers the latest
parameters, so the result depends on the acceptance order; the scripts run one worker after another (each
worker's requests in order: its port keeps them in order and the service's scoreboard holds a pull behind
the push of the same beat), which makes the acceptance order the host's, and the golden model replays it.
"""

import copy

import numpy as np

from ...hdl.coarse.layouts import SUM_CTRL, CciOpcode, sum_pull_addr, sum_push_addr, summation_register_map
from ...sim.golden.byteps import SummationService as GoldenService
from ...sim.golden.types import dtype_bytes
from .rtl import MismatchError, _dtype, _op

__all__ = ["RtlSummationService", "run_summation", "run_byteps"]


class RtlSummationService:
    """The summation service of ``rtl`` (a :class:`~syncfabric.host.coarse.rtl.CoarseRtl` built with
    ``sum_parts`` > 0) for ``dtype``/``op``, synchronous or ``asynchronous``: worker ``w`` is GPU ``w``. A part
    holds ``sum_part_beats x beat_bytes`` bytes (:attr:`part_bytes`); shorter data is padded with zeros.
    :attr:`checked` counts the bytes compared with the golden service.

    The service's state outlives this object (asynchronous parameters stay until a synchronous round sums the
    part, a round stays open until every worker pulled), so the golden replay and the open rounds are the
    system's (``rtl.summation_state``), shared by every :class:`RtlSummationService` on it."""

    def __init__(self, rtl, dtype="fp32", op="sum", asynchronous=False):
        if not rtl.sum_parts:
            raise ValueError("the system has no summation service: build it with sum_parts > 0")
        self.rtl, self.n, self.bb, self.pb = rtl, rtl.n, rtl.beat_bytes, rtl.sum_part_beats
        self.n_parts, self.part_bytes = rtl.sum_parts, rtl.sum_part_beats * rtl.beat_bytes
        self.dtype, self.op, self.asynchronous = _dtype(dtype), _op(op), bool(asynchronous)
        self.regmap = summation_register_map(self.bb)
        if rtl.summation_state is None:
            # sync: part -> {"pushed": {worker: bytes}, "sum": bytes or None, "pulled": set, "size": bytes}
            rtl.summation_state = {"golden": GoldenService(self.n, self.dtype, self.op), "rounds": {}}
        self.golden, self.rounds = rtl.summation_state["golden"], rtl.summation_state["rounds"]
        self.golden.dtype, self.golden.op, self.golden.asynchronous = self.dtype, self.op, self.asynchronous
        self.checked = 0
        self.sizes = {}             # part -> bytes of the data last pushed to it here (unpadded)
        self.shares = {}            # (server, part) -> part of the RTL service (see server())
        self.reg_write("MODE", self.regmap.encode("MODE", asynchronous=int(self.asynchronous),
                                                  dtype=int(self.dtype), op=int(self.op)))

    # -- registers ---------------------------------------------------------------------------------------------
    def reg_write(self, name, value, worker=0):
        """Write the service's control register ``name`` through worker ``worker``'s CCI path."""
        self.rtl.sum_write(worker, SUM_CTRL + self.regmap.addr(name), int(value).to_bytes(self.bb, "little"))

    def reg_read(self, name, worker=0):
        """Read the service's control register ``name`` (its 32 bits)."""
        raw = self.rtl.sum_read(worker, SUM_CTRL + self.regmap.addr(name), self.bb)
        return int.from_bytes(raw[:4], "little")

    # -- checks and bookkeeping ---------------------------------------------------------------------------------
    def _part(self, part):
        if not isinstance(part, (int, np.integer)) or not 0 <= part < self.n_parts:
            raise ValueError(f"no part {part!r}: the service holds parts 0..{self.n_parts - 1} of "
                             f"{self.part_bytes} bytes")
        return int(part)

    def _worker(self, worker):
        if not isinstance(worker, (int, np.integer)) or not 0 <= worker < self.n:
            raise ValueError(f"no worker {worker!r}: the service has workers 0..{self.n - 1}")
        return int(worker)

    def _raw(self, part, data):
        raw = bytes(data) if isinstance(data, (bytes, bytearray)) else np.asarray(data).view(np.uint8).tobytes()
        eb = dtype_bytes(self.dtype)
        if not raw or len(raw) % eb:
            raise ValueError(f"part {part}: {len(raw)} bytes is not a whole, positive number of {self.dtype.name} "
                             f"elements")
        if len(raw) > self.part_bytes:
            raise ValueError(f"part {part}: {len(raw)} bytes do not fit the service's {self.part_bytes}-byte parts "
                             f"({self.pb} beats of {self.bb} bytes)")
        size = self.rounds[part]["size"] if not self.asynchronous and part in self.rounds else len(raw)
        if size != len(raw):
            raise ValueError(f"part {part}: {len(raw)} bytes pushed, the round's earlier pushes had {size}")
        self.sizes[part] = len(raw)
        return raw + bytes(self.part_bytes - len(raw))

    def _push(self, worker, part, raw):
        """The golden service takes the push; returns its CCI requests ``(opcode, addr, data)``, one per beat."""
        if self.asynchronous:
            self.golden.push(part, worker, np.frombuffer(raw, np.uint8))
        else:
            state = self.rounds.setdefault(part, {"pushed": {}, "sum": None, "pulled": set(),
                                                  "size": self.sizes[part]})
            if worker in state["pushed"]:
                raise ValueError(f"worker {worker} pushed part {part} twice in one round (a part is reused once "
                                 f"every worker pulled its sum)")
            state["pushed"][worker] = raw
            out = self.golden.push(part, worker, np.frombuffer(raw, np.uint8))
            if out is not None:
                state["sum"] = out.tobytes()
                self.golden.weights.pop(part, None)     # the sum clears the part's asynchronous parameters
        return [(CciOpcode.MEM_WR, sum_push_addr(self.n, self.pb, self.bb, part, worker, b),
                 int.from_bytes(raw[b * self.bb:(b + 1) * self.bb], "little")) for b in range(self.pb)]

    def _pull(self, worker, part):
        """What a pull of ``part`` by ``worker`` must return now (golden), and its CCI requests."""
        if self.asynchronous:
            want = self.golden.pull(part)
            if want is None:
                raise ValueError(f"pull of part {part} before any push: it holds no parameters yet")
            want = want.tobytes()
        else:
            state = self.rounds.get(part)
            if state is None or state["sum"] is None:
                got = sorted(state["pushed"]) if state else []
                raise ValueError(f"pull of part {part} before every worker pushed it (workers {got} of "
                                 f"{self.n} did): in synchronous mode the service answers only then")
            if worker in state["pulled"]:
                raise ValueError(f"worker {worker} pulled part {part} twice in one round")
            state["pulled"].add(worker)
            if len(state["pulled"]) == self.n:
                del self.rounds[part]           # every worker pulled: the part starts its next round
            want = state["sum"]
        return want, [(CciOpcode.MEM_RD, sum_pull_addr(self.pb, self.bb, part, b), 0) for b in range(self.pb)]

    def _item(self, item):
        if not isinstance(item, tuple) or item[:1] not in (("push",), ("pull",)) or len(item) != 2 + (
                item[0] == "push"):
            raise ValueError(f"a script holds ('push', part, data) and ('pull', part), not {item!r}")
        return (item[0], self._part(item[1]), *item[2:])

    def _plan(self, group):
        """``[(worker, script)]`` -> ``[(worker, requests, golden answers)]`` (None for a push). Synchronous
        mode: a pull waits in the RTL until every worker pushed, so the golden service takes the group's pushes
        first; asynchronous mode: the requests in order."""
        items = [(self._worker(w), [self._item(i) for i in script]) for w, script in group]
        plans = [(w, [None] * len(its), [None] * len(its)) for w, its in items]
        phases = (("push", "pull"),) if self.asynchronous else (("push",), ("pull",))
        saved = copy.deepcopy((self.golden.__dict__, self.rounds, self.sizes))
        try:
            for phase in phases:
                for (w, its), (_, reqs, wants) in zip(items, plans):
                    for k, (kind, part, *data) in enumerate(its):
                        if kind not in phase:
                            continue
                        if kind == "push":
                            reqs[k] = self._push(w, part, self._raw(part, data[0]))
                        else:
                            want, reqs[k] = self._pull(w, part)
                            wants[k] = (want, part)
        except ValueError:          # refused before any traffic: the replay stays the service's state
            golden, rounds, sizes = saved
            self.golden.__dict__.update(golden)
            self.rounds.clear()
            self.rounds.update(rounds)
            self.sizes.clear()
            self.sizes.update(sizes)
            raise
        return plans

    def _check(self, worker, wants, got):
        out = []
        for pull, data in zip(wants, got):
            if pull is None:
                continue
            want, part = pull
            if bytes(data) != want:
                bad = next(i for i in range(len(want)) if data[i] != want[i])
                mode = "asynchronous" if self.asynchronous else "synchronous"
                raise MismatchError(f"worker {worker} pulled part {part} with bytes that differ from the golden "
                                    f"{mode} summation service first at byte {bad} ({self.dtype.name} "
                                    f"{self.op.name})")
            self.checked += len(want)
            out.append(bytes(data)[:self.sizes[part]])
        return out

    # -- requests ------------------------------------------------------------------------------------------------
    def run(self, scripts):
        """``scripts``: ``{worker: [("push", part, data) | ("pull", part), ...]}``. Synchronous mode: the
        workers at once; asynchronous mode: one worker after another, in the dict's order (see the module
        docstring). Every pull is checked (:class:`MismatchError`). Returns ``(pulled, cycles)``:
        ``{worker: [bytes of each pull]}`` and the cycles the requests took."""
        pulled, cycles = {}, 0
        groups = [list(scripts.items())] if not self.asynchronous else [[item] for item in scripts.items()]
        for group in groups:
            plans = self._plan(group)           # refuses bad input before the group's traffic
            # one stream of requests per worker (window in flight), the workers of the group at once
            values, took = self.rtl.batch([("sum_transact", w, [r for item in reqs for r in item])
                                           for w, reqs, _ in plans])
            cycles += took
            for (w, reqs, wants), data in zip(plans, values):
                beats = [v.to_bytes(self.bb, "little") for v in data]
                got = [b"".join(beats[k * self.pb:(k + 1) * self.pb]) for k in range(len(reqs))]
                pulled[w] = pulled.get(w, []) + self._check(w, wants, got)
        return pulled, cycles

    def push(self, worker, part, data):
        """Worker ``worker`` pushes ``data`` (bytes or an array) to ``part``; returns the cycles it took."""
        return self.run({worker: [("push", part, data)]})[1]

    def pull(self, worker, part):
        """Worker ``worker`` pulls ``part`` (checked); returns its bytes."""
        return self.run({worker: [("pull", part)]})[0][worker][0]

    def server(self):
        """A share of this service with the golden service's interface (``push(part, worker, data)`` returning
        the sum once every worker pushed, or in asynchronous mode the latest parameters; ``pull(part)``), its
        parts mapped to parts of the RTL service not given to another share and holding nothing (no open round,
        no asynchronous parameters: a share starts as a fresh golden service): the BytePS cluster's CPU and GPU
        machines' services on the one RTL service (:class:`~syncfabric.host.coarse.byteps.BytePSCluster`)."""
        return _Share(self)

    def _share_part(self, share, part):
        key = (id(share), part)
        if key not in self.shares:
            taken = set(self.shares.values()) | set(self.rounds) | set(self.golden.weights)
            free = [p for p in range(self.n_parts) if p not in taken]
            if not free:
                raise ValueError(f"the cluster needs more than the service's {self.n_parts} parts of "
                                 f"{self.part_bytes} bytes that hold nothing yet (build it with more sum_parts, "
                                 f"or push less)")
            self.shares[key] = free[0]
        return self.shares[key]


class _Share:
    """See :meth:`RtlSummationService.server`."""

    def __init__(self, svc):
        self.svc = svc

    def push(self, part, worker, data):
        svc = self.svc
        p = svc._share_part(self, part)
        data = np.asarray(data, dtype=np.uint8)
        if svc.asynchronous:
            return np.frombuffer(svc.run({worker: [("push", p, data), ("pull", p)]})[0][worker][0], np.uint8)
        svc.push(worker, p, data)
        if svc.rounds[p]["sum"] is None:
            return None
        pulled, _ = svc.run({w: [("pull", p)] for w in range(svc.n)})      # every worker pulls: the part is free
        return np.frombuffer(pulled[0][0], np.uint8)

    def pull(self, part):
        if not self.svc.asynchronous:
            raise ValueError("pull is the asynchronous mode's read; a synchronous push returns the sum")
        key = (id(self), part)
        if key not in self.svc.shares:
            return None
        return np.frombuffer(self.svc.pull(0, self.svc.shares[key]), np.uint8)


def run_summation(rtl, asynchronous=False, rounds=2, dtype="fp32", op="sum", seed=1):
    """Rounds of BytePS training on the RTL service: in each round every worker pushes a seeded random part
    (gradients; in asynchronous mode delta parameters) to every part of the service and pulls every part; the
    synchronous workers at once, the asynchronous ones one after another in a random order. Every pulled byte
    is checked against the golden service; the service's counters (its registers) must agree. Returns a report:
    ``checked`` bytes, ``cycles`` and ``link_bound`` (flits the busiest CCI path to the service carries, one per
    cycle) and ``service_bound`` (requests of all workers, the service taking one per cycle) per round."""
    from ..run import random_inputs
    svc = RtlSummationService(rtl, dtype, op, asynchronous)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, not {rounds}")
    names = ("PARTS_SUMMED", "PUSHES_APPLIED", "BAD_REQUESTS")
    before = {name: svc.reg_read(name) for name in names}       # the counters count since reset
    rng = np.random.default_rng(seed)
    elems = svc.part_bytes // dtype_bytes(svc.dtype)
    rows = []
    for r in range(rounds):
        scripts = {}
        order = list(rng.permutation(svc.n)) if asynchronous else list(range(svc.n))
        for w in order:
            data = random_inputs("allreduce", elems * svc.n_parts, 1, svc.dtype, 0, rng)[0]
            raw = data.view(np.uint8).reshape(svc.n_parts, svc.part_bytes)
            parts = list(rng.permutation(svc.n_parts))
            scripts[int(w)] = [("push", int(p), raw[p]) for p in parts] + [("pull", int(p)) for p in parts]
        checked0 = svc.checked
        _, cycles = svc.run(scripts)
        flits = 2 * svc.n_parts * svc.pb          # push and pull beats of one worker
        rows.append({"round": r, "checked": svc.checked - checked0, "cycles": cycles,
                     "link_bound": flits * (svc.n if asynchronous else 1), "service_bound": flits * svc.n})
    counters = {name: (svc.reg_read(name) - before[name]) & 0xFFFFFFFF for name in names}
    want = {"PARTS_SUMMED": 0 if asynchronous else rounds * svc.n_parts,
            "PUSHES_APPLIED": rounds * svc.n * svc.n_parts * svc.pb if asynchronous else 0, "BAD_REQUESTS": 0}
    if counters != want:
        raise MismatchError(f"the service's counters {counters} differ from the requests sent {want}")
    return {"workers": svc.n, "parts": svc.n_parts, "part_bytes": svc.part_bytes, "beat_bytes": svc.bb,
            "mode": "async" if asynchronous else "sync", "dtype": svc.dtype.name, "op": svc.op.name,
            "rounds": rows, "checked": svc.checked, "counters": counters}


def run_byteps(rtl, asynchronous=False, sizes=(48, 16), k=1, dtype="fp32", op="sum", seed=1):
    """One BytePS iteration of ``rtl.n`` GPU machines and ``k`` CPU machines (:class:`BytePSCluster
    <syncfabric.host.coarse.byteps.BytePSCluster>`) whose summation services are shares of the RTL service,
    parts of at most one service part: every worker pushes seeded random tensors of ``sizes`` bytes (in
    asynchronous mode one worker after another, each push answered with the latest parameters) and pulls the
    result. Every answer equals a golden cluster's fed the same pushes (and every part's bytes the golden
    service's). Returns ``checked`` (bytes the RTL shares compared), ``parts`` and ``cycles``."""
    from ..run import random_inputs
    from .byteps import BytePSCluster
    svc = RtlSummationService(rtl, dtype, op, asynchronous)
    eb = dtype_bytes(svc.dtype)
    if not sizes or any(n <= 0 or n % eb for n in sizes):
        raise ValueError(f"tensor sizes {list(sizes)} must be whole, positive numbers of {svc.dtype.name} elements")
    clusters = [BytePSCluster(svc.n, k, dtype, op, svc.part_bytes, asynchronous, service=s) for s in (svc, None)]
    rng = np.random.default_rng(seed)
    grads = [[random_inputs("allreduce", n // eb, 1, svc.dtype, 0, rng)[0] for n in sizes] for _ in range(svc.n)]
    t0 = rtl.cycles()
    answers = [[c.push(w, grads[w]) for w in range(svc.n)] for c in clusters]
    answers = [a + [c.pull(w) for w in range(svc.n)] for a, c in zip(answers, clusters)]
    cycles = rtl.cycles() - t0
    for got, want in zip(*answers):
        if (got is None) != (want is None) or got is not None and any(
                g.tobytes() != x.tobytes() for g, x in zip(got, want)):
            raise MismatchError("the BytePS cluster on the RTL service answered differently from the golden cluster")
    return {"workers": svc.n, "cpu_machines": k, "mode": "async" if asynchronous else "sync", "sizes": list(sizes),
            "parts": len(clusters[0].parts), "checked": svc.checked, "cycles": cycles}
