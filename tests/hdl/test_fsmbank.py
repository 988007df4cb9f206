"""FsmBank in Amaranth's simulator: chunks enqueued for random FSMs, the testbench playing the decoder (a
picked request comes back three cycles later), the issue arbiter and stage (grant a random ready FSM, a cycle
late), the SEND unit (retires SENDs by FSM after random delays) and the partition manager (moves chunks on at
random).

Checked: every request the decoder gets carries the picked FSM's own chunk and pc (which of the FSMs asking for a
step is picked is OldestPick's, tested in test_arbiter.py); the age matrix is the one of the FSMs' chunks in every
cycle; a decoded step reaches the FSM it names; in the cycle after a grant the granted FSM's step (still the one
it offered), context and view are the ones selected and it offers nothing; each FSM runs its chunks in the order
they were enqueued and each chunk's
steps in program order; unit completions reach the FSM they name (an FSM with a SEND in flight holds its
chunk); the bank ends with no FSM active.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.arbiter import age_matrix_model
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.fsmbank import FsmBank
from syncfabric.sim.golden.program import StepOp

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
F = CFG.n_fsms
N_STEPS = 5


def test_the_bank_routes_every_fsm_event_to_its_fsm():
    rng = random.Random(seed_for(31))
    dut = FsmBank(CFG)
    to_enqueue = [{"fsm": rng.randrange(F), "cmd": rng.randrange(CFG.n_cmds), "chunk": n, "buf": n % CFG.n_buffers,
                   "seq": n, "final": int(n % 3 == 0)} for n in range(40)]
    # each command's view: one phase of N_STEPS steps; its tag tells the commands apart
    views = [{"n_phases": 1, "phases": [{"first": 0, "stop": N_STEPS}], "tag": 100 + c, "rank": c}
             for c in range(CFG.n_cmds)]

    async def bench(ctx):
        enq = list(to_enqueue)
        started = {f: [] for f in range(F)}     # chunks each FSM took, in order
        granted = {}                            # chunk -> step keys granted
        decoding, inflight = [], {f: 0 for f in range(F)}
        view_of = [None] * F
        picks = 0
        g_prev = prev_step = None               # the FSM granted last cycle and its step
        for cycle in range(4000):
            # issue stage: last cycle's grant, whose job goes out now, selects the granted FSM's registers (and
            # reaches the FSM, whose decode request depends on it: set first)
            ctx.set(dut.grant, 0 if g_prev is None else 1 << g_prev)
            ctx.set(dut.own_load.valid, 0)
            # the view memory: the row of the address presented last cycle
            ctx.set(dut.views, [views[a] if a is not None else {} for a in view_of])
            view_of = [ctx.get(dut.view_addr[f]) for f in range(F)]
            q_ready = ctx.get(dut.q_ready)
            go = bool(enq) and q_ready >> enq[0]["fsm"] & 1 and rng.random() < 0.5
            ctx.set(dut.enq, {"valid": go, "fsm": enq[0]["fsm"] if enq else 0,
                              "chunk": {k: v for k, v in enq[0].items() if k != "fsm"} if enq else {}})
            # decoder
            ctxs = [ctx.get(dut.ctx[f]) for f in range(F)]
            age = [[bool(ctx.get(dut.age[f]) >> g & 1) for g in range(F)] for f in range(F)]
            assert age == age_matrix_model([c.seq for c in ctxs]), (cycle, [c.seq for c in ctxs])
            if ctx.get(dut.dec_req.valid):
                req = ctx.get(dut.dec_req.payload)
                c = ctxs[req.fsm]
                assert (req.cmd, req.chunk, req.buf) == (c.cmd, c.chunk, c.buf)
                decoding.append([3, req.fsm, req.pc])
                picks += 1
            for d in decoding:
                d[0] -= 1
            wb = decoding.pop(0) if decoding and decoding[0][0] == 0 else None
            if wb is not None:
                op = StepOp.SEND if wb[2] % 2 else StepOp.STORE
                ctx.set(dut.dec_wb.payload, {"fsm": wb[1], "step": {"op": op, "key": wb[2], "slot": wb[2]}})
            ctx.set(dut.dec_wb.valid, wb is not None)
            await ctx.delay(1e-9)
            offers = [ctx.get(dut.offers[f]) for f in range(F)]
            if g_prev is not None:
                assert ctx.get(dut.g_step) == prev_step
                gc = ctx.get(dut.g_ctx)
                assert (gc.cmd, gc.chunk, gc.seq, gc.final) == (ctxs[g_prev].cmd, ctxs[g_prev].chunk, ctxs[g_prev].seq,
                                                                int(ctxs[g_prev].chunk % 3 == 0))
                assert ctx.get(dut.g_view.tag) == 100 + ctxs[g_prev].cmd
                assert not offers[g_prev].ready, "offered while its grant goes out"
            # arbiter: a random ready FSM
            ready = [f for f in range(F) if offers[f].ready]
            g = rng.choice(ready) if ready and rng.random() < 0.7 else None
            # SEND unit: retire one FSM's oldest SEND now and then
            busy = [f for f in range(F) if inflight[f]]
            u = rng.choice(busy) if busy and rng.random() < 0.3 else None
            ctx.set(dut.unit_done, [{"valid": u is not None, "fsm": u or 0, "status": 0}]
                    + [{}] * (2 * CFG.n_ports - 1))
            # partition manager
            movers = [f for f in range(F) if ctx.get(dut.handoff) >> f & 1 or ctx.get(dut.at_end) >> f & 1]
            mv = rng.choice(movers) if movers and rng.random() < 0.5 else None
            ctx.set(dut.move, {"valid": mv is not None, "fsm": mv or 0})
            if any(inflight.values()):
                mask = sum(1 << f for f in range(F) if inflight[f])
                assert ctx.get(dut.active) & mask == mask, "an FSM with a SEND in flight is idle"
            await ctx.tick()
            if go:
                e = enq.pop(0)
                started[e["fsm"]].append(e["chunk"])
            if g_prev is not None:
                granted.setdefault(ctxs[g_prev].chunk, []).append(prev_step.key)
                inflight[g_prev] += prev_step.op == StepOp.SEND
            g_prev, prev_step = g, None if g is None else offers[g].step
            if u is not None:
                inflight[u] -= 1
            if (not enq and not decoding and ctx.get(dut.active) == 0
                    and sum(map(len, granted.values())) == len(to_enqueue) * N_STEPS):     # (none still queued)
                break
        assert not enq and ctx.get(dut.active) == 0, "did not finish"
        assert picks == len(to_enqueue) * N_STEPS
        for f in range(F):
            assert started[f] == [e["chunk"] for e in to_enqueue if e["fsm"] == f]
        assert {c: k for c, k in granted.items()} == {e["chunk"]: list(range(N_STEPS)) for e in to_enqueue}

    run_sim(dut, bench)
