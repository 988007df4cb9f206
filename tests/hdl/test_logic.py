"""Shared combinational blocks (hdl/common/logic.py) and the engine netlist's widest cell.

``one_hot(index, n)`` must equal ``(1 << index)`` truncated to ``n`` bits for every index, in range or not;
``at_least_two(bits)`` must equal ``sum(bits) > 1`` for every input of several widths; ``late`` lags a cycle;
``up_down`` steps (and wraps) as an adder would, ``up_down_below`` flags the count against the cap of the
cycle before.
The engine's RTLIL must hold no cell wider than its widest datapath: a ``1 << signal`` on a 16-bit channel
field once built a 65,551-bit shifter whose combinational-cycle check took Amaranth 100 s of the small engine's
110 s conversion (yosys then optimised it away, so only conversion time showed it).
"""

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.engine import AceEngine
from syncfabric.hdl.common.logic import at_least_two, late, one_hot, up_down, up_down_below


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_at_least_two_matches_a_population_count_for_every_input(n):
    bits = [Signal(name=f"b{i}") for i in range(n)]
    out = Signal()
    m = Module()
    m.d.comb += out.eq(at_least_two(bits))
    sim = Simulator(m)

    async def bench(ctx):
        for v in range(1 << n):
            for i, b in enumerate(bits):
                ctx.set(b, v >> i & 1)
            assert ctx.get(out) == int(bin(v).count("1") > 1), v

    sim.add_testbench(bench)
    sim.run()


def test_late_shows_the_value_of_the_cycle_before():
    x, y = Signal(8), Signal(8)
    m = Module()
    m.d.comb += y.eq(late(m, x))
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def bench(ctx):
        prev = 0
        for v in (3, 200, 0, 77, 77, 5):
            ctx.set(x, v)
            assert ctx.get(y) == prev
            await ctx.tick()
            prev = v

    sim.add_testbench(bench)
    sim.run()


def test_up_down_steps_like_an_adder_and_wraps():
    import random

    count, up, down = Signal(3), Signal(), Signal()
    m = Module()
    up_down(m, count, up, down)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    rng = random.Random(5)

    async def bench(ctx):
        expect = 0
        for _ in range(200):
            u, d = rng.randrange(2), rng.randrange(2)
            ctx.set(up, u)
            ctx.set(down, d)
            await ctx.tick()
            expect = (expect + u - d) % 8
            assert ctx.get(count) == expect

    sim.add_testbench(bench)
    sim.run()


def test_up_down_below_flags_the_count_against_the_cap_of_the_cycle_before():
    import random

    count, up, down, cap = Signal(3), Signal(), Signal(), Signal(3)
    m = Module()
    below = up_down_below(m, count, up, down, cap)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    rng = random.Random(6)

    async def bench(ctx):
        expect = 0
        assert ctx.get(below)                        # after reset: room
        for _ in range(300):
            u, d, c = rng.randrange(2), rng.randrange(2), rng.randrange(8)
            ctx.set(up, u)
            ctx.set(down, d)
            ctx.set(cap, c)
            await ctx.tick()
            expect = (expect + u - d) % 8
            assert ctx.get(count) == expect and ctx.get(below) == (expect < c)

    sim.add_testbench(bench)
    sim.run()


def test_one_hot_matches_a_truncated_shift_for_every_index():
    index, out = Signal(5), Signal(6)
    m = Module()
    m.d.comb += out.eq(one_hot(index, 6))
    sim = Simulator(m)
    seen = {}

    async def bench(ctx):
        for i in range(32):
            ctx.set(index, i)
            seen[i] = ctx.get(out)

    sim.add_testbench(bench)
    sim.run()
    assert seen == {i: (1 << i) & 0x3F for i in range(32)}


def cell_widths(text):
    """``(Y_WIDTH, cell type)`` of every cell in RTLIL ``text`` that has an output width."""
    widths, kind = [], None
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["cell"]:
            kind = words[1]
        elif words[:2] == ["parameter", "\\Y_WIDTH"]:
            widths.append((int(words[2]), kind))
    return widths


def test_no_cell_of_the_small_engine_is_wider_than_its_widest_datapath():
    cfg = AceConfig.small()
    widths = cell_widths(rtlil.convert(AceEngine(cfg), name="ace_engine", emit_src=False))
    assert len(widths) > 1000
    # the widest legitimate values: a beat (128 bits) with its side bits, a packet header, a descriptor
    widest = max(widths)
    assert widest[0] <= 512, f"a {widest[1]} cell {widest[0]} bits wide"
