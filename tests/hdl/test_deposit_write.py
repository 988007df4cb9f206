"""The deposit unit's write engine and counters in Amaranth's simulator: random jobs from the landing buffer,
from spill records and drains, against random stalls on every stream and random read/write/link errors; each
job checked against what it should have done.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.deposit_count import DepositCounters
from syncfabric.hdl.ace.deposit_write import DepositSource, DepositWriter
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W, MMB = CFG.beat_bytes, CFG.max_message_beats


def test_writer_moves_each_jobs_beats_once_pops_its_header_and_reports_the_right_status():
    rng = random.Random(seed_for(93))
    dut = DepositWriter(CFG)

    async def bench(ctx):
        jobs_done = 0
        job = None              # the job offered, then in progress
        cycle = 0
        while jobs_done < 150:
            cycle += 1
            if job is None:
                length = rng.choice([0, 1, W, rng.randrange(1, MMB * W + 1)])
                src = rng.choice(list(DepositSource))
                if src != DepositSource.DRAIN and length == 0:
                    length = 1                  # the unit drains empty messages
                job = {"src": src, "wr_addr": rng.randrange(1 << 20) * W, "rd_addr": rng.randrange(1 << 20) * W,
                       "length": length, "beats": -(-length // W)}
                land = [rng.randrange(1 << (8 * W)) for _ in range(job["beats"])]
                rd = [(rng.randrange(1 << (8 * W)), int(rng.random() < 0.05)) for _ in range(job["beats"])]
                ch_err, wr_err = int(rng.random() < 0.2), int(rng.random() < 0.1)
                taken = False
                st = {"wr_cmd": None, "rd_cmd": None, "land": 0, "rd": 0, "written": [], "pops": [],
                      "acked": False}
            # inputs: the job, sources with random valid, sinks with random ready
            ctx.set(dut.job.valid, not taken)
            ctx.set(dut.job.payload, job)
            ctx.set(dut.ch_err, ch_err)
            land_v = st["land"] < len(land) and rng.random() < 0.7
            ctx.set(dut.land.valid, land_v)
            ctx.set(dut.land.payload, land[st["land"]] if land_v else 0)
            rd_v = st["rd_cmd"] is not None and st["rd"] < len(rd) and rng.random() < 0.7
            ctx.set(dut.rd_data.valid, rd_v)
            if rd_v:
                ctx.set(dut.rd_data.payload, {"data": rd[st["rd"]][0], "err": rd[st["rd"]][1],
                                              "last": int(st["rd"] == len(rd) - 1)})
            for port in (dut.wr_cmd, dut.rd_cmd, dut.wr_data):
                ctx.set(port.ready, rng.random() < 0.7)
            all_written = len(st["written"]) == job["beats"] and job["src"] != DepositSource.DRAIN
            ctx.set(dut.wr_done.valid, all_written and not st["acked"] and rng.random() < 0.5)
            ctx.set(dut.wr_done.payload.err, wr_err)

            # outputs in this cycle
            if not taken:
                assert ctx.get(dut.job.ready)
                taken = True
                assert not ctx.get(dut.done.valid)
                await ctx.tick()
                continue
            assert not ctx.get(dut.job.ready)                   # one job at a time
            hold = ctx.get(dut.hold)            # the landing channel is borrowed from the start to the pop
            assert hold == (job["src"] != DepositSource.SPILL and not st["pops"]), cycle
            if ctx.get(dut.wr_cmd.valid) and ctx.get(dut.wr_cmd.ready):
                assert st["wr_cmd"] is None and job["src"] != DepositSource.DRAIN
                st["wr_cmd"] = (ctx.get(dut.wr_cmd.payload.addr), ctx.get(dut.wr_cmd.payload.length))
            if ctx.get(dut.rd_cmd.valid) and ctx.get(dut.rd_cmd.ready):
                assert st["rd_cmd"] is None and st["wr_cmd"] is not None and job["src"] == DepositSource.SPILL
                st["rd_cmd"] = (ctx.get(dut.rd_cmd.payload.addr), ctx.get(dut.rd_cmd.payload.length))
            if ctx.get(dut.land.ready):
                assert hold and job["src"] != DepositSource.SPILL
            if ctx.get(dut.land.ready) and land_v:
                st["land"] += 1
            if ctx.get(dut.rd_data.ready) and rd_v:
                st["rd"] += 1
            if ctx.get(dut.wr_data.valid) and ctx.get(dut.wr_data.ready):
                assert st["wr_cmd"] is not None                 # data only after its command
                st["written"].append((ctx.get(dut.wr_data.payload.data), ctx.get(dut.wr_data.payload.last)))
            if ctx.get(dut.hdr_pop):
                assert hold
                st["pops"].append(ctx.get(dut.err_clear))
            if ctx.get(dut.wr_done.valid) and ctx.get(dut.wr_done.ready):
                st["acked"] = True
            done, status = ctx.get(dut.done.valid), ctx.get(dut.done.status)
            await ctx.tick()
            if not done:
                continue
            # the whole job, checked when it reports done
            beats, src = job["beats"], job["src"]
            lasts = [int(i == beats - 1) for i in range(beats)]
            if src == DepositSource.DRAIN:
                assert st["wr_cmd"] is None and st["written"] == [] and st["land"] == beats
                assert st["pops"] == [ch_err]
                assert status == (Status.LINK_CRC if ch_err else Status.OK)
            elif src == DepositSource.LANDING:
                assert st["wr_cmd"] == (job["wr_addr"], job["length"]) and st["acked"]
                assert st["written"] == list(zip(land, lasts)) and st["pops"] == [ch_err]
                assert status == (Status.AXI_ERROR if wr_err else Status.LINK_CRC if ch_err else Status.OK)
            else:
                assert st["wr_cmd"] == (job["wr_addr"], job["length"]) and st["acked"]
                assert st["rd_cmd"] == (job["rd_addr"], job["length"]) and st["pops"] == []
                assert st["written"] == list(zip([d for d, _ in rd], lasts)) and st["land"] == 0
                rd_err = any(e for _, e in rd)
                assert status == (Status.AXI_ERROR if wr_err or rd_err else Status.OK)
            jobs_done += 1
            job = None

    run_sim(dut, bench)


def test_counters_register_each_arrival_and_count_deposits_spills_and_their_bytes():
    """``arrived`` one cycle after ``arrive``; the counters one cycle after that (they add registered events)."""
    rng = random.Random(seed_for(94))
    dut = DepositCounters(CFG)

    async def bench(ctx):
        deposits = deposit_bytes = spills = spill_bytes = 0
        prev = prev_spill = None
        for cycle in range(1000):
            arrive = {"valid": int(rng.random() < 0.3), "cmd": rng.randrange(CFG.n_cmds),
                      "status": rng.choice([0, 16, 17]), "bytes": rng.randrange(1 << 20)}
            spill = {"valid": int(rng.random() < 0.3), "bytes": rng.randrange(1 << 20)}
            ctx.set(dut.arrive, arrive)
            ctx.set(dut.spill, spill)
            if prev is not None:
                assert ctx.get(dut.arrived.valid) == prev["valid"]
                assert ctx.get(dut.arrived.cmd) == prev["cmd"] and ctx.get(dut.arrived.status) == prev["status"]
            assert (ctx.get(dut.deposits), ctx.get(dut.deposit_bytes)) == (deposits, deposit_bytes), cycle
            assert (ctx.get(dut.spills), ctx.get(dut.spill_bytes)) == (spills, spill_bytes), cycle
            await ctx.tick()
            if prev is not None:
                deposits += prev["valid"]
                deposit_bytes += prev["bytes"] * prev["valid"]
                spills += prev_spill["valid"]
                spill_bytes += prev_spill["bytes"] * prev_spill["valid"]
            prev, prev_spill = arrive, spill

    run_sim(dut, bench)
