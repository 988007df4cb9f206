"""Link ports of the engine: :class:`TxPort` cuts messages into packets of flits, :class:`RxPort` checks them
and lands their payload in per-virtual-channel buffers for the RECV unit.

Wire format (``flit_layout(beat_bytes)``): a message of ``length`` bytes is sent as packets of up to
``packet_beats`` flits, every flit carrying a payload beat. The header rides in the ``hdr`` sideband of a
packet's first flit with ``offset`` (byte offset of the packet in the message) and ``last`` (last packet of the
message) filled in; ``hdr`` is zero on the other flits. ``first``/``last`` mark packet boundaries. The last
flit of a packet carries ``crc``: CRC-32 (the zlib value) over the header bits as ``HEADER_CRC_BYTES``
little-endian bytes, then every payload flit in full; the bytes of a message's last beat beyond ``length`` are
zero. An empty message is one flit with ``first = last = 1``, data 0, ``hdr.length = 0``, ``hdr.last = 1``,
and its CRC covers the header only. ``crc`` is zero on the other flits.
(Golden model: :mod:`syncfabric.sim.golden.link`.)

Flow control is by credits per landing channel: the receiver has a landing buffer of ``landing_beats``
beats and ``landing_headers`` message headers per channel. On a point-to-point link a channel is a virtual
channel (VC = FSM). Through a switch (``rx_sources`` > 1) every (source rank, VC) pair has its own channel
``vc + n_fsms * src`` at the receiver, so messages from different sources never share a buffer and may
arrive in any order; the transmitter keeps the matching credits per (destination, VC), channel ``vc +
n_fsms * dst``. The transmitter's control unit reserves a whole message's credits before handing the
message to :class:`TxPort` (``reserve``), and the receiver returns one beat credit per beat and one header
credit per header its consumer takes.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.crc import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..common.layouts import CHANNEL_BITS, HEADER_CRC_BYTES, credit_layout, flit_layout, packet_header_layout
from .config import AceConfig

__all__ = ["TxPort", "RxPort", "reserve_layout"]

#: Bits of the message length field (bytes) and of the beat counts derived from it.
_LENGTH_BITS = 20


def reserve_layout(cfg: AceConfig):
    """One cycle of :attr:`TxPort.reserve`: debit ``beats`` beat credits and one header credit of channel
    ``vc`` (the virtual channel, plus ``n_fsms`` times the destination rank through a switch)."""
    return data.StructLayout({"valid": 1, "vc": CHANNEL_BITS, "beats": unsigned(cfg.landing_beats.bit_length())})


def _header_crc_bits(hdr):
    """The header as the ``HEADER_CRC_BYTES``-byte word the CRC covers (zero-extended)."""
    bits = hdr.as_value()
    return Cat(bits, Const(0, 8 * HEADER_CRC_BYTES - len(bits)))


def _ceil_beats(length, beat_bytes):
    """Beats of ``length`` bytes."""
    return (length + beat_bytes - 1) >> exact_log2(beat_bytes)


class TxPort(wiring.Component):
    """Transmit side of a link port: messages (``msg`` header + ``data`` beats) in, flits out.

    Ports
    -----
    msg : In(stream.Signature(packet_header_layout()))
        A message header (``offset``/``last`` ignored). Accepted when the port is idle or in the cycle it
        sends the last flit of the previous message.
    data : In(stream.Signature(unsigned(8 * beat_bytes)))
        The ``ceil(length / beat_bytes)`` payload beats of each message, in order; may have bubbles and may
        be presented before the message's ``msg`` is accepted.
    flit : Out(stream.Signature(flit_layout(beat_bytes)))
        To the link; registered. One flit per cycle in steady state; a message's first flit can be valid the
        cycle after its ``msg`` handshake (when its first beat is there in that cycle).
    credit : In(credit_layout())
        Credits returned by the receiver (one beat and one header credit per cycle at most).
    reserve : In(reserve_layout(cfg))
        Debits ``beats`` beat credits and one header credit of ``vc`` in a cycle with ``valid``. The port
        itself never waits for credits: the control unit checks them before reserving a message.
    beat_credits, hdr_credits : Out(ArrayLayout(..., n_channels))
        Credits per channel, initially ``landing_beats`` / ``landing_headers``.
    flits, packets, busy, stall : Out(32)
        Flits and packets sent; cycles with ``flit.valid & flit.ready`` (= flits) and with
        ``flit.valid & ~flit.ready``.
    flit_phase : Out(3)
        The program phase (header ``phase``) of the message the flit in the output register belongs to, for
        the per-phase counters.
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        n, w = cfg.n_channels, cfg.beat_bytes
        beat_w, hdr_w = cfg.landing_beats.bit_length(), cfg.landing_headers.bit_length()
        super().__init__({
            "msg": In(stream.Signature(packet_header_layout())),
            "data": In(stream.Signature(unsigned(8 * w))),
            "flit": Out(stream.Signature(flit_layout(w))),
            "credit": In(credit_layout()),
            "reserve": In(reserve_layout(cfg)),
            "beat_credits": Out(data.ArrayLayout(unsigned(beat_w), n), init=[cfg.landing_beats] * n),
            "hdr_credits": Out(data.ArrayLayout(unsigned(hdr_w), n), init=[cfg.landing_headers] * n),
            "flits": Out(32), "packets": Out(32), "busy": Out(32), "stall": Out(32),
            "flit_phase": Out(3),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        w, pb, pbeats = cfg.beat_bytes, cfg.packet_bytes, cfg.packet_beats
        flit = self.flit.payload

        # -- message state: latched header, beats still to send, beat in packet, packet offset, running CRC
        active = Signal()
        cur = Signal(packet_header_layout())
        rem = Signal(_LENGTH_BITS + 1)
        pkt_beat = Signal(range(pbeats))
        offset = Signal(_LENGTH_BITS)
        crc = Signal(32)

        # The flit being formed: from the latched message, or straight from `msg` when idle so that the first
        # flit does not wait a cycle for the header to be latched.
        h = Signal(packet_header_layout())
        rem_c = Signal.like(rem)
        pkt_c = Signal.like(pkt_beat)
        off_c = Signal.like(offset)
        m.d.comb += [
            h.eq(Mux(active, cur.as_value(), self.msg.payload.as_value())),
            rem_c.eq(Mux(active, rem, _ceil_beats(self.msg.payload.length, w))),
            pkt_c.eq(Mux(active, pkt_beat, 0)),
            off_c.eq(Mux(active, offset, 0)),
        ]

        have = active | self.msg.valid
        need_data = rem_c != 0                      # an empty message's only flit carries no beat
        can_load = ~self.flit.valid | self.flit.ready
        go = Signal()                               # a flit is loaded into the output register
        first = pkt_c == 0
        last_flit = (pkt_c == pbeats - 1) | (rem_c <= 1)
        finishing = go & (rem_c <= 1)               # the message's last flit
        m.d.comb += [
            go.eq(can_load & have & (~need_data | self.data.valid)),
            self.data.ready.eq(can_load & have & need_data),
            self.msg.ready.eq(~active | finishing),
        ]

        # Header on the wire, with this packet's offset and last-packet flag.
        hw = Signal(packet_header_layout())
        m.d.comb += [
            hw.eq(h),
            hw.offset.eq(off_c),
            hw.last.eq(off_c + pb >= h.length),
        ]

        # Zero the bytes of the message's last beat beyond its length.
        tail = h.length[:exact_log2(w)]
        last_beat = rem_c == 1
        keep = [~last_beat | (tail == 0) | (tail > k) for k in range(w)]
        beat = Signal(8 * w)
        m.d.comb += beat.eq(Cat(*[self.data.payload.word_select(k, 8) & keep[k].replicate(8) for k in range(w)]))

        # Intermediate signals keep the XOR networks from being duplicated into every use.
        hdr_crc, base, crc_after = Signal(32), Signal(32), Signal(32)
        m.d.comb += [
            hdr_crc.eq(crc32_next(Const(CRC32_INIT, 32), _header_crc_bits(hw))),
            base.eq(Mux(first, hdr_crc, crc)),
            crc_after.eq(Mux(need_data, crc32_next(base, beat), base)),
        ]

        with m.If(go):
            m.d.sync += [
                self.flit.valid.eq(1),
                flit.data.eq(Mux(need_data, beat, 0)),
                flit.hdr.eq(Mux(first, hw.as_value(), 0)),
                flit.first.eq(first),
                flit.last.eq(last_flit),
                flit.crc.eq(Mux(last_flit, crc_after ^ CRC32_XOROUT, 0)),
                self.flit_phase.eq(h.phase),
            ]
        with m.Elif(self.flit.ready):
            m.d.sync += self.flit.valid.eq(0)

        def start(hdr):
            return [cur.eq(hdr), active.eq(1), rem.eq(_ceil_beats(hdr.length, w)), pkt_beat.eq(0),
                    offset.eq(0)]

        load = self.msg.valid & self.msg.ready
        with m.If(go & ~finishing):
            m.d.sync += [
                rem.eq(rem_c - 1),
                pkt_beat.eq(Mux(last_flit, 0, pkt_c + 1)),
                offset.eq(Mux(last_flit, off_c + pb, off_c)),
                crc.eq(crc_after),
            ]
            with m.If(~active):                     # the first flit went out straight from `msg`
                m.d.sync += [cur.eq(self.msg.payload), active.eq(1)]
        with m.Elif(finishing):
            with m.If(active & load):               # the next message is latched as this one ends
                m.d.sync += start(self.msg.payload)
            with m.Else():
                m.d.sync += active.eq(0)
        with m.Elif(load):
            m.d.sync += start(self.msg.payload)

        # -- credits: returns and reservations of the same cycle both count
        for v in range(cfg.n_channels):
            ret_b = self.credit.beat & (self.credit.beat_vc == v)
            ret_h = self.credit.hdr & (self.credit.hdr_vc == v)
            res = self.reserve.valid & (self.reserve.vc == v)
            m.d.sync += [
                self.beat_credits[v].eq(self.beat_credits[v] + ret_b - Mux(res, self.reserve.beats, 0)),
                self.hdr_credits[v].eq(self.hdr_credits[v] + ret_h - res),
            ]

        sent = self.flit.valid & self.flit.ready
        m.d.sync += [
            self.flits.eq(self.flits + sent),
            self.packets.eq(self.packets + (sent & flit.last)),
            self.busy.eq(self.busy + sent),
            self.stall.eq(self.stall + (self.flit.valid & ~self.flit.ready)),
        ]
        return m


class RxPort(wiring.Component):
    """Receive side of a link port: checks packets and lands their payload per virtual channel.

    Ports
    -----
    flit : In(stream.Signature(flit_layout(beat_bytes)))
        From the link; always ready (the sender's credits guarantee space). A payload flit for a full landing
        buffer, a message header for a full header FIFO, or a packet for a VC >= n_fsms (or a source >=
        rx_sources) is dropped and sets ``overflow``. A packet lands in channel ``hdr.vc`` on a point-to-point
        link, ``hdr.vc + n_fsms * hdr.src`` through a switch (``rx_sources`` > 1).
    overflow : Out(1)
        Sticky (cleared by reset only): a credit protocol violation.
    heads : Out(ArrayLayout(packet_header_layout(), n_channels)), hdr_valid : Out(n_channels)
        Head of each channel's message-header FIFO (the header of the message's first packet, ``offset`` 0).
    sel : In(CHANNEL_BITS)
        The channel the consumer reads. ``data`` shows only beats of ``sel``; after ``sel`` changes, the first beat
        of the new VC is valid one cycle later (``data.valid`` is low in the cycle of the change). Beats of the
        old VC that were prefetched but not taken are kept (they are read again when selected again).
    hdr_pop : In(1)
        Pops the head header of ``sel`` (if any).
    data : Out(stream.Signature(unsigned(8 * beat_bytes)))
        The landed beats of ``sel`` in order, 1 beat/cycle sustained. ``data.valid`` depends combinationally
        on ``sel``. A beat written by the link in cycle t can be valid in cycle t + 2.
    err : Out(n_channels), err_clear : In(1)
        Sticky per-VC error (CRC, header/framing mismatch, overflow on that VC); ``err_clear`` clears the bit of
        ``sel`` (a new error in the same cycle wins). Payload is landed cut-through, before its packet's CRC is
        checked, but a packet's error bit is set before its last beat can be presented on ``data``: check
        ``err`` when taking a message's last beat.
    levels, hdr_levels : Out(ArrayLayout(..., n_channels))
        Per channel: beats landed and not yet taken, headers queued (the deposit unit's fill check).
    credit : Out(credit_layout())
        Registered: a beat credit the cycle after each beat taken from ``data``, a header credit the cycle
        after each effective ``hdr_pop``.
    flits, packets, crc_errors : Out(32)
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        n, w = cfg.n_channels, cfg.beat_bytes
        super().__init__({
            "flit": In(stream.Signature(flit_layout(w))),
            "overflow": Out(1),
            "heads": Out(data.ArrayLayout(packet_header_layout(), n)),
            "hdr_valid": Out(n),
            "sel": In(CHANNEL_BITS),
            "hdr_pop": In(1),
            "data": Out(stream.Signature(unsigned(8 * w))),
            "err": Out(n),
            "err_clear": In(1),
            "levels": Out(data.ArrayLayout(unsigned(exact_log2(cfg.landing_beats) + 1), n)),
            "hdr_levels": Out(data.ArrayLayout(unsigned(exact_log2(cfg.landing_headers) + 1), n)),
            "credit": Out(credit_layout()),
            "flits": Out(32), "packets": Out(32), "crc_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, w, pb, lb, nh = cfg.n_channels, cfg.beat_bytes, cfg.packet_bytes, cfg.landing_beats, cfg.landing_headers
        vbits, abits, hbits = exact_log2(n), exact_log2(lb), exact_log2(nh)
        fbits, sbits = exact_log2(cfg.n_fsms), exact_log2(cfg.rx_sources)
        f, fv = self.flit.payload, self.flit.valid
        m.d.comb += self.flit.ready.eq(1)

        # -- landing buffer: channel v owns rows [v*lb, (v+1)*lb), a ring with write/read pointers (+1 wrap bit)
        m.submodules.landing = landing = Memory(shape=unsigned(8 * w), depth=n * lb, init=[])
        wr = landing.write_port()
        rd = landing.read_port()
        wp = Signal(data.ArrayLayout(unsigned(abits + 1), n))
        rp = Signal(data.ArrayLayout(unsigned(abits + 1), n))

        # -- message-header FIFOs, one small memory per VC with an asynchronous read of its head
        hwp = Signal(data.ArrayLayout(unsigned(hbits + 1), n))
        hrp = Signal(data.ArrayLayout(unsigned(hbits + 1), n))
        hdr_wr = []
        for v in range(n):
            mem = Memory(shape=packet_header_layout(), depth=nh, init=[])
            m.submodules[f"headers{v}"] = mem
            hw_port, hr_port = mem.write_port(), mem.read_port(domain="comb")
            hdr_wr.append(hw_port)
            m.d.comb += [
                hr_port.addr.eq(hrp[v][:hbits]),
                self.heads[v].eq(hr_port.data),
                self.hdr_valid[v].eq(hwp[v] != hrp[v]),
                hw_port.addr.eq(hwp[v][:hbits]),
                hw_port.data.eq(f.hdr),
            ]

        # -- per-VC message in progress (for checking its later packets)
        cur = Signal(data.ArrayLayout(packet_header_layout(), n))
        in_msg = Signal(n)
        exp_off = Signal(data.ArrayLayout(unsigned(_LENGTH_BITS + 1), n))

        # -- packet in progress on the link
        in_pkt = Signal()
        pkt_vc = Signal(CHANNEL_BITS)             # the open packet's channel
        pkt_vc_ok = Signal()
        pkt_nonempty = Signal()
        pkt_left = Signal(range(cfg.packet_beats))     # flits still due after the current one
        crc = Signal(32)

        # Error sources of this cycle as (vc, condition) pairs; OR-ed per VC at the end.
        flags = []
        overflow_set = Signal()

        # Context of this flit: the first flit opens a packet, later ones belong to the open packet.
        hdr = f.hdr
        # the channel a first flit opens: its VC, and through a switch its source's group of VCs
        hdr_ch = Signal(CHANNEL_BITS)
        hdr_ok = Signal()
        m.d.comb += [hdr_ch.eq(Cat(hdr.vc[:fbits], hdr.src[:sbits])),
                     hdr_ok.eq((hdr.vc < cfg.n_fsms) & ((hdr.src < cfg.rx_sources) if cfg.rx_sources > 1 else 1))]
        vc = Signal(CHANNEL_BITS)
        vc_ok = Signal()
        nonempty = Signal()
        framed = Signal()                            # the flit belongs to a packet
        left = Signal.like(pkt_left)
        rest = Signal(_LENGTH_BITS)                   # message bytes from this packet on
        pkt_flits = _ceil_beats(Mux(rest > pb, pb, rest), w)
        m.d.comb += [
            rest.eq(hdr.length - hdr.offset),
            vc.eq(Mux(f.first, hdr_ch, pkt_vc)),
            vc_ok.eq(Mux(f.first, hdr_ok, pkt_vc_ok)),
            nonempty.eq(Mux(f.first, hdr.length != 0, pkt_nonempty)),
            framed.eq(f.first | in_pkt),
            left.eq(Mux(f.first, Mux(hdr.length == 0, 0, pkt_flits - 1), pkt_left)),
        ]
        v_idx = vc[:vbits]
        # A packet cut short (no last flit) or a flit outside any packet: blame the open packet's VC.
        flags.append((pkt_vc, fv & pkt_vc_ok & (f.first & in_pkt | ~framed)))
        # The packet's flit count follows from the message length: `last` must come on time.
        flags.append((vc, fv & framed & vc_ok & (f.last != (left == 0))))

        with m.If(fv):
            m.d.sync += [self.flits.eq(self.flits + 1), self.packets.eq(self.packets + f.last)]
            with m.If(f.first):
                m.d.sync += [pkt_vc.eq(hdr_ch), pkt_vc_ok.eq(hdr_ok), pkt_nonempty.eq(hdr.length != 0)]
            m.d.sync += [in_pkt.eq(framed & ~f.last), pkt_left.eq(left - 1)]
            with m.If(~vc_ok & framed):
                m.d.comb += overflow_set.eq(1)

        # First flit: check the header against the message in progress on its VC.
        c = Signal(packet_header_layout())
        c_in_msg = Signal()
        c_exp_off = Signal.like(exp_off[0])
        m.d.comb += [c.eq(cur[v_idx]), c_in_msg.eq(in_msg.bit_select(v_idx, 1)), c_exp_off.eq(exp_off[v_idx])]
        start = hdr.offset == 0
        same = ((hdr.dst == c.dst) & (hdr.src == c.src) & (hdr.tag == c.tag) & (hdr.chunk == c.chunk) &
                (hdr.phase == c.phase) & (hdr.key == c.key) & (hdr.length == c.length))
        bad_hdr = Signal()
        m.d.comb += bad_hdr.eq(Mux(start, c_in_msg, ~c_in_msg | ~same | (hdr.offset != c_exp_off))
                               | (hdr.last != (hdr.offset + pb >= hdr.length))
                               | ((hdr.length != 0) & (hdr.offset >= hdr.length)))
        opening = fv & f.first & vc_ok
        flags.append((vc, opening & bad_hdr))
        with m.If(opening):
            m.d.sync += [in_msg.bit_select(v_idx, 1).eq(~hdr.last), exp_off[v_idx].eq(hdr.offset + pb)]
            with m.If(start):
                m.d.sync += cur[v_idx].eq(hdr)

        # Header FIFO push on a message's first packet.
        hwp_v, hdr_full = Signal.like(hwp[0]), Signal()
        m.d.comb += [hwp_v.eq(hwp[v_idx]), hdr_full.eq((hwp_v - hrp[v_idx])[:hbits + 1] == nh)]
        push = opening & start
        with m.If(push):
            with m.If(hdr_full):
                m.d.comb += overflow_set.eq(1)
            with m.Else():
                m.d.sync += hwp[v_idx].eq(hwp_v + 1)
        flags.append((vc, push & hdr_full))
        for v in range(n):
            m.d.comb += hdr_wr[v].en.eq(push & ~hdr_full & (v_idx == v))

        # Payload beat: into the VC's ring unless it is full.
        wp_v, beat_full = Signal.like(wp[0]), Signal()
        m.d.comb += [wp_v.eq(wp[v_idx]), beat_full.eq((wp_v - rp[v_idx])[:abits + 1] == lb)]
        write = fv & framed & vc_ok & nonempty
        with m.If(write):
            with m.If(beat_full):
                m.d.comb += overflow_set.eq(1)
            with m.Else():
                m.d.sync += wp[v_idx].eq(wp_v + 1)
        flags.append((vc, write & beat_full))
        m.d.comb += [
            wr.addr.eq(Cat(wp_v[:abits], v_idx)),
            wr.data.eq(f.data),
            wr.en.eq(write & ~beat_full),
        ]

        # CRC over the header word then each payload flit; checked at the packet's last flit.
        hdr_crc, base, crc_after = Signal(32), Signal(32), Signal(32)
        m.d.comb += [
            hdr_crc.eq(crc32_next(Const(CRC32_INIT, 32), _header_crc_bits(hdr))),
            base.eq(Mux(f.first, hdr_crc, crc)),
            crc_after.eq(Mux(nonempty, crc32_next(base, f.data), base)),
        ]
        crc_bad = fv & framed & f.last & ((crc_after ^ CRC32_XOROUT) != f.crc)
        with m.If(fv):
            m.d.sync += crc.eq(crc_after)
        with m.If(crc_bad):
            m.d.sync += self.crc_errors.eq(self.crc_errors + 1)
        flags.append((vc, crc_bad & vc_ok))

        # -- consumer side: a one-beat read pipeline (sync read, `en` holds the beat while stalled).
        # `osel` is the VC of the beat in the read port's output; a beat of another VC than `sel` is not
        # shown and may be overwritten: the ring's read pointer only moves when a beat is taken.
        out_valid = Signal()
        osel = Signal(CHANNEL_BITS)
        sel_idx = self.sel[:vbits]
        sel_ok = self.sel < n
        mine, take, can_issue = Signal(), Signal(), Signal()
        rp_s, count = Signal.like(rp[0]), Signal.like(rp[0])
        m.d.comb += [
            mine.eq(out_valid & (osel == self.sel)),
            take.eq(mine & self.data.ready),
            can_issue.eq(~mine | self.data.ready),
            rp_s.eq(rp[sel_idx]),
            count.eq(wp[sel_idx] - rp_s),
            self.data.valid.eq(mine),
            self.data.payload.eq(rd.data),
            rd.en.eq(can_issue),
            rd.addr.eq(Cat((rp_s + mine)[:abits], sel_idx)),
        ]
        with m.If(can_issue):
            m.d.sync += [out_valid.eq(sel_ok & (count > mine)), osel.eq(self.sel)]
        with m.If(take):
            m.d.sync += rp[sel_idx].eq(rp_s + 1)

        for v in range(n):
            m.d.comb += [self.levels[v].eq(wp[v] - rp[v]), self.hdr_levels[v].eq(hwp[v] - hrp[v])]

        pop = self.hdr_pop & sel_ok & self.hdr_valid.bit_select(sel_idx, 1)
        with m.If(pop):
            m.d.sync += hrp[sel_idx].eq(hrp[sel_idx] + 1)

        m.d.sync += [
            self.credit.beat.eq(take),
            self.credit.beat_vc.eq(self.sel),
            self.credit.hdr.eq(pop),
            self.credit.hdr_vc.eq(self.sel),
        ]

        # -- sticky errors
        with m.If(overflow_set):
            m.d.sync += self.overflow.eq(1)
        for v in range(n):
            with m.If(Cat(*[cond & (where == v) for where, cond in flags]).any()):
                m.d.sync += self.err[v].eq(1)
            with m.Elif(self.err_clear & (self.sel == v)):
                m.d.sync += self.err[v].eq(0)
        return m
