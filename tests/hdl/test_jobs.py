"""JobBuilder in Amaranth's simulator against a model of what each granted step becomes: random grants of
every step kind (forwards, reductions, no-ops, PUTs) with random counts, and the load sequencer's LOADs
taking the load unit when no FSM LOAD is granted.

``SEED=<n>`` replaces the random seed.
"""

import random

from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.jobs import JobBuilder
from syncfabric.hdl.common.layouts import COUNT_BITS
from syncfabric.sim.golden.program import StepOp

from sim_helpers import seed_for

CFG = AceConfig.small(n_ports=3)
K = CFG.n_ports


def test_each_granted_step_becomes_its_job_with_headers_counts_and_reservations():
    rng = random.Random(seed_for(120))
    dut = JobBuilder(CFG)
    mask = (1 << COUNT_BITS) - 1

    async def bench(ctx):
        seen = set()
        for _ in range(2000):
            op = rng.choice((StepOp.LOAD, StepOp.STORE, StepOp.SEND, StepOp.RECV))
            step = {"op": op, "port": rng.randrange(K), "fwd": rng.randrange(2), "fwd_port": rng.randrange(K),
                    "reduce": rng.randrange(2), "slot": rng.randrange(8), "peer": rng.randrange(16),
                    "key": rng.randrange(4096), "fwd_key": rng.randrange(4096), "nbytes": rng.randrange(1, 4096),
                    "beats": rng.randrange(0, 64), "addr": rng.randrange(1 << 32), "sram_addr": rng.randrange(64),
                    "put": rng.randrange(2), "noop": int(rng.random() < 0.15)}
            step["illegal"] = step["noop"] and rng.randrange(2)
            c = {"cmd": rng.randrange(CFG.n_cmds), "chunk": rng.randrange(1 << 16), "buf": rng.randrange(8),
                 "phase": rng.randrange(4), "seq": 0, "status": 0, "final": rng.randrange(2)}
            grant = {"valid": int(rng.random() < 0.8), "fsm": rng.randrange(CFG.n_fsms), "ch": rng.randrange(4)}
            e = {"rank": rng.randrange(16), "tag": rng.randrange(1 << 16), "dtype": rng.randrange(4),
                 "op": rng.randrange(3), "null": rng.randrange(2)}
            slot_count, msg_count = rng.randrange(1 << COUNT_BITS), rng.randrange(1 << COUNT_BITS)
            seq = {"fsm": 1, "cmd": 2, "buf": 3, "sram_addr": 4, "beats": 5, "addr": 6, "nbytes": 7, "slot": 1,
                   "zero": 0}
            seq_valid, seq_zero, load_ready = rng.randrange(2), rng.randrange(2), rng.randrange(2)
            # what the step takes, as the issue stage registers it from the arbiter (zero without a grant)
            take = {"send": 0, "recv": 0, "order": 0, "load": 0, "store": 0}
            if grant["valid"] and not step["noop"]:
                bit = 1 << step["port"]
                take.update(send=bit * (op == StepOp.SEND), recv=bit * (op == StepOp.RECV),
                            load=int(op == StepOp.LOAD), store=int(op == StepOp.STORE))
                take["order"] = take["send"] | ((1 << step["fwd_port"]) * (op == StepOp.RECV and step["fwd"]))
            sum_count = (msg_count + slot_count) & ((1 << COUNT_BITS) - 1)     # the issue stage's add
            for name, v in (("step", step), ("ctx", c), ("grant", grant), ("take", take), ("slot_count", slot_count),
                            ("msg_count", msg_count), ("sum_count", sum_count), ("seq_zero", seq_zero), *e.items()):
                ctx.set(getattr(dut, name), v)
            ctx.set(dut.seq_load.payload, seq)
            ctx.set(dut.seq_load.valid, seq_valid)
            ctx.set(dut.load_job.ready, load_ready)
            await ctx.delay(1e-9)

            real = grant["valid"] and not step["noop"]
            new_count = ((msg_count + slot_count) if step["reduce"] else msg_count) & mask
            send, recv = real and op == StepOp.SEND, real and op == StepOp.RECV
            out_hdr = {"dst": step["peer"], "src": e["rank"], "vc": grant["fsm"], "tag": e["tag"],
                       "chunk": c["chunk"], "phase": c["phase"], "length": step["nbytes"],
                       "key": step["key"] if op == StepOp.SEND else step["fwd_key"],
                       "put": int(op == StepOp.SEND and step["put"]),
                       "count": slot_count if op == StepOp.SEND else new_count, "op": e["op"], "dtype": e["dtype"],
                       "final": c["final"]}
            for k in range(K):
                sj, rj = ctx.get(dut.send_job[k].payload), ctx.get(dut.recv_job[k].payload)
                here = step["port"] == k
                assert ctx.get(dut.send_job[k].valid) == (send and here)
                assert ctx.get(dut.recv_job[k].valid) == (recv and here)
                for j in (sj, rj):
                    assert (j.fsm, j.cmd, j.buf, j.sram_addr, j.beats) == (
                        grant["fsm"], c["cmd"], c["buf"], step["sram_addr"], step["beats"])
                for name, v in out_hdr.items():
                    assert getattr(sj.hdr, name) == v and getattr(rj.fwd_hdr, name) == v, name
                exp = rj.exp
                assert (exp.tag, exp.chunk, exp.phase, exp.key, exp.length, exp.final) == (
                    e["tag"], c["chunk"], c["phase"], step["key"], step["nbytes"], c["final"])
                assert (rj.reduce, rj.dtype, rj.op, rj.fwd, rj.fwd_port, rj.ch) == (
                    step["reduce"], e["dtype"], e["op"], step["fwd"], step["fwd_port"], grant["ch"])
                res = (send and here) or (recv and step["fwd"] and step["fwd_port"] == k)
                r, o = ctx.get(dut.reserve[k]), ctx.get(dut.order[k])
                assert r.valid == res and o.valid == res
                if res:
                    ch = grant["fsm"] if CFG.rx_sources == 1 else None
                    assert (r.vc, r.beats) == (ch, step["beats"])
                    assert o.src == (0 if send and here else 1 + step["port"]) and o.empty == (step["beats"] == 0)
                    seen.add(("order", o.src != 0))
            load = real and op == StepOp.LOAD
            lj, lv = ctx.get(dut.load_job.payload), ctx.get(dut.load_job.valid)
            assert ctx.get(dut.fsm_load) == load
            assert ctx.get(dut.store_job.valid) == (real and op == StepOp.STORE)
            # the sequencer's LOAD is taken when the load unit takes a job and no FSM LOAD is granted
            assert ctx.get(dut.seq_load.ready) == (load_ready and not load)
            if load:
                assert (lv, lj.addr, lj.nbytes, lj.slot, lj.zero, lj.fsm) == (
                    1, step["addr"], step["nbytes"], step["slot"], e["null"], grant["fsm"])
            else:
                assert (lv, lj.cmd, lj.addr, lj.zero) == (seq_valid, 2, 6, seq_zero)
            rv, fold = ctx.get(dut.recv), ctx.get(dut.fold)
            assert (rv.valid, rv.fsm, rv.slot) == (recv, grant["fsm"], step["slot"])
            if recv:
                assert rv.count == new_count
            assert fold.valid == (grant["valid"] and not step["illegal"] and op == StepOp.STORE)
            assert (fold.cmd, fold.count) == (c["cmd"], slot_count)
            seen.add(op)
        assert len(seen) == 6

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
