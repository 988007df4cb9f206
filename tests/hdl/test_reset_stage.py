"""The engine module's registered reset (``ResetStage``, hdl/system/top.py).

A counter under :class:`ResetStage` in Amaranth's simulator stays at its reset value while ``rst`` is high
and for one cycle after it falls, then counts; ``rst`` pulsed again resets it one cycle late. In the engine's
Verilog (``engine_verilog``, as the system testbenches convert it) the ``rst`` pin has one reader, the reset
register, so no logic of the engine depends on the pin combinationally (what makes a simulator re-evaluate it
whenever an input moves).
"""

import dataclasses
import re

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.system.top import ENGINE_MODULE, ResetStage
from syncfabric.host.transports.ace import ace_engine
from syncfabric.host.transports.harness import verilog_for


class Counter(wiring.Component):
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + 1)
        return m


def test_the_design_leaves_reset_one_cycle_after_rst_falls():
    dut = Counter()
    stage = ResetStage(dut)
    sim = Simulator(stage)
    sim.add_clock(1e-8, domain="sync")
    seen = []

    async def bench(ctx):
        ctx.set(stage.rst, 1)
        for _ in range(3):
            await ctx.tick()
            seen.append(ctx.get(dut.count))
        ctx.set(stage.rst, 0)
        for _ in range(4):
            await ctx.tick()
            seen.append(ctx.get(dut.count))
        ctx.set(stage.rst, 1)           # a reset pulse of one cycle takes effect one cycle later
        await ctx.tick()
        seen.append(ctx.get(dut.count))
        ctx.set(stage.rst, 0)
        for _ in range(3):
            await ctx.tick()
            seen.append(ctx.get(dut.count))

    sim.add_testbench(bench)
    sim.run()
    # held through the reset and the cycle after it; the pulse's edge still counts (4), the next one resets
    assert seen == [0, 0, 0, 0, 1, 2, 3, 4, 0, 1, 2], seen


def test_the_engine_rst_pin_feeds_only_the_reset_register():
    # the Verilog the system testbenches build (converted once and cached by the harness)
    text = verilog_for(ace_engine, {"cfg": dataclasses.asdict(AceConfig.small())}, ENGINE_MODULE).read_text()
    module = text[text.index(f"module {ENGINE_MODULE}("):]
    module = module[:module.index("endmodule")]
    body = module[module.index(");") + 2:]
    pin = re.compile(r"(?<![\w$\\.])rst(?![\w$])")    # the identifier rst (not rst$60, rst_q, .rst()
    readers = [line.strip() for line in body.splitlines()
               if pin.search(line) and not re.match(r"\s*(input|wire)\s+rst;", line)]
    # the register (`<= rst;`) and Amaranth's name for the pin (`assign rst_pin = rst;`), nothing else
    assert len(readers) == 2, readers
    assert any(re.search(r"<= rst;$", r) for r in readers), readers
    assert any(re.fullmatch(r"assign rst_pin = rst;", r) for r in readers), readers
    assert f"module {ENGINE_MODULE}(" in text and "input rst;" in module
