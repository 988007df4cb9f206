"""Hierarchical (dimension by dimension) algorithms on an ``L x V x H`` :class:`~..topology.Torus`.

Every dimension is a bidirectional ring, and every algorithm here splits the chunk into two halves: half 0
uses the ``+`` direction of every ring, half 1 the ``-`` direction (blocks of half ``h`` are
``[h*n_blocks/2, (h+1)*n_blocks/2)`` for all-reduce/broadcast/reduce and sub-block ``h`` of every segment
for reduce-scatter/all-gather). Dimensions of size 1 are skipped. Slot = block.

all-reduce (ACE section V, 4 phases): reduce-scatter on the local ring, all-reduce on the vertical ring,
all-reduce on the horizontal ring, all-gather on the local ring. Per half there are ``L*M`` blocks with
``M = lcm(V, H)``; local rank ``x`` owns blocks ``x*M .. x*M+M-1`` after the local reduce-scatter, the
vertical all-reduce splits those ``M`` blocks in ``V`` groups of ``M/V`` and the horizontal one in ``H``
groups of ``M/H``. Bytes sent per byte loaded: ``(L-1)/L * 2 + 2(V-1)/(V L) + 2(H-1)/(H L)``; on 4x4x4 that
is 0.75 + 0.375 + 0.375 + 0.75 = 2.25 (ACE section VI-A).

``hierarchical-rotated`` (all-reduce only, both vertical and horizontal rings present): each rank's share
after the local reduce-scatter is ``2M`` blocks per half, in two groups of ``M``; group 0 is all-reduced on
the vertical ring and then the horizontal one, group 1 in the other order, in the same two middle phases.
Every rank sends the same bytes on every link as with ``hierarchical``, but both middle phases use all four
inter-package links, so the links of the second dimension no longer wait for the first chunk to cross the
first, nor the first dimension's for the last chunk to cross the second (the pipeline's ends; ASTRA-sim's
schedulers rotate dimensions per chunk for the same reason). Blocks are half as large (``4 L M`` per chunk).
The performance model expects it to pay where the slow links alone bound the collective (4x4x4); at the 4x2x2
design point the NPU memory port is as loaded as they are and the RTL takes the same time either way
(``docs/results.md``).

reduce-scatter: ring reduce-scatter in the local, vertical, horizontal dimension in turn; in the phase of
dimension ``d`` a rank keeps the segments whose coordinates agree with its own in ``d`` and the dimensions
before. all-gather is the mirror image (horizontal, vertical, local).

broadcast: pipelines from the root along its local ring, then along the vertical rings of the root's
horizontal plane, then along every horizontal ring; reduce is the mirror image (horizontal, vertical,
local, ending at the root). Each half travels the whole ring in its direction; ``2 * max(L, V, H)`` blocks.
"""

import math

from ..topology import Torus
from ._build import Builder, merge_ticks, ring_schedule, chain_schedule

__all__ = ["torus_collective", "torus_pipeline"]

_DIM_NAMES = ("local", "vertical", "horizontal")


def _check(topology):
    if not isinstance(topology, Torus):
        raise ValueError(f"hierarchical algorithms need a torus topology, not {topology.spec}")


def _lines(topology, dim):
    """All rings of dimension ``dim``: lists of ranks in ``+`` order."""
    seen, out = set(), []
    for r in range(topology.n_endpoints):
        if r not in seen:
            line = topology.line(r, dim)
            seen.update(line)
            out.append(line)
    return out


def _ring_phase(topology, dim, kind, groups_for, tag):
    """Merged schedule of ``kind`` on every ring of ``dim``, both directions; ``groups_for(h)`` gives
    ``{rank: blocks}`` for half ``h``."""
    scheds = []
    for line in _lines(topology, dim):
        for h in (0, 1):
            members = line if h == 0 else line[::-1]
            out_p, in_p = (2 * dim, 2 * dim + 1) if h == 0 else (2 * dim + 1, 2 * dim)
            groups = groups_for(h)
            scheds.append(ring_schedule(kind, members, {r: groups[r] for r in members}, out_p, in_p, (tag, h)))
    return merge_ticks(*scheds)


def torus_collective(collective, topology, rotated=False):
    """Programs for hierarchical all-reduce, reduce-scatter or all-gather on a torus; ``rotated``: the
    all-reduce's middle dimensions in both orders at once (``hierarchical-rotated``, see the module doc)."""
    _check(topology)
    L, V, H = topology.dims
    P = topology.n_endpoints
    active = [d for d in range(3) if topology.dims[d] > 1]
    coords = [topology.coords(r) for r in range(P)]
    if rotated and (collective != "allreduce" or V < 2 or H < 2):
        raise ValueError(f"hierarchical-rotated is an all-reduce on a torus with vertical and horizontal rings, "
                         f"not {collective} on {topology.spec}")
    if collective == "allreduce":
        M = math.lcm(V, H)
        groups = 2 if rotated else 1      # a rank's share after the local reduce-scatter, in groups of M blocks
        share = groups * M
        half = L * share
        n_blocks = 2 * half
        b = Builder(P, collective, "hierarchical-rotated" if rotated else "hierarchical", n_blocks, n_blocks)

        def local_groups(h):
            return {r: [h * half + coords[r][0] * share + j for j in range(share)] for r in range(P)}

        def ar_groups(dim, g=0):
            size = topology.dims[dim]

            def f(h):
                return {r: [h * half + coords[r][0] * share + g * M + coords[r][dim] * (M // size) + j
                            for j in range(M // size)] for r in range(P)}
            return f

        plan = []
        if L > 1:
            plan.append((0, "rs", local_groups, "rs-local"))
        if rotated:
            # group 0 goes vertical then horizontal, group 1 horizontal then vertical: both middle phases
            # keep all four inter-package links busy
            for k, (d0, d1) in enumerate(((1, 2), (2, 1))):
                plan.append(((d0, d1), "ar", (ar_groups(d0, 0), ar_groups(d1, 1)),
                             f"ar-{_DIM_NAMES[d0]}+{_DIM_NAMES[d1]}"))
        else:
            for d in (1, 2):
                if topology.dims[d] > 1:
                    plan.append((d, "ar", ar_groups(d), f"ar-{_DIM_NAMES[d]}"))
        if L > 1:
            plan.append((0, "ag", local_groups, "ag-local"))
        loads = {r: range(n_blocks) for r in range(P)}
        stores = loads
    else:
        n_blocks = 2 * P  # block(s, h) = 2*s + h
        b = Builder(P, collective, "hierarchical", n_blocks, n_blocks)

        def seg_groups(dim):
            upto = [e for e in active if e <= dim]

            def f(h):
                return {r: [2 * s + h for s in range(P) if all(coords[s][e] == coords[r][e] for e in upto)]
                        for r in range(P)}
            return f

        if collective == "reduce_scatter":
            plan = [(d, "rs", seg_groups(d), f"rs-{_DIM_NAMES[d]}") for d in active]
            loads = {r: range(n_blocks) for r in range(P)}
            stores = {r: (2 * r, 2 * r + 1) for r in range(P)}
        else:
            plan = [(d, "ag", seg_groups(d), f"ag-{_DIM_NAMES[d]}") for d in reversed(active)]
            loads = {r: (2 * r, 2 * r + 1) for r in range(P)}
            stores = {r: range(n_blocks) for r in range(P)}
    for k, (dim, kind, groups_for, name) in enumerate(plan):
        dims, fors = (dim, groups_for) if isinstance(dim, tuple) else ((dim,), (groups_for,))
        b.phase(name, tuple(p for d in dims for p in (2 * d, 2 * d + 1)))
        if k == 0:
            for r in range(P):
                for blk in loads[r]:
                    b.load(r, blk, blk)
        b.add_schedule(merge_ticks(*(_ring_phase(topology, d, kind, f, (k, g))
                                     for g, (d, f) in enumerate(zip(dims, fors)))))
        if k == len(plan) - 1:
            for r in range(P):
                for blk in stores[r]:
                    b.store(r, blk, blk)
    return b.build()


def torus_pipeline(collective, topology, root):
    """Programs for hierarchical pipelined broadcast or reduce on a torus."""
    _check(topology)
    P = topology.n_endpoints
    K = max(topology.dims)
    n_blocks = 2 * K
    bcast = collective == "broadcast"
    rc = topology.coords(root)
    active = [d for d in range(3) if topology.dims[d] > 1]
    order = active if bcast else active[::-1]
    b = Builder(P, collective, "hierarchical", n_blocks, n_blocks, root)
    for k, dim in enumerate(order):
        b.phase(f"{'bcast' if bcast else 'reduce'}-{_DIM_NAMES[dim]}", (2 * dim, 2 * dim + 1))
        if k == 0:
            for r in range(P):
                if not bcast or r == root:
                    for blk in range(n_blocks):
                        b.load(r, blk, blk)
        # Which rings of this dimension take part: broadcast spreads from the root one dimension per phase,
        # so a ring joins iff it agrees with the root in the dimensions still to come (its line root already
        # has the data); reduce contracts towards the root, so a ring joins iff it agrees with the root in the
        # dimensions already done (its members hold partial results).
        fixed = order[k + 1:] if bcast else order[:k]
        scheds = []
        for line in _lines(topology, dim):
            c = topology.coords(line[0])
            if any(c[e] != rc[e] for e in fixed):
                continue
            lroot = topology.rank_of(*[rc[e] if e == dim else c[e] for e in range(3)])
            for h in (0, 1):
                members = line if h == 0 else line[::-1]
                out_p, in_p = (2 * dim, 2 * dim + 1) if h == 0 else (2 * dim + 1, 2 * dim)
                i = members.index(lroot)
                flow = members[i:] + members[:i] if bcast else members[i + 1:] + members[:i + 1]
                blocks = range(h * K, (h + 1) * K)
                scheds.append(chain_schedule("bcast" if bcast else "reduce", flow, blocks, out_p, in_p, (k, h)))
        b.add_schedule(merge_ticks(*scheds))
        if k == len(order) - 1:
            for r in range(P):
                if bcast or r == root:
                    for blk in range(n_blocks):
                        b.store(r, blk, blk)
    return b.build()
