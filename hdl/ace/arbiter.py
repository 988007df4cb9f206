"""Oldest-first selection among requesters that each carry a wrapping sequence number.

The control unit grants FSMs in the order their chunks were dispatched (the chunk's sequence number), so the
oldest chunk in flight always makes progress: the decoder picks, the issue arbiter grants and the partition
manager moves the oldest requester first.
"""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["OldestFirst", "SEQ_BITS", "oldest_first_model"]

#: Width of the chunk dispatch sequence number the arbiters compare.
SEQ_BITS = 10


class OldestFirst(wiring.Component):
    """``sel`` = the requester (``req`` bit) whose ``seq`` is oldest in wrapping order, ``valid`` if any.

    Purely combinational: a balanced tree of pairwise comparisons, ``ceil(log2(n))`` levels of one
    ``SEQ_BITS``-wide subtraction and a mux each. Sequence numbers are compared as ``(b - a)`` modulo
    ``2**SEQ_BITS`` (its top bit set: ``b`` is older), which is exact while the requesters' numbers lie within
    half the sequence space of each other (at most a few dozen chunks are in flight). Ties go to the lower
    index.

    Ports
    -----
    req : In(n)
    seq : In(ArrayLayout(unsigned(SEQ_BITS), n))
    sel : Out(range(n)), valid : Out(1)
    """

    def __init__(self, n):
        if n < 1:
            self._MustUse__silence = True       # a refused block is not an unused design: no warning for it
            raise ValueError(f"OldestFirst needs at least one requester, not {n}")
        self.n = n
        super().__init__({
            "req": In(n),
            "seq": In(data.ArrayLayout(unsigned(SEQ_BITS), n)),
            "sel": Out(unsigned(max(1, (n - 1).bit_length()))),
            "valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w = len(self.sel)
        level = [(self.req[i], Const(i, w), self.seq[i]) for i in range(self.n)]
        while len(level) > 1:
            nxt = []
            for k in range(0, len(level) - 1, 2):
                (va, ia, sa), (vb, ib, sb) = level[k], level[k + 1]
                older_b = Signal()
                m.d.comb += older_b.eq(vb & (~va | (sb - sa)[SEQ_BITS - 1]))
                v, i, q = Signal(), Signal(w), Signal(SEQ_BITS)
                m.d.comb += [v.eq(va | vb), i.eq(Mux(older_b, ib, ia)), q.eq(Mux(older_b, sb, sa))]
                nxt.append((v, i, q))
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        v, i, _ = level[0]
        m.d.comb += [self.sel.eq(i), self.valid.eq(v)]
        return m


def oldest_first_model(req, seq):
    """Reference: the index :class:`OldestFirst` selects (None if no request), by the same tree."""
    level = [(bool(r), i, s) for i, (r, s) in enumerate(zip(req, seq))]
    mod = 1 << SEQ_BITS
    while len(level) > 1:
        nxt = []
        for k in range(0, len(level) - 1, 2):
            (va, ia, sa), (vb, ib, sb) = level[k], level[k + 1]
            older_b = vb and (not va or ((sb - sa) % mod) >> (SEQ_BITS - 1))
            nxt.append((va or vb, ib if older_b else ia, sb if older_b else sa))
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    v, i, _ = level[0]
    return i if v else None
