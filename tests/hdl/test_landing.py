"""LandingBuffer in Amaranth's simulator against a model: random header pushes and beat writes on random
channels (some into full queues and rings, which drop them), a consumer that switches channel, pops headers
and stalls at random; beats, heads and the headers behind them, levels, credits and drops are compared every
cycle.

``SEED=<n>`` replaces the random seed.
"""

import random
from collections import deque

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.landing import LandingBuffer
from syncfabric.hdl.common.layouts import pack, packet_header_layout

from sim_helpers import run_sim, seed_for

CONFIGS = {"p2p": AceConfig.small(), "switch": AceConfig.small(rx_sources=4, n_ports=1)}
HDR = packet_header_layout()


class LandingModel:
    """Per channel a ring of beats and a queue of headers; the consumer sees channel ``sel`` through a
    one-beat read pipeline (``out_valid``/``osel``: what the read port holds)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rings = [deque() for _ in range(cfg.n_channels)]
        self.hdrs = [deque() for _ in range(cfg.n_channels)]
        self.out_valid, self.osel = 0, 0
        self.credit = {"beat": 0, "beat_vc": 0, "hdr": 0, "hdr_vc": 0}

    def shown(self, sel):
        """The beat ``data`` shows for ``sel`` (None: not valid)."""
        return self.rings[sel][0] if self.out_valid and self.osel == sel else None

    def dropped(self, hdr_in, beat_in):
        d = 0
        if hdr_in and len(self.hdrs[hdr_in[0]]) == self.cfg.landing_headers:
            d |= 1 << hdr_in[0]
        if beat_in and len(self.rings[beat_in[0]]) == self.cfg.landing_beats:
            d |= 1 << beat_in[0]
        return d

    def tick(self, hdr_in, beat_in, sel, pop, ready):
        shown = self.shown(sel) is not None
        take = shown and ready
        count = len(self.rings[sel]) if sel < self.cfg.n_channels else 0
        popped = pop and sel < self.cfg.n_channels and len(self.hdrs[sel]) > 0
        if not shown or ready:                        # the read pipeline moves
            self.out_valid, self.osel = int(count > shown), sel
        # fullness is that of the cycle's start: a beat taken frees its row only for the next cycle
        if hdr_in and len(self.hdrs[hdr_in[0]]) < self.cfg.landing_headers:
            self.hdrs[hdr_in[0]].append(hdr_in[1])
        if beat_in and len(self.rings[beat_in[0]]) < self.cfg.landing_beats:
            self.rings[beat_in[0]].append(beat_in[1])
        if take:
            self.rings[sel].popleft()
        if popped:
            self.hdrs[sel].popleft()
        self.credit = {"beat": int(take), "beat_vc": sel, "hdr": int(popped), "hdr_vc": sel}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_landing_channels_keep_beats_and_headers_in_order_and_drop_when_full(name):
    cfg = CONFIGS[name]
    rng = random.Random(seed_for(91))
    n, w = cfg.n_channels, cfg.beat_bytes
    dut = LandingBuffer(cfg)
    model = LandingModel(cfg)
    hot = rng.sample(range(n), min(n, 3))       # most traffic on a few channels, so that they fill up

    def channel():
        return rng.choice(hot) if rng.random() < 0.8 else rng.randrange(n)

    async def bench(ctx):
        sel, drops, taken, seconds = hot[0], 0, 0, 0
        for cycle in range(4000):
            if rng.random() < 0.05:
                sel = channel() if rng.random() < 0.95 else n      # now and then no channel at all
            # phases: fill (slow consumer), then drain (fast consumer)
            fill = (cycle // 500) % 2 == 0
            hdr_in = (channel(), pack(HDR, {"tag": rng.getrandbits(16), "length": rng.getrandbits(20),
                                            "vc": rng.getrandbits(5)})) if rng.random() < 0.3 else None
            beat_in = (channel(), rng.getrandbits(8 * w)) if rng.random() < (0.7 if fill else 0.3) else None
            pop = rng.random() < (0.05 if fill else 0.4)
            ready = rng.random() < (0.2 if fill else 0.9)
            ctx.set(dut.hdr_in.valid, hdr_in is not None)
            ctx.set(dut.hdr_in.payload.ch, hdr_in[0] if hdr_in else 0)
            ctx.set(dut.hdr_in.payload.hdr.as_value(), hdr_in[1] if hdr_in else 0)
            ctx.set(dut.beat_in.valid, beat_in is not None)
            ctx.set(dut.beat_in.payload, {"ch": beat_in[0] if beat_in else 0, "data": beat_in[1] if beat_in else 0})
            ctx.set(dut.sel, sel)
            ctx.set(dut.hdr_pop, pop)
            ctx.set(dut.data.ready, ready)

            shown = model.shown(sel)
            assert ctx.get(dut.data.valid) == (shown is not None), cycle
            if shown is not None:
                assert ctx.get(dut.data.payload) == shown, cycle
                taken += ready
            assert ctx.get(dut.dropped) == model.dropped(hdr_in, beat_in), cycle
            drops += ctx.get(dut.dropped) != 0
            assert ctx.get(dut.hdr_valid) == sum(1 << c for c in range(n) if model.hdrs[c]), cycle
            for c in range(n):
                assert ctx.get(dut.levels[c]) == len(model.rings[c]), (cycle, c)
                assert ctx.get(dut.hdr_levels[c]) == len(model.hdrs[c]), (cycle, c)
                if model.hdrs[c]:
                    assert ctx.get(dut.heads[c].as_value()) == model.hdrs[c][0], (cycle, c)
                if len(model.hdrs[c]) >= 2:         # the header behind the head
                    assert ctx.get(dut.nexts[c].as_value()) == model.hdrs[c][1], (cycle, c)
                    seconds += 1
            assert ctx.get(dut.hdr_two) == sum(1 << c for c in range(n) if len(model.hdrs[c]) >= 2), cycle
            assert {k: ctx.get(getattr(dut.credit, k)) for k in model.credit} == model.credit, cycle

            model.tick(hdr_in, beat_in, sel, pop, ready)
            await ctx.tick()
        assert drops > 10 and taken > 500 and seconds > 500   # full and flowing, heads with a second header

    run_sim(dut, bench)
