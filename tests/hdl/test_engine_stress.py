"""Randomised stress of the ACE engine (``make test-slow``): many seeds of mixed collectives, dtypes, ops and
sizes on uni- and bidirectional rings, with random link latency, AXI pauses and link stalls; every byte against
the golden model. Each seed draws its own commands, so a failing seed reproduces alone:
``SEEDS=1234 pytest -m slow tests/hdl/test_engine_stress.py``.

The default suite runs the fixed seeds of ``test_engine_system.py``; this sweep is what found the lost RECV
status of an empty message behind a full one and the stale LOAD wait of a skipped empty block."""

import os
import random

import pytest

from syncfabric.sim.golden.types import DType, ReduceOp
from syncfabric.host.transports.ace import run_system

from test_engine_system import CFG, check, job

_SEEDS = [int(s) for s in os.environ.get("SEEDS", "").split(",") if s] or list(range(1000, 1016))


def stress_jobs(topology, seed):
    """Twelve commands (one per dtype x op) of random collectives and sizes, from 1 element to over a chunk."""
    rng = random.Random(seed)
    jobs = []
    for k, (dt, op) in enumerate((dt, op) for dt in DType for op in ReduceOp):
        coll = rng.choice(["allreduce", "allreduce", "reduce_scatter", "allgather"])
        count = rng.randint(1, 1500 if coll == "allreduce" else 400)
        jobs.append(job(coll, topology, count, dt.name.lower(), op.name.lower(), seed=seed + k, tag=k))
    return jobs, rng


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["ring:4", "bidir-ring:3", "ring:5"])
@pytest.mark.parametrize("seed", _SEEDS)
def test_random_commands_on_rings_match_the_golden_model(topology, seed):
    print(f"seed {seed}")
    jobs, rng = stress_jobs(topology, seed)
    # link latency is built into the system's Verilog: two values keep it to two builds per topology
    latency = rng.choice([3, 10])
    res = run_system(CFG, topology, jobs, sim="verilator", latency=latency, seed=seed,
                     pause=rng.choice([0.0, 0.1, 0.3]), link_stall=rng.choice([0.0, 0.05, 0.2]),
                     timeout_cycles=400_000, build_tag=f"stress-{topology}-l{latency}")
    check(res, len(jobs))
