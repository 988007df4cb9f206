"""The BytePS summation service RTL in asynchronous mode (paper section 5), in Amaranth's simulator: every worker
sends a random stream of pushes (delta parameters) and pulls of a few beats, with random gaps between requests
and random backpressure on its responses; a monitor records the order in which the service accepts the
requests, the golden asynchronous SummationService replays that order, and every response must be the golden
one bit for bit (a pull reading a beat before an accepted push to it has been applied fails)."""

import os
import random
import sys

import numpy as np
import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.coarse.layouts import CciOpcode, pack_flit, unpack_flit
from syncfabric.hdl.coarse.summation import SummationMode, SummationService
from syncfabric.sim.golden.arith import to_bytes
from syncfabric.sim.golden.byteps import SummationService as GoldenService
from syncfabric.sim.golden.types import DType, ReduceOp
from syncfabric.tb.alu import random_operands

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402

BB = 8


def run_async(dut, scripts, dtype, op, rng, gap=0.3, stall=0.3, max_cycles=20_000):
    """Drive ``scripts[w]`` (lists of ``("push", part, beat, value)`` / ``("pull", part, beat)``) on the
    workers' ports with random request gaps (probability ``gap``) and response stalls (``stall``); returns
    ``(accepted, responses, cycles)``: the ``(worker, flit)`` requests in acceptance order, each worker's response
    flits in order, and the cycles until the last response."""
    n = len(scripts)
    reqs = [getattr(dut, f"w{w}_req") for w in range(n)]
    rsps = [getattr(dut, f"w{w}_rsp") for w in range(n)]
    accepted, responses = [], [[] for _ in range(n)]
    done = []
    cycles = [0]

    def sender(w):
        async def bench(ctx):
            for k, item in enumerate(scripts[w]):
                while rng.random() < gap:
                    await ctx.tick()
                if item[0] == "push":
                    _, p, b, value = item
                    flit = pack_flit(BB, CciOpcode.MEM_WR, k & 0xFF, dut.push_addr(p, w, b), value)
                else:
                    _, p, b = item
                    flit = pack_flit(BB, CciOpcode.MEM_RD, k & 0xFF, dut.pull_addr(p, b), 0)
                ctx.set(reqs[w].payload.as_value(), flit)
                ctx.set(reqs[w].valid, 1)
                await ctx.tick().until(reqs[w].ready)
                ctx.set(reqs[w].valid, 0)
        return bench

    def receiver(w):
        async def bench(ctx):
            if not scripts[w]:
                done.append(w)
                return
            ctx.set(rsps[w].ready, rng.random() >= stall)
            async for _, _, valid, ready, payload in ctx.tick().sample(rsps[w].valid, rsps[w].ready,
                                                                        rsps[w].payload.as_value()):
                if valid and ready:
                    responses[w].append(unpack_flit(BB, payload))
                    if len(responses[w]) == len(scripts[w]):
                        done.append(w)
                        return
                ctx.set(rsps[w].ready, rng.random() >= stall)
        return bench

    async def monitor(ctx):
        sigs = [s for w in range(n) for s in (reqs[w].valid, reqs[w].ready, reqs[w].payload.as_value())]
        async for _, _, *vals in ctx.tick().sample(*sigs):
            for w in range(n):
                valid, ready, payload = vals[3 * w:3 * w + 3]
                if valid and ready:
                    accepted.append((w, unpack_flit(BB, payload)))

    async def setup(ctx):
        ctx.set(dut.mode, SummationMode.ASYNC)
        ctx.set(dut.dtype, dtype)
        ctx.set(dut.op, op)

    async def watchdog(ctx):        # ends the run when every response arrived, or after max_cycles (a hang)
        for cycles[0] in range(max_cycles):
            if len(done) == n:
                return
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(setup)
    sim.add_testbench(watchdog)
    sim.add_testbench(monitor, background=True)
    for w in range(n):
        sim.add_testbench(sender(w), background=True)
        sim.add_testbench(receiver(w), background=True)
    sim.run()
    assert sorted(done) == list(range(n)), (f"workers {sorted(done)} got all their responses; responses per worker "
                                            f"{[len(r) for r in responses]} of {[len(s) for s in scripts]}")
    return accepted, responses, cycles[0]


def golden_responses(dut, accepted, n, dtype, op):
    """Each worker's expected responses, from the golden asynchronous service replaying the acceptance order
    (one golden part per result beat: the service is element-wise)."""
    golden = GoldenService(n, dtype, op, asynchronous=True)
    want = [[] for _ in range(n)]
    for w, f in accepted:
        index = (f["addr"] & ((1 << 30) - 1)) // BB
        if f["opcode"] == CciOpcode.MEM_WR:
            beat = index % dut.pb
            part = index // (dut.pb * n)
            golden.push((part, beat), w, np.frombuffer(f["data"].to_bytes(BB, "little"), np.uint8))
            want[w].append((f["tag"], CciOpcode.CMP, None))
        else:
            got = golden.pull((index // dut.pb, index % dut.pb))
            value = 0 if got is None else int.from_bytes(got.tobytes(), "little")
            want[w].append((f["tag"], CciOpcode.MEM_DATA, value))
    return want


@pytest.mark.parametrize("dtype,op", [(DType.FP32, ReduceOp.SUM), (DType.FP16, ReduceOp.SUM),
                                      (DType.BF16, ReduceOp.MAX), (DType.INT32, ReduceOp.MIN)])
def test_async_pushes_and_pulls_match_golden_in_acceptance_order_under_random_stalls(dtype, op):
    n, pb, parts = 4, 4, 2
    seed = seed_for(61 + 5 * int(dtype) + int(op))
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    dut = SummationService(n, BB, pb, parts)
    elems = BB // (4 if dtype in (DType.FP32, DType.INT32) else 2)
    scripts = []
    for w in range(n):
        s = []
        for _ in range(36):
            p, b = rng.randrange(parts), rng.randrange(pb)
            value = int.from_bytes(to_bytes(random_operands(nrng, dtype, elems)[0]).tobytes(), "little")
            roll = rng.random()
            if roll < 0.45:
                s.append(("push", p, b, value))
            elif roll < 0.7:            # a push and at once a pull of the same beat: read after write
                s += [("push", p, b, value), ("pull", p, b)]
            else:
                s.append(("pull", p, b))
        scripts.append(s)
    accepted, got, _ = run_async(dut, scripts, dtype, op, rng)
    assert len(accepted) == sum(len(s) for s in scripts)
    want = golden_responses(dut, accepted, n, dtype, op)
    for w in range(n):
        for k, (f, (tag, opcode, value)) in enumerate(zip(got[w], want[w])):
            assert (f["tag"], f["opcode"]) == (tag, opcode), (w, k, f, seed)
            if value is not None:
                assert f["data"] == value, f"worker {w} response {k}: {f['data']:#x} != {value:#x} (seed {seed})"


def test_async_pull_returns_at_once_and_first_push_copies():
    """Worker 0 alone: a pull of a beat nobody pushed reads zero, the first push sets w (a copy, even with
    ``max`` and negative values: max(0, -5) would be 0), later pushes apply ``max``, and every pull is answered
    although worker 1 never pushes (in sync mode it would wait for worker 1)."""
    n, pb, parts = 2, 2, 1
    dut = SummationService(n, BB, pb, parts)

    def word(a, b):
        return int.from_bytes(np.array([a, b], np.int32).tobytes(), "little")

    script = [("pull", 0, 1), ("push", 0, 1, word(-5, -7)), ("pull", 0, 1), ("push", 0, 1, word(-9, 3)),
              ("pull", 0, 1), ("pull", 0, 0)]
    _, got, _ = run_async(dut, [script, []], DType.INT32, ReduceOp.MAX, random.Random(seed_for(5)), max_cycles=500)
    data = [f["data"] for f in got[0] if f["opcode"] == CciOpcode.MEM_DATA]
    assert data == [0, word(-5, -7), word(-5, 3), 0]


def test_golden_async_pull_reads_current_parameters_and_sync_mode_has_no_pull():
    g = GoldenService(3, DType.INT32, asynchronous=True)
    assert g.pull(4) is None
    g.push(4, 2, np.array([10, -1], np.int32).view(np.uint8))
    assert g.pull(4).view(np.int32).tolist() == [10, -1]
    g.push(4, 0, np.array([1, 1], np.int32).view(np.uint8))
    assert g.pull(4).view(np.int32).tolist() == [11, 0]
    with pytest.raises(ValueError, match="asynchronous"):
        GoldenService(3, DType.INT32).pull(4)


def test_mode_switch_async_then_sync_round_then_async_restarts_from_a_copy():
    """Async pushes to part 0, then a sync round of part 0 (summed as if the async phase never happened), then
    async again: the sync sum cleared the beats' flags, so the first async push copies instead of adding."""
    n, pb, parts = 2, 2, 1
    dut = SummationService(n, BB, pb, parts)

    def word(a, b):
        return int.from_bytes(np.array([a, b], np.int32).tobytes(), "little")

    got = []

    async def request(ctx, w, opcode, addr, value=0):
        req, rsp = getattr(dut, f"w{w}_req"), getattr(dut, f"w{w}_rsp")
        ctx.set(rsp.ready, 1)
        ctx.set(req.payload.as_value(), pack_flit(BB, opcode, 1, addr, value))
        ctx.set(req.valid, 1)
        await ctx.tick().until(req.ready)
        ctx.set(req.valid, 0)
        (f,) = await ctx.tick().sample(rsp.payload.as_value()).until(rsp.valid)
        return unpack_flit(BB, f)["data"]

    async def bench(ctx):
        ctx.set(dut.dtype, DType.INT32)
        ctx.set(dut.op, ReduceOp.SUM)
        ctx.set(dut.mode, SummationMode.ASYNC)
        await request(ctx, 0, CciOpcode.MEM_WR, dut.push_addr(0, 0, 0), word(100, 200))
        await request(ctx, 1, CciOpcode.MEM_WR, dut.push_addr(0, 1, 0), word(1, 2))
        got.append(await request(ctx, 0, CciOpcode.MEM_RD, dut.pull_addr(0, 0)))
        ctx.set(dut.mode, SummationMode.SYNC)
        for w in range(n):
            for b in range(pb):
                await request(ctx, w, CciOpcode.MEM_WR, dut.push_addr(0, w, b), word(10 * w + b, -w))
        for w in range(n):
            got.append([await request(ctx, w, CciOpcode.MEM_RD, dut.pull_addr(0, b)) for b in range(pb)])
        ctx.set(dut.mode, SummationMode.ASYNC)
        await request(ctx, 1, CciOpcode.MEM_WR, dut.push_addr(0, 1, 1), word(7, 7))
        got.append(await request(ctx, 0, CciOpcode.MEM_RD, dut.pull_addr(0, 1)))
        assert ctx.get(dut.pushes_applied) == 3 and ctx.get(dut.parts_summed) == 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run_until(2_000 * 1e-6)
    sums = [word(10, -1), word(12, -1)]
    assert got == [word(101, 202), sums, sums, word(7, 7)]


@pytest.mark.parametrize("same_part", [False, True])
def test_async_accepts_about_one_push_per_cycle(same_part):
    """Four workers each push 4 parts of 8 beats with no gaps and no backpressure, on different parts or all on
    the same part at once (every beat pushed by all four: read-after-write waits): the service takes about one
    request per cycle (measured 130 and 139 cycles for 128 pushes), since a waiting port lets the others go."""
    n, pb, parts = 4, 8, 4
    dut = SummationService(n, BB, pb, parts)
    scripts = [[("push", r % parts if same_part else (w + r) % parts, b, b + 1) for r in range(4) for b in range(pb)]
               for w in range(n)]
    accepted, _, cycles = run_async(dut, scripts, DType.INT32, ReduceOp.SUM, random.Random(seed_for(3)), gap=0,
                                    stall=0)
    print(f"{len(accepted)} pushes in {cycles} cycles")
    assert cycles <= 1.15 * len(accepted)


def test_push_scoreboard_hits_for_exactly_depth_cycles_after_a_push():
    """A push accepted in cycle 0 is in flight in cycles 1 .. depth: ``hit`` (registered, about the probe of the
    previous cycle) is high in exactly those cycles, from ``same`` in cycle 1 and from the shift register after."""
    from syncfabric.hdl.coarse.summation import PushScoreboard
    depth = 3
    dut = PushScoreboard(depth, 4, 2)
    seen = []

    async def bench(ctx):
        ctx.set(dut.probe[0], 5)
        ctx.set(dut.probe[1], 6)
        ctx.set(dut.push.payload, 5)
        ctx.set(dut.push.valid, 1)
        ctx.set(dut.same, 0b01)          # the push names probe 0's beat
        await ctx.tick()
        ctx.set(dut.push.valid, 0)
        ctx.set(dut.same, 0)
        for _ in range(depth + 2):
            seen.append((ctx.get(dut.hit[0]), ctx.get(dut.hit[1])))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(1, 0)] * depth + [(0, 0)] * 2


def test_async_request_raised_the_cycle_after_a_push_to_its_beat_waits_for_it():
    """Worker 1's port idles with a stale payload (a pull of beat 1) while worker 0's push to beat 0 is
    accepted; in the next cycle worker 1 raises a pull of beat 0. The scoreboard's registered answer was about
    the stale payload, so the pull must wait a cycle to be checked, then until the push is written: it reads
    the pushed value, not the old one."""
    dut = SummationService(2, BB, 2, 1)
    value = int.from_bytes(np.array([1234, -5], np.int32).tobytes(), "little")
    got = []

    async def bench(ctx):
        ctx.set(dut.mode, SummationMode.ASYNC)
        ctx.set(dut.dtype, DType.INT32)
        ctx.set(dut.op, ReduceOp.SUM)
        ctx.set(dut.w0_rsp.ready, 1)
        ctx.set(dut.w1_rsp.ready, 1)
        ctx.set(dut.w1_req.payload.as_value(), pack_flit(BB, CciOpcode.MEM_RD, 1, dut.pull_addr(0, 1), 0))
        ctx.set(dut.w0_req.payload.as_value(), pack_flit(BB, CciOpcode.MEM_WR, 2, dut.push_addr(0, 0, 0), value))
        ctx.set(dut.w0_req.valid, 1)
        await ctx.tick().until(dut.w0_req.ready)
        ctx.set(dut.w0_req.valid, 0)
        ctx.set(dut.w1_req.payload.as_value(), pack_flit(BB, CciOpcode.MEM_RD, 3, dut.pull_addr(0, 0), 0))
        ctx.set(dut.w1_req.valid, 1)
        await ctx.tick().until(dut.w1_req.ready)
        ctx.set(dut.w1_req.valid, 0)
        (f,) = await ctx.tick().sample(dut.w1_rsp.payload.as_value()).until(dut.w1_rsp.valid)
        got.append(unpack_flit(BB, f)["data"])

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run_until(200 * 1e-6)
    assert got == [value]
