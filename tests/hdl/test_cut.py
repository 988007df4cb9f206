"""A link cut in two (hdl/system/cut.py) against the uncut link, in Amaranth's simulator.

The same random traffic (flits with backpressure from the pacing, stalls, injected bit flips, credits) drives a
:class:`Link` and a :class:`LinkSender` + :class:`LinkReceiver` pair whose rings a coordinator copies every
``W`` cycles, as a partitioned simulation does between processes. With ``W <= latency - 1`` the pair's ``rx``,
``credit_out``, ``tx.ready`` and counters equal the link's in every cycle; with ``W = latency`` a row is read
before it is copied and they differ (the bound is tight).

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from syncfabric.hdl.common.layouts import credit_layout, flit_layout
from syncfabric.hdl.system.cut import LinkReceiver, LinkSender
from syncfabric.hdl.system.link import Link

from sim_helpers import seed_for

BEAT = 4
FLIT_BITS = flit_layout(BEAT).size
CREDIT_BITS = credit_layout().size


class Pair(wiring.Component):
    """A link and a cut link side by side (inputs driven by the testbench into both)."""

    def __init__(self, latency, rate, max_latency):
        self.link = Link(BEAT, latency, rate=rate, max_latency=max_latency)
        self.send = LinkSender(BEAT, max_latency, latency=latency, rate=rate)
        self.recv = LinkReceiver(BEAT, max_latency, latency=latency)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.link, m.submodules.send, m.submodules.recv = self.link, self.send, self.recv
        m.d.comb += [self.send.tx.valid.eq(self.link.tx.valid), self.send.tx.payload.eq(self.link.tx.payload),
                     self.send.inject.eq(self.link.inject), self.send.stall.eq(self.link.stall),
                     self.recv.credit_in.eq(self.link.credit_in)]
        return m


def run(latency, rate, window, cycles=1200, seed=1, max_latency=16):
    """Drive both for ``cycles`` cycles, copying rows every ``window`` cycles; returns the cycles where the
    cut link's outputs differ from the link's."""
    dut = Pair(latency, rate, max_latency)
    link, send, recv = dut.link, dut.send, dut.recv
    depth = send.depth
    rng = random.Random(seed)
    diffs = []

    async def bench(ctx):
        t0, t = 0, 0
        pending = None
        for _ in range(cycles):
            if pending is None and rng.random() < 0.7:
                pending = rng.getrandbits(FLIT_BITS)
            ctx.set(link.tx.valid, pending is not None)
            if pending is not None:
                ctx.set(link.tx.payload.as_value(), pending)
            ctx.set(link.stall, rng.random() < 0.1)
            ctx.set(link.inject, rng.random() < 0.05)
            ctx.set(link.credit_in.as_value(), rng.getrandbits(CREDIT_BITS) if rng.random() < 0.5 else 0)
            got = (ctx.get(send.tx.ready), ctx.get(recv.rx.valid), ctx.get(recv.rx.payload.as_value()),
                   ctx.get(send.credit_out.as_value()))
            want = (ctx.get(link.tx.ready), ctx.get(link.rx.valid), ctx.get(link.rx.payload.as_value()),
                    ctx.get(link.credit_out.as_value()))
            if got != want:
                diffs.append(t)
            if pending is not None and ctx.get(link.tx.ready):
                pending = None
            await ctx.tick()
            t += 1
            if t - t0 == window:       # the coordinator: rows written in [t0, t) to the other side
                for c in range(t0, t):
                    row = c % depth
                    ctx.set(recv.flit_ring.data[row], ctx.get(send.flit_ring.data[row]))
                    ctx.set(send.credit_ring.data[row], ctx.get(recv.credit_ring.data[row]))
                t0 = t
        assert ctx.get(send.flits) == ctx.get(link.flits) and ctx.get(send.busy) == ctx.get(link.busy)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return diffs


@pytest.mark.parametrize("latency,rate", [(2, (1, 1)), (5, (3, 7)), (13, (1, 1)), (16, (5, 8))])
def test_a_cut_link_is_cycle_identical_with_windows_of_latency_minus_one(latency, rate):
    assert run(latency, rate, latency - 1, seed=seed_for(latency)) == []


def test_a_window_of_the_whole_latency_reads_a_row_before_it_is_copied():
    diffs = run(5, (1, 1), 5, seed=seed_for(7))
    assert diffs, "a window as long as the latency must break the cut"


def test_a_credit_row_that_carries_only_an_acknowledgement_is_marked_sent():
    """The link retransmission's ACK/NAK ride the credit rows (docs/engine.md section 15): a row with an
    ``ack`` or ``nak`` and no credit must be marked in ``sent`` too, or a multi-process run would not ship it."""
    dut = LinkReceiver(BEAT, 8, latency=4)
    seen = []

    async def bench(ctx):
        for fields in ({"ack": 1, "ack_seq": 5}, {}, {"nak": 1, "ack_seq": 9}, {"beat": 1}, {}):
            ctx.set(dut.credit_in, {"beat": 0, "beat_vc": 0, "hdr": 0, "hdr_vc": 0, "ack": 0, "nak": 0,
                                    "ack_seq": 0, **fields})
            await ctx.tick()
            seen.append(ctx.get(dut.sent) & 1)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [1, 0, 1, 1, 0]
