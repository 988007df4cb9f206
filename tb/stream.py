"""cocotb bus models for Amaranth ``lib.stream`` ports (``<name>__valid``, ``__ready``, ``__payload``).

Both models drive right after a rising edge and sample in the read-only phase before the next one, so they see
the same handshakes on Verilator and on Icarus. Payloads are plain integers: pack and unpack them with the
shared layouts (:func:`syncfabric.hdl.common.layouts.pack` / ``unpack``).
"""

import random
from collections import deque

from cocotb.triggers import Event, ReadOnly, RisingEdge
from cocotb.types import Logic

__all__ = ["StreamSource", "StreamSink"]


def _stream_signals(dut, name):
    return (getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__ready"), getattr(dut, f"{name}__payload"))


class StreamSource:
    """Drives a stream input of the design. ``idle`` is the probability of inserting an idle cycle before a beat."""

    def __init__(self, dut, name, clk, *, idle=0.0, rng=None):
        self.valid, self.ready, self.payload = _stream_signals(dut, name)
        self.clk = clk
        self.idle = idle
        self.rng = rng or random.Random(0)
        self.queue = deque()
        self.sent = 0
        self._idle_event = Event()
        self.valid.value = 0

    def send_nowait(self, payload):
        """Queue one beat."""
        self.queue.append(int(payload))
        self._idle_event.clear()

    async def wait_idle(self):
        """Wait until every queued beat has been accepted by the design."""
        if self.queue or self._busy:
            await self._idle_event.wait()

    _busy = False

    async def run(self):
        """The driving coroutine; start it with ``cocotb.start_soon(source.run())``."""
        accepted = False
        while True:
            await RisingEdge(self.clk)
            if accepted:
                self.sent += 1
                self._busy = False
                if not self.queue:
                    self._idle_event.set()
            if not self._busy and self.queue and self.rng.random() >= self.idle:
                self.payload.value = self.queue.popleft()
                self.valid.value = 1
                self._busy = True
            elif not self._busy:
                self.valid.value = 0
            await ReadOnly()
            accepted = self._busy and bool(self.ready.value)


class StreamSink:
    """Accepts a stream output of the design. ``backpressure`` is the probability of deasserting ready."""

    def __init__(self, dut, name, clk, *, backpressure=0.0, rng=None):
        self.valid, self.ready, self.payload = _stream_signals(dut, name)
        self.clk = clk
        self.backpressure = backpressure
        self.rng = rng or random.Random(1)
        self.queue = deque()
        self.received = 0
        self._event = Event()
        self.ready.value = 0

    async def recv(self):
        """The next beat accepted from the design (an integer)."""
        while not self.queue:
            self._event.clear()
            await self._event.wait()
        return self.queue.popleft()

    async def run(self):
        """The accepting coroutine; start it with ``cocotb.start_soon(sink.run())``."""
        while True:
            await RisingEdge(self.clk)
            ready = self.rng.random() >= self.backpressure
            self.ready.value = int(ready)
            await ReadOnly()
            if ready and self.valid.value:
                value = self.payload.value     # a 1-bit payload's value is a Logic, wider ones a LogicArray
                self.queue.append(int(value) if isinstance(value, Logic) else value.to_unsigned())
                self.received += 1
                self._event.set()
