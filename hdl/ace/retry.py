"""Link-level retransmission (docs/engine.md section 15): :class:`ReplayTx` keeps every flit a TX port sends
until the receiver acknowledges its packet and sends again from the first unacknowledged packet when asked
to; :class:`ReplayRx` passes on only whole packets that pass the link CRC, in sequence, and acknowledges
them. Together they make a link that corrupts, drops or duplicates flits deliver every packet exactly once,
in order, as the transmitter sent it (go-back-N, as PCIe's data-link layer: sequence numbers, ACK/NAK,
a replay buffer and a replay timer).

Protocol. The TX port numbers its packets (``flit.seq``, on every flit of a packet, modulo ``2**SEQ_BITS``;
the packet CRC starts from it, so a corrupted number fails the check). The receiver expects ``exp``:

* a packet that ends well (its flit count follows from its header, the CRC matches, or is exactly inverted:
  a *stomped* packet is intact on this link) with ``seq == exp`` is committed to the port, ``exp`` steps and
  the receiver sends ``ACK exp - 1``;
* one with a ``seq`` behind ``exp`` (a replayed packet it already has) is dropped and ``ACK exp - 1`` sent;
* anything else (a CRC or framing error, a packet ahead of ``exp`` after a lost one, stray flits) is dropped,
  and the first time for this ``exp`` the receiver sends ``NAK exp``.

The acknowledgements ride the credit return path (``credit_layout``: ``ack``/``nak``/``ack_seq``), which the
link models deliver intact. The transmitter frees the flits of every packet up to an ACKed (or NAKed - 1)
number; on a NAK, or when no acknowledgement has freed anything for ``timeout`` cycles while packets are
unacknowledged (the lost last packet, a lost replay), it goes back to its oldest unacknowledged packet and
sends everything from there again. It counts both (``replays``) and the flits sent again (``resent``).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..common.crc import CRC32_XOROUT
from ..common.layouts import SEQ_BITS, credit_layout, flit_layout
from ..common.logic import late
from ...sim.golden.link import STOMP
from .config import AceConfig
from .rxframe import ceil_beats, packet_crc_step

__all__ = ["ReplayRx", "ReplayTx", "replay_timeout", "seq_behind"]

HALF = 1 << (SEQ_BITS - 1)


def replay_timeout(cfg: AceConfig, links, rank):
    """The REPLAY_TIMEOUT for ``rank`` of a system whose links are ``links`` (rows ``(src, src_port, dst,
    dst_port, latency, (num, den))``): twice the longest round trip of the links it sends on (the latency
    both ways, a packet's flits at the link's rate and the ports' pipelines), at most the register's 16 bits."""
    trips = [2 * lat + -(-cfg.packet_beats * den // num) + 16
             for src, _, _, _, lat, (num, den) in links if src == rank]
    return min(0xFFFF, 2 * max(trips, default=0)) or 0xFFFF


def seq_behind(a, b):
    """``a`` is ``b`` or before it in sequence-number order (modulo ``2**SEQ_BITS``, within half the space)."""
    return (b - a)[:SEQ_BITS] < HALF


class ReplayTx(wiring.Component):
    """Transmit side of link retransmission, between :class:`~.link.TxPort` and the link.

    Ports
    -----
    i : In(stream.Signature(flit_layout(beat_bytes)))
        The port's flits, numbered (``seq``). Taken while the replay buffer (``replay_flits`` flits) has room.
    o : Out(stream.Signature(flit_layout(beat_bytes)))
        To the link; registered (one cycle more than the port alone).
    ack : In(credit_layout())
        The credit return path; only ``ack``/``nak``/``ack_seq`` are used.
    timeout : In(16)
        Cycles without an acknowledgement freeing a packet, while some are unacknowledged, after which the
        transmitter sends again from the oldest (0: never). Set it above the link's round trip.
    replays, resent : Out(32)
        Go-backs (on a NAK or the timer) and flits sent again.
    """

    def __init__(self, cfg: AceConfig):
        if not cfg.replay_flits:
            raise ValueError("ReplayTx needs a configuration with replay_flits > 0")
        self.cfg = cfg
        fl = flit_layout(cfg.beat_bytes)
        super().__init__({
            "i": In(stream.Signature(fl)), "o": Out(stream.Signature(fl)),
            "ack": In(credit_layout()), "timeout": In(16),
            "replays": Out(32), "resent": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        R = self.cfg.replay_flits
        aw = exact_log2(R)
        m.submodules.mem = mem = Memory(shape=flit_layout(self.cfg.beat_bytes), depth=R, init=[])
        wr, rd = mem.write_port(), mem.read_port()
        # flit indices with a wrap bit: written (wp), next to send (sp), oldest unacknowledged (ap)
        wp, sp, ap, hi = Signal(aw + 1), Signal(aw + 1), Signal(aw + 1), Signal(aw + 1)
        # where each written packet ends, oldest first: the one at the head is packet `aseq`
        m.submodules.ends = ends = fifo.SyncFIFOBuffered(width=aw + 1, depth=R)
        aseq = Signal(SEQ_BITS)
        acked = Signal(SEQ_BITS, init=(1 << SEQ_BITS) - 1)   # every packet up to this one is acknowledged

        # -- write: a flit from the port into the buffer; a packet's last flit records where it ends. `room` is
        # registered from the pointers' next values (exact, and the port's ready starts at a flip-flop). The
        # FIFO of ends never fills: it holds at most one entry per flit kept.
        take = self.i.valid & self.i.ready
        room = Signal(init=1)
        m.d.comb += [
            self.i.ready.eq(room),
            wr.addr.eq(wp[:aw]), wr.data.eq(self.i.payload), wr.en.eq(take),
            ends.w_data.eq(wp + 1), ends.w_en.eq(take & self.i.payload.last),
        ]
        m.d.sync += wp.eq(wp + take)

        # -- acknowledgements: free the head packet while it is acknowledged (one packet per cycle)
        a = self.ack
        with m.If(a.ack):
            m.d.sync += acked.eq(a.ack_seq)
        with m.Elif(a.nak):
            m.d.sync += acked.eq(a.ack_seq - 1)
        # ... and sent in full since the last go-back (sp at or past its end), so sp never falls behind ap
        head_acked, free = Signal(), Signal()
        m.d.comb += [head_acked.eq(ends.r_rdy & seq_behind(aseq, acked)),
                     free.eq(head_acked & ~(sp - ends.r_data)[aw]), ends.r_en.eq(free)]
        with m.If(free):
            m.d.sync += [ap.eq(ends.r_data), aseq.eq(aseq + 1)]
        m.d.sync += room.eq(((wp + take) - Mux(free, ends.r_data, ap))[:aw + 1] != R)

        # -- replay: asked by a NAK or the timer; done once the acknowledged packets are freed and the flits
        # read so far end at a packet boundary (a packet is not cut in the middle, but see below)
        want, timer = Signal(), Signal(16)
        loaded, open_pkt = Signal(), Signal()      # a flit was read last cycle; the flits read end mid-packet
        with m.If(loaded):
            m.d.sync += open_pkt.eq(~rd.data.last)
        expired = (self.timeout != 0) & (timer == self.timeout)
        go_back = Signal()
        # (at the write frontier a packet cut short is not waited for: the buffer may be full in its middle)
        m.d.comb += go_back.eq(want & ~head_acked & ~loaded & (~open_pkt | (sp == wp)))
        with m.If(free | go_back | (ap == wp)):
            m.d.sync += timer.eq(0)
        with m.Elif(~expired):
            m.d.sync += timer.eq(timer + 1)
        with m.If(go_back):
            m.d.sync += [want.eq(0), sp.eq(ap), self.replays.eq(self.replays + 1)]
        with m.Elif(a.nak | expired):
            m.d.sync += want.eq(1)

        # -- send: read the flit at sp into the output (the read port's data is the output register)
        load = Signal()
        m.d.comb += [
            load.eq((sp != wp) & ~go_back & (~self.o.valid | self.o.ready)),
            rd.addr.eq(sp[:aw]), rd.en.eq(load),
            self.o.payload.eq(rd.data),
        ]
        m.d.sync += loaded.eq(load)
        with m.If(load):
            m.d.sync += [sp.eq(sp + 1), self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        # `hi`: the first flit never sent; a load below it is a resend
        with m.If(load & (sp == hi)):
            m.d.sync += hi.eq(sp + 1)
        m.d.sync += self.resent.eq(self.resent + (load & (sp != hi)))
        return m


class ReplayRx(wiring.Component):
    """Receive side of link retransmission, between the link and :class:`~.link.RxPort`: keeps each packet
    until its last flit has been checked and passes on only good packets in sequence (one packet's time of
    latency more than the port alone).

    Ports
    -----
    i : In(stream.Signature(flit_layout(beat_bytes)))
        From the link; always ready; registered here.
    o : Out(stream.Signature(flit_layout(beat_bytes)))
        Whole good packets in sequence, one flit per cycle; ``ready`` is ignored (the port is always ready).
    ack : Out(credit_layout())
        ``ack``/``nak``/``ack_seq`` for the transmitter (the other fields are 0); registered.
    crc_errors, naks, dropped : Out(32)
        Packets that failed the CRC (a stomped packet is not one), NAKs sent, packets dropped for any reason
        (errors, duplicates, packets after a lost one).
    """

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        fl = flit_layout(cfg.beat_bytes)
        super().__init__({
            "i": In(stream.Signature(fl)), "o": Out(stream.Signature(fl)),
            "ack": Out(credit_layout()),
            "crc_errors": Out(32), "naks": Out(32), "dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        w, pb, P = cfg.beat_bytes, cfg.packet_bytes, cfg.packet_beats
        D = 4 << ceil_log2(P)                      # a packet being received, and up to three draining
        aw = exact_log2(D)
        m.submodules.mem = mem = Memory(shape=flit_layout(w), depth=D, init=[])
        wr, rd = mem.write_port(), mem.read_port()
        wp, cp, rp = Signal(aw + 1), Signal(aw + 1), Signal(aw + 1)   # written, committed, read

        # the flit is registered where it enters
        f, fv = Signal(flit_layout(w)), Signal()
        m.d.comb += self.i.ready.eq(1)
        m.d.sync += [fv.eq(self.i.valid), f.eq(self.i.payload)]

        # -- the packet in progress: flits still due after this one, its number, its CRC
        in_pkt, left, pseq, crc = Signal(), Signal(range(P)), Signal(SEQ_BITS), Signal(32)
        hdr = f.hdr
        rest = hdr.length - hdr.offset
        first_left = Mux(hdr.length == 0, 0, ceil_beats(Mux(rest > pb, pb, rest), w) - 1)
        left_c = Signal.like(left)
        m.d.comb += left_c.eq(Mux(f.first, first_left, left))
        ours = fv & (f.first | in_pkt)             # a flit of a packet (not a stray one)
        ends = ours & (f.last | (left_c == 0))     # the packet's last flit, or the one it should have been
        framing_ok = (f.last == (left_c == 0)) & (f.first | (f.seq == pseq))
        nonempty = ~(f.first & (hdr.length == 0))

        crc_after = packet_crc_step(m, f, crc, nonempty)
        final = crc_after ^ CRC32_XOROUT
        crc_ok = (final == f.crc) | (final == (f.crc ^ STOMP))
        with m.If(fv):
            m.d.sync += [crc.eq(crc_after), in_pkt.eq(ours & ~ends), left.eq(left_c - 1)]
            with m.If(f.first):
                m.d.sync += pseq.eq(f.seq)

        # -- write every flit of a packet; a first flit restarts at the commit point (dropping a packet cut short)
        wpos = Mux(f.first, cp, wp)
        m.d.comb += [wr.addr.eq(wpos[:aw]), wr.data.eq(f), wr.en.eq(ours)]
        with m.If(ours):
            m.d.sync += wp.eq(wpos + 1)

        # -- verdict at the packet's end (or at a flit that breaks it)
        exp, nak_sent = Signal(SEQ_BITS), Signal()
        seq = Mux(f.first, f.seq, pseq)
        good = framing_ok & crc_ok
        broken = fv & ((f.first & in_pkt) | ~ours)          # cut short by a new packet, or a stray flit
        commit = ends & good & (seq == exp)
        dup = ends & good & (seq != exp) & seq_behind(seq, exp)
        bad = (ends & ~commit & ~dup) | broken
        a = self.ack
        m.d.sync += [a.ack.eq(0), a.nak.eq(0)]
        with m.If(commit):
            m.d.sync += [cp.eq(wpos + 1), exp.eq(exp + 1), nak_sent.eq(0), a.ack.eq(1), a.ack_seq.eq(seq)]
        with m.Elif(dup):
            m.d.sync += [wp.eq(cp), a.ack.eq(1), a.ack_seq.eq(exp - 1)]
        with m.Elif(ends):
            m.d.sync += wp.eq(cp)
        nak = bad & ~commit & ~dup & ~nak_sent
        with m.If(nak):
            m.d.sync += [nak_sent.eq(1), a.nak.eq(1), a.ack_seq.eq(exp)]
        m.d.sync += [
            self.naks.eq(self.naks + late(m, nak, "nak_late")),
            self.crc_errors.eq(self.crc_errors + late(m, ends & framing_ok & ~crc_ok, "crc_err_late")),
            self.dropped.eq(self.dropped + late(m, (ends & ~commit) | (f.first & in_pkt & fv), "dropped_late")),
        ]

        # -- read committed flits out, one per cycle
        load = rp != cp
        m.d.comb += [rd.addr.eq(rp[:aw]), rd.en.eq(load), self.o.payload.eq(rd.data)]
        m.d.sync += [rp.eq(rp + load), self.o.valid.eq(load)]
        return m
