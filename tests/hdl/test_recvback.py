"""RecvWriteBack in Amaranth's simulator: random RECV jobs (reducing, passing through or filling, forwarded
or not, empty ones too) taken under random valid, their statuses reported at random times after them, results
offered with random bubbles and forwards taken with random stalls. Slot writes, forward headers and beats and
the done reports must follow the jobs in order, and a forwarded result is written only as it is forwarded. A
forward's last beat waits for its job's status and is poisoned when the status is not OK.

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.recvback import RecvWriteBack
from syncfabric.hdl.common.layouts import packet_header_layout, unpack

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W = CFG.beat_bytes
HDR = packet_header_layout()


@pytest.mark.parametrize("fabric", [0, 1])
def test_results_are_written_forwarded_and_reported_in_job_order(fabric):
    """(``fabric``: the slot write leaves a cycle after its result; every job's writes precede its done.)"""
    rng = random.Random(seed_for(95))
    dut = RecvWriteBack(CFG.replace(fabric=fabric))
    jobs = []
    for _ in range(80):
        fill = int(rng.random() < 0.15)
        jobs.append({"fsm": rng.randrange(CFG.n_fsms), "cmd": rng.randrange(CFG.n_cmds),
                     "buf": rng.randrange(CFG.n_buffers), "sram_addr": rng.randrange(32),
                     "beats": rng.choice([0, 1, 3, rng.randrange(10)]), "reduce": int(not fill and rng.random() < 0.5),
                     "fwd": int(rng.random() < 0.5), "fwd_port": rng.randrange(CFG.n_ports), "fill": fill,
                     "fwd_hdr": {"tag": rng.getrandbits(16), "key": rng.getrandbits(12), "poison": int(fill or rng.random() < 0.2)},
                     "status": rng.choice([0, 0, 3, 5])})
    # the values each result source offers, in order
    src = {"reduced": [rng.getrandbits(8 * W) for _ in range(1000)], "copied": [rng.getrandbits(8 * W) for _ in range(1000)]}
    want_wr, want_fwd, want_msg = [], [], []
    pos = {"reduced": 0, "copied": 0}
    for j in jobs:
        name = "reduced" if j["reduce"] else "copied"
        for i in range(j["beats"]):
            value = 0 if j["fill"] else src[name][pos[name]]
            pos[name] += not j["fill"]
            if not j["fill"]:
                want_wr.append((j["buf"], j["sram_addr"] + i, value))
            if j["fwd"]:
                last = int(i == j["beats"] - 1)
                want_fwd.append((value, last, j["fwd_port"],
                                 int(last and j["status"] != 0 and not j["fwd_hdr"]["poison"])))
        if j["fwd"]:
            want_msg.append((j["fwd_hdr"]["tag"], j["fwd_hdr"]["key"], j["fwd_hdr"]["poison"], j["fwd_port"]))
    want_done = [(j["fsm"], j["cmd"], j["status"]) for j in jobs]

    async def bench(ctx):
        n_in = n_stat = 0
        at = {"reduced": 0, "copied": 0}
        got_wr, got_fwd, got_msg, got_done = [], [], [], []
        fwd_prev = None          # the beat forwarded in the cycle before (the fabric form writes it now)
        for cycle in range(5000):
            jv = n_in < len(jobs) and rng.random() < 0.6
            ctx.set(dut.job.valid, jv)
            if n_in < len(jobs):
                ctx.set(dut.job.payload, {k: v for k, v in jobs[n_in].items() if k != "status"})
            sv = n_stat < n_in and rng.random() < 0.3      # a job's status comes some time after the job
            ctx.set(dut.status.valid, sv)
            ctx.set(dut.status.payload, jobs[n_stat]["status"] if sv else 0)
            offer = {}
            for name in ("reduced", "copied"):
                offer[name] = rng.random() < 0.7
                ctx.set(getattr(dut, name).valid, offer[name])
                ctx.set(getattr(dut, name).payload, src[name][at[name]])
            ctx.set(dut.fwd_data.ready, rng.random() < 0.6)
            ctx.set(dut.fwd_msg.ready, rng.random() < 0.5)

            took_job = jv and ctx.get(dut.job.ready)
            for name in ("reduced", "copied"):
                if offer[name] and ctx.get(getattr(dut, name).ready):
                    at[name] += 1
            fwd_go = ctx.get(dut.fwd_data.valid) and ctx.get(dut.fwd_data.ready)
            fwd_now = None
            if fwd_go:
                fd = ctx.get(dut.fwd_data.payload)
                got_fwd.append((fd.data, fd.last, fd.port, fd.poison))
                fwd_now = fd.data
            wr = ctx.get(dut.wr)
            if wr.en:
                got_wr.append((wr.buf, wr.addr, wr.data))
                fwd = fwd_prev if fabric else fwd_now
                if fwd is not None:                        # a forwarded result leaves both ways at once
                    assert fwd == wr.data, cycle
            fwd_prev = fwd_now
            if ctx.get(dut.fwd_msg.valid) and ctx.get(dut.fwd_msg.ready):
                fm = ctx.get(dut.fwd_msg.payload)
                h = unpack(HDR, fm.hdr.as_value().value)
                got_msg.append((h["tag"], h["key"], h["poison"], fm.port))
            done = ctx.get(dut.done)
            if done.valid:
                got_done.append((done.fsm, done.cmd, done.status))
                assert len(got_done) <= n_stat, cycle       # never before its status
                # never before its job's last slot write (writes of this cycle land at its clock edge)
                owed = sum(j["beats"] for j in jobs[:len(got_done)] if not j["fill"])
                assert len(got_wr) - wr.en >= owed, cycle
            await ctx.tick()
            n_in += took_job
            n_stat += sv
            if len(got_done) == len(jobs) and len(got_msg) == len(want_msg):
                break
        assert n_in == len(jobs)
        assert got_wr == want_wr
        assert got_fwd == want_fwd
        assert got_msg == want_msg
        assert got_done == want_done

    run_sim(dut, bench)
