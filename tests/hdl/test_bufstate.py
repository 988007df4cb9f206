"""BufferState in Amaranth's simulator against a model: random dispatches, LOADs issued, finished and skipped,
and STOREs posted and acknowledged, several events per cycle; the buffer pool's order.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.bufstate import BufferPool, BufferState, n_mask_slots
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.units import StoreUnit

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
NB, NM = CFG.n_buffers, n_mask_slots(CFG)
CAP = StoreUnit.QUEUE + StoreUnit.IN_FLIGHT


def test_loading_masks_and_pending_stores_follow_their_events():
    rng = random.Random(seed_for(83))
    dut = BufferState(CFG)
    loading = [0] * NB
    stores = [0] * NB

    def event(p=0.3):
        if rng.random() < p:
            return {"valid": 1, "buf": rng.randrange(NB), "slot": rng.randrange(NM)}
        return {"valid": 0, "buf": rng.randrange(NB), "slot": rng.randrange(NM)}

    async def bench(ctx):
        for cycle in range(3000):
            # outputs against the model
            for b in range(NB):
                assert ctx.get(dut.loading[b]) == loading[b], (cycle, b)
            assert ctx.get(dut.buf_loading) == sum(1 << b for b in range(NB) if loading[b])
            assert ctx.get(dut.stores_pending) == sum(1 << b for b in range(NB) if stores[b])

            # this cycle's events (a STORE is acknowledged only if one is pending)
            new = {"valid": int(rng.random() < 0.05), "buf": rng.randrange(NB), "load_mask": rng.randrange(1 << NM)}
            issue, done, skip = event(), event(), event(0.15)
            sb = rng.randrange(NB)      # at most as many STOREs pending as the store unit can hold
            st_in = {"valid": int(rng.random() < 0.3 and stores[sb] < CAP), "buf": sb}
            pend = [x for x in range(NB) if stores[x]]
            st_out = {"valid": int(bool(pend) and rng.random() < 0.3), "buf": rng.choice(pend) if pend else 0}
            for port, value in ((dut.new, new), (dut.load_issue, issue), (dut.load_done, done), (dut.skip, skip),
                                (dut.store_issue, st_in), (dut.store_done, st_out)):
                ctx.set(port, value)
            # the probe: a slot's bit in the masks after this edge (slots beyond the mask's width read 0)
            probe = {"buf": rng.randrange(NB), "slot": rng.randrange(1 << max(1, (NM - 1).bit_length()))}
            ctx.set(dut.probe, probe)
            nxt = ctx.get(dut.probe_next)
            await ctx.tick()
            assert nxt == ctx.get(dut.loading[probe["buf"]]) >> probe["slot"] & 1, cycle

            # the model: a dispatch wins over every other event on its buffer
            for x in range(NB):
                if new["valid"] and new["buf"] == x:
                    loading[x] = new["load_mask"]
                    continue
                for ev in (done, skip):
                    if ev["valid"] and ev["buf"] == x:
                        loading[x] &= ~(1 << ev["slot"])
                if issue["valid"] and issue["buf"] == x:
                    loading[x] |= 1 << issue["slot"]
            for x in range(NB):
                stores[x] += (st_in["valid"] and st_in["buf"] == x) - (st_out["valid"] and st_out["buf"] == x)

    run_sim(dut, bench)


def test_buffer_pool_hands_out_every_buffer_after_reset_then_the_freed_ones_in_order():
    rng = random.Random(seed_for(84))
    dut = BufferPool(CFG)

    async def bench(ctx):
        taken, held = [], []
        freed = []
        for cycle in range(400):
            if cycle < NB:
                assert not ctx.get(dut.take.valid)          # the pool fills itself first
            ready = rng.random() < 0.5
            ctx.set(dut.take.ready, ready)
            got = ctx.get(dut.take.payload) if ready and ctx.get(dut.take.valid) else None
            free = held.pop(rng.randrange(len(held))) if held and rng.random() < 0.3 else None
            ctx.set(dut.free, {"valid": free is not None, "buf": free or 0})
            await ctx.tick()
            if got is not None:
                taken.append(got)
                held.append(got)
            if free is not None:
                freed.append(free)
        assert taken[:NB] == list(range(NB))
        assert taken[NB:] == freed[:len(taken) - NB]        # freed buffers come back in the order freed
        assert len(taken) > 2 * NB

    run_sim(dut, bench)
