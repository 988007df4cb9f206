"""Model of one direction of a point-to-point link, for system simulation: a latency, a rate limit, a credit
return path with its own latency, and fault injection (random bit flips, stalls, lost and duplicated flits
from LFSRs in the model, so a fault campaign costs no per-cycle work in the testbench).

Latency and rate are inputs (their reset values are the constructor's), so one build of a system serves
every latency up to ``max_latency`` and every rate: a testbench or a sweep sets them before it releases
reset. Both delay lines are :class:`DelayLine`: a memory written every cycle at a slot indexed by the cycle
count modulo its depth (the slot is the flit's timestamp) and read ``latency`` slots behind, so a latency of
a thousand cycles costs one memory of a thousand rows rather than a thousand-stage shift register.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..common.axiram import Lfsr
from ..common.layouts import credit_layout, flit_layout
from ..common.refuse import Checked

__all__ = ["DelayLine", "FAULT_ONE", "LINK_FAULTS", "Link", "RATE_DEN_MAX", "fault_threshold", "pace"]

#: Largest rate denominator a link takes (rates are num/den flits per cycle, ``0 < num <= den``).
RATE_DEN_MAX = 256


#: The fault probability inputs are in units of 1 / FAULT_ONE.
FAULT_ONE = 1 << 16
#: The random faults a link model draws, in the order of its ``<kind>_prob`` inputs (and of a system top's
#: ``link<l>_<kind>_prob`` inputs): a flipped data bit, a stalled cycle, a lost flit, a duplicated flit.
LINK_FAULTS = ("flip", "stall", "drop", "dup")


def fault_threshold(prob):
    """The ``flip_prob``/``stall_prob`` input value of probability ``prob`` (0 <= prob < 1)."""
    if not 0 <= prob < 1:
        raise ValueError(f"a fault probability must be in [0, 1), not {prob}")
    return min(FAULT_ONE - 1, round(prob * FAULT_ONE))


def _check_latency(latency, max_latency, what="latency"):
    if not 1 <= latency <= max_latency:
        raise ValueError(f"{what} must be in 1..{max_latency}, not {latency}")


def pace(m, tx, num, den, stall):
    """Pace stream ``tx`` at ``num/den`` flits per cycle (signals) with a token bucket in ``1/den`` flit
    units, holding ``tx.ready`` low while ``stall``; returns the handshake (``fire``). The bucket is capped at
    ``den + num - 1``: never reached while backlogged (so the long-run rate is exactly ``num/den``) and at most
    one flit of burst after idling. It starts full."""
    cap = Signal(range(2 * RATE_DEN_MAX))
    tokens = Signal(range(2 * RATE_DEN_MAX + 1))
    started = Signal()
    fire = tx.valid & tx.ready
    m.d.comb += [cap.eq(den + num - 1), tx.ready.eq(started & (tokens >= den) & ~stall)]
    after = tokens - Mux(fire, den, 0) + num
    m.d.sync += [tokens.eq(Mux(~started | (after > cap), cap, after)), started.eq(1)]
    return fire


class DelayLine(Checked, wiring.Component):
    """``o`` in cycle ``t`` is ``i`` of cycle ``t - latency`` (zero before that), ``1 <= latency <=
    max_latency``; ``latency`` is an input whose reset value is the constructor's.

    A ring of ``2**ceil(log2(max_latency))`` rows written every cycle at the cycle count; the synchronous
    read port reads the row written ``latency - 1`` cycles before, transparent so that ``latency = 1`` reads
    the row being written. The ring is not cleared by reset (a model for simulation: reset it only at time 0)
    and ``latency`` is meant to be set while the line is idle (changing it moves the read pointer).
    """

    @classmethod
    def check(cls, shape, latency, max_latency=None):
        _check_latency(latency, latency if max_latency is None else max_latency)

    def __init__(self, shape, latency, max_latency=None):
        max_latency = latency if max_latency is None else max_latency
        self.max_latency = max_latency
        super().__init__({"i": In(shape), "o": Out(shape),
                          "latency": In(range(1, max_latency + 1), init=latency)})

    def elaborate(self, platform):
        m = Module()
        depth = max(2, 1 << ceil_log2(self.max_latency))
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


class Link(Checked, wiring.Component):
    """One direction of a link between a :class:`~syncfabric.hdl.ace.link.TxPort` and an
    :class:`~syncfabric.hdl.ace.link.RxPort`.

    Parameters
    ----------
    beat_bytes : flit payload width.
    latency : reset value of ``latency``: cycles from a flit's acceptance on ``tx`` to its appearance on
        ``rx`` (>= 1).
    rate : ``(num, den)``, reset value of ``rate_num``/``rate_den``: flits per cycle ``num/den <= 1``
        (``den <= RATE_DEN_MAX``); a token bucket of one flit paces ``tx.ready``.
    credit_latency : reset value of ``credit_latency``: cycles from ``credit_in`` to ``credit_out``
        (default ``latency``).
    max_latency : the largest latency the ports accept (default: the larger of the two latencies).

    Ports
    -----
    tx : In(stream.Signature(flit_layout(beat_bytes)))
    rx : Out(stream.Signature(flit_layout(beat_bytes)))
        Each flit is valid for one cycle, exactly ``latency`` cycles after its ``tx`` handshake; ``rx.ready``
        is ignored (the receiver is always ready).
    credit_in : In(credit_layout()), credit_out : Out(credit_layout())
    latency, credit_latency, rate_num, rate_den : In
        The link's parameters; set them before traffic starts (they are not meant to change under load).
    inject : In(1)
        In a cycle that accepts a flit, flips bit 0 of its data (the receiver's CRC check must catch it).
    stall : In(1)
        Holds ``tx.ready`` low in this cycle (random backpressure from a testbench); tokens still accrue.
    flip_prob, stall_prob, drop_prob, dup_prob : In(16)
        Probabilities in units of ``1 / FAULT_ONE`` (:func:`fault_threshold`): that an accepted flit has one
        data bit flipped (position drawn at random), that ``tx.ready`` is held low in a cycle, that an
        accepted flit is lost, and that an accepted flit arrives twice (the copy in the next cycle, in which
        ``tx.ready`` is low). Each is drawn from its own 16-bit LFSR advanced 16 steps per cycle, seeded from
        ``salt`` (give every link of a system its own) when reset is released.
    salt : In(16)
    flits : Out(32)
        Flits accepted.
    busy : Out(32)
        Cycles with ``tx.valid`` (the link sending or pacing a flit); ``flits / busy`` is the achieved rate.
    """

    @classmethod
    def check(cls, beat_bytes, latency, rate=(1, 1), credit_latency=None, max_latency=None):
        num, den = rate
        if not 0 < num <= den <= RATE_DEN_MAX:
            raise ValueError(f"rate must be num/den with 0 < num <= den <= {RATE_DEN_MAX}, not {num}/{den}")
        credit_latency = latency if credit_latency is None else credit_latency
        if max_latency is None:
            max_latency = max(latency, credit_latency, 1)
        _check_latency(latency, max_latency)
        _check_latency(credit_latency, max_latency, "credit latency")

    def __init__(self, beat_bytes, latency, rate=(1, 1), credit_latency=None, max_latency=None):
        num, den = rate
        credit_latency = latency if credit_latency is None else credit_latency
        if max_latency is None:
            max_latency = max(latency, credit_latency, 1)
        self.beat_bytes, self.max_latency = beat_bytes, max_latency
        super().__init__(self.signature_of(beat_bytes, max_latency, latency, credit_latency, (num, den)))

    @staticmethod
    def signature_of(beat_bytes, max_latency, latency=1, credit_latency=1, rate=(1, 1)):
        """The component's signature (without building one: a system top instantiating the separately
        converted link module needs only its ports)."""
        num, den = rate
        return wiring.Signature({
            "tx": In(stream.Signature(flit_layout(beat_bytes))),
            "rx": Out(stream.Signature(flit_layout(beat_bytes))),
            "credit_in": In(credit_layout()),
            "credit_out": Out(credit_layout()),
            "latency": In(range(1, max_latency + 1), init=latency),
            "credit_latency": In(range(1, max_latency + 1), init=credit_latency),
            "rate_num": In(range(1, RATE_DEN_MAX + 1), init=num),
            "rate_den": In(range(1, RATE_DEN_MAX + 1), init=den),
            "inject": In(1),
            "stall": In(1),
            "flip_prob": In(16),
            "stall_prob": In(16),
            "drop_prob": In(16),
            "dup_prob": In(16),
            "salt": In(16),
            "flits": Out(32),
            "busy": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        # random faults: a flip decision, its bit position, a stall, a drop and a duplicate decision, each
        # from its own LFSR
        lfsrs = []
        for name, seed in (("flip", 0x5EED), ("where", 0xB175), ("stall", 0x57A1), ("drop", 0xD209),
                           ("dup", 0x0D0B)):
            m.submodules[f"lfsr_{name}"] = lf = Lfsr(seed, steps=16)
            m.d.comb += lf.salt.eq(self.salt)
            lfsrs.append(lf.value)
        flip_now, where, stall_now = lfsrs[0] < self.flip_prob, lfsrs[1], lfsrs[2] < self.stall_prob
        drop_now, dup_now = lfsrs[3] < self.drop_prob, lfsrs[4] < self.dup_prob
        again = Signal()                             # this cycle sends the copy of the last flit
        fire = pace(m, self.tx, self.rate_num, self.rate_den, self.stall | stall_now | again)

        fw = len(self.tx.payload.as_value())
        m.submodules.flit_line = flit_line = DelayLine(unsigned(1 + fw), 1, self.max_latency)
        width = len(self.tx.payload.data)            # the data lanes: a power of two, at offset 0
        bit = Signal(width)
        m.d.comb += bit.eq(Mux(flip_now, Const(1, width) << where[:ceil_log2(width)], 0))
        flipped, copy = Signal(fw), Signal(fw)
        m.d.comb += flipped.eq(self.tx.payload.as_value() ^ Mux(fire, Cat(bit | self.inject, 0), 0))
        m.d.sync += [again.eq(fire & dup_now), copy.eq(flipped)]
        m.d.comb += [
            flit_line.latency.eq(self.latency),
            flit_line.i.eq(Mux(again, Cat(1, copy), Cat(fire & ~drop_now, flipped))),
            self.rx.valid.eq(flit_line.o[0]),
            self.rx.payload.eq(flit_line.o[1:]),
        ]

        m.submodules.credit_line = credit_line = DelayLine(credit_layout(), 1, self.max_latency)
        m.d.comb += [credit_line.latency.eq(self.credit_latency), credit_line.i.eq(self.credit_in),
                     self.credit_out.eq(credit_line.o)]

        m.d.sync += [
            self.flits.eq(self.flits + fire),
            self.busy.eq(self.busy + self.tx.valid),
        ]
        return m
