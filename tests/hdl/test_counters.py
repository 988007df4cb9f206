"""ControlCounters in Amaranth's simulator: random per-cycle events against a model of the counters (each takes
its events into a flip-flop and counts in 16-bit parts, so it trails them by COUNTER_LAG cycles)."""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.counters import COUNTER_LAG, ControlCounters
from syncfabric.hdl.ace.regs import STALL_CAUSES
from syncfabric.hdl.common.layouts import MAX_PHASES

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()


@pytest.mark.parametrize("cfg", [CFG, AceConfig.profile("paper")], ids=["small", "paper"])
def test_counters_count_each_event_once_per_cycle(cfg):
    """Every counter equals the sum of its events up to its lag (COUNTER_LAG: the event's flip-flop and the
    16-bit parts' carries) before the current cycle, cycle by cycle (the paper engine: 16 FSMs)."""
    rng = random.Random(seed_for(5))
    dut = ControlCounters(cfg)
    F = cfg.n_fsms
    names = ["fsm_busy", "steps", "step_gap", *(f"stall{i}" for i in range(len(STALL_CAUSES))),
             *(f"phase{p}" for p in range(MAX_PHASES))]
    lag = {n: COUNTER_LAG[64 if n in ("fsm_busy", "steps", "step_gap") else 32] for n in names}
    events = {n: [] for n in names}

    def read(ctx, n):
        if n.startswith("stall"):
            return ctx.get(dut.stall[int(n[5:])])
        if n.startswith("phase"):
            return ctx.get(dut.phase_busy[int(n[5:])])
        return ctx.get(getattr(dut, n))

    async def bench(ctx):
        for t in range(1, 301):
            active, step, gap = rng.getrandbits(F), rng.getrandbits(1), rng.getrandbits(F)
            cause = {c: rng.getrandbits(1) for c in STALL_CAUSES}
            used = rng.getrandbits(MAX_PHASES)
            ctx.set(dut.active, active)
            ctx.set(dut.step, step)
            ctx.set(dut.gap, gap)
            ctx.set(dut.cause, cause)
            ctx.set(dut.phase_used, used)
            events["fsm_busy"].append(bin(active).count("1"))
            events["steps"].append(step)
            events["step_gap"].append(bin(gap).count("1"))
            for i, c in enumerate(STALL_CAUSES):
                events[f"stall{i}"].append(cause[c])
            for p in range(MAX_PHASES):
                events[f"phase{p}"].append(used >> p & 1)
            await ctx.tick()
            for n in names:
                assert read(ctx, n) == sum(events[n][:max(0, t - lag[n])]), (n, t)

    run_sim(dut, bench)


def test_split_counters_carry_across_their_parts_and_wrap():
    """split_counter's carries between parts and its wrap: a 12-bit counter of three 4-bit parts, increments of
    0, 1, 5 and 7 (so a part carries every few cycles), against a plain count two cycles behind, through about
    1.6 wraps; an increment as wide as a part is refused."""
    from amaranth.hdl import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from syncfabric.hdl.common.logic import split_counter

    class Dut(wiring.Component):
        inc: In(3)
        count: Out(12)

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.count.eq(split_counter(m, self.inc, 12, "c", part=4))
            return m

    dut = Dut()
    rng = random.Random(seed_for(6))
    incs = [rng.choice((0, 1, 7, 5)) for _ in range(2000)]

    async def bench(ctx):
        for t, inc in enumerate(incs, 1):
            ctx.set(dut.inc, inc)
            await ctx.tick()
            assert ctx.get(dut.count) == sum(incs[:max(0, t - 2)]) % 4096, t

    run_sim(dut, bench)
    with pytest.raises(ValueError, match="narrower than a part"):
        split_counter(None, Signal(4), 12, "wide", part=4)    # refused before it builds anything
