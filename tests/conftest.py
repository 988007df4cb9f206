"""Suite-wide hooks.

Scheduling: with pytest-xdist the tests are handed to the workers in collection order, so a long simulation
collected last keeps one worker busy after the other has finished. The tests that build and run a design on an
external simulator or the FPGA tools (markers ``cocotb`` and ``fpga``, seconds to minutes each) are therefore
collected first and the unit tests (milliseconds to seconds) fill in behind them. The tests that
``tests/durations.json`` lists (the slowest of a past run, refreshed by ``scripts/update_test_durations.py``;
in the first group whatever their markers) start longest first: a 10-minute simulation that started 50
minutes into the run kept one worker busy for its last 10. The rest keep their collection order. ``make test`` pairs
this with ``--dist worksteal`` so that an idle worker takes queued tests from a busy one.

Tests that share a module-scoped fixture (the host API's ``ring2`` system, one per backend) move as one block,
weighed by the sum of their durations: sorted one by one, they were interleaved with other modules' tests, and
pytest tears a module's fixtures down whenever the next test is another module's, so the same system was built
again (the Amaranth-simulator system five times in one run, 20-33 s of set-up each).

Simulation threads: the suite runs a simulator per worker, so a Verilator run that asks for ``"auto"`` threads
(``syncfabric run``/``bench`` through ``main``) gets one here: more threads than free cores spin, and each thread
count would be a Verilator build of its own. A test that wants threads passes them explicitly.
"""
import json
import os
from pathlib import Path

os.environ.setdefault("SYNCFABRIC_VERILATOR_THREADS", "1")

_DURATIONS = json.loads((Path(__file__).parent / "durations.json").read_text())


def _weight(items):
    slow = sum(_DURATIONS.get(item.nodeid, 0.0) for item in items)
    heavy = slow or any(item.get_closest_marker("cocotb") or item.get_closest_marker("fpga") for item in items)
    return (0, -slow) if heavy else (1, 0.0)


def _shared_fixtures(item):
    """The module- or class-scoped fixtures ``item`` uses, with their parameters (empty: none)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return ()
    params = getattr(getattr(item, "callspec", None), "params", {})
    return tuple(sorted((name, repr(params.get(name))) for name, defs in info.name2fixturedefs.items()
                        if defs and defs[-1].scope in ("module", "class")))


def pytest_collection_modifyitems(config, items):
    groups = {}         # insertion-ordered: collection order within each group and between equal weights
    for i, item in enumerate(items):
        shared = _shared_fixtures(item)
        key = (item.nodeid.split("::")[0], shared) if shared else i
        groups.setdefault(key, []).append(item)
    blocks = sorted(groups.values(), key=_weight)   # stable
    items[:] = [item for block in blocks for item in block]
