"""Model of one direction of a point-to-point link, for system simulation: fixed latency, a rate limit, a
credit return path with its own latency, and fault injection.

Both delay lines are :class:`DelayLine`: a memory written every cycle at a slot indexed by the cycle count
modulo its depth (the slot is the flit's timestamp) and read ``latency`` slots behind, so a latency of a
thousand cycles costs one memory of a thousand rows rather than a thousand-stage shift register.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, Value, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..common.layouts import credit_layout, flit_layout

__all__ = ["DelayLine", "Link"]


class DelayLine(wiring.Component):
    """``o`` in cycle ``t`` is ``i`` of cycle ``t - latency`` (zero before that), ``latency >= 1``.

    A ring of ``2**ceil(log2(latency))`` rows written every cycle at the cycle count; the synchronous read
    port reads the row written ``latency - 1`` cycles before, transparent so that ``latency = 1`` reads the
    row being written. The ring is not cleared by reset (a model for simulation: reset it only at time 0).
    """

    def __init__(self, shape, latency):
        if latency < 1:
            raise ValueError(f"latency must be >= 1, not {latency}")
        self.latency = latency
        super().__init__({"i": In(shape), "o": Out(shape)})

    def elaborate(self, platform):
        m = Module()
        depth = max(2, 1 << ceil_log2(self.latency))
        m.submodules.ring = ring = Memory(shape=unsigned(len(Value.cast(self.i))), depth=depth, init=[])
        wr = ring.write_port()
        rd = ring.read_port(transparent_for=(wr,))
        now = Signal(range(depth))
        m.d.sync += now.eq(now + 1)             # wraps: depth is a power of two
        m.d.comb += [
            wr.addr.eq(now),
            wr.data.eq(self.i),
            wr.en.eq(1),
            rd.addr.eq(now + 1 - self.latency),  # truncated to the address width: modulo depth
            self.o.eq(rd.data),
        ]
        return m


class Link(wiring.Component):
    """One direction of a link between a :class:`~syncfabric.hdl.ace.link.TxPort` and an
    :class:`~syncfabric.hdl.ace.link.RxPort`.

    Parameters
    ----------
    beat_bytes : flit payload width.
    latency : cycles from a flit's acceptance on ``tx`` to its appearance on ``rx`` (>= 1).
    rate : ``(num, den)``, flits per cycle ``num/den <= 1``; a token bucket of one flit paces ``tx.ready``.
    credit_latency : cycles from ``credit_in`` to ``credit_out`` (default ``latency``).

    Ports
    -----
    tx : In(stream.Signature(flit_layout(beat_bytes)))
    rx : Out(stream.Signature(flit_layout(beat_bytes)))
        Each flit is valid for one cycle, exactly ``latency`` cycles after its ``tx`` handshake; ``rx.ready``
        is ignored (the receiver is always ready).
    credit_in : In(credit_layout()), credit_out : Out(credit_layout())
    inject : In(1)
        In a cycle that accepts a flit, flips bit 0 of its data (the receiver's CRC check must catch it).
    stall : In(1)
        Holds ``tx.ready`` low in this cycle (random backpressure from a testbench); tokens still accrue.
    flits : Out(32)
        Flits accepted.
    busy : Out(32)
        Cycles with ``tx.valid`` (the link sending or pacing a flit); ``flits / busy`` is the achieved rate.
    """

    def __init__(self, beat_bytes, latency, rate=(1, 1), credit_latency=None):
        num, den = rate
        if not 0 < num <= den:
            raise ValueError(f"rate must be num/den with 0 < num <= den, not {num}/{den}")
        if latency < 1 or (credit_latency is not None and credit_latency < 1):
            raise ValueError("latencies must be >= 1")
        self.beat_bytes, self.latency, self.rate = beat_bytes, latency, (num, den)
        self.credit_latency = latency if credit_latency is None else credit_latency
        super().__init__({
            "tx": In(stream.Signature(flit_layout(beat_bytes))),
            "rx": Out(stream.Signature(flit_layout(beat_bytes))),
            "credit_in": In(credit_layout()),
            "credit_out": Out(credit_layout()),
            "inject": In(1),
            "stall": In(1),
            "flits": Out(32),
            "busy": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        num, den = self.rate

        # Token bucket in 1/den flit units. Capped at den + num - 1: never reached while backlogged (so the
        # long-run rate is exactly num/den) and at most one flit of burst after idling.
        tokens = Signal(range(den + num), init=den)
        fire = self.tx.valid & self.tx.ready
        m.d.comb += self.tx.ready.eq((tokens >= den) & ~self.stall)
        after = tokens - Mux(fire, den, 0) + num
        m.d.sync += tokens.eq(Mux(after > den + num - 1, den + num - 1, after))

        m.submodules.flit_line = flit_line = DelayLine(unsigned(1 + len(self.tx.payload.as_value())),
                                                       self.latency)
        flipped = self.tx.payload.as_value() ^ (self.inject & fire)
        m.d.comb += [
            flit_line.i.eq(Cat(fire, flipped)),
            self.rx.valid.eq(flit_line.o[0]),
            self.rx.payload.eq(flit_line.o[1:]),
        ]

        m.submodules.credit_line = credit_line = DelayLine(credit_layout(), self.credit_latency)
        m.d.comb += [credit_line.i.eq(self.credit_in), self.credit_out.eq(credit_line.o)]

        m.d.sync += [
            self.flits.eq(self.flits + fire),
            self.busy.eq(self.busy + self.tx.valid),
        ]
        return m
