"""Ring algorithms on a :class:`~..topology.Ring` (uni- or bidirectional) or on a switch used as a ring.

* all-reduce / reduce-scatter / all-gather: the classic ring (ACE Fig. 8), one phase. Unidirectional:
  ``P`` blocks per chunk for all-reduce, one block per segment otherwise. Bidirectional: the chunk is split
  in two halves (all-reduce: blocks ``[0, P)`` and ``[P, 2P)``; segmented: sub-block 0 / 1 of every
  segment) running the same algorithm in opposite directions, interleaved step by step.
  After the reduce-scatter part rank ``r`` owns block ``r`` (of each half), so reduce-scatter leaves
  segment ``r`` at rank ``r`` as the collective requires.
* broadcast / reduce: a pipeline (chain) along the ring from / to the root, ``P`` blocks per direction, one
  block per tick; bidirectional rings send half the blocks each way round the whole ring (every link
  carries half the data).

Slot = block everywhere (``n_slots = n_blocks``): the chunk context holds the whole chunk working set.
LOADs come first; each STORE follows the last write of its slot (``_build``), so a final block goes back to
memory while the rest of the chunk is still moving.
"""

from ..topology import Ring, Switch
from ._build import Builder, merge_ticks, ring_schedule, chain_schedule

__all__ = ["ring_collective", "ring_pipeline"]

_KIND = {"allreduce": "ar", "reduce_scatter": "rs", "allgather": "ag"}


def _directions(topology, bidirectional):
    """``[(members in flow order, out_port, in_port), ...]`` for the directions used."""
    if isinstance(topology, Switch):
        if bidirectional:
            raise ValueError("bidir-ring needs a bidirectional ring topology, not a switch")
        return [(list(range(topology.n_endpoints)), 0, 0)]
    if not isinstance(topology, Ring):
        raise ValueError(f"ring algorithms need a ring or a switch topology, not {topology.spec}")
    if bidirectional and not topology.bidirectional:
        raise ValueError(f"bidir-ring needs a bidirectional ring, {topology.spec} is unidirectional")
    members = topology.members()
    dirs = [(members, 0, 1)]
    if bidirectional:
        dirs.append((members[::-1], 1, 0))
    return dirs


def _ports(dirs):
    return tuple(sorted({p for _, o, i in dirs for p in (o, i)}))


def ring_collective(collective, topology, bidirectional=False):
    """Programs for ring all-reduce, reduce-scatter or all-gather (collective names as in chunking)."""
    kind = _KIND[collective]
    dirs = _directions(topology, bidirectional)
    P, D = topology.n_endpoints, len(dirs)
    n_blocks = D * P
    if collective == "allreduce":
        groups = [{r: [h * P + r] for r in range(P)} for h in range(D)]
    else:
        groups = [{r: [r * D + h] for r in range(P)} for h in range(D)]
    algo = "bidir-ring" if bidirectional else "ring"
    b = Builder(P, collective, algo, n_blocks, n_blocks)
    b.phase(f"ring-{collective}", _ports(dirs))
    for r in range(P):
        loads = range(n_blocks) if collective != "allgather" else [g[r][0] for g in groups]
        for blk in sorted(loads):
            b.load(r, blk, blk)
    b.add_schedule(merge_ticks(*(ring_schedule(kind, m, groups[h], o, i, h)
                                 for h, (m, o, i) in enumerate(dirs))))
    for r in range(P):
        stores = range(n_blocks) if collective != "reduce_scatter" else [g[r][0] for g in groups]
        for blk in sorted(stores):
            b.store(r, blk, blk)
    return b.build()


def ring_pipeline(collective, topology, root, bidirectional=False):
    """Programs for a pipelined broadcast or reduce along the ring (collective ``"broadcast"``/``"reduce"``)."""
    dirs = _directions(topology, bidirectional)
    P, D = topology.n_endpoints, len(dirs)
    n_blocks = D * P
    algo = "bidir-ring" if bidirectional else "ring"
    b = Builder(P, collective, algo, n_blocks, n_blocks, root)
    b.phase(f"ring-{collective}", _ports(dirs))
    bcast = collective == "broadcast"
    for r in range(P):
        if not bcast or r == root:
            for blk in range(n_blocks):
                b.load(r, blk, blk)
    scheds = []
    for h, (m, o, i) in enumerate(dirs):
        k = m.index(root)
        flow = m[k:] + m[:k] if bcast else m[k + 1:] + m[:k + 1]
        blocks = range(h * P, (h + 1) * P)
        scheds.append(chain_schedule("bcast" if bcast else "reduce", flow, blocks, o, i, h))
    b.add_schedule(merge_ticks(*scheds))
    for r in range(P):
        if bcast or r == root:
            for blk in range(n_blocks):
                b.store(r, blk, blk)
    return b.build()
