"""Helpers shared by the block tests: the printed, overridable random seed and a one-clock Amaranth run."""

import os

from amaranth.sim import Simulator

__all__ = ["seed_for", "run_sim"]


def seed_for(default):
    """The test's seed: ``SEED`` from the environment, else ``default`` (printed either way, so a failing
    randomised run can be repeated)."""
    seed = int(os.environ.get("SEED", default))
    print(f"seed {seed}")
    return seed


def run_sim(dut, bench, period=1e-6):
    """Run the async testbench ``bench`` against ``dut`` with one clock of ``period`` seconds."""
    sim = Simulator(dut)
    sim.add_clock(period)
    sim.add_testbench(bench)
    sim.run()
