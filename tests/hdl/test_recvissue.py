"""RecvIssue in Amaranth's simulator: a sequence of RECVs that reduce, pass through or drain their landing
beats, with the operands read ahead from a model SRAM, random bubbles on the landing beats and random stalls on
both outputs. The ALU's results must be the golden reduction of each landing beat with its operand beat, the
passed beats must come out unchanged, drained beats nowhere, all in order.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.recvissue import RecvIssue
from syncfabric.sim.golden.arith import reduce_bytes
from syncfabric.sim.golden.types import DType, ReduceOp

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W = CFG.beat_bytes


def sram_beat(buf, addr):
    """The model SRAM's content: a fixed pseudo-random beat per (buffer, address)."""
    return random.Random(buf * 4096 + addr).getrandbits(8 * W)


def reduced(a, b, dtype, op):
    out = reduce_bytes(list(a.to_bytes(W, "little")), list(b.to_bytes(W, "little")), dtype, op)
    return int.from_bytes(bytes(out), "little")


def test_landing_beats_are_reduced_with_their_operand_passed_or_drained_in_order():
    rng = random.Random(seed_for(94))
    dut = RecvIssue(CFG)
    dtypes = [DType[d.upper()] for d in CFG.dtypes]
    jobs = []
    for _ in range(60):
        kind = rng.choice(["reduce", "reduce", "pass", "drain"])
        n = rng.choice([1, 2, 4, rng.randrange(1, 12)])
        jobs.append({"kind": kind, "n": n, "buf": rng.randrange(CFG.n_buffers), "addr": rng.randrange(64),
                     "dtype": rng.choice(dtypes), "op": rng.choice(list(ReduceOp)),
                     "land": [rng.getrandbits(8 * W) for _ in range(n)]})
    want_red = [reduced(j["land"][i], sram_beat(j["buf"], j["addr"] + i), j["dtype"], j["op"])
                for j in jobs if j["kind"] == "reduce" for i in range(j["n"])]
    want_copy = [b for j in jobs if j["kind"] == "pass" for b in j["land"]]

    async def bench(ctx):
        j, taken = 0, 0
        started = [j_["kind"] != "reduce" for j_ in jobs]
        got_red, got_copy = [], []
        for cycle in range(3000):
            # the operand of the oldest reduce job not started yet, at most one job ahead
            k = next((i for i in range(j, min(j + 2, len(jobs))) if not started[i]), None)
            ctx.set(dut.operand.valid, k is not None)
            if k is not None:
                ctx.set(dut.operand.payload, {"buf": jobs[k]["buf"], "addr": jobs[k]["addr"], "beats": jobs[k]["n"]})
            cur = jobs[j] if j < len(jobs) else None
            run = cur is not None and started[j]
            ctx.set(dut.mode, {"run": run, "drain": bool(cur) and cur["kind"] == "drain",
                               "reduce": bool(cur) and cur["kind"] == "reduce",
                               "dtype": cur["dtype"] if cur else 0, "op": cur["op"] if cur else 0})
            lv = run and rng.random() < 0.8
            ctx.set(dut.land.valid, lv)
            ctx.set(dut.land.payload, cur["land"][taken] if run else 0)
            ctx.set(dut.reduced.ready, rng.random() < 0.7)
            ctx.set(dut.copied.ready, rng.random() < 0.7)
            if not run:
                assert not ctx.get(dut.land.ready), cycle
            elif cur["kind"] == "drain":
                assert ctx.get(dut.land.ready), cycle
            took = lv and ctx.get(dut.land.ready)
            op_go = k is not None and ctx.get(dut.operand.ready)
            if ctx.get(dut.reduced.valid) and ctx.get(dut.reduced.ready):
                got_red.append(ctx.get(dut.reduced.payload))
            if ctx.get(dut.copied.valid) and ctx.get(dut.copied.ready):
                got_copy.append(ctx.get(dut.copied.payload))
            rd = ctx.get(dut.rd)
            await ctx.tick()
            ctx.set(dut.rdata, sram_beat(rd.buf, rd.addr) if rd.en else rng.getrandbits(8 * W))
            if op_go:
                started[k] = True
            if took:
                taken += 1
                if taken == cur["n"]:
                    j, taken = j + 1, 0
            if j == len(jobs) and len(got_red) == len(want_red) and len(got_copy) == len(want_copy):
                break
        assert j == len(jobs)
        assert got_red == want_red
        assert got_copy == want_copy
        assert ctx.get(dut.alu_beats) == len(want_red)

    run_sim(dut, bench)
