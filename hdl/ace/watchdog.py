"""The engine's progress watchdog: flags an engine that holds work and has moved nothing for too long.

A dead link, a peer that never posts its side of a collective, or a memory that stops answering all leave
an engine with commands in flight and no transfer on any of its ports. The watchdog counts such cycles
(``busy`` and no ``moved``); when the count reaches ``limit`` (the WATCHDOG register, 0 = off) it pulses
``fire`` (IRQ.timeout) and sets ``hung`` (STATUS.hung), which stays until the engine is aborted (the unit is
reset with the rest of the engine). Any transfer, or no work at all, restarts the count.

The count saturates at ``limit``; ``fire`` and ``hung`` are flip-flops, and the compare is one 32-bit
equality on registered values.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Watchdog"]


class Watchdog(wiring.Component):
    """Ports: ``busy`` (the engine holds work), ``moved`` (a transfer on any port this cycle), ``limit``
    (cycles; 0 = off); ``fire`` (one-cycle pulse when the limit is reached), ``hung`` (sticky)."""

    busy: In(1)
    moved: In(1)
    limit: In(32)
    fire: Out(1)
    hung: Out(1)

    def elaborate(self, platform):
        m = Module()
        count = Signal(32)
        reached = Signal()          # count == limit, registered: the compare stays off the counter's path
        idle = ~self.busy | self.moved
        m.d.sync += reached.eq((count == self.limit) & (self.limit != 0))
        with m.If(idle):
            m.d.sync += count.eq(0)
        with m.Elif(~reached & (count != self.limit)):
            m.d.sync += count.eq(count + 1)
        m.d.sync += self.fire.eq(0)
        with m.If(reached & self.busy & ~self.moved & ~self.hung):
            m.d.sync += [self.fire.eq(1), self.hung.eq(1)]
        return m
