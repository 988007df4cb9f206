"""Suite-wide hooks.

Scheduling: with pytest-xdist the tests are handed to the workers in collection order, so a long simulation
collected last keeps one worker busy after the other has finished. The tests that build and run a design on an
external simulator or the FPGA tools (markers ``cocotb`` and ``fpga``, seconds to minutes each) are therefore
collected first and the unit tests (milliseconds to seconds) fill in behind them. The tests that
``tests/durations.json`` lists (the slowest of a past run, refreshed by ``scripts/update_test_durations.py``;
in the first group whatever their markers) start longest first: a 10-minute simulation that started 50
minutes into the run kept one worker busy for its last 10. The rest keep their collection order. ``make test`` pairs
this with ``--dist worksteal`` so that an idle worker takes queued tests from a busy one.

Simulation threads: the suite runs a simulator per worker, so a Verilator run that asks for ``"auto"`` threads
(``syncfabric run``/``bench`` through ``main``) gets one here: more threads than free cores spin, and each thread
count would be a Verilator build of its own. A test that wants threads passes them explicitly.
"""
import json
import os
from pathlib import Path

os.environ.setdefault("SYNCFABRIC_VERILATOR_THREADS", "1")

_DURATIONS = json.loads((Path(__file__).parent / "durations.json").read_text())


def _weight(item):
    slow = _DURATIONS.get(item.nodeid, 0.0)
    heavy = slow or item.get_closest_marker("cocotb") or item.get_closest_marker("fpga")
    return (0, -slow) if heavy else (1, 0.0)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_weight)     # stable: collection order within each group
