"""CompletionWriter in Amaranth's simulator: random completions pushed against a host that consumes the ring at
random (often leaving it full), a DMA that stalls commands, beats and acknowledgements; the ring contents,
sequence numbers, CQ_TAIL, interrupts and counters are checked against a model of the ring (the written-bytes
counter a cycle after each acknowledgement).

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.cplwriter import CompletionWriter
from syncfabric.hdl.common.layouts import COMPLETION_BYTES, completion_layout
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W = CFG.beat_bytes
CPL = completion_layout()
N_RECORDS = 300


def random_record(rng):
    return {"cookie": rng.getrandbits(64), "tag": rng.getrandbits(32),
            "status": Status.OK if rng.random() < 0.6 else rng.randrange(1, 256), "collective": rng.getrandbits(8),
            "sq_index": rng.getrandbits(16), "cycles": rng.getrandbits(32), "detail": rng.getrandbits(32),
            "seq": rng.getrandbits(32), "contributors": rng.getrandbits(16), "reserved": rng.getrandbits(16)}


def test_completions_are_written_in_order_numbered_from_1_and_never_overrun_the_ring():
    rng = random.Random(seed_for(7401))
    dut = CompletionWriter(CFG)
    records = [random_record(rng) for _ in range(N_RECORDS)]

    async def bench(ctx):
        base, size = rng.getrandbits(16) << 8, 8
        mask = size - 1
        head = tail = 0
        pushed = written = stall = cycle = 0
        ring = {}
        state, beats, addr = "idle", [], None
        ctx.set(dut.cq_base, base)
        ctx.set(dut.cq_size, 0)                 # a ring of size 0: nothing is written
        for _ in range(30):
            ctx.set(dut.i_cpl.valid, pushed < 3)
            ctx.set(dut.i_cpl.payload, records[pushed])
            if ctx.get(dut.i_cpl.ready) and pushed < 3:
                pushed += 1
            await ctx.tick()
            assert not ctx.get(dut.wr_cmd.valid) and ctx.get(dut.cq_tail) == 0
        ctx.set(dut.cq_size, size)
        while written < N_RECORDS:
            cycle += 1
            assert cycle < 100 * N_RECORDS
            full = ((tail + 1) & mask) == (head & mask)
            # the host: takes the oldest completion now and then; stops for a while at times
            if head != tail and rng.random() < (0.02 if cycle // 500 % 2 else 0.4):
                head = (head + 1) & mask
            ctx.set(dut.cq_head, head)
            valid = pushed < N_RECORDS and rng.random() < 0.5
            ctx.set(dut.i_cpl.valid, valid)
            if valid:
                ctx.set(dut.i_cpl.payload, records[pushed])
            ctx.set(dut.wr_cmd.ready, rng.random() < 0.5)
            ctx.set(dut.wr_data.ready, rng.random() < 0.6)
            ctx.set(dut.wr_done.valid, state == "ack" and rng.random() < 0.4)
            ctx.set(dut.wr_done.payload.err, 0)

            took = valid and ctx.get(dut.i_cpl.ready)
            if ctx.get(dut.wr_cmd.valid) and ctx.get(dut.wr_cmd.ready):
                assert state == "idle", cycle
                assert not full, cycle              # the ring is never overrun
                assert ctx.get(dut.wr_cmd.payload.length) == COMPLETION_BYTES
                addr = ctx.get(dut.wr_cmd.payload.addr)
                assert addr == base + tail * COMPLETION_BYTES, cycle
                state, beats = "data", []
            if ctx.get(dut.wr_data.valid) and ctx.get(dut.wr_data.ready):
                assert state == "data", cycle
                beats.append(ctx.get(dut.wr_data.payload.data))
                assert ctx.get(dut.wr_data.payload.last) == (len(beats) == COMPLETION_BYTES // W), cycle
                if len(beats) == COMPLETION_BYTES // W:
                    state = "ack"
            acked = ctx.get(dut.wr_done.valid) and ctx.get(dut.wr_done.ready)
            if acked:
                rec = dict(records[written], seq=written + 1)
                got = sum(b << 8 * W * i for i, b in enumerate(beats))
                assert CPL.from_bits(got).as_value().value == CPL.const(rec).as_value().value, written
                assert ctx.get(dut.irq_cpl) and ctx.get(dut.irq_err) == (rec["status"] != Status.OK), cycle
                ring[tail] = rec
            else:
                assert not ctx.get(dut.irq_cpl) and not ctx.get(dut.irq_err), cycle
            counted = written                       # CPL_WR_BYTES steps a cycle after the acknowledgement
            await ctx.tick()
            pushed += took
            if acked:
                tail = (tail + 1) & mask
                written += 1
                state = "idle"
            assert ctx.get(dut.cq_tail) == tail, cycle
            assert ctx.get(dut.cpl_bytes) == COMPLETION_BYTES * counted, cycle
            # a completion is counted when the writer takes it from the queue, before its write
            n = ctx.get(dut.cmds_ok) + ctx.get(dut.cmds_err)
            assert written <= n <= written + 1, cycle
            assert ctx.get(dut.cmds_err) == sum(r["status"] != Status.OK for r in records[:n]), cycle
            new_stall = ctx.get(dut.cpl_stall)
            if new_stall != stall:                  # only while the ring is full and a completion waits
                assert new_stall == stall + 1 and full and pushed > n, cycle
                stall = new_stall
        assert stall > 50, stall

    run_sim(dut, bench)
