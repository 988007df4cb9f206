"""IssueStage (hdl/ace/issuestage.py) in Amaranth's simulator: random grants come out one cycle later unchanged
(the FSM, binary and one-hot; the granted FSM's landing channel and count lane, chunk status and slot count of
the grant's cycle; its step's beats and slot, which the FSM still holds), whatever the other FSMs' candidates
do in either cycle (and the granted RECV's count lane added to the slot's), and in that cycle the stage holds
back exactly its FSM (``hold_fsm``) and what its job takes (``take_q``: the granted FSM's decode of the grant's
cycle: its unit, the TX order queue its message takes); the holds follow the registered grant only (a grant
changing in the cycle does not move them).

``SEED=<n>`` replaces the random seed.
"""

import random

from sim_helpers import run_sim, seed_for

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.issuestage import STEP_FIELDS, IssueStage
from syncfabric.hdl.common.layouts import COUNT_BITS


def test_grants_come_out_a_cycle_later_with_their_holds():
    cfg = AceConfig.small()
    F, K = cfg.n_fsms, cfg.n_ports
    rng = random.Random(seed_for(4711))
    dut = IssueStage(cfg)
    seen = {"holds": 0, "jobs": 0}

    def take():
        return {"send": rng.randrange(1 << K), "recv": rng.randrange(1 << K), "order": rng.randrange(1 << K),
                "load": rng.randrange(2), "store": rng.randrange(2)}

    async def bench(ctx):
        prev = None
        for cycle in range(600):
            g = None
            # every FSM's candidates change every cycle; the step of the FSM granted last cycle does not (the
            # FSM keeps it until it sees the grant)
            statuses = [rng.randrange(16) for _ in range(F)]
            counts = [rng.randrange(1 << COUNT_BITS) for _ in range(F)]
            takes = [take() for _ in range(F)]
            cands = [{"ch": rng.randrange(F), "second": rng.randrange(2), "count": rng.randrange(1 << COUNT_BITS)}
                     for _ in range(F)]
            steps = [{"beats": rng.randrange(64), "slot": rng.randrange(32), "key": rng.randrange(4096)}
                     for _ in range(F)]
            if prev is not None:
                steps[prev["fsm"]] = prev["step"]
            for port, value in ((dut.status, statuses), (dut.counts, counts), (dut.takes, takes),
                                (dut.cand, cands), (dut.steps, steps)):
                ctx.set(port, value)
            if rng.random() < 0.8:
                fsm = rng.randrange(F)
                g = {"fsm": fsm, "ch": cands[fsm]["ch"], "count": cands[fsm]["count"], "take": takes[fsm],
                     "status": statuses[fsm], "slot_count": counts[fsm], "step": steps[fsm]}
                ctx.set(dut.grant, {"valid": 1, "fsm": fsm})
                ctx.set(dut.grant_oh, 1 << fsm)
            else:
                ctx.set(dut.grant.valid, 0)
                ctx.set(dut.grant_oh, 0)
            # this cycle's outputs are last cycle's grant, whatever is offered now
            o = ctx.get(dut.o)
            assert bool(o.grant.valid) == (prev is not None), cycle
            if prev is not None:
                seen["jobs"] += 1
                assert (o.grant.fsm, o.grant.ch, o.grant.count) == (prev["fsm"], prev["ch"], prev["count"]), cycle
                assert o.oh == 1 << prev["fsm"] and o.status == prev["status"], cycle
                assert o.slot_count == prev["slot_count"], cycle
                assert o.sum_count == (prev["count"] + prev["slot_count"]) & ((1 << COUNT_BITS) - 1), cycle
                assert {n: getattr(o.step, n) for n in STEP_FIELDS} == {n: prev["step"][n] for n in STEP_FIELDS}
            t = prev["take"] if prev else {}
            want = [t.get(n, 0) for n in ("send", "recv", "order", "load", "store")]
            tq = ctx.get(dut.take_q)
            assert ctx.get(dut.hold_fsm) == o.oh, cycle
            assert [getattr(tq, n) for n in ("send", "recv", "order", "load", "store")] == want, (cycle, prev)
            seen["holds"] += any(want)
            prev = g
            await ctx.tick()

    run_sim(dut, bench)
    assert seen["jobs"] > 400 and seen["holds"] > 300, seen
