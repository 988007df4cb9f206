"""The ACE system in Amaranth's simulator, advanced on demand by synchronous host code.

:class:`SteppedSystem` elaborates :class:`~syncfabric.hdl.system.top.AceSystem`, gives every endpoint an
:class:`~syncfabric.host.transports.axi_model.AxiRamModel` as its memory, and runs one bridge testbench that performs
the host's register accesses, interrupt waits and idle time in simulated time. Host code outside the simulator
calls the synchronous :class:`SteppedTransport` of an endpoint; each call hands one request to the bridge and
advances the simulator until the bridge has answered, so the engines run exactly while the host waits on
them (a register access takes a few cycles, the host's own thinking none). Memory accesses go straight to the
memory models and take no simulated time, as with the other simulator transports.

This is the backend of :class:`syncfabric.host.system.System` with ``backend: amaranth``: no external
simulator is needed at all. It is slow (a few hundred cycles per second for small engines).
"""

import time

from amaranth.sim import Simulator

from ....hdl.system.link import LINK_FAULTS
from ....hdl.system.top import AceSystem
from ...transport import Transport, TransportError
from ..amaranth import AmaranthTransport, CycleClock
from ..axi_model import AxiRamModel

__all__ = ["SteppedSystem", "SteppedTransport"]


class SteppedSystem:
    """All endpoints of ``topology`` (engines of configuration ``cfg``) with ``mem_bytes`` of memory each;
    ``latency``/``rate`` override the links' attributes. :attr:`transports` holds one
    :class:`SteppedTransport` per endpoint."""

    def __init__(self, cfg, topology, *, latency=None, rate=None, mem_bytes=1 << 20, seed=1, vcd=None):
        self.dut = dut = AceSystem(cfg, topology, latency, rate, inline=True)
        self.n = dut.topology.n_endpoints
        self.sim = sim = Simulator(dut)
        sim.add_clock(1e-8)
        self.clock = CycleClock().add_to(sim)
        self.rams = []
        for i in range(self.n):
            ram = AxiRamModel(getattr(dut, f"ep{i}_axi"), size=mem_bytes, seed=seed * 101 + i)
            ram.add_to(sim)
            self.rams.append(ram)
        self._request = None
        self._answer = None
        self._closed = False
        self.sim_seconds = 0.0      # wall time spent advancing the simulation
        self.sim_cycles = 0
        self._vcd = None
        sim.add_testbench(self._bridge, background=True)
        if vcd:
            self._vcd = sim.write_vcd(vcd)
            self._vcd.__enter__()
        self.transports = [SteppedTransport(self, i) for i in range(self.n)]

    async def _bridge(self, ctx):
        dut = self.dut
        ports = [AmaranthTransport(ctx, getattr(dut, f"ep{i}_csr"), mem=self.rams[i],
                                   irq=getattr(dut, f"ep{i}_irq"), clock=self.clock) for i in range(self.n)]
        while True:
            req = self._request
            if req is None:
                await ctx.tick()
                continue
            self._request = None
            rank, op, args = req
            try:
                if op == "idle":
                    await ctx.tick().repeat(args[0])
                    value = None
                elif op == "link_stall":
                    ctx.set(getattr(dut, f"link{args[0]}_stall"), int(bool(args[1])))
                    value = None
                elif op == "link_faults":
                    for kind, value in zip(LINK_FAULTS, args[1:]):
                        ctx.set(getattr(dut, f"link{args[0]}_{kind}_prob"), int(value))
                    value = None
                else:
                    value = await getattr(ports[rank], op)(*args)
                self._answer = (True, value)
            except Exception as e:          # handed back to the caller, raised in the host's frame
                self._answer = (False, e)

    def call(self, rank, op, *args):
        """Have the bridge run ``op`` (a method of :class:`~syncfabric.host.transports.amaranth.AmaranthTransport`,
        or ``"idle"``) for endpoint ``rank``; advance the simulation until it is done and return its result."""
        if self._closed:
            raise TransportError("the simulation is closed")
        self._request, self._answer = (rank, op, args), None
        t0 = time.perf_counter()
        start = self.clock.now
        while self._answer is None:
            self.sim.advance()
        self.sim_seconds += time.perf_counter() - t0
        self.sim_cycles += self.clock.now - start
        ok, value = self._answer
        self._answer = None
        if not ok:
            raise value
        return value

    def idle(self, cycles):
        """Let the engines run ``cycles`` clock cycles without host activity (an emulated compute phase)."""
        if cycles > 0:
            self.call(0, "idle", int(cycles))

    def set_npu_share(self, rank, share):
        """The share of endpoint ``rank``'s memory port its NPU's compute takes from now on (0..1)."""
        self.rams[rank].npu_share = float(share)

    def set_link_stall(self, link, stalled):
        """Hold on-chip link ``link`` (its ``link<l>`` pins) stalled (no flit moves on it), or release it."""
        self.call(0, "link_stall", int(link), bool(stalled))

    def set_link_faults(self, link, *probs):
        """Link ``link``'s random faults: its ``<kind>_prob`` inputs in ``LINK_FAULTS`` order (in 1/65536)."""
        self.call(0, "link_faults", int(link), *map(int, probs))

    @property
    def now(self):
        """Clock cycles simulated so far."""
        return self.clock.now

    def close(self):
        if not self._closed and self._vcd is not None:
            self._vcd.__exit__(None, None, None)
        self._closed = True


class SteppedTransport(Transport):
    """The synchronous transport of endpoint ``rank`` of a :class:`SteppedSystem`."""

    def __init__(self, system, rank):
        self.system, self.rank = system, rank

    def read_reg(self, addr):
        return self.system.call(self.rank, "read_reg", addr)

    def write_reg(self, addr, value):
        self.system.call(self.rank, "write_reg", addr, value)

    def read_mem(self, addr, n):
        return bytes(self.system.rams[self.rank].read(addr, n))

    def write_mem(self, addr, data):
        self.system.rams[self.rank].write(addr, bytes(data))

    def wait_irq(self, timeout_cycles=None):
        return self.system.call(self.rank, "wait_irq", timeout_cycles)

    def cycles(self):
        return self.system.now

    def close(self):
        self.system.close()

    def __repr__(self):
        return f"SteppedTransport(rank {self.rank})"
