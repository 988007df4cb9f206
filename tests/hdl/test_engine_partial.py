"""Partial all-reduce (RNA) on the engine RTL: ranks whose descriptor carries the NULL flag read nothing from
memory, feed zeros, and count 0 in the count lane that travels in every message header; every rank's output
equals the golden executor's (the reduction with those ranks' inputs replaced by zeros, in the program's order)
and every completion's ``contributors`` equals the golden count lane."""

import random

import pytest

from syncfabric.host.run import job_spec
from syncfabric.sim.golden.topology import parse as parse_topology
from syncfabric.sim.golden.types import DType, dtype_bytes
from syncfabric.host.transports.ace import run_system

from sim_helpers import seed_for
from test_engine_system import CFG as RING_CFG     # their builds serve this file too: the ring's and
from test_engine_topologies import CFG      # the torus's engines


def job(collective, topology, count, dtype, null_ranks, seed, root=0, **kw):
    p = parse_topology(topology).n_endpoints
    per = p if collective == "reduce_scatter" else 1
    nbytes = count * per * dtype_bytes(DType.parse(dtype))
    return {"spec": job_spec(collective, topology, nbytes, dtype, "sum", root=root, seed=seed,
                             null_ranks=null_ranks), **kw}


def random_null_jobs(topology, rng, seed, n=6):
    """All-reduce, reduce-scatter and reduce with random null subsets (none, some, all but one, all)."""
    p = parse_topology(topology).n_endpoints
    sizes = [0, rng.randint(1, p - 1), p - 1, p] + [rng.randint(0, p) for _ in range(n)]
    jobs = []
    for k, size in enumerate(sizes[:n]):
        coll = ("allreduce", "reduce_scatter", "reduce")[k % 3]
        null = sorted(rng.sample(range(p), size))
        dt = rng.choice([d.name.lower() for d in DType])
        jobs.append(job(coll, topology, rng.randint(1, 300), dt, null, seed + k, root=rng.randrange(p), tag=k))
    return jobs


def check(result, jobs):
    assert len(result["jobs"]) == len(jobs)
    for j, spec in zip(result["jobs"], jobs):
        assert all(s == "OK" for s in j["status"]), j["status"]
        assert j["contributors"] == j["expect_contributors"]
        for r in spec["spec"]["null_ranks"]:      # a null rank reads nothing
            assert j["golden"]["mem_read_bytes"][r] == 0
    for r, c in enumerate(result["counters"]):
        assert c["PAYLOAD_RD_BYTES"] == sum(j["golden"]["mem_read_bytes"][r] for j in result["jobs"])


@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["ring:4", pytest.param("torus:2x2x2", marks=pytest.mark.slow)])
def test_random_ranks_contribute_null(topology):
    seed = seed_for(20261127)
    jobs = random_null_jobs(topology, random.Random(seed), seed)
    cfg = CFG if topology.startswith("torus") else RING_CFG
    res = run_system(cfg, topology, jobs, sim="verilator", latency=5, seed=seed, pause=0.1, post_skew=100)
    check(res, jobs)
