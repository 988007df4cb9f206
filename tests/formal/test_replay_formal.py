"""Formal proof of the link retransmission's transmit side (:class:`~syncfabric.hdl.ace.retry.ReplayTx`,
docs/engine.md section 15): the retransmission window never drops a flit that is not acknowledged, frees a
packet only after its acknowledgement, and every go-back sends the window's flits again in order from the oldest
unacknowledged one. Proved, unbounded, by k-induction (Yices, depth 1) for the 4-flit window with packets of 1 or
2 flits in a few seconds, and (``slow`` marker, under a minute) for an 8-flit window with packets of 1 to 3
flits; the sequence numbers have the real ``SEQ_BITS`` = 12 and wrap.

The harness is the TX port, the link and the receiver. The port offers flits in any cycle (the stream rule: once
``valid``, the flit holds until taken), in packets of 1 to ``max_packet`` flits, numbered as the port numbers
them (``seq`` on every flit); the link takes flits at will; ``timeout`` takes any value in any cycle (0 too); the
receiver sends ACK ``exp - 1`` or NAK ``exp`` for an ``exp`` (``rcv``) that never goes back and never passes the
packets the port has handed over in full: more than a real receiver may (it acknowledges only what the link
delivered), so the proof covers every real one. One flit of the stream is followed (the symbolic-index
technique: a free ``pick`` chooses the flit taken in its cycle, so every flit of every trace is the followed one
in some trace); its payload, packet and position are recorded when it is taken. Only a few payload bits are
driven (two of ``data``, ``first``/``last``, ``seq``; the rest is 0): the buffer is bit-sliced, so they tell
flits apart as well as the whole word would. Proved:

* no unacknowledged flit is lost: until its packet is acknowledged the followed flit stays in the window
  (between the oldest unacknowledged and write pointers), and whenever the link is shown the flit's position
  after it was taken it gets exactly the recorded flit, ``seq`` included;
* the flits on ``o`` since the last go-back are the window's in order from the oldest unacknowledged one at the
  go-back (from position 0 before the first), never one not written or already freed, and a stalled flit holds;
* a packet is freed only after it is acknowledged, and the bookkeeping behind it: ``ap <= sp <= wp``,
  ``wp - ap <= replay_flits``, ``wp`` counts the flits taken, the ends FIFO holds one entry per whole packet
  kept, ``aseq`` counts the packets freed, ``acked`` is the receiver's ``exp - 1``.

The inductive invariant. ABC's PDR does not close these properties (540 s, at frame 44), and alone they are not
inductive: the induction step could start from a state whose FIFO of ends or buffer contradicts the pointers. So
the rest of the block's state is tied to the harness's by assertions of their own (each proved with the rest):

* the FIFO of packet ends: the inner FIFO's pointers and level agree, its output register is loaded behind at
  most one entry, and its entries oldest first are the ends of the kept packets, ``ap`` < end < end < ... <=
  ``wp``, with ``wp`` - the last end = the flits of the open packet (fewer than ``max_packet``);
* ``room`` (registered) is exactly "the window is not full";
* the output register holds the flit read in the previous cycle or one stalled (never both), ``o_pos`` is ``sp``
  less the flit just read, and a flit read is at ``ap`` or after it;
* the followed flit, until its packet is acknowledged, is held and lies in its packet (the FIFO's entry
  ``kept_acked + t_ahead``, or the open packet after the last end); while held and in the window, the replay
  buffer's slot for its position holds exactly it.

The replay timer, the go-back request, ``open_pkt`` (a go-back waits for a packet boundary), ``hi`` and the
counters are left unconstrained: the properties hold whenever a go-back comes. The block's and its FIFO's
internal signals are probed by source edits (:func:`formal_helpers.mutant`) that keep the locals of
``elaborate`` and add combinational read ports to the replay buffer and the FIFO's storage; they add signals
only, the block's behaviour is the real one.

Broken variants (source mutants of the block) must fail the same assertions: BMC from reset to ``DEPTH`` = 10
steps finds each counterexample (a trace from reset, which a failed induction step alone is not).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Elaboratable, Fragment, Module, Mux, Signal, Value
from amaranth.lib import fifo

from formal_helpers import Harness, assert_fails, assert_proves, mutant, past
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.retry import ReplayTx
from syncfabric.hdl.common.layouts import SEQ_BITS

pytestmark = pytest.mark.formal

# a window of 4 flits (the least the configuration allows: 4 packets of packet_bytes = one 8-byte beat); the port
# sends packets of 1 or 2 flits all the same (ReplayTx does not look at packet_beats: only `last` ends a packet)
CFG = AceConfig.small(beat_bytes=8, packet_bytes=8, replay_flits=4)
MAX_PACKET = 2
DATA_BITS = 2

#: the edits that keep ReplayTx.elaborate's locals (pointers, FIFO, internal strobes) in ``self.probe``, add a
#: combinational read port of the replay buffer (``self.peek``, for the harness only) and build the FIFO of ends
#: from ``self.ends_cls`` (a probed ``SyncFIFOBuffered``)
PROBES = [("return m", "self.probe = dict(locals()); self.peek = mem.read_port(domain='comb'); return m"),
          ("fifo.SyncFIFOBuffered(", "self.ends_cls(")]

#: ``SyncFIFOBuffered`` keeping its locals (``produce``, ``consume``, ``inner_level``) in ``self.probe`` and with a
#: combinational read port per entry of its inner storage in ``self.peek`` (behaviour unchanged)
EndsFIFO = mutant(fifo.SyncFIFOBuffered, '    if platform == "formal":',
                  '    self.probe = dict(locals())\n'
                  '    self.peek = [storage.read_port(domain="comb") for _ in range(inner_depth)]\n'
                  '    if platform == "formal":')


def driven(flit):
    """The bits of a flit the harness drives (the rest is 0 in every flit)."""
    return Cat(flit.data[:DATA_BITS], flit.first, flit.last, flit.seq)


class _Elaborated(Elaboratable):
    """An already elaborated fragment as a submodule."""

    def __init__(self, fragment):
        self.fragment = fragment

    def elaborate(self, platform):
        return self.fragment


class ReplayHarness(Harness):
    """A probed :class:`ReplayTx` under a free port, link and receiver (see the module docstring).

    ``bug``: an ``(old, new)`` source edit of the block."""

    def __init__(self, bug=None, cfg=CFG, max_packet=MAX_PACKET):
        super().__init__()
        self.bug, self.cfg, self.max_packet = bug, cfg, max_packet

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        R, PB = cfg.replay_flits, self.max_packet
        W = R.bit_length()                       # a flit position with its wrap bit, as the block's pointers
        edits = [self.bug, *PROBES] if self.bug else PROBES
        tx = mutant(ReplayTx, *edits[0], also=edits[1:])(cfg)
        tx.ends_cls = EndsFIFO
        m.submodules.tx = _Elaborated(Fragment.get(tx, platform))
        p = tx.probe
        wp, sp, ap, ends = p["wp"], p["sp"], p["ap"], p["ends"]

        def dist(a, b):                          # b - a in flit positions (modulo the pointers' range)
            return (b - a)[:W]

        # -- the port: packets of 1..packet_beats flits, numbered, each flit held until taken
        # packet numbers relative to the receiver's `rcv` (small counters, not more 12-bit ones for PDR to relate)
        rcv = Signal(SEQ_BITS, name="rcv")                   # the receiver's exp: it has every packet before
        pend = Signal(range(R + 2), name="pend")             # packets taken in full, not yet received
        kept_acked = Signal(range(R + 2), name="kept_acked") # packets received, not yet freed
        taken = Signal(W, name="taken")                      # flits taken (modulo the pointers' range)
        in_pkt = Signal(range(PB), name="in_pkt")            # flits of the current packet taken
        pl = tx.i.payload
        m.d.comb += [
            tx.i.valid.eq(self.free(1, "i_valid")),
            pl.data.eq(self.free(DATA_BITS, "i_data")), pl.last.eq(self.free(1, "i_last")),
            pl.first.eq(in_pkt == 0), pl.seq.eq(rcv + pend),
        ]
        with m.If(in_pkt == PB - 1):
            m.d.comb += Assume(pl.last)
        waiting, held = past(m, tx.i.valid & ~tx.i.ready, "i_waiting"), past(m, driven(pl), "i_held")
        with m.If(waiting):
            m.d.comb += Assume(tx.i.valid & (driven(pl) == held))
        take = tx.i.valid & tx.i.ready
        m.d.sync += [taken.eq(taken + take),
                     in_pkt.eq(Mux(take, Mux(pl.last, 0, in_pkt + 1), in_pkt))]

        # -- the link takes at will; the timeout is anything
        m.d.comb += [tx.o.ready.eq(self.free(1, "o_ready")), tx.timeout.eq(self.free(16, "timeout"))]

        # -- the receiver: `rcv` (its exp) never goes back nor passes the packets handed over; ACK rcv-1, NAK rcv
        a = tx.ack
        m.d.comb += [a.ack.eq(self.free(1, "ack")), a.nak.eq(self.free(1, "nak")),
                     a.ack_seq.eq(self.free(SEQ_BITS, "ack_seq"))]
        step = Signal(SEQ_BITS, name="rcv_step")             # how far this acknowledgement moves exp
        m.d.comb += [step.eq(Mux(a.ack, a.ack_seq + 1, a.ack_seq) - rcv), Assume(~(a.ack & a.nak))]
        acking = a.ack | a.nak
        moved = Mux(acking, step, 0)
        with m.If(acking):
            m.d.comb += Assume(step <= pend)
        free = p["free"]
        m.d.sync += [rcv.eq(rcv + moved), pend.eq(pend + (take & pl.last) - moved),
                     kept_acked.eq(kept_acked + moved - free)]

        # -- the followed flit: chosen by `pick` when taken
        pick = self.free(1, "pick")
        tracked, t_acked, t_held = Signal(name="tracked"), Signal(name="t_acked"), Signal(name="t_held")
        t_pos, t_ahead = Signal(W, name="t_pos"), Signal(range(R + 2), name="t_ahead")   # its packet - rcv
        t_flit = Signal(len(driven(pl)), name="t_flit")
        choose = take & pick & ~tracked
        ahead_now = Mux(tracked, t_ahead, pend)
        covered = moved > ahead_now                          # this acknowledgement takes in its packet
        in_window = dist(ap, t_pos) < dist(ap, wp)
        with m.If(choose):
            m.d.sync += [tracked.eq(1), t_pos.eq(taken), t_flit.eq(driven(pl)), t_held.eq(1)]
        with m.Elif(tracked):
            m.d.sync += t_held.eq(t_held & in_window)
        with m.If(choose | tracked):
            m.d.sync += [t_acked.eq(t_acked | covered), t_ahead.eq(Mux(covered, 0, ahead_now - moved))]

        # -- what the link is shown: position `o_pos` next, from the oldest unacknowledged one at a go-back
        o_pos = Signal(W, name="o_pos")
        o_stalled = past(m, tx.o.valid & ~tx.o.ready, "o_stalled")   # o held a flit the link did not take
        o_new = tx.o.valid & ~o_stalled
        with m.If(p["go_back"]):
            m.d.sync += o_pos.eq(ap)
        with m.Elif(o_new):
            m.d.sync += o_pos.eq(o_pos + 1)

        # -- the properties
        with m.If(tracked & ~t_acked):
            m.d.comb += Assert(t_held & in_window, "an unacknowledged flit stays in the window")
        with m.If(o_new):
            m.d.comb += Assert(dist(ap, o_pos) < dist(ap, wp), "shows only a flit written and kept")
        with m.If(o_new & tracked & t_held & (o_pos == t_pos)):
            m.d.comb += Assert(driven(tx.o.payload) == t_flit, "the flit's position shows exactly that flit")
        o_held = past(m, driven(tx.o.payload), "o_held")
        with m.If(o_stalled):
            m.d.comb += Assert(tx.o.valid & (driven(tx.o.payload) == o_held), "a stalled flit holds")

        with m.If(free):
            m.d.comb += Assert(kept_acked != 0, "frees only an acknowledged packet")

        # the bookkeeping (invariants that are properties too)
        m.d.comb += [
            Assert(wp == taken, "wp counts the flits taken"),
            Assert(dist(ap, sp) <= dist(ap, wp), "ap <= sp <= wp"),
            Assert(dist(ap, wp) <= R, "the window holds at most replay_flits flits"),
            Assert(ends.level == pend + kept_acked, "one end in the FIFO per whole packet kept"),
            Assert(p["aseq"] == (rcv - kept_acked)[:SEQ_BITS], "aseq counts the packets freed"),
            Assert(p["acked"] == (rcv - 1)[:SEQ_BITS], "acked is the receiver's exp - 1"),
            Assert(pend + kept_acked <= R, "at most a window of packets kept"),
        ]

        # -- the inductive invariant: the rest of the block's state tied to the harness's
        # the FIFO of ends: its inner FIFO (produce, consume, inner_level) and output register (r_rdy, r_data)
        fp, ND = ends.probe, ends.probe["inner_depth"]
        produce, consume, inner = fp["produce"], fp["consume"], fp["inner_level"]
        for k, port in enumerate(ends.peek):
            m.d.comb += port.addr.eq(k)
        stored = Array(port.data for port in ends.peek)

        def inner_entry(j):                      # the inner FIFO's j-th oldest entry
            idx = consume + j
            return stored[Mux(idx >= ND, idx - ND, idx)]

        # the FIFO's entries oldest first, and the packet boundaries from ap: bound[0] = ap, bound[j + 1] the end
        # of the FIFO's j-th entry, wp past the last one
        entry = [Mux(ends.r_rdy, ends.r_data if j == 0 else inner_entry(j - 1), inner_entry(j % ND))
                 for j in range(R)]
        bound = Array([ap] + [Mux(j < ends.level, entry[j], wp) for j in range(R)] + [wp])
        level = ends.level
        m.d.comb += [
            Assert((produce < ND) & (consume < ND), "the inner FIFO's pointers are in range"),
            Assert((inner == Mux(produce >= consume, produce - consume, produce + ND - consume))
                   | ((produce == consume) & (inner == ND)), "the inner FIFO's level is its pointers' distance"),
            Assert(ends.r_rdy | (inner <= 1), "the FIFO's output register is loaded behind at most one entry"),
            Assert(in_pkt < PB, "a packet has at most max_packet flits"),
            Assert(dist(bound[level], wp) == in_pkt, "the flits after the last end are the open packet's"),
            Assert(dist(ap, bound[level]) <= dist(ap, wp), "the last end is not past wp"),
        ]
        for j in range(R):
            with m.If(j < level):
                m.d.comb += Assert(dist(ap, bound[j]) < dist(ap, bound[j + 1]), "the ends follow each other")

        # the write side's registered room, the output register, and where the link's position stands
        loaded = p["loaded"]
        m.d.comb += [
            Assert(p["room"] == (dist(ap, wp) != R), "room: the window is not full"),
            Assert(tx.o.valid == (loaded | o_stalled), "o holds a flit just read or one stalled"),
            Assert(~(loaded & o_stalled), "a flit is read only into a free output register"),
            Assert(o_pos == (sp - loaded)[:W], "o_pos: the position of the flit read last, or sp"),
            Assert(~loaded | (sp != ap), "the flit just read (at sp - 1) is at ap or after it"),
        ]

        # the followed flit: until acknowledged, in its packet (the FIFO's entry kept_acked + t_ahead) and held;
        # while held and in the window, the buffer keeps it
        k = kept_acked + t_ahead
        with m.If(tracked & ~t_acked):
            m.d.comb += [
                Assert(t_held, "an unacknowledged followed flit is held"),
                Assert(t_ahead <= pend, "its packet is one handed over or the open one"),
                Assert((dist(ap, bound[k]) <= dist(ap, t_pos)) & (dist(ap, t_pos) < dist(ap, bound[k + 1])),
                       "it is in its packet"),
            ]
        m.d.comb += tx.peek.addr.eq(t_pos[:W - 1])
        with m.If(tracked & t_held & in_window):
            m.d.comb += Assert(driven(tx.peek.data) == t_flit, "the buffer keeps the followed flit")
        return m


#: k-induction depth: the assertions are 1-inductive
KIND_DEPTH = 1


def test_replay_window_never_drops_an_unacknowledged_flit():
    assert_proves(ReplayHarness(), "replay_tx", engine="kind", depth=KIND_DEPTH)


@pytest.mark.slow
def test_replay_window_never_drops_an_unacknowledged_flit_8_flit_window():
    """The same proof for an 8-flit window and packets of up to 3 flits (about 40 s)."""
    cfg = AceConfig.small(beat_bytes=8, packet_bytes=8, replay_flits=8)
    assert_proves(ReplayHarness(cfg=cfg, max_packet=3), "replay_tx_8", engine="kind", depth=KIND_DEPTH)


# -- broken variants: source mutants of the block, each must fail the same assertions -----------------------------

#: steps from reset searched for a broken variant's counterexample: enough to fill the window, send it, take a NAK
#: or time out, go back and send again
DEPTH = 10

MUTANTS = {
    # frees the head packet once sent, acknowledged or not
    "frees_unacknowledged": ("free.eq(head_acked & ~(sp - ends.r_data)[aw])",
                             "free.eq(ends.r_rdy & ~(sp - ends.r_data)[aw])"),
    # a go-back resumes where it was instead of at the oldest unacknowledged flit
    "goes_back_to_sp": ("sp.eq(ap), self.replays", "sp.eq(sp), self.replays"),
    # room for one flit more than the buffer: the oldest unacknowledged flit is overwritten
    "room_off_by_one": ("!= R)", "!= R + 1)"),
    # a NAK taken as acknowledging the packet it names
    "nak_acknowledges": ("acked.eq(a.ack_seq - 1)", "acked.eq(a.ack_seq)"),
    # a packet's end recorded one flit short: its last flit is freed with the packet before it
    "end_one_short": ("ends.w_data.eq(wp + 1)", "ends.w_data.eq(wp)"),
    # frees an acknowledged packet before a go-back has sent it again in full: sp falls behind ap
    "frees_before_resent": ("free.eq(head_acked & ~(sp - ends.r_data)[aw])", "free.eq(head_acked)"),
    # goes back while freeing the head packet: sp goes back to a position just freed
    "goes_back_while_freeing": ("want & ~head_acked & ~loaded", "want & ~loaded"),
    # `room` computed from the old ap in a cycle that frees (the window only looks full: the exact-room invariant)
    "room_ignores_free": ("Mux(free, ends.r_data, ap)", "ap"),
}


@pytest.mark.parametrize("bug", MUTANTS)
def test_replay_check_fails_on_a_broken_window(bug):
    assert_fails(ReplayHarness(bug=MUTANTS[bug]), f"replay_tx_mutant_{bug}", engine="bmc", depth=DEPTH)
