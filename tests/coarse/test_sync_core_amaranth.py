"""Sync cores in Amaranth's simulator: rings of cores joined by delay lines, each core with its own AXI RAM,
results compared bit for bit with the golden sync-core order."""

import os
import sys

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from syncfabric.hdl.coarse.layouts import CciOpcode, Region, decode_core_addr, unpack_flit
from syncfabric.hdl.coarse.sync_core import SyncCore
from syncfabric.sim.golden.arith import to_bytes
from syncfabric.sim.golden.coarse import sync_chunk
from syncfabric.sim.golden.types import DType, ReduceOp
from syncfabric.tb.alu import random_operands
from syncfabric.host.transports.axi_model import AxiRamModel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402

BEAT, ENTRY = 8, 4


class Ring(Elaboratable):
    """``p`` cores; core d's o_ring reaches core ``next[d]``'s i_ring after ``latency`` cycles."""

    def __init__(self, p, latency, reverse=False):
        self.cores = [SyncCore(BEAT, ENTRY, max_ranks=4) for _ in range(p)]
        self.p, self.latency, self.reverse = p, latency, reverse
        self.flits = []          # (src, bits) seen, for the protocol checks

    def elaborate(self, platform):
        m = Module()
        for d, core in enumerate(self.cores):
            m.submodules[f"core{d}"] = core
        for d, core in enumerate(self.cores):
            nxt = self.cores[(d - 1 if self.reverse else d + 1) % self.p]
            valid, payload = core.o_ring.valid & core.o_ring.ready, core.o_ring.payload.as_value()
            for k in range(self.latency):
                v, pl = Signal(name=f"v{d}_{k}"), Signal(len(payload), name=f"p{d}_{k}")
                m.d.sync += [v.eq(valid), pl.eq(payload)]
                valid, payload = v, pl
            m.d.comb += [core.o_ring.ready.eq(1), nxt.i_ring.valid.eq(valid), nxt.i_ring.payload.eq(payload)]
        return m


def run_ring(p, dtype, op, chunks, latency, seed, reverse=False, ram_kw=None):
    rng = np.random.default_rng(seed)
    chunk_bytes = p * ENTRY * BEAT
    n = chunks * chunk_bytes
    bufs = []
    for _ in range(p):
        a, _ = random_operands(rng, dtype, n // (4 if dtype in (DType.FP32, DType.INT32) else 2))
        bufs.append(to_bytes(a))
    dut = Ring(p, latency, reverse)
    rams = [AxiRamModel(c.axi, size=2 * n + 4096, seed=seed + d, **(ram_kw or {})) for d, c in enumerate(dut.cores)]
    base = 256
    for d, ram in enumerate(rams):
        ram.write(base, bufs[d].tobytes())
    positions = [(-d) % p if reverse else d for d in range(p)]
    seen = []

    async def bench(ctx):
        for d, c in enumerate(dut.cores):
            ctx.set(c.base, base)
            ctx.set(c.stride, chunk_bytes)
            ctx.set(c.chunks, chunks)
            ctx.set(c.rank, positions[d])
            ctx.set(c.ranks, p)
            ctx.set(c.dtype, dtype)
            ctx.set(c.op, op)
            ctx.set(c.start, 1)
        await ctx.tick()
        for c in dut.cores:
            ctx.set(c.start, 0)
        for _ in range(200 * chunks * p + 500):
            await ctx.tick()
            for c in dut.cores:
                if ctx.get(c.o_ring.valid):
                    seen.append(ctx.get(c.o_ring.payload.as_value()))
            if all(ctx.get(c.done) for c in dut.cores):
                break
        else:
            raise AssertionError("cores did not finish")
        assert not any(ctx.get(c.err) for c in dut.cores)
        stats.extend((ctx.get(c.cycles), ctx.get(c.alu_beats), ctx.get(c.stalls)) for c in dut.cores)

    stats = []
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for ram in rams:
        ram.add_to(sim)
    sim.add_testbench(bench)
    sim.run()
    for k in range(chunks):
        sl = slice(k * chunk_bytes, (k + 1) * chunk_bytes)
        want = sync_chunk([b[sl] for b in bufs], dtype, op, positions)
        for d, ram in enumerate(rams):
            got = np.frombuffer(ram.read(base + k * chunk_bytes, chunk_bytes), np.uint8)
            assert np.array_equal(got, want), f"chunk {k} device {d} (seed {seed})"
    return seen, stats


@pytest.mark.parametrize("dtype,op", [(DType.FP32, ReduceOp.SUM), (DType.FP16, ReduceOp.MAX),
                                      (DType.BF16, ReduceOp.SUM), (DType.INT32, ReduceOp.MIN)])
def test_ring_of_four_cores_matches_golden_bit_for_bit(dtype, op):
    seed = seed_for(11 + int(dtype) * 4 + int(op))
    seen, stats = run_ring(4, dtype, op, chunks=2, latency=3, seed=seed)
    # every flit is a RecvBuf write to core 0's window; each core sends 2(p-1) entries per chunk
    assert len(seen) == 4 * 2 * 2 * 3 * ENTRY
    for bits in seen[:8]:
        f = unpack_flit(BEAT, bits)
        assert f["opcode"] == CciOpcode.MEM_WR and decode_core_addr(f["addr"])[:2] == (0, Region.RECV)
    # the ALU reduces (p-1) entries per chunk on every core
    assert all(alu == 2 * 3 * ENTRY for _, alu, _ in stats)


def test_two_cores_reverse_ring_with_slow_dram():
    seed = seed_for(5)
    run_ring(2, DType.FP32, ReduceOp.SUM, chunks=3, latency=1, seed=seed, reverse=True,
             ram_kw={"latency": 5, "ready_prob": 0.5, "valid_prob": 0.6})


def test_bad_ranks_end_at_once_with_an_error():
    dut = SyncCore(BEAT, ENTRY, max_ranks=4)

    async def bench(ctx):
        ctx.set(dut.ranks, 5)
        ctx.set(dut.chunks, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick()
        assert ctx.get(dut.done) and ctx.get(dut.err) and not ctx.get(dut.busy)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_default_sync_core_elaborates():
    from amaranth.back import rtlil
    assert "module" in rtlil.convert(SyncCore())
