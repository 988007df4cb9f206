"""SlotCounts (one FSM's count lanes) in Amaranth's simulator against a model: random chunk takes, NULL
commands, RECV writes (some in the cycle of a take, which wins) and reads of any slot, tracked or not.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.bufstate import n_mask_slots
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.slotcount import SlotCounts
from syncfabric.hdl.common.layouts import COUNT_BITS

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
NM = n_mask_slots(CFG)


def test_counts_start_at_the_commands_contribution_and_follow_the_recvs():
    rng = random.Random(seed_for(85))
    dut = SlotCounts(CFG)
    written = {}                # slot -> count written since the last take
    null = 0
    seen = {"written": 0, "initial": 0, "null": 0, "untracked": 0}

    async def bench(ctx):
        nonlocal written, null
        for cycle in range(3000):
            if rng.random() < 0.02:
                null = rng.randrange(2)             # the command changes only with a take, but any value must do
            ctx.set(dut.null, null)
            k = rng.randrange(NM + 2)               # slots beyond the tracked ones read 0
            ctx.set(dut.rd_slot, k)
            want = 0 if k >= NM else written.get(k, 1 - null)
            assert ctx.get(dut.rd) == want, (cycle, k, written, null)
            seen["untracked" if k >= NM else "written" if k in written else "null" if null else "initial"] += 1
            take = rng.random() < 0.03
            wr = {"valid": int(rng.random() < 0.4), "slot": rng.randrange(NM + 1),
                  "count": rng.randrange(1 << COUNT_BITS)}
            ctx.set(dut.take, take)
            ctx.set(dut.wr, wr)
            await ctx.tick()
            if take:
                written = {}
            elif wr["valid"] and wr["slot"] < NM:
                written[wr["slot"]] = wr["count"]

    run_sim(dut, bench)
    assert all(seen.values()), seen
