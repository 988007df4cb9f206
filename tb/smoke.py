"""A tiny design and cocotb tests that check the harness itself (build, parameters, pass and fail)."""

import cocotb
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from ..host.transports.harness import tb_params

__all__ = ["Counter"]


class Counter(wiring.Component):
    """Counts enabled cycles; used only to test the harness."""

    def __init__(self, width=8):
        super().__init__({"en": In(1), "count": Out(unsigned(width))})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


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
