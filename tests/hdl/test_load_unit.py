"""The load unit in Amaranth's simulator: random LOAD jobs (zero-filling ones among them) against a DMA that
answers their read commands with random gaps and error flags, and an SRAM bank that is taken by a RECV in
random cycles (``wr_free`` low). Checked: one read command per reading job, in order; every beat written once,
in order, to the job's buffer and slot, and only in a cycle its bank is free; each job's ``done`` after its
last beat's write with the job's identity and status (``AXI_ERROR`` when the last beat says so); the byte
count.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.units import LoadUnit
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W = CFG.beat_bytes


def test_load_unit_writes_every_beat_once_in_order_on_free_cycles_and_reports_each_job_after_its_last_write():
    rng = random.Random(seed_for(4101))
    dut = LoadUnit(CFG)
    jobs = []
    for i in range(60):
        beats = rng.choice([1, 2, rng.randrange(1, 20)])
        zero = int(rng.random() < 0.2)
        jobs.append({"fsm": rng.randrange(CFG.n_fsms), "cmd": rng.randrange(CFG.n_cmds),
                     "buf": rng.randrange(CFG.n_buffers), "sram_addr": rng.randrange(CFG.buffer_beats - beats + 1),
                     "beats": beats, "addr": rng.randrange(1 << 20) * W, "nbytes": beats * W - rng.randrange(W),
                     "slot": rng.randrange(8), "zero": zero,
                     "data": [rng.randrange(1 << (8 * W)) for _ in range(beats)],
                     "err": int(not zero and rng.random() < 0.2)})
    reading = [j for j in jobs if not j["zero"]]
    want_writes = [(j["buf"], j["sram_addr"] + k, 0 if j["zero"] else j["data"][k])
                   for j in jobs for k in range(j["beats"])]
    want_done = [(j["fsm"], j["cmd"], j["slot"], j["buf"], Status.AXI_ERROR if j["err"] else 0) for j in jobs]

    async def bench(ctx):
        writes, dones, cmds = [], [], []
        beats = [(j["data"][k], int(k == j["beats"] - 1), j["err"] * int(k == j["beats"] - 1))
                 for j in reading for k in range(j["beats"])]
        sent = 0
        nxt = 0
        ctx.set(dut.rd_cmd.ready, 1)
        for cycle in range(20000):
            if len(dones) == len(jobs):
                break
            # jobs offered in order, with gaps
            offer = nxt < len(jobs) and rng.random() < 0.7
            if offer:
                j = jobs[nxt]
                ctx.set(dut.job.payload, {k: j[k] for k in ("fsm", "cmd", "buf", "sram_addr", "beats", "addr",
                                                            "nbytes", "slot", "zero")})
            ctx.set(dut.job.valid, offer)
            # the DMA's read data: the beats of the reading jobs in order, only after their command went out
            give = sent < len(beats) and len(cmds) > 0 and rng.random() < 0.75
            if give:
                d, last, err = beats[sent]
                ctx.set(dut.rd_data.payload, {"data": d, "last": last, "err": err})
            ctx.set(dut.rd_data.valid, give)
            free = rng.random() < 0.7
            ctx.set(dut.wr_free, free)
            wr = ctx.get(dut.wr)
            if wr.en:
                assert free, f"cycle {cycle}: a write while the bank is taken"
                writes.append((wr.buf, wr.addr, wr.data))
            done = ctx.get(dut.done)
            if done.valid:
                dones.append((done.fsm, done.cmd, done.slot, done.buf, done.status))
                # done comes after the job's last write
                assert len(writes) >= sum(j["beats"] for j in jobs[:len(dones)]), f"cycle {cycle}"
            if ctx.get(dut.rd_cmd.valid):
                cmds.append(ctx.get(dut.rd_cmd.payload))
            if offer and ctx.get(dut.job.ready):
                nxt += 1
            if give and ctx.get(dut.rd_data.ready):
                sent += 1
            await ctx.tick()
        assert dones == want_done
        assert writes == want_writes
        assert [(c.addr, c.length) for c in cmds] == [(j["addr"], j["nbytes"]) for j in reading]
        assert ctx.get(dut.bytes) == sum(j["nbytes"] for j in reading)

    run_sim(dut, bench)
