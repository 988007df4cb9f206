"""ProgramMemories in Amaranth's simulator: IMEM halves and ROUTE entries written through the register-window
ports read back the same through every read port, one cycle after the address.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.progmem import ProgramMemories

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()


def test_words_written_through_the_windows_read_back_on_every_port_one_cycle_later():
    rng = random.Random(seed_for(130))
    dut = ProgramMemories(CFG)
    imem = {a: rng.randrange(1 << 64) for a in rng.sample(range(CFG.imem_words), 40)}
    route = {a: rng.randrange(16) for a in rng.sample(range(CFG.n_comms * CFG.max_ranks), 20)}

    async def bench(ctx):
        for a, w in imem.items():               # two 32-bit halves, as the window writes them
            for half in range(2):
                ctx.set(dut.imem_addr, a)
                ctx.set(dut.imem_wdata, (w >> (32 * half) & 0xFFFF_FFFF) * 0x1_0000_0001)
                ctx.set(dut.imem_we, 1 << half)
                await ctx.tick()
        ctx.set(dut.imem_we, 0)
        for a, v in route.items():
            ctx.set(dut.route_addr, a)
            ctx.set(dut.route_wdata, v)
            ctx.set(dut.route_we, 1)
            await ctx.tick()
        ctx.set(dut.route_we, 0)
        ia, ra = list(imem), list(route)
        for i in range(60):
            a, b, c, r = rng.choice(ia), rng.choice(ia), rng.choice(ia), rng.choice(ra)
            for port, v in ((dut.imem_addr, a), (dut.dec_imem_addr, b), (dut.seq_imem_addr, c),
                            (dut.route_addr, r), (dut.dec_route_addr, r)):
                ctx.set(port, v)
            await ctx.tick()
            assert ctx.get(dut.imem_rdata) == imem[a]
            assert ctx.get(dut.dec_imem_data) == imem[b] and ctx.get(dut.seq_imem_data) == imem[c]
            assert ctx.get(dut.route_rdata) == route[r] and ctx.get(dut.dec_route_data) == route[r]

    run_sim(dut, bench)
