"""OldestFirst in Amaranth's simulator against its reference model: random requests and sequence numbers
within half the sequence space of each other, and the wrap-around."""

import random

import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.ace.arbiter import SEQ_BITS, OldestFirst, oldest_first_model


def _check(n, vectors):
    dut = OldestFirst(n)
    seen = []

    async def tb(ctx):
        for req, seq in vectors:
            ctx.set(dut.req, sum(1 << i for i, r in enumerate(req) if r))
            for i, s in enumerate(seq):
                ctx.set(dut.seq[i], s)
            got = ctx.get(dut.sel) if ctx.get(dut.valid) else None
            seen.append((req, seq, got))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    for req, seq, got in seen:
        want = oldest_first_model(req, seq)
        assert got == want, f"req {req} seq {seq}: got {got}, want {want}"
        if want is not None:      # the model is the specification: oldest in wrapping order, ties to the lowest
            live = [(s - seq[want]) % (1 << SEQ_BITS) for s, r in zip(seq, req) if r]
            assert all(d == 0 or d < 1 << (SEQ_BITS - 1) for d in live)
    return seen


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16])
def test_oldest_first_picks_the_oldest_requester_in_wrapping_order(n):
    seed = 1000 + n
    print(f"seed {seed}")
    rng = random.Random(seed)
    vectors = []
    for _ in range(300):
        base = rng.randrange(1 << SEQ_BITS)
        seq = [(base + rng.randrange(64)) % (1 << SEQ_BITS) for _ in range(n)]
        req = [rng.random() < 0.5 for _ in range(n)]
        vectors.append((req, seq))
    vectors.append(([False] * n, [0] * n))
    _check(n, vectors)


def test_oldest_first_across_the_wrap_and_on_ties():
    top = (1 << SEQ_BITS) - 1
    seen = _check(4, [
        ([True, True, False, False], [2, top, 0, 0]),       # top is older than 2 across the wrap
        ([True, True, True, True], [5, 5, 5, 5]),           # a tie goes to the lowest index
        ([False, False, False, True], [0, 0, 0, 9]),
    ])
    assert [got for _, _, got in seen] == [1, 0, 3]


def test_oldest_first_refuses_no_requesters():
    with pytest.raises(ValueError, match="at least one"):
        OldestFirst(0)
