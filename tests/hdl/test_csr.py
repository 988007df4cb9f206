"""CsrBank in Amaranth's simulator: every access type, 64-bit halves, arrays, windows of latency 0/1/2,
unmapped and misaligned addresses, the bus timing contract, and a random access sequence checked against a
model of the register map. The ACE map's bank is checked for its constants and its windows, and the
cocotb transport is run against a bank on Verilator and Icarus (``SEED=<n>`` replaces the random seeds).
"""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Elaboratable, Module, Signal, UnusedElaboratable
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.regs import ACE_ID, ace_regmap
from syncfabric.hdl.common.csr import CsrBank, CsrSignature
from syncfabric.hdl.common.regmap import (Field, Register, RegisterArray, RegisterMap, RegisterMapError,
                                          Window)
from syncfabric.host.transports.amaranth import csr_request

from sim_helpers import run_sim, seed_for

#: Read latency of each test window (cycles from re to rdata).
LATENCY = {"MEM": 1, "ROM": 0, "SLOW": 2}
#: The bank's ack latencies (request cycle to ack cycle, see the csr module docstring): every write, every
#: read that is not a window read; a window read takes 3 + the window's latency.
WRITE_LATENCY, READ_LATENCY = 2, 3
ROM_WORDS = (0xDEADBEEF, 0x01234567, 0x89ABCDEF, 0xFFFFFFFF)


def make_regmap():
    """A map with one of everything the bank supports."""
    return RegisterMap("test", [
        Register("ID", 0x00, "ro", init=0x1D0C0DE5, doc="identity"),
        Register("CTRL", 0x04, "rw", fields=(Field("en", 0), Field("mode", 4, 3)), init=0x5),
        Register("DOORBELL", 0x08, "wo"),
        Register("IRQ", 0x0C, "w1c", fields=(Field("done", 0), Field("err", 1))),
        Register("BASE", 0x10, "rw", 64, init=0x1122334455667788),
        Register("COUNT", 0x18, "ro", 64),
        Register("EVENTS", 0x20, "w1c", 64),
        Register("STAT", 0x28, "ro"),
        RegisterArray("CH", 0x40, 3, 0x10, (Register("CFG", 0, "rw"), Register("ADDR", 8, "rw", 64))),
        RegisterArray("PART", 0x80, 2, 4, (Register("PART", 0, "rw"),), prefix="", inits={("PART", 1): 7}),
        Window("MEM", 0x100, 16),
        Window("ROM", 0x200, len(ROM_WORDS), access="ro"),
        Window("SLOW", 0x300, 8),
    ], size=0x400)


class Harness(Elaboratable):
    """The bank with a memory behind each window, with the window's read latency."""

    def __init__(self, regmap=None, latency=None):
        self.regmap = regmap if regmap is not None else make_regmap()
        self.latency = LATENCY if latency is None else latency
        self.bank = CsrBank(self.regmap, window_latency=self.latency)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bank = bank = self.bank
        for w in self.regmap.windows():
            port = bank.window(w.name)
            init = ROM_WORDS if w.name == "ROM" else []
            mem = Memory(shape=32, depth=w.words, init=init)
            m.submodules[f"mem_{w.name.lower()}"] = mem
            lat = self.latency.get(w.name, 1)
            rd = mem.read_port(domain="comb" if lat == 0 else "sync")
            m.d.comb += rd.addr.eq(port.addr)
            data = rd.data
            for _ in range(max(0, lat - 1)):        # extra pipeline stages
                stage = Signal(32)
                m.d.sync += stage.eq(data)
                data = stage
            m.d.comb += port.rdata.eq(data)
            if w.access == "rw":
                wr = mem.write_port()
                m.d.comb += [wr.addr.eq(port.addr), wr.data.eq(port.wdata), wr.en.eq(port.we)]
        return m


class Host:
    """Bus master for testbenches: one access at a time, checking that ack pulses exactly once."""

    def __init__(self, ctx, bus, max_wait=16):
        self.ctx, self.bus, self.max_wait = ctx, bus, max_wait
        self.last_latency = None

    async def access(self, addr, write, wdata=0):
        ctx, bus = self.ctx, self.bus
        await _request(ctx, bus, addr, write, wdata)
        latency = 1
        while not ctx.get(bus.ack):
            await ctx.tick()
            latency += 1
            assert latency <= self.max_wait, f"no ack for {'write' if write else 'read'} of {addr:#x}"
        rdata = ctx.get(bus.rdata)
        self.last_latency = latency
        await ctx.tick()
        assert not ctx.get(bus.ack), "ack stayed high for more than one cycle"
        return rdata

    async def read(self, addr):
        return await self.access(addr, False)

    async def write(self, addr, value):
        await self.access(addr, True, value)


# ---- access types ---------------------------------------------------------------------------------------------

def test_rw_register_keeps_value_and_strobes_once_per_write():
    h = Harness()
    bank, rm = h.bank, h.regmap
    strobes = []

    async def watch(ctx):
        async for clk_edge, rst, s in ctx.tick().sample(bank.strobe("CTRL")):
            strobes.append(s)

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        assert await host.read(rm.addr("CTRL")) == 0x5          # reset value
        assert ctx.get(bank.reg("CTRL")) == 0x5
        assert ctx.get(bank.field("CTRL", "mode")) == 0
        await host.write(rm.addr("CTRL"), rm.encode("CTRL", en=1, mode=6))
        assert ctx.get(bank.reg("CTRL")) == 0x61
        assert ctx.get(bank.field("CTRL", "mode")) == 6
        assert await host.read(rm.addr("CTRL")) == 0x61
        await host.write(rm.addr("CTRL"), 0xFFFFFFFF)
        assert await host.read(rm.addr("CTRL")) == 0xFFFFFFFF

    sim = Simulator(h)
    sim.add_clock(1e-6)
    sim.add_process(watch)
    sim.add_testbench(bench)
    sim.run()
    assert sum(strobes) == 2, "one strobe per host write"


def test_a_locked_register_ignores_host_writes_and_reports_each_one():
    """A lock the engine holds on CTRL and on one half of an array's 64-bit register: writes are acknowledged
    as usual but change nothing and strobe nothing, ``refused`` pulses once per refused word, the other
    registers and the unlocked copy take their writes, and writes go through again once the lock drops."""
    h = Harness()
    bank, rm = h.bank, h.regmap
    lock_ctrl, lock_addr = bank.lock("CTRL"), bank.lock("CH_ADDR", 1)
    strobes, refused = [], []

    async def watch(ctx):
        async for _, _, s, r in ctx.tick().sample(bank.strobe("CTRL"), bank.refused):
            strobes.append(s)
            refused.append(r)

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        ctx.set(lock_ctrl, 1)
        ctx.set(lock_addr, 1)
        await host.write(rm.addr("CTRL"), 0x3)
        assert host.last_latency == WRITE_LATENCY
        assert await host.read(rm.addr("CTRL")) == 0x5
        await host.write(rm.addr("CH_ADDR", 1), 0xAAAA)          # both halves refused
        await host.write(rm.addr("CH_ADDR", 1) + 4, 0xBBBB)
        await host.write(rm.addr("CH_ADDR", 0), 0x1234)          # another copy: taken
        await host.write(rm.addr("BASE"), 0x77)                  # another register: taken
        assert ctx.get(bank.reg("CH_ADDR", 1)) == 0 and ctx.get(bank.reg("CH_ADDR", 0)) == 0x1234
        assert ctx.get(bank.reg("BASE")) & 0xFFFFFFFF == 0x77
        await ctx.tick()
        assert sum(refused) == 3 and sum(strobes) == 0
        ctx.set(lock_ctrl, 0)
        ctx.set(lock_addr, 0)
        await host.write(rm.addr("CTRL"), 0x3)
        await host.write(rm.addr("CH_ADDR", 1), 0xAAAA)
        assert await host.read(rm.addr("CTRL")) == 0x3 and ctx.get(bank.reg("CH_ADDR", 1)) == 0xAAAA
        await ctx.tick()
        assert sum(refused) == 3 and sum(strobes) == 1

    sim = Simulator(h)
    sim.add_clock(1e-6)
    sim.add_process(watch)
    sim.add_testbench(bench)
    sim.run()
    with pytest.raises(RegisterMapError, match="only rw registers can be locked"):
        h.bank.lock("STAT")


def test_ro_register_is_sampled_on_read_and_ignores_writes():
    h = Harness()
    bank, rm = h.bank, h.regmap

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        assert await host.read(rm.addr("ID")) == 0x1D0C0DE5      # undriven: its init
        ctx.set(bank.reg("STAT"), 0xCAFE)
        assert await host.read(rm.addr("STAT")) == 0xCAFE
        await host.write(rm.addr("STAT"), 0x1234)
        assert await host.read(rm.addr("STAT")) == 0xCAFE
        ctx.set(bank.reg("STAT"), 0xBEEF)
        assert await host.read(rm.addr("STAT")) == 0xBEEF
        assert ctx.get(bank.unmapped) == 0, "a write to a ro register is mapped, not counted"

    run_sim(h, bench)


def test_wo_register_strobes_and_reads_zero():
    h = Harness()
    bank, rm = h.bank, h.regmap
    seen = []

    async def watch(ctx):
        async for _, _, s, v in ctx.tick().sample(bank.strobe("DOORBELL"), bank.reg("DOORBELL")):
            if s:
                seen.append(v)

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        await host.write(rm.addr("DOORBELL"), 17)
        await host.write(rm.addr("DOORBELL"), 17)       # the same value rings again
        await host.write(rm.addr("DOORBELL"), 3)
        assert await host.read(rm.addr("DOORBELL")) == 0
        assert ctx.get(bank.reg("DOORBELL")) == 3

    sim = Simulator(h)
    sim.add_clock(1e-6)
    sim.add_process(watch)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [17, 17, 3]


def test_w1c_engine_sets_host_clears_and_set_wins_a_same_cycle_clear():
    h = Harness()
    bank, rm = h.bank, h.regmap

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        irq = rm.addr("IRQ")
        ctx.set(bank.set("IRQ"), 0b01)
        await ctx.tick()
        ctx.set(bank.set("IRQ"), 0)
        assert await host.read(irq) == 0b01
        ctx.set(bank.set("IRQ"), 0b10)
        await ctx.tick()
        ctx.set(bank.set("IRQ"), 0)
        assert await host.read(irq) == 0b11
        await host.write(irq, 0b01)                       # clears only the bit written as 1
        assert await host.read(irq) == 0b10
        await host.write(irq, 0)
        assert await host.read(irq) == 0b10
        # set and clear of the same bit in the request cycle: the bit stays set
        ctx.set(bank.set("IRQ"), 0b10)
        ctx.set(bank.bus.addr, irq)
        ctx.set(bank.bus.wdata, 0b10)
        ctx.set(bank.bus.we, 1)
        await ctx.tick()
        ctx.set(bank.bus.we, 0)
        ctx.set(bank.set("IRQ"), 0)
        await ctx.tick()
        assert await host.read(irq) == 0b10
        await host.write(irq, 0b11)
        assert await host.read(irq) == 0
        # a 64-bit w1c register: each half clears its own bits
        ctx.set(bank.set("EVENTS"), (1 << 63) | (1 << 40) | 1)
        await ctx.tick()
        ctx.set(bank.set("EVENTS"), 0)
        ev = rm.addr("EVENTS")
        assert await host.read(ev) == 1
        assert await host.read(ev + 4) == (1 << 31) | (1 << 8)
        await host.write(ev + 4, 1 << 31)
        assert ctx.get(bank.reg("EVENTS")) == (1 << 40) | 1

    run_sim(h, bench)


def test_64bit_registers_are_two_words_and_ro_high_word_is_captured_with_low():
    h = Harness()
    bank, rm = h.bank, h.regmap

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        base = rm.addr("BASE")
        assert await host.read(base) == 0x55667788
        assert await host.read(base + 4) == 0x11223344
        await host.write(base + 4, 0xAABBCCDD)              # one half leaves the other alone
        assert ctx.get(bank.reg("BASE")) == 0xAABBCCDD55667788
        await host.write(base, 0x01020304)
        assert ctx.get(bank.reg("BASE")) == 0xAABBCCDD01020304
        count = rm.addr("COUNT")
        ctx.set(bank.reg("COUNT"), 0x00000001_FFFFFFFF)
        lo = await host.read(count)
        ctx.set(bank.reg("COUNT"), 0x00000002_00000000)    # the counter carries between the two reads
        hi = await host.read(count + 4)
        assert (hi << 32 | lo) == 0x00000001_FFFFFFFF, "the high word comes from the low word's read"
        assert await host.read(count) == 0
        assert await host.read(count + 4) == 2

    run_sim(h, bench)


def test_array_registers_are_independent_and_take_per_index_reset_values():
    h = Harness()
    bank, rm = h.bank, h.regmap

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        assert [await host.read(rm.addr("PART", i)) for i in range(2)] == [0, 7]
        for i in range(3):
            await host.write(rm.addr("CH_CFG", i), 0x100 + i)
            await host.write(rm.addr("CH_ADDR", i) + 4, 0x200 + i)
        for i in range(3):
            assert ctx.get(bank.reg("CH_CFG", i)) == 0x100 + i
            assert ctx.get(bank.reg("CH_ADDR", i)) == (0x200 + i) << 32
            assert await host.read(rm.addr("CH_CFG", i)) == 0x100 + i

    run_sim(h, bench)


# ---- windows --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("window", ["MEM", "SLOW"])
def test_window_writes_reach_the_memory_and_reads_wait_for_its_latency(window):
    h = Harness()
    bank, rm = h.bank, h.regmap
    w = rm.window(window)

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        for i in range(w.words):
            await host.write(w.addr(i), 0x1000 * i + 7)
            assert host.last_latency == WRITE_LATENCY          # was 1 before the bank registered the request
        for i in reversed(range(w.words)):
            assert await host.read(w.addr(i)) == 0x1000 * i + 7
            assert host.last_latency == 3 + LATENCY[window]    # was 2 + latency
        port = bank.window(window)
        assert ctx.get(port.addr) == 0, "addr stays on the last access's word"

    run_sim(h, bench)


def test_read_only_window_ignores_writes_and_reads_combinationally():
    h = Harness()
    bank, rm = h.bank, h.regmap
    w = rm.window("ROM")

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        await host.write(w.addr(1), 0)
        assert [await host.read(w.addr(i)) for i in range(w.words)] == list(ROM_WORDS)
        assert host.last_latency == 3 + 0       # a latency-0 window (was 2)

    run_sim(h, bench)


# ---- exact timing --------------------------------------------------------------------------------------------

def test_ack_latency_is_exactly_the_documented_one_for_every_access_type():
    """Registers and unmapped addresses: writes 2 cycles, reads 3; windows: writes 2, reads 3 + latency."""
    h = Harness()
    bank, rm = h.bank, h.regmap
    regs = [a for r in rm.registers() for a in r.addresses]
    holes = [0x2C, 0x3FC, rm.addr("CTRL") + 1, rm.addr("MEM") + 2, 0xFFFC]

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        for a in regs + holes:
            await host.write(a, 0)
            assert host.last_latency == WRITE_LATENCY, f"write of {a:#x}"
            await host.read(a)
            assert host.last_latency == READ_LATENCY, f"read of {a:#x}"
        for w in rm.windows():
            for i in (0, w.words - 1):
                await host.write(w.addr(i), 0)
                assert host.last_latency == WRITE_LATENCY, f"write of {w.name}[{i}]"
                await host.read(w.addr(i))
                assert host.last_latency == 3 + LATENCY[w.name], f"read of {w.name}[{i}]"

    run_sim(h, bench)


_request = csr_request          # returns after the request cycle's clock edge (cycle 1)


def test_write_strobe_value_window_pulses_ro_sampling_w1c_and_unmapped_cycle_by_cycle():
    h = Harness()
    bank, rm = h.bank, h.regmap
    bus = bank.bus

    async def bench(ctx):
        # rw write: the new value, the strobe and ack all in cycle 2, nothing earlier
        await _request(ctx, bus, rm.addr("CTRL"), True, 0x33)
        assert (ctx.get(bus.ack), ctx.get(bank.strobe("CTRL")), ctx.get(bank.reg("CTRL"))) == (0, 0, 0x5)
        await ctx.tick()
        assert (ctx.get(bus.ack), ctx.get(bank.strobe("CTRL")), ctx.get(bank.reg("CTRL"))) == (1, 1, 0x33)
        await ctx.tick()
        assert (ctx.get(bus.ack), ctx.get(bank.strobe("CTRL"))) == (0, 0)

        # ro read: sampled in the decode cycle (cycle 1), rdata with ack in cycle 3, 0 otherwise
        stat = bank.reg("STAT")
        ctx.set(stat, 0xA)
        await _request(ctx, bus, rm.addr("STAT"), False)
        ctx.set(stat, 0xB)
        await ctx.tick()
        ctx.set(stat, 0xC)
        assert (ctx.get(bus.ack), ctx.get(bus.rdata)) == (0, 0)
        await ctx.tick()
        assert (ctx.get(bus.ack), ctx.get(bus.rdata)) == (1, 0xB)
        await ctx.tick()
        assert (ctx.get(bus.ack), ctx.get(bus.rdata)) == (0, 0)

        # w1c: the clear takes effect in the decode cycle; a set in that cycle or in the request cycle wins,
        # a set one cycle before the request does not
        irq, s = bank.reg("IRQ"), bank.set("IRQ")
        for set_cycle, stays in ((-1, False), (0, True), (1, True)):
            ctx.set(s, 0b11)
            await ctx.tick()
            ctx.set(s, 0)
            await ctx.tick()
            assert ctx.get(irq) == 0b11
            for cycle in (-1, 0, 1, 2):
                ctx.set(s, 0b10 if cycle == set_cycle else 0)
                if cycle == 0:
                    await _request(ctx, bus, rm.addr("IRQ"), True, 0b11)
                else:
                    await ctx.tick()
                if cycle == 1:
                    assert ctx.get(bus.ack) == 1 and ctx.get(irq) == (0b10 if stays else 0), set_cycle
            ctx.set(s, 0)
            assert ctx.get(irq) == (0b10 if stays else 0), set_cycle
            await _request(ctx, bus, rm.addr("IRQ"), True, 0b11)
            await ctx.tick()
            await ctx.tick()
            assert ctx.get(irq) == 0

        # window write: we, addr, wdata in cycle 2 with ack; window read: re in cycle 2, ack in 3 + latency
        w, port = rm.window("SLOW"), bank.window("SLOW")
        await _request(ctx, bus, w.addr(5), True, 0x55)
        assert (ctx.get(port.we), ctx.get(bus.ack)) == (0, 0)
        await ctx.tick()
        assert (ctx.get(port.we), ctx.get(port.addr), ctx.get(port.wdata), ctx.get(bus.ack)) == (1, 5, 0x55, 1)
        await ctx.tick()
        await _request(ctx, bus, w.addr(5), False)
        assert ctx.get(port.re) == 0
        await ctx.tick()
        assert (ctx.get(port.re), ctx.get(port.addr)) == (1, 5)
        for _ in range(LATENCY["SLOW"]):
            assert ctx.get(bus.ack) == 0
            await ctx.tick()
        assert ctx.get(bus.ack) == 0
        await ctx.tick()
        assert (ctx.get(bus.ack), ctx.get(bus.rdata)) == (1, 0x55)      # 3 + latency cycles after the request
        await ctx.tick()

        # unmapped: counted by the cycle after ack
        before = ctx.get(bank.unmapped)
        await _request(ctx, bus, 0x2C, True, 1)
        await ctx.tick()
        assert ctx.get(bus.ack) == 1
        await ctx.tick()
        assert ctx.get(bank.unmapped) == before + 1

    run_sim(h, bench)


# ---- unmapped -------------------------------------------------------------------------------------------------

def test_unmapped_and_misaligned_accesses_read_zero_write_nothing_and_are_counted():
    h = Harness()
    bank, rm = h.bank, h.regmap
    holes = [0x2C, 0x30, 0x3FC, 0x110 + 0x40, rm.addr("CTRL") + 1, rm.addr("MEM") + 2, 0xFFFC]

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        for a in holes:
            await host.write(a, 0xFFFFFFFF)
            assert await host.read(a) == 0
        assert ctx.get(bank.unmapped) == 2 * len(holes)
        assert await host.read(rm.addr("CTRL")) == 0x5, "a misaligned write does not touch the register"
        assert await host.read(rm.addr("MEM")) == 0

    run_sim(h, bench)


# ---- random sequence against a model --------------------------------------------------------------------------

class BankModel:
    """What the host should read: the register map's rules applied to a dict of values."""

    def __init__(self, regmap, rom):
        self.rm = regmap
        self.values = {r.key: r.init for r in regmap.registers()}
        self.mem = {w.name: list(rom) if w.name == "ROM" else [0] * w.words for w in regmap.windows()}
        self.captured = {}

    def write(self, addr, value):
        hit = self.rm.at(addr)
        if hit is None:
            return
        item, word = hit
        if isinstance(item, Window):
            if item.access == "rw":
                self.mem[item.name][word] = value
            return
        shift = 32 * word
        mask = 0xFFFFFFFF << shift
        if item.access in ("rw", "wo"):
            self.values[item.key] = (self.values[item.key] & ~mask) | (value << shift)
        elif item.access == "w1c":
            self.values[item.key] &= ~(value << shift)

    def read(self, addr, ro_values):
        hit = self.rm.at(addr)
        if hit is None:
            return 0
        item, word = hit
        if isinstance(item, Window):
            return self.mem[item.name][word]
        if item.access == "wo":
            return 0
        value = ro_values.get(item.key, self.values[item.key]) if item.access == "ro" else self.values[item.key]
        if item.access == "ro" and item.width == 64:
            if word == 0:
                self.captured[item.key] = value >> 32
            else:
                return self.captured.get(item.key, 0)
        return (value >> (32 * word)) & 0xFFFFFFFF


def test_random_accesses_match_the_register_map_model():
    rng = random.Random(seed_for(7))
    h = Harness()
    bank, rm = h.bank, h.regmap
    model = BankModel(rm, ROM_WORDS)
    addrs = [a for r in rm.registers() for a in r.addresses]
    addrs += [w.addr(i) for w in rm.windows() for i in range(w.words)]
    addrs += [0x2C, 0x3FC, 0x41, 0x8000 - 4]
    ro = [r for r in rm.registers() if r.access == "ro" and r.init == 0]
    w1c = [r for r in rm.registers() if r.access == "w1c"]

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        ro_values = {}
        for _ in range(600):
            r = rng.choice(ro)
            ro_values[r.key] = rng.getrandbits(r.width)
            ctx.set(bank.reg(r.name, r.index), ro_values[r.key])
            if rng.random() < 0.2:
                r = rng.choice(w1c)
                bits = rng.getrandbits(r.width) & rng.getrandbits(r.width)
                ctx.set(bank.set(r.name, r.index), bits)
                await ctx.tick()
                ctx.set(bank.set(r.name, r.index), 0)
                model.values[r.key] |= bits
            addr = rng.choice(addrs)
            if rng.random() < 0.5:
                value = rng.getrandbits(32)
                await host.write(addr, value)
                model.write(addr, value)
            else:
                assert await host.read(addr) == model.read(addr, ro_values), f"read of {addr:#x}"
        for r in rm.registers():
            if r.access in ("rw", "wo", "w1c"):
                assert ctx.get(bank.reg(r.name, r.index)) == model.values[r.key], r.label

    run_sim(h, bench)


# ---- construction errors --------------------------------------------------------------------------------------

def test_bank_accessors_reject_wrong_access_types_and_names():
    with warnings.catch_warnings():     # the banks built here are never elaborated, on purpose
        warnings.simplefilter("ignore", UnusedElaboratable)
        bank = CsrBank(make_regmap())
        with pytest.raises(RegisterMapError, match="only rw and wo"):
            bank.strobe("ID")
        with pytest.raises(RegisterMapError, match="not a w1c"):
            bank.set("CTRL")
        with pytest.raises(RegisterMapError, match="no register 'NOPE'"):
            bank.reg("NOPE")
        with pytest.raises(RegisterMapError, match="give an index"):
            bank.reg("CH_CFG")
        with pytest.raises(RegisterMapError, match="no window"):
            bank.window("CTRL")
        with pytest.raises(RegisterMapError, match="unknown windows"):
            CsrBank(make_regmap(), window_latency={"IMEM": 1})
        big = RegisterMap("big", [Window("W", 0x10000, 4)], size=0x20000)
        with pytest.raises(RegisterMapError, match="needs a 17-bit address"):
            CsrBank(big, addr_width=16)
        assert len(CsrBank(big).bus.addr) == 17
        del bank
        gc.collect()
    assert CsrSignature(16) == CsrSignature(16) != CsrSignature(20)


# ---- the ACE map -----------------------------------------------------------------------------------------------

def test_ace_bank_reads_its_constants_and_reaches_every_window():
    cfg = AceConfig.small()
    rm = ace_regmap(cfg)
    h = Harness(rm, latency={})
    bank = h.bank

    async def bench(ctx):
        host = Host(ctx, bank.bus)
        assert await host.read(rm.addr("ID")) == ACE_ID
        cfg0 = rm.decode("CFG0", await host.read(rm.addr("CFG0")))
        assert cfg0 == {"beat_log2": 4, "n_ports": cfg.n_ports, "n_fsms": cfg.n_fsms, "n_buffers": cfg.n_buffers,
                        "n_cmds": cfg.n_cmds, "n_comms": cfg.n_comms}
        assert rm.decode("CFG2", await host.read(rm.addr("CFG2")))["max_ranks"] == cfg.max_ranks
        assert await host.read(rm.addr("IMEM_WORDS")) == cfg.imem_words
        assert await host.read(rm.addr("CHUNK_BEATS")) == cfg.chunk_beats
        assert [await host.read(rm.addr("PART", i)) for i in range(5)] == [4, 0, 0, 0, 4]
        for name in ("PTAB", "ROUTE", "IMEM"):
            w = rm.window(name)
            for i in (0, w.words - 1):
                await host.write(w.addr(i), 0xA5A50000 + i)
                assert await host.read(w.addr(i)) == 0xA5A50000 + i
        await host.write(rm.addr("SQ_TAIL"), 3)
        assert ctx.get(bank.reg("SQ_TAIL")) == 3
        assert ctx.get(bank.unmapped) == 0

    run_sim(h, bench)


# ---- the cocotb transport against a bank ------------------------------------------------------------------------

@pytest.mark.cocotb
@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_cocotb_transport_drives_a_bank_and_the_async_driver_uses_it(sim):
    from syncfabric.host.transports.harness import run_cocotb, simulators
    from syncfabric.tb.transport_tb import CsrTestTop

    if sim not in simulators():
        pytest.skip(f"{sim} is not installed")
    summary = run_cocotb(CsrTestTop, {}, toplevel="csr_test_top", test_module="syncfabric.tb.transport_tb",
                         sim=sim, seed=seed_for(11))
    assert summary["tests"] >= 1
