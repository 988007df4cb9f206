"""cocotb testbench of :class:`~syncfabric.host.transports.cocotb.CocotbTransport`: the asynchronous driver, over the
transport, against the register bank of the ACE map (``AceConfig.small()``) in a stand-in top.

:class:`CsrTestTop` is the bank with a memory behind each window and a minimal stand-in for the engine: a
cycle counter, constant port and stall counters, and a "command processor" that consumes the submission
ring at once when the doorbell rings and raises IRQ.cpl. It checks the transport and the driver's use of the
register map end to end (pins, ack timing, 64-bit halves, windows, the interrupt line) in Verilog; the
engine's behaviour is not modelled. Run by ``tests/hdl/test_csr.py``.
"""

import cocotb
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi.memory import Memory as MemoryModel

from ..hdl.ace.config import AceConfig
from ..hdl.ace.regs import IRQ_CPL, PORT_COUNTERS, STALL_CAUSES, ace_regmap
from ..hdl.common.csr import CsrBank, CsrSignature
from ..hdl.common.layouts import DESCRIPTOR_BYTES, descriptor_layout, unpack_bytes
from ..host.driver import AceDriver
from ..host.programs import decode_entry, program_entry
from ..sim.golden.algorithms import generate
from ..sim.golden.program import Step
from ..host.transports.cocotb import CocotbTransport

__all__ = ["CsrTestTop", "CFG"]

#: The configuration of the stand-in (its register map sizes the windows).
CFG = AceConfig.small()


class CsrTestTop(wiring.Component):
    """The ACE register bank of :data:`CFG` with window memories and a stand-in engine (module docstring)."""

    csr: Out(CsrSignature())
    irq: Out(1)

    def elaborate(self, platform):
        m = Module()
        rm = ace_regmap(CFG)
        m.submodules.bank = bank = CsrBank(rm)
        wiring.connect(m, wiring.flipped(self.csr), bank.bus)
        for w in rm.windows():
            mem = Memory(shape=32, depth=w.words, init=[])
            m.submodules[f"mem_{w.name.lower()}"] = mem
            port = bank.window(w.name)
            rd, wr = mem.read_port(), mem.write_port()
            m.d.comb += [rd.addr.eq(port.addr), port.rdata.eq(rd.data),
                         wr.addr.eq(port.addr), wr.data.eq(port.wdata), wr.en.eq(port.we)]
        cycles = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        m.d.comb += bank.reg("CYCLES").eq(cycles)
        for p in range(CFG.n_ports):
            for k, name in enumerate(PORT_COUNTERS):
                m.d.comb += bank.reg(name, p).eq(1000 * (p + 1) + k)
        for i in range(len(STALL_CAUSES)):
            m.d.comb += bank.reg("STALL", i).eq(i + 1)
        sq_head = Signal(32)
        doorbell = bank.strobe("SQ_TAIL")
        with m.If(doorbell):
            m.d.sync += sq_head.eq(bank.reg("SQ_TAIL"))
        m.d.comb += [
            bank.reg("SQ_HEAD").eq(sq_head),
            bank.set("IRQ").eq(Mux(doorbell, IRQ_CPL, 0)),
            self.irq.eq((bank.reg("IRQ") != 0) & bank.field("CTRL", "irq_enable")),
        ]
        return m


async def _start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.csr__we.value = 0
    dut.csr__re.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 1)


@cocotb.test()
async def driver_over_cocotb_transport(dut):
    """check_config, rings, windows, a communicator's programs read back through the windows, a posted
    descriptor in memory, the doorbell and the interrupt, and the counters."""
    await _start(dut)
    mem = MemoryModel(size=1 << 16)
    transport = CocotbTransport(dut, dut.clk, mem=mem, irq=dut.irq)
    drv = AceDriver(transport, CFG)
    rm = drv.regmap

    cfg_regs = await drv.check_config()
    assert cfg_regs["CFG0"]["n_buffers"] == CFG.n_buffers

    await drv.write("SQ_BASE", 0x1234_5678_9ABC_DEF0)
    assert await transport.read_reg(rm.addr("SQ_BASE")) == 0x9ABC_DEF0
    assert await transport.read_reg(rm.addr("SQ_BASE") + 4) == 0x1234_5678

    await drv.configure(0x1000, 8, 0x2000, 8)
    assert await drv.read_fields("CTRL") == {"enable": 1, "irq_enable": 1, "abort": 0}
    await drv.add_window(1, 0x8000, 0x4000)
    assert (await drv.read("WIN_BASE", 1), await drv.read("WIN_SIZE", 1)) == (0x8000, 0x4000)

    programs = generate("allreduce", topology="ring:4")
    placed = await drv.configure_comm(1, 2, 4, {"allreduce": programs[2]}, "ring:4")
    (info,) = placed.values()
    words = programs[2].instruction_words()
    raw = await drv.read_window("IMEM", 2 * info["imem"], 2 * len(words))
    assert [raw[2 * i] | raw[2 * i + 1] << 32 for i in range(len(words))] == list(words)
    assert [Step.decode(raw[2 * i] | raw[2 * i + 1] << 32) for i in range(len(words))] == \
        [s for ph in programs[2].phases for s in ph.steps]
    entry = decode_entry(await drv.read_window("PTAB", 8 * info["ptab"], 8))
    assert entry == program_entry(programs[2], info["imem"], 1)
    route = await drv.read_window("ROUTE", 1 * CFG.max_ranks, 4)
    assert route == [8, 8, 0, 8]           # a unidirectional ring always leaves on port 0
    assert await drv.read_fields("COMM_CFG", 1) == {"rank": 2, "size": 4, "enable": 1}

    assert dut.irq.value == 0
    index = await drv.post({"collective": "allreduce", "dtype": "fp32", "op": "sum", "comm": 1, "count": 16,
                            "src": 0x8000, "dst": 0x9000, "cookie": 77})
    assert index == 0
    desc = unpack_bytes(descriptor_layout(), mem.read(0x1000, DESCRIPTOR_BYTES))
    assert (desc["comm"], desc["count"], desc["cookie"]) == (1, 16, 77)
    assert await transport.wait_irq(100)
    assert await drv.read("SQ_HEAD") == 1, "the stand-in consumed the descriptor"
    await drv.write("IRQ", IRQ_CPL)
    assert not await transport.wait_irq(20)

    t0 = await transport.cycles()
    counters = await drv.counters()
    assert counters["TX_FLITS"] == [1000, 2000] and counters["RX_CRC_ERRS"] == [1004, 2004]
    assert counters["STALL"]["cpl_ring_full"] == len(STALL_CAUSES)
    assert counters["CYCLES"] > 0
    assert await transport.cycles() > t0
    assert await drv.read("CYCLES") > counters["CYCLES"]
