"""Chunk SRAM and beat streamer in Amaranth's simulator: the crossbar's priorities and free signals, the
even/odd bank interleave that lets two streams share a buffer at full rate, and the streamer's gate and
back-to-back runs, against a plain dictionary model of the buffers. ``SEED=<n>`` replaces the random seed."""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.sram import BankStreamer, ChunkSram

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small(n_buffers=4)


def test_crossbar_priorities_free_signals_and_conflict_flag():
    dut = ChunkSram(CFG, n_readers=3, n_writers=2)

    async def bench(ctx):
        def wr(i, en, buf, addr, data=0):
            ctx.set(dut.wr[i], {"en": en, "buf": buf, "addr": addr, "data": data})

        def rd(i, en, buf, addr):
            ctx.set(dut.rd[i], {"en": en, "buf": buf, "addr": addr})

        # same buffer, beats of opposite parity: different banks, both free, no conflict
        wr(0, 1, 2, 10, 0xAA), wr(1, 1, 2, 11, 0xBB)
        assert ctx.get(dut.wr_free) == 0b11 and not ctx.get(dut.conflict)
        await ctx.tick()
        # same parity: writer 1 is not free; if it writes anyway writer 0 wins and the flag rises
        wr(0, 1, 2, 12, 0xCC), wr(1, 0, 2, 14, 0xDD)
        assert ctx.get(dut.wr_free) == 0b01
        wr(1, 1, 2, 14, 0xDD)
        assert not ctx.get(dut.conflict)            # raised in the next cycle
        await ctx.tick()
        wr(0, 0, 0, 0), wr(1, 0, 0, 0)
        assert ctx.get(dut.conflict)
        # read back through three readers; reader 2 shares reader 0's bank and is not free
        rd(0, 1, 2, 10), rd(1, 1, 2, 11), rd(2, 0, 2, 12)
        assert ctx.get(dut.rd_free) == 0b011
        rd(2, 0, 3, 12)
        assert ctx.get(dut.rd_free) == 0b111        # another buffer: free
        await ctx.tick()
        assert ctx.get(dut.rdata[0]) == 0xAA and ctx.get(dut.rdata[1]) == 0xBB
        rd(0, 1, 2, 12), rd(1, 0, 0, 0)
        await ctx.tick()
        assert ctx.get(dut.rdata[0]) == 0xCC        # writer 0's beat; writer 1's lost write never landed
        rd(0, 1, 2, 14)
        await ctx.tick()
        assert ctx.get(dut.rdata[0]) == 0

    run_sim(dut, bench, 1e-8)


def test_two_streams_into_one_buffer_fall_into_step_and_lose_at_most_a_cycle():
    """A high-priority stream writes beats 0..31 of buffer 1 every cycle; a low-priority stream writes beats
    32..63 of the same buffer whenever it is free. With two banks per buffer the second loses one cycle at
    most and every beat lands."""
    dut = ChunkSram(CFG, n_readers=1, n_writers=2)

    async def bench(ctx):
        hi, lo, waited = 0, 0, 0
        while hi < 32 or lo < 32:
            ctx.set(dut.wr[0], {"en": hi < 32, "buf": 1, "addr": hi, "data": 1000 + hi})
            ctx.set(dut.wr[1], {"en": 0, "buf": 1, "addr": 32 + lo, "data": 2000 + lo})
            go = lo < 32 and ctx.get(dut.wr_free[1])
            ctx.set(dut.wr[1].en, go)
            assert not ctx.get(dut.conflict)
            waited += lo < 32 and not go
            await ctx.tick()
            hi += hi < 32
            lo += go
        ctx.set(dut.wr[0].en, 0)
        ctx.set(dut.wr[1].en, 0)
        assert waited <= 1
        for a in range(64):
            ctx.set(dut.rd[0], {"en": 1, "buf": 1, "addr": a})
            await ctx.tick()
            assert ctx.get(dut.rdata[0]) == (1000 + a if a < 32 else 2000 + a - 32)

    run_sim(dut, bench, 1e-8)


def test_streamer_runs_back_to_back_honours_gate_and_backpressure():
    """Random gate and ready: every beat of two queued runs comes out once, in order, ``last`` on each run's
    end, with the SRAM model answering one cycle after each read."""
    seed = seed_for(20261123)
    rng = random.Random(seed)
    dut = BankStreamer(CFG)
    mem = {(b, a): (b << 16) | a for b in range(CFG.n_buffers) for a in range(CFG.buffer_beats)}
    runs = [(2, 5, 9), (3, 0, 1), (1, 7, 20)]

    async def bench(ctx):
        pending, got, run_i, unissued = None, [], 0, 0
        while len(got) < sum(n for _, _, n in runs):
            # ready (a flip-flop) says exactly that every read of the runs started so far has issued
            assert ctx.get(dut.ready) == (unissued == 0), unissued
            if run_i < len(runs) and ctx.get(dut.ready):
                b, a, n = runs[run_i]
                ctx.set(dut.start, 1), ctx.set(dut.buf, b), ctx.set(dut.addr, a), ctx.set(dut.beats, n)
                run_i += 1
                unissued += n
            else:
                ctx.set(dut.start, 0)
            gate = rng.random() < 0.6
            ctx.set(dut.gate, gate)
            ctx.set(dut.o.ready, rng.random() < 0.7)
            ctx.set(dut.rdata, mem[pending] if pending is not None else 0)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                got.append((ctx.get(dut.o.payload.data), ctx.get(dut.o.payload.last)))
            rd = ctx.get(dut.rd)
            assert gate or not rd["en"], "a read issued while the gate was low"
            pending = (rd["buf"], rd["addr"]) if rd["en"] else None
            unissued -= rd["en"]
            await ctx.tick()
        expect = []
        for b, a, n in runs:
            expect += [((b << 16) | (a + k), int(k == n - 1)) for k in range(n)]
        assert got == expect

    run_sim(dut, bench, 1e-8)
