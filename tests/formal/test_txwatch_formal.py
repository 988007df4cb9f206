"""Formal proof of the dead-link detector (:class:`~syncfabric.hdl.ace.txwatch.TxWatch`, docs/engine.md section 13):
the link never sees a flit once the port is down, the port goes down only after a flit waited ``limit``
consecutive cycles for the link (never with ``limit`` 0), and until then the stream passes through unchanged.

The harness drives the port's flits and the link's ``ready`` freely (a free port: ``TxWatch`` takes any producer)
and ``limit`` with any value, held from the first cycle after reset on (a register of the engine). It counts the
consecutive cycles a flit has waited (``run``). The down-counter is probed (:func:`formal_helpers.mutant` keeps
the locals of ``elaborate``) and its relation to ``run`` asserted, which makes the properties inductive: proved
unbounded by k-induction (depth 3) for the full 32-bit ``limit``. Broken variants must fail it.
"""

import pytest
from amaranth.hdl import Assert, Assume, Elaboratable, Fragment, Module, Signal, Value

from formal_helpers import Harness, assert_fails, assert_proves, mutant, past
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.txwatch import TxWatch

pytestmark = pytest.mark.formal

CFG = AceConfig.small(beat_bytes=8, packet_bytes=16)
PROBE = ("return m", "self.probe = dict(locals()); return m")


class _Elaborated(Elaboratable):
    def __init__(self, fragment):
        self.fragment = fragment

    def elaborate(self, platform):
        return self.fragment


class TxWatchHarness(Harness):
    """A probed :class:`TxWatch` under a free port, link and ``limit`` (see the module docstring)."""

    def __init__(self, bug=None):
        super().__init__()
        self.bug = bug

    def elaborate(self, platform):
        m = Module()
        cls = mutant(TxWatch, *self.bug, also=[PROBE]) if self.bug else mutant(TxWatch, *PROBE)
        w = cls(CFG)
        m.submodules.watch = _Elaborated(Fragment.get(w, platform))
        left = w.probe["left"]
        limit = self.free(32, "limit")
        started, limit_was = past(m, 1, "started"), past(m, limit, "limit_was")
        with m.If(started):
            m.d.comb += Assume(limit == limit_was)
        m.d.comb += [w.limit.eq(limit), w.i.valid.eq(self.free(1, "i_valid")),
                     w.i.payload.eq(self.free(len(Value.cast(w.i.payload)), "i_payload")),
                     w.o.ready.eq(self.free(1, "o_ready"))]
        waiting = w.i.valid & ~w.o.ready & ~w.down
        run = Signal(32, name="run")            # consecutive cycles a flit has waited, up to the last one
        m.d.sync += run.eq(waiting * (run + 1))
        rose = w.down & ~past(m, w.down, "was_down")
        m.d.comb += [
            Assert(~(w.o.valid & w.down), "no flit reaches the link while down"),
            Assert(~rose | ((limit != 0) & (run == limit)), "down only after `limit` cycles of waiting"),
            Assert(Value.cast(w.o.payload) == Value.cast(w.i.payload), "the flit passes unchanged"),
            Assert(w.down | ((w.o.valid == w.i.valid) & (w.i.ready == w.o.ready)), "passes through until down"),
            Assert(w.down | (left == 0) | (left + run == limit), "the counter is limit - run (no wrap)"),
            Assert(started | ((left == 0) & (run == 0) & ~w.down), "all clear in the first cycle"),
        ]
        return m


def test_txwatch_goes_down_only_after_limit_cycles_and_then_passes_nothing():
    assert_proves(TxWatchHarness(), "txwatch", engine="kind", depth=3)


MUTANTS = {
    "down_one_cycle_early": ("waiting & (left == 1)", "waiting & (left == 2)"),
    "valid_while_down": ("self.o.valid.eq(self.i.valid & ~self.down)", "self.o.valid.eq(self.i.valid)"),
    "counts_while_the_link_takes": ("waiting = self.i.valid & ~self.o.ready & ~self.down",
                                    "waiting = self.i.valid & ~self.down"),
    "ready_ignored_while_down": ("self.i.ready.eq(self.o.ready | self.down)", "self.i.ready.eq(self.down)"),
}


@pytest.mark.parametrize("bug", MUTANTS)
def test_txwatch_proof_fails_on_a_broken_detector(bug):
    assert_fails(TxWatchHarness(bug=MUTANTS[bug]), f"txwatch_mutant_{bug}", engine="kind", depth=3)
