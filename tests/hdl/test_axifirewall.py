"""The AXI firewall (hdl/common/axifirewall.py): bursts inside an enabled region (whole 4 KiB pages) open to
their protection domain reach the memory, the others are answered by the firewall with SLVERR and never reach
it; responses stay in order; a passed burst takes no cycle."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from syncfabric.hdl.common.axi import AXI4Signature, AxiResp
from syncfabric.hdl.common.axifirewall import AxiFirewall
from syncfabric.host.transports.axi_model import AxiRamModel

BEAT = 8
SIG = AXI4Signature(16, 8 * BEAT)
SIZE = 1 << 15
#: Protection domains the bursts carry.
DOMAINS = 3
#: [base, end, enable, domains] in bytes, whole 4 KiB pages, and the mask of domains the region admits: a
#: region for reads (domains 0 and 1), one for writes (domains 1 and 2), a disabled region over the write
#: region's second page and beyond
REGIONS = [(0x0000, 0x2000, 1, 0b011), (0x4000, 0x6000, 1, 0b110), (0x5000, 0x8000, 0, 0b111)]


def inside(addr, beats, domain):
    return any(en and mask >> domain & 1 and base <= addr and addr + beats * BEAT <= end
               for base, end, en, mask in REGIONS)


def random_burst(rng, write):
    """A burst near a region's edge or anywhere, in a random domain: about half of them pass. Reads that pass
    stay in region 0 and writes that pass in region 1 (a read racing a write to the same bytes has no single
    right answer)."""
    while True:
        addr, beats = _burst(rng)
        domain = rng.randrange(DOMAINS)
        if not inside(addr, beats, domain) or (addr >= REGIONS[1][0]) == write:
            return addr, beats, domain


def _burst(rng):
    beats = rng.randint(1, 8)
    base, end, _, _ = rng.choice(REGIONS)
    addr = rng.choice([base - BEAT * rng.randint(0, 4), end - BEAT * rng.randint(0, 10),
                       BEAT * rng.randrange(SIZE // BEAT)])
    addr = max(0, min(addr, SIZE - beats * BEAT))
    addr -= addr % BEAT
    if addr % 4096 + beats * BEAT > 4096:      # no burst crosses a 4 KiB boundary (AXI)
        addr -= addr % 4096 + beats * BEAT - 4096
    return addr, beats


class _Master:
    """An engine-like AXI master on the firewall's ``core``: random read and write bursts (W beats delayed at
    random, R and B taken at random), reads checked against the memory's contents or, refused, against zeros
    with SLVERR on every beat; passed writes applied to ``shadow``."""

    def __init__(self, fw, rng, shadow):
        self.f, self.rng, self.shadow = fw, rng, shadow
        self.reads = {True: 0, False: 0}
        self.writes = {True: 0, False: 0}
        self.refused = 0
        self.closed = {"read": 0, "write": 0}      # refused only because the region is closed to the domain

    def count(self, burst, kind):
        ok = inside(*burst)
        self.refused += not ok
        self.closed[kind] += not ok and any(inside(burst[0], burst[1], d) for d in range(DOMAINS))
        return ok

    async def read_side(self, ctx):
        c, rng = self.f.core, self.rng
        pending, cur, beat = [], None, 0
        while True:
            if cur is None and rng.random() < 0.4:
                cur = random_burst(rng, False)
            ctx.set(c.arvalid, cur is not None)
            if cur is not None:
                ctx.set(c.araddr, cur[0]), ctx.set(c.arlen, cur[1] - 1), ctx.set(c.arsize, 3), ctx.set(c.arburst, 1)
                ctx.set(self.f.ar_domain, cur[2])
            ready = rng.random() < 0.7
            ctx.set(c.rready, ready)
            _, _, arready, rvalid, rdata, rresp, rlast = await ctx.tick().sample(
                c.arready, c.rvalid, c.rdata, c.rresp, c.rlast)
            if cur is not None and arready:
                pending.append(cur)
                self.count(cur, "read")
                cur = None
            if rvalid and ready:
                addr, beats, domain = pending[0]
                ok = inside(addr, beats, domain)
                want = int.from_bytes(self.shadow[addr + BEAT * beat:][:BEAT], "little") if ok else 0
                assert rdata == want, f"read beat {beat} of {addr:#x}: {rdata:#x} != {want:#x}"
                assert rresp == (AxiResp.OKAY if ok else AxiResp.SLVERR)
                assert bool(rlast) == (beat == beats - 1)
                beat += 1
                if beat == beats:
                    pending.pop(0)
                    beat = 0
                    self.reads[ok] += 1

    async def write_side(self, ctx):
        c, rng = self.f.core, self.rng
        cur, todo, answers = None, [], []      # presented AW; bursts whose beats are to send; B expected
        held = None
        while True:
            if cur is None and rng.random() < 0.3 and len(todo) < 4:
                cur = random_burst(rng, True)
                todo.append([*cur, 0])
            ctx.set(c.awvalid, cur is not None)
            if cur is not None:
                ctx.set(c.awaddr, cur[0]), ctx.set(c.awlen, cur[1] - 1), ctx.set(c.awsize, 3), ctx.set(c.awburst, 1)
                ctx.set(self.f.aw_domain, cur[2])
            w = todo[0] if todo else None
            if w is not None and held is None and rng.random() < 0.6:
                held = rng.getrandbits(8 * BEAT)
            ctx.set(c.wvalid, held is not None)
            if held is not None:
                ctx.set(c.wdata, held), ctx.set(c.wstrb, 0xFF), ctx.set(c.wlast, w[3] == w[1] - 1)
            bready = rng.random() < 0.7
            ctx.set(c.bready, bready)
            _, _, awready, wready, bvalid, bresp = await ctx.tick().sample(c.awready, c.wready, c.bvalid, c.bresp)
            if cur is not None and awready:
                answers.append(self.count(cur, "write"))
                cur = None
            if held is not None and wready:
                a = w[0] + BEAT * w[3]
                if inside(*w[:3]):
                    self.shadow[a:a + BEAT] = held.to_bytes(BEAT, "little")
                held = None
                w[3] += 1
                if w[3] == w[1]:
                    todo.pop(0)
            if bvalid and bready:
                ok = answers.pop(0)
                assert bresp == (AxiResp.OKAY if ok else AxiResp.SLVERR)
                self.writes[ok] += 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bursts_outside_the_regions_are_refused_and_never_reach_memory(seed):
    """Random reads and writes through the firewall into a memory model that checks every AXI rule (a VALID
    never taken back, payloads stable, WLAST where the burst ends), in random domains, half of them outside the
    enabled regions open to their domain (next to an edge, straddling one, in the disabled region, in a region
    closed to the domain). Reads inside return the memory's bytes, reads outside zeros with SLVERR on every
    beat; writes outside leave the memory unchanged and answer SLVERR; every response in order; ``refused``
    counts the refused bursts."""
    rng = random.Random(seed)
    fw = AxiFirewall(SIG, len(REGIONS), domains=DOMAINS, bursts=8)
    ram = AxiRamModel(fw.axi, size=SIZE, seed=seed, latency=3, jitter=4, ready_prob=0.6, valid_prob=0.7)
    init = bytes(rng.getrandbits(8) for _ in range(SIZE))
    ram.write(0, init)
    shadow = bytearray(init)
    master = _Master(fw, random.Random(seed + 100), shadow)
    m = Module()
    m.submodules.fw = fw
    sim = Simulator(m)
    sim.add_clock(1e-8)
    ram.add_to(sim)
    sim.add_process(master.read_side)
    sim.add_process(master.write_side)

    async def bench(ctx):
        for i, (base, end, en, mask) in enumerate(REGIONS):
            ctx.set(fw.regions[i], {"first": base >> 12, "stop": end >> 12, "enable": en, "domains": mask})
        await ctx.tick().repeat(3000)
        assert ctx.get(fw.refused) == master.refused

    sim.add_testbench(bench)
    sim.run()
    assert min(master.reads.values()) > 40 and min(master.writes.values()) > 15, (master.reads, master.writes)
    assert min(master.closed.values()) > 5, master.closed
    assert all(any(en and base <= b.addr and b.addr + b.beats * BEAT <= end for base, end, en, _ in REGIONS)
               for b in ram.reads + ram.writes), "a burst outside the regions reached the memory"
    assert ram.read(0, SIZE) == bytes(shadow)


def test_a_passed_burst_takes_no_cycle_of_the_firewall():
    """A burst inside a region reaches the memory in the cycle the engine presents it, and its data comes back
    in the cycle the memory offers it."""
    fw = AxiFirewall(SIG, 1)
    m = Module()
    m.submodules.fw = fw
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        c, s = fw.core, fw.axi
        ctx.set(fw.regions[0], {"first": 0, "stop": 1, "enable": 1, "domains": 1})
        ctx.set(c.arvalid, 1), ctx.set(c.araddr, 0x40), ctx.set(c.arlen, 3), ctx.set(c.arsize, 3)
        ctx.set(s.arready, 1)
        assert ctx.get(s.arvalid) and ctx.get(s.araddr) == 0x40 and ctx.get(c.arready)
        await ctx.tick()
        ctx.set(c.arvalid, 0)
        ctx.set(s.rvalid, 1), ctx.set(s.rdata, 0x1234), ctx.set(c.rready, 1)
        assert ctx.get(c.rvalid) and ctx.get(c.rdata) == 0x1234 and ctx.get(s.rready)
        ctx.set(c.araddr, 0x1000), ctx.set(c.arvalid, 1)     # the page after the region: refused, and taken
        assert not ctx.get(s.arvalid) and ctx.get(c.arready)  # at once (the memory's ready is high)
        ctx.set(s.arready, 0)                                 # ... or in the cycle after it was presented
        assert not ctx.get(c.arready)
        await ctx.tick()
        assert not ctx.get(s.arvalid) and ctx.get(c.arready)

    sim.add_testbench(bench)
    sim.run()
