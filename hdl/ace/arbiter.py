"""Oldest-first selection among the FSMs, by an age matrix.

The control unit serves FSMs in the order their chunks were dispatched (the chunk's wrapping sequence number),
so the oldest chunk in flight always makes progress: the decoder picks, the issue arbiter grants and the
partition manager moves the oldest requester first.

Comparing sequence numbers where a pick is made would put a tree of subtractions in front of every grant. The
order changes only when an FSM takes a chunk, so it is kept instead as an **age matrix** (:class:`AgeMatrix`):
a bit per pair of FSMs, ``older[f]`` bit ``g`` set when FSM ``f``'s chunk was dispatched before FSM ``g``'s,
registered from the sequence numbers the FSMs will hold in the next cycle (so it is exact in every cycle). A
pick (:class:`OldestPick`) is then one AND-OR per requester: ``f`` wins when it requests and every other
requester is younger.
"""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.refuse import Checked

__all__ = ["AgeMatrix", "OldestPick", "SEQ_BITS", "age_layout", "age_matrix_model", "oldest_first_model",
           "oldest_pick_model"]

#: Width of the chunk dispatch sequence number.
SEQ_BITS = 10


def age_layout(n):
    """The age matrix of ``n`` FSMs: ``older[f]`` bit ``g`` = FSM ``f``'s chunk is older than FSM ``g``'s."""
    return data.ArrayLayout(unsigned(n), n)


def _older(a, b):
    """Sequence number ``a`` (of the lower-indexed FSM) is older than or as old as ``b``: ``(a - b)`` modulo
    ``2**SEQ_BITS`` is zero or has its top bit set. Exact while the two lie within half the sequence space of
    each other (at most a few dozen chunks are in flight); a tie goes to the lower index."""
    d = (a - b)[:SEQ_BITS]
    return (d == 0) | d[SEQ_BITS - 1]


class _AtLeastOne(Checked):
    @classmethod
    def check(cls, n):
        if n < 1:
            raise ValueError(f"{cls.__name__} needs at least one FSM, not {n}")


class AgeMatrix(_AtLeastOne, wiring.Component):
    """The registered age matrix of ``n`` FSMs.

    Ports
    -----
    seq_next : In(ArrayLayout(unsigned(SEQ_BITS), n))
        Each FSM's chunk sequence number in the next cycle (the one it takes this cycle, else the one it holds).
    older : Out(age_layout(n))
        The matrix of this cycle's sequence numbers: ``n (n - 1) / 2`` flip-flops (the upper triangle), each
        fed by one ``SEQ_BITS``-wide compare; the lower triangle is their complement, the diagonal zero.
    """

    def __init__(self, n):
        self.n = n
        super().__init__({"seq_next": In(data.ArrayLayout(unsigned(SEQ_BITS), n)), "older": Out(age_layout(n))})

    def elaborate(self, platform):
        m = Module()
        n = self.n
        for f in range(n):
            for g in range(f + 1, n):
                bit = Signal(name=f"older_{f}_{g}", init=1)     # sequence numbers reset to 0: a tie
                m.d.sync += bit.eq(_older(self.seq_next[f], self.seq_next[g]))
                m.d.comb += [self.older[f][g].eq(bit), self.older[g][f].eq(~bit)]
        return m


class OldestPick(_AtLeastOne, wiring.Component):
    """``onehot`` / ``sel`` = the requester whose chunk is oldest by the age matrix, ``valid`` if any.

    Purely combinational and flat: requester ``f`` wins when no other requester is older (an AND over the
    other ``n - 1`` requesters of ``~req[g] | older[f][g]``); ``sel`` encodes the winner (an OR tree). The
    matrix is a strict order among requesters (their chunks lie close together), so exactly one wins.

    Ports
    -----
    req : In(n), older : In(age_layout(n))
    onehot : Out(n), sel : Out(range(n)), valid : Out(1)
    """

    def __init__(self, n):
        self.n = n
        super().__init__({
            "req": In(n), "older": In(age_layout(n)),
            "onehot": Out(n), "sel": Out(unsigned(max(1, (n - 1).bit_length()))), "valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, req = self.n, self.req
        for f in range(n):
            beaten = Cat(*[req[g] & ~self.older[f][g] for g in range(n) if g != f])
            m.d.comb += self.onehot[f].eq(req[f] & ~beaten.any() if n > 1 else req[f])
        for b in range(len(self.sel)):
            m.d.comb += self.sel[b].eq(Cat(*[self.onehot[f] for f in range(n) if f >> b & 1]).any())
        m.d.comb += self.valid.eq(req.any())
        return m


def age_matrix_model(seq):
    """Reference: the age matrix :class:`AgeMatrix` registers for sequence numbers ``seq`` (rows of bools)."""
    n, mod = len(seq), 1 << SEQ_BITS
    older = [[False] * n for _ in range(n)]
    for f in range(n):
        for g in range(f + 1, n):
            d = (seq[f] - seq[g]) % mod
            older[f][g] = d == 0 or d >= mod // 2
            older[g][f] = not older[f][g]
    return older


def oldest_pick_model(req, older):
    """Reference: the index :class:`OldestPick` selects (None if no request)."""
    win = [f for f, r in enumerate(req) if r and all(not q or older[f][g] for g, q in enumerate(req) if g != f)]
    assert len(win) <= 1, f"the age matrix is not an order among the requesters {req}"
    return win[0] if win else None


def oldest_first_model(req, seq):
    """The specification: the requester whose sequence number is oldest in wrapping order (the requesters'
    numbers lying within half the sequence space of each other), ties to the lowest index; None if none."""
    mod = 1 << SEQ_BITS
    best = None
    for i, (r, s) in enumerate(zip(req, seq)):
        if r and (best is None or (s - seq[best]) % mod >= mod // 2):
            best = i
    return best
