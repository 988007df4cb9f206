"""Model of a packet switch for system simulation: a crossbar between ``n_ports`` engines with virtual output
queues, per-output round-robin arbitration and a credit return path routed back by source.

Data path. Every input keeps one FIFO of flits per other port (its virtual output queues, each
:attr:`Switch.queue_depth` deep); an input is always ready (the link delivers a flit in the cycle it arrives)
and writes a flit to the queue of its packet's output (the header's ``dst`` on the first flit, kept for the
rest of the packet). An output carries one packet at a time, from its first flit to its last (so packets
never interleave on a link, which is what the receiving port expects), and picks the next packet round robin
among the inputs whose queue for it holds one. Queue ``(i, j)`` is read by output ``j`` alone, so a packet
waiting for a busy output never holds a packet for another output behind it (no head-of-line blocking; an
input may feed several outputs in one cycle, as an output-queued switch's memory would). Per (source,
destination) the order is kept.

Flow control. The engines keep end-to-end credits: a transmitter sends a message only with credits for the
destination's landing channel of that (source, virtual channel) pair (``rx_sources`` in the engine
configuration), so whatever sits in the switch is already paid for at its destination. A queue can
therefore never hold more than the credits its source owns for the queue's destination, ``n_fsms`` channels of
``landing_beats`` payload flits and ``landing_headers`` header-only flits each: :func:`queue_bound` is the
default depth and the switch is lossless by construction. ``overflow`` (sticky) reports a flit that found its
queue full or named a destination that is not another port; tests assert it stays low.

Hop-by-hop hold. A switch of the design point cannot have queues that deep (``paper`` engines: 4,160 flits of
64 B per queue with 4 landing headers, 56 queues on 8 ports), so a queue may be shorter than
:func:`queue_bound`, given a ``hold_margin``: the flits that can still arrive after the queue asks its link to
pause (the round trip of the up-link: the flits on it, those its transmitter sends before the request reaches
it, and the registers between). Input ``i`` raises ``hold<i>`` (registered) while any of its queues holds
more than ``queue_depth - hold_margin`` flits (any of them may be the arriving flits' destination); the
system top delays it by the link's latency and holds the link's transmitter (XOFF/XON, as a real switch's
pause frames or link credits would). Nothing is lost and nothing deadlocks: a held flit is still paid for
at its destination, whose output always drains, so every queue empties. Without a ``hold_margin`` the queue must be :func:`queue_bound` deep and ``hold<i>`` stays low.
:func:`round_trip_queue` sizes both for links of up to a given latency. ``hold_cycles`` counts the cycles in
which any input holds.

Credit return. Receiver ``j`` names the channel it freed, ``vc + n_fsms * source``; the switch hands the
credit to ``source`` as channel ``vc + n_fsms * j``, the index of its credit counter for destination ``j``.
Several receivers may free credits for one source in the same cycle, so the switch keeps a pending count per
(source, channel) and returns one beat credit and one header credit per source and cycle, lowest channel
first (a source transmits at most one flit per cycle, so this keeps up on average). A real switch would carry
credits in packets on the links; here they ride a sideband with the latency of the receiver's link.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.layouts import credit_layout, flit_layout
from ..common.refuse import Checked

__all__ = ["Switch", "queue_bound", "round_trip_queue"]


def queue_bound(n_fsms, landing_beats, landing_headers):
    """Flits a virtual output queue may have to hold: every credit its source owns for the queue's
    destination (see the module docstring)."""
    return n_fsms * (landing_beats + landing_headers)


def round_trip_queue(max_latency):
    """``(queue_depth, hold_margin)`` of a switch whose up-links have latencies up to ``max_latency``: the
    margin is a round trip (the flits on the link and those sent while the hold travels back, one each per
    cycle at most) plus the hold's register and a flit of slack on each side; the queue is twice that, so the
    queue does not run dry while the link restarts after the hold is released."""
    margin = 2 * max_latency + 4
    return 2 * margin, margin


class Switch(Checked, wiring.Component):
    """Crossbar of ``n_ports`` ports carrying ``flit_layout(beat_bytes)`` flits, for engines with ``n_fsms``
    virtual channels and ``landing_beats``/``landing_headers`` per landing channel.

    Ports
    -----
    inp<i> : In(stream.Signature(flit_layout)), always ready
    hold<i> : Out(1)                       input i's queue is nearly full: its link's transmitter should pause
    out<j> : Out(stream.Signature(flit_layout))
    credit_in<j> : In(credit_layout())     credits freed by the receiver on port ``j``
    credit_out<i> : Out(credit_layout())   credits for the transmitter on port ``i``
    overflow : Out(1)                      sticky: a flit was dropped (queue full or bad destination)
    flits_in, flits_out : Out(ArrayLayout(unsigned(32), n_ports))   flits per input / output
    hold_cycles : Out(32)                  cycles in which any ``hold<i>`` is high
    """

    @classmethod
    def check(cls, beat_bytes, n_ports, n_fsms, landing_beats, landing_headers, queue_depth=None,
              hold_margin=None):
        if n_ports < 2:
            raise ValueError(f"a switch needs at least 2 ports, not {n_ports}")
        if n_fsms < 1 or n_fsms & (n_fsms - 1):
            raise ValueError(f"n_fsms must be a power of two, not {n_fsms}")
        depth = queue_bound(n_fsms, landing_beats, landing_headers) if queue_depth is None \
            else int(queue_depth)
        if depth < 2:
            raise ValueError(f"queue_depth must be at least 2, not {depth}")
        if hold_margin is not None and not 1 <= hold_margin < depth:
            raise ValueError(f"hold_margin must be in 1..queue_depth-1 ({depth - 1}), not {hold_margin}")

    def __init__(self, beat_bytes, n_ports, n_fsms, landing_beats, landing_headers, queue_depth=None,
                 hold_margin=None):
        self.queue_depth = queue_bound(n_fsms, landing_beats, landing_headers) if queue_depth is None \
            else int(queue_depth)
        self.hold_margin = hold_margin
        self.beat_bytes, self.n_ports, self.n_fsms = beat_bytes, n_ports, n_fsms
        self.landing_beats, self.landing_headers = landing_beats, landing_headers
        fl = flit_layout(beat_bytes)
        members = {"overflow": Out(1), "hold_cycles": Out(32),
                   "flits_in": Out(data.ArrayLayout(unsigned(32), n_ports)),
                   "flits_out": Out(data.ArrayLayout(unsigned(32), n_ports))}
        for i in range(n_ports):
            members[f"inp{i}"] = In(stream.Signature(fl))
            members[f"hold{i}"] = Out(1)
            members[f"out{i}"] = Out(stream.Signature(fl))
            members[f"credit_in{i}"] = In(credit_layout())
            members[f"credit_out{i}"] = Out(credit_layout())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        P, F = self.n_ports, self.n_fsms
        fl = flit_layout(self.beat_bytes)
        fbits = exact_log2(F)

        # ---- virtual output queues: input i's packets for output j in queue (i, j) ----------------------
        # the destination of the packet arriving on an input: from its first flit, kept for the rest of it
        voq = {}
        drops = []
        for i in range(P):
            inp = getattr(self, f"inp{i}")
            flit = inp.payload
            dst_keep = Signal.like(flit.hdr.dst, name=f"in{i}_dst")
            dst = Signal.like(flit.hdr.dst, name=f"in{i}_wdst")
            m.d.comb += [inp.ready.eq(1), dst.eq(Mux(flit.first, flit.hdr.dst, dst_keep))]
            with m.If(inp.valid & flit.first):
                m.d.sync += dst_keep.eq(flit.hdr.dst)
            # a packet for its own port or beyond the switch is dropped whole
            bad_dst = (dst >= P) | (dst == i)
            full = Signal(name=f"in{i}_full")
            near = []
            for j in range(P):
                if j == i:
                    continue
                q = fifo.SyncFIFOBuffered(width=fl.size, depth=self.queue_depth)
                m.submodules[f"voq{i}_{j}"] = q
                voq[i, j] = (q, data.View(fl, q.r_data))
                m.d.comb += [q.w_data.eq(flit.as_value()),
                             q.w_en.eq(inp.valid & ~bad_dst & (dst == j))]
                with m.If(dst == j):
                    m.d.comb += full.eq(~q.w_rdy)
                if self.hold_margin is not None:
                    near.append(q.level > self.queue_depth - self.hold_margin)
            drops.append(inp.valid & (bad_dst | full))
            with m.If(inp.valid):
                m.d.sync += self.flits_in[i].eq(self.flits_in[i] + 1)
            if self.hold_margin is not None:
                m.d.sync += getattr(self, f"hold{i}").eq(Cat(*near).any())
        with m.If(Cat(*drops).any()):
            m.d.sync += self.overflow.eq(1)
        with m.If(Cat(*[getattr(self, f"hold{i}") for i in range(P)]).any()):
            m.d.sync += self.hold_cycles.eq(self.hold_cycles + 1)

        # ---- outputs: one packet at a time, round robin among the inputs with a packet for it ----------
        # every queue (i, j) is read by output j alone, so a packet for a busy output never holds one for
        # another output behind it
        for j in range(P):
            out = getattr(self, f"out{j}")
            busy = Signal(name=f"out{j}_busy")
            owner = Signal(range(P), name=f"out{j}_owner")
            last_owner = Signal(range(P), name=f"out{j}_last", init=P - 1)
            srcs = [i for i in range(P) if i != j]
            req = Cat(*[voq[i, j][0].r_rdy & voq[i, j][1].first if i != j else 0 for i in range(P)])
            # round robin: the first requester after the last owner
            pick = Signal(range(P), name=f"out{j}_pick")
            pick_any = Signal(name=f"out{j}_pick_any")
            # two priority encoders: the lowest requester above the last owner, else the lowest of all
            above = Cat(*[req[i] & (i > last_owner) for i in range(P)])
            for i in reversed(range(P)):
                with m.If(req[i]):
                    m.d.comb += [pick.eq(i), pick_any.eq(1)]
            with m.If(above.any()):
                for i in reversed(range(P)):
                    with m.If(above[i]):
                        m.d.comb += pick.eq(i)
            src = Signal(range(P), name=f"out{j}_src")
            m.d.comb += src.eq(Mux(busy, owner, pick))
            active = busy | pick_any
            sel_flit = Signal(fl, name=f"out{j}_flit")
            sel_valid = Signal(name=f"out{j}_valid")
            with m.Switch(src):
                for i in srcs:
                    with m.Case(i):
                        m.d.comb += [sel_flit.eq(voq[i, j][1]), sel_valid.eq(voq[i, j][0].r_rdy)]
            m.d.comb += [out.valid.eq(active & sel_valid), out.payload.eq(sel_flit)]
            fire = out.valid & out.ready
            for i in srcs:
                m.d.comb += voq[i, j][0].r_en.eq(fire & (src == i))
            with m.If(fire):
                m.d.sync += [self.flits_out[j].eq(self.flits_out[j] + 1), busy.eq(~sel_flit.last)]
                with m.If(~busy):
                    m.d.sync += [owner.eq(pick), last_owner.eq(pick)]
            with m.Elif(~busy & pick_any):
                # hold the pick until the output takes the first flit
                m.d.sync += [busy.eq(1), owner.eq(pick), last_owner.eq(pick)]

        # ---- credit return: receiver j's channel vc + F*src -> source src's channel vc + F*j -------------
        cw = self.landing_beats.bit_length() + 1
        hw = self.landing_headers.bit_length() + 1
        for s in range(P):
            beat_pend = [Signal(cw, name=f"cr{s}_beat{c}") for c in range(P * F)]
            hdr_pend = [Signal(hw, name=f"cr{s}_hdr{c}") for c in range(P * F)]
            co = getattr(self, f"credit_out{s}")
            for kind, pend, valid_f, vc_f in (("beat", beat_pend, "beat", "beat_vc"),
                                              ("hdr", hdr_pend, "hdr", "hdr_vc")):
                # lowest pending channel is returned this cycle
                take = Signal(range(P * F), name=f"cr{s}_{kind}_take")
                take_any = Signal(name=f"cr{s}_{kind}_any")
                for c in reversed(range(P * F)):
                    with m.If(pend[c] != 0):
                        m.d.comb += [take.eq(c), take_any.eq(1)]
                m.d.sync += [getattr(co, valid_f).eq(take_any), getattr(co, vc_f).eq(take)]
                for j in range(P):
                    ci = getattr(self, f"credit_in{j}")
                    ch = getattr(ci, vc_f)
                    for f in range(F):
                        c = f + F * j
                        inc = getattr(ci, valid_f) & (ch[:fbits] == f) & ((ch >> fbits) == s)
                        dec = take_any & (take == c)
                        m.d.sync += pend[c].eq(pend[c] + inc - dec)
        return m
