"""A cocotb transport: the host driver reaches a simulated engine through its CSR pins and its memory model.

:class:`CocotbTransport` is an :class:`~syncfabric.host.transport.AsyncTransport`: its methods are
coroutines that advance the simulation, so the driver's coroutines are awaited from the cocotb test::

    ram = AxiRam(AxiBus.from_prefix(dut, "axi"), dut.clk, dut.rst, size=1 << 20)
    drv = AceDriver(CocotbTransport(dut, dut.clk, mem=ram, irq=dut.irq), cfg)
    await drv.configure(...)

CSR pins: ``<csr_prefix>__addr``, ``__wdata``, ``__we``, ``__re`` driven, ``__rdata``, ``__ack`` sampled (the
:class:`~syncfabric.hdl.common.csr.CsrSignature` port flattened by Amaranth's Verilog backend; a system top
with several endpoints names them ``ep0_csr__addr``, ... so give ``csr_prefix="ep0_csr"``). An access drives
the request for one cycle after a rising edge and waits for ``ack`` (sampled in the read-only phase after
each rising edge). Accesses from concurrent tasks are serialised by a lock.

Memory: ``mem`` is any object with ``read(addr, n)`` and ``write(addr, data)`` (a cocotbext-axi ``AxiRam``,
or its ``Memory`` base class for a test without an AXI bus, or a
:class:`~syncfabric.host.transports.backdoor.MemoryBackdoor` into a RAM of the design); these are plain calls, they
take no simulated time (the NPU's own accesses to its memory are not what is being simulated). A memory whose
``vpi_writes`` is true writes simulator objects, which cocotb refuses in the read-only phase where a CSR access ends:
a write to it first moves on by one time step (no clock edge). A memory with coroutines ``load(addr, data)`` and
``dump(addr, n)`` (the back door's bulk path) is written and read through them: a few more time steps, still no
clock edge.
"""

from cocotb.triggers import ClockCycles, First, Lock, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

from ..transport import SimulatedTransport, TransportError

__all__ = ["CocotbTransport", "after_cycles"]


def _value(handle, what):
    """A handle's value as an unsigned integer, with a clear error for X/Z."""
    value = handle.value
    try:
        return value.to_unsigned() if hasattr(value, "to_unsigned") else int(value)
    except ValueError:
        raise TransportError(f"{what} is {value} (X or Z): is the engine out of reset?") from None


async def after_cycles(clk, n, period=None):
    """Return at the ``n``-th (>= 1) rising edge of ``clk`` from now, as ``ClockCycles(clk, n)`` does, but
    with one timer to half a period before that edge (``period`` in simulator steps; None: ``ClockCycles``)
    instead of Python on every edge. Call it less than half a period after an edge (where every access of
    this module ends)."""
    n = max(1, int(n))
    if period is None:
        await ClockCycles(clk, n)
        return
    await Timer(n * period - period // 2, unit="step")
    await RisingEdge(clk)


class CocotbTransport(SimulatedTransport):
    """Transport over the CSR pins of ``dut`` clocked by ``clk``.

    ``csr_prefix``: the prefix of the CSR pins; ``mem``: the endpoint memory model (``read``/``write``);
    ``irq``: the interrupt line (a handle, or the name of a ``dut`` signal; None: :meth:`wait_irq` waits
    ``poll_cycles`` and lets the caller poll); ``ack_timeout``: cycles to wait for ``ack`` before raising
    :class:`~syncfabric.host.transport.TransportError`.
    """

    def __init__(self, dut, clk, csr_prefix="csr", mem=None, irq=None, *, ack_timeout=1000, poll_cycles=64):
        self.dut, self.clk, self.mem = dut, clk, mem
        self.prefix = csr_prefix
        pins = {}
        for name in ("addr", "wdata", "we", "re", "rdata", "ack"):
            full = f"{csr_prefix}__{name}"
            try:
                pins[name] = getattr(dut, full)
            except AttributeError:
                raise TransportError(f"{dut._name} has no CSR pin {full}; is csr_prefix={csr_prefix!r} "
                                     f"right?") from None
        self._pins = pins
        self.irq = getattr(dut, irq) if isinstance(irq, str) else irq
        self.ack_timeout = ack_timeout
        self.poll_cycles = poll_cycles
        self._lock = Lock()
        self._t0 = get_sim_time("step")
        self._period = None
        pins["we"].value = 0
        pins["re"].value = 0

    async def _access(self, addr, write, wdata=0):
        self._check_access(addr, wdata, len(self._pins["addr"]))
        p = self._pins
        async with self._lock:
            await RisingEdge(self.clk)
            p["addr"].value = addr
            p["wdata"].value = wdata
            p["we"].value = int(write)
            p["re"].value = int(not write)
            await RisingEdge(self.clk)          # the engine samples the request on this edge
            p["we"].value = 0
            p["re"].value = 0
            for _ in range(self.ack_timeout):
                await ReadOnly()
                if _value(p["ack"], f"{self.prefix}__ack"):
                    return _value(p["rdata"], f"{self.prefix}__rdata")
                await RisingEdge(self.clk)
        raise TransportError(f"no ack within {self.ack_timeout} cycles for the "
                             f"{'write' if write else 'read'} of {addr:#x}")

    async def write_mem(self, addr, data):
        """Write ``data`` into the memory at ``addr`` (no clock cycle; see the module docstring)."""
        mem = self._memory()
        if getattr(mem, "vpi_writes", False):
            await Timer(1, unit="step")
        if hasattr(mem, "load"):
            await mem.load(addr, bytes(data))
        else:
            mem.write(addr, bytes(data))

    async def read_mem(self, addr, n):
        """``n`` bytes of the memory at ``addr`` (no clock cycle; see the module docstring)."""
        mem = self._memory()
        if hasattr(mem, "dump"):
            if getattr(mem, "vpi_writes", False):
                await Timer(1, unit="step")
            return bytes(await mem.dump(addr, n))
        return bytes(mem.read(addr, n))

    async def wait_irq(self, timeout_cycles=None):
        """Wait for the interrupt line to be high (at most ``timeout_cycles`` cycles; without an ``irq``
        line, ``poll_cycles`` at most, returning False so the caller polls)."""
        if self.irq is None:
            n = self.poll_cycles if timeout_cycles is None else min(self.poll_cycles, timeout_cycles)
            await after_cycles(self.clk, n, self._period)
            return False
        if _value(self.irq, "irq"):
            return True
        if timeout_cycles is None:
            await RisingEdge(self.irq)
        else:
            n = max(1, int(timeout_cycles))
            # a timer, not ClockCycles, once the period is known: no Python on every clock edge meanwhile
            await First(RisingEdge(self.irq),
                        ClockCycles(self.clk, n) if self._period is None else Timer(n * self._period, unit="step"))
        return bool(_value(self.irq, "irq"))

    async def cycles(self):
        """Clock cycles since the transport was created (the clock period is measured on the first call)."""
        if self._period is None:
            await RisingEdge(self.clk)
            t = get_sim_time("step")
            await RisingEdge(self.clk)
            self._period = get_sim_time("step") - t
        return int((get_sim_time("step") - self._t0) // self._period)

    def close(self):
        """Leave the bus idle."""
        self._pins["we"].value = 0
        self._pins["re"].value = 0
