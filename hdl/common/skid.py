"""A stream register slice (skid buffer): every signal crossing it comes from a flip-flop.

Placed between two blocks whose combinational paths would otherwise join (a producer's ``valid``/``payload``
into a consumer's decision, the consumer's ``ready`` back into the producer's), it cuts the path in both
directions at the cost of one cycle of latency, and keeps one transfer per cycle: the output register holds
the beat offered downstream, the skid register the beat accepted in the cycle ``o.ready`` fell (``i.ready``
is registered, so the producer learns of the stall one cycle late).

``forward=False`` cuts only the ``ready`` path, with no latency: the beat passes straight through while the
skid register is empty, and the skid register catches the one beat accepted in the cycle ``o.ready`` fell.
For a producer whose ``valid`` and ``payload`` already come from flip-flops (a pipeline's output register)
and whose stall enable must not depend on the consumer's decision in the same cycle.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Two-entry register slice for a stream of ``shape`` (see the module docstring).

    ``forward=True``: ``o.valid``, ``o.payload`` and ``i.ready`` are flip-flop outputs; one cycle of latency.
    ``forward=False``: ``i.ready`` is a flip-flop output, ``o`` follows ``i`` in the same cycle while the skid
    register is empty. Beats leave in the order they came, one per cycle while ``o.ready`` holds.
    """

    def __init__(self, shape, *, forward=True):
        self.shape = shape
        self.forward = forward
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid = Signal(self.shape)
        skid_valid = Signal()
        m.d.comb += self.i.ready.eq(~skid_valid)
        if not self.forward:
            m.d.comb += [self.o.valid.eq(skid_valid | self.i.valid),
                         self.o.payload.eq(Mux(skid_valid, skid, self.i.payload))]
            with m.If(self.o.ready):
                m.d.sync += skid_valid.eq(0)
            with m.Elif(self.i.valid & ~skid_valid):         # output stalled: catch the accepted beat
                m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
            return m
        with m.If(self.o.ready | ~self.o.valid):            # the output register is free this cycle
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~skid_valid):             # output stalled: catch the accepted beat
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
