"""The AXI fence: an engine reset at any cycle leaves the memory a well-formed AXI conversation and the engine
an empty port (hdl/common/axifence.py)."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from syncfabric.hdl.common.axi import AXI4Signature
from syncfabric.hdl.common.axifence import AxiFence
from syncfabric.host.transports.axi_model import AxiRamModel

BEAT = 8
SIG = AXI4Signature(16, 8 * BEAT)
READ_BASE, WRITE_BASE = 0x0000, 0x4000      # reads from a region nobody writes, writes elsewhere


class _Master:
    """An AXI master on the fence's ``core`` side that behaves like an engine: reads random bursts of the
    read region and checks their data, writes random bursts (W beats delayed at random) and applies every
    accepted W beat to ``shadow``; whenever ``core_rst`` is high it drops everything it was doing, as a reset
    engine does."""

    def __init__(self, fence, rng, shadow, ram_init):
        self.f, self.rng, self.shadow, self.init = fence, rng, shadow, ram_init
        self.reads_checked = 0
        self.writes_done = 0

    async def reads(self, ctx):
        c = self.f.core
        pending = []            # (addr, beats) of accepted bursts, oldest first
        cur = None              # (addr, beats) presented, not accepted
        beat = 0
        while True:
            if cur is None and self.rng.random() < 0.3:
                beats = self.rng.randint(1, 8)
                addr = READ_BASE + BEAT * self.rng.randrange(0, 256)
                addr -= addr % 4096 + beats * BEAT > 4096 and BEAT * beats or 0
                cur = (addr, beats)
            ctx.set(c.arvalid, cur is not None)
            if cur is not None:
                ctx.set(c.araddr, cur[0]), ctx.set(c.arlen, cur[1] - 1)
                ctx.set(c.arsize, 3), ctx.set(c.arburst, 1)
            ready = self.rng.random() < 0.8
            ctx.set(c.rready, ready)
            _, _, rst, arready, rvalid, rdata, rlast = await ctx.tick().sample(
                self.f.core_rst, c.arready, c.rvalid, c.rdata, c.rlast)
            if rst:
                pending, cur, beat = [], None, 0
                ctx.set(c.arvalid, 0), ctx.set(c.rready, 0)
                continue
            if cur is not None and arready:
                pending.append(cur)
                cur = None
            if rvalid and ready:
                addr, beats = pending[0]
                want = int.from_bytes(self.init[addr + BEAT * beat - READ_BASE:][:BEAT], "little")
                assert rdata == want, f"read beat {beat} of {addr:#x}: {rdata:#x} != {want:#x}"
                assert bool(rlast) == (beat == beats - 1)
                self.reads_checked += 1
                beat += 1
                if beat == beats:
                    pending.pop(0)
                    beat = 0

    async def writes(self, ctx):
        c = self.f.core
        cur = None              # [addr, beats] presented, not accepted
        todo = []               # bursts whose W beats are still to send: [addr, beats, sent]
        owed_b = 0
        while True:
            if cur is None and self.rng.random() < 0.25 and len(todo) < 4:
                beats = self.rng.randint(1, 8)
                addr = WRITE_BASE + BEAT * self.rng.randrange(0, 256 - beats)
                addr -= addr % 4096 + beats * BEAT > 4096 and BEAT * beats or 0
                cur = [addr, beats]
                todo.append([addr, beats, 0])
            ctx.set(c.awvalid, cur is not None)
            if cur is not None:
                ctx.set(c.awaddr, cur[0]), ctx.set(c.awlen, cur[1] - 1)
                ctx.set(c.awsize, 3), ctx.set(c.awburst, 1)
            w = todo[0] if todo else None
            # a W beat may wait (the engine's data is not there yet), but once offered it stays
            offer = w is not None and (getattr(self, "_w_held", False) or self.rng.random() < 0.6)
            if offer:
                data = self.rng.getrandbits(8 * BEAT) if not getattr(self, "_w_held", False) else self._w_data
                self._w_data, self._w_held = data, True
                ctx.set(c.wvalid, 1), ctx.set(c.wdata, data), ctx.set(c.wstrb, 0xFF)
                ctx.set(c.wlast, w[2] == w[1] - 1)
            else:
                ctx.set(c.wvalid, 0)
            ctx.set(c.bready, 1)
            _, _, rst, awready, wready, bvalid = await ctx.tick().sample(self.f.core_rst, c.awready, c.wready, c.bvalid)
            if rst:
                cur, todo, self._w_held = None, [], False
                ctx.set(c.awvalid, 0), ctx.set(c.wvalid, 0), ctx.set(c.bready, 0)
                continue
            if cur is not None and awready:
                cur = None
                owed_b += 1
            if offer and wready:
                self._w_held = False
                a = w[0] + BEAT * w[2]
                self.shadow[a:a + BEAT] = self._w_data.to_bytes(BEAT, "little")
                w[2] += 1
                if w[2] == w[1]:
                    todo.pop(0)
            if bvalid:
                owed_b -= 1
                self.writes_done += 1


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_an_abort_at_a_random_cycle_leaves_a_clean_axi_conversation_and_memory(seed):
    """Random reads and writes through the fence into a memory model that checks every AXI rule (a VALID
    never taken back, payloads stable, WLAST where the burst ends); three aborts at random cycles. Every
    abort reaches ``quiet`` (nothing owed either way), the memory holds exactly the W beats the engine had
    handed over (the fence's own beats have no strobes), and after each release the engine's reads return
    the right data: no stray read beat or write response reaches it."""
    rng = random.Random(seed)
    fence = AxiFence(SIG, bursts=8)
    ram = AxiRamModel(fence.axi, size=1 << 15, seed=seed, latency=3, jitter=4, ready_prob=0.6, valid_prob=0.7)
    init = bytes(rng.getrandbits(8) for _ in range(0x4000))
    ram.write(READ_BASE, init)
    shadow = bytearray(ram.read(0, 1 << 15))
    master = _Master(fence, random.Random(seed + 100), shadow, init)
    m = Module()
    m.submodules.fence = fence
    sim = Simulator(m)
    sim.add_clock(1e-8)
    ram.add_to(sim)
    sim.add_process(master.reads)
    sim.add_process(master.writes)
    aborts = []

    async def control(ctx):
        for _ in range(3):
            await ctx.tick().repeat(rng.randint(50, 400))
            ctx.set(fence.abort, 1)
            await ctx.tick()
            start = 1
            while not ctx.get(fence.quiet):
                assert ctx.get(fence.busy)
                await ctx.tick()
                start += 1
                assert start < 2000, "the fence never became quiet"
            aborts.append(start)
            await ctx.tick().repeat(rng.randint(1, 20))
            ctx.set(fence.abort, 0)
            await ctx.tick().repeat(3)
            assert not ctx.get(fence.core_rst) and not ctx.get(fence.busy)
        await ctx.tick().repeat(300)

    sim.add_testbench(control)
    sim.run()
    assert len(aborts) == 3
    assert master.reads_checked > 100 and master.writes_done > 10
    assert ram.read(0, 1 << 15) == bytes(shadow)


def test_the_fence_passes_transfers_without_a_cycle_of_its_own():
    """Outside an abort the fence is wires: a read burst's address reaches the memory in the cycle the engine
    presents it, and its data comes back in the same cycle the memory offers it."""
    fence = AxiFence(SIG)
    m = Module()
    m.submodules.fence = fence
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        c, s = fence.core, fence.axi
        ctx.set(c.arvalid, 1), ctx.set(c.araddr, 0x40), ctx.set(c.arlen, 3)
        ctx.set(s.arready, 1)
        assert ctx.get(s.arvalid) and ctx.get(s.araddr) == 0x40 and ctx.get(c.arready)
        ctx.set(s.rvalid, 1), ctx.set(s.rdata, 0x1234), ctx.set(c.rready, 1)
        assert ctx.get(c.rvalid) and ctx.get(c.rdata) == 0x1234 and ctx.get(s.rready)
        await ctx.tick()
        ctx.set(c.awvalid, 1), ctx.set(c.awlen, 0), ctx.set(s.awready, 1)
        assert ctx.get(s.awvalid)
        await ctx.tick()
        ctx.set(c.awvalid, 0)
        ctx.set(c.wvalid, 1), ctx.set(c.wstrb, 0xFF), ctx.set(c.wlast, 1), ctx.set(s.wready, 1)
        assert ctx.get(s.wvalid) and ctx.get(s.wstrb) == 0xFF and ctx.get(c.wready)
        assert not ctx.get(fence.busy) and not ctx.get(fence.core_rst)

    sim.add_testbench(bench)
    sim.run()
