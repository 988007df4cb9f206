"""Shared combinational blocks (hdl/common/logic.py) and the engine netlist's widest cell.

``one_hot(index, n)`` must equal ``(1 << index)`` truncated to ``n`` bits for every index, in range or not.
The engine's RTLIL must hold no cell wider than its widest datapath: a ``1 << signal`` on a 16-bit channel
field once built a 65,551-bit shifter whose combinational-cycle check took Amaranth 100 s of the small engine's
110 s conversion (yosys then optimised it away, so only conversion time showed it).
"""

from amaranth.back import rtlil
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.engine import AceEngine
from syncfabric.hdl.common.logic import one_hot


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
