"""Transports: how the host driver reaches an engine's registers, its endpoint memory and its interrupt.

Every backend implements the same six operations (plus ``close``):

=====================================  ====================================================================
``read_reg(addr) -> int``              one 32-bit register read at byte address ``addr`` of the register
                                       map (word aligned); an unmapped address reads 0
``write_reg(addr, value)``             one 32-bit register write (``0 <= value < 2**32``)
``read_mem(addr, n) -> bytes``         ``n`` bytes of the endpoint's memory (the NPU memory the engine's
                                       DMA reads and writes) at byte address ``addr``
``write_mem(addr, data)``              write ``data`` (bytes-like) to the endpoint's memory
``wait_irq(timeout_cycles=None)``      wait until the engine's interrupt line is high or ``timeout_cycles``
``-> bool``                            engine clock cycles have passed (None: no limit); True if the line
                                       is high. It may return early (a spurious wake-up): callers poll again
``cycles() -> int``                    engine clock cycles since the transport started (a monotonic clock
                                       for timeouts and measurements)
``close()``                            release the backend (idempotent)
=====================================  ====================================================================

Register accesses happen in program order, one at a time, and a register write is complete (seen by the
engine) when the call returns; memory accesses do not go through the engine (they model the NPU's own
accesses to its memory).

Sync and async: the API comes in two flavours with the same contract. :class:`Transport` is synchronous
(in-memory fakes, a serial bridge to a board). :class:`AsyncTransport` has coroutine methods, for backends
that must let a simulator advance while they wait (cocotb: :class:`~syncfabric.host.transports.cocotb.CocotbTransport`;
Amaranth testbenches). The driver (:class:`~syncfabric.host.driver.AceDriver`) is written once, against
:class:`AsyncTransport`; :func:`as_async` adapts a synchronous transport to it, and :func:`run_sync` runs one
of the driver's coroutines to completion without an event loop when the transport underneath is synchronous
(its awaits never suspend). :class:`~syncfabric.host.driver.SyncAceDriver` wraps both for plain synchronous
use.
"""

from abc import ABC, abstractmethod

__all__ = ["Transport", "AsyncTransport", "SimulatedTransport", "SyncAsAsync", "as_async", "run_sync",
           "TransportError"]


class TransportError(RuntimeError):
    """A transport could not complete an access (no acknowledge, link down, out-of-range address)."""


class Transport(ABC):
    """A synchronous transport (contract in the module docstring). Usable as a context manager."""

    @abstractmethod
    def read_reg(self, addr):
        """The 32-bit register at byte address ``addr``."""

    @abstractmethod
    def write_reg(self, addr, value):
        """Write the 32-bit ``value`` to the register at byte address ``addr``."""

    @abstractmethod
    def read_mem(self, addr, n):
        """``n`` bytes of endpoint memory at ``addr``."""

    @abstractmethod
    def write_mem(self, addr, data):
        """Write ``data`` to endpoint memory at ``addr``."""

    @abstractmethod
    def wait_irq(self, timeout_cycles=None):
        """Wait for the interrupt line (at most ``timeout_cycles`` cycles); True if it is high."""

    @abstractmethod
    def cycles(self):
        """Engine clock cycles so far."""

    def close(self):
        """Release the backend; the default does nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class AsyncTransport(ABC):
    """The same contract as :class:`Transport` with coroutine methods (``await t.read_reg(addr)``)."""

    @abstractmethod
    async def read_reg(self, addr):
        """The 32-bit register at byte address ``addr``."""

    @abstractmethod
    async def write_reg(self, addr, value):
        """Write the 32-bit ``value`` to the register at byte address ``addr``."""

    @abstractmethod
    async def read_mem(self, addr, n):
        """``n`` bytes of endpoint memory at ``addr``."""

    @abstractmethod
    async def write_mem(self, addr, data):
        """Write ``data`` to endpoint memory at ``addr``."""

    @abstractmethod
    async def wait_irq(self, timeout_cycles=None):
        """Wait for the interrupt line (at most ``timeout_cycles`` cycles); True if it is high."""

    @abstractmethod
    async def cycles(self):
        """Engine clock cycles so far."""

    def close(self):
        """Release the backend; the default does nothing."""


class SimulatedTransport(AsyncTransport):
    """What the simulator transports share: register accesses over a CSR bus of ``addr_bits`` address bits
    (subclasses implement :meth:`_access`, one bus transaction) and an endpoint memory model ``mem`` with
    ``read(addr, n)``/``write(addr, data)`` that takes no simulated time (the NPU's own accesses to its memory
    are not what is being simulated)."""

    mem = None

    def _check_access(self, addr, wdata, addr_bits):
        if not 0 <= addr < (1 << addr_bits) or addr % 4:
            raise TransportError(f"register address {addr:#x} is not a word address of the CSR bus")
        if not 0 <= wdata < (1 << 32):
            raise TransportError(f"register value {wdata:#x} does not fit 32 bits")

    @abstractmethod
    async def _access(self, addr, write, wdata=0):
        """One register transaction; returns the read data (reads) once the bus acknowledged it."""

    async def read_reg(self, addr):
        """One 32-bit register read."""
        return await self._access(addr, False)

    async def write_reg(self, addr, value):
        """One 32-bit register write; returns once the engine acknowledged it."""
        await self._access(addr, True, value)

    def _memory(self):
        if self.mem is None:
            raise TransportError(f"this {type(self).__name__} has no memory model (mem=None)")
        return self.mem

    async def read_mem(self, addr, n):
        """``n`` bytes of the memory model at ``addr`` (no simulated time)."""
        return bytes(self._memory().read(addr, n))

    async def write_mem(self, addr, data):
        """Write ``data`` into the memory model at ``addr`` (no simulated time)."""
        self._memory().write(addr, bytes(data))


class SyncAsAsync(AsyncTransport):
    """A synchronous :class:`Transport` seen as an :class:`AsyncTransport`: every coroutine returns at once
    (never suspends), which is what lets :func:`run_sync` drive the driver over it."""

    def __init__(self, transport):
        if not isinstance(transport, Transport):
            raise TypeError(f"SyncAsAsync wraps a Transport, got {transport!r}")
        self.sync = transport

    async def read_reg(self, addr):
        return self.sync.read_reg(addr)

    async def write_reg(self, addr, value):
        return self.sync.write_reg(addr, value)

    async def read_mem(self, addr, n):
        return self.sync.read_mem(addr, n)

    async def write_mem(self, addr, data):
        return self.sync.write_mem(addr, data)

    async def wait_irq(self, timeout_cycles=None):
        return self.sync.wait_irq(timeout_cycles)

    async def cycles(self):
        return self.sync.cycles()

    def close(self):
        self.sync.close()

    def __repr__(self):
        return f"SyncAsAsync({self.sync!r})"


def as_async(transport):
    """``transport`` as an :class:`AsyncTransport` (wrapping a synchronous :class:`Transport`)."""
    if isinstance(transport, AsyncTransport):
        return transport
    if isinstance(transport, Transport):
        return SyncAsAsync(transport)
    raise TypeError(f"{transport!r} is neither a Transport nor an AsyncTransport")


def run_sync(coro):
    """Run ``coro`` (a coroutine over a synchronous transport) to completion and return its result.

    Raises RuntimeError if the coroutine suspends, i.e. it awaits something asynchronous (a simulator
    trigger): such a coroutine must be awaited in its event loop (cocotb, asyncio, an Amaranth testbench).
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the coroutine suspended: it runs over an asynchronous transport; await it in the "
                       "simulator's event loop instead of calling it through run_sync/SyncAceDriver")
