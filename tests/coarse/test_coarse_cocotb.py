"""The COARSE system top on Verilator and Icarus: emulated GPUs push over CCI, sync cores synchronize in one or
two groups, GPUs pull; every byte (pulled and in every device's DRAM) against the golden sync-core order, for
2, 4 and 8 devices, every dtype and op, random link latencies, random link stalls and GPU-side backpressure;
push/pull of tensors from 4 bytes to many beats.

Small geometry (8-byte beats, 4-beat entries) keeps the builds short; ``SEED=<n>`` replaces the default seeds.
"""

import json
import os
import sys

import pytest

from syncfabric.hdl.coarse.system import system_verilog
from syncfabric.host.transports.harness import run_cocotb, run_dir_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402

ALL_RUNS = [[d, o] for d in ("fp32", "fp16", "bf16", "int32") for o in ("sum", "max", "min")]


def run(n, groups, sim, runs, seed, testcase="sync_matches_golden", **tb):
    params = {"n_devices": n, "n_groups": groups, "beat_bytes": 8, "entry_beats": 4}
    tag = f"coarse_{n}x{groups}_{sim}_{testcase}"
    report = run_dir_for(tag, sim) / "report.json"
    run_cocotb(system_verilog, params, toplevel="coarse_system", test_module="syncfabric.tb.coarse.test_system",
               sim=sim, testcase=testcase, build_tag=tag, hier_blocks=("coarse_device",),
               tb_params={"seed": seed, "runs": runs, "report": str(report), "mem_bytes": 1 << 14, **tb})
    return json.loads(report.read_text()) if testcase == "sync_matches_golden" else None


@pytest.mark.cocotb
@pytest.mark.parametrize("n,groups", [(2, 1), (4, 2), *(pytest.param(n, g, marks=pytest.mark.slow)
                                                       for n, g in ((2, 2), (4, 1), (8, 1), (8, 2)))])
def test_sync_every_dtype_op_bit_exact_on_verilator_with_random_latency_and_stalls(n, groups):
    seed = seed_for(100 + 10 * n + groups)
    rep = run(n, groups, "verilator", ALL_RUNS, seed, chunks=2, max_latency=6, stall=0.1, backpressure=0.2)
    assert len(rep["runs"]) == len(ALL_RUNS) and all(r["cycles"] > 0 for r in rep["runs"])


@pytest.mark.cocotb
@pytest.mark.parametrize("n,groups", [(2, 1), (2, 2)])
def test_sync_bit_exact_on_icarus_with_random_latency_and_stalls(n, groups):
    seed = seed_for(200 + groups)
    run(n, groups, "icarus", [["fp16", "sum"], ["bf16", "max"], ["int32", "min"], ["fp32", "sum"]], seed,
        chunks=1, max_latency=5, stall=0.1, backpressure=0.2)


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_push_pull_tensors_from_4_bytes_to_many_beats(sim):
    seed = seed_for(7)
    run(2, 1, sim, [], seed, testcase="push_pull_sizes", tensors=[4, 8, 12, 100, 1000, 2052], max_latency=6,
        stall=0.1, backpressure=0.3)
