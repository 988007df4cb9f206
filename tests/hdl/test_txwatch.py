"""TxWatch (a link port's dead-link detector) in Amaranth's simulator: flits from a random source to a link
that stalls at random and then dies.

Checked: while the link moves, flits pass unchanged and in order, whatever its stalls shorter than the limit;
the port goes down exactly when a flit has waited ``limit`` cycles; from then on every flit is taken and
none is offered to the link; a limit of 0 never declares the link down.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.txwatch import TxWatch

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()


@pytest.mark.parametrize("limit", [0, 1, 9, 40])
def test_flits_pass_until_the_link_takes_none_for_the_limit_then_are_dropped(limit):
    rng = random.Random(seed_for(limit))
    dut = TxWatch(CFG)
    sent, delivered, drained = [], [], []
    die_at = 400

    async def bench(ctx):
        ctx.set(dut.limit, limit)
        n, waited, down_at, valid = 0, 0, None, False
        for cycle in range(900):
            valid = valid or rng.random() < 0.7         # a flit, once offered, stays until taken
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, {"data": n, "first": 1, "last": 1})
            # the link: random stalls shorter than the limit before die_at, dead afterwards
            alive = cycle < die_at
            ready = alive and (rng.random() < 0.6 or (limit != 0 and waited + 1 >= limit))
            ctx.set(dut.o.ready, ready)
            down = ctx.get(dut.down)
            if down:
                assert not ctx.get(dut.o.valid), "a flit offered to a link that is down"
            if ctx.get(dut.o.valid):
                assert ctx.get(dut.o.payload.data) == n
            took = valid and ctx.get(dut.i.ready)
            if took:
                (drained if down else delivered).append(n)
                sent.append(n)
            waited = waited + 1 if valid and not took else 0
            valid = valid and not took
            await ctx.tick()
            if down_at is None and ctx.get(dut.down):
                down_at = cycle
                assert limit and waited == limit, (waited, limit)
            if took:
                n += 1
        if limit == 0:
            assert down_at is None and not drained
        else:
            assert down_at is not None and down_at >= die_at and drained

    run_sim(dut, bench)
    assert delivered == list(range(len(delivered))) and sent == list(range(len(sent)))
    assert len(delivered) > 100
