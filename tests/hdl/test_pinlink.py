"""The pin-level link port: two PinLinks wired pin to pin in Amaranth's simulator (loopback)."""

import os
import random

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from syncfabric.hdl.system.pinlink import PinLink, flit_words
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.common.layouts import flit_layout, packet_header_layout



def seed_for(default):
    """The test's seed: ``SEED`` from the environment, else ``default`` (printed, to repeat a failure)."""
    seed = int(os.environ.get("SEED", default))
    print(f"seed {seed}")
    return seed


class _Pair(Elaboratable):
    """Board A's port and board B's port, A's lanes out wired to B's lanes in and back."""

    def __init__(self, cfg, **kw):
        self.a, self.b = PinLink(cfg, **kw), PinLink(cfg, **kw)

    def elaborate(self, platform):
        m = Module()
        m.submodules.a, m.submodules.b = self.a, self.b
        for x, y in ((self.a, self.b), (self.b, self.a)):
            m.d.comb += [y.flit_in.data.eq(x.flit_out.data), y.flit_in.frame.eq(x.flit_out.frame),
                         y.flit_in.strobe.eq(x.flit_out.strobe),
                         y.credit_in.data.eq(x.credit_out.data), y.credit_in.frame.eq(x.credit_out.frame),
                         y.credit_in.strobe.eq(x.credit_out.strobe)]
        return m


def _random_flits(rng, cfg, n):
    """Packets of 1-4 flits with random fields; fields the wire does not carry (a header beside a non-first
    flit, a CRC beside a non-last one) are zero, as the receiver delivers them."""
    flits = []
    hbits = packet_header_layout().size
    while len(flits) < n:
        k = rng.randint(1, 4)
        for i in range(k):
            first, last = int(i == 0), int(i == k - 1)
            flits.append({"data": rng.getrandbits(8 * cfg.beat_bytes),
                          "hdr": rng.getrandbits(hbits) if first else 0,
                          "first": first, "last": last,
                          "crc": rng.getrandbits(32) if last else 0})
    return flits[:n] if flits[n - 1]["last"] else flits[:n - 1] + [dict(flits[n - 1], last=1,
                                                                            crc=rng.getrandbits(32))]


def _flit_value(cfg, f):
    return flit_layout(cfg.beat_bytes).const({**f, "hdr": packet_header_layout().from_bits(f["hdr"])}).as_bits()


@pytest.mark.parametrize("fabric", [0, 1])
@pytest.mark.parametrize("width,credit_width,div", [(8, 2, 4), (4, 1, 6)])
def test_pinlink_loopback_delivers_every_flit_and_returns_every_credit(width, credit_width, div, fabric):
    seed = seed_for(7 + width)
    rng = random.Random(seed)
    cfg = AceConfig.board(fabric=fabric)    # (fabric: every engine-side signal through a flip-flop)
    dut = _Pair(cfg, width=width, credit_width=credit_width, div=div)
    flits = _random_flits(rng, cfg, 12)
    credits = [(rng.randrange(cfg.n_channels), rng.randrange(2), rng.randrange(cfg.n_channels), rng.randrange(2))
               for _ in range(40)]
    got, returned = [], {}

    async def sender(ctx):                       # board A's engine: flits out on A.tx
        for f in flits:
            ctx.set(dut.a.tx.payload, flit_layout(cfg.beat_bytes).from_bits(_flit_value(cfg, f)))
            ctx.set(dut.a.tx.valid, 1)
            await ctx.tick().until(dut.a.tx.ready)
        ctx.set(dut.a.tx.valid, 0)

    async def receiver(ctx):                     # board B's engine: flits in on B.rx
        while len(got) < len(flits):
            await ctx.tick()
            if ctx.get(dut.b.rx.valid):
                got.append(ctx.get(dut.b.rx.payload).as_bits())

    async def credit_source(ctx):                # board B's engine frees landing beats/headers, bursts included
        for bv, b, hv, h in credits:
            ctx.set(dut.b.rx_credit, {"beat": b, "beat_vc": bv, "hdr": h, "hdr_vc": hv})
            await ctx.tick()
        ctx.set(dut.b.rx_credit, {"beat": 0, "beat_vc": 0, "hdr": 0, "hdr_vc": 0})

    async def credit_sink(ctx):                  # board A's engine takes them back on A.tx_credit
        want = sum(b + h for _, b, _, h in credits)
        have = 0
        for _ in range(4000):
            await ctx.tick()
            c = ctx.get(dut.a.tx_credit)
            for kind, flag, vc in (("beat", c.beat, c.beat_vc), ("hdr", c.hdr, c.hdr_vc)):
                if flag:
                    returned[(kind, vc)] = returned.get((kind, vc), 0) + 1
                    have += 1
            if have == want and len(got) == len(flits):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for tb in (sender, receiver, credit_source, credit_sink):
        sim.add_testbench(tb)
    sim.run()

    assert got == [_flit_value(cfg, f) for f in flits]
    sent = {}
    for bv, b, hv, h in credits:
        if b:
            sent[("beat", bv)] = sent.get(("beat", bv), 0) + 1
        if h:
            sent[("hdr", hv)] = sent.get(("hdr", hv), 0) + 1
    assert returned == sent


def test_flit_words_send_header_and_crc_only_where_the_receiver_reads_them():
    w = flit_words(16, 8)
    h = packet_header_layout().size
    assert w[(0, 0)] == -(-(2 + 128) // 8)
    assert w[(1, 0)] == -(-(2 + 128 + h) // 8)
    assert w[(1, 1)] == -(-(2 + 128 + h + 32) // 8)


def test_pinlink_refuses_a_word_period_too_short_to_sample():
    with pytest.raises(ValueError, match="div"):
        PinLink(AceConfig.board(), div=2)
