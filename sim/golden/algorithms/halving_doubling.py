"""Halving-doubling (Rabenseifner) on a switch: recursive-halving reduce-scatter + recursive-doubling
all-gather, for ``P`` a power of two. ``n_blocks = P`` (one block per rank), slot = block, one phase.

Reduce-scatter step ``j`` (``j = 0 .. log2 P - 1``) pairs rank ``r`` with ``r ^ d``, ``d = P >> (j+1)``:
both hold the same block range; the rank with bit ``d`` clear keeps the lower half, the other the upper
half; each SENDs the half it gives away and RECVs-and-reduces the half it keeps. Rank ``r`` ends with block
``r`` (so reduce-scatter leaves segment ``r`` at rank ``r``). All-gather step ``j`` pairs ``r`` with
``r ^ (1 << j)``: each SENDs the ``2**j`` blocks it has, RECVs the partner's. In all-reduce the last
reduce-scatter RECV forwards its result to the first all-gather partner (same partner ``r ^ 1``) in the same
pass (reduce-and-forward), so the first all-gather SEND disappears.
"""

from ..topology import Switch
from ._build import Builder, send, recv

__all__ = ["halving_doubling"]


def halving_doubling(collective, topology):
    """Programs for halving-doubling all-reduce, reduce-scatter or all-gather on a switch."""
    if not isinstance(topology, Switch):
        raise ValueError(f"halving-doubling needs a switch topology (partners are not neighbours on "
                         f"{topology.spec})")
    P = topology.n_endpoints
    if P & (P - 1):
        raise ValueError(f"halving-doubling needs a power-of-two number of ranks, got {P}")
    k = P.bit_length() - 1
    b = Builder(P, collective, "halving-doubling", P, P)
    b.phase(f"halving-doubling-{collective}", (0,))
    ar = collective == "allreduce"
    for r in range(P):
        for blk in (range(P) if collective != "allgather" else (r,)):
            b.load(r, blk, blk)
        if collective in ("allreduce", "reduce_scatter"):
            lo, hi = 0, P
            for j in range(k):
                d = P >> (j + 1)
                partner, mid = r ^ d, (lo + hi) // 2
                keep, give = ((mid, hi), (lo, mid)) if r & d else ((lo, mid), (mid, hi))
                b.add(r, [send(x, x, 0, partner, ("rs", j, x)) for x in range(*give)])
                if ar and j == k - 1:
                    b.add(r, [recv(x, x, 0, ("rs", j, x), True, 0, r ^ 1, ("ag", 0, x)) for x in range(*keep)])
                else:
                    b.add(r, [recv(x, x, 0, ("rs", j, x), True) for x in range(*keep)])
                lo, hi = keep
        if collective in ("allreduce", "allgather"):
            for j in range(k):
                d = 1 << j
                partner = r ^ d
                mine, theirs = r & ~(d - 1), partner & ~(d - 1)
                if not (ar and j == 0):
                    b.add(r, [send(x, x, 0, partner, ("ag", j, x)) for x in range(mine, mine + d)])
                b.add(r, [recv(x, x, 0, ("ag", j, x)) for x in range(theirs, theirs + d)])
        for blk in (range(P) if collective != "reduce_scatter" else (r,)):
            b.store(r, blk, blk)
    return b.build()
