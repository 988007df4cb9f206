"""The asynchronous all-to-all (Sven): every slice is a PUT that the destination's deposit unit writes to its
output, staged in the landing buffer and spilled to a memory window while the destination has not posted.

Golden level: the ``async`` programs give the direct all-to-all's bytes on every one-hop topology and the
program checks catch a bad deposit. Engine RTL: a rank that posts only after every other rank's slices have
all left (nothing waits for it), with early slices spilled; random posting times with a one-record spill window
(senders wait when staging is full, nothing is lost) beside an all-reduce sharing the port; Icarus and the
Amaranth simulator.
"""

import dataclasses
import numpy as np
import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.job import CollectiveJob
from syncfabric.host.run import engine_config_for, job_spec
from syncfabric.sim.golden.algorithms import generate, supported_algorithms
from syncfabric.sim.golden.executor import execute, landing_deadlock
from syncfabric.sim.golden.program import Program, ProgramError, Step, StepOp, check_programs
from syncfabric.sim.golden.topology import parse
from syncfabric.sim.golden.types import DType, ReduceOp, dtype_bytes
from syncfabric.host.transports.ace import run_system

from sim_helpers import seed_for
from test_engine_topologies import check, job

BASE = AceConfig.small(landing_headers=8, landing_beats=64, imem_words=1024)


def sven(topology, count, dtype="fp32", seed=1, **kw):
    """An asynchronous all-to-all job of ``count`` elements per rank and segment, on communicator 1 (the
    direct all-to-all's program may sit on communicator 0)."""
    p = parse(topology).n_endpoints
    nbytes = count * p * dtype_bytes(DType.parse(dtype))
    return {"spec": job_spec("alltoall", topology, nbytes, dtype, "sum", algorithm="async", seed=seed),
            "comm": 1, **kw}


@pytest.mark.parametrize("topology", ["switch:4", "switch:8", "ring:2", "bidir-ring:3", "switch:5"])
def test_async_programs_match_the_direct_all_to_all(topology):
    progs = generate("alltoall", "async", topology)
    P = len(progs)
    assert all(p.arrivals == P - 1 for p in progs)
    assert not any(s.op == StepOp.RECV for p in progs for _, _, s in p.steps())
    count = 301
    rng = np.random.default_rng(P)
    ins = [rng.standard_normal(P * count).astype(np.float32) for _ in range(P)]
    kw = dict(chunk_bytes=1024, packet_bytes=64, beat_bytes=16)
    got = execute(progs, topology, ins, DType.FP32, ReduceOp.SUM, count, max_chunks_in_flight=3, seed=7, **kw)
    ref = execute(generate("alltoall", "direct", topology), topology, ins, DType.FP32, ReduceOp.SUM, count, **kw)
    for a, b in zip(got.outputs, ref.outputs):
        assert a.tobytes() == b.tobytes()
    assert got.mem_write_bytes == ref.mem_write_bytes and got.mem_read_bytes == ref.mem_read_bytes
    # deposits never wait for a landing buffer: one header per channel is enough
    assert landing_deadlock(progs, topology, 1, 1, 1) is None


def test_async_needs_one_hop_routes():
    assert supported_algorithms("alltoall", "bidir-ring:4") == ("direct",)
    assert "async" in supported_algorithms("alltoall", "switch:8")
    with pytest.raises(ValueError, match="does not support alltoall"):
        generate("alltoall", "async", "torus:2x2x2")


def test_program_checks_catch_bad_deposits():
    progs = list(generate("alltoall", "async", "switch:4"))
    with pytest.raises(ProgramError, match="arrivals=2 but 3 deposit"):
        check_programs([dataclasses.replace(progs[0], arrivals=2)] + progs[1:], "switch:4")
    # rank 1 deposits into block 0 of rank 2 as well as rank 0 does: a second deposit, and one block missing
    ph = progs[1].phases[0]
    steps = [dataclasses.replace(s, key=0) if s.op == StepOp.PUT and s.peer == 2 else s for s in ph.steps]
    bad = dataclasses.replace(progs[1], phases=(dataclasses.replace(ph, steps=tuple(steps)),))
    with pytest.raises(ProgramError, match="second deposit into block 0 of rank 2"):
        check_programs([progs[0], bad] + progs[2:], "switch:4")
    # a deposit into a block the destination STOREs itself
    steps = [dataclasses.replace(s, key=2) if s.op == StepOp.PUT and s.peer == 2 else s for s in ph.steps]
    bad = dataclasses.replace(progs[1], phases=(dataclasses.replace(ph, steps=tuple(steps)),))
    with pytest.raises(ProgramError, match="rank 2 also STOREs block 2"):
        check_programs([progs[0], bad] + progs[2:], "switch:4")
    assert Step.decode(Step(StepOp.PUT, 1, 2, 0, 3, 1).encode()).op == StepOp.PUT
    with pytest.raises(ProgramError, match="arrivals"):
        Program(0, 2, "alltoall", "async", 2, 2, (), arrivals=-1)


def _chunks(spec, cfg):
    job = CollectiveJob(spec, cfg)
    return job.golden.n_chunks


@pytest.mark.cocotb
def test_a_late_rank_waits_for_nobody_and_its_early_slices_spill():
    """Rank 2 posts only once ranks 0, 1 and 3 have read their whole input and finished every chunk: all their
    slices left without rank 2. Its landing channels fill (3 messages of 16 beats in a 64-beat channel) and
    the rest of the early slices spill to its window; everything lands byte for byte."""
    seed = seed_for(20261124)
    topo = "switch:4"
    cfg = engine_config_for(BASE, topo)
    jobs = [sven(topo, 896, seed=seed, tag=1)]
    assert _chunks(jobs[0]["spec"], cfg) == 14
    res = run_system(cfg, topo, jobs, sim="verilator", latency=6, seed=seed, pause=0.1, late={"rank": 2})
    check(res, len(jobs))
    late = res["late"]
    assert late["others_sent_all"], late
    assert 0 < late["spills"] <= 8 and late["deposits"] == 0, late
    c = res["counters"]
    assert c[2]["SPILLS"] == late["spills"] and c[2]["SPILL_BYTES"] == 256 * late["spills"]
    assert all(ci["DEPOSITS"] == 3 * 14 for ci in c)


@pytest.mark.cocotb
def test_random_posting_times_with_a_one_record_spill_window_beside_an_all_reduce():
    """Staging as small as it gets (one spill record): senders wait for late receivers instead of losing
    anything; an all-reduce on communicator 0 shares the port (its RECVs and the deposit unit take turns)."""
    seed = seed_for(20261125)
    topo = "switch:4"
    cfg = engine_config_for(BASE, topo)
    jobs = [sven(topo, 700, "bf16", seed=seed, tag=1), job("allreduce", topo, 500, "fp32", "sum", seed=seed + 1, tag=2),
            sven(topo, 37, "int32", seed=seed + 2, tag=3)]
    res = run_system(cfg, topo, jobs, sim="verilator", latency=4, seed=seed, pause=0.1, link_stall=0.05,
                     post_skew=3000, spill_entries=1)
    check(res, len(jobs))
    assert res["switch_overflow"] == 0


@pytest.mark.cocotb
def test_async_all_to_all_on_icarus():
    topo = "switch:4"
    res = run_system(engine_config_for(BASE, topo), topo, [sven(topo, 21, seed=6, tag=1)], sim="icarus", seed=4,
                     post_skew=500)
    check(res, 1)


@pytest.mark.cocotb
@pytest.mark.slow
def test_async_all_to_all_on_8_ports():
    topo = "switch:8"
    res = run_system(engine_config_for(BASE, topo), topo, [sven(topo, 45, "fp16", seed=5, tag=1)], sim="verilator",
                     seed=3, post_skew=2000)
    check(res, 1)


@pytest.mark.parametrize("fabric", [0, 1], ids=["asic", "fabric"])
def test_async_all_to_all_in_the_amaranth_simulator(fabric):
    from syncfabric.host.transports.ace.amaranth_sim import run_system_amaranth
    topo = "ring:2"
    cfg = engine_config_for(AceConfig.small(fabric=fabric), topo)   # (fabric: the deposit registers the geometry)
    spec = sven(topo, 19, seed=2)["spec"]
    j = CollectiveJob(spec, cfg, tag=5, comm=1)
    results = run_system_amaranth(cfg, topo, lambda r: [j], latency=3, timeout_cycles=20_000)
    for r in results:
        assert r.completions[0]["status_name"] == "OK" and r.mismatches == [0]
        assert r.counters["DEPOSITS"] == j.golden.n_chunks
        assert r.counters["PAYLOAD_WR_BYTES"] == j.golden.mem_write_bytes[r.rank]
