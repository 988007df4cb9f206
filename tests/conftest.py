"""Suite-wide hooks.

Scheduling: with pytest-xdist the tests are handed to the workers in collection order, so a long simulation
collected last keeps one worker busy after the other has finished. The tests that build and run a design on an
external simulator or the FPGA tools (markers ``cocotb`` and ``fpga``, seconds to minutes each) are therefore
collected first and the unit tests (milliseconds to seconds) fill in behind them; the order within each group
is kept. ``make test`` pairs this with ``--dist worksteal`` so that an idle worker takes queued tests from a
busy one.

Simulation threads: the suite runs a simulator per worker, so a Verilator run that asks for ``"auto"`` threads
(``syncfabric run``/``bench`` through ``main``) gets one here: more threads than free cores spin, and each thread
count would be a Verilator build of its own. A test that wants threads passes them explicitly.
"""
import os

os.environ.setdefault("SYNCFABRIC_VERILATOR_THREADS", "1")


def _weight(item):
    return 0 if item.get_closest_marker("cocotb") or item.get_closest_marker("fpga") else 1


def pytest_collection_modifyitems(config, items):
    items.sort(key=_weight)     # stable: collection order within each group
