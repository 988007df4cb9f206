"""The receive side's packet checker: :class:`RxDeframer` follows the packets on the link, checks each one
against its message and its CRC, and tells the landing buffer (:mod:`.landing`) what to store.

It also holds the wire-format helpers both ends of a link use (``LENGTH_BITS``, :func:`header_crc_bits`,
:func:`ceil_beats`); the wire format itself is described in :mod:`.link`.
(Golden model: :mod:`syncfabric.sim.golden.link`.)
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...sim.golden.link import STOMP
from ..common.crc import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..common.layouts import CHANNEL_BITS, HEADER_CRC_BYTES, flit_layout, packet_header_layout
from .config import AceConfig
from .landing import beat_write_layout, header_push_layout

__all__ = ["RxDeframer", "LENGTH_BITS", "header_crc_bits", "ceil_beats", "crc_init", "crc_cases", "packet_crc_step"]

#: Bits of the message length field (bytes) and of the beat counts derived from it.
LENGTH_BITS = 20


def header_crc_bits(hdr):
    """The header as the ``HEADER_CRC_BYTES``-byte word the CRC covers (zero-extended)."""
    bits = hdr.as_value()
    return Cat(bits, Const(0, 8 * HEADER_CRC_BYTES - len(bits)))


def crc_init(seq):
    """The CRC register a packet starts from: ``CRC32_INIT`` xor its link sequence number ``seq`` (golden
    :func:`~syncfabric.sim.golden.link.packet_crc` with ``seq``)."""
    return Const(CRC32_INIT, 32) ^ seq


def crc_cases(m, first, hdr, data, seq, crc, nonempty):
    """The CRC register after a flit whose fields are given separately: a ``first`` flit starts from
    :func:`crc_init` of ``seq`` and folds in the header word of ``hdr``, a later one continues from ``crc``
    (the register after the packet's previous flit); the payload ``data`` follows when ``nonempty``.

    The CRC is linear, so each of the four cases (first flit or not, with a payload or not) is one parity
    tree over its inputs - a first flit's header word and payload as one byte string - and the flit's kind
    only picks one: the header's tree does not sit in front of the payload's."""
    init, hdr_word = Signal(32), Signal(8 * HEADER_CRC_BYTES)
    first_hdr, first_all, later_all = Signal(32), Signal(32), Signal(32)
    m.d.comb += [
        init.eq(crc_init(seq)),
        hdr_word.eq(header_crc_bits(hdr)),
        first_hdr.eq(crc32_next(init, hdr_word)),
        first_all.eq(crc32_next(init, Cat(hdr_word, data))),
        later_all.eq(crc32_next(crc, data)),
    ]
    return Mux(first, Mux(nonempty, first_all, first_hdr), Mux(nonempty, later_all, crc))


def packet_crc_step(m, flit, crc, nonempty):
    """The CRC register after ``flit`` (a flit-layout signal) on a receiver: :func:`crc_cases` of its fields
    (xor ``CRC32_XOROUT`` at the last flit for the CRC value)."""
    return crc_cases(m, flit.first, flit.hdr, flit.data, flit.seq, crc, nonempty)


def ceil_beats(length, beat_bytes):
    """Beats of ``length`` bytes."""
    return (length + beat_bytes - 1) >> exact_log2(beat_bytes)


class RxDeframer(wiring.Component):
    """Follows the packets of the incoming flit stream and checks them.

    A packet's first flit opens it on channel ``hdr.vc`` (``hdr.vc + n_fsms * hdr.src`` through a switch);
    its flit count follows from the message length. Per channel the message in progress is kept so that its
    later packets are checked against its first one (same header fields, offsets in order, ``last`` on the
    last packet). The CRC runs over the header word and the payload flits and is checked at the last flit.

    Ports
    -----
    flit : In(stream.Signature(flit_layout(beat_bytes)))
        From the link; always ready.
    hdr : Out(stream.Signature(header_push_layout(), always_ready=True))
        The header of a message's first packet (``offset`` 0) with its channel, in the cycle of its flit.
    beat : Out(stream.Signature(beat_write_layout(cfg), always_ready=True))
        Each payload flit with its channel, in the cycle of the flit (cut-through: before the CRC check).
    err : Out(n_channels)
        The channels with a CRC, header or framing error at the flit of the cycle before (decoded from
        registers: a check's outcome is registered, the CRC compared against the last flit's field a cycle
        later). A flit outside any packet or a packet cut short blames the open packet's channel. A consumer
        sees the error before the flit's beat: the landing buffer shows a beat two cycles after its write.
    bad_channel : Out(1)
        Combinational: a flit of a packet for a VC >= n_fsms (or a source >= rx_sources); nothing of it is
        passed on.
    flits, packets, crc_errors : Out(32)
        Flits and packets received, packets whose CRC did not match (a stomped packet, whose CRC is exactly
        inverted, sets ``err`` but is not counted: its sender marked it bad).
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        super().__init__({
            "flit": In(stream.Signature(flit_layout(cfg.beat_bytes))),
            "hdr": Out(stream.Signature(header_push_layout(), always_ready=True)),
            "beat": Out(stream.Signature(beat_write_layout(cfg), always_ready=True)),
            "err": Out(cfg.n_channels),
            "bad_channel": Out(1),
            "flits": Out(32), "packets": Out(32), "crc_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, w, pb = cfg.n_channels, cfg.beat_bytes, cfg.packet_bytes
        vbits, fbits, sbits = exact_log2(n), exact_log2(cfg.n_fsms), exact_log2(cfg.rx_sources)
        f, fv = self.flit.payload, self.flit.valid
        m.d.comb += self.flit.ready.eq(1)

        # -- per-VC message in progress (for checking its later packets)
        cur = Signal(data.ArrayLayout(packet_header_layout(), n))
        in_msg = Signal(n)
        exp_off = Signal(data.ArrayLayout(unsigned(LENGTH_BITS + 1), n))

        # -- packet in progress on the link
        in_pkt = Signal()
        pkt_vc = Signal(CHANNEL_BITS)             # the open packet's channel
        pkt_vc_ok = Signal()
        pkt_nonempty = Signal()
        pkt_left = Signal(range(cfg.packet_beats))     # flits still due after the current one
        crc = Signal(32)

        # Error sources of this cycle as (vc, condition) pairs; OR-ed per VC at the end.
        flags = []

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
        # flits after a first flit: ceil(min(rest, pb) / w) - 1 for the rest = length - offset bytes from this
        # packet on, as floor((rest - 1) / w) from one subtraction, a compare with a constant and a pick (a
        # chain of subtract, compare, clamp, round up and decrement was the deframer's path at the design
        # point); a rest of 0 (a malformed header, flagged below) gives -1 as the chain did
        rest_m1 = Signal(LENGTH_BITS)                # rest - 1 (modulo)
        first_left = Signal.like(pkt_left)
        m.d.comb += [
            rest_m1.eq(hdr.length + ~hdr.offset),
            first_left.eq(Mux(hdr.length == 0, 0,
                              Mux(hdr.length == hdr.offset, -1,
                                  Mux(rest_m1 >= pb, (pb + w - 1) // w - 1, rest_m1 >> exact_log2(w))))),
            vc.eq(Mux(f.first, hdr_ch, pkt_vc)),
            vc_ok.eq(Mux(f.first, hdr_ok, pkt_vc_ok)),
            nonempty.eq(Mux(f.first, hdr.length != 0, pkt_nonempty)),
            framed.eq(f.first | in_pkt),
            left.eq(Mux(f.first, first_left, pkt_left)),
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
        m.d.comb += self.bad_channel.eq(fv & ~vc_ok & framed)

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

        # To the landing buffer: a message's first header, and every payload beat.
        m.d.comb += [
            self.hdr.valid.eq(opening & start),
            self.hdr.payload.ch.eq(vc),
            self.hdr.payload.hdr.eq(hdr),
            self.beat.valid.eq(fv & framed & vc_ok & nonempty),
            self.beat.payload.ch.eq(vc),
            self.beat.payload.data.eq(f.data),
        ]

        # CRC over the header word then each payload flit; the register after the packet's last flit is
        # checked in the next cycle, against that flit's CRC field kept beside it
        crc_after = packet_crc_step(m, f, crc, nonempty)
        chk, chk_vc, chk_vc_ok, chk_crc = Signal(), Signal(CHANNEL_BITS), Signal(), Signal(32)
        with m.If(fv):
            m.d.sync += crc.eq(crc_after)
        m.d.sync += [chk.eq(fv & framed & f.last), chk_vc.eq(vc), chk_vc_ok.eq(vc_ok), chk_crc.eq(f.crc)]
        # a stomped packet (CRC inverted by its sender: the payload derives from bad data) fails like a
        # corrupted one but is not a fault of this link, so it is not counted
        good = crc ^ CRC32_XOROUT
        crc_bad = chk & (good != chk_crc)
        stomped = good == (chk_crc ^ STOMP)
        with m.If(crc_bad & ~stomped):
            m.d.sync += self.crc_errors.eq(self.crc_errors + 1)

        # the other checks' outcomes are registered too, so every error reaches ``err`` a cycle after its
        # flit: still before the flit's beat can leave the landing buffer (two cycles after it is written)
        late_flags = [(chk_vc, crc_bad & chk_vc_ok)]
        for where, cond in flags:
            w_r, c_r = Signal(CHANNEL_BITS), Signal()
            m.d.sync += [w_r.eq(where), c_r.eq(cond)]
            late_flags.append((w_r, c_r))
        m.d.comb += self.err.eq(Cat(*[Cat(*[cond & (where == v) for where, cond in late_flags]).any()
                                      for v in range(n)]))
        return m
