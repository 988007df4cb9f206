"""ChunkDispatcher in Amaranth's simulator against a model of the dispatch order: random commands (tags, chunk
counts, FSM_LIMIT values) under random buffer, partition-room and queue-room backpressure.

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from syncfabric.hdl.ace.arbiter import SEQ_BITS
from syncfabric.hdl.ace.cmdtable import cmd_entry_layout
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.dispatcher import ChunkDispatcher
from syncfabric.hdl.common.layouts import LOAD_MASK_BITS

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
#: the wide engine's form (``control_stages``: the first FSM's modulo registered while the command waits)
WIDE = AceConfig.small(wide_control=1)


class DispatchBench(Elaboratable):
    """The dispatcher with a command table of registers behind its lookup."""

    def __init__(self, cfg):
        self.dut = ChunkDispatcher(cfg)
        self.entries = [Signal(cmd_entry_layout(cfg), name=f"cmd{i}") for i in range(cfg.n_cmds)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        with m.Switch(self.dut.e_cmd):
            for i, e in enumerate(self.entries):
                with m.Case(i):
                    m.d.comb += self.dut.e.eq(e)
        return m


def expected_order(commands, limit, cfg=CFG):
    """(fsm, cmd slot, chunk, seq, first, end, load_mask, final) of every chunk, in dispatch order. The first chunk's
    FSM is the tag's low ``log2(n_fsms)`` bits modulo FSM_LIMIT (the same on every rank, which is all that
    matters); ``final`` marks each command's last chunk (its messages' headers say so)."""
    out, seq = [], 0
    low = (1 << max(1, (cfg.n_fsms - 1).bit_length())) - 1
    for slot, tag, n_chunks, start, load_end, mask in commands:
        for c in range(n_chunks):
            out.append((((tag & low) % limit + c) % limit, slot, c, seq % (1 << SEQ_BITS), start, start + load_end,
                        mask, int(c == n_chunks - 1)))
            seq += 1
    return out


@pytest.mark.parametrize("cfg, limit", [(CFG, 1), (CFG, 3), (CFG, 4), (WIDE, 3), (WIDE, 4)],
                         ids=["1", "3", "4", "wide-3", "wide-4"])
def test_chunks_go_in_command_order_to_fsm_tag_plus_chunk_under_backpressure(cfg, limit):
    assert cfg.control_stages == (cfg is WIDE)
    rng = random.Random(seed_for(40 + limit))
    bench = DispatchBench(cfg)
    dut = bench.dut
    F = cfg.n_fsms
    # commands reuse table slots once their last chunk is dispatched (at most n_cmds queued)
    commands = [(i % cfg.n_cmds, rng.randrange(1 << 16), rng.randint(1, 5), rng.randrange(64), rng.randrange(8),
                 rng.getrandbits(LOAD_MASK_BITS)) for i in range(24)]
    got, bufs_given, dispatched, loads = [], [], [], []

    async def bench_fn(ctx):
        ctx.set(dut.enable, 1)
        ctx.set(dut.fsm_limit, limit)
        pending = list(commands)
        queued = []              # slots in the dispatcher's queue, oldest first
        next_buf = 0
        for _ in range(2000):
            # post the next command when its table slot is free (not queued)
            if pending and pending[0][0] not in queued and len(queued) < cfg.n_cmds:
                slot, tag, n_chunks, start, load_end, mask = pending[0]
                e = bench.entries[slot]
                ctx.set(e.tag, tag)
                ctx.set(e.geom.n_chunks, n_chunks)
                ctx.set(e.geom.last_chunk, n_chunks - 1)     # as CommandGeometry stores it
                ctx.set(e.phase_start[0], start)
                ctx.set(e.load_end, load_end)
                ctx.set(e.load_mask, mask)
                ctx.set(dut.cmd.valid, 1)
                ctx.set(dut.cmd.payload, slot)
            else:
                ctx.set(dut.cmd.valid, 0)
            # a buffer is free only while fewer than n_buffers chunks wait in the load sequencer's queue (the
            # engine's pool holds n_buffers, and the sequencer takes a chunk before its buffer is freed)
            ctx.set(dut.buf.valid, rng.random() < 0.7 and len(got) - len(loads) < cfg.n_buffers)
            ctx.set(dut.load.ready, rng.random() < 0.5)
            ctx.set(dut.buf.payload, next_buf)
            ctx.set(dut.room, rng.random() < 0.8)
            ctx.set(dut.q_ready, rng.getrandbits(F))
            await ctx.delay(1e-9)
            q_ready = ctx.get(dut.q_ready)
            if ctx.get(dut.chunk.valid):
                p = dut.chunk.payload
                row = tuple(ctx.get(p[k]) for k in ("fsm", "cmd", "chunk", "seq", "first", "end", "load_mask",
                                                   "final"))
                got.append(row)
                bufs_given.append(ctx.get(p.buf))
                assert ctx.get(dut.buf.ready) and ctx.get(dut.room) and q_ready >> row[0] & 1
                assert row[0] < max(1, limit)
                assert ctx.get(p.buf) == next_buf
                next_buf = (next_buf + 1) % cfg.n_buffers
            else:
                assert not ctx.get(dut.buf.ready)
            if ctx.get(dut.load.valid) and ctx.get(dut.load.ready):
                p = dut.load.payload
                loads.append(tuple(ctx.get(p[k]) for k in ("cmd", "chunk", "buf", "first", "end")))
            d = ctx.get(dut.dispatched)
            if d:
                dispatched.append(d.bit_length() - 1)
                queued.remove(d.bit_length() - 1)
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                queued.append(pending.pop(0)[0])
            await ctx.tick()

    run_sim(bench, bench_fn)
    assert got == expected_order(commands, max(1, limit), cfg), "dispatch order"
    assert dispatched == [c[0] for c in commands]
    assert len(bufs_given) == sum(c[2] for c in commands)
    # the load sequencer's queue: every dispatched chunk, in dispatch order
    assert loads == [(cmd, chunk, buf, first, end)
                     for (_, cmd, chunk, _, first, end, _, _), buf in zip(got, bufs_given)][:len(loads)]
    assert len(loads) > len(got) - cfg.n_buffers - 1


def test_nothing_is_dispatched_while_disabled():
    bench = DispatchBench(CFG)
    dut = bench.dut

    async def bench_fn(ctx):
        ctx.set(dut.fsm_limit, CFG.n_fsms)
        ctx.set(bench.entries[0].geom.n_chunks, 2)
        ctx.set(bench.entries[0].geom.last_chunk, 1)
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.cmd.valid, 0)
        ctx.set(dut.buf.valid, 1)
        ctx.set(dut.room, 1)
        ctx.set(dut.q_ready, (1 << CFG.n_fsms) - 1)
        for _ in range(5):
            await ctx.tick()
            assert not ctx.get(dut.chunk.valid) and not ctx.get(dut.stall_part)
        ctx.set(dut.enable, 1)
        ctx.set(dut.room, 0)
        await ctx.delay(1e-9)
        assert not ctx.get(dut.chunk.valid) and ctx.get(dut.stall_part)
        ctx.set(dut.room, 1)
        ctx.set(dut.q_ready, 0)
        await ctx.delay(1e-9)
        assert not ctx.get(dut.chunk.valid) and ctx.get(dut.stall_queue) and not ctx.get(dut.stall_part)
        ctx.set(dut.q_ready, (1 << CFG.n_fsms) - 1)
        await ctx.delay(1e-9)
        assert ctx.get(dut.chunk.valid)

    run_sim(bench, bench_fn)
