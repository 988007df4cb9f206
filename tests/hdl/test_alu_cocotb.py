"""ReductionAlu's cocotb testbench (``syncfabric.tb.alu.test_alu``) on Verilator and Icarus.

The default runs are sized for CI; the ``slow`` runs stream 100,000 random beats of every dtype/op pair
(1.2 million beats) through each simulator. ``SEED=<n>`` replaces the seeds.

Widths: Verilator runs the production width (16 lanes = 64-byte beats) throughout. Icarus simulates the
16-lane ALU at about 45 cycles/s (2 lanes: about 1,000 cycles/s), so its CI run uses 16 lanes with few beats
and its slow run uses 2 lanes: every lane is an identical copy of the same datapath, and the 16-lane wiring
is covered by Verilator and by the Icarus CI run.
"""

import os

import pytest

from syncfabric.hdl.alu import ReductionAlu
from syncfabric.host.transports.harness import run_cocotb, simulators

pytestmark = pytest.mark.cocotb

TEST_MODULE = "syncfabric.tb.alu.test_alu"
#: An 8-bit tag lets the scoreboard check order as well as data.
TAG_WIDTH = 8
#: (lanes, random beats per dtype/op) of the default runs.
CI_RUNS = {"verilator": (16, 3000), "icarus": (16, 25)}
#: (lanes, random beats per dtype/op) of the slow runs.
SLOW_RUNS = {"verilator": (16, 100_000), "icarus": (2, 100_000)}
SIMS = ["verilator", "icarus"]


def run_alu_tb(sim, lanes, beats_per_combo, seed, *, testcase=None, valid_prob=0.8, ready_prob=0.8):
    assert sim in simulators(), f"{sim} is not installed: run `make setup`"
    seed = int(os.environ.get("SEED", seed))
    print(f"{sim}: seed {seed}, {lanes} lanes, {beats_per_combo} beats per dtype/op")
    summary = run_cocotb(
        ReductionAlu, {"lanes": lanes, "tag_width": TAG_WIDTH}, toplevel="reduction_alu",
        test_module=TEST_MODULE, sim=sim, testcase=testcase, seed=seed,
        tb_params={"beats_per_combo": beats_per_combo, "seed": seed, "latency": ReductionAlu.latency,
                   "valid_prob": valid_prob, "ready_prob": ready_prob})
    print(f"{sim}: {summary['tests']} cocotb tests passed, build {summary['build_s']:.1f} s, "
          f"run {summary['test_s']:.1f} s")
    return summary


@pytest.mark.parametrize("sim", SIMS)
def test_alu_random_beats_and_full_rate(sim):
    lanes, beats = CI_RUNS[sim]
    run_alu_tb(sim, lanes, beats, seed=20240601)


@pytest.mark.slow
@pytest.mark.parametrize("sim", SIMS)
def test_alu_100k_random_beats_per_dtype_op(sim):
    lanes, beats = SLOW_RUNS[sim]
    run_alu_tb(sim, lanes, beats, seed=20240602, testcase="random_beats_match_golden", valid_prob=0.9,
               ready_prob=0.9)
