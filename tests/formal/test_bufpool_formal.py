"""Formal proof of the chunk-buffer pool (:class:`~syncfabric.hdl.ace.bufstate.BufferPool`): its FIFO of free
buffers never overflows or loses one, and never hands out a buffer twice.

The harness is the dispatcher and the chunks: it takes buffers whenever it likes and frees any buffer it holds,
in any order, at any time (never one it does not hold: the pool's contract). A shadow bit per buffer says
whether the dispatcher holds it. Proved, unbounded, with PDR, for a power-of-two pool and one that is not (the
paper engine has 52 buffers):

* every buffer offered exists and is not held (no buffer twice, none out of range);
* the pool offers a buffer whenever it owns one that has been back for ``LATENCY`` cycles (from ``n_buffers``
  cycles after reset, when it has taken every buffer in). A lost buffer (a free refused by a full
  FIFO, a FIFO entry popped but not handed out) would sit unoffered forever.
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Module, Mux, Signal

from formal_helpers import Harness, assert_fails, assert_proves, mutant
from syncfabric.hdl.ace.bufstate import BufferPool
from syncfabric.hdl.ace.config import AceConfig

pytestmark = pytest.mark.formal

#: cycles a freed buffer is back before the pool offers it (SyncFIFOBuffered: written in the cycle of the free,
#: in its output register two cycles later)
LATENCY = 2


class PoolHarness(Harness):
    """A :class:`BufferPool` of ``n_buffers`` under a free dispatcher (see the module docstring)."""

    def __init__(self, n_buffers, pool_cls=BufferPool, latency=LATENCY):
        super().__init__()
        self.cfg = AceConfig.small(n_buffers=n_buffers)
        self.pool_cls, self.latency = pool_cls, latency

    def elaborate(self, platform):
        m = Module()
        nb = self.cfg.n_buffers
        m.submodules.pool = pool = self.pool_cls(self.cfg)
        width = len(pool.take.payload)

        held = Signal(nb, name="held")              # buffers the dispatcher holds
        lat = self.latency
        age = [Signal(range(lat + 1), name=f"age{b}") for b in range(nb)]   # cycles back in the pool (saturating)
        up = Signal(range(nb + 1), name="up")       # cycles since reset, up to n_buffers (the pool fills up)
        m.d.sync += up.eq(Mux(up == nb, nb, up + 1))
        fb = self.free(width, "free_buf")
        m.d.comb += [
            pool.take.ready.eq(self.free(1, "take_ready")),
            pool.free.valid.eq(self.free(1, "free_valid")), pool.free.buf.eq(fb),
        ]
        with m.If(pool.free.valid):
            m.d.comb += Assume((fb < nb) & Array(held)[fb])     # only a buffer it holds, once
        took = pool.take.valid & pool.take.ready
        for b in range(nb):
            taken = took & (pool.take.payload == b)
            freed = pool.free.valid & (fb == b)
            m.d.sync += held[b].eq(Mux(taken, 1, Mux(freed, 0, held[b])))
            # 1 in the first cycle it is back (after the cycle of its free), then counting up to `lat`
            m.d.sync += age[b].eq(Mux(freed, 1, Mux(held[b], 0, Mux(age[b] == lat, lat, age[b] + 1))))

        m.d.comb += [
            Assert(~pool.take.valid | (pool.take.payload < nb), "offers only buffers that exist"),
            Assert(~pool.take.valid | ~Array(held)[pool.take.payload], "never offers a buffer that is out"),
        ]
        waiting = Cat(~held[b] & (age[b] == lat) for b in range(nb))
        m.d.comb += Assert(~((up == nb) & waiting.any()) | pool.take.valid, "offers every buffer it owns")
        return m


@pytest.mark.parametrize("n_buffers", [3, 4])
def test_buffer_pool_never_loses_or_duplicates_a_buffer(n_buffers):
    assert_proves(PoolHarness(n_buffers), f"bufpool_{n_buffers}")


# -- broken variants: source mutants of the real pool, each must fail the same proof ------------------------------

MUTANTS = {
    # the FIFO one entry short of n_buffers: the last buffer of the initial fill is refused
    "fifo_one_short": ("depth=NB)", "depth=NB - 1)"),
    # the FIFO popped on take.ready alone: a buffer popped while the initial fill hides it is lost
    "pop_without_valid": ("q.r_en.eq(self.take.ready & self.take.valid)", "q.r_en.eq(self.take.ready)"),
    # never popped: the buffer taken is offered again
    "no_pop": ("q.r_en.eq(self.take.ready & self.take.valid)", "q.r_en.eq(0)"),
}


@pytest.mark.parametrize("bug", MUTANTS)
def test_buffer_pool_proof_fails_on_a_broken_pool(bug):
    assert_fails(PoolHarness(3, pool_cls=mutant(BufferPool, *MUTANTS[bug])), f"bufpool_mutant_{bug}")


def test_buffer_pool_proof_fails_on_a_too_tight_latency():
    # a freed buffer is offered two cycles after its free, not one
    assert_fails(PoolHarness(3, latency=1), "bufpool_wrong_latency")
