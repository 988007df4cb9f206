"""Formal proof of the landing buffer (:class:`~syncfabric.hdl.ace.landing.LandingBuffer`) as a set of FIFOs:
per channel, a ring of payload beats and a queue of message headers, written by the link side and read by one
consumer that switches channels at will.

The harness writes beats and headers into any channel in any cycle (also into a full one) and the consumer
selects any channel number (also one that does not exist), takes beats and pops headers at will. A shadow queue
per channel holds what landed, one bit of each beat and header (the rings and queues are bit-sliced, so one
payload bit tells one entry from another as well as the whole word would). Proved, unbounded, with PDR:

* ``levels``/``hdr_levels`` are exactly the shadow counts: nothing is lost or duplicated, a ring never under- or
  overflows; ``dropped`` rises exactly for a write into a full ring or queue;
* ``data`` shows only a landed beat of the selected channel, the oldest not yet taken, also after the consumer
  left the channel with a beat prefetched and came back; ``heads``/``nexts``, ``hdr_valid``/``hdr_two`` are the
  first two queued headers;
* full rate: a beat that was there in the previous cycle, on a channel selected in both cycles, is shown.

Broken variants (source mutants of the real block, :func:`formal_helpers.mutant`) must fail it.
"""

import pytest
from amaranth.hdl import Array, Assert, Cat, Const, Module, Mux, Signal

from formal_helpers import Harness, assert_fails, assert_proves, mutant, past
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.landing import LandingBuffer
from syncfabric.hdl.common.layouts import CHANNEL_BITS

pytestmark = pytest.mark.formal

CFG = AceConfig.small(beat_bytes=8, packet_bytes=16, n_fsms=2, landing_beats=4, landing_headers=2)


def _shadow_queue(m, name, depth, push, bit, pop):
    """A queue of ``depth`` one-bit entries (one spare to see an overflow): its entries and count. ``push`` and
    ``pop`` are functions of the count."""
    q = [Signal(name=f"{name}_q{k}") for k in range(depth + 1)]
    count = Signal(range(depth + 2), name=f"{name}_count")
    push, pop = push(count), pop(count)
    n = Signal.like(count, name=f"{name}_after_pop")
    m.d.comb += n.eq(count - pop)
    for k in range(depth + 1):
        shifted = Mux(pop, q[k + 1] if k < depth else q[k], q[k])
        m.d.sync += q[k].eq(Mux(push & (n == k), bit, shifted))
    m.d.sync += count.eq(n + push)
    return q, count


class LandingHarness(Harness):
    """A :class:`LandingBuffer` between a free link side and a free consumer (see the module docstring)."""

    def __init__(self, buf_cls=LandingBuffer):
        super().__init__()
        self.buf_cls = buf_cls

    def elaborate(self, platform):
        m = Module()
        cfg = CFG
        n, lb, nh = cfg.n_channels, cfg.landing_beats, cfg.landing_headers
        vbits = (n - 1).bit_length()
        m.submodules.buf = buf = self.buf_cls(cfg)

        # -- link side: a beat and a header in any cycle, for any channel; one free bit of payload each
        b_bit, h_bit = self.free(1, "beat_bit"), self.free(1, "hdr_bit")
        b_ch, h_ch = self.free(vbits, "beat_ch"), self.free(vbits, "hdr_ch")
        m.d.comb += [
            buf.beat_in.valid.eq(self.free(1, "beat_valid")), buf.beat_in.payload.ch.eq(b_ch),
            buf.beat_in.payload.data.eq(Cat(b_bit, Const(0, 8 * cfg.beat_bytes - 1))),
            buf.hdr_in.valid.eq(self.free(1, "hdr_valid")), buf.hdr_in.payload.ch.eq(h_ch),
            buf.hdr_in.payload.hdr.tag.eq(h_bit),
        ]
        # -- consumer: any channel number, takes and pops at will
        sel = self.free(CHANNEL_BITS, "sel")
        m.d.comb += [buf.sel.eq(sel), buf.data.ready.eq(self.free(1, "data_ready")),
                     buf.hdr_pop.eq(self.free(1, "hdr_pop"))]
        take = buf.data.valid & buf.data.ready

        beats, hdrs = [], []
        for v in range(n):
            mine = sel == v
            bq, bcount = _shadow_queue(m, f"beats{v}", lb, lambda c: buf.beat_in.valid & (b_ch == v) & (c != lb),
                                       b_bit, lambda c: take & mine)
            hq, hcount = _shadow_queue(m, f"hdrs{v}", nh, lambda c: buf.hdr_in.valid & (h_ch == v) & (c != nh),
                                       h_bit, lambda c: buf.hdr_pop & mine & (c != 0))
            b_full, h_full = bcount == lb, hcount == nh
            beats.append((bq, bcount))
            hdrs.append((hq, hcount))
            dropped = (buf.beat_in.valid & (b_ch == v) & b_full) | (buf.hdr_in.valid & (h_ch == v) & h_full)
            m.d.comb += [
                Assert(buf.levels[v] == bcount, "levels = beats landed and not taken"),
                Assert(buf.hdr_levels[v] == hcount, "hdr_levels = headers queued and not popped"),
                Assert(buf.dropped[v] == dropped, "drops exactly a write into a full ring or queue"),
                Assert(buf.hdr_valid[v] == (hcount != 0), "hdr_valid: a header is queued"),
                Assert(buf.hdr_two[v] == (hcount >= 2), "hdr_two: two headers are queued"),
                Assert((hcount == 0) | (buf.heads[v].tag[0] == hq[0]), "heads: the oldest header"),
                Assert((hcount < 2) | (buf.nexts[v].tag[0] == hq[1]), "nexts: the header behind it"),
            ]

        count_sel = Array(c for _, c in beats)[sel[:vbits]]
        head_sel = Array(q[0] for q, _ in beats)[sel[:vbits]]
        with m.If(buf.data.valid):
            m.d.comb += Assert((sel < n) & (count_sel != 0) & (buf.data.payload[0] == head_sel),
                               "shows only the oldest landed beat of the selected channel")
        avail = Signal(range(lb + 2), name="avail")     # beats of `sel` left after this cycle's take
        m.d.comb += avail.eq(Mux(sel < n, count_sel - take, 0))
        was_sel, was_avail = past(m, sel, "was_sel"), past(m, avail, "was_avail")
        with m.If((was_sel == sel) & (was_avail != 0)):
            m.d.comb += Assert(buf.data.valid, "full rate: shows a beat that was there a cycle ago")
        return m


def test_landing_buffer_rings_and_header_queues_are_exact_fifos_per_channel():
    assert_proves(LandingHarness(), "landing")


# -- broken variants: source mutants of the real block, each must fail the same proof ----------------------------

MUTANTS = {
    "prefetch_rereads_head": ("Mux(mine, rp1[sel_idx], rp[sel_idx])", "Mux(mine, rp[sel_idx], rp[sel_idx])"),
    "shows_beat_past_the_last": ("more = Mux(mine, any2.bit_select(sel_idx, 1), any1.bit_select(sel_idx, 1))",
                                 "more = any1.bit_select(sel_idx, 1)"),
    "moves_read_pointer_untaken": ("m.If(take & (sel_idx == v))", "m.If(mine & (sel_idx == v))"),
    "shows_other_channels_beat": ("mine.eq(out_valid & (osel == self.sel))", "mine.eq(out_valid)"),
    "bubble_after_each_beat": ("out_valid.eq(sel_ok & more)", "out_valid.eq(sel_ok & more & ~mine)"),
    "nexts_shows_the_head": ("hn_port.addr.eq((hrp[v] + 1)[:hbits])", "hn_port.addr.eq(hrp[v][:hbits])"),
    "header_full_flag_ignores_pops": ("nh, h_push, h_pop)", "nh, h_push, 0)"),
    "beat_full_flag_ignores_pushes": ("lb, b_push, b_pop)", "lb, 0, b_pop)"),
    "pops_empty_header_queue": ("pop = self.hdr_pop & sel_ok & self.hdr_valid.bit_select(sel_idx, 1)",
                                "pop = self.hdr_pop & sel_ok"),
}


@pytest.mark.parametrize("bug", MUTANTS)
def test_landing_buffer_proof_fails_on_a_broken_buffer(bug):
    assert_fails(LandingHarness(buf_cls=mutant(LandingBuffer, *MUTANTS[bug])), f"landing_mutant_{bug}")
