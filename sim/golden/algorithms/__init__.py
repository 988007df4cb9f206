"""Collective algorithm generators: one :class:`~..program.Program` per endpoint.

Use :func:`generate`; the per-algorithm generators are re-exported for direct use. Algorithm names:

==================  ==========================================================  ========================
name                collectives                                                 topologies
==================  ==========================================================  ========================
``ring``            allreduce, reduce_scatter, allgather, broadcast, reduce     ring (port 0 only), switch
``bidir-ring``      allreduce, reduce_scatter, allgather, broadcast, reduce     bidirectional ring
``hierarchical``    allreduce, reduce_scatter, allgather, broadcast, reduce     torus
``hierarchical-rotated``  allreduce (the middle dimensions in both orders at once)  torus with V, H > 1
``halving-doubling``  allreduce, reduce_scatter, allgather                      switch, P a power of two
``direct``          alltoall                                                    ring, torus, switch
``async``           alltoall (Sven: deposits, no rank waits for another)        one-hop routes (switch)
==================  ==========================================================  ========================

Defaults: ``bidir-ring`` on a bidirectional ring, ``ring`` on a unidirectional one, ``hierarchical`` on a
torus, ``halving-doubling`` on a switch with a power-of-two size (``ring`` otherwise; ``ring`` for
broadcast/reduce), ``direct`` for all-to-all everywhere.

A ``barrier`` is the all-reduce program run on zero bytes: every algorithm that supports all-reduce on a
topology supports the barrier, with the same default, and :func:`generate` returns the all-reduce's programs
with ``collective == "barrier"`` (the executor and the engine run them as one chunk of empty blocks).
"""

import dataclasses

from ..chunking import normalize_collective, ROOTED
from ..topology import Ring, Switch, Torus, parse
from .ring import ring_collective, ring_pipeline
from .hierarchical import torus_collective, torus_pipeline
from .alltoall import direct_alltoall, async_alltoall
from .halving_doubling import halving_doubling

__all__ = ["ALGORITHMS", "generate", "default_algorithm", "supported_algorithms",
           "ring_collective", "ring_pipeline", "torus_collective", "torus_pipeline", "direct_alltoall", "async_alltoall",
           "halving_doubling"]

ALGORITHMS = ("ring", "bidir-ring", "hierarchical", "halving-doubling", "direct", "async", "hierarchical-rotated")

#: The collectives with a halving-doubling program (recursive halving and/or doubling) on a switch.
_HALVING_DOUBLING = ("allreduce", "reduce_scatter", "allgather")


def _program_collective(c):
    """The collective whose programs ``c`` runs: a barrier runs the all-reduce's."""
    return "allreduce" if c == "barrier" else c


def supported_algorithms(collective, topology):
    """Algorithm names usable for ``collective`` on ``topology``, the default first (a barrier: those of
    all-reduce)."""
    c = _program_collective(normalize_collective(collective))
    t = parse(topology)
    if c == "alltoall":
        one_hop = all(len(t.route(s, d)) == 1 for s in range(t.n_endpoints) for d in range(t.n_endpoints)
                      if s != d)
        return ("direct", "async") if one_hop else ("direct",)
    if isinstance(t, Ring):
        return ("bidir-ring", "ring") if t.bidirectional else ("ring",)
    if isinstance(t, Torus):
        if c == "allreduce" and t.dims[1] > 1 and t.dims[2] > 1:
            return ("hierarchical", "hierarchical-rotated")
        return ("hierarchical",)
    if isinstance(t, Switch):
        if c in _HALVING_DOUBLING:
            pow2 = t.n_endpoints & (t.n_endpoints - 1) == 0
            return ("halving-doubling", "ring") if pow2 else ("ring",)
        return ("ring",)
    raise ValueError(f"unknown topology {t!r}")


def default_algorithm(collective, topology):
    """The algorithm :func:`generate` uses when none is given."""
    return supported_algorithms(collective, topology)[0]


def generate(collective, algorithm=None, topology=None, *, root=0):
    """Programs (a tuple, one per rank) running ``collective`` with ``algorithm`` on ``topology``.

    ``collective``: a name accepted by :func:`~..chunking.normalize_collective`. ``algorithm``: one of
    :data:`ALGORITHMS` or None for the topology's default. ``topology``: a Topology or a spec string such as
    ``"torus:4x4x4"``. ``root``: root rank of broadcast / reduce (ignored by the other collectives).
    ``"barrier"`` gives the all-reduce's programs (same algorithm name, steps and header) with
    ``collective == "barrier"``.
    """
    name = normalize_collective(collective)
    c = _program_collective(name)
    if topology is None:
        raise ValueError("generate() needs a topology")
    t = parse(topology)
    algo = default_algorithm(c, t) if algorithm is None else str(algorithm).strip().lower()
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    if algo == "halving-doubling" and isinstance(t, Switch) and c in _HALVING_DOUBLING \
            and t.n_endpoints & (t.n_endpoints - 1):
        raise ValueError(f"halving-doubling needs a power-of-two number of ranks, {t.spec} has "
                         f"{t.n_endpoints}")
    allowed = supported_algorithms(c, t)
    if algo not in allowed:
        raise ValueError(f"algorithm {algo!r} does not support {name} on {t.spec}; supported: "
                         f"{', '.join(allowed)}")
    if c in ROOTED:
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < t.n_endpoints:
            raise ValueError(f"root {root!r} is not a rank of {t.spec}")
    progs = _generate(c, algo, t, root)
    if name != c:  # a barrier: the all-reduce's programs under the barrier's name
        progs = tuple(dataclasses.replace(p, collective=name) for p in progs)
    return progs


def _generate(c, algo, t, root):
    if algo == "direct":
        return direct_alltoall(t)
    if algo == "async":
        return async_alltoall(t)
    if algo == "halving-doubling":
        return halving_doubling(c, t)
    if algo == "hierarchical":
        return torus_pipeline(c, t, root) if c in ROOTED else torus_collective(c, t)
    if algo == "hierarchical-rotated":
        return torus_collective(c, t, rotated=True)
    bidir = algo == "bidir-ring"
    return ring_pipeline(c, t, root, bidir) if c in ROOTED else ring_collective(c, t, bidir)
