"""The receive side's landing buffer: :class:`LandingBuffer` keeps the checked payload beats and message
headers of every landing channel until the receive unit takes them, and returns their credits.
(See :mod:`.link` for the credit protocol, :class:`~.rxframe.RxDeframer` for what it is fed.)
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.layouts import CHANNEL_BITS, credit_layout, packet_header_layout
from .config import AceConfig

__all__ = ["LandingBuffer", "header_push_layout", "beat_write_layout", "consumer_members"]


def header_push_layout():
    """A message header for the header queue of channel ``ch``."""
    return data.StructLayout({"ch": CHANNEL_BITS, "hdr": packet_header_layout()})


def beat_write_layout(cfg: AceConfig):
    """A payload beat for the ring of channel ``ch``."""
    return data.StructLayout({"ch": CHANNEL_BITS, "data": unsigned(8 * cfg.beat_bytes)})


def consumer_members(cfg: AceConfig):
    """The signature members of a landing buffer's consumer side (:class:`~.link.RxPort` repeats them)."""
    n, hl = cfg.n_channels, packet_header_layout()
    return {
        "heads": Out(data.ArrayLayout(hl, n)),
        "hdr_valid": Out(n),
        "nexts": Out(data.ArrayLayout(hl, n)),
        "hdr_two": Out(n),
        "sel": In(CHANNEL_BITS),
        "hdr_pop": In(1),
        "data": Out(stream.Signature(unsigned(8 * cfg.beat_bytes))),
        # registers behind ``data.valid``: a beat is in the read pipeline's output (``data_pending``), of channel
        # ``data_ch``; ``data.valid`` is ``data_pending & (data_ch == sel)``, so a consumer whose channel is a
        # register of its own can tell its valid from these without the consumers' ``sel`` mux in front
        "data_pending": Out(1),
        "data_ch": Out(CHANNEL_BITS),
        "levels": Out(data.ArrayLayout(unsigned(exact_log2(cfg.landing_beats) + 1), n)),
        "hdr_levels": Out(data.ArrayLayout(unsigned(exact_log2(cfg.landing_headers) + 1), n)),
    }


def _full_flag(m, full, count, cap, push, pop):
    """Keep ``full`` (a flip-flop) equal to ``count == cap`` of a queue whose ``count`` moves by ``push`` and
    ``pop`` this cycle: both compares are on the registered count, the late handshakes only pick one."""
    m.d.sync += full.eq(Mux(push & ~pop, count == cap - 1, (count == cap) & ~(pop & ~push)))


class LandingBuffer(wiring.Component):
    """Per landing channel: a ring of ``landing_beats`` payload beats and a queue of ``landing_headers``
    message headers, written by the link side, read by one consumer.

    Ports
    -----
    hdr_in : In(stream.Signature(header_push_layout(), always_ready=True))
        A header pushed into the queue of ``ch``; dropped if that queue is full.
    beat_in : In(stream.Signature(beat_write_layout(cfg), always_ready=True))
        A beat written into the ring of ``ch``; dropped if that ring is full.
    dropped : Out(n_channels)
        Combinational: the channel whose header or beat is dropped in this cycle (a credit protocol violation).
    heads, hdr_valid, nexts, hdr_two, sel, hdr_pop, data, levels, hdr_levels, credit
        The consumer side, exactly as :class:`~.link.RxPort` documents them: ``data`` shows the beats of
        channel ``sel`` through a one-beat read pipeline (valid one cycle after ``sel`` changes, a beat
        written in cycle t can be valid in cycle t + 2); ``credit`` returns, registered, a beat credit per beat
        taken and a header credit per effective ``hdr_pop``.
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        n = cfg.n_channels
        super().__init__({
            "hdr_in": In(stream.Signature(header_push_layout(), always_ready=True)),
            "beat_in": In(stream.Signature(beat_write_layout(cfg), always_ready=True)),
            "dropped": Out(n),
            **consumer_members(cfg),
            "credit": Out(credit_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, w, lb, nh = cfg.n_channels, cfg.beat_bytes, cfg.landing_beats, cfg.landing_headers
        vbits, abits, hbits = exact_log2(n), exact_log2(lb), exact_log2(nh)

        # -- landing buffer: channel v owns rows [v*lb, (v+1)*lb), a ring with write/read pointers (+1 wrap bit)
        m.submodules.landing = landing = Memory(shape=unsigned(8 * w), depth=n * lb, init=[])
        wr = landing.write_port()
        rd = landing.read_port()
        wp = Signal(data.ArrayLayout(unsigned(abits + 1), n))
        rp = Signal(data.ArrayLayout(unsigned(abits + 1), n))

        # -- message-header FIFOs, one small memory per VC with asynchronous reads of its first two entries
        # (flip-flops for the first two entries, refilled from the memory, were tried: the consumers' pops,
        # late in their cycle, then fanned out to every header bit and made the engine's worst path, 1.43 ns)
        hwp = Signal(data.ArrayLayout(unsigned(hbits + 1), n))
        hrp = Signal(data.ArrayLayout(unsigned(hbits + 1), n))

        # Header push on a message's first packet and payload beat write, each unless its queue is full.
        # "Full" is a flip-flop per queue (from the counts and this cycle's pushes and pops), so the deframer's
        # channel number only selects it.
        h_idx, v_idx = self.hdr_in.payload.ch[:vbits], self.beat_in.payload.ch[:vbits]
        sel_idx = self.sel[:vbits]
        sel_ok = self.sel < n
        mine, take, can_issue = Signal(), Signal(), Signal()
        pop = self.hdr_pop & sel_ok & self.hdr_valid.bit_select(sel_idx, 1)
        hdr_full, beat_full = Signal(n), Signal(n)
        # a push per queue from the deframer's valid (late: it decodes the arriving flit), the channel's decode
        # and the queue's own full flag, so the valid meets one AND in front of each pointer; the memory's
        # write enable is their OR
        h_pushes = Cat(*[self.hdr_in.valid & (h_idx == v) & ~hdr_full[v] for v in range(n)])
        b_pushes = Cat(*[self.beat_in.valid & (v_idx == v) & ~beat_full[v] for v in range(n)])
        hdr_ok, beat_ok = h_pushes.any(), b_pushes.any()
        hdr_drop, beat_drop = self.hdr_in.valid & ~hdr_ok, self.beat_in.valid & ~beat_ok
        out_valid = Signal()
        osel = Signal(CHANNEL_BITS)
        for v in range(n):
            h_push, b_push = h_pushes[v], b_pushes[v]
            # take & (sel_idx == v), without the osel == sel compare in series: a valid output beat's osel
            # is a channel < n, so it equals sel == v exactly when osel == v (a decode of a register)
            h_pop = pop & (sel_idx == v)
            b_pop = out_valid & (osel == v) & (self.sel == v) & self.data.ready
            _full_flag(m, hdr_full[v], (hwp[v] - hrp[v])[:hbits + 1], nh, h_push, h_pop)
            _full_flag(m, beat_full[v], (wp[v] - rp[v])[:abits + 1], lb, b_push, b_pop)
            with m.If(h_push):
                m.d.sync += hwp[v].eq(hwp[v] + 1)
            with m.If(b_push):
                m.d.sync += wp[v].eq(wp[v] + 1)

        for v in range(n):
            mem = Memory(shape=packet_header_layout(), depth=nh, init=[])
            m.submodules[f"headers{v}"] = mem
            hw_port, hr_port = mem.write_port(), mem.read_port(domain="comb")
            hn_port = mem.read_port(domain="comb")
            m.d.comb += [
                hr_port.addr.eq(hrp[v][:hbits]),
                self.heads[v].eq(hr_port.data),
                self.hdr_valid[v].eq(hwp[v] != hrp[v]),
                hn_port.addr.eq((hrp[v] + 1)[:hbits]),
                self.nexts[v].eq(hn_port.data),
                self.hdr_two[v].eq((hwp[v] - hrp[v])[:hbits + 1] >= 2),
                hw_port.addr.eq(hwp[v][:hbits]),
                hw_port.data.eq(self.hdr_in.payload.hdr),
                hw_port.en.eq(h_pushes[v]),
            ]
        m.d.comb += [
            wr.addr.eq(Cat(wp[v_idx][:abits], v_idx)),
            wr.data.eq(self.beat_in.payload.data),
            wr.en.eq(beat_ok),
        ]
        for v in range(n):
            m.d.comb += self.dropped[v].eq(hdr_drop & (self.hdr_in.payload.ch == v)
                                           | beat_drop & (self.beat_in.payload.ch == v))

        # -- consumer side: a one-beat read pipeline (sync read, `en` holds the beat while stalled).
        # `osel` is the VC of the beat in the read port's output; a beat of another VC than `sel` is not
        # shown and may be overwritten: the ring's read pointer only moves when a beat is taken.
        # `sel` arrives late (the consumers' ownership mux is in front of it), so everything per channel is
        # computed from the registers beside the channel select, not after it: each read pointer's increment,
        # its level's "at least one" and "at least two"; `sel` only picks among them.
        rp1 = Signal(data.ArrayLayout(unsigned(abits + 1), n))
        any1, any2 = Signal(n), Signal(n)
        for v in range(n):
            m.d.comb += [
                self.levels[v].eq(wp[v] - rp[v]), self.hdr_levels[v].eq(hwp[v] - hrp[v]),
                rp1[v].eq(rp[v] + 1),
                any1[v].eq(wp[v] != rp[v]),
                any2[v].eq(self.levels[v] >= 2),
            ]
            with m.If(take & (sel_idx == v)):
                m.d.sync += rp[v].eq(rp1[v])
        m.d.comb += [
            mine.eq(out_valid & (osel == self.sel)),
            take.eq(mine & self.data.ready),
            can_issue.eq(~mine | self.data.ready),
            self.data.valid.eq(mine),
            self.data_pending.eq(out_valid), self.data_ch.eq(osel),
            self.data.payload.eq(rd.data),
            rd.en.eq(can_issue),
            rd.addr.eq(Cat(Mux(mine, rp1[sel_idx], rp[sel_idx])[:abits], sel_idx)),
        ]
        with m.If(can_issue):
            # the selected channel holds more than the beat already shown (`count > mine`)
            more = Mux(mine, any2.bit_select(sel_idx, 1), any1.bit_select(sel_idx, 1))
            m.d.sync += [out_valid.eq(sel_ok & more), osel.eq(self.sel)]

        with m.If(pop):
            m.d.sync += hrp[sel_idx].eq(hrp[sel_idx] + 1)

        m.d.sync += [
            self.credit.beat.eq(take),
            self.credit.beat_vc.eq(self.sel),
            self.credit.hdr.eq(pop),
            self.credit.hdr_vc.eq(self.sel),
        ]
        return m
