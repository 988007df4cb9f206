"""Link ports of the engine: :class:`TxPort` cuts messages into packets of flits, :class:`RxPort` checks them
(:class:`~.rxframe.RxDeframer`) and lands their payload in per-virtual-channel buffers
(:class:`~.landing.LandingBuffer`) for the RECV unit.

Wire format (``flit_layout(beat_bytes)``): a message of ``length`` bytes is sent as packets of up to
``packet_beats`` flits, every flit carrying a payload beat. The header rides in the ``hdr`` sideband of a
packet's first flit with ``offset`` (byte offset of the packet in the message) and ``last`` (last packet of the
message) filled in; ``hdr`` is zero on the other flits. ``first``/``last`` mark packet boundaries. The last
flit of a packet carries ``crc``: CRC-32 (the zlib value) over the header bits as ``HEADER_CRC_BYTES``
little-endian bytes, then every payload flit in full; the bytes of a message's last beat beyond ``length`` are
zero. An empty message is one flit with ``first = last = 1``, data 0, ``hdr.length = 0``, ``hdr.last = 1``,
and its CRC covers the header only. ``crc`` is zero on the other flits. A packet whose payload the sender
knows to derive from bad data is *stomped*: its CRC goes out inverted (``STOMP``), and the receiver treats it
as a failed packet without counting a CRC error of its link (end-to-end poison, docs/engine.md section 14).
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
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.crc import CRC32_XOROUT
from ...sim.golden.link import STOMP
from ..common.layouts import CHANNEL_BITS, SEQ_BITS, credit_layout, flit_layout, packet_header_layout
from ..common.logic import late, split_counter
from .config import AceConfig
from .landing import LandingBuffer, consumer_members
from .rxframe import LENGTH_BITS, RxDeframer, ceil_beats, crc_cases

__all__ = ["TxPort", "RxPort", "reserve_layout", "tx_beat_layout"]


def tx_beat_layout(beat_bytes):
    """A payload beat handed to :class:`TxPort`: the data and ``poison`` (the beat derives from data that
    failed a check: the packet it goes out in is stomped)."""
    return data.StructLayout({"data": unsigned(8 * beat_bytes), "poison": 1})

def reserve_layout(cfg: AceConfig):
    """One cycle of :attr:`TxPort.reserve`: debit ``beats`` beat credits and one header credit of channel
    ``vc`` (the virtual channel, plus ``n_fsms`` times the destination rank through a switch)."""
    return data.StructLayout({"valid": 1, "vc": CHANNEL_BITS, "beats": unsigned(cfg.landing_beats.bit_length())})


class TxPort(wiring.Component):
    """Transmit side of a link port: messages (``msg`` header + ``data`` beats) in, flits out.

    Ports
    -----
    msg : In(stream.Signature(packet_header_layout()))
        A message header (``offset``/``last`` ignored). Accepted when the port is idle or in the cycle it
        sends the last flit of the previous message.
    data : In(stream.Signature(tx_beat_layout(beat_bytes)))
        The ``ceil(length / beat_bytes)`` payload beats of each message, in order; may have bubbles and may
        be presented before the message's ``msg`` is accepted. A beat with ``poison`` stomps its packet (the
        packet's CRC goes out xor ``STOMP``).
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
        ``flit.valid & ~flit.ready``. Each counts the events of two cycles ago
        (:func:`~syncfabric.hdl.common.logic.split_counter`).
    flit_phase : Out(3)
        The program phase (header ``phase``) of the message the flit in the output register belongs to, for
        the per-phase counters.

    Built for an FPGA's fabric or with beats of 64 bytes or more (``cfg.tx_crc_stage``), the flit is formed in
    one register stage and its CRC computed in the next (one more cycle from ``msg`` to the first flit; still
    one flit per cycle): the CRC's parity trees over a first flit's header and payload then start at
    flip-flops instead of behind the header mux and the last beat's byte mask (at 64-byte beats, 1.13 ns at
    45 nm in one stage).
    A skid register behind the CRC stage holds a flit the link did not take, so ``flit.ready`` reaches only
    that register (``flit.valid`` and ``flit.payload`` leave through a 2:1 mux of flip-flops).
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        n, w = cfg.n_channels, cfg.beat_bytes
        beat_w, hdr_w = cfg.landing_beats.bit_length(), cfg.landing_headers.bit_length()
        super().__init__({
            "msg": In(stream.Signature(packet_header_layout())),
            "data": In(stream.Signature(tx_beat_layout(w))),
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
        staged = cfg.tx_crc_stage
        # the flit register the message logic loads: the output itself, or (fabric) a stage in front of the
        # CRC stage, both advanced by the output's enable
        o_valid, o_ready = self.flit.valid, self.flit.ready
        flit = self.flit.payload
        if staged:
            o_valid, flit = Signal(name="form_valid"), Signal(flit_layout(w), name="form")
            form_poison, form_nonempty, form_phase = Signal(), Signal(), Signal(3)
            # the CRC stage's register, and a skid register behind it that takes its flit when the link is
            # not ready: the stages in front advance on flip-flops (`skid_full`) instead of on the link's
            # ready, which comes from another unit (on a board, from the pin-level link port)
            crc_valid, crc_flit, crc_phase = Signal(name="crc_valid"), Signal(flit_layout(w), name="crc_flit"), Signal(3)
            skid_full = Signal(name="skid_full")
            skid = Signal(flit_layout(w), name="skid", reset_less=True)     # (data: off the units' reset net)
            skid_phase = Signal(3, reset_less=True)
            o_ready = ~crc_valid | ~skid_full

        # -- message state: latched header, beats still to send (and whether that is one / more than one, in
        # flip-flops, so that the message's end is known without comparing the count), beat in packet, packet
        # offset, running CRC
        active = Signal()
        # ~active in a flip-flop of its own: `active` selects the whole flit (a wide fanout that buffering puts
        # in series), and `msg.ready` - which the register slice in front of the port fans out again - should
        # start at a flip-flop with a handful of loads
        idle = Signal(init=1)
        cur = Signal(packet_header_layout())
        rem = Signal(LENGTH_BITS + 1)
        rem_one, rem_many = Signal(), Signal()
        pkt_beat = Signal(range(pbeats))
        offset = Signal(LENGTH_BITS)
        crc = Signal(32)
        stomp = Signal()            # a beat of the packet so far was poisoned
        # the latched message's current packet is its last (offset + packet >= length), in a flip-flop: the
        # header word, which the CRC covers, does not wait for an add and a compare
        pkt_last = Signal()

        # The flit being formed: from the latched message, or straight from `msg` when idle so that the first
        # flit does not wait a cycle for the header to be latched.
        h = Signal(packet_header_layout())
        pkt_c = Signal.like(pkt_beat)
        off_c = Signal.like(offset)
        m.d.comb += [
            h.eq(Mux(active, cur.as_value(), self.msg.payload.as_value())),
            pkt_c.eq(Mux(active, pkt_beat, 0)),
            off_c.eq(Mux(active, offset, 0)),
        ]

        # beats left: one, or more than one (none: an empty message), from the flags or the new header's length
        length = self.msg.payload.length
        one_c, many_c = Signal(), Signal()
        m.d.comb += [one_c.eq(Mux(active, rem_one, (length != 0) & (length <= w))),
                     many_c.eq(Mux(active, rem_many, length > w))]
        have = active | self.msg.valid
        need_data = one_c | many_c                  # an empty message's only flit carries no beat
        can_load = ~o_valid | o_ready
        go = Signal()                               # a flit is loaded into the output register
        first = pkt_c == 0
        last_flit = (pkt_c == pbeats - 1) | ~many_c
        finishing = go & ~many_c                    # the message's last flit
        m.d.comb += [
            go.eq(can_load & have & (~need_data | self.data.valid)),
            self.data.ready.eq(can_load & have & need_data),
            # = ~active | finishing, where an active message's last flit is `~rem_many` and, with a beat
            # left, that beat's arrival
            self.msg.ready.eq(idle | (can_load & ~rem_many & (~rem_one | self.data.valid))),
        ]

        # Header on the wire, with this packet's offset and last-packet flag.
        hw = Signal(packet_header_layout())
        m.d.comb += [
            hw.eq(h),
            hw.offset.eq(off_c),
            hw.last.eq(Mux(active, pkt_last, pb >= length)),     # (a new message starts at offset 0)
        ]

        # Zero the bytes of the message's last beat beyond its length.
        tail = h.length[:exact_log2(w)]
        last_beat = one_c
        keep = [~last_beat | (tail == 0) | (tail > k) for k in range(w)]
        beat = Signal(8 * w)
        m.d.comb += beat.eq(Cat(*[self.data.payload.data.word_select(k, 8) & keep[k].replicate(8)
                                  for k in range(w)]))
        poisoned = Signal()         # this packet is stomped: an earlier beat or this one was poisoned
        m.d.comb += poisoned.eq(Mux(first, 0, stomp) | (need_data & self.data.payload.poison))

        # Intermediate signals keep the XOR networks from being duplicated into every use.
        # The packet's link sequence number (retransmission; 0 without it) starts its CRC (crc_init).
        seq = Signal(SEQ_BITS)
        crc_after = Signal(32)
        if not staged:
            m.d.comb += crc_after.eq(crc_cases(m, first, hw, beat, seq, crc, need_data))

        with m.If(go):
            m.d.sync += [
                o_valid.eq(1),
                flit.data.eq(Mux(need_data, beat, 0)),
                flit.hdr.eq(Mux(first, hw.as_value(), 0)),
                flit.first.eq(first),
                flit.last.eq(last_flit),
                flit.seq.eq(seq),
                stomp.eq(poisoned),
            ]
            if staged:
                m.d.sync += [form_poison.eq(poisoned), form_nonempty.eq(need_data), form_phase.eq(h.phase)]
            else:
                m.d.sync += [
                    flit.crc.eq(Mux(last_flit, crc_after ^ CRC32_XOROUT ^ Mux(poisoned, STOMP, 0), 0)),
                    self.flit_phase.eq(h.phase),
                ]
        with m.Elif(o_ready):
            m.d.sync += o_valid.eq(0)
        if staged:
            # the CRC stage: the packet's CRC register runs over the formed flits as they move out
            out_crc = Signal(32)
            m.d.comb += crc_after.eq(crc_cases(m, flit.first, flit.hdr, flit.data, flit.seq, out_crc,
                                               form_nonempty))
            with m.If(o_valid & o_ready):
                m.d.sync += [
                    crc_valid.eq(1),
                    crc_flit.eq(flit),
                    crc_flit.crc.eq(Mux(flit.last, crc_after ^ CRC32_XOROUT ^ Mux(form_poison, STOMP, 0), 0)),
                    crc_phase.eq(form_phase),
                    out_crc.eq(crc_after),
                ]
            with m.Elif(~skid_full):
                m.d.sync += crc_valid.eq(0)
            # the link sees the skid register while it is full (the CRC stage waits), else the CRC stage's
            with m.If(skid_full):
                with m.If(self.flit.ready):
                    m.d.sync += skid_full.eq(0)
            with m.Elif(crc_valid & ~self.flit.ready):
                m.d.sync += [skid_full.eq(1), skid.eq(crc_flit), skid_phase.eq(crc_phase)]
            m.d.comb += [
                self.flit.valid.eq(skid_full | crc_valid),
                self.flit.payload.eq(Mux(skid_full, skid, crc_flit)),
                self.flit_phase.eq(Mux(skid_full, skid_phase, crc_phase)),
            ]
        if cfg.replay_flits:                        # packets are numbered only where a link retransmits
            with m.If(go & last_flit):
                m.d.sync += seq.eq(seq + 1)

        def start(hdr):
            return [cur.eq(hdr), active.eq(1), idle.eq(0), rem.eq(ceil_beats(hdr.length, w)), pkt_beat.eq(0),
                    offset.eq(0), pkt_last.eq(pb >= hdr.length), rem_one.eq((hdr.length != 0) & (hdr.length <= w)),
                    rem_many.eq(hdr.length > w)]

        load = self.msg.valid & self.msg.ready
        with m.If(go & ~finishing):                 # more than one beat was left
            m.d.sync += [
                # beats left after this one: of the latched message, or of a new one (a length of more than
                # one beat: ceil(length / w) - 1 = (length - 1) // w), each without an add in front of another
                rem.eq(Mux(active, rem - 1, (length - 1) >> exact_log2(w))),
                rem_one.eq(Mux(active, rem == 2, (length > w) & (length <= 2 * w))),
                rem_many.eq(Mux(active, rem > 2, length > 2 * w)),
                pkt_beat.eq(Mux(last_flit, 0, pkt_c + 1)),
                # (the add from the offset register, the active select after it: ``active`` fans out to the
                # whole header mux and arrives late)
                offset.eq(Mux(active, Mux(last_flit, offset + pb, offset), Mux(last_flit, pb, 0))),
                # (the next packet's compare made from the latched message's registers or, for a message
                # that starts now, against a constant: the active select picks a result, not operands)
                pkt_last.eq(Mux(last_flit, Mux(active, offset + 2 * pb >= cur.length, 2 * pb >= length),
                                hw.last)),
                crc.eq(crc_after if not staged else 0),
            ]
            with m.If(~active):                     # the first flit went out straight from `msg`
                m.d.sync += [cur.eq(self.msg.payload), active.eq(1), idle.eq(0)]
        with m.Elif(finishing):
            with m.If(active & load):               # the next message is latched as this one ends
                m.d.sync += start(self.msg.payload)
            with m.Else():
                m.d.sync += [active.eq(0), idle.eq(1)]
        with m.Elif(load):
            m.d.sync += start(self.msg.payload)

        # -- credits: returns and reservations of the same cycle both count (both sums are made before the
        # reservation, which comes through the control plane's job builder, is known; it only picks one)
        for v in range(cfg.n_channels):
            ret_b = self.credit.beat & (self.credit.beat_vc == v)
            ret_h = self.credit.hdr & (self.credit.hdr_vc == v)
            res = self.reserve.valid & (self.reserve.vc == v)
            beats = self.beat_credits[v] + ret_b
            hdrs = self.hdr_credits[v] + ret_h
            m.d.sync += [
                self.beat_credits[v].eq(Mux(res, beats - self.reserve.beats, beats)),
                self.hdr_credits[v].eq(Mux(res, hdrs - 1, hdrs)),
            ]

        # the counters add flip-flops (events counted a cycle late) in 16-bit parts (split_counter): the
        # 32-bit incrementers were the paper engine's longest paths at 45 nm
        sent = late(m, self.flit.valid & self.flit.ready, "sent_late")
        sent_count = split_counter(m, sent, 32, "sent_count")
        m.d.comb += [
            self.flits.eq(sent_count),
            self.busy.eq(sent_count),
            self.packets.eq(split_counter(m, late(m, self.flit.valid & self.flit.ready & self.flit.payload.last,
                                                  "packet_late"), 32, "packet_count")),
            self.stall.eq(split_counter(m, late(m, self.flit.valid & ~self.flit.ready, "stall_late"), 32,
                                        "stall_count")),
        ]
        return m


class RxPort(wiring.Component):
    """Receive side of a link port: checks packets and lands their payload per virtual channel.

    Two blocks: :class:`~.rxframe.RxDeframer` follows and checks the packets, :class:`~.landing.LandingBuffer`
    keeps the landed beats and headers per channel and returns their credits; the port holds the sticky
    ``overflow`` and ``err`` bits.

    Ports
    -----
    flit : In(stream.Signature(flit_layout(beat_bytes)))
        From the link; always ready (the sender's credits guarantee space), registered at the port before
        anything looks at it (one cycle of latency). A payload flit for a full landing
        buffer, a message header for a full header FIFO, or a packet for a VC >= n_fsms (or a source >=
        rx_sources) is dropped and sets ``overflow``. A packet lands in channel ``hdr.vc`` on a point-to-point
        link, ``hdr.vc + n_fsms * hdr.src`` through a switch (``rx_sources`` > 1).
    overflow : Out(1)
        Sticky (cleared by reset only): a credit protocol violation.
    heads : Out(ArrayLayout(packet_header_layout(), n_channels)), hdr_valid : Out(n_channels)
        Head of each channel's message-header FIFO (the header of the message's first packet, ``offset`` 0).
    nexts : Out(ArrayLayout(packet_header_layout(), n_channels)), hdr_two : Out(n_channels)
        The entry behind the head of each channel's header FIFO, and whether there is one.
    sel : In(CHANNEL_BITS)
        The channel the consumer reads. ``data`` shows only beats of ``sel``; after ``sel`` changes, the first beat
        of the new VC is valid one cycle later (``data.valid`` is low in the cycle of the change). Beats of the
        old VC that were prefetched but not taken are kept (they are read again when selected again).
    hdr_pop : In(1)
        Pops the head header of ``sel`` (if any).
    data : Out(stream.Signature(unsigned(8 * beat_bytes)))
        The landed beats of ``sel`` in order, 1 beat/cycle sustained. ``data.valid`` depends combinationally
        on ``sel``. A flit presented on ``flit`` in cycle t is registered at the port and its beat can be
        valid here in cycle t + 3.
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

    Built for an FPGA's fabric (``cfg.fabric``), a message's header enters its queue a cycle later (a
    register between the deframer and the landing buffer's header queues).
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        n, w = cfg.n_channels, cfg.beat_bytes
        super().__init__({
            "flit": In(stream.Signature(flit_layout(w))),
            "overflow": Out(1),
            **consumer_members(cfg),
            "err": Out(n),
            "err_clear": In(1),
            "credit": Out(credit_layout()),
            "flits": Out(32), "packets": Out(32), "crc_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.deframer = dfr = RxDeframer(self.cfg)
        m.submodules.buffer = buf = LandingBuffer(self.cfg)
        # the flit is registered where it enters the engine: the deframer's CRC and header checks start at a
        # flop, not at the link's wires (a timing path of its own on silicon; and a simulator re-evaluates
        # logic fed by a module input whenever any input moves, several times per clock edge)
        m.d.comb += self.flit.ready.eq(1)
        m.d.sync += [dfr.flit.valid.eq(self.flit.valid), dfr.flit.payload.eq(self.flit.payload)]
        if self.cfg.fabric:
            # (an FPGA's LUTs) a message's header reaches its queue a cycle after its flit: the header checks'
            # outcome and the queue's full flag then drive the write enables of every stored header bit from
            # flip-flops (a consumer waits for the header anyway; its beats land as before)
            m.d.sync += [buf.hdr_in.valid.eq(dfr.hdr.valid), buf.hdr_in.payload.eq(dfr.hdr.payload)]
        else:
            wiring.connect(m, dfr.hdr, buf.hdr_in)
        wiring.connect(m, dfr.beat, buf.beat_in)
        wiring.connect(m, buf.data, wiring.flipped(self.data))
        m.d.comb += [
            buf.sel.eq(self.sel), buf.hdr_pop.eq(self.hdr_pop),
            self.heads.eq(buf.heads), self.hdr_valid.eq(buf.hdr_valid),
            self.nexts.eq(buf.nexts), self.hdr_two.eq(buf.hdr_two),
            self.data_pending.eq(buf.data_pending), self.data_ch.eq(buf.data_ch),
            self.levels.eq(buf.levels), self.hdr_levels.eq(buf.hdr_levels), self.credit.eq(buf.credit),
            self.flits.eq(dfr.flits), self.packets.eq(dfr.packets), self.crc_errors.eq(dfr.crc_errors),
        ]

        # -- sticky errors: a bad channel or a dropped header/beat is an overflow; a new error beats a clear
        err_set = dfr.err | buf.dropped
        with m.If(dfr.bad_channel | buf.dropped.any()):
            m.d.sync += self.overflow.eq(1)
        for v in range(self.cfg.n_channels):
            with m.If(err_set[v]):
                m.d.sync += self.err[v].eq(1)
            with m.Elif(self.err_clear & (self.sel == v)):
                m.d.sync += self.err[v].eq(0)
        return m
