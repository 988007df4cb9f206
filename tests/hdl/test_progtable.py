"""ProgramTable in Amaranth's simulator: the PTAB window against a word-granular memory model, and scans for
random keys against the lookup rule (first valid entry with the communicator, the collective, the algorithm
unless 0, the root for broadcast/reduce), two cycles per entry read.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.progtable import ProgramTable
from syncfabric.hdl.ace.regs import PTAB_ENTRY_WORDS
from syncfabric.hdl.common.layouts import program_entry_layout
from syncfabric.sim.golden.types import Collective

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
N = CFG.n_programs
PE = program_entry_layout()
WORD = (1 << 32) - 1


def entry_bits(rng):
    """A random entry whose key fields come from small ranges (so that keys hit), other fields random."""
    value = rng.getrandbits(32 * PTAB_ENTRY_WORDS)
    fields = {"valid": int(rng.random() < 0.8), "comm": rng.randrange(2), "collective": rng.randrange(1, 8),
              "algorithm": rng.randrange(3), "root": rng.randrange(3)}
    for name, v in fields.items():
        f = PE[name]
        value = value & ~(((1 << f.width) - 1) << f.offset) | v << f.offset
    return value


def field(value, name):
    f = PE[name]
    return value >> f.offset & ((1 << f.width) - 1)


def first_hit(table, key):
    comm, coll, alg, root = key
    for i, e in enumerate(table):
        if (field(e, "valid") and field(e, "comm") == comm & 0xF and field(e, "collective") == coll & 0xF
                and (alg == 0 or field(e, "algorithm") == alg)
                and (coll not in (Collective.BROADCAST, Collective.REDUCE) or field(e, "root") == root)):
            return i
    return None


def test_window_reads_back_writes_and_a_scan_finds_the_first_matching_entry_in_two_cycles_per_entry():
    rng = random.Random(seed_for(7201))
    dut = ProgramTable(CFG)
    table = [0] * N
    hits = misses = 0

    async def bench(ctx):
        nonlocal hits, misses
        prog, found = 0, 0
        for rnd in range(150):
            # window: writes with random word enables, each followed by a read of a random entry
            for _ in range(rng.randint(0, 6)):
                a, we, v = rng.randrange(N), rng.getrandbits(PTAB_ENTRY_WORDS), entry_bits(rng)
                if rng.random() < 0.6:
                    we = (1 << PTAB_ENTRY_WORDS) - 1
                ctx.set(dut.ptab_addr, a)
                ctx.set(dut.ptab_we, we)
                ctx.set(dut.ptab_wdata, v)
                await ctx.tick()
                ctx.set(dut.ptab_we, 0)
                for w in range(PTAB_ENTRY_WORDS):
                    if we >> w & 1:
                        table[a] = table[a] & ~(WORD << 32 * w) | v & (WORD << 32 * w)
                r = rng.randrange(N)
                ctx.set(dut.ptab_addr, r)
                await ctx.tick()
                assert ctx.get(dut.ptab_rdata) == table[r], (rnd, r)
            # a scan: often the key of an entry in the table
            e = rng.choice(table)
            key = [field(e, "comm"), field(e, "collective"), field(e, "algorithm"), field(e, "root")]
            if rng.random() < 0.3:
                key[2] = 0
            if rng.random() < 0.3:
                key = [rng.randrange(3), rng.randrange(1, 9), rng.randrange(4), rng.randrange(4)]
            hit = first_hit(table, key)
            for port, v in zip(("comm", "collective", "algorithm", "root"), key):
                ctx.set(getattr(dut, port), v)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            want = 2 * (hit + 1 if hit is not None else N)
            for t in range(1, want):
                assert not ctx.get(dut.done), (rnd, t)
                assert ctx.get(dut.found) == 0
                await ctx.tick()
            assert ctx.get(dut.done), (rnd, key, hit)
            await ctx.tick()
            assert not ctx.get(dut.done)
            if hit is not None:
                prog, found = table[hit] & ((1 << PE.size) - 1), 1
                hits += 1
            else:
                found = 0
                misses += 1
            assert ctx.get(dut.found) == found, (rnd, key, hit)
            assert ctx.get(dut.prog.as_value()) == prog, (rnd, key, hit)   # held from the last hit when none

    run_sim(dut, bench)
    assert hits > 30 and misses > 10, (hits, misses)
