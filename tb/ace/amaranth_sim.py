"""The ACE system in Amaranth's simulator: the same job flow as the cocotb testbench
(:func:`syncfabric.host.job.run_endpoint` per endpoint, through the host driver), with no external simulator.

Each endpoint's memory is an :class:`~syncfabric.tb.axi_model.AxiRamModel` (seeded random stalls optional)
and its driver talks through an :class:`~syncfabric.tb.amaranth_transport.AmaranthTransport`. Slower than
Verilator by two orders of magnitude (about 200 cycles/s for two small engines), so it suits small jobs and
machines without Verilator or Icarus.
"""

from amaranth.sim import Simulator

from ...hdl.system.top import AceSystem
from ...host.driver import AceDriver
from ...host.job import memory_bytes, run_endpoint
from ..amaranth_transport import AmaranthTransport, CycleClock
from ..axi_model import AxiRamModel

__all__ = ["run_system_amaranth"]


def run_system_amaranth(cfg, topology, jobs_of, *, latency=None, rate=None, seed=1, ready_prob=1.0,
                        valid_prob=1.0, timeout_cycles=200_000, vcd=None, buffers=None, fsms=None):
    """Run every endpoint's commands (``jobs_of(rank)``: :class:`~syncfabric.host.job.CollectiveJob` /
    :class:`~syncfabric.host.job.RejectedCommand` objects, posted in order) on ``topology``; returns the
    :class:`~syncfabric.host.job.EndpointResult` of each rank. ``ready_prob``/``valid_prob`` make the memories
    stall at random (seeded by ``seed``); ``vcd`` writes a waveform; ``buffers``/``fsms``: chunk buffers and
    FSMs the engines use (default all)."""
    dut = AceSystem(cfg, topology, latency, rate, inline=True)
    n = dut.topology.n_endpoints
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    clock = CycleClock().add_to(sim)
    mem_bytes = max(memory_bytes(jobs_of(r), r) for r in range(n))
    rams = []
    for i in range(n):
        ram = AxiRamModel(getattr(dut, f"ep{i}_axi"), size=mem_bytes, seed=seed * 101 + i,
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

            tr = AmaranthTransport(ctx, getattr(dut, f"ep{i}_csr"), mem=rams[i], irq=getattr(dut, f"ep{i}_irq"),
                                   clock=clock)
            drv = AceDriver(tr, cfg)
            drv.buffer_budget = buffers
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
