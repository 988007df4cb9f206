"""The BytePS summation service RTL in Amaranth's simulator: random push order over the workers' ports, pulls
posted before the other workers pushed (they wait), two rounds per part; sums bit-exact with the golden
SummationService (worker order)."""

import os
import random
import sys

import numpy as np
import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.coarse.layouts import CciOpcode, pack_flit, unpack_flit
from syncfabric.hdl.coarse.summation import SummationService
from syncfabric.sim.golden.arith import to_bytes
from syncfabric.sim.golden.byteps import SummationService as GoldenService
from syncfabric.sim.golden.types import DType, ReduceOp
from syncfabric.tb.alu import random_operands

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402

N, BB, PB, PARTS = 4, 8, 4, 2
MAX_CYCLES = 20_000      # a hung pull fails the test instead of running forever


async def cci_request(ctx, dut, w, opcode, tag, addr, value=0):
    """Send one request flit on worker ``w``'s port, wait for its response and return it (its tag checked)."""
    req, rsp = getattr(dut, f"w{w}_req"), getattr(dut, f"w{w}_rsp")
    ctx.set(rsp.ready, 1)
    ctx.set(req.payload.as_value(), pack_flit(BB, opcode, tag, addr, value))
    ctx.set(req.valid, 1)
    await ctx.tick().until(req.ready)
    ctx.set(req.valid, 0)
    if not ctx.get(rsp.valid):
        await ctx.tick().until(rsp.valid)
    f = unpack_flit(BB, ctx.get(rsp.payload.as_value()))
    await ctx.tick()
    assert f["tag"] == tag, (w, tag, f)
    return f


@pytest.mark.parametrize("dtype,op", [(DType.FP16, ReduceOp.SUM), (DType.FP32, ReduceOp.SUM),
                                      (DType.BF16, ReduceOp.MAX), (DType.INT32, ReduceOp.MIN)])
def test_summation_service_answers_pulls_after_all_pushes_bit_exact(dtype, op):
    seed = seed_for(31 + int(dtype) * 3 + int(op))
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    dut = SummationService(N, BB, PB, PARTS)
    rounds = 2
    elems = PB * BB // (4 if dtype in (DType.FP32, DType.INT32) else 2)
    data = {(r, p, w): to_bytes(random_operands(nrng, dtype, elems)[0])
            for r in range(rounds) for p in range(PARTS) for w in range(N)}
    want = {}
    for r in range(rounds):
        for p in range(PARTS):
            g = GoldenService(N, dtype, op)
            for w in range(N):
                out = g.push(p, w, data[(r, p, w)])
            want[(r, p)] = out.tobytes()
    # each worker, each round: push its parts (random part order), then pull them (random order)
    scripts = []
    for w in range(N):
        reqs = []
        for r in range(rounds):
            parts = list(range(PARTS))
            rng.shuffle(parts)
            for p in parts:
                raw = data[(r, p, w)].tobytes()
                reqs += [("push", r, p, b, int.from_bytes(raw[b * BB:(b + 1) * BB], "little")) for b in range(PB)]
            rng.shuffle(parts)
            reqs += [("pull", r, p, b, 0) for p in parts for b in range(PB)]
        scripts.append(reqs)
    delays = [[rng.randint(0, 3 + 6 * w) for _ in scripts[w]] for w in range(N)]   # worker 3 is slow
    got = {}
    finished = []
    progress = [0] * N

    def worker(w):
        async def bench(ctx):
            for k, (kind, r, p, b, value) in enumerate(scripts[w]):
                for _ in range(delays[w][k]):
                    await ctx.tick()
                if kind == "push":
                    f = await cci_request(ctx, dut, w, CciOpcode.MEM_WR, k & 0xFF, dut.push_addr(p, w, b), value)
                    assert f["opcode"] == CciOpcode.CMP
                else:
                    f = await cci_request(ctx, dut, w, CciOpcode.MEM_RD, k & 0xFF, dut.pull_addr(p, b))
                    assert f["opcode"] == CciOpcode.MEM_DATA
                    got.setdefault((r, p), {}).setdefault(w, {})[b] = f["data"].to_bytes(BB, "little")
                progress[w] = k + 1
            finished.append(w)
        return bench

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for w in range(N):
        sim.add_testbench(worker(w))

    async def setup(ctx):
        ctx.set(dut.dtype, dtype)
        ctx.set(dut.op, op)

    sim.add_testbench(setup)
    sim.run_until(MAX_CYCLES * 1e-6)
    assert sorted(finished) == list(range(N)), (f"workers {finished} finished, requests done per worker "
                                                f"{progress} of {[len(s) for s in scripts]} (seed {seed})")
    for key in want:
        for w in range(N):
            beats = got[key][w]
            assert b"".join(beats[b] for b in range(PB)) == want[key], f"round/part {key} worker {w} (seed {seed})"


def test_malformed_requests_are_answered_counted_and_change_nothing():
    """A push naming another port's worker or a part that does not exist, a pull of a missing part and a read
    in the push region: each answered at once (reads with zero data) and counted in ``bad_requests``; the
    round that follows sums exactly as the golden service."""
    n, pb, parts = 2, 2, 1
    dut = SummationService(n, BB, pb, parts)
    nrng = np.random.default_rng(seed_for(77))
    data = [to_bytes(random_operands(nrng, DType.FP32, pb * BB // 4)[0]) for _ in range(n)]
    g = GoldenService(n, DType.FP32, ReduceOp.SUM)
    want = [g.push(0, w, data[w]) for w in range(n)][-1].tobytes()
    junk = 0x0123456789ABCDEF
    bad = [(CciOpcode.MEM_WR, dut.push_addr(0, 1, 0), junk),          # port 0 writing worker 1's slot
           (CciOpcode.MEM_WR, dut.push_addr(parts, 0, 0), junk),      # a part beyond the last
           (CciOpcode.MEM_RD, dut.pull_addr(parts, 0), 0),            # pull of a missing part
           (CciOpcode.MEM_RD, dut.push_addr(0, 0, 0), 0)]             # read in the push region
    got = {}

    def worker(w):
        async def bench(ctx):
            ctx.set(dut.dtype, DType.FP32)
            ctx.set(dut.op, ReduceOp.SUM)
            if w == 0:
                for tag, (opcode, addr, value) in enumerate(bad):
                    f = await cci_request(ctx, dut, 0, opcode, tag, addr, value)
                    want_op = CciOpcode.MEM_DATA if opcode == CciOpcode.MEM_RD else CciOpcode.CMP
                    assert f["opcode"] == want_op and f["data"] == 0, (tag, f)
                assert ctx.get(dut.bad_requests) == len(bad)
            raw = data[w].tobytes()
            for b in range(pb):
                await cci_request(ctx, dut, w, CciOpcode.MEM_WR, 10 + b, dut.push_addr(0, w, b),
                                  int.from_bytes(raw[b * BB:(b + 1) * BB], "little"))
            for b in range(pb):
                f = await cci_request(ctx, dut, w, CciOpcode.MEM_RD, 20 + b, dut.pull_addr(0, b))
                got.setdefault(w, {})[b] = f["data"].to_bytes(BB, "little")
        return bench

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for w in range(n):
        sim.add_testbench(worker(w))
    sim.run_until(2_000 * 1e-6)
    assert sorted(got) == [0, 1] and all(len(got[w]) == pb for w in got), got
    for w in range(n):
        assert b"".join(got[w][b] for b in range(pb)) == want, w


def test_control_registers_set_the_mode_and_read_the_counters_through_any_port():
    """``registers=True`` (the service in the system top): MODE written through port 1 makes the service
    asynchronous FP32 SUM (a push applied at once, a pull answered without the other worker), the counters read
    back through port 0, a write to a read-only register is ignored, an access to no register is malformed."""
    from syncfabric.hdl.coarse.layouts import SUM_CTRL, summation_register_map
    n, pb, parts = 2, 2, 1
    regs = summation_register_map(BB)
    dut = SummationService(n, BB, pb, parts, registers=True)
    assert not hasattr(dut, "mode")
    nrng = np.random.default_rng(seed_for(78))
    dw = [to_bytes(random_operands(nrng, DType.FP32, BB // 4)[0]).tobytes() for _ in range(2)]
    g = GoldenService(n, DType.FP32, ReduceOp.SUM, asynchronous=True)
    seen = {}

    async def bench(ctx):
        mode = regs.encode("MODE", asynchronous=1, dtype=int(DType.FP32), op=int(ReduceOp.SUM))
        await cci_request(ctx, dut, 1, CciOpcode.MEM_WR, 1, SUM_CTRL + regs.addr("MODE"), mode)
        seen["mode"] = (await cci_request(ctx, dut, 0, CciOpcode.MEM_RD, 2, SUM_CTRL + regs.addr("MODE")))["data"]
        for k, w in enumerate((0, 1)):          # worker 0 then worker 1 add a delta to beat 0
            await cci_request(ctx, dut, w, CciOpcode.MEM_WR, 3 + k, dut.push_addr(0, w, 0),
                              int.from_bytes(dw[k], "little"))
            g.push(0, w, np.frombuffer(dw[k], np.uint8))
        f = await cci_request(ctx, dut, 0, CciOpcode.MEM_RD, 5, dut.pull_addr(0, 0))
        seen["w"] = f["data"].to_bytes(BB, "little")
        await cci_request(ctx, dut, 0, CciOpcode.MEM_WR, 6, SUM_CTRL + regs.addr("PUSHES_APPLIED"), 99)
        await cci_request(ctx, dut, 0, CciOpcode.MEM_RD, 7, SUM_CTRL + len(list(regs.registers())) * BB)
        for tag, name in enumerate(("PUSHES_APPLIED", "BAD_REQUESTS", "PARTS_SUMMED")):
            seen[name] = (await cci_request(ctx, dut, 1, CciOpcode.MEM_RD, 8 + tag, SUM_CTRL + regs.addr(name)))["data"]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run_until(1_000 * 1e-6)
    assert regs.decode("MODE", seen["mode"]) == {"asynchronous": 1, "dtype": int(DType.FP32), "op": int(ReduceOp.SUM)}
    assert seen["w"] == g.pull(0).tobytes()
    assert (seen["PUSHES_APPLIED"], seen["BAD_REQUESTS"], seen["PARTS_SUMMED"]) == (2, 1, 0)
