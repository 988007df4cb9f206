"""Chunker arithmetic in Amaranth's simulator: SeqDivider vs ``divmod``, CommandGeometry vs the golden
:class:`~syncfabric.sim.golden.chunking.Decomposition`, and CommandGeometry -> BlockGeometry block sizes and
buffer addresses vs :func:`~syncfabric.sim.golden.chunking.block_buffer_ranges`.

``SEED=<n>`` replaces the random seeds.
"""

import random

import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from syncfabric.hdl.ace.geometry import (MAX_CHUNKS, BlockGeometry, CommandGeometry, SeqDivider,
                                        geometry_error_layout, geometry_layout, slot_offset)
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.sim.golden.chunking import Decomposition, block_buffer_ranges, segments_for

from sim_helpers import run_sim, seed_for

#: the small engine (geometry in four stages) and the design point (five: its wide products over two)
CONFIGS = {"W16": AceConfig.small(), "W64": AceConfig()}
#: Collectives whose buffers the engine addresses, with (in_seg, out_seg).
SEG_FLAGS = {"allreduce": (0, 0), "reduce_scatter": (1, 0), "allgather": (0, 1), "alltoall": (1, 1)}
ERROR_FLAGS = tuple(geometry_error_layout().members)


def ceil_div(a, b):
    return -(-a // b)


# ---- SeqDivider ---------------------------------------------------------------------------------------------

def divider_vectors(rng, width, n_random):
    top = (1 << width) - 1
    edges = sorted({x & top for x in (0, 1, 2, 3, top, top - 1, top >> 1, (top >> 1) + 1)}
                   | {1 << i for i in range(width)})
    vectors = [(a, b) for a in edges for b in edges[:12]]
    vectors += [(a, top) for a in edges] + [(top, b) for b in edges]
    for _ in range(n_random):
        a = rng.getrandbits(width)
        b = rng.getrandbits(rng.randint(1, width))     # divisors of every magnitude
        vectors.append((a, b))
    return vectors


@pytest.mark.parametrize("width", [1, 8, 32])
def test_seq_divider_matches_divmod_with_fixed_latency(width):
    rng = random.Random(seed_for(100 + width))
    dut = SeqDivider(width)
    top = (1 << width) - 1
    vectors = divider_vectors(rng, width, 300)

    async def bench(ctx):
        for a, b in vectors:
            ctx.set(dut.dividend, a)
            ctx.set(dut.divisor, b)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            # garbage on the operands must not matter once the division has started
            ctx.set(dut.dividend, rng.getrandbits(width))
            ctx.set(dut.divisor, rng.getrandbits(width))
            for cycle in range(1, dut.latency):
                assert ctx.get(dut.busy) == 1 and ctx.get(dut.done) == 0, (a, b, cycle)
                await ctx.tick()
            assert ctx.get(dut.done) == 1 and ctx.get(dut.busy) == 0, (a, b)
            if b == 0:
                expect = (top, a)
            else:
                expect = divmod(a, b)
            got = (ctx.get(dut.quotient), ctx.get(dut.remainder))
            assert got == expect, f"{a} / {b}: got {got}, expected {expect}"
            assert ctx.get(dut.div_zero) == (b == 0)
            await ctx.tick()
            # done is a pulse; the results hold until the next start
            assert ctx.get(dut.done) == 0 and ctx.get(dut.busy) == 0
            assert (ctx.get(dut.quotient), ctx.get(dut.remainder)) == expect

    run_sim(dut, bench)


def test_seq_divider_restart_while_busy_abandons_old_division():
    dut = SeqDivider(16)

    async def bench(ctx):
        ctx.set(dut.dividend, 1000)
        ctx.set(dut.divisor, 7)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().repeat(5)
        ctx.set(dut.dividend, 65535)
        ctx.set(dut.divisor, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().repeat(dut.latency - 1)
        assert ctx.get(dut.done) == 1
        assert (ctx.get(dut.quotient), ctx.get(dut.remainder), ctx.get(dut.div_zero)) == (65535, 65535, 1)

    run_sim(dut, bench)


# ---- golden expectations ------------------------------------------------------------------------------------

def golden_decomposition(cfg, count, elem_bytes, n_blocks, segments, chunk_beats):
    return Decomposition(count, elem_bytes, n_blocks, segments, chunk_bytes=chunk_beats * cfg.beat_bytes,
                         packet_bytes=cfg.packet_bytes, beat_bytes=cfg.beat_bytes)


def expected_geometry(cfg, d):
    """The geometry_layout fields of a valid command, every one derived from the golden decomposition."""
    W = cfg.beat_bytes
    m = d.sub_blocks
    scb = d.segment_chunk_bytes // W
    last = d.chunk(d.n_chunks - 1)
    last_bytes = (last.hi - last.lo) * d.elem_bytes
    q_full, rem_full = divmod(scb, m)
    q_last, rem_last = divmod(ceil_div(last_bytes, W), m)
    pow2 = m & (m - 1) == 0
    return {
        "m": m, "m_shift": m.bit_length() - 1, "m_pow2": int(pow2),
        "seg_chunk_beats": scb, "e_elems": d.segment_chunk_elems, "n_chunks": d.n_chunks,
        "last_chunk": d.n_chunks - 1,
        "q_full": q_full, "rem_full": rem_full, "last_bytes": last_bytes, "q_last": q_last,
        "rem_last": rem_last, "slot_beats": d.slot_bytes // W, "n_blocks": d.n_blocks,
    }


def geometry_fields(ctx, port, layout):
    return {name: ctx.get(port[name]) for name in layout.members}


async def run_command(ctx, cg, count, elem_shift, n_blocks, segments, chunk_beats):
    """Start CommandGeometry, check busy and the exact latency, return (result, error) as dicts."""
    ctx.set(cg.count, count)
    ctx.set(cg.elem_shift, elem_shift)
    ctx.set(cg.n_blocks, n_blocks)
    ctx.set(cg.segments, segments)
    ctx.set(cg.chunk_beats, chunk_beats)
    ctx.set(cg.start, 1)
    await ctx.tick()
    ctx.set(cg.start, 0)
    cycles = 1
    while not ctx.get(cg.done):
        assert ctx.get(cg.busy), "busy must stay high until done"
        await ctx.tick()
        cycles += 1
        assert cycles <= cg.CYCLES, "done is late"
    assert cycles == cg.CYCLES
    result = geometry_fields(ctx, cg.result, geometry_layout(cg.cfg))
    error = {name: ctx.get(cg.error[name]) for name in ERROR_FLAGS}
    assert ctx.get(cg.bad) == any(error.values())
    return result, error


# ---- random commands ----------------------------------------------------------------------------------------

def random_command(rng, cfg):
    """A valid random command: (collective, nranks, count, elem_bytes, n_blocks, segments, chunk_beats)."""
    W = cfg.beat_bytes
    coll = rng.choice(list(SEG_FLAGS))
    P = rng.randint(2, 16)
    S = segments_for(coll, P)
    if S == 1 and rng.random() < 0.2:
        n_blocks = rng.randint(1, 40)           # any m for one segment (ring programs use P or 2P)
    else:
        n_blocks = rng.choice([P, 2 * P])
    eb = rng.choice([2, 4])
    # at least one beat per segment; full, random, small and minimal chunks
    chunk_beats = rng.choice([cfg.chunk_beats, cfg.chunk_beats, rng.randint(S, cfg.chunk_beats),
                              rng.randint(S, min(cfg.chunk_beats, 4 * S)), S, S + 1])
    E = (chunk_beats // S) * W // eb
    count = rng.choice([
        1, rng.randint(1, E), E - 1 or 1, E, E + 1, rng.randint(1, 20) * E, rng.randint(1, 20) * E + 1,
        rng.randint(1, 100_000), rng.randint(1, 100_000), rng.randint(1, 2000),
    ])
    return coll, P, count, eb, n_blocks, S, chunk_beats


def sample_chunks(rng, n_chunks):
    if n_chunks <= 5:
        return list(range(n_chunks))
    return sorted({0, 1, n_chunks - 2, n_chunks - 1, rng.randrange(n_chunks), rng.randrange(n_chunks)})


class GeometryPair(Elaboratable):
    """CommandGeometry feeding BlockGeometry, as in the engine's command table."""

    def __init__(self, cfg):
        self.cg = CommandGeometry(cfg)
        self.bg = BlockGeometry(cfg)

    def elaborate(self, platform):
        m = Module()
        m.submodules.cg = self.cg
        m.submodules.bg = self.bg
        m.d.comb += self.bg.geom.eq(self.cg.result)
        return m


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_block_geometry_matches_golden_ranges_for_random_commands(cfg_name):
    """Every block of sampled chunks (first, second, last two, random) of random commands: geometry fields,
    block sizes and both buffer addresses against the golden model, one lookup per cycle, each answered
    BlockGeometry.latency_for(cfg) cycles later (5 for the wide engine: its products over two stages)."""
    cfg = CONFIGS[cfg_name]
    rng = random.Random(seed_for(1 if cfg_name == "W16" else 2))
    dut = GeometryPair(cfg)
    cg, bg = dut.cg, dut.bg
    W = cfg.beat_bytes
    amask = (1 << cfg.addr_width) - 1
    n_commands = 200
    checked = {"blocks": 0, "empty": 0, "commands": 0, "out_of_range": 0}

    async def bench(ctx):
        for _ in range(n_commands):
            coll, P, count, eb, n_blocks, S, chunk_beats = random_command(rng, cfg)
            what = f"{coll} P={P} count={count} eb={eb} n_blocks={n_blocks} S={S} chunk_beats={chunk_beats}"
            d = golden_decomposition(cfg, count, eb, n_blocks, S, chunk_beats)
            eshift = eb.bit_length() - 1
            result, error = await run_command(ctx, cg, count, eshift, n_blocks, S, chunk_beats)
            assert not any(error.values()), f"{what}: {error}"
            assert result == expected_geometry(cfg, d), what

            in_seg, out_seg = SEG_FLAGS[coll]
            in_base = rng.getrandbits(cfg.addr_width) & ~(eb - 1)
            out_base = rng.getrandbits(cfg.addr_width) & ~(eb - 1)
            ctx.set(bg.count, count)
            ctx.set(bg.elem_shift, eshift)
            ctx.set(bg.in_base, in_base)
            ctx.set(bg.out_base, out_base)
            ctx.set(bg.in_seg, in_seg)
            ctx.set(bg.out_seg, out_seg)
            lookups = [(c, b) for c in sample_chunks(rng, d.n_chunks) for b in range(n_blocks)]
            # and lookups a packet header could carry outside the command (only ``in_range`` is defined)
            lookups += [(rng.choice([d.n_chunks, d.n_chunks + 1, rng.randrange(d.n_chunks, 1 << 16)]),
                         rng.randrange(n_blocks)) for _ in range(3)]
            lookups += [(rng.randrange(d.n_chunks), rng.choice([n_blocks, rng.randrange(n_blocks, 1 << 12)]))
                        for _ in range(3)]
            rng.shuffle(lookups)        # inputs change every cycle: each answer must be the one LATENCY back
            L = bg.latency
            for i in range(len(lookups) + L - 1):
                if i < len(lookups):
                    ctx.set(bg.chunk, lookups[i][0])
                    ctx.set(bg.block, lookups[i][1])
                await ctx.tick()
                if i < L - 1:
                    continue
                c, b = lookups[i - (L - 1)]
                in_range = c < d.n_chunks and b < n_blocks
                assert ctx.get(bg.in_range) == in_range, f"{what} chunk {c} block {b}"
                if not in_range:
                    checked["out_of_range"] += 1
                    continue
                chunk = d.chunk(c)
                blk = chunk.blocks[b]
                # rank = segment: the rank that has both the input and the output of this block
                rank = blk.segment if S > 1 else rng.randrange(P)
                send, recv = block_buffer_ranges(coll, rank, P, d, chunk, b)
                q, rem = divmod(ceil_div((chunk.hi - chunk.lo) * eb, W), d.sub_blocks)
                j = blk.sub
                expect = {
                    "segment": blk.segment, "sub": j, "is_last": int(c == d.n_chunks - 1),
                    "nbytes": blk.nbytes, "empty": int(blk.nbytes == 0), "beats": ceil_div(blk.nbytes, W),
                    "first_beat": j * q + min(j, rem),
                    "in_addr": (in_base + send[0] * eb) & amask,
                    "out_addr": (out_base + recv[0] * eb) & amask,
                }
                got = {name: ctx.get(getattr(bg, name)) for name in expect}
                assert got == expect, f"{what} chunk {c} block {b}"
                assert send[1] - send[0] == recv[1] - recv[0] == blk.nbytes // eb
                checked["blocks"] += 1
                checked["empty"] += blk.nbytes == 0
            checked["commands"] += 1

    run_sim(dut, bench)
    print(checked)
    assert checked["commands"] == n_commands
    assert checked["empty"] > 0, "no empty block exercised"
    assert checked["out_of_range"] == 6 * n_commands


def test_block_geometry_tiny_payloads_leave_trailing_blocks_empty():
    """count = 1 with m = 8: one partial beat in sub-block 0, seven empty blocks at the tail address."""
    cfg = CONFIGS["W16"]
    dut = GeometryPair(cfg)
    cg, bg = dut.cg, dut.bg

    async def bench(ctx):
        result, error = await run_command(ctx, cg, count=1, elem_shift=2, n_blocks=8, segments=1, chunk_beats=64)
        assert not any(error.values())
        assert (result["n_chunks"], result["last_bytes"], result["q_last"], result["rem_last"]) == (1, 4, 0, 1)
        ctx.set(bg.count, 1)
        ctx.set(bg.elem_shift, 2)
        ctx.set(bg.in_base, 0x1000)
        ctx.set(bg.out_base, 0x2000)
        ctx.set(bg.chunk, 0)
        for b in range(8):
            ctx.set(bg.block, b)
            await ctx.tick().repeat(BlockGeometry.latency_for(cfg))
            assert ctx.get(bg.nbytes) == (4 if b == 0 else 0) and ctx.get(bg.empty) == (b != 0)
            assert ctx.get(bg.beats) == (1 if b == 0 else 0)
            assert ctx.get(bg.in_addr) == (0x1000 if b == 0 else 0x1004)
            assert ctx.get(bg.out_addr) == (0x2000 if b == 0 else 0x2004)

    run_sim(dut, bench)


# ---- rejected commands --------------------------------------------------------------------------------------

#: (count, elem_shift, n_blocks, segments, chunk_beats) on W = 16 -> the error flags expected.
BAD_COMMANDS = [
    ((0, 2, 4, 1, 64), {"count_zero"}),
    ((100, 2, 5, 2, 64), {"blocks_indivisible"}),
    ((100, 2, 0, 1, 64), {"blocks_indivisible"}),
    ((100, 2, 4, 0, 64), {"blocks_indivisible"}),
    ((100, 2, 4, 4, 3), {"chunk_too_small"}),
    ((100, 2, 4, 1, 0), {"chunk_too_small"}),
    ((100, 2, 12, 4, 64), {"m_not_pow2"}),
    ((100, 1, 3, 1, 64), set()),                           # m = 3 is fine with one segment
    ((4 * MAX_CHUNKS, 2, 16, 16, 16), set()),              # E = 4: exactly MAX_CHUNKS chunks
    ((4 * MAX_CHUNKS + 1, 2, 16, 16, 16), {"too_many_chunks"}),
    ((2**32 - 1, 1, 2, 2, 64), {"too_many_chunks"}),
    ((0, 2, 5, 2, 1), {"count_zero", "blocks_indivisible", "chunk_too_small"}),
]


def test_command_geometry_flags_exactly_the_bad_fields():
    cfg = CONFIGS["W16"]
    dut = CommandGeometry(cfg)

    async def bench(ctx):
        for args, flags in BAD_COMMANDS:
            _, error = await run_command(ctx, dut, *args)
            assert {name for name, v in error.items() if v} == flags, args
            assert ctx.get(dut.bad) == bool(flags)
            # ignored while idle: the result holds until the next start
            await ctx.tick()
            assert ctx.get(dut.bad) == bool(flags)

    run_sim(dut, bench)


def test_command_geometry_full_tail_and_non_pow2_m_match_golden():
    """Directed: a payload of exactly n chunks (full last chunk), m = 3 and m = 5 with one segment, S = 16
    with one beat per segment, and the largest chunk_beats the 16-bit register holds. Commands go back to
    back: each start comes in the previous command's done cycle."""
    cfg = CONFIGS["W64"]
    dut = CommandGeometry(cfg)
    cases = [
        (3 * 8192, 4, 4, 1, 256),
        (1000, 2, 3, 1, 1024),
        (12345, 4, 5, 1, 7),
        (777, 2, 32, 16, 16),
        (100_000, 4, 16, 16, 1024),
        (1 << 20, 2, 2, 1, 0xFFFF),
    ]

    async def bench(ctx):
        for count, eb, n_blocks, S, chunk_beats in cases:
            d = golden_decomposition(cfg, count, eb, n_blocks, S, chunk_beats)
            result, error = await run_command(ctx, dut, count, eb.bit_length() - 1, n_blocks, S, chunk_beats)
            assert not any(error.values())
            assert result == expected_geometry(cfg, d), (count, eb, n_blocks, S, chunk_beats)

    run_sim(dut, bench)


def test_slot_offset_is_slot_times_slot_beats():
    cfg = CONFIGS["W16"]
    geom = Signal(geometry_layout(cfg))
    slot = Signal(10)
    expr = slot_offset(slot, geom)

    async def bench(ctx):
        for s, beats in [(0, 9), (5, 9), (1023, 0xFFFF)]:
            ctx.set(slot, s)
            ctx.set(geom.slot_beats, beats)
            assert ctx.get(expr) == s * beats

    sim = Simulator(Module())
    sim.add_testbench(bench)
    sim.run()
