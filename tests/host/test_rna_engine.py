"""RNA's protocol over the engines (host/rna.py): every round's partial all-reduce and the hierarchical mode's
broadcasts run on the RTL, checked against the golden executor, and the protocol's run agrees bit for bit with
the model's run of the same protocol."""

import numpy as np
import pytest

from syncfabric.host.rna import EngineCollectives
from syncfabric.host.system import System
from syncfabric.sim.golden import rna

from pathlib import Path

RING4 = str(Path(__file__).resolve().parents[2] / "examples" / "ring4.yaml")
# the rows of a 2x2 torus as communicators besides the world: 3 of the engine's communicators
TORUS = {"topology": "torus:2x2x1", "backend": "verilator", "engine": {"profile": "small", "n_comms": 4},
         "links": {"latency": 10}, "memory": {"bytes": "64KiB"}}


class Recorder(rna.Collectives):
    """Passes through to ``inner`` and keeps the time of each call, in order."""

    def __init__(self, inner):
        self.inner, self.times = inner, []

    def allreduce(self, ranks, contributions):
        total, count, ms = self.inner.allreduce(ranks, contributions)
        self.times.append(ms)
        return total, count, ms

    def broadcast(self, ranks, root, data):
        ms = self.inner.broadcast(ranks, root, data)
        self.times.append(ms)
        return ms


class Replay(rna.SumCollectives):
    """The model's float32 sum, with the times an earlier run measured."""

    def __init__(self, times):
        super().__init__(None)
        self.times = list(times)

    def allreduce(self, ranks, contributions):
        self.allreduce_ms = lambda n: self.times.pop(0)
        return super().allreduce(ranks, contributions)

    def broadcast(self, ranks, root, data):
        return self.times.pop(0)


@pytest.mark.cocotb
@pytest.mark.slow
def test_hierarchical_rna_on_the_engines_agrees_bit_for_bit_with_the_model():
    """Two groups of two ranks (the rows of a 2x2 torus, communicators of their own): each group round is a
    partial all-reduce with null ranks on the engines (checked against the golden executor inside
    EngineCollectives) and a broadcast of the server's model from the initiator. Replaying the engines' times
    on the model's sums must give the same rounds and the same parameters, bit for bit (two ranks add in one
    order)."""
    n, seed = 4, 5
    task = rna.LeastSquares(n, dim=16, seed=seed)
    settings = rna.RnaSettings(probes=2, lr=1.0, groups=[[0, 1], [2, 3]], ps_ms=0.5)
    delays = rna.Delays(5.0, 30.0)
    with System(TORUS) as system:
        engines = EngineCollectives(system, 16)
        rec = Recorder(engines)
        try:
            got = rna.simulate(task, delays, settings, rec, n, rounds=6, seed=seed)
        finally:
            engines.close()
        stats = engines.stats
    # the other group's next round was in flight when the sixth round ended: its all-reduce ran, not its broadcast
    assert (stats["allreduce"], stats["broadcast"]) == (7, 6) and stats["cycles"] > 0
    assert any(r.nulls for r in got.rounds), "no round had a null contribution: the NULL path went untested"
    want = rna.simulate(task, delays, settings, Replay(rec.times), n, rounds=6, seed=seed)
    assert [(r.group, r.initiator, r.contributors, r.nulls) for r in got.rounds] == \
        [(r.group, r.initiator, r.contributors, r.nulls) for r in want.rounds]
    for a, b in zip(got.params, want.params):
        assert a.tobytes() == b.tobytes()


@pytest.mark.cocotb
def test_rna_rounds_on_a_ring_of_engines_with_null_ranks_and_a_bad_contribution_refused():
    """RNA with two probes on the ring of four small engines (the examples' build): every round a partial
    all-reduce checked against the golden executor inside EngineCollectives; stragglers make null ranks;
    the engines' time is the rounds' communication time."""
    n, seed = 4, 3
    task = rna.LeastSquares(n, dim=32, seed=seed)
    with System(RING4) as system:
        coll = EngineCollectives(system, 32)
        try:
            res = rna.simulate(task, rna.Delays(5.0, 40.0), rna.RnaSettings(probes=2, lr=1.0), coll, n,
                               rounds=8, seed=seed)
            with pytest.raises(ValueError, match="shape"):
                coll.allreduce(list(range(n)), {r: np.zeros(33 if r else 32, np.float32) for r in range(n)})
            # the hierarchical mode's broadcast of the server's model (checked on every rank inside)
            assert coll.broadcast(list(range(n)), 2, res.params[0]) > 0
        finally:
            coll.close()
    assert coll.stats["allreduce"] == 8 and coll.stats["broadcast"] == 1
    assert coll.stats["checked_bytes"] == 9 * n * 32 * 4
    assert sum(r.nulls for r in res.rounds) > 0
    ms = coll.stats["cycles"] / system.config.clock_mhz / 1e3
    assert sum(r.end - r.activate for r in res.rounds) < ms
    assert res.rounds[-1].loss < task.loss(task.initial())
    with pytest.raises(ValueError, match="count"):
        EngineCollectives(None, 0)
