"""The deposit unit's landing scan and spill table in Amaranth's simulator against models: random landing
states, command tables, spill fills and clears, both scans' register stages.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.deposit_scan import LandingScan
from syncfabric.hdl.ace.spill_table import SpillTable

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
K, N, NC, E, W = CFG.n_ports, CFG.n_channels, CFG.n_cmds, CFG.spill_entries, CFG.beat_bytes
MMB, LB, NH = CFG.max_message_beats, CFG.landing_beats, CFG.landing_headers
TAGS = 6                                # few tags, so lookups hit, miss and see duplicates


def lookup(tag, tags, live):
    """(hit, cmd) of the lowest live command with ``tag``."""
    for i in range(NC):
        if live >> i & 1 and tags[i] == tag:
            return 1, i
    return 0, None


def random_header(rng):
    return {"tag": rng.randrange(TAGS), "chunk": rng.randrange(1 << 16), "key": rng.randrange(1 << 12),
            "length": rng.choice([0, 1, W, W + 1, rng.randrange(MMB * W + 1)]), "put": rng.randrange(2),
            "poison": rng.randrange(2), "vc": rng.randrange(N), "src": rng.randrange(4)}


def test_landing_scan_shows_each_channel_in_turn_a_cycle_later_and_classifies_its_head():
    """The pointer moves every cycle; the outputs describe the channel it pointed at a cycle before, with
    that cycle's landing state, and the lowest command live then with the head's tag, if it is still live.
    The command table behaves as the engine's: a slot's tag changes only while the slot is not live (a
    command is posted into a free slot), slots go live and dead at random."""
    rng = random.Random(seed_for(91))
    dut = LandingScan(CFG)

    async def bench(ctx):
        prev = None                         # (pointer, heads, hdr_valid, levels, hdr_levels, tags, live) before
        tags, live = [rng.randrange(TAGS) for _ in range(NC)], 0
        for cycle in range(2000):
            heads = [[random_header(rng) for _ in range(N)] for _ in range(K)]
            hv = [rng.randrange(1 << N) for _ in range(K)]
            levels = [[rng.randrange(LB + 1) for _ in range(N)] for _ in range(K)]
            hlevels = [[rng.randrange(NH + 1) for _ in range(N)] for _ in range(K)]
            tags, was_live = list(tags), live
            for i in range(NC):
                if was_live >> i & 1:
                    if rng.random() < 0.3:
                        live &= ~(1 << i)                       # retired (its tag stays until reused)
                elif rng.random() < 0.5:
                    tags[i] = rng.randrange(TAGS)               # posted into the free slot
                    live |= 1 << i
            for port, value in ((dut.heads, heads), (dut.hdr_valid, hv), (dut.levels, levels),
                                (dut.hdr_levels, hlevels), (dut.cmd_tag, tags), (dut.cmd_live, live)):
                ctx.set(port, value)
            if prev is not None:
                ptr, p_heads, p_hv, p_levels, p_hlevels, p_tags, p_live = prev
                k, c = divmod(ptr, N)
                h = p_heads[k][c]
                beats = -(-h["length"] // W)
                hit, cmd = lookup(h["tag"], p_tags, p_live)
                hit = int(hit and bool(live >> cmd & 1))
                assert (ctx.get(dut.port), ctx.get(dut.ch)) == (k, c), cycle
                for f in ("tag", "chunk", "key", "length", "put", "poison"):
                    assert ctx.get(dut.head[f]) == h[f], (cycle, f)
                assert ctx.get(dut.beats) == beats, cycle
                assert ctx.get(dut.complete) == int(bool(p_hv[k] >> c & 1) and h["put"]
                                                    and p_levels[k][c] >= beats), cycle
                assert ctx.get(dut.full) == int(LB - p_levels[k][c] < MMB or p_hlevels[k][c] >= NH), cycle
                assert ctx.get(dut.hit) == hit, cycle
                if hit:
                    assert ctx.get(dut.cmd) == cmd, cycle
            prev = (cycle % (K * N), heads, hv, levels, hlevels, tags, live)
            await ctx.tick()

    run_sim(dut, bench)


def test_spill_table_keeps_filled_entries_until_cleared_and_finds_free_and_ready_ones():
    """The pointer moves every cycle; the outputs show the entry it pointed at a cycle before with that cycle's
    command lookup, ready only if the entry was not written or freed in that cycle, is valid now and its
    command is still live."""
    rng = random.Random(seed_for(92))
    dut = SpillTable(CFG)

    async def bench(ctx):
        ent, valid = [None] * E, [0] * E
        staged = None                       # (entry index, its contents, lookup, untouched) of the cycle before
        for cycle in range(3000):
            if cycle % 500 == 0:
                used = rng.choice([0, 1, E // 2, E, 200])         # the register may exceed the table
            tags = [rng.randrange(TAGS) for _ in range(NC)]
            live = rng.randrange(1 << NC)
            fill = {"valid": int(rng.random() < 0.2), "e": rng.randrange(E),
                    "entry": {"tag": rng.randrange(TAGS), "chunk": rng.randrange(1 << 16),
                              "key": rng.randrange(1 << 12), "length": rng.randrange(1 << 20),
                              "bad": rng.choice([0, 16, 17])}}
            clear = {"valid": int(rng.random() < 0.2), "e": rng.randrange(E)}
            for port, value in ((dut.cmd_tag, tags), (dut.cmd_live, live), (dut.spill_entries, used),
                                (dut.fill, fill), (dut.clear, clear)):
                ctx.set(port, value)
            free = [e for e in range(min(E, used)) if not valid[e]]
            assert ctx.get(dut.free) == int(bool(free)), cycle
            if free:
                assert ctx.get(dut.free_e) == free[0], cycle
            if staged is not None:
                e, contents, (hit, cmd), untouched = staged
                assert ctx.get(dut.cur_e) == e, cycle
                if contents is not None:
                    for f, v in contents.items():
                        assert ctx.get(dut.cur[f]) == v, (cycle, f)
                if hit:
                    assert ctx.get(dut.cmd) == cmd, cycle
                want = untouched and valid[e] and hit and live >> cmd & 1
                assert ctx.get(dut.ready) == int(bool(want)), cycle
            ptr = cycle % E
            touched = (fill["valid"] and fill["e"] == ptr) or (clear["valid"] and clear["e"] == ptr)
            staged = (ptr, ent[ptr], lookup(ent[ptr]["tag"], tags, live) if ent[ptr] else (0, None), not touched)
            await ctx.tick()
            if clear["valid"]:
                valid[clear["e"]] = 0
            if fill["valid"]:                           # a fill wins over a clear of the same entry
                ent[fill["e"]], valid[fill["e"]] = fill["entry"], 1

    run_sim(dut, bench)
