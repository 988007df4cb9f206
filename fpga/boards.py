"""Prototype board tops: a :class:`~syncfabric.hdl.system.board.BoardSystem` with its clock, reset, UART pins
and LEDs on an amaranth-boards platform.

:data:`BOARDS` names the boards ``syncfabric build --board`` knows. Each :class:`Board` gives the platform, the
engine configuration that fits it, the NPU memory per endpoint, the target clock and the pins the top uses.
:class:`BoardTop` is the top: the board's oscillator (through an ECP5 PLL when the target clock differs from
it), a reset synchronizer driven by a button and the PLL's lock, the UART to the host bridge, and LEDs:

    LED 0  heartbeat (about 1 Hz: the clock runs and reset is released)
    LED 1  the bridge is receiving or executing a request (stretched to about 50 ms)
    LED 2  the UART is sending a response (stretched)
    LED 3+ endpoint i's interrupt line (up to the LEDs the board has), then on a board with a link port
           flits arriving (a bit of the count) and words received outside a frame (sticky); the LED after
           them (or the last) shows the PLL lock when a PLL is used
"""

from dataclasses import dataclass, field

from amaranth.build import Pins, Resource, Subsignal
from amaranth.hdl import Cat, ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, Mux, Signal
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

from ..hdl.ace.config import AceConfig
from ..hdl.system.board import BoardSystem
from ..hdl.system.pinlink import PinLink

__all__ = ["Board", "BoardTop", "LinkTestTop", "BOARDS", "board", "ecp5_pll_params", "StretchPulse"]


@dataclass(frozen=True)
class Board:
    """A board ``syncfabric build`` can target.

    name        the ``--board`` name.
    platform    ``"module:Class"`` of the amaranth-boards platform (imported on use: the ``fpga`` extra).
    family      ``"ecp5"`` or ``"ice40"`` (selects the YoWASP place-and-route tool).
    config      the engine configuration name that fits (:meth:`AceConfig.profile`).
    clk_hz      target clock of the system (the PLL makes it from the board's oscillator if they differ).
    mem_bytes   on-chip NPU memory per endpoint.
    topology    endpoints on the board and their on-chip links.
    ranks       the ranks of ``topology`` on this board (default all); the ring links to the others leave on
                the pin-level link port (``link_pins``), one board per rank joined by cables.
    reset       ``(resource, number)`` of the reset button.
    n_leds      LEDs the top drives (``led`` resources 0..n-1).
    note        what a user should know about the configuration.
    """

    name: str
    platform: str
    family: str
    config: str
    clk_hz: int
    mem_bytes: int = 4096
    topology: str = "ring:2"
    ranks: tuple = None
    reset: tuple = ("button_fire", 0)
    n_leds: int = 8
    note: str = ""
    overrides: dict = field(default_factory=dict)
    #: ``"system"`` (:class:`BoardTop`) or ``"linktest"`` (:class:`LinkTestTop`).
    top: str = "system"
    #: ``{"flit_out": pins, "flit_in": pins, "credit_out": pins, "credit_in": pins}`` on ``link_conn``: the
    #: pin-level link port (:class:`~syncfabric.hdl.system.pinlink.PinLink`, 8 + 2 flit and 2 + 2 credit pins).
    link_pins: dict = None
    link_conn: tuple = ("gpio", 0)

    def make_top(self, cfg=None, clk_hz=None):
        """The top of a build of this board (``cfg`` widened for the board's topology: ports, landing
        channels, routing-table ranks)."""
        from ..host.run import engine_config_for

        if self.ranks is not None and not self.link_pins:
            raise ValueError(f"{self.name} holds only ranks {self.ranks} of {self.topology} but has no link pins")
        cfg = engine_config_for(cfg or self.engine_config(), self.topology)
        if self.top == "linktest":
            return LinkTestTop(self, cfg, clk_hz=clk_hz)
        return BoardTop(self, cfg, clk_hz=clk_hz)

    def platform_instance(self):
        """A fresh instance of the board's platform class."""
        import importlib

        mod, cls = self.platform.split(":")
        try:
            return getattr(importlib.import_module(mod), cls)()
        except ImportError as exc:
            raise RuntimeError(f"board {self.name!r} needs amaranth-boards (pip install -e '.[fpga]'): {exc}") \
                from None

    def engine_config(self, name=None):
        """The engine configuration of a build: ``name`` (a profile) or the board's own, built for the FPGA's
        fabric (:attr:`AceConfig.fabric`)."""
        kw = dict(self.overrides) if name is None else {}
        kw.setdefault("fabric", 1)
        return AceConfig.profile(name or self.config, **kw)


#: ULX3S GPIO header: each lane's outputs on the "+" pins of pairs, its inputs on the "-" pins of the same
#: pairs, so a cable that swaps + and - joins two boards and a jumper per pair loops one board back.
_ULX3S_LINK = {"flit_out": " ".join(f"{i}+" for i in range(10)), "flit_in": " ".join(f"{i}-" for i in range(10)),
               "credit_out": " ".join(f"{i}+" for i in range(10, 14)),
               "credit_in": " ".join(f"{i}-" for i in range(10, 14))}

#: The boards ``syncfabric build`` targets. ULX3S 85F holds two ``board`` engines with one link port each,
#: joined through a 2-port switch (on ring:2 each engine has two ports and two ALUs: 102 % of the LUTs),
#: each with one FSM and one command slot: with the profile's two of each the top places at 82 % of the
#: logic cells and does not route, with one of each it packs at 75 % and routes (docs/fpga.md has the
#: figures). ``ulx3s-85f-ring`` holds one engine, the profile unchanged, and joins other boards through its
#: link port. The smaller ULX3S parts and iCE40 boards cannot hold even one engine.
BOARDS = {
    "ulx3s-85f": Board(
        name="ulx3s-85f", platform="amaranth_boards.ulx3s:ULX3S_85F_Platform", family="ecp5", config="board",
        # 12.5 MHz through the PLL: that build routes (28.4 MHz after routing); placed for the oscillator's
        # 25 MHz, router2 stalls at about 1,500 overused wires (docs/results.md)
        clk_hz=12_500_000, mem_bytes=16384, topology="switch:2", reset=("button_fire", 0), n_leds=8,
        overrides={"dtypes": ("fp32", "int32"), "n_fsms": 1, "n_cmds": 1},
        note="two 'board' engines (8 B beats, 1 FSM, 1 command slot, 4 buffers, one link port each, ALUs for "
             "fp32 and int32) joined through a 2-port switch, 16 KiB of NPU memory each"),
    "ulx3s-85f-ring": Board(
        name="ulx3s-85f-ring", platform="amaranth_boards.ulx3s:ULX3S_85F_Platform", family="ecp5", config="board",
        # one engine with the profile unchanged (in its fabric form) packs at 59 %; 50 MHz through the PLL (53.4
        # MHz after routing for 50, 47.6 on a build placed for 60; docs/results.md "The units' reset and the
        # write-back register")
        clk_hz=50_000_000, mem_bytes=16384, topology="ring:2", ranks=(0,), reset=("button_fire", 0), n_leds=8,
        link_pins=_ULX3S_LINK,
        note="one 'board' engine per board (the profile unchanged: 2 FSMs, 2 command slots, two link ports, "
             "ALUs for every type) with 16 KiB of NPU memory and the pin-level link port on GPIO: boards joined "
             "by cables in a ring, one rank each, all loading the same bitstream"),
    "ulx3s-85f-linktest": Board(
        name="ulx3s-85f-linktest", platform="amaranth_boards.ulx3s:ULX3S_85F_Platform", family="ecp5",
        config="board", clk_hz=25_000_000, reset=("button_fire", 0), n_leds=8, top="linktest",
        link_pins=_ULX3S_LINK,
        note="the pin-level link port with a traffic generator and checker (cable or loopback bring-up)"),
}


def board(name):
    """The :class:`Board` called ``name`` (``ValueError`` listing the known boards otherwise)."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; known boards: {', '.join(sorted(BOARDS))}") from None


def ecp5_pll_params(fin_hz, fout_hz):
    """``(CLKI_DIV, CLKFB_DIV, CLKOP_DIV, achieved Hz)`` of an ECP5 EHXPLLL making ``fout_hz`` from ``fin_hz``
    with the VCO in 400-800 MHz and the phase detector at >= 3.125 MHz; the closest output frequency wins.
    ``ValueError`` if none is within 1 %."""
    best = None
    for clki in range(1, 129):
        if fin_hz / clki < 3.125e6:
            break
        for fb in range(1, 81):
            f = fin_hz * fb / clki
            for op in range(1, 129):
                if 400e6 <= f * op <= 800e6:
                    err = abs(f - fout_hz)
                    if best is None or err < best[0]:
                        best = (err, clki, fb, op, f)
                    break
    if best is None or best[0] > 0.01 * fout_hz:
        raise ValueError(f"no ECP5 PLL setting makes {fout_hz / 1e6:g} MHz from {fin_hz / 1e6:g} MHz")
    return best[1], best[2], best[3], best[4]


class StretchPulse(Elaboratable):
    """``o`` is high while ``i`` is high and for ``cycles`` cycles after (a blink a person can see)."""

    def __init__(self, cycles):
        self.cycles = cycles
        self.i = Signal()
        self.o = Signal()

    def elaborate(self, platform):
        m = Module()
        count = Signal(range(self.cycles + 1))
        with m.If(self.i):
            m.d.sync += count.eq(self.cycles)
        with m.Elif(count != 0):
            m.d.sync += count.eq(count - 1)
        m.d.comb += self.o.eq(self.i | (count != 0))
        return m


class BoardTop(Elaboratable):
    """The top of a prototype board: :class:`BoardSystem` of ``cfg`` on ``board`` (a :class:`Board`), clocked
    at ``clk_hz`` (default the board's)."""

    def __init__(self, board, cfg=None, *, clk_hz=None, baud=115200):
        self.board = board
        self.cfg = cfg or board.engine_config()
        self.clk_hz = int(clk_hz or board.clk_hz)
        self.baud = baud
        self.system = BoardSystem(self.cfg, topology=board.topology, mem_bytes=board.mem_bytes,
                                  clk_hz=self.clk_hz, baud=baud, link_latency=2, ranks=board.ranks,
                                  link_port={} if board.ranks is not None else None)

    def elaborate(self, platform):
        m = Module()
        locked = _clock_and_reset(m, platform, self.board, self.clk_hz)
        self._body(m, platform, locked)
        return m

    def _body(self, m, platform, locked):
        fin = platform.default_clk_frequency
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = rx_buf = io.FFBuffer("i", uart.rx)
        m.submodules.uart_tx = tx_buf = io.Buffer("o", uart.tx)
        m.submodules.system = system = self.system
        m.d.comb += [system.uart_rx.eq(rx_buf.i), tx_buf.o.eq(system.uart_tx)]
        if system.link_port is not None:
            _link_pins(m, platform, self.board, system)

        heartbeat = Signal(range(self.clk_hz))
        beat = Signal()
        with m.If(heartbeat == self.clk_hz // 2 - 1):
            m.d.sync += [heartbeat.eq(0), beat.eq(~beat)]
        with m.Else():
            m.d.sync += heartbeat.eq(heartbeat + 1)
        m.submodules.rx_led = rx_led = StretchPulse(self.clk_hz // 20)
        m.submodules.tx_led = tx_led = StretchPulse(self.clk_hz // 20)
        m.d.comb += [rx_led.i.eq(system.rx_active), tx_led.i.eq(system.tx_active)]
        levels = [beat, rx_led.o, tx_led.o] + [system.irq[i] for i in range(system.n_endpoints)]
        if system.link_port is not None:    # flits arriving (a bit of the count), words outside a frame
            dropped = Signal()
            with m.If(system.link_port.dropped != 0):
                m.d.sync += dropped.eq(1)
            levels += [system.link_port.flits_in[4], dropped]
        n_leds = self.board.n_leds
        levels = levels[:n_leds]
        if not abs(fin - self.clk_hz) < 1 and len(levels) == n_leds:
            levels[-1] = locked
        elif not abs(fin - self.clk_hz) < 1:
            levels.append(locked)
        _leds(m, platform, levels)


def _leds(m, platform, levels):
    for i, level in enumerate(levels):
        m.submodules[f"led{i}"] = buf = io.Buffer("o", platform.request("led", i, dir="-"))
        m.d.comb += buf.o.eq(level)


def _link_pins(m, platform, board, port):
    """Put the lanes of ``port`` (a :class:`PinLink` or a board system with one) on ``board``'s link pins."""
    pins = board.link_pins
    if not pins:
        raise ValueError(f"{board.name} has no pins for the link port")
    platform.add_resources([Resource("pinlink", 0, *[
        Subsignal(name, Pins(pins[name], dir="o" if name.endswith("_out") else "i", conn=board.link_conn))
        for name in ("flit_out", "flit_in", "credit_out", "credit_in")])])
    lk = platform.request("pinlink", 0, dir="-")
    for name in ("flit_out", "credit_out"):
        lane = getattr(port, name)
        m.submodules[f"{name}_buf"] = buf = io.Buffer("o", getattr(lk, name))
        m.d.comb += buf.o.eq(Cat(lane.data, lane.frame, lane.strobe))
    for name in ("flit_in", "credit_in"):
        lane = getattr(port, name)
        m.submodules[f"{name}_buf"] = buf = io.Buffer("i", getattr(lk, name))
        w = len(lane.data)
        m.d.comb += [lane.data.eq(buf.i[:w]), lane.frame.eq(buf.i[w]), lane.strobe.eq(buf.i[w + 1])]


def _clock_and_reset(m, platform, board, clk_hz):
    """The ``sync`` domain at ``clk_hz`` from the board's oscillator (an ECP5 PLL if they differ), reset by the
    board's button and until the PLL locks; returns the lock signal (1 without a PLL)."""
    m.domains.sync = ClockDomain("sync")
    clk_port = platform.request(platform.default_clk, dir="-")
    m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_port)
    fin = platform.default_clk_frequency
    locked = Signal(init=1)
    if abs(fin - clk_hz) < 1:
        m.d.comb += ClockSignal("sync").eq(clk_buf.i)
    elif board.family == "ecp5":
        clki, fb, op, f = ecp5_pll_params(fin, clk_hz)
        pll_locked, pll_clk = Signal(), Signal()
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{fin / 1e6:.6f}", a_FREQUENCY_PIN_CLKOP=f"{f / 1e6:.6f}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
            p_CLKI_DIV=clki, p_CLKFB_DIV=fb, p_CLKOP_DIV=op, p_CLKOP_CPHASE=op - 1, p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            i_CLKI=clk_buf.i, o_CLKOP=pll_clk, i_CLKFB=pll_clk, o_LOCK=pll_locked,
            i_RST=Const(0), i_STDBY=Const(0), i_PHASESEL0=Const(0), i_PHASESEL1=Const(0),
            i_PHASEDIR=Const(0), i_PHASESTEP=Const(0), i_PHASELOADREG=Const(0), i_PLLWAKESYNC=Const(0),
            i_ENCLKOP=Const(0))
        m.d.comb += [locked.eq(pll_locked), ClockSignal("sync").eq(pll_clk)]
        # No constraint of our own on the output: synthesis merges `pll_clk` into the domain's clock net,
        # so it would name a net the netlist does not have. nextpnr derives the output's constraint from the
        # oscillator's and the PLL's dividers ("Derived frequency constraint of ... for net clk").
    else:
        raise ValueError(f"{board.name}: a {clk_hz / 1e6:g} MHz clock needs a PLL; only the "
                         f"board's {fin / 1e6:g} MHz is supported on {board.family}")
    res, num = board.reset
    m.submodules.rst_buf = rst_buf = io.Buffer("i", platform.request(res, num, dir="-"))
    m.submodules.rst_sync = ResetSynchronizer(rst_buf.i | ~locked, domain="sync")
    return locked


class LinkTestTop(Elaboratable):
    """Bring-up of the pin-level link: a :class:`~syncfabric.hdl.system.pinlink.PinLink` on the board's GPIO pins
    with a traffic generator (packets of four flits of xorshift data, sent as credits allow, as an engine
    would) and a checker that compares every flit received with the same sequence and frees its landing
    credits at once. Two boards joined by a cable (or one board with a jumper per pin pair) run it.

    LEDs: 0 heartbeat, 1 flits arriving (a bit of the received count), 2 data mismatch (sticky),
    3 words outside a frame (sticky), 4 no credit for a second (the neighbour or cable is missing).
    """

    def __init__(self, board, cfg=None, *, clk_hz=None):
        self.board = board
        self.cfg = cfg or board.engine_config()
        self.clk_hz = int(clk_hz or board.clk_hz)
        self.link = PinLink(self.cfg)

    def elaborate(self, platform):
        m = Module()
        _clock_and_reset(m, platform, self.board, self.clk_hz)
        m.submodules.link = link = self.link
        _link_pins(m, platform, self.board, link)

        cfg = self.cfg
        dw = 8 * cfg.beat_bytes

        def xorshift(x):
            x = x ^ (x << 13)[:64]
            x = x ^ (x >> 7)
            return x ^ (x << 17)[:64]

        # generator: credits for virtual channel 0 as the receiver's landing buffer holds
        gen = Signal(64, init=1)
        beats = Signal(range(cfg.landing_beats + 1), init=cfg.landing_beats)
        hdrs = Signal(range(cfg.landing_headers + 1), init=cfg.landing_headers)
        pos = Signal(2)
        first, last = pos == 0, pos == 3
        can = (beats != 0) & (~first | (hdrs != 0))
        m.d.comb += [link.tx.valid.eq(can), link.tx.payload.data.eq(gen[:dw]), link.tx.payload.first.eq(first),
                     link.tx.payload.last.eq(last), link.tx.payload.hdr.length.eq(4 * cfg.beat_bytes)]
        sent = link.tx.valid & link.tx.ready
        back = link.tx_credit
        m.d.sync += [beats.eq(beats - sent + (back.beat & (back.beat_vc == 0))),
                     hdrs.eq(hdrs - (sent & first) + (back.hdr & (back.hdr_vc == 0)))]
        with m.If(sent):
            m.d.sync += [gen.eq(xorshift(gen)), pos.eq(pos + 1)]
        # checker: the same sequence; every flit frees its landing beat (and header) at once
        chk = Signal(64, init=1)
        bad = Signal()
        with m.If(link.rx.valid):
            m.d.sync += chk.eq(xorshift(chk))
            with m.If(link.rx.payload.data != chk[:dw]):
                m.d.sync += bad.eq(1)
        m.d.comb += [link.rx_credit.beat.eq(link.rx.valid),
                     link.rx_credit.hdr.eq(link.rx.valid & link.rx.payload.first)]
        starved = Signal(range(self.clk_hz + 1))
        with m.If(back.beat):
            m.d.sync += starved.eq(0)
        with m.Elif(starved != self.clk_hz):
            m.d.sync += starved.eq(starved + 1)
        heartbeat = Signal(range(self.clk_hz))
        beat = Signal()
        with m.If(heartbeat == self.clk_hz // 2 - 1):
            m.d.sync += [heartbeat.eq(0), beat.eq(~beat)]
        with m.Else():
            m.d.sync += heartbeat.eq(heartbeat + 1)
        dropped = Signal()
        with m.If(link.dropped != 0):
            m.d.sync += dropped.eq(1)
        _leds(m, platform, [beat, link.flits_in[8], bad, dropped, starved == self.clk_hz])
        return m
