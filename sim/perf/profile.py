"""Per-phase traffic profiles of a collective, read off the golden algorithm programs.

The performance model never re-derives an algorithm's formulas: it runs the same step lists the engine's FSMs
execute (:mod:`syncfabric.sim.golden.algorithms`) through a counting pass and keeps, per phase and as fractions
of one chunk's working set:

* ``link``: bytes sent on each output port (the busiest rank's, per port index);
* ``depth``: the longest chain of dependent messages (a message forwarded after it was received extends the
  chain of the one it came from), i.e. how many link latencies one chunk pays in the phase;
* ``steps``: steps per rank (each costs an FSM its per-step overhead) and ``transfers``: the steps that stream
  a message through the FSM's datapath (SEND, PUT, RECV);
* ``ace_read`` / ``ace_write``: NPU memory an engine touches (LOAD / STORE only: everything else stays in SRAM);
* ``npu_read`` / ``npu_write``: NPU memory a baseline endpoint touches when its cores run the same program out
  of memory: a SEND reads its block, a message lands in memory, a reduction reads the local and the received
  block and writes the result, a forward reads the block again (ACE section VI-A: 2N read per N sent in a
  reduce-scatter, N per N in an all-gather);
* ``reduce``: bytes the ALU reduces;
* ``input``: the phase's initial chunk share (the SRAM partition heuristic's weight, with the port rates).

Programs exist for up to 512 ranks (the step encoding's rank field). Hierarchical all-reduce,
reduce-scatter and all-gather on larger tori are composed from the bidirectional-ring programs of each
dimension, scaled by the share of the chunk that reaches the dimension (the hierarchical algorithm is that
composition; ``tests/perf`` checks that both give the same profile on tori small enough to generate).
"""

from dataclasses import dataclass, field
from functools import lru_cache

from ..golden.algorithms import ALGORITHMS, generate, default_algorithm
from ..golden.chunking import normalize_collective
from ..golden.program import StepOp
from ..golden.topology import Ring, Torus, parse as parse_topology

__all__ = ["PhaseProfile", "CollectiveProfile", "profile", "profile_from_programs", "parse_torus_algorithm",
           "torus_algorithm", "DECOMPOSITIONS", "DIRECTIONS", "MAX_PROGRAM_RANKS"]

#: Largest rank count the program encoding supports (9-bit rank fields).
MAX_PROGRAM_RANKS = 512


@dataclass(frozen=True)
class PhaseProfile:
    """Traffic of one phase for one chunk, as fractions of the chunk's working set (see the module doc)."""

    name: str
    ports: tuple
    link: dict = field(hash=False)
    depth: int
    steps: int
    ace_read: float
    ace_write: float
    npu_read: float
    npu_write: float
    reduce: float
    input: float
    message: float
    transfers: int = 0

    @property
    def sent(self):
        """Bytes sent per chunk byte on all ports together (one rank)."""
        return sum(self.link.values())


@dataclass(frozen=True)
class CollectiveProfile:
    """A collective's phases on a topology, with the algorithm that produced them."""

    collective: str
    algorithm: str
    topology: str
    nranks: int
    phases: tuple

    @property
    def sent_per_read(self):
        """Bytes put on the links per byte an engine reads from NPU memory (2.25 for all-reduce on 4x4x4)."""
        read = sum(p.ace_read for p in self.phases)
        return sum(p.sent for p in self.phases) / read if read else float("inf")

    @property
    def npu_read_per_sent(self):
        """NPU memory bytes a baseline endpoint reads per byte it sends (1.5 for a ring all-reduce)."""
        sent = sum(p.sent for p in self.phases)
        return sum(p.npu_read for p in self.phases) / sent if sent else 0.0


def profile_from_programs(programs, topology):
    """The :class:`CollectiveProfile` of a set of golden programs (one per rank) on ``topology``."""
    topo = parse_topology(topology)
    progs = list(programs)
    head = progs[0]
    n_phases = len(head.phases)
    frac = 1.0 / head.n_blocks
    phases = []
    for pi in range(n_phases):
        link, reads, writes, nreads, nwrites, red, steps, transfers = {}, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0
        for p in progs:
            lk, r_, w_, nr, nw, rd = {}, 0.0, 0.0, 0.0, 0.0, 0.0
            for s in p.phases[pi].steps:
                b = frac
                if s.op == StepOp.LOAD:
                    r_ += b
                elif s.op == StepOp.STORE:
                    w_ += b
                elif s.op in (StepOp.SEND, StepOp.PUT):
                    nr += b
                    lk[s.port] = lk.get(s.port, 0.0) + b
                else:
                    nw += b                              # the message lands in memory
                    if s.reduce:
                        nr += 2 * b
                        nw += b
                        rd += b
                    if s.fwd is not None:
                        lk[s.fwd] = lk.get(s.fwd, 0.0) + b
                        if not s.reduce:
                            nr += b
            for port, v in lk.items():
                link[port] = max(link.get(port, 0.0), v)
            reads, writes = max(reads, r_), max(writes, w_)
            nreads, nwrites, red = max(nreads, nr), max(nwrites, nw), max(red, rd)
            steps = max(steps, len(p.phases[pi].steps))
            transfers = max(transfers, sum(1 for s in p.phases[pi].steps
                                           if s.op in (StepOp.SEND, StepOp.PUT, StepOp.RECV)))
        depth = data_depth(progs, pi, topo)
        input_frac = _input_fraction(head, pi)
        phases.append(PhaseProfile(head.phases[pi].name, tuple(head.phases[pi].ports), link, depth, steps,
                                   reads, writes, nreads, nwrites, red, input_frac, frac, transfers))
    return CollectiveProfile(head.collective, head.algorithm, topo.spec, topo.n_endpoints, tuple(phases))


def data_depth(programs, pi, topology):
    """Dependency depth of phase ``pi``: the longest chain of messages, each sent from data that the previous
    one brought.

    Data is followed through the slots: a LOAD fills its slot at depth 0, a RECV fills it at the depth of
    the message it takes (or of the slot's old datum, if deeper, when it reduces into it), a SEND or PUT
    emits its slot's datum one deeper, and a RECV's forwarded copy leaves one deeper than what it passes on.
    So a ring's reduce-and-forward chain and halving-doubling's receive-then-send steps both count every
    message of the chain (``2 log2 P`` for halving-doubling, where following forwards alone gave 2). The
    programs are deadlock free, so the message graph is acyclic and the iteration ends."""
    topo = parse_topology(topology)
    # Each rank's steps once, as (op, slot, where its message lands or None, reduce, where a forward lands)
    LOAD, SEND, RECV = 0, 1, 2
    ranks = []
    for p in programs:
        steps = []
        for s in p.phases[pi].steps:
            if s.op == StepOp.LOAD:
                steps.append((LOAD, s.slot, None, False, None))
            elif s.op == StepOp.SEND:
                steps.append((SEND, s.slot, (topo.link(p.rank, s.port, s.peer)[0], s.key), False, None))
            elif s.op == StepOp.PUT:                     # a deposit: nothing RECVs it
                steps.append((SEND, s.slot, (s.peer, s.key), False, None))
            elif s.op == StepOp.RECV:
                fwd = None if s.fwd is None else (topo.link(p.rank, s.fwd, s.peer)[0], s.fwd_key)
                steps.append((RECV, s.slot, (p.rank, s.key), s.reduce, fwd))
        ranks.append(steps)
    msg = {}                                     # (receiving rank, key) -> depth of the message
    for _ in range(sum(len(steps) for steps in ranks) + 1):
        changed = False
        for steps in ranks:
            slot = {}
            for op, sl, where, reduce, fwd in steps:
                if op == LOAD:
                    slot[sl] = 0
                    continue
                if op == SEND:
                    emitted = [(where, slot.get(sl, 0) + 1)]
                else:
                    d = msg.get(where, 0)
                    d = max(d, slot.get(sl, 0)) if reduce else d
                    slot[sl] = d
                    emitted = [(fwd, d + 1)] if fwd is not None else []
                for key, d in emitted:
                    if msg.get(key, 0) < d:
                        msg[key] = d
                        changed = True
        if not changed:
            break
    return max(msg.values(), default=0)


def _input_fraction(program, pi):
    from ..golden.partitions import phase_input_fraction
    return phase_input_fraction(program, pi)


def _scaled(ph, name, ports, scale, input_frac, ace_read, ace_write, port_map):
    link = {port_map[p]: v * scale for p, v in ph.link.items()}
    return PhaseProfile(name, ports, link, ph.depth, ph.steps, ace_read, ace_write, ph.npu_read * scale,
                        ph.npu_write * scale, ph.reduce * scale, input_frac, ph.message * scale, ph.transfers)


_DIM = ("local", "vertical", "horizontal")

#: How an all-reduce on a torus is split into per-dimension phases (``hierarchical`` is ACE's, the engine's
#: programs; the others follow ASTRA-sim's system layer, ``Sys::generate_collective``):
#:
#: ``hierarchical``  reduce-scatter on the first dimension, all-reduce of its 1/L share on each other dimension,
#:                   all-gather on the first (ACE section IV-F's four phases)
#: ``rs-ar``         reduce-scatter on every dimension but the last, all-reduce on the last, all-gather back
#:                   (ASTRA-sim's ``localBWAware``: each later dimension carries a smaller share)
#: ``rs-ag``         reduce-scatter on every dimension, then all-gather on each in reverse (ASTRA-sim's greedy
#:                   schedulers' shape, here in the fixed dimension order)
#: ``baseline``      all-reduce of the whole chunk on each dimension in turn (ASTRA-sim's ``baseline``)
DECOMPOSITIONS = ("hierarchical", "rs-ar", "rs-ag", "baseline")

#: What ``syncfabric perf algorithms`` compares: the decompositions and ``rotated``, the engine's generated
#: ``hierarchical-rotated`` program (bidirectional rings, vertical and horizontal of 2 or more).
TORUS_ALLREDUCES = (*DECOMPOSITIONS, "rotated")

#: A dimension's ring: both directions (half of each message each way: the engine's ``bidir-ring``) or one
#: (``uni``, the ``ring`` program on the dimension's + port only).
DIRECTIONS = ("bidir", "uni")


def _allreduce_parts(topo, decomposition):
    """``(dim, kind, scale)`` per phase of an all-reduce: ``scale`` is the share of the chunk that is the
    phase's working set (an all-gather's: its output)."""
    dims = [d for d in range(3) if topo.dims[d] > 1]
    if not dims:
        return []
    if decomposition == "hierarchical":
        first, rest = (dims[0], dims[1:]) if dims[0] == 0 else (None, dims)
        share = 1.0 / topo.dims[0]
        return ([(0, "reduce_scatter", 1.0)] if first is not None else []) \
            + [(d, "allreduce", share) for d in rest] + ([(0, "allgather", 1.0)] if first is not None else [])
    if decomposition == "baseline":
        return [(d, "allreduce", 1.0) for d in dims]
    down, shares, share = [], [], 1.0
    last = dims if decomposition == "rs-ag" else dims[:-1]
    for d in last:
        down.append((d, "reduce_scatter", share))
        shares.append(share)
        share /= topo.dims[d]
    middle = [] if decomposition == "rs-ag" else [(dims[-1], "allreduce", share)]
    up = [(d, "allgather", sh) for d, sh in reversed(list(zip(last, shares)))]
    return down + middle + up


def _composed_torus(collective, topo, decomposition="hierarchical", directions=None):
    """A torus collective's profile composed from per-dimension ring programs (any size; the generated
    programs cover ``hierarchical`` with bidirectional rings up to :data:`MAX_PROGRAM_RANKS` ranks and agree
    with this, ``tests/perf``). ``directions``: per dimension, ``bidir`` or ``uni`` (default all ``bidir``)."""
    L, V, H = topo.dims
    directions = tuple(directions or ("bidir",) * 3)
    if len(directions) != 3 or any(d not in DIRECTIONS for d in directions):
        raise ValueError(f"directions {directions!r}: three of {DIRECTIONS} (local, vertical, horizontal)")
    if decomposition not in DECOMPOSITIONS:
        raise ValueError(f"decomposition {decomposition!r}: one of {DECOMPOSITIONS}")
    active = [d for d in range(3) if topo.dims[d] > 1]
    parts = []   # (dim, kind, scale)
    if collective == "allreduce":
        parts = _allreduce_parts(topo, decomposition)
    elif decomposition != "hierarchical":
        raise ValueError(f"decomposition {decomposition!r} is an all-reduce's; {collective} on a torus is "
                         f"composed one way (reduce-scatter down the dimensions, all-gather up them)")
    elif collective == "reduce_scatter":
        share = 1.0
        for d in active:
            parts.append((d, "reduce_scatter", share))
            share /= topo.dims[d]
    elif collective == "allgather":
        share = 1.0 / topo.n_endpoints
        for d in reversed(active):
            share *= topo.dims[d]
            parts.append((d, "allgather", share))
    else:
        raise ValueError(f"{collective} on {topo.spec}: only all-reduce, reduce-scatter and all-gather are "
                         f"composed from per-dimension rings")
    phases = []
    for k, (d, kind, scale) in enumerate(parts):
        bidir = directions[d] == "bidir"
        ring = Ring(topo.dims[d], bidirectional=bidir, attr=topo.attrs[d])
        ph = _ring_profile(kind, ring).phases[0]
        first, last = k == 0, k == len(parts) - 1
        ace_read = 1.0 if first else 0.0
        ace_write = 1.0 if last else 0.0
        if collective == "allgather" and first:
            ace_read = 1.0 / topo.n_endpoints
        if collective == "reduce_scatter" and last:
            ace_write = 1.0 / topo.n_endpoints
        # An all-gather phase starts from its share of the data and grows it by the ring size.
        in_frac = scale / topo.dims[d] if kind == "allgather" else scale
        name = {"reduce_scatter": "rs", "allreduce": "ar", "allgather": "ag"}[kind] + "-" + _DIM[d]
        port_map = {0: 2 * d, 1: 2 * d + 1}
        ports = (2 * d, 2 * d + 1) if bidir else (2 * d,)
        phases.append(_scaled(ph, name, ports, scale, in_frac, ace_read, ace_write, port_map))
    return CollectiveProfile(collective, torus_algorithm(decomposition, directions), topo.spec, topo.n_endpoints,
                             tuple(phases))


@lru_cache(maxsize=64)
def _ring_profile(kind, ring):
    return profile_from_programs(generate(kind, "bidir-ring" if ring.bidirectional else "ring", ring), ring)


def torus_algorithm(decomposition="hierarchical", directions=None):
    """The algorithm name of a torus ``decomposition`` with per-dimension ``directions`` (the inverse of
    :func:`parse_torus_algorithm`): ``hierarchical[:DECOMPOSITION][/DIR,DIR,DIR]``."""
    name = "hierarchical" if decomposition == "hierarchical" else f"hierarchical:{decomposition}"
    if directions and tuple(directions) != ("bidir",) * 3:
        name += "/" + ",".join(directions)
    return name


#: Generated programs whose names start like a composed decomposition's (not parsed as one).
_GENERATED = tuple(a for a in ALGORITHMS if a.startswith("hierarchical-"))


def parse_torus_algorithm(algorithm):
    """``hierarchical[:DECOMPOSITION][/DIR,DIR,DIR]`` -> (decomposition, directions or None); None for any
    other algorithm name (a generated program's)."""
    if not algorithm or not algorithm.startswith("hierarchical") or algorithm in _GENERATED:
        return None
    head, _, dirs = algorithm.partition("/")
    _, _, decomposition = head.partition(":")
    if head not in ("hierarchical", f"hierarchical:{decomposition}") or (":" in head and not decomposition):
        raise ValueError(f"algorithm {algorithm!r}: hierarchical[:DECOMPOSITION][/DIR,DIR,DIR] with "
                         f"DECOMPOSITION one of {DECOMPOSITIONS} and DIR one of {DIRECTIONS}")
    directions = tuple(dirs.split(",")) if dirs else None
    return decomposition or "hierarchical", directions


@lru_cache(maxsize=256)
def _cached(collective, algorithm, topo):
    torus = parse_torus_algorithm(algorithm) if isinstance(topo, Torus) else None
    if torus is not None:
        decomposition, directions = torus
        composed_only = decomposition != "hierarchical" or directions not in (None, ("bidir",) * 3)
        if composed_only or topo.n_endpoints > MAX_PROGRAM_RANKS:
            if collective not in ("allreduce", "reduce_scatter", "allgather"):
                raise ValueError(f"{collective}/{algorithm} on {topo.spec}: only all-reduce, reduce-scatter and "
                                 f"all-gather are composed from per-dimension rings"
                                 + (f" (programs are limited to {MAX_PROGRAM_RANKS} ranks)"
                                    if not composed_only else ""))
            return _composed_torus(collective, topo, decomposition, directions)
    if topo.n_endpoints > MAX_PROGRAM_RANKS:
        raise ValueError(f"{collective}/{algorithm} on {topo.spec}: programs are limited to {MAX_PROGRAM_RANKS} "
                         f"ranks (only hierarchical torus collectives are composed beyond that)")
    return profile_from_programs(generate(collective, algorithm, topo), topo)


def profile(collective, topology, algorithm=None):
    """The :class:`CollectiveProfile` of ``collective`` on ``topology`` (a spec or a Topology) with
    ``algorithm`` (default: the topology's default; on a torus also ``hierarchical:DECOMPOSITION`` and a
    ``/DIR,DIR,DIR`` suffix, :data:`DECOMPOSITIONS` and :data:`DIRECTIONS`, composed from per-dimension rings).
    Cached."""
    topo = parse_topology(topology)
    coll = normalize_collective(collective)
    algo = algorithm or default_algorithm(coll, topo)
    return _cached(coll, algo, topo)
