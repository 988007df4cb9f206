"""What the driver loads into an engine for a golden :class:`~syncfabric.sim.golden.program.Program`.

* :func:`instruction_words`: the 64-bit instruction words (the program ISA of ``docs/programs.md``);
* :func:`program_entry` / :func:`entry_words` / :func:`decode_entry`: the program table entry
  (:func:`~syncfabric.hdl.common.layouts.program_entry_layout`) locating the program in the instruction memory;
* :func:`routing_table` / :func:`comm_dims`: the routing table words and the COMM_DIMS fields of a rank of a
  topology (:mod:`syncfabric.sim.golden.topology` decides the routes);
* :func:`phase_weights` / :func:`partition_sizes`: the SRAM partition sizes (PART registers), from
  :mod:`syncfabric.sim.golden.partitions` (the heuristic the performance model simulates too);
* :class:`ImemAllocator`: placement of several programs in the shared instruction memory.

Plain Python on top of the golden model and the shared layouts; no register addresses here (the driver
takes those from :func:`~syncfabric.hdl.ace.regs.ace_regmap`).
"""

from ..hdl.ace.regs import N_DIMS, PTAB_ENTRY_WORDS, ROUTE_VALID
from ..hdl.common.layouts import LOAD_MASK_BITS, MAX_PHASES, program_entry_layout
from ..sim.golden.partitions import (SPLITS, ace_phase_weights, partition_sizes, phase_bandwidth,
                                     phase_input_fraction, phase_weights, program_partitions, split_weights)
from ..sim.golden.program import Program, StepOp
from ..sim.golden.topology import Ring, Switch, Torus, parse as parse_topology
from ..sim.golden.types import Algorithm, Collective

__all__ = ["instruction_words", "collective_code", "algorithm_code", "check_store_order", "check_load_first",
           "load_end", "load_mask",
           "program_entry",
           "entry_words", "decode_entry", "route_ports", "routing_table", "comm_dims", "phase_input_fraction",
           "phase_bandwidth", "phase_weights", "ace_phase_weights", "split_weights", "SPLITS", "partition_sizes", "program_partitions", "ImemAllocator"]


# -- instructions and the program table -------------------------------------------------------------------

def instruction_words(program):
    """The program's 64-bit instruction words, all phases concatenated in execution order."""
    return tuple(program.instruction_words())


def collective_code(program):
    """The :class:`~syncfabric.sim.golden.types.Collective` code of ``program``."""
    return Collective.parse(program.collective)


def algorithm_code(program):
    """The :class:`~syncfabric.sim.golden.types.Algorithm` code of ``program``."""
    return Algorithm.parse(program.algorithm)


def check_store_order(program):
    """Raise ValueError if a step writes a slot (LOAD, RECV) after a STORE of that slot. The engine posts a
    STORE to its RX DMA and goes on with the next step, so a later write could overtake the STORE's reads of
    the slot; golden programs place each STORE after the last write of its slot."""
    stored = {}
    for pi, si, step in program.steps():
        if step.op == StepOp.STORE:
            stored.setdefault(step.slot, (pi, si))
        elif step.op in (StepOp.LOAD, StepOp.RECV) and step.slot in stored:
            pj, sj = stored[step.slot]
            raise ValueError(f"{program.collective}/{program.algorithm} rank {program.rank}: phase {pi} step {si} "
                             f"writes slot {step.slot} after the STORE of phase {pj} step {sj}; the engine "
                             f"needs every STORE after the last write of its slot")


def check_load_first(program):
    """Raise ValueError if a slot is LOADed after a RECV wrote it. The engine starts every slot's count lane
    at the LOAD's value (1, or 0 for a null contribution) when the chunk is dispatched, which is the LOAD's
    effect only if no RECV wrote the slot before; golden programs LOAD a slot before anything else writes it."""
    received = {}
    for pi, si, step in program.steps():
        if step.op == StepOp.RECV:
            received.setdefault(step.slot, (pi, si))
        elif step.op == StepOp.LOAD and step.slot in received:
            pj, sj = received[step.slot]
            raise ValueError(f"{program.collective}/{program.algorithm} rank {program.rank}: phase {pi} step {si} "
                             f"LOADs slot {step.slot} after the RECV of phase {pj} step {sj}; the engine's count "
                             f"lane needs every LOAD of a slot before the first RECV into it")


def load_end(program):
    """Number of LOADs at the head of the first phase: the steps the engine's load sequencer prefetches when a
    chunk is dispatched (0 for a program without phases)."""
    steps = program.phases[0].steps if program.phases else ()
    n = 0
    while n < len(steps) and steps[n].op == StepOp.LOAD:
        n += 1
    return n


def load_mask(program):
    """Bit mask of the slots the head LOADs of the first phase fill (see :func:`load_end`). Raises ValueError
    for a slot beyond the mask's :data:`~syncfabric.hdl.common.layouts.LOAD_MASK_BITS`."""
    mask = 0
    for s in program.phases[0].steps[:load_end(program)] if program.phases else ():
        if s.slot >= LOAD_MASK_BITS:
            raise ValueError(f"{program.collective}/{program.algorithm} loads slot {s.slot}; the engine tracks "
                             f"{LOAD_MASK_BITS} slots")
        mask |= 1 << s.slot
    return mask


def program_entry(program, imem_offset=0, comm=0):
    """The program table entry (a dict for :func:`~syncfabric.hdl.common.layouts.program_entry_layout`) of
    ``program`` placed at instruction ``imem_offset`` for communicator ``comm``.

    ``phase_start``/``phase_len`` come from :meth:`Program.phase_table` shifted by ``imem_offset`` (unused
    phases are 0), ``root`` is 0 when the collective has none. Raises ValueError if a value does not fit its
    field (e.g. more than :data:`~syncfabric.hdl.common.layouts.MAX_PHASES` phases).
    """
    if not isinstance(program, Program):
        raise TypeError(f"program_entry needs a Program, got {program!r}")
    check_store_order(program)
    check_load_first(program)
    table = program.phase_table()
    if len(table) > MAX_PHASES:
        raise ValueError(f"{program.collective}/{program.algorithm} has {len(table)} phases; the engine runs "
                         f"at most {MAX_PHASES}")
    starts = [imem_offset + start for start, _, _ in table] + [0] * (MAX_PHASES - len(table))
    lens = [n for _, n, _ in table] + [0] * (MAX_PHASES - len(table))
    entry = {
        "valid": 1,
        "comm": comm,
        "collective": int(collective_code(program)),
        "algorithm": int(algorithm_code(program)),
        "n_phases": len(table),
        "n_blocks": program.n_blocks,
        "n_slots": program.n_slots,
        "segments": program.segments,
        "root": 0 if program.root is None else program.root,
        "load_end": load_end(program),
        "load_mask": load_mask(program),
        "phase_start": starts,
        "phase_len": lens,
        "arrivals": program.arrivals,
    }
    entry_words(entry)          # range-check every field now, with the field's name in the message
    return entry


def _check_fits(layout, entry):
    for name, field in layout:
        value = entry.get(name, 0)
        if isinstance(value, (list, tuple)):
            width, n = field.shape.elem_shape.width, field.shape.length
            if len(value) != n:
                raise ValueError(f"program entry field {name} needs {n} values, got {len(value)}")
            values = value
        else:
            width, values = field.width, [value]
        for v in values:
            if not 0 <= int(v) < (1 << width):
                raise ValueError(f"program entry field {name}={v} does not fit in {width} bits")
    unknown = set(entry) - {name for name, _ in layout}
    if unknown:
        raise ValueError(f"unknown program entry fields: {', '.join(sorted(unknown))}")


def entry_words(entry):
    """The :data:`~syncfabric.hdl.ace.regs.PTAB_ENTRY_WORDS` 32-bit words of a program table entry: the
    bits of ``program_entry_layout()`` little-endian across the words, zero above the layout."""
    layout = program_entry_layout()
    _check_fits(layout, entry)
    bits = layout.const(entry).as_value().value
    return [(bits >> (32 * i)) & 0xFFFFFFFF for i in range(PTAB_ENTRY_WORDS)]


def decode_entry(words):
    """Inverse of :func:`entry_words` (arrays as lists)."""
    layout = program_entry_layout()
    bits = sum(int(w) << (32 * i) for i, w in enumerate(words))
    view = layout.from_bits(bits & ((1 << layout.size) - 1))
    out = {}
    for name, _ in layout:
        value = getattr(view, name)
        out[name] = [int(v) for v in value] if not isinstance(value, int) else value
    return out


# -- routing ------------------------------------------------------------------------------------------------

def route_ports(topology, rank):
    """``{destination rank: output port of the first hop}`` for every other rank of ``topology``."""
    topo = parse_topology(topology)
    return {dst: topo.next_port(rank, dst) for dst in range(topo.n_endpoints) if dst != rank}


def routing_table(topology, rank, entries=None):
    """The routing table words of ``rank``: word ``r`` is ``ROUTE_VALID | port`` (the output port towards
    rank ``r``), 0 for ``rank`` itself and for ranks beyond the topology; ``entries`` words (default the
    number of ranks)."""
    topo = parse_topology(topology)
    n = topo.n_endpoints if entries is None else entries
    if n < topo.n_endpoints:
        raise ValueError(f"{topo.spec} has {topo.n_endpoints} ranks, the routing table {n} entries")
    ports = route_ports(topo, rank)
    for dst, port in ports.items():
        if port >= ROUTE_VALID:
            raise ValueError(f"port {port} towards rank {dst} does not fit a routing table word")
    return [ROUTE_VALID | ports[r] if r in ports else 0 for r in range(n)]


def comm_dims(topology):
    """COMM_DIMS fields of ``topology``: per dimension ``d`` the ports facing ``+1``/``-1`` and whether the
    dimension has neighbours (a ring is dimension 0; a switch has none)."""
    topo = parse_topology(topology)
    fields = {}
    for d in range(N_DIMS):
        if isinstance(topo, Torus):
            plus, minus, valid = 2 * d, 2 * d + 1, topo.dims[d] > 1
        elif isinstance(topo, Ring):
            plus, minus, valid = 0, 1, d == 0
        elif isinstance(topo, Switch):
            plus, minus, valid = 0, 0, False
        else:
            raise ValueError(f"no COMM_DIMS encoding for {topo!r}")
        if not valid:
            plus = minus = 0
        fields.update({f"dim{d}_plus": plus, f"dim{d}_minus": minus, f"dim{d}_valid": int(valid)})
    return fields


# -- instruction memory ------------------------------------------------------------------------------------

class ImemAllocator:
    """First-fit placement of programs in an instruction memory of ``words`` 64-bit words.

    ``limit`` is the first instruction index a program entry cannot encode (``phase_start`` is 10 bits:
    1024); nothing is placed beyond ``min(words, limit)``.
    """

    def __init__(self, words, limit=None):
        layout = program_entry_layout()
        if limit is None:
            limit = 1 << layout["phase_start"].shape.elem_shape.width
        self.words = min(words, limit)
        self._blocks = {}    # offset -> (length, owner)

    def alloc(self, n, owner=None):
        """Offset of a free run of ``n`` words, now reserved for ``owner`` (any label); ValueError when no run
        is long enough (the message lists what is loaded)."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} words")
        start = 0
        for off, (length, _) in sorted(self._blocks.items()):
            if off - start >= n:
                break
            start = max(start, off + length)
        if start + n > self.words:
            loaded = ", ".join(f"{owner!r}: {length} words at {off}" for off, (length, owner)
                               in sorted(self._blocks.items())) or "nothing"
            raise ValueError(f"no room for a program of {n} words in the {self.words}-word instruction memory "
                             f"({self.free_words} free, fragmented; loaded: {loaded})")
        if n:
            self._blocks[start] = (n, owner)
        return start

    def free(self, offset):
        """Release the program placed at ``offset``."""
        if offset not in self._blocks:
            raise ValueError(f"nothing is allocated at instruction {offset}")
        del self._blocks[offset]

    def free_owner(self, owner):
        """Release every program placed for ``owner``; returns their offsets."""
        offs = [off for off, (_, o) in self._blocks.items() if o == owner]
        for off in offs:
            del self._blocks[off]
        return offs

    @property
    def placements(self):
        """``{offset: (length, owner)}`` of the loaded programs."""
        return dict(sorted(self._blocks.items()))

    @property
    def free_words(self):
        """Words not taken by any program."""
        return self.words - sum(length for length, _ in self._blocks.values())
