"""A link port's dead-link detector: the flits a TX port sends pass through it to the link, and when the link
takes none of them for STEP_TIMEOUT cycles the port is declared down (LINK_DOWN) and its flits are dropped from
then on (docs/engine.md section 13).

A dead link (a neighbour that stopped, a cable pulled: the link's ready held low) would otherwise hold the
port's flit forever, and behind it the TX mux, the send unit and every receive unit forwarding to the port:
steps already issued to those units never end, so the step timeout of the FSMs (which gives up steps waiting
for their grant) could not end their commands. Dropping the flits lets those units finish; the messages are
lost, so the receivers' steps time out and the senders' later steps on the port wait for credits that never
come back and time out too. A send job that finishes while its port is down reports TIMEOUT.

``down`` is sticky until the engine is aborted (the unit is reset with the rest of the datapath). A flit
offered when the port goes down is withdrawn (the link is dead: nobody takes it). The counter is a down-counter
reloaded whenever the flit moves or none waits, so the compare is a zero test of a register. It resets to 0,
which would let a wait that started in the first cycle after reset last until the flit moves; the TX port's
flit register resets empty (and so does an FSM's step, for the same counter in :mod:`.fsm`), so every wait
starts from a loaded counter.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import flit_layout

__all__ = ["TxWatch"]


class TxWatch(wiring.Component):
    """Ports: ``i`` (flits from the TX port), ``o`` (to the link), ``limit`` (cycles a flit may wait for the
    link; 0 = never down), ``down`` (sticky: the link took no flit for ``limit`` cycles; ``i`` is drained)."""

    def __init__(self, cfg):
        self.cfg = cfg
        flit = stream.Signature(flit_layout(cfg.beat_bytes))
        super().__init__({"i": In(flit), "o": Out(flit), "limit": In(32), "down": Out(1)})

    def elaborate(self, platform):
        m = Module()
        left = Signal(32)
        waiting = self.i.valid & ~self.o.ready & ~self.down
        m.d.comb += [
            self.o.payload.eq(self.i.payload),
            self.o.valid.eq(self.i.valid & ~self.down),
            self.i.ready.eq(self.o.ready | self.down),
        ]
        with m.If(~waiting):
            m.d.sync += left.eq(self.limit)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        with m.If(waiting & (left == 1)):
            m.d.sync += self.down.eq(1)
        return m
