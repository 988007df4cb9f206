"""A transport for Amaranth's simulator: the host driver reaches an engine through its CSR port and an
:class:`~syncfabric.host.transports.axi_model.AxiRamModel` (the endpoint's memory) from inside an async testbench.

:class:`AmaranthTransport` is an :class:`~syncfabric.host.transport.AsyncTransport` whose coroutines take
simulated time through the testbench context ``ctx``, so the driver runs unchanged::

    async def testbench(ctx):
        drv = AceDriver(AmaranthTransport(ctx, dut.csr, mem=ram, irq=dut.irq, clock=clock), cfg)
        await drv.configure(...)

Several testbenches (one per endpoint) may drive several engines of one simulation at once; each has its own
transport. ``clock`` is a :class:`CycleClock` added once to the simulator: it counts clock cycles for
:meth:`AmaranthTransport.cycles` and timeouts.
"""

from ..transport import SimulatedTransport, TransportError

__all__ = ["AmaranthTransport", "CycleClock", "csr_request"]


async def csr_request(ctx, bus, addr, write, wdata=0):
    """Drive one register-bus request (``we`` or ``re`` with ``addr``/``wdata``) for one cycle; returns after
    the request cycle's clock edge (hdl/common/csr.py: the bank answers with ``ack`` later)."""
    ctx.set(bus.addr, addr)
    ctx.set(bus.wdata, wdata)
    ctx.set(bus.we, int(write))
    ctx.set(bus.re, int(not write))
    await ctx.tick()
    ctx.set(bus.we, 0)
    ctx.set(bus.re, 0)


class CycleClock:
    """Counts cycles of the ``sync`` domain; :meth:`add_to` registers its (background) process."""

    def __init__(self):
        self.now = 0

    def add_to(self, sim):
        async def count(ctx):
            async for _ in ctx.tick():
                self.now += 1
        sim.add_process(count)
        return self


class AmaranthTransport(SimulatedTransport):
    """Transport over the CSR port ``csr`` (a :class:`~syncfabric.hdl.common.csr.CsrSignature` interface of the
    design) from the testbench context ``ctx``; ``mem`` has ``read(addr, n)``/``write(addr, data)``; ``irq`` is
    the interrupt signal (None: :meth:`wait_irq` waits ``poll_cycles``); ``clock`` a :class:`CycleClock`."""

    def __init__(self, ctx, csr, *, mem=None, irq=None, clock=None, ack_timeout=1000, poll_cycles=64):
        self.ctx, self.csr, self.mem, self.irq, self.clock = ctx, csr, mem, irq, clock
        self.ack_timeout = ack_timeout
        self.poll_cycles = poll_cycles
        self._t0 = clock.now if clock is not None else 0

    async def _access(self, addr, write, wdata=0):
        self._check_access(addr, wdata, len(self.csr.addr))
        ctx, bus = self.ctx, self.csr
        await csr_request(ctx, bus, addr, write, wdata)
        for _ in range(self.ack_timeout):
            if ctx.get(bus.ack):
                value = ctx.get(bus.rdata)
                await ctx.tick()
                return value
            await ctx.tick()
        raise TransportError(f"no ack within {self.ack_timeout} cycles for the "
                             f"{'write' if write else 'read'} of {addr:#x}")

    async def wait_irq(self, timeout_cycles=None):
        """Wait until the interrupt line is high, at most ``timeout_cycles`` cycles."""
        ctx = self.ctx
        if self.irq is None:
            n = self.poll_cycles if timeout_cycles is None else min(self.poll_cycles, timeout_cycles)
            await ctx.tick().repeat(max(1, n))
            return False
        waited = 0
        while not ctx.get(self.irq):
            if timeout_cycles is not None and waited >= timeout_cycles:
                return False
            await ctx.tick()
            waited += 1
        return True

    async def cycles(self):
        """Clock cycles since the transport was created."""
        if self.clock is None:
            raise TransportError("this AmaranthTransport has no CycleClock")
        return self.clock.now - self._t0
