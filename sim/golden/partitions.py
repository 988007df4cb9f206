"""The SRAM partition heuristic: how many of an engine's chunk buffers each phase of a program may hold (the
PART registers). One definition for the host driver, which writes PART, and the performance model, which
simulates the engine with them.

A phase that holds ``K`` chunks, each staying ``T`` cycles, passes ``K / T`` chunks per cycle (Little's law).
Every chunk passes every phase, so the pipeline runs at the slowest phase's ``K_p / T_p``, and a fixed number
of buffers goes furthest when ``K_p`` is proportional to ``T_p``: :func:`phase_weights` is each phase's
:func:`residence` at one rank, the chain of messages a chunk sends (or receives) in order on its busiest port,
each a hop's latency, plus the beats of those messages at the port's rate.

The ACE paper (section IV-F) sizes a partition by the phase's link bandwidth x its initial chunk size instead
(:func:`ace_phase_weights`). That gives a fast phase more buffers than a slow one, the opposite of what the
slow phase needs: on torus:4x4x4, whose vertical and horizontal rings have 500-cycle links at 1/8 of the local
rate, it gives those two phases 1 buffer each of 52, and a chunk spends about 4,500 cycles in each of them
(``docs/results.md``, "The design point on a torus").
"""

from ...hdl.common.layouts import MAX_PHASES
from .program import StepOp
from .topology import parse as parse_topology

__all__ = ["SPLITS", "split_weights", "residence", "phase_messages", "phase_depth", "phase_weights", "phase_input_fraction", "phase_bandwidth",
           "ace_phase_weights", "partition_sizes", "program_partitions"]


def residence(chain, latency, transfer):
    """Time a chunk stays in a phase with its links to itself: ``chain`` messages one after the other, each
    crossing a link of ``latency``, and ``transfer`` (the busiest port's payload at its rate). Any one unit of
    time (cycles for the driver, seconds for the model)."""
    return chain * latency + transfer


def phase_messages(program, phase_index):
    """Per port: the messages the phase sends on it (SEND, PUT, a RECV's forward) and receives on it (RECV),
    whichever are more."""
    tx, rx = {}, {}
    for s in program.phases[phase_index].steps:
        if s.emits:
            tx[s.out_port] = tx.get(s.out_port, 0) + 1
        if s.op == StepOp.RECV:
            rx[s.port] = rx.get(s.port, 0) + 1
    return {p: max(tx.get(p, 0), rx.get(p, 0)) for p in set(tx) | set(rx)}


def phase_depth(program, phase_index):
    """The longest chain of messages in the phase, each sent from data the one before brought, seen from one
    rank's program: data is followed through the slots (a LOAD fills its slot at depth 0, a RECV at the depth
    of its message, or of the slot's old datum if deeper when it reduces into it; a SEND, PUT or forward
    emits one deeper), and a message this rank receives is taken to be as deep as its own message of the same
    key (every rank of a symmetric algorithm sends the same keys at the same depths; a key the rank never
    sends counts 1). A message relayed under its own key (a broadcast's or reduce's chain) is as deep as its
    position on the chain, which one rank's program does not say: it counts 2 (received and passed on), so
    rooted collectives' depths are underestimated. 0 for a phase without messages."""
    steps = program.phases[phase_index].steps
    if not any(s.emits or s.op == StepOp.RECV for s in steps):
        return 0
    sent = {}
    for _ in range(len(steps) + 1):
        slot, emitted = {}, {}
        for s in steps:
            if s.op == StepOp.LOAD:
                slot[s.slot] = 0
                continue
            if s.op == StepOp.RECV:
                d = sent.get(s.key, 1)
                slot[s.slot] = max(d, slot.get(s.slot, 0)) if s.reduce else d
            if s.emits and not (s.op == StepOp.RECV and s.fwd_key == s.key):
                key = s.out_key
                emitted[key] = max(emitted.get(key, 0), slot.get(s.slot, 0) + 1)
        if emitted == sent:
            break
        sent = emitted
    received = [sent.get(s.key, 1) + (s.fwd_key == s.key and s.fwd is not None) for s in steps
                if s.op == StepOp.RECV]
    return max(list(sent.values()) + received)


def phase_weights(program, topology, chunk_beats):
    """Per phase of ``program`` (at ``program.rank``): the :func:`residence` in cycles of a chunk of
    ``chunk_beats`` beats: :func:`phase_depth` hops of the phase's slowest link (a hop through a switch counts
    its up- and down-link), plus the busiest port's messages (one block each, ``chunk_beats /
    program.n_blocks`` beats) at its rate. The heuristic's share of the SRAM."""
    topo = parse_topology(topology)
    hops = 2 if topo.routed else 1
    block = chunk_beats / program.n_blocks
    out = []
    for pi in range(len(program.phases)):
        ports = {p: n for p, n in phase_messages(program, pi).items() if p < topo.n_ports}
        attrs = {p: topo.link_attr(program.rank, p) for p in ports}
        latency = max((hops * a.latency for a in attrs.values()), default=0)
        transfer = max((n * block / attrs[p].rate for p, n in ports.items()), default=0.0)
        out.append(residence(phase_depth(program, pi), latency, transfer))
    return tuple(out)


def phase_input_fraction(program, phase_index):
    """The fraction of a chunk's working set the phase starts from (ACE's "initial chunk size" of the phase,
    relative to the chunk): the slots it LOADs or reads (SEND, STORE, reduce) before it writes them. A phase
    that starts from nothing (a rank that only receives, e.g. away from a broadcast's root) counts the slots
    it receives into."""
    live, written, received = set(), set(), set()
    for s in program.phases[phase_index].steps:
        if s.op == StepOp.LOAD:
            live.add(s.slot)
            written.add(s.slot)
        elif s.op in (StepOp.SEND, StepOp.STORE):
            if s.slot not in written:
                live.add(s.slot)
        else:   # RECV: reduce reads the slot first
            if s.reduce and s.slot not in written:
                live.add(s.slot)
            written.add(s.slot)
            received.add(s.slot)
    slots = live or received
    return min(1.0, len(slots) / program.n_blocks)


def phase_bandwidth(program, phase_index, topology):
    """Link bandwidth (flits per cycle, summed) of the ports the phase transmits on at ``program.rank``."""
    topo = parse_topology(topology)
    r = program.rank
    return sum(topo.link_attr(r, p).rate for p in program.phases[phase_index].ports
               if p < topo.n_ports and topo.has_tx(r, p))


def ace_phase_weights(program, topology):
    """Per phase: link bandwidth x initial chunk size (as a fraction of the chunk; the chunk size is common to
    all phases and cancels out): the ACE paper's heuristic (section IV-F), kept for comparison."""
    return tuple(phase_bandwidth(program, p, topology) * phase_input_fraction(program, p)
                 for p in range(len(program.phases)))


def partition_sizes(weight_sets, n_buffers):
    """PART register values (``MAX_PHASES + 1`` of them: phases 0..3, then the terminal partition) splitting
    ``n_buffers`` chunk buffers in proportion to phase weights (:func:`phase_weights`).

    ``weight_sets``: per loaded program its weights. A phase's weight is the average over the programs that
    have that phase (the paper averages chunk sizes of collectives sharing a phase). Partition ``p`` is
    proportional to phase ``p``'s weight, the terminal partition equals the last phase's; every used
    partition gets at least one buffer, unused phases 0, and the sizes add up to ``n_buffers`` (largest
    remainders get the spare buffers). One phase gives half and half; all weights 0 give equal shares.
    """
    sets = [tuple(ws) for ws in weight_sets]
    if not sets or not any(sets):
        raise ValueError("partition_sizes needs the phase weights of at least one program with phases")
    n_phases = max(len(ws) for ws in sets)
    if n_phases > MAX_PHASES:
        raise ValueError(f"{n_phases} phases; the engine has partitions for {MAX_PHASES}")
    avg = []
    for p in range(n_phases):
        ws = [w[p] for w in sets if len(w) > p]
        avg.append(sum(ws) / len(ws))
    weights = avg + [avg[-1]]
    if n_buffers < len(weights):
        raise ValueError(f"{n_buffers} chunk buffers cannot give {len(weights)} partitions one buffer each")
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(weights), float(len(weights))
    quota = [n_buffers * w / total for w in weights]
    sizes = [max(1, int(q)) for q in quota]
    while sum(sizes) > n_buffers:      # the minimum of 1 overcommitted: take from the most over quota
        i = max((i for i in range(len(sizes)) if sizes[i] > 1), key=lambda i: (sizes[i] - quota[i], -i))
        sizes[i] -= 1
    while sum(sizes) < n_buffers:      # largest remainder first, the earlier phase on a tie
        i = max(range(len(sizes)), key=lambda i: (quota[i] - sizes[i], -i))
        sizes[i] += 1
    return tuple(sizes[:-1] + [0] * (MAX_PHASES - n_phases) + sizes[-1:])


#: The partition heuristics by name (``syncfabric run --sram-split``): residence time (the default) or the ACE
#: paper's bandwidth x initial chunk size.
SPLITS = ("residence", "ace")


def split_weights(program, topology, chunk_beats, split="residence"):
    """The phase weights of heuristic ``split`` (one of :data:`SPLITS`)."""
    if split == "residence":
        return phase_weights(program, topology, chunk_beats)
    if split == "ace":
        return ace_phase_weights(program, topology)
    raise ValueError(f"unknown SRAM split {split!r}; expected one of {', '.join(SPLITS)}")


def program_partitions(program, topology, n_buffers, chunk_beats):
    """:func:`partition_sizes` for a single program run with chunks of ``chunk_beats`` beats."""
    return partition_sizes([phase_weights(program, topology, chunk_beats)], n_buffers)
