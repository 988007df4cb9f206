"""IssueStage (hdl/ace/issuestage.py) in Amaranth's simulator: random grants come out one cycle later unchanged
(the FSM, binary and one-hot, the landing channel and count lane, the granted FSM's chunk status, slot count
and step's beats and slot of the grant's cycle), and in that cycle the stage holds back exactly its FSM, its
unit and the TX order queue its message takes (``take_q``: what the arbiter said the job takes); the holds are
flip-flop outputs (a grant changing in the cycle does not move them).

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

    async def bench(ctx):
        prev = None
        for cycle in range(600):
            g = None
            statuses = [rng.randrange(16) for _ in range(F)]
            ctx.set(dut.status, statuses)
            counts = [rng.randrange(1 << COUNT_BITS) for _ in range(F)]
            ctx.set(dut.counts, counts)
            steps = [{"beats": rng.randrange(64), "slot": rng.randrange(32), "key": rng.randrange(4096)}
                     for _ in range(F)]
            ctx.set(dut.steps, steps)
            if rng.random() < 0.8:
                fsm = rng.randrange(F)
                take = {"send": rng.randrange(1 << K), "recv": rng.randrange(1 << K), "order": rng.randrange(1 << K),
                        "load": rng.randrange(2), "store": rng.randrange(2)}
                g = {"fsm": fsm, "ch": rng.randrange(F), "count": rng.randrange(8), "take": take,
                     "status": statuses[fsm], "slot_count": counts[fsm], "step": steps[fsm]}
                ctx.set(dut.grant, {"valid": 1, "fsm": fsm, "ch": g["ch"], "count": g["count"]})
                ctx.set(dut.grant_oh, 1 << fsm)
                ctx.set(dut.take, take)
            else:
                ctx.set(dut.grant.valid, 0)
                ctx.set(dut.grant_oh, 0)
                ctx.set(dut.take, {})       # the arbiter's take is zero without a grant
            # this cycle's outputs are last cycle's grant, whatever is offered now
            o = ctx.get(dut.o)
            assert bool(o.grant.valid) == (prev is not None), cycle
            if prev is not None:
                seen["jobs"] += 1
                assert (o.grant.fsm, o.grant.ch, o.grant.count) == (prev["fsm"], prev["ch"], prev["count"]), cycle
                assert o.oh == 1 << prev["fsm"] and o.status == prev["status"], cycle
                assert o.slot_count == prev["slot_count"], cycle
                assert {n: getattr(o.step, n) for n in STEP_FIELDS} == {n: prev["step"][n] for n in STEP_FIELDS}
            t = prev["take"] if prev else {}
            want = (o.oh, t.get("send", 0), t.get("recv", 0), t.get("order", 0), t.get("load", 0), t.get("store", 0))
            got = tuple(ctx.get(x) for x in (dut.hold_fsm, dut.hold_send, dut.hold_recv, dut.hold_order,
                                             dut.hold_load, dut.hold_store))
            assert got == want, (cycle, prev)
            tq = ctx.get(dut.take_q)
            assert [getattr(tq, n) for n in ("send", "recv", "order", "load", "store")] == list(want[1:]), cycle
            seen["holds"] += any(got[1:])
            prev = g
            await ctx.tick()

    run_sim(dut, bench)
    assert seen["jobs"] > 400 and seen["holds"] > 300, seen
