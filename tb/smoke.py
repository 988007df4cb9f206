"""A tiny design and cocotb tests that check the harness itself (build, parameters, pass and fail)."""

import cocotb
from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from ..host.transports.harness import tb_params

__all__ = ["Counter", "CounterTop", "counter_top_verilog"]


class Counter(wiring.Component):
    """Counts enabled cycles; used only to test the harness."""

    def __init__(self, width=8):
        super().__init__({"en": In(1), "count": Out(unsigned(width))})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


class CounterTop(wiring.Component):
    """A :class:`Counter` (the module ``counter``, instantiated by name) beside a free-running ``spare``
    counter of ``spare`` bits: designs that differ only outside the block, to test hierarchical blocks."""

    def __init__(self, width=8, spare=1):
        super().__init__({"en": In(1), "count": Out(unsigned(width)), "spare": Out(unsigned(spare))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = Instance("counter", i_clk=ClockSignal(), i_rst=ResetSignal(), i_en=self.en,
                                      o_count=self.count)
        m.d.sync += self.spare.eq(self.spare + 1)
        return m


def counter_top_verilog(width=8, spare=1):
    """Verilog of :class:`CounterTop` followed by its block's module ``counter``."""
    from amaranth.back import verilog
    return (verilog.convert(CounterTop(width, spare), name="counter_top", emit_src=False) + "\n"
            + verilog.convert(Counter(width), name="counter", emit_src=False))


@cocotb.test()
async def counts_enabled_cycles(dut):
    p = tb_params()
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.en.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    dut.en.value = 1
    await ClockCycles(dut.clk, p["cycles"])
    await RisingEdge(dut.clk)
    dut.en.value = 0
    await RisingEdge(dut.clk)
    width = p["params"]["width"]
    assert dut.count.value.to_unsigned() == (p["cycles"] + 1) % (1 << width)


@cocotb.test()
async def deliberately_fails(dut):
    if not tb_params().get("expect_failure"):
        return
    assert False, "this test fails on purpose to show the harness reports failures"
