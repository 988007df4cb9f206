"""A link cut in two, for simulating a system as partitions in separate simulator processes.

A :class:`~syncfabric.hdl.system.link.Link` is a token bucket that paces the sender, then two pure delay lines
(flits forward, credits back) whose receiving ends are always ready. So it can be cut between its delay lines'
write and read sides without changing a single cycle: :class:`LinkSender` sits in the sender's partition (the
pacing, the flit ring's write side, the credit ring's read side) and :class:`LinkReceiver` in the receiver's
(the flit ring's read side, the credit ring's write side). Each ring is a memory of ``depth`` rows written at
the cycle count (``now``, counted from reset, the same in every partition) and read ``latency`` cycles behind.

Between the two halves a coordinator copies rows: after the partitions have run cycles ``[t, t + W)``, the rows
the sender's flit ring and the receiver's credit ring wrote in those cycles (``now`` = ``t mod depth`` on) go to
the same rows of the other side's ring. A row written in cycle ``c`` is read by the other side in cycle
``c + latency - 1`` at the earliest (the read port is synchronous), so windows of ``W <= latency - 1`` cycles
never read a row before it was copied: the cut system is cycle for cycle the uncut one
(``tests/hdl/test_cut.py``). The rows are reached through the back door (the simulator's view of the memory);
the ``load`` port writes a read side's ring from the design (and keeps the memory a RAM in the Verilog: a
memory without a write port would be a constant).

So that a coordinator outside the simulator copies only the rows that carry something, each write side keeps
``sent``: a shift register of the rows' valid bits (a flit, or a credit), bit 0 the row written at the last
clock edge (row ``now - 1``), bit ``i`` row ``now - 1 - i``. A read side's row that held something a lap ago
and nothing now must be cleared by the coordinator (:class:`syncfabric.host.transports.ace.partition.CutRings`).
"""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..common.layouts import credit_layout, flit_layout
from .link import RATE_DEN_MAX, pace

__all__ = ["LinkSender", "LinkReceiver", "ring_depth", "flit_row_layout"]


def ring_depth(max_latency):
    """Rows of every ring of a link of at most ``max_latency`` cycles (a power of two, as
    :class:`~syncfabric.hdl.system.link.DelayLine`)."""
    return max(2, 1 << ceil_log2(max_latency))


def flit_row_layout(beat_bytes):
    """A flit ring's row: whether a flit was sent in that cycle, and the flit (with any injected bit flip)."""
    return data.StructLayout({"valid": 1, "flit": flit_layout(beat_bytes)})


def _load_signature(shape, depth):
    return In(data.StructLayout({"en": 1, "addr": unsigned(ceil_log2(depth)), "data": shape}))


def _write_side(m, shape, depth, value, now):
    """A ring written with ``value`` at row ``now`` every cycle (read only through the back door)."""
    ring = Memory(shape=shape, depth=depth, init=[])
    wr = ring.write_port()
    m.d.comb += [wr.addr.eq(now), wr.data.eq(value), wr.en.eq(1)]
    return ring


def _read_side(m, shape, depth, latency, now, load):
    """A ring read ``latency`` rows behind ``now`` (the row written ``latency`` cycles ago on the other side
    of the cut), written by the back door or ``load``; returns (memory, data)."""
    ring = Memory(shape=shape, depth=depth, init=[])
    wr = ring.write_port()
    rd = ring.read_port(transparent_for=(wr,))
    m.d.comb += [wr.addr.eq(load.addr), wr.data.eq(load.data), wr.en.eq(load.en),
                 rd.addr.eq(now + 1 - latency)]      # truncated to the address width: modulo depth
    return ring, rd.data


class LinkSender(wiring.Component):
    """The sender's half of a cut :class:`~syncfabric.hdl.system.link.Link`: ``tx`` paced at
    ``rate_num/rate_den`` (``stall`` holds it, ``inject`` flips bit 0 of an accepted flit) into the flit ring
    ``flit_ring``, and ``credit_out`` read ``credit_latency`` cycles behind from the credit ring ``credit_ring``
    (filled by the back door or ``credit_load``). ``now`` is the ring row of this cycle; ``flits``/``busy``
    count as the link's; ``sent`` the valid bits of the flit ring's last rows (bit 0: row ``now - 1``)."""

    def __init__(self, beat_bytes, max_latency, latency=1, rate=(1, 1)):
        self.beat_bytes, self.max_latency = beat_bytes, max_latency
        self.depth = depth = ring_depth(max_latency)
        num, den = rate
        super().__init__({
            "tx": In(stream.Signature(flit_layout(beat_bytes))),
            "credit_out": Out(credit_layout()),
            "credit_latency": In(range(1, max_latency + 1), init=latency),
            "rate_num": In(range(1, RATE_DEN_MAX + 1), init=num),
            "rate_den": In(range(1, RATE_DEN_MAX + 1), init=den),
            "inject": In(1),
            "stall": In(1),
            "credit_load": _load_signature(credit_layout(), depth),
            "now": Out(range(depth)),
            "sent": Out(depth),
            "flits": Out(32),
            "busy": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        fire = pace(m, self.tx, self.rate_num, self.rate_den, self.stall)
        m.d.sync += self.now.eq(self.now + 1)           # wraps: depth is a power of two
        row = Signal(flit_row_layout(self.beat_bytes))
        m.d.comb += [row.valid.eq(fire), row.flit.eq(self.tx.payload.as_value() ^ (self.inject & fire))]
        m.submodules.flit_ring = self.flit_ring = _write_side(m, flit_row_layout(self.beat_bytes), self.depth,
                                                              row, self.now)
        ring, credit = _read_side(m, credit_layout(), self.depth, self.credit_latency, self.now, self.credit_load)
        m.submodules.credit_ring = self.credit_ring = ring
        m.d.comb += self.credit_out.eq(credit)
        m.d.sync += [self.flits.eq(self.flits + fire), self.busy.eq(self.busy + self.tx.valid),
                     self.sent.eq(Cat(fire, self.sent[:-1]))]
        return m


class LinkReceiver(wiring.Component):
    """The receiver's half of a cut :class:`~syncfabric.hdl.system.link.Link`: ``rx`` read ``latency`` cycles
    behind from the flit ring ``flit_ring`` (filled by the back door or ``flit_load``; ``rx.ready`` is ignored
    as the link's), and ``credit_in`` written into the credit ring ``credit_ring``. ``now`` as the sender's;
    ``sent`` the credit ring's last rows that carry a credit (bit 0: row ``now - 1``)."""

    def __init__(self, beat_bytes, max_latency, latency=1):
        self.beat_bytes, self.max_latency = beat_bytes, max_latency
        self.depth = depth = ring_depth(max_latency)
        super().__init__({
            "rx": Out(stream.Signature(flit_layout(beat_bytes))),
            "credit_in": In(credit_layout()),
            "latency": In(range(1, max_latency + 1), init=latency),
            "flit_load": _load_signature(flit_row_layout(beat_bytes), depth),
            "now": Out(range(depth)),
            "sent": Out(depth),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.now.eq(self.now + 1)
        rows = flit_row_layout(self.beat_bytes)
        ring, row = _read_side(m, rows, self.depth, self.latency, self.now, self.flit_load)
        m.submodules.flit_ring = self.flit_ring = ring
        m.d.comb += [self.rx.valid.eq(row.valid), self.rx.payload.eq(row.flit)]
        m.submodules.credit_ring = self.credit_ring = _write_side(m, credit_layout(), self.depth, self.credit_in,
                                                                  self.now)
        cr = self.credit_in
        m.d.sync += self.sent.eq(Cat(cr.beat | cr.hdr | cr.ack | cr.nak, self.sent[:-1]))
        return m
