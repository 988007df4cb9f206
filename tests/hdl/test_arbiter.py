"""The age matrix and the oldest-first pick in Amaranth's simulator: the matrix registered from random sequence
numbers (within half the sequence space of each other, across the wrap) is the reference model's, and a pick on
it selects the requester the specification (:func:`oldest_first_model`: oldest in wrapping order, ties to the
lowest index) selects, for random requests."""

import random

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.lib import wiring

from syncfabric.hdl.ace.arbiter import (SEQ_BITS, AgeMatrix, OldestPick, age_matrix_model, oldest_first_model,
                                        oldest_pick_model)

from sim_helpers import run_sim, seed_for


def _rows(ctx, older, n):
    return [[bool(ctx.get(older[f]) >> g & 1) for g in range(n)] for f in range(n)]


def _run(n, vectors):
    """(req, seq) vectors through the matrix and the pick together (the pick fed by the matrix's output, a
    cycle after the sequence numbers)."""
    class Pair(wiring.Component):
        def __init__(self):
            self.matrix, self.pick = AgeMatrix(n), OldestPick(n)
            super().__init__({})

        def elaborate(self, platform):
            m = Module()
            m.domains.sync = ClockDomain()      # declared here: one FSM's matrix has no flip-flop
            m.submodules.matrix, m.submodules.pick = self.matrix, self.pick
            m.d.comb += self.pick.older.eq(self.matrix.older)
            return m

    dut = Pair()
    seen = []

    async def bench(ctx):
        for req, seq in vectors:
            for i, s in enumerate(seq):
                ctx.set(dut.matrix.seq_next[i], s)
            await ctx.tick()
            older = _rows(ctx, dut.matrix.older, n)
            assert older == age_matrix_model(seq), (seq, older)
            ctx.set(dut.pick.req, sum(1 << i for i, r in enumerate(req) if r))
            got = ctx.get(dut.pick.sel) if ctx.get(dut.pick.valid) else None
            hot = ctx.get(dut.pick.onehot)
            assert hot == (0 if got is None else 1 << got), (req, seq, hot)
            seen.append((req, seq, got, oldest_pick_model(req, older)))

    run_sim(dut, bench)
    for req, seq, got, model in seen:
        want = oldest_first_model(req, seq)
        assert got == model == want, f"req {req} seq {seq}: got {got}, model {model}, want {want}"
    return seen


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16])
def test_the_pick_on_the_age_matrix_is_the_oldest_requester_in_wrapping_order(n):
    rng = random.Random(seed_for(1000 + n))
    vectors = []
    for _ in range(300):
        base = rng.randrange(1 << SEQ_BITS)
        seq = [(base + rng.randrange(64)) % (1 << SEQ_BITS) for _ in range(n)]
        vectors.append(([rng.random() < 0.5 for _ in range(n)], seq))
    vectors.append(([False] * n, [0] * n))
    _run(n, vectors)


def test_the_wrap_and_ties():
    top = (1 << SEQ_BITS) - 1
    seen = _run(4, [
        ([True, True, False, False], [2, top, 0, 0]),       # top is older than 2 across the wrap
        ([True, True, True, True], [5, 5, 5, 5]),           # a tie goes to the lowest index
        ([False, False, False, True], [0, 0, 0, 9]),
        ([False, True, True, False], [600, 30, 20, 0]),     # FSMs that do not request do not constrain the pick
    ])
    assert [got for _, _, got, _ in seen] == [1, 0, 3, 2]


@pytest.mark.parametrize("block", [AgeMatrix, OldestPick])
def test_no_fsms_is_refused(block):
    with pytest.raises(ValueError, match="at least one FSM"):
        block(0)
