"""The stream register slice (hdl/common/skid.py): nothing lost, duplicated or reordered under random
producer and consumer stalls, one beat per cycle when neither stalls, and no combinational path through it
(``i.ready`` does not follow ``o.ready``, ``o.valid``/``o.payload`` do not follow ``i`` within a cycle); with
``forward=False`` no latency and only the ``ready`` path cut."""

import random

import pytest

from sim_helpers import run_sim as _run, seed_for

from syncfabric.hdl.common.skid import SkidBuffer


@pytest.mark.parametrize("forward", [True, False])
def test_random_stalls_keep_every_beat_in_order(forward):
    rng = random.Random(seed_for(11))
    dut = SkidBuffer(16, forward=forward)
    beats = [rng.randrange(1 << 16) for _ in range(400)]
    got = []

    async def bench(ctx):
        i = 0
        for _ in range(3000):
            offer = i < len(beats) and rng.random() < 0.7
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload, beats[i])
            ctx.set(dut.o.ready, rng.random() < 0.6)
            took_in = offer and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                got.append(ctx.get(dut.o.payload))
            await ctx.tick()
            i += took_in
        assert i == len(beats)

    _run(dut, bench)
    assert got == beats


@pytest.mark.parametrize("forward,latency", [(True, 1), (False, 0)])
def test_full_throughput_and_latency(forward, latency):
    dut = SkidBuffer(8, forward=forward)
    out = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for n in range(20):
            ctx.set(dut.i.valid, n < 10)
            ctx.set(dut.i.payload, n)
            assert ctx.get(dut.i.ready)
            out.append(ctx.get(dut.o.payload) if ctx.get(dut.o.valid) else None)
            await ctx.tick()

    _run(dut, bench)
    assert out[:12] == ([None] * latency + list(range(10)) + [None] * 2)[:12]


def test_no_combinational_path_through_the_slice():
    dut = SkidBuffer(8)

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 5)
        ctx.set(dut.o.ready, 0)
        await ctx.tick()
        await ctx.tick()                             # output holds 5, skid holds 5: input stalled
        before = (ctx.get(dut.i.ready), ctx.get(dut.o.valid), ctx.get(dut.o.payload))
        ctx.set(dut.o.ready, 1)                      # same cycle: nothing upstream may change
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.i.payload, 9)
        assert (ctx.get(dut.i.ready), ctx.get(dut.o.valid), ctx.get(dut.o.payload)) == before == (0, 1, 5)

    _run(dut, bench)


def test_a_ready_only_slice_cuts_only_ready():
    dut = SkidBuffer(8, forward=False)

    async def bench(ctx):
        # a stall: the beat offered in the cycle o.ready falls is caught; i.ready falls a cycle later
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 42)
        assert ctx.get(dut.i.ready)                 # o.ready low in this cycle does not reach i.ready
        await ctx.tick()
        ctx.set(dut.i.payload, 43)
        assert not ctx.get(dut.i.ready) and ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 42
        ctx.set(dut.o.ready, 1)
        assert not ctx.get(dut.i.ready)             # nor does o.ready high
        await ctx.tick()
        assert ctx.get(dut.i.ready) and ctx.get(dut.o.payload) == 43

    _run(dut, bench)
