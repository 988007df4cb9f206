"""A prototype board's system: engines on a topology, on-chip NPU memories and the host bridge on a UART.

:class:`BoardSystem` holds the endpoints of a topology (default ``ring:2``: two engines joined by on-chip link
models, so collectives run on one board), one :class:`~syncfabric.hdl.common.axiram.AxiRam` per endpoint as its
NPU memory, a board register block (:func:`board_regmap`) and the :class:`~syncfabric.hdl.common.bridge.UartBridge`
behind a :class:`~syncfabric.hdl.common.uart.UartRx`/:class:`~syncfabric.hdl.common.uart.UartTx` pair. The board
tops in ``fpga/`` add the clock, reset and pins; the serial transport (:mod:`syncfabric.host.serial`) is its host.

The bridge's 32-bit address space (:func:`board_address`)::

    bits 31:28  space: SPACE_BOARD (board registers), SPACE_CSR (an engine's registers), SPACE_MEM (an NPU memory)
    bits 27:24  endpoint (SPACE_CSR, SPACE_MEM)
    bits 23:0   byte offset in the space

Accesses to an endpoint or space that does not exist read 0 and are acknowledged (the host never hangs).

A board may hold only some ranks of a ring (``ranks``, e.g. one engine per board, each board one rank of
``ring:N``): its bridge endpoints are then those ranks in order, and the two ring links that leave the board go
through a :class:`~syncfabric.hdl.system.pinlink.PinLink` to the ports ``flit_out``/``credit_in`` (to the next
board) and ``flit_in``/``credit_out`` (from the previous one), which the board top puts on pins. The engines do not
know their rank (the host's programs do), so one bitstream serves every board of the ring.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.topology import parse as parse_topology
from ..common.axiram import AxiRam
from ..common.bridge import DEFAULT_MAX_WORDS, UartBridge
from ..common.csr import CsrBank
from ..common.refuse import Checked
from ..common.regmap import Register, RegisterMap
from ..common.uart import UartRx, UartTx, uart_divisor
from .pinlink import LaneSignature, PinLink
from .top import AceSystem, split_links

__all__ = ["BoardSystem", "board_regmap", "board_address", "BOARD_ID", "BOARD_VERSION", "SPACE_BOARD",
           "SPACE_CSR", "SPACE_MEM", "MAX_ENDPOINTS", "OFFSET_BITS", "board_registers_markdown"]

#: Value of the board's ID register: ``"SFB1"`` in ASCII.
BOARD_ID = 0x53464231
#: Value of the board's VERSION register.
BOARD_VERSION = 1
SPACE_BOARD, SPACE_CSR, SPACE_MEM = 0, 1, 2
#: Endpoints the address space can name.
MAX_ENDPOINTS = 16
#: Bits of the byte offset within a space.
OFFSET_BITS = 24


def board_address(space, offset, endpoint=0):
    """The bridge address of byte ``offset`` in ``space`` (of ``endpoint`` for the CSR and MEM spaces)."""
    if space not in (SPACE_BOARD, SPACE_CSR, SPACE_MEM):
        raise ValueError(f"unknown space {space!r}")
    if not 0 <= endpoint < MAX_ENDPOINTS:
        raise ValueError(f"endpoint must be in 0..{MAX_ENDPOINTS - 1}, got {endpoint!r}")
    if not 0 <= offset < 1 << OFFSET_BITS:
        raise ValueError(f"offset {offset:#x} does not fit {OFFSET_BITS} bits")
    return (space << 28) | (endpoint << OFFSET_BITS) | offset


def board_regmap():
    """The board register block (the SPACE_BOARD space): identification, the build's parameters, a cycle
    counter and the endpoints' interrupt lines."""
    return RegisterMap("board", [
        Register("ID", 0x00, "ro", init=BOARD_ID, doc='Identifies a syncfabric board: "SFB1" in ASCII.'),
        Register("VERSION", 0x04, "ro", init=BOARD_VERSION, doc="Board register block version."),
        Register("N_ENDPOINTS", 0x08, "ro", doc="Endpoints (engines with their NPU memory) on the board."),
        Register("MEM_BYTES", 0x0C, "ro", doc="Bytes of NPU memory per endpoint."),
        Register("CLK_HZ", 0x10, "ro", doc="Clock frequency the build was made for (Hz)."),
        Register("BAUD", 0x14, "ro", doc="UART bit rate of the build."),
        Register("MAX_WORDS", 0x18, "ro", doc="Largest burst the bridge accepts (32-bit words)."),
        Register("IRQ", 0x1C, "ro", doc="Bit i: endpoint i's interrupt line."),
        Register("CYCLES", 0x20, "ro", width=64, doc="Clock cycles since reset (read the low word first)."),
        Register("SCRATCH", 0x28, "rw", doc="Free for the host (link tests)."),
        Register("BRIDGE_ERRORS", 0x2C, "ro", doc="Requests the bridge answered with an error status."),
        Register("UART_ERRORS", 0x30, "ro", doc="Bytes the UART dropped (bad stop bit)."),
        Register("LINK_FLITS_OUT", 0x34, "ro", doc="Flits sent on the pin-level link port (0 without one)."),
        Register("LINK_FLITS_IN", 0x38, "ro", doc="Flits received on the pin-level link port."),
        Register("LINK_DROPPED", 0x3C, "ro", doc="Words the link port received outside a frame (a cable or "
                                                  "clock fault; 0 on a healthy link)."),
    ], 0x40, doc="Board registers: bridge space SPACE_BOARD.")


class BoardSystem(Checked, wiring.Component):
    """Engines of ``cfg`` on ``topology`` with ``mem_bytes`` (a power of two) of on-chip NPU memory each and a
    UART bridge at ``baud`` for a clock of ``clk_hz``.

    ``link_latency``: cycles of every on-chip link (the links' delay lines are sized for it, so keep it small
    on an FPGA). ``max_words``: the bridge's largest burst. ``inline=False`` instantiates the engines and links
    as separately converted modules (Verilog simulators, see :mod:`~syncfabric.hdl.system.top`).

    ``ranks`` (default all): the ranks of ``topology`` on this board; the links to the others leave through
    one pin-level link port (``link_port``: :class:`~syncfabric.hdl.system.pinlink.PinLink` options, e.g.
    ``{"width": 8, "credit_width": 2, "div": 4}``), so they must be one link out and one link in (a ring).

    Ports: ``uart_rx`` (In), ``uart_tx`` (Out), ``irq`` (one bit per endpoint), ``rx_active`` and ``tx_active``
    (a request is being received or executed / a response is being sent; for LEDs); with a link port
    ``flit_out``, ``credit_out`` (Out) and ``flit_in``, ``credit_in`` (In) lanes.
    """

    @classmethod
    def check(cls, cfg, *, topology="ring:2", mem_bytes=4096, clk_hz=50_000_000, baud=115200,
              link_latency=4, max_words=DEFAULT_MAX_WORDS, inline=True, ranks=None, link_port=None):
        topology = parse_topology(topology)
        ranks = tuple(range(topology.n_endpoints) if ranks is None else ranks)
        if len(ranks) > MAX_ENDPOINTS:
            raise ValueError(f"a board holds at most {MAX_ENDPOINTS} endpoints, {topology.spec} has {len(ranks)}")
        if mem_bytes & (mem_bytes - 1) or not 4096 <= mem_bytes <= 1 << OFFSET_BITS:
            raise ValueError(f"mem_bytes must be a power of two in 4 KiB..16 MiB, got {mem_bytes}")
        if mem_bytes > 1 << cfg.addr_width:
            raise ValueError(f"{mem_bytes} bytes exceed the engine's {cfg.addr_width}-bit addresses")
        uart_divisor(clk_hz, baud)
        AceSystem.check(cfg, topology, latency=link_latency, inline=inline, max_latency=link_latency, ranks=ranks)
        external = split_links(topology, ranks, link_latency)[1]
        ext = {x.direction for x in external}
        if external and (len(external) != 2 or ext != {"tx", "rx"}):
            raise ValueError(f"ranks {ranks} of {topology.spec} leave the board on {len(external)} links; a "
                             f"board has one link port (one link out, one in)")
        if external and link_port is None:
            raise ValueError(f"ranks {ranks} of {topology.spec} are not all of it: the links to the others "
                             f"need link_port")
        if not external and link_port is not None:
            raise ValueError(f"link_port: every rank of {topology.spec} is on the board, no link leaves it")
        if link_port is not None:
            PinLink.check(cfg, **link_port)

    def __init__(self, cfg, *, topology="ring:2", mem_bytes=4096, clk_hz=50_000_000, baud=115200,
                 link_latency=4, max_words=DEFAULT_MAX_WORDS, inline=True, ranks=None, link_port=None):
        self.cfg = cfg
        self.topology = parse_topology(topology)
        self.ranks = tuple(range(self.topology.n_endpoints) if ranks is None else ranks)
        n = len(self.ranks)
        self.divisor = uart_divisor(clk_hz, baud)
        self.mem_bytes, self.clk_hz, self.baud = mem_bytes, int(clk_hz), int(baud)
        self.system = AceSystem(cfg, self.topology, latency=link_latency, inline=inline,
                                max_latency=link_latency, ranks=self.ranks)
        ext = {x.direction: x for x in self.system.external}
        self.link_port = None
        if link_port is not None:
            self.link_port = PinLink(cfg, **link_port)
            self.link_tx, self.link_rx = ext["tx"], ext["rx"]
        self.link_latency, self.max_words, self.inline = link_latency, max_words, inline
        self.n_endpoints = n
        members = {
            "uart_rx": In(1, init=1),
            "uart_tx": Out(1, init=1),
            "irq": Out(n),
            "rx_active": Out(1),
            "tx_active": Out(1),
        }
        if self.link_port is not None:
            lp = self.link_port
            members.update({"flit_out": Out(LaneSignature(lp.width)), "flit_in": In(LaneSignature(lp.width)),
                            "credit_out": Out(LaneSignature(lp.credit_width)),
                            "credit_in": In(LaneSignature(lp.credit_width))})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, n = self.cfg, self.n_endpoints
        m.submodules.rx = rx = UartRx(self.divisor)
        m.submodules.tx = tx = UartTx(self.divisor)
        m.submodules.bridge = bridge = UartBridge(max_words=self.max_words,
                                                  timeout_cycles=max(16, 64 * self.divisor))
        wiring.connect(m, rx.o_stream, bridge.i_rx)
        wiring.connect(m, bridge.o_tx, tx.i_stream)
        m.d.comb += [rx.rx.eq(self.uart_rx), self.uart_tx.eq(tx.tx),
                     self.rx_active.eq(bridge.active), self.tx_active.eq(tx.busy)]

        m.submodules.system = system = self.system
        rams = []
        for i, rank in enumerate(self.ranks):
            ram = AxiRam(self.mem_bytes, data_width=8 * cfg.beat_bytes, addr_width=cfg.addr_width)
            m.submodules[f"mem{i}"] = ram
            wiring.connect(m, getattr(system, f"ep{rank}_axi"), ram.axi)
            rams.append(ram)
            m.d.comb += self.irq[i].eq(getattr(system, f"ep{rank}_irq"))
        if self.link_port is not None:
            m.submodules.link_port = lp = self.link_port
            out, inp = self.link_tx.name, self.link_rx.name
            wiring.connect(m, getattr(system, out), lp.tx)
            wiring.connect(m, lp.rx, getattr(system, inp))
            m.d.comb += [getattr(system, f"{out}_credit").eq(lp.tx_credit),
                         lp.rx_credit.eq(getattr(system, f"{inp}_credit"))]
            for name in ("flit_out", "credit_out"):
                wiring.connect(m, getattr(lp, name), wiring.flipped(getattr(self, name)))
            for name in ("flit_in", "credit_in"):
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(lp, name))

        m.submodules.regs = regs = CsrBank(board_regmap())
        m.d.comb += [
            regs.reg("N_ENDPOINTS").eq(n), regs.reg("MEM_BYTES").eq(self.mem_bytes),
            regs.reg("CLK_HZ").eq(self.clk_hz), regs.reg("BAUD").eq(self.baud),
            regs.reg("MAX_WORDS").eq(self.max_words), regs.reg("IRQ").eq(self.irq),
            regs.reg("BRIDGE_ERRORS").eq(bridge.errors), regs.reg("UART_ERRORS").eq(rx.framing_errors),
        ]
        if self.link_port is not None:
            m.d.comb += [regs.reg("LINK_FLITS_OUT").eq(self.link_port.flits_out),
                         regs.reg("LINK_FLITS_IN").eq(self.link_port.flits_in),
                         regs.reg("LINK_DROPPED").eq(self.link_port.dropped)]
        cycles = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        m.d.comb += regs.reg("CYCLES").eq(cycles)

        # address decoding: the target of the access in flight is remembered until its ack
        bus = bridge.bus
        space, ep, offset = bus.addr[28:32], bus.addr[OFFSET_BITS:28], bus.addr[:OFFSET_BITS]
        start = bus.we | bus.re
        def inside(port):       # offsets beyond a target's bus are unmapped, not aliases
            return offset < (1 << len(port.addr))

        targets = [(regs.bus, (space == SPACE_BOARD) & inside(regs.bus))]
        for i, rank in enumerate(self.ranks):
            csr = getattr(system, f"ep{rank}_csr")
            targets.append((csr, (space == SPACE_CSR) & (ep == i) & inside(csr)))
            targets.append((rams[i].host, (space == SPACE_MEM) & (ep == i) & inside(rams[i].host)))
        hit = Signal(len(targets))
        none_ack = Signal()
        m.d.sync += none_ack.eq(0)
        for k, (tgt, sel) in enumerate(targets):
            m.d.comb += [tgt.addr.eq(offset), tgt.wdata.eq(bus.wdata),
                         tgt.we.eq(bus.we & sel), tgt.re.eq(bus.re & sel)]
            with m.If(start):
                m.d.sync += hit[k].eq(sel)
            with m.If(hit[k] & tgt.ack):
                m.d.comb += [bus.ack.eq(1), bus.rdata.eq(tgt.rdata)]
                m.d.sync += hit[k].eq(0)
        with m.If(start & ~_any(sel for _, sel in targets)):
            m.d.sync += none_ack.eq(1)
        with m.If(none_ack):
            m.d.comb += bus.ack.eq(1)
        return m


def _any(values):
    out = 0
    for v in values:
        out = out | v
    return out


def board_registers_markdown():
    """The board register table (``docs/board.md`` includes it)."""
    return board_regmap().markdown("Board registers (space SPACE_BOARD)")


if __name__ == "__main__":
    print(board_registers_markdown())
