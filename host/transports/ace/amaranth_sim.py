"""The ACE system in Amaranth's simulator: the same job flow as the cocotb testbench
(:func:`syncfabric.host.job.run_endpoint` per endpoint, through the host driver), with no external simulator.

Each endpoint's memory is an :class:`~syncfabric.host.transports.axi_model.AxiRamModel` (seeded random stalls optional)
and its driver talks through an :class:`~syncfabric.host.transports.amaranth.AmaranthTransport`. Slower than
Verilator by two orders of magnitude (about 200 cycles/s for two small engines), so it suits small jobs and
machines without Verilator or Icarus.

``parts`` simulates the system as partitions (:class:`~syncfabric.hdl.system.top.AceSystem` with ``cut=True``,
one per rank set) in one simulator, with :class:`Coordinator` copying the cut links' ring rows between them
every window: the partitioned simulation's protocol, checked here against the whole system cycle for cycle.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from ....hdl.common.refuse import Checked
from ....hdl.system.top import AceSystem, system_links
from ....sim.golden.topology import parse as parse_topology
from ...driver import AceDriver
from ...job import memory_bytes, run_endpoint
from ..amaranth import AmaranthTransport, CycleClock
from ..axi_model import AxiRamModel

__all__ = ["run_system_amaranth", "Coordinator", "Partitions"]


class Partitions(Checked, wiring.Component):
    """Partitions of ``topology``: one :class:`AceSystem` with ``cut=True`` per rank set of ``parts``, as
    submodules ``p0``, ``p1``, ... (:attr:`systems`); :meth:`port` finds endpoint ``i``'s ports."""

    @classmethod
    def check(cls, cfg, topology, parts, latency=None, rate=None):
        topology = parse_topology(topology)
        if sorted(r for part in parts for r in part) != list(range(topology.n_endpoints)):
            raise ValueError(f"parts must hold every rank of {topology.spec} once, got {parts!r}")
        where = {r: k for k, part in enumerate(parts) for r in part}
        if any(where[s] != where[d] and lat < 2 for s, _, d, _, lat, _ in system_links(topology, latency, rate)):
            raise ValueError("a link of latency 1 cannot be cut: partitions need latency >= 2")

    def __init__(self, cfg, topology, parts, latency=None, rate=None):
        self.topology = parse_topology(topology)
        self.systems = [AceSystem(cfg, topology, latency, rate, inline=True, ranks=part, cut=True) for part in parts]
        super().__init__({})

    def port(self, name):
        """The port ``name`` (``ep<i>_csr``, ...) of the partition that holds it."""
        return next(getattr(s, name) for s in self.systems if hasattr(s, name))

    def elaborate(self, platform):
        m = Module()
        for k, s in enumerate(self.systems):
            m.submodules[f"p{k}"] = s
        return m


class Coordinator:
    """Moves the cut links' ring rows between the partitions of ``systems``: after every ``window`` cycles,
    the rows the sending halves' flit rings and the receiving halves' credit rings wrote in those cycles go
    to the other half. ``window`` defaults to the shortest cut link's latency minus one, the longest window
    that never lets a half read a row before it was copied (:mod:`syncfabric.hdl.system.cut`)."""

    def __init__(self, systems, window=None):
        links = {}
        for s in systems:
            for x, row, half in zip(s.external, s.external_links, s.cut_halves):
                links.setdefault(row[:4], {"latency": row[4]})[x.direction] = half
        #: (sender half, receiver half, latency) of every cut link
        self.pairs = [(h["tx"], h["rx"], h["latency"]) for h in links.values()]
        shortest = min((lat for *_, lat in self.pairs), default=2)
        if shortest < 2:
            raise ValueError("a link of latency 1 cannot be cut: partitions need latency >= 2")
        self.window = shortest - 1 if window is None else window
        self.windows = 0

    def add_to(self, sim):
        async def coordinator(ctx):
            t0 = 0
            while True:
                for _ in range(self.window):
                    await ctx.tick()
                for send, recv, _ in self.pairs:
                    depth = send.depth
                    for c in range(t0, t0 + self.window):
                        r = c % depth
                        ctx.set(recv.flit_ring.data[r], ctx.get(send.flit_ring.data[r]))
                        ctx.set(send.credit_ring.data[r], ctx.get(recv.credit_ring.data[r]))
                t0 += self.window
                self.windows += 1
        sim.add_testbench(coordinator, background=True)
        return self


def run_system_amaranth(cfg, topology, jobs_of, *, latency=None, rate=None, seed=1, ready_prob=1.0,
                        valid_prob=1.0, timeout_cycles=200_000, vcd=None, buffers=None, fsms=None, parts=None,
                        sram_split="residence",
                        window=None):
    """Run every endpoint's commands (``jobs_of(rank)``: :class:`~syncfabric.host.job.CollectiveJob` /
    :class:`~syncfabric.host.job.RejectedCommand` objects, posted in order) on ``topology``; returns the
    :class:`~syncfabric.host.job.EndpointResult` of each rank. ``ready_prob``/``valid_prob`` make the memories
    stall at random (seeded by ``seed``); ``vcd`` writes a waveform; ``buffers``/``fsms``: chunk buffers and
    FSMs the engines use (default all); ``sram_split``: the driver's partition heuristic. ``parts`` (rank
    lists): simulate as those partitions, with cut links copied every ``window`` cycles (default: the longest
    safe window)."""
    if parts is None:
        dut = AceSystem(cfg, topology, latency, rate, inline=True)

        def port(name):
            return getattr(dut, name)
    else:
        dut = Partitions(cfg, topology, parts, latency, rate)
        port = dut.port
    n = dut.topology.n_endpoints
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    if parts is not None:
        Coordinator(dut.systems, window).add_to(sim)
    clock = CycleClock().add_to(sim)
    mem_bytes = max(memory_bytes(jobs_of(r), r) for r in range(n))
    rams = []
    for i in range(n):
        ram = AxiRamModel(port(f"ep{i}_axi"), size=mem_bytes, seed=seed * 101 + i,
                          ready_prob=ready_prob, valid_prob=valid_prob)
        ram.add_to(sim)
        rams.append(ram)
    results = [None] * n
    arrived = [0]

    def endpoint(i):
        async def testbench(ctx):
            async def barrier():
                arrived[0] += 1
                while arrived[0] < n:
                    await ctx.tick()

            tr = AmaranthTransport(ctx, port(f"ep{i}_csr"), mem=rams[i], irq=port(f"ep{i}_irq"),
                                   clock=clock)
            drv = AceDriver(tr, cfg)
            drv.buffer_budget = buffers
            drv.sram_split = sram_split
            results[i] = await run_endpoint(drv, i, jobs_of(i), mem_bytes=mem_bytes,
                                            timeout_cycles=timeout_cycles, sync=barrier, fsm_limit=fsms)
        return testbench

    for i in range(n):
        sim.add_testbench(endpoint(i))
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return results
