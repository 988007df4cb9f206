"""Formal proofs of the register slice (``hdl/common/skid.py``): under any stall pattern on both sides, every
beat accepted leaves exactly once, in order and unchanged; the buffer never holds more than it may (two beats
registered, one in the pass-through variant); the output holds its beat until taken; and it moves one beat per
cycle (``ready``/``valid`` exactly as the occupancy says, so no bubble and no lost throughput).

The harness keeps a shadow queue of the beats accepted and not yet delivered, and asserts the slice's outputs
against it. ABC's PDR proves it unbounded (the slice's skid register is internal: PDR finds the invariant
that ties it to the shadow queue). Each proof has broken variants that must fail.
"""

import pytest
from amaranth.hdl import Assert, Module, Mux, Signal, unsigned

from formal_helpers import Harness, assert_fails, assert_proves, past
from syncfabric.hdl.common.skid import SkidBuffer

pytestmark = pytest.mark.formal

WIDTH = 8       # wide enough for distinct beats; the logic is the same for any width


class SkidHarness(Harness):
    """A :class:`SkidBuffer` between a free producer (keeping the stream rule) and a free consumer, with a
    shadow queue of the beats inside it. ``capacity`` is the most beats it may hold (2 registered, 1 in the
    pass-through variant); a test passes a wrong one to check that the proof can fail."""

    def __init__(self, forward, dut_cls=SkidBuffer, capacity=None):
        super().__init__()
        self.forward = forward
        self.dut_cls = dut_cls
        self.capacity = capacity if capacity is not None else (2 if forward else 1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut_cls(unsigned(WIDTH), forward=self.forward)
        self.drive_source(m, dut.i, "i")
        m.d.comb += dut.o.ready.eq(self.free(1, "o_ready"))

        # shadow queue: beats accepted and not yet delivered, oldest first (one slot spare to see an overflow)
        q = [Signal(WIDTH, name=f"shadow{k}") for k in range(3)]
        count = Signal(range(5))
        push = dut.i.valid & dut.i.ready
        pop = dut.o.valid & dut.o.ready
        through = pop & (count == 0)                # a beat passing straight through (pass-through variant)
        pop_q = pop & (count != 0)
        push_q = push & ~through
        head = Mux(count == 0, dut.i.payload, q[0])
        n = Signal(range(5))
        m.d.comb += n.eq(count - pop_q)
        shifted = [Mux(pop_q, q[1], q[0]), Mux(pop_q, q[2], q[1]), q[2]]
        for k in range(3):
            m.d.sync += q[k].eq(Mux(push_q & (n == k), dut.i.payload, shifted[k]))
        m.d.sync += count.eq(n + push_q)

        m.d.comb += [
            Assert(count <= self.capacity, "holds no more beats than its registers"),
            Assert(~through | push, "delivers no beat it was not given (no duplicate, no underflow)"),
            Assert(~dut.o.valid | (dut.o.payload == head), "delivers the oldest beat, unchanged"),
        ]
        if self.forward:    # registered: valid whenever it holds a beat, ready while the skid register is free
            m.d.comb += [Assert(dut.o.valid == (count != 0), "offers every beat it holds"),
                         Assert(dut.i.ready == (count < 2), "ready unless both registers are full")]
        else:               # pass-through: the input shows through while the skid register is empty
            m.d.comb += [Assert(dut.o.valid == ((count != 0) | dut.i.valid), "offers every beat it holds"),
                         Assert(dut.i.ready == (count == 0), "ready unless the skid register is full")]
        stalled = past(m, dut.o.valid & ~dut.o.ready, "o_stalled")
        held = past(m, dut.o.payload, "o_held")
        with m.If(stalled):
            m.d.comb += Assert(dut.o.valid & (dut.o.payload == held), "holds a stalled beat until it is taken")
        return m


@pytest.mark.parametrize("forward", [True, False], ids=["registered", "pass_through"])
def test_skid_buffer_delivers_every_beat_once_in_order_under_any_stalls(forward):
    assert_proves(SkidHarness(forward), f"skid_{'fwd' if forward else 'nofwd'}")


# -- broken variants: each must fail the same proof -------------------------------------------------------------

class SkidDrainsInputFirst(SkidBuffer):
    """Bug: when the output register frees up it loads the input even if the skid register holds a beat (the
    skid beat is lost). ``i.ready`` low is the skid register being full."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If((self.o.ready | ~self.o.valid) & ~self.i.ready):
            m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        return m


class SkidAlwaysReady(SkidBuffer):
    """Bug: ``ready`` ignores the skid register, so a beat accepted while it is full overwrites it."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.i.ready.eq(1)
        return m


class SkidIgnoresSkidRegister(SkidBuffer):
    """Bug (pass-through variant): the output always shows the input, even while a caught beat waits."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.o.payload.eq(self.i.payload)
        return m


@pytest.mark.parametrize("forward, mutant", [
    (True, SkidDrainsInputFirst), (True, SkidAlwaysReady), (False, SkidAlwaysReady),
    (False, SkidIgnoresSkidRegister)], ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_skid_buffer_proof_fails_on_a_broken_slice(forward, mutant):
    assert_fails(SkidHarness(forward, dut_cls=mutant), f"skid_mutant_{mutant.__name__}_{int(forward)}")


def test_skid_buffer_proof_fails_on_a_too_strong_assertion():
    # the registered slice does hold two beats (output and skid register) when the consumer stalls
    assert_fails(SkidHarness(True, capacity=1), "skid_wrong_capacity")
