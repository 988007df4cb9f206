"""FirstFailing in Amaranth's simulator against the priority chain: random sets of failed checks (none, one,
several) with random details, for the validator's check list and for a small list with constant details;
the outputs change only in the cycle after ``capture``.

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest
from amaranth.lib import data

from syncfabric.hdl.ace.firstfail import FirstFailing
from syncfabric.hdl.ace.validate import CHECKS, detail_layout
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim, seed_for

SMALL = (("a", Status.BAD_OP, 0), ("b", Status.BAD_OP, "x"), ("c", Status.MISALIGNED, 7),
         ("d", Status.SRAM_TOO_SMALL, "y"))
LISTS = {"validator": (CHECKS, detail_layout()),
         "small": (SMALL, data.StructLayout({"x": 8, "y": 16}))}


def expected(checks, failed, details):
    for name, status, src in checks:
        if failed[name]:
            return status, details[src] if isinstance(src, str) else src
    return Status.OK, 0


@pytest.mark.parametrize("which", LISTS)
def test_code_and_detail_are_those_of_the_first_failed_check_registered_at_capture(which):
    checks, details_l = LISTS[which]
    rng = random.Random(seed_for(7601) + len(which))
    dut = FirstFailing(checks, details_l)
    names = [name for name, _, _ in checks]
    deciding = set()

    async def bench(ctx):
        held = (Status.OK, 0, {name: 0 for name in names})
        for cycle in range(3000):
            p = rng.choice([0, 0.05, 0.2, 0.6])
            failed = {name: int(rng.random() < p) for name in names}
            details = {name: rng.getrandbits(f.width) for name, f in details_l}
            capture = int(rng.random() < 0.6)
            ctx.set(dut.failed, failed)
            ctx.set(dut.details, details)
            ctx.set(dut.capture, capture)
            await ctx.tick()
            if capture:
                code, det = expected(checks, failed, details)
                held = (code, det, failed)
                deciding.add(next((n for n in names if failed[n]), "ok"))
            code, det, fl = held
            assert (ctx.get(dut.code), ctx.get(dut.det)) == (code, det), (cycle, failed)
            got = ctx.get(dut.checks)
            assert {name: getattr(got, name) for name in names} == fl, cycle

    run_sim(dut, bench)
    assert deciding == set(names) | {"ok"}, sorted(set(names) | {"ok"} - deciding)
