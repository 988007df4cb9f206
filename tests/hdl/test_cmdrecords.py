"""CommandRecords in Amaranth's simulator against a model: random commands saved into random slots, rejections
and finished commands offered in the same and in different cycles against random backpressure; every cycle
the completion record and the handshakes are compared.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.cmdrecords import CommandRecords
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.common.layouts import completion_layout

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
CPL = completion_layout()


def facts(rng):
    return {"cookie": rng.getrandbits(64), "tag": rng.getrandbits(32), "collective": rng.getrandbits(8),
            "sq_index": rng.getrandbits(16), "start": rng.getrandbits(32)}


def test_rejections_and_finished_commands_become_completions_with_the_saved_facts_rejections_first():
    rng = random.Random(seed_for(7301))
    dut = CommandRecords(CFG)
    saved = [facts(rng) for _ in range(CFG.n_cmds)]
    seen = {"rej": 0, "done": 0, "both": 0}

    async def bench(ctx):
        # every slot saved once so that the model knows them all
        now0 = (1 << 32) - 1000 - rng.randrange(2000)   # the counter wraps during the run
        for i, f in enumerate(saved):
            ctx.set(dut.now, (now0 - len(saved) + i) & 0xFFFFFFFF)
            ctx.set(dut.cur, f)
            ctx.set(dut.save, 1)
            ctx.set(dut.save_slot, i)
            await ctx.tick()
        cur = saved[-1]                                   # in hand since the last save above
        just_saved = CFG.n_cmds - 1
        for cycle in range(4000):
            now = (now0 + cycle) & 0xFFFFFFFF             # the cycle counter: one more every cycle
            # a new command in hand now and then; it is not rejected in the cycle it arrives
            new_cmd = rng.random() < 0.3
            if new_cmd:
                cur = facts(rng)
            save, slot = int(rng.random() < 0.2), rng.randrange(CFG.n_cmds)
            rej = {"status": rng.randrange(1, 256), "detail": rng.getrandbits(32)}
            # a slot's command does not finish in the cycle after it was saved
            done = {"slot": rng.choice([s for s in range(CFG.n_cmds) if s != just_saved]),
                    "status": rng.getrandbits(8), "detail": rng.getrandbits(32),
                    "contributors": rng.getrandbits(len(dut.i_done.payload.contributors))}
            rv = int(not new_cmd and rng.random() < 0.3)
            dv, ready = int(rng.random() < 0.5), int(rng.random() < 0.7)
            ctx.set(dut.now, now)
            ctx.set(dut.cur, cur)
            ctx.set(dut.save, save)
            ctx.set(dut.save_slot, slot)
            ctx.set(dut.i_reject.valid, rv)
            ctx.set(dut.i_reject.payload, rej)
            ctx.set(dut.i_done.valid, dv)
            ctx.set(dut.i_done.payload, done)
            ctx.set(dut.o_cpl.ready, ready)

            # the model
            assert ctx.get(dut.o_cpl.valid) == (rv or dv), cycle
            assert ctx.get(dut.i_reject.ready) == (rv and ready), cycle
            assert ctx.get(dut.i_done.ready) == (not rv and dv and ready), cycle
            if rv or dv:
                f, src = (cur, rej) if rv else (saved[done["slot"]], done)
                want = {"cookie": f["cookie"], "tag": f["tag"], "collective": f["collective"],
                        "sq_index": f["sq_index"], "cycles": (now - f["start"]) & 0xFFFFFFFF,
                        "status": src["status"], "detail": src["detail"],
                        "contributors": 0 if rv else done["contributors"], "seq": 0, "reserved": 0}
                got = ctx.get(dut.o_cpl.payload)
                assert {name: getattr(got, name) for name in want} == want, cycle
                seen["both" if rv and dv else "rej" if rv else "done"] += 1
            await ctx.tick()
            just_saved = slot if save else None
            if save:
                saved[slot] = cur

    run_sim(dut, bench)
    assert min(seen.values()) > 100, seen
