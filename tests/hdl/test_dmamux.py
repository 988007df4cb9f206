"""ReadMux in Amaranth's simulator: two requesters share one DMA reader under random valid/ready on every side.
Checked against a scoreboard: the reader sees every command once, ``a``'s before ``b``'s whenever both are
offered, and each requester gets exactly its own commands' beats, in order, whatever the stalls.

``SEED=<n>`` replaces the random seed.
"""

import random
from collections import deque

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.dmamux import ReadMux

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()


def test_read_mux_grants_a_first_and_steers_every_beat_back_to_its_requester():
    rng = random.Random(seed_for(7301))
    dut = ReadMux(CFG, depth=4)
    offers = {"a": deque(), "b": deque()}           # commands each requester still has to hand over
    for side, base in (("a", 0x1000), ("b", 0x8000)):
        for i in range(120):
            offers[side].append({"addr": base + 64 * i, "length": 64 * rng.randint(1, 3), "domain": 0})
    sent = {"a": [], "b": []}                       # commands each requester saw accepted, in order
    at_reader = deque()                             # (requester, beats) the reader still owes, in order
    got = {"a": [], "b": []}                        # (addr, beat index, last) each requester received
    stats = {"both": 0, "beats": 0}

    async def bench(ctx):
        beat, held = 0, {"a": False, "b": False}
        for cycle in range(8000):
            # a requester's valid, once up, stays up until its command is taken
            a_valid = held["a"] = bool(offers["a"]) and (held["a"] or rng.random() < 0.3)
            b_valid = held["b"] = bool(offers["b"]) and (held["b"] or rng.random() < 0.8)
            if a_valid:
                ctx.set(dut.a_cmd.payload, offers["a"][0])
            if b_valid:
                ctx.set(dut.b_cmd.payload, offers["b"][0])
            ctx.set(dut.a_cmd.valid, a_valid)
            ctx.set(dut.b_cmd.valid, b_valid)
            ctx.set(dut.cmd.ready, rng.random() < 0.7)
            ctx.set(dut.a_data.ready, rng.random() < 0.6)
            ctx.set(dut.b_data.ready, rng.random() < 0.6)
            d_valid = bool(at_reader) and rng.random() < 0.7
            if d_valid:
                side, cmd = at_reader[0]
                n = cmd["length"] // 64
                ctx.set(dut.data.payload, {"data": cmd["addr"] + beat, "last": beat == n - 1, "err": 0})
            ctx.set(dut.data.valid, d_valid)

            # the reader's side: a command reaches it only with room to route its data back
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                side = "a" if a_valid else "b"
                assert ctx.get(dut.cmd.payload.addr) == offers[side][0]["addr"], cycle
                # the handshake happens on the side granted (``a``'s ready need not wait for its valid)
                assert ctx.get(getattr(dut, f"{side}_cmd").ready) and ctx.get(dut.b_cmd.ready) == (not a_valid), cycle
                stats["both"] += a_valid and b_valid
                cmd = offers[side].popleft()
                held[side] = False
                sent[side].append(cmd)
                at_reader.append((side, cmd))
            else:
                # nothing is taken from a requester that the reader did not take
                assert not (a_valid and ctx.get(dut.a_cmd.ready)) and not (b_valid and ctx.get(dut.b_cmd.ready))
            # the data side: each beat goes to the requester of the command at the reader's head
            if d_valid:
                side, cmd = at_reader[0]
                other = "b" if side == "a" else "a"
                assert not ctx.get(getattr(dut, f"{other}_data").valid), cycle
                if ctx.get(dut.data.ready):
                    assert ctx.get(getattr(dut, f"{side}_data").valid), cycle
                    assert ctx.get(getattr(dut, f"{side}_data").payload.data) == cmd["addr"] + beat, cycle
                    got[side].append((cmd["addr"], beat, beat == cmd["length"] // 64 - 1))
                    stats["beats"] += 1
                    beat += 1
                    if beat == cmd["length"] // 64:
                        at_reader.popleft()
                        beat = 0
            await ctx.tick()

    run_sim(dut, bench)
    assert not offers["a"] and not offers["b"] and not at_reader, "the mux stalled"
    assert stats["both"] > 10, stats                 # the priority case happened
    for side in "ab":
        want = [(c["addr"], i, i == c["length"] // 64 - 1) for c in sent[side] for i in range(c["length"] // 64)]
        assert got[side] == want, side
