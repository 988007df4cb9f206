"""Formal proofs of the link's credit loop: :class:`~syncfabric.hdl.ace.link.TxPort`'s per-channel credit
counters and :class:`~syncfabric.hdl.ace.landing.LandingBuffer`'s rings and header FIFOs, joined as in the engine
(the landing buffer's ``credit`` output drives the transmitter's ``credit`` input).

The harness plays everything else: the control unit grants a message of up to ``max_message_beats`` beats on any
channel in any cycle, but only with its credits (``beat_credits >= beats`` and a header credit, the rule of
``hdl/ace/issue.py``), and reserves them in that cycle; the link delivers the granted beats and headers of each
channel after any delay, interleaved in any way; the consumer selects any channel (also one that does not exist),
takes beats and pops headers at will. Proved, unbounded, with PDR:

* per channel, the credits, the beats and headers granted but not landed, the landed ones and the credit being
  returned always add up to the buffer's size: no credit is lost or made up, the counters never exceed the
  buffer size and never go below zero (wrap), and the rings never under- or overflow;
* nothing a granted message sends is ever dropped (``dropped`` stays low): a granted message always has its
  room at the receiver.

A second, smaller proof takes TxPort's counters alone in the switch configuration (credits per destination and
VC), by k-induction: they count every reservation and every return, in the same cycle too.

Each proof has broken variants that must fail (a mutated block, or a grant that does not check the credits).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Module, Mux, Signal, unsigned

from formal_helpers import Harness, assert_fails, assert_proves
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.landing import LandingBuffer
from syncfabric.hdl.ace.link import TxPort
from syncfabric.hdl.common.layouts import CHANNEL_BITS

pytestmark = pytest.mark.formal

# two channels of 4 beats and 2 headers: every case of the logic (wrap bits, per-channel indexing, a message of
# max_message_beats = 2 beats, an empty message) at a size PDR closes in seconds
CFG = AceConfig.small(beat_bytes=8, packet_bytes=16, n_fsms=2, landing_beats=4, landing_headers=2)


class CreditLoopHarness(Harness):
    """TxPort credits + LandingBuffer under a free control unit, link and consumer (see the module docstring).

    ``grant_slack`` loosens the grant rule by that many beats (a broken control unit, for the mutation test)."""

    def __init__(self, tx_cls=TxPort, buf_cls=LandingBuffer, grant_slack=0):
        super().__init__()
        self.tx_cls, self.buf_cls, self.grant_slack = tx_cls, buf_cls, grant_slack

    def elaborate(self, platform):
        m = Module()
        cfg = CFG
        n, lb, nh = cfg.n_channels, cfg.landing_beats, cfg.landing_headers
        vbits = (n - 1).bit_length()
        m.submodules.tx = tx = self.tx_cls(cfg)
        m.submodules.buf = buf = self.buf_cls(cfg)
        m.d.comb += tx.credit.eq(buf.credit)        # the credit return (its link latency does not matter here)

        # -- the control unit: a grant in any cycle, for any channel and size, if the credits are there
        want, vc = self.free(1, "grant_want"), self.free(vbits, "grant_vc")
        beats = self.free(range(cfg.max_message_beats + 1), "grant_beats")
        m.d.comb += Assume(beats <= cfg.max_message_beats)
        credits_ok = ((tx.beat_credits[vc] + self.grant_slack >= beats) & (tx.hdr_credits[vc] >= 1))
        grant = want & credits_ok
        m.d.comb += [tx.reserve.valid.eq(grant), tx.reserve.vc.eq(vc), tx.reserve.beats.eq(beats)]

        # -- the link: per channel, the beats and headers granted and not yet delivered, delivered at any time
        owed_b = [Signal(range(2 * lb + 4), name=f"owed_beats{v}") for v in range(n)]
        owed_h = [Signal(range(2 * nh + 4), name=f"owed_hdrs{v}") for v in range(n)]
        b_go, b_ch = self.free(1, "beat_go"), self.free(vbits, "beat_ch")
        h_go, h_ch = self.free(1, "hdr_go"), self.free(vbits, "hdr_ch")
        b_send = b_go & (Array(owed_b)[b_ch] != 0)
        h_send = h_go & (Array(owed_h)[h_ch] != 0)
        m.d.comb += [
            buf.beat_in.valid.eq(b_send), buf.beat_in.payload.ch.eq(b_ch),
            buf.beat_in.payload.data.eq(self.free(8 * cfg.beat_bytes, "beat_data")),
            buf.hdr_in.valid.eq(h_send), buf.hdr_in.payload.ch.eq(h_ch),
        ]
        for v in range(n):
            granted = grant & (vc == v)
            m.d.sync += [
                owed_b[v].eq(owed_b[v] + Mux(granted, beats, 0) - (b_send & (b_ch == v))),
                owed_h[v].eq(owed_h[v] + granted - (h_send & (h_ch == v))),
            ]

        # -- the consumer: any channel number (CHANNEL_BITS wide, most of them not there), takes and pops at will
        m.d.comb += [buf.sel.eq(self.free(CHANNEL_BITS, "sel")), buf.data.ready.eq(self.free(1, "data_ready")),
                     buf.hdr_pop.eq(self.free(1, "hdr_pop"))]

        # -- the invariants
        wide = unsigned(8)
        for v in range(n):
            back_b = buf.credit.beat & (buf.credit.beat_vc == v)
            back_h = buf.credit.hdr & (buf.credit.hdr_vc == v)
            total_b, total_h = Signal(wide, name=f"total_beats{v}"), Signal(wide, name=f"total_hdrs{v}")
            m.d.comb += [
                total_b.eq(tx.beat_credits[v] + owed_b[v] + buf.levels[v] + back_b),
                total_h.eq(tx.hdr_credits[v] + owed_h[v] + buf.hdr_levels[v] + back_h),
                Assert(total_b == lb, "beat credits + in flight + landed + returning = landing_beats"),
                Assert(total_h == nh, "header credits + in flight + queued + returning = landing_headers"),
                Assert(tx.beat_credits[v] <= lb, "beat credits never exceed the buffer"),
                Assert(tx.hdr_credits[v] <= nh, "header credits never exceed the header FIFO"),
            ]
        m.d.comb += Assert(buf.dropped == 0, "a granted message always has room: nothing is dropped")
        return m


def test_credit_loop_loses_no_credit_and_never_overflows_a_landing_buffer():
    assert_proves(CreditLoopHarness(), "credit_loop")


class TxCreditsHarness(Harness):
    """:class:`TxPort`'s credit counters alone, in the switch configuration (credits per destination and VC),
    under any interleaving of grants (with their credits) and returns (for beats and headers reserved and not
    yet returned, on any channel, and returns for channels that do not exist). The shadow counts of what is
    out are the harness's, the counters are ports, so the invariant is inductive as stated: k-induction."""

    cfg = AceConfig.small(beat_bytes=8, packet_bytes=16, n_fsms=2, rx_sources=2, landing_beats=4,
                          landing_headers=2)

    def __init__(self, tx_cls=TxPort):
        super().__init__()
        self.tx_cls = tx_cls

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, lb, nh = cfg.n_channels, cfg.landing_beats, cfg.landing_headers
        m.submodules.tx = tx = self.tx_cls(cfg)
        want, vc = self.free(1, "grant_want"), self.free(CHANNEL_BITS, "grant_vc")
        beats = self.free(range(cfg.max_message_beats + 1), "grant_beats")
        m.d.comb += Assume((vc < n) & (beats <= cfg.max_message_beats))
        grant = want & (tx.beat_credits[vc] >= beats) & (tx.hdr_credits[vc] >= 1)
        m.d.comb += [tx.reserve.valid.eq(grant), tx.reserve.vc.eq(vc), tx.reserve.beats.eq(beats)]

        out_b = Array(Signal(range(lb + 1), name=f"out_beats{v}") for v in range(n))
        out_h = Array(Signal(range(nh + 1), name=f"out_hdrs{v}") for v in range(n))
        cr = tx.credit
        m.d.comb += [cr.beat.eq(self.free(1, "ret_beat")), cr.beat_vc.eq(self.free(CHANNEL_BITS, "ret_beat_vc")),
                     cr.hdr.eq(self.free(1, "ret_hdr")), cr.hdr_vc.eq(self.free(CHANNEL_BITS, "ret_hdr_vc"))]
        with m.If(cr.beat & (cr.beat_vc < n)):
            m.d.comb += Assume(out_b[cr.beat_vc] != 0)         # only what was reserved comes back
        with m.If(cr.hdr & (cr.hdr_vc < n)):
            m.d.comb += Assume(out_h[cr.hdr_vc] != 0)
        for v in range(n):
            res = grant & (vc == v)
            m.d.sync += [
                out_b[v].eq(out_b[v] + Mux(res, beats, 0) - (cr.beat & (cr.beat_vc == v))),
                out_h[v].eq(out_h[v] + res - (cr.hdr & (cr.hdr_vc == v))),
            ]
            m.d.comb += [
                Assert(tx.beat_credits[v] + out_b[v] == lb, "beat credits + reserved, unreturned = size"),
                Assert(tx.hdr_credits[v] + out_h[v] == nh, "header credits + reserved, unreturned = size"),
            ]
        return m


def test_tx_credit_counters_count_every_reservation_and_return():
    assert_proves(TxCreditsHarness(), "tx_credits", engine="kind", depth=3)


# -- broken variants: each must fail the same proof -------------------------------------------------------------

class TxPortReservationWins(TxPort):
    """Bug: in a cycle with both a reservation and a return on a channel, the return is lost."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        for v in range(self.cfg.n_channels):
            res = self.reserve.valid & (self.reserve.vc == v)
            with m.If(res):
                m.d.sync += [self.beat_credits[v].eq(self.beat_credits[v] - self.reserve.beats),
                             self.hdr_credits[v].eq(self.hdr_credits[v] - 1)]
        return m


class LandingCreditsShownBeats(LandingBuffer):
    """Bug: a beat credit goes back for every beat shown on ``data``, taken or not."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.sync += self.credit.beat.eq(self.data.valid)
        return m


class LandingHeaderCreditOnEveryPop(LandingBuffer):
    """Bug: a header credit goes back for every ``hdr_pop``, even of an empty header FIFO."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.sync += self.credit.hdr.eq(self.hdr_pop)
        return m


@pytest.mark.parametrize("variant", [
    dict(tx_cls=TxPortReservationWins), dict(buf_cls=LandingCreditsShownBeats),
    dict(buf_cls=LandingHeaderCreditOnEveryPop), dict(grant_slack=1)],
    ids=["tx_return_lost_on_reserve", "rx_credit_for_untaken_beat", "rx_header_credit_for_empty_pop",
         "grant_one_beat_short"])
def test_credit_loop_proof_fails_on_a_broken_loop(variant, request):
    assert_fails(CreditLoopHarness(**variant), f"credit_loop_mutant_{request.node.callspec.id}")


def test_tx_credit_proof_fails_when_a_return_is_lost():
    assert_fails(TxCreditsHarness(tx_cls=TxPortReservationWins), "tx_credits_mutant", engine="kind", depth=3)
