# amaranth: UnusedElaboratable=no
"""The ACE engine end to end: N engines on rings of link models, each with its NPU memory, driven by the host
driver; every output byte against the golden executor, every rejected descriptor with its code and nothing
written.

The cocotb tests run the generated Verilog on Verilator and Icarus (``syncfabric.host.transports.ace.cocotb_system``);
the configuration is ``AceConfig.small()`` (16-byte beats, 1 KiB chunks, 4 FSMs, 8 chunk buffers), which keeps
builds under a minute and lets sizes cross many chunk, packet and beat boundaries. One test runs the same
flow in Amaranth's simulator with no external simulator at all. Randomised tests print their seed;
``SEED=<n>`` replaces the fixed default seeds (a sweep over many seeds: ``tests/hdl/test_engine_stress.py``).
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.job import REJECTIONS
from syncfabric.host.run import job_spec
from syncfabric.sim.golden.topology import parse as parse_topology
from syncfabric.sim.golden.types import DType, ReduceOp, dtype_bytes
from syncfabric.host.transports.ace import run_system

from sim_helpers import seed_for

CFG = AceConfig.small()
SIMS = ["verilator", "icarus"]


def spec(collective, topology, count, dtype="fp32", op="sum", seed=1):
    """A job spec of ``count`` elements per rank (NCCL convention)."""
    p = parse_topology(topology).n_endpoints
    per = p if collective in ("reduce_scatter", "allgather") else 1
    return job_spec(collective, topology, count * per * dtype_bytes(DType.parse(dtype)), dtype, op, seed=seed)


def job(collective, topology, count, dtype="fp32", op="sum", seed=1, **kw):
    return {"spec": spec(collective, topology, count, dtype, op, seed), **kw}


def random_counts(rng, n):
    """Counts from one element to several chunks, most of them not multiples of a beat or a packet."""
    fixed = [1, 3, 257, 1000]
    return [fixed[i] if i < len(fixed) else rng.randint(1, 1500) for i in range(n)]


def check(result, n_jobs):
    """The testbench asserts everything itself; check that it ran every command and reported cycles."""
    assert len(result["jobs"]) == n_jobs
    for j in result["jobs"]:
        assert all(s == j["expect"] for s in j["status"] if s is not None)
        assert j.get("cycles", 0) > 0


# -- every dtype and op, all three collectives, random sizes and backpressure ------------------------------

@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["ring:4", "bidir-ring:4"])
def test_every_dtype_op_and_collective_with_random_sizes_and_backpressure(topology):
    seed = seed_for(20261101)
    rng = random.Random(seed)
    jobs, k = [], 0
    counts = random_counts(rng, 20)
    for dt in DType:
        for op in ReduceOp:
            jobs.append(job("allreduce", topology, counts[k % len(counts)], dt.name.lower(), op.name.lower(),
                            seed=seed + k, tag=k))
            k += 1
    for coll in ("reduce_scatter", "allgather"):
        for dt in (DType.FP32, DType.BF16):
            jobs.append(job(coll, topology, counts[k % len(counts)], dt.name.lower(), "sum", seed=seed + k, tag=k))
            k += 1
    res = run_system(CFG, topology, jobs, sim="verilator", latency=7, seed=seed, pause=0.2, link_stall=0.1)
    check(res, len(jobs))


@pytest.mark.cocotb
def test_allreduce_reduce_scatter_allgather_bit_and_cycle_exact_on_both_simulators():
    """The same commands on Verilator and Icarus: both match the golden model byte for byte, and the engines
    take exactly the same number of cycles (the RTL is deterministic; the simulators must agree)."""
    topo = "bidir-ring:3"
    jobs = [job("allreduce", topo, 77, "fp32", "sum", seed=1), job("reduce_scatter", topo, 50, "bf16", "max", seed=2),
            job("allgather", topo, 33, "int32", "min", seed=3), job("allreduce", topo, 2, "fp16", "sum", seed=4)]
    cycles = {}
    for sim in SIMS:
        res = run_system(CFG, topo, jobs, sim=sim, latency=3, seed=5)
        check(res, len(jobs))
        cycles[sim] = [j["cycles"] for j in res["jobs"]]
    assert cycles["verilator"] == cycles["icarus"]


@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["ring:2"] + [
    pytest.param(t, marks=pytest.mark.slow) for t in ("ring:16", "bidir-ring:16")])
def test_two_to_sixteen_endpoints(topology):
    """The default run takes ring:2; the 16-rank rings (a build each; torus:4x2x2 is the default run's
    16-endpoint system, bidir-ring:4 runs every collective) are in ``make test-slow``."""
    seed = seed_for(20261102)
    jobs = [job("allreduce", topology, 600, "fp32", "sum", seed=seed),
            job("reduce_scatter", topology, 40, "fp16", "sum", seed=seed + 1, tag=1),
            job("allgather", topology, 40, "bf16", "sum", seed=seed + 2, tag=2)]
    res = run_system(CFG, topology, jobs, sim="verilator", latency=5, seed=seed, pause=0.1, link_stall=0.05)
    check(res, len(jobs))


@pytest.mark.cocotb
def test_in_place_and_unaligned_buffers():
    topo = "ring:3"
    jobs = [job("allreduce", topo, 500, "fp32", "sum", seed=1, in_place=True),
            job("reduce_scatter", topo, 100, "int32", "sum", seed=2, in_place=True, tag=1),
            job("allgather", topo, 90, "fp16", "sum", seed=3, in_place=True, tag=2),
            job("allreduce", topo, 301, "bf16", "max", seed=4, misalign=6, tag=3),
            job("allgather", topo, 17, "fp32", "min", seed=5, misalign=12, tag=4)]
    res = run_system(CFG, topo, jobs, sim="verilator", latency=2, seed=6)
    check(res, len(jobs))


@pytest.mark.cocotb
def test_concurrent_collectives_on_two_communicators():
    """Two communicators on the same ranks with different programs loaded, their commands interleaved: each
    chunk's messages carry its own tag and land in the right FSM's buffers."""
    topo = "ring:4"
    jobs = []
    for k in range(6):
        comm = k % 2
        coll = "allreduce" if comm == 0 else ("reduce_scatter" if k % 4 == 1 else "allgather")
        jobs.append(job(coll, topo, 130 + 97 * k, ["fp32", "bf16", "int32"][k % 3], "sum", seed=10 + k,
                        comm=comm, tag=100 + k))
    res = run_system(CFG, topo, jobs, sim="verilator", latency=4, seed=3, pause=0.15, link_stall=0.1)
    check(res, len(jobs))
    ctr = res["counters"][0]
    assert ctr["CMDS_OK"] == len(jobs) and ctr["CMDS_ERR"] == 0


# -- bad descriptors -----------------------------------------------------------------------------------------

@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMS)
def test_every_rejection_code_leaves_memory_untouched_and_later_commands_run(sim):
    topo = "ring:2"
    jobs = [job("allreduce", topo, 40, "fp32", "sum", seed=1)]
    jobs += [{"reject": kind, "template": 0, "ranks": [1]} for kind in REJECTIONS]
    jobs += [job("allgather", topo, 24, "int32", "sum", seed=2, tag=1)]
    res = run_system(CFG, topo, jobs, sim=sim, latency=2, seed=1)
    check(res, len(jobs))
    ctr = res["counters"]
    assert ctr[1]["CMDS_ERR"] == len(REJECTIONS) and ctr[1]["CMDS_OK"] == 2
    assert ctr[0]["CMDS_ERR"] == 0


@pytest.mark.cocotb
def test_sram_too_small_is_rejected_and_the_engine_recovers():
    topo = "ring:2"
    res = run_system(CFG, topo, [job("allreduce", topo, 300, "fp32", "sum", seed=4)], sim="verilator",
                     testcase="register_errors", latency=2)
    assert res["run"]["tests"] == 1


@pytest.mark.cocotb
def test_burst_of_100_mixed_good_and_bad_commands():
    seed = seed_for(20261103)
    rng = random.Random(seed)
    topo = "ring:3"
    good = []
    for k in range(40):
        coll = rng.choice(["allreduce", "allreduce", "reduce_scatter", "allgather"])
        dt = rng.choice([d.name.lower() for d in DType])
        op = rng.choice([o.name.lower() for o in ReduceOp])
        good.append(job(coll, topo, rng.randint(1, 120), dt, op, seed=seed + k, tag=k))
    jobs = list(good)
    kinds = list(REJECTIONS)
    for k in range(60):     # each rejection posted by one random rank at a random place among the good ones
        jobs.insert(rng.randrange(len(jobs) + 1),
                    {"reject": kinds[k % len(kinds)], "template": 0, "ranks": [rng.randrange(3)]})
    # templates refer to indices in the final list: point every rejection at the first good job
    first_good = next(i for i, j in enumerate(jobs) if "spec" in j)
    for j in jobs:
        if "reject" in j:
            j["template"] = first_good
    res = run_system(CFG, topo, jobs, sim="verilator", latency=3, seed=seed, pause=0.1, link_stall=0.05)
    check(res, len(jobs))
    assert sum(c["CMDS_ERR"] for c in res["counters"]) == 60
    assert all(c["CMDS_OK"] == 40 for c in res["counters"])


def test_a_system_of_some_ranks_exposes_the_links_that_leave_it():
    """One board's share of a ring: on-chip links between its own ranks, the engine ports of links to other
    ranks as top-level ports (named by rank and port), and bad rank sets refused."""
    from amaranth.hdl import Fragment
    from amaranth.lib import wiring

    from syncfabric.hdl.system.board import BoardSystem
    from syncfabric.hdl.system.top import AceSystem
    from syncfabric.host.run import engine_config_for

    cfg = engine_config_for(AceConfig.profile("small"), "ring:4")
    s = AceSystem(cfg, "ring:4", ranks=(1, 2), inline=True)     # inspected, not elaborated (first line)
    assert [ln[:4] for ln in s.links] == [(1, 0, 2, 1)]
    assert s.external == [(1, 1, "rx", 0), (2, 0, "tx", 3)]
    assert [x.name for x in s.external] == ["ep1_rx1", "ep2_tx0"]
    members = dict(s.signature.members)
    assert members["ep2_tx0"].flow == wiring.Out and members["ep2_tx0_credit"].flow == wiring.In
    assert members["ep1_rx1"].flow == wiring.In and members["ep1_rx1_credit"].flow == wiring.Out
    assert "ep0_csr" not in members and "ep1_csr" in members and "ep2_csr" in members
    for ranks, msg in (((1, 1), "distinct ranks"), ((4,), "distinct ranks"), ((), "distinct ranks")):
        with pytest.raises(ValueError, match=msg):
            AceSystem(cfg, "ring:4", ranks=ranks)
    sw = engine_config_for(AceConfig.profile("small"), "switch:2")
    with pytest.raises(ValueError, match="holds all ranks of a switch"):
        AceSystem(sw, "switch:2", ranks=(0,))
    # a board: one link port, so one link out and one in
    b = BoardSystem(cfg, topology="ring:4", ranks=(0,), link_port={"width": 4, "credit_width": 1})
    Fragment.get(b, None)           # elaborates: the link port's lanes and the engine ports meet
    assert b.n_endpoints == 1 and (b.link_tx.name, b.link_rx.name) == ("ep0_tx0", "ep0_rx1")
    assert len(b.flit_out.data) == 4 and len(b.credit_in.data) == 1
    torus = engine_config_for(AceConfig.profile("small"), "torus:2x2x1")
    for kw, msg in ((dict(cfg=cfg, topology="ring:4", ranks=(0,)), "need link_port"),
                    (dict(cfg=cfg, topology="ring:4", link_port={}), "no link leaves it"),
                    (dict(cfg=torus, topology="torus:2x2x1", ranks=(0,), link_port={}), "one link port")):
        with pytest.raises(ValueError, match=msg):
            BoardSystem(kw.pop("cfg"), **kw)
