"""The deposit unit's write engine and counters in Amaranth's simulator: random jobs from the landing buffer,
from spill records and drains, against random stalls on every stream, random read/write/link errors and
acknowledgements that come late; each job checked against what it should have done.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.deposit_count import DepositCounters
from syncfabric.hdl.ace.deposit_write import MAX_PENDING, DepositSource, DepositWriter
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W, MMB = CFG.beat_bytes, CFG.max_message_beats


def _random_job(rng):
    length = rng.choice([0, 1, W, rng.randrange(1, MMB * W + 1)])
    src = rng.choice(list(DepositSource))
    if src != DepositSource.DRAIN and length == 0:
        length = 1                      # the unit drains empty messages
    beats = -(-length // W)
    job = {"src": src, "port": rng.randrange(max(2, CFG.n_ports)), "ch": rng.randrange(CFG.n_channels),
           "wr_addr": rng.randrange(1 << 20) * W, "rd_addr": rng.randrange(1 << 20) * W, "length": length,
           "beats": beats}
    return {"job": job, "land": [rng.randrange(1 << (8 * W)) for _ in range(beats)],
            "rd": [(rng.randrange(1 << (8 * W)), int(rng.random() < 0.05)) for _ in range(beats)],
            "ch_err": int(rng.random() < 0.2), "wr_err": int(rng.random() < 0.1),
            "wr_cmd": None, "rd_cmd": None, "n_land": 0, "n_rd": 0, "written": [], "pops": [], "acked": False}


def _check_done(j, status):
    """A job reported done: everything it should have done, and its status."""
    job = j["job"]
    beats, src = job["beats"], job["src"]
    lasts = [int(i == beats - 1) for i in range(beats)]
    if src == DepositSource.DRAIN:
        assert j["wr_cmd"] is None and j["written"] == [] and j["n_land"] == beats
        assert j["pops"] == [j["ch_err"]]
        assert status == (Status.LINK_CRC if j["ch_err"] else Status.OK)
    elif src == DepositSource.LANDING:
        assert j["wr_cmd"] == (job["wr_addr"], job["length"]) and j["acked"]
        assert j["written"] == list(zip(j["land"], lasts)) and j["pops"] == [j["ch_err"]]
        assert status == (Status.AXI_ERROR if j["wr_err"] else Status.LINK_CRC if j["ch_err"] else Status.OK)
    else:
        assert j["wr_cmd"] == (job["wr_addr"], job["length"]) and j["acked"]
        assert j["rd_cmd"] == (job["rd_addr"], job["length"]) and j["pops"] == []
        assert j["written"] == list(zip([d for d, _ in j["rd"]], lasts)) and j["n_land"] == 0
        rd_err = any(e for _, e in j["rd"])
        assert status == (Status.AXI_ERROR if j["wr_err"] or rd_err else Status.OK)


def test_writer_moves_each_jobs_beats_once_pops_its_header_and_reports_the_right_status():
    """Jobs one after another, each write's acknowledgement coming back at random later (up to ``MAX_PENDING``
    writes awaiting theirs while the next job moves its beats), the next job taken into the writer's slot while
    one moves its beats and started in the cycle after that one's end: each job moves its beats once, in order,
    pops its header, and is reported done once, in the order of the jobs, with its status."""
    rng = random.Random(seed_for(93))
    dut = DepositWriter(CFG)

    async def bench(ctx):
        reported = 0
        offer = _random_job(rng)        # offered until taken
        active = None                   # taken, moving its beats
        nxt = None                      # taken while another one moved its beats, not started yet
        chained = 0                     # jobs started in the cycle after the one before ended
        order = []                      # every job taken and not reported done, in order
        awaiting = []                   # jobs whose write awaits its acknowledgement, in order
        most_pending = 0
        cycle = 0
        while reported < 300:
            cycle += 1
            ack_rate = 0.05 if cycle // 400 % 2 else 0.6       # slow spells fill the pending writes
            # inputs: the job, sources with random valid, sinks with random ready
            offering = rng.random() < (0.8 if cycle // 200 % 2 else 0.98)
            ctx.set(dut.job.valid, offering)
            ctx.set(dut.job.payload, offer["job"])
            a = active or offer
            ctx.set(dut.ch_err, a["ch_err"])
            land_v = active is not None and active["n_land"] < len(active["land"]) and rng.random() < 0.7
            ctx.set(dut.land.valid, land_v)
            ctx.set(dut.land.payload, active["land"][active["n_land"]] if land_v else 0)
            rd_v = (active is not None and active["rd_cmd"] is not None and active["n_rd"] < len(active["rd"])
                    and rng.random() < 0.7)
            ctx.set(dut.rd_data.valid, rd_v)
            if rd_v:
                r = active["rd"][active["n_rd"]]
                ctx.set(dut.rd_data.payload, {"data": r[0], "err": r[1], "last": int(active["n_rd"] == len(active["rd"]) - 1)})
            for port in (dut.wr_cmd, dut.rd_cmd, dut.wr_data):
                ctx.set(port.ready, rng.random() < 0.7)
            ack_v = bool(awaiting) and rng.random() < ack_rate
            ctx.set(dut.wr_done.valid, ack_v)
            ctx.set(dut.wr_done.payload.err, awaiting[0]["wr_err"] if awaiting else 0)

            # outputs in this cycle
            assert ctx.get(dut.pending) == bool(awaiting), cycle
            ready = ctx.get(dut.job.ready)
            # a job is taken when the next-job slot is empty and there is room for its write besides the writes
            # awaiting their acknowledgement and the one moving (a drain writes nothing)
            moving = active is not None and active["job"]["src"] != DepositSource.DRAIN
            assert ready == (nxt is None and len(awaiting) + moving < MAX_PENDING), cycle
            assert ctx.get(dut.next_valid) == (nxt is not None), cycle
            if nxt is not None:
                assert (ctx.get(dut.next_port), ctx.get(dut.next_ch)) == (nxt["job"]["port"], nxt["job"]["ch"])
            hold = ctx.get(dut.hold)            # the landing channel is borrowed from the start to the pop
            if active is not None:
                assert hold == (active["job"]["src"] != DepositSource.SPILL), cycle
                if hold:
                    assert (ctx.get(dut.port), ctx.get(dut.ch)) == (active["job"]["port"], active["job"]["ch"])
            else:
                assert not hold
            if ctx.get(dut.wr_cmd.valid) and ctx.get(dut.wr_cmd.ready):
                assert active["wr_cmd"] is None and active["job"]["src"] != DepositSource.DRAIN
                active["wr_cmd"] = (ctx.get(dut.wr_cmd.payload.addr), ctx.get(dut.wr_cmd.payload.length))
            if ctx.get(dut.rd_cmd.valid) and ctx.get(dut.rd_cmd.ready):
                assert active["rd_cmd"] is None and active["wr_cmd"] is not None
                assert active["job"]["src"] == DepositSource.SPILL
                active["rd_cmd"] = (ctx.get(dut.rd_cmd.payload.addr), ctx.get(dut.rd_cmd.payload.length))
            if ctx.get(dut.land.ready):
                assert hold and active["job"]["src"] != DepositSource.SPILL
            if ctx.get(dut.land.ready) and land_v:
                active["n_land"] += 1
            if ctx.get(dut.rd_data.ready) and rd_v:
                active["n_rd"] += 1
            if ctx.get(dut.wr_data.valid) and ctx.get(dut.wr_data.ready):
                assert active["wr_cmd"] is not None                 # data only after its command
                active["written"].append((ctx.get(dut.wr_data.payload.data), ctx.get(dut.wr_data.payload.last)))
            if ctx.get(dut.hdr_pop):
                assert hold
                active["pops"].append(ctx.get(dut.err_clear))
            acked = ack_v and ctx.get(dut.wr_done.ready)
            done, status = ctx.get(dut.done.valid), ctx.get(dut.done.status)
            taken = offering and ready
            await ctx.tick()

            if acked:
                awaiting.pop(0)["acked"] = True
            if done:
                # once per job, in the order of the jobs: a write's at its acknowledgement, a drain's at its end
                assert order, cycle
                j = order.pop(0)
                if j["job"]["src"] == DepositSource.DRAIN:
                    assert j is active and not acked and not awaiting
                    active = None
                else:
                    assert acked and j["acked"]
                _check_done(j, status)
                reported += 1
            ended = active is None              # (a drain reported done above)
            if active is not None and active["job"]["src"] != DepositSource.DRAIN:
                if len(active["written"]) == active["job"]["beats"]:
                    awaiting.append(active)     # its beats are out: the writer takes the next job
                    active, ended = None, True
            most_pending = max(most_pending, len(awaiting))
            if active is None and nxt is not None:      # the next job starts right after the one before
                active, nxt = nxt, None
                chained += ended
            if taken:
                order.append(offer)
                if active is None:
                    active = offer
                else:
                    nxt = offer
                offer = _random_job(rng)
        assert most_pending == MAX_PENDING      # the slow spells filled every pending write
        assert chained > 50                     # and jobs followed each other without a cycle in between

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
