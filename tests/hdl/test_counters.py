"""ControlCounters in Amaranth's simulator: random per-cycle events against a model of the counters (the stall
counters take their causes a cycle late)."""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.counters import ControlCounters
from syncfabric.hdl.ace.regs import STALL_CAUSES
from syncfabric.hdl.common.layouts import MAX_PHASES

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()


def test_counters_count_each_event_once_per_cycle():
    rng = random.Random(seed_for(5))
    dut = ControlCounters(CFG)
    F = CFG.n_fsms
    want = {"fsm_busy": 0, "steps": 0, "step_gap": 0, "stall": [0] * len(STALL_CAUSES), "phase": [0] * MAX_PHASES}

    async def bench(ctx):
        late = [0] * len(STALL_CAUSES)      # the causes of the cycle before, counted in this one
        for _ in range(300):
            active, step, gap = rng.getrandbits(F), rng.getrandbits(1), rng.randint(0, F)
            cause = {c: rng.getrandbits(1) for c in STALL_CAUSES}
            used = rng.getrandbits(MAX_PHASES)
            ctx.set(dut.active, active)
            ctx.set(dut.step, step)
            ctx.set(dut.gap, gap)
            ctx.set(dut.cause, cause)
            ctx.set(dut.phase_used, used)
            await ctx.tick()
            want["fsm_busy"] += bin(active).count("1")
            want["steps"] += step
            want["step_gap"] += gap
            for i, c in enumerate(STALL_CAUSES):
                want["stall"][i] += late[i]
                late[i] = cause[c]
            for p in range(MAX_PHASES):
                want["phase"][p] += used >> p & 1
            assert ctx.get(dut.fsm_busy) == want["fsm_busy"]
            assert ctx.get(dut.steps) == want["steps"]
            assert ctx.get(dut.step_gap) == want["step_gap"]
            assert [ctx.get(dut.stall[i]) for i in range(len(STALL_CAUSES))] == want["stall"]
            assert [ctx.get(dut.phase_busy[p]) for p in range(MAX_PHASES)] == want["phase"]

    run_sim(dut, bench)
