"""Every collective on tori: hierarchical (multi-phase) all-reduce, reduce-scatter and all-gather with per-phase
SRAM partitions, direct all-to-all forwarding through SRAM, broadcast and reduce with a root, and the barrier;
on the engine RTL (``AceConfig.small()`` with the torus's 6 link ports), every output byte against the golden
executor running the same programs.

The default run covers the six tori of the verification plan with small sizes (one Verilator build per torus;
builds are shared by content, so a second run only simulates); ``-m slow`` adds every dtype on the 16-endpoint
tori and bigger sizes.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.run import engine_config_for, job_spec
from syncfabric.sim.golden.topology import parse as parse_topology
from syncfabric.sim.golden.types import DType, dtype_bytes
from syncfabric.host.transports.ace import run_system

from sim_helpers import seed_for

#: The small engine with a torus's 6 ports and 8 message headers per (port, FSM) landing buffer: on 16
#: endpoints a rank may send 8 messages on a port before its neighbour RECVs the first (reduce-scatter,
#: all-gather, all-to-all; ``landing_deadlock``); with the small profile's 4 they would wait forever, which
#: ``CollectiveJob`` refuses up front (tested below). 1024 instruction words hold all seven programs of a
#: 16-endpoint torus at once (the 4x4x1 all-reduce and barrier take 142 words each).
CFG = engine_config_for(AceConfig.small(landing_headers=8, landing_beats=64, imem_words=1024), "torus:2x2x2")
COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce", "barrier")
SEGMENTED = ("reduce_scatter", "allgather", "alltoall")


def job(collective, topology, count, dtype="fp32", op="sum", seed=1, root=0, algorithm=None, **kw):
    """A job of ``count`` elements per rank and segment (NCCL convention)."""
    p = parse_topology(topology).n_endpoints
    per = p if collective in SEGMENTED else 1
    nbytes = count * per * dtype_bytes(DType.parse(dtype))
    return {"spec": job_spec(collective, topology, nbytes, dtype, op, root=root, seed=seed, algorithm=algorithm),
            **kw}


def check(result, n_jobs):
    """The testbench asserts bytes, guards and statuses itself; check it ran every command, that no byte
    was forwarded through NPU memory (each rank read exactly its send buffer and wrote its receive buffer),
    and that the per-phase flit counters split each rank's flits as the golden programs do."""
    assert len(result["jobs"]) == n_jobs
    for j in result["jobs"]:
        assert all(s == "OK" for s in j["status"] if s is not None), j["status"]
        assert j.get("cycles", 0) > 0
    for r, c in enumerate(result["counters"]):
        assert c["PAYLOAD_RD_BYTES"] == sum(j["golden"]["mem_read_bytes"][r] for j in result["jobs"])
        assert c["PAYLOAD_WR_BYTES"] == sum(j["golden"]["mem_write_bytes"][r] for j in result["jobs"])
        expect = [sum(j["golden"]["phase_flits"][r][p] for j in result["jobs"])
                  for p in range(len(c["PHASE_FLITS"]))]
        assert c["PHASE_FLITS"] == expect, f"rank {r}: flits per phase {c['PHASE_FLITS']}, golden {expect}"
        assert sum(c["PHASE_FLITS"]) == sum(c["TX_FLITS"])
        assert all(b > 0 for b, f in zip(c["PHASE_BUSY"], expect) if f)


def every_collective(topology, rng, seed, dtypes=("fp32", "bf16"), max_count=90):
    """One job per (collective, dtype), random small counts (tails off beats and packets), a random root per
    rooted collective (each root is a program table entry: the small engine has 8)."""
    p = parse_topology(topology).n_endpoints
    jobs, k = [], 0
    for coll in COLLECTIVES:
        root = rng.randrange(p)
        for dt in (("fp32",) if coll == "barrier" else dtypes):
            op = "sum" if coll in ("barrier", "alltoall", "allgather", "broadcast") else rng.choice(["sum", "max"])
            jobs.append(job(coll, topology, rng.randint(1, max_count), dt, op, seed=seed + k, root=root, tag=k))
            k += 1
    return jobs


@pytest.mark.cocotb
def test_every_collective_on_a_2x2x2_torus_with_backpressure_and_skewed_posting():
    """All seven collectives, two dtypes each, random sizes and roots, and the rotated all-reduce
    (``hierarchical-rotated``: both middle dimensions in one phase, on communicator 1: a communicator holds
    one program per collective); random AXI pauses and link stalls; the
    ranks post at random times up to 400 cycles apart."""
    seed = seed_for(20261124)
    topo = "torus:2x2x2"
    rng = random.Random(seed)
    jobs = every_collective(topo, rng, seed)
    jobs.append(job("allreduce", topo, rng.randint(1, 90), "fp32", "sum", seed=seed + len(jobs),
                    algorithm="hierarchical-rotated", comm=1, tag=len(jobs)))
    res = run_system(CFG, topo, jobs, sim="verilator", latency=6, seed=seed, pause=0.15, link_stall=0.05,
                     post_skew=400)
    check(res, len(jobs))


@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["torus:4x2x2"] + [
    pytest.param(t, marks=pytest.mark.slow) for t in ("torus:2x4x2", "torus:2x2x4", "torus:4x4x1", "torus:1x4x4")])
def test_every_collective_on_16_endpoint_tori(topology):
    """16 endpoints: 4-phase (or, with a dimension of 1, fewer) hierarchical programs and all-to-all routes
    of up to 4 hops (3 forwarding ranks in SRAM). The default run takes torus:4x2x2 (every dimension used, the
    longest ring local); the other shapes, a Verilator build of about 4 minutes each, are in ``make test-slow``."""
    seed = seed_for(20261125)
    jobs = every_collective(topology, random.Random(seed), seed, dtypes=("fp32",), max_count=40)
    res = run_system(CFG, topology, jobs, sim="verilator", latency=5, seed=seed, pause=0.1, post_skew=200)
    check(res, len(jobs))


@pytest.mark.cocotb
def test_torus_with_slow_inter_package_links_on_icarus():
    """The topology's own link attributes (local: 90 cycles at full rate; vertical: 500 cycles at 1/8 rate)
    and the second simulator: a hierarchical all-reduce and an all-to-all. Four engines (torus:2x2x1): Icarus
    simulates eight of them at a few dozen cycles a second."""
    topo = "torus:2x2x1"
    cfg = engine_config_for(AceConfig.small(), topo)
    jobs = [job("allreduce", topo, 70, "fp16", "sum", seed=3), job("alltoall", topo, 9, "int32", seed=4, tag=1)]
    res = run_system(cfg, topo, jobs, sim="icarus", seed=2)
    check(res, len(jobs))


@pytest.mark.cocotb
def test_registered_partition_moves_on_a_torus():
    """The design point's control stages (``wide_control``: a partition move granted from registers, applied a
    cycle later, one every two cycles; the chunk leaving the terminal partition registered; the dispatcher's
    modulo from the queue's head; the block geometry's products over two stages) on small engines: 3-phase all-reduces and 2-phase reduce-scatters of 4-16
    chunks whose moves wait for partition room (the ``partition_full`` stall counts them), under AXI pauses."""
    topo = "torus:2x2x1"
    cfg = engine_config_for(AceConfig.small(wide_control=1), topo)
    assert cfg.control_stages and not AceConfig.small().control_stages
    jobs = [job("allreduce", topo, 4096, "fp32", "sum", seed=5), job("reduce_scatter", topo, 1000, "bf16", "max",
                                                                    seed=6, tag=1),
            job("allreduce", topo, 2000, "int32", "sum", seed=7, tag=2)]
    res = run_system(cfg, topo, jobs, sim="verilator", latency=6, seed=3, pause=0.1)
    check(res, len(jobs))
    assert all(c["STALL"]["partition_full"] > 0 for c in res["counters"]), [c["STALL"] for c in res["counters"]]


@pytest.mark.cocotb
@pytest.mark.slow
@pytest.mark.parametrize("topology", ["torus:2x2x2", "torus:4x2x2", "torus:4x4x1"])
def test_every_dtype_and_bigger_sizes_on_tori(topology):
    seed = seed_for(20261126)
    dtypes = tuple(d.name.lower() for d in DType)
    jobs = every_collective(topology, random.Random(seed), seed, dtypes=dtypes, max_count=700)
    res = run_system(CFG, topology, jobs, sim="verilator", latency=9, seed=seed, pause=0.2, link_stall=0.1,
                     post_skew=1000, timeout_cycles=4 * 10**6)
    check(res, len(jobs))


def test_a_program_needing_more_landing_space_than_the_engine_has_is_refused_up_front():
    from syncfabric.host.job import CollectiveJob, engine_config_for_job
    small = engine_config_for(AceConfig.small(), "torus:4x2x2")
    spec = job("alltoall", "torus:4x2x2", 8)["spec"]
    with pytest.raises(ValueError, match="needs landing buffers of 8 messages"):
        CollectiveJob(spec, small)
    sized = engine_config_for_job(small, spec)
    assert sized.landing_headers == 8
    CollectiveJob(spec, sized)
