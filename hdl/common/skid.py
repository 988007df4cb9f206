"""A stream register slice (skid buffer): every signal crossing it comes from a flip-flop.

Placed between two blocks whose combinational paths would otherwise join (a producer's ``valid``/``payload``
into a consumer's decision, the consumer's ``ready`` back into the producer's), it cuts the path in both
directions at the cost of one cycle of latency, and keeps one transfer per cycle: the output register holds
the beat offered downstream, the skid register the beat accepted in the cycle ``o.ready`` fell (``i.ready``
is registered, so the producer learns of the stall one cycle late).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Two-entry register slice for a stream of ``shape`` (see the module docstring).

    ``o.valid``, ``o.payload`` and ``i.ready`` are flip-flop outputs; beats leave in the order they came, one
    per cycle while ``o.ready`` holds.
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid = Signal(self.shape)
        skid_valid = Signal()
        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(self.o.ready | ~self.o.valid):            # the output register is free this cycle
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~skid_valid):             # output stalled: catch the accepted beat
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
