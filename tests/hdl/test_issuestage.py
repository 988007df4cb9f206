"""IssueStage (hdl/ace/issuestage.py) in Amaranth's simulator: random grants of every kind of step come out one
cycle later unchanged (the step, chunk context and the job's fields of the command view), and in that cycle
the stage holds back exactly its FSM, its unit and the TX order queue its message takes; the holds are
flip-flop outputs (a grant changing in the cycle does not move them).

``SEED=<n>`` replaces the random seed.
"""

import random

from sim_helpers import run_sim, seed_for

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.issuestage import IssueStage
from syncfabric.hdl.common.layouts import COUNT_BITS
from syncfabric.sim.golden.program import StepOp

OPS = (StepOp.LOAD, StepOp.STORE, StepOp.SEND, StepOp.RECV)


def expected_holds(g):
    """(fsm, send, recv, order, load, store) hold masks for registered grant ``g`` (None: no grant)."""
    if g is None:
        return (0, 0, 0, 0, 0, 0)
    s = g["step"]
    fsm = 1 << g["fsm"]
    if s["noop"]:
        return (fsm, 0, 0, 0, 0, 0)
    op, k = s["op"], s["port"]
    send = 1 << k if op == StepOp.SEND else 0
    recv = 1 << k if op == StepOp.RECV else 0
    order = send | ((1 << s["fwd_port"]) if op == StepOp.RECV and s["fwd"] else 0)
    return (fsm, send, recv, order, int(op == StepOp.LOAD), int(op == StepOp.STORE))


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
            if rng.random() < 0.8:
                step = {"op": rng.choice(OPS), "port": rng.randrange(K), "fwd": rng.randrange(2),
                        "fwd_port": rng.randrange(K), "slot": rng.randrange(8), "beats": rng.randrange(64),
                        "key": rng.randrange(4096), "noop": int(rng.random() < 0.1)}
                g = {"fsm": rng.randrange(F), "ch": rng.randrange(F), "count": rng.randrange(8), "step": step,
                     "ctx": {"cmd": rng.randrange(cfg.n_cmds), "chunk": rng.randrange(1 << 16),
                             "buf": rng.randrange(cfg.n_buffers)},
                     "view": {"tag": rng.randrange(1 << 16), "rank": rng.randrange(8), "null": rng.randrange(2)},
                     "slot_count": rng.randrange(1 << COUNT_BITS)}
                ctx.set(dut.grant, {"valid": 1, "fsm": g["fsm"], "ch": g["ch"], "count": g["count"]})
                ctx.set(dut.step, step)
                ctx.set(dut.ctx, g["ctx"])
                ctx.set(dut.view, g["view"])
                ctx.set(dut.count, g["slot_count"])
            else:
                ctx.set(dut.grant.valid, 0)
            # this cycle's outputs are last cycle's grant, whatever is offered now
            o = ctx.get(dut.o)
            assert bool(o.grant.valid) == (prev is not None), cycle
            if prev is not None:
                seen["jobs"] += 1
                assert (o.grant.fsm, o.grant.ch, o.grant.count) == (prev["fsm"], prev["ch"], prev["count"]), cycle
                for name, v in prev["step"].items():
                    assert getattr(o.step, name) == v, (cycle, name)
                for name, v in prev["ctx"].items():
                    assert getattr(o.ctx, name) == v, (cycle, name)
                for name, v in prev["view"].items():
                    assert getattr(o.view, name) == v, (cycle, name)
                assert o.slot_count == prev["slot_count"], cycle
            got = tuple(ctx.get(x) for x in (dut.hold_fsm, dut.hold_send, dut.hold_recv, dut.hold_order,
                                             dut.hold_load, dut.hold_store))
            assert got == expected_holds(prev), (cycle, prev)
            seen["holds"] += any(got[1:])
            prev = g
            await ctx.tick()

    run_sim(dut, bench)
    assert seen["jobs"] > 400 and seen["holds"] > 300, seen
