"""Collective programs: the step lists the engine's FSMs execute, one :class:`Program` per endpoint.

A program is hardware shaped: per chunk context an endpoint executes the steps of its phases strictly in
order; the step list is the same for every chunk (blocks and slots are chunk relative, the chunk context
supplies the element ranges, see :mod:`.chunking`). Different chunks are independent.

Ops (``docs/programs.md`` is the full specification, including the instruction encoding):

``LOAD slot, block``     TX DMA: the rank's input range of ``block`` -> SRAM ``slot``.
``SEND slot, block, port, peer, key``
                         ``slot`` (holding a ``block``-sized datum) -> output ``port`` as one message whose
                         header carries destination ``peer``, the phase number and ``key``.
``RECV slot, block, port, key [reduce] [fwd=port2, peer, fwd_key]``
                         wait for the message with ``key`` (this phase, this chunk) arriving on input
                         ``port``; ``slot <- reduce(incoming, slot)`` if ``reduce`` else ``slot <- incoming``;
                         with ``fwd`` the resulting slot is also sent on ``port2`` to ``peer`` with ``fwd_key``
                         in the same pass (reduce-and-forward / store-and-forward).
``STORE slot, block``    RX DMA: ``slot`` -> the rank's output range of ``block``.
``PUT slot, block, port, peer, key``
                         like SEND, but the message is a *deposit*: no RECV awaits it. The destination's
                         deposit unit writes it straight to the destination's output range of block ``key``
                         (same chunk), staging it (SRAM, then a spill window in memory) while the destination
                         has not posted its command; the destination's :attr:`Program.arrivals` counts the
                         deposits it gets per chunk, and its command completes when all have arrived. The
                         asynchronous all-to-all (Sven) is built from PUTs.

Messages are matched by ``(chunk, phase, key)`` at the destination, never by arrival order.
"""

from dataclasses import dataclass
import enum

from .chunking import normalize_collective, segments_for, send_segment, recv_segment, ROOTED
from .topology import parse as parse_topology

__all__ = ["StepOp", "Step", "Phase", "Program", "ProgramError", "check_programs", "check_link_order", "FIELDS",
           "STEP_BITS"]


class StepOp(enum.IntEnum):
    """Step opcode (3 bits). 0 is reserved so that an all-zero instruction word is never a valid step."""

    LOAD = 1
    SEND = 2
    RECV = 3
    STORE = 4
    PUT = 5


#: Instruction word layout: (field, lsb, width), least significant first. 64 bits in total.
FIELDS = (
    ("op", 0, 3),
    ("reduce", 3, 1),
    ("fwd_en", 4, 1),
    ("port", 5, 3),
    ("fwd_port", 8, 3),
    ("slot", 11, 10),
    ("block", 21, 10),
    ("peer", 31, 9),
    ("key", 40, 12),
    ("fwd_key", 52, 12),
)
STEP_BITS = 64
#: Width in bits of each instruction field (:data:`FIELDS`).
FIELD_WIDTH = {name: width for name, _, width in FIELDS}


class ProgramError(ValueError):
    """A program (or a set of programs) violates a rule of the program format."""


def _uint(name, value, width):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProgramError(f"step field {name} must be an integer, got {value!r}")
    if not 0 <= value < (1 << width):
        raise ProgramError(f"step field {name}={value} does not fit its {width}-bit field "
                           f"(0..{(1 << width) - 1})")


@dataclass(frozen=True)
class Step:
    """One instruction. Fields an op does not use must be left at 0 / False / None (canonical form).

    ``port``: SEND output port, RECV input port. ``peer``: destination rank of the message this step emits
    (SEND, or RECV with ``fwd``). ``key``: message key sent (SEND) or awaited (RECV). ``fwd``: output port of
    the forwarded copy (RECV only) and ``fwd_key`` its key.
    """

    op: StepOp
    slot: int
    block: int
    port: int = 0
    peer: int = 0
    key: int = 0
    reduce: bool = False
    fwd: int = None
    fwd_key: int = 0

    def __post_init__(self):
        try:
            object.__setattr__(self, "op", StepOp(self.op))
        except ValueError:
            raise ProgramError(f"unknown step opcode {self.op!r}") from None
        if not isinstance(self.reduce, bool):
            raise ProgramError(f"step field reduce must be a bool, got {self.reduce!r}")
        for name in ("slot", "block", "port", "peer", "key", "fwd_key"):
            _uint(name, getattr(self, name), FIELD_WIDTH[name])
        if self.fwd is not None:
            _uint("fwd", self.fwd, FIELD_WIDTH["fwd_port"])
        op = self.op
        if op in (StepOp.LOAD, StepOp.STORE):
            unused = {"port": self.port, "peer": self.peer, "key": self.key, "reduce": self.reduce,
                      "fwd": self.fwd, "fwd_key": self.fwd_key}
        elif op in (StepOp.SEND, StepOp.PUT):
            unused = {"reduce": self.reduce, "fwd": self.fwd, "fwd_key": self.fwd_key}
        else:
            unused = {} if self.fwd is not None else {"peer": self.peer, "fwd_key": self.fwd_key}
        bad = [k for k, v in unused.items() if v not in (0, False, None)]
        if bad:
            raise ProgramError(f"{op.name} step must leave {', '.join(bad)} unset: {self}")

    @property
    def emits(self):
        """True if the step sends a message (SEND, PUT, or RECV with forwarding)."""
        return self.op in (StepOp.SEND, StepOp.PUT) or (self.op == StepOp.RECV and self.fwd is not None)

    @property
    def out_port(self):
        """Output port of the emitted message, or None."""
        return self.port if self.op in (StepOp.SEND, StepOp.PUT) else self.fwd

    @property
    def out_key(self):
        """Key of the emitted message, or None."""
        if self.op in (StepOp.SEND, StepOp.PUT):
            return self.key
        return self.fwd_key if self.fwd is not None else None

    def encode(self):
        """The 64-bit instruction word (layout :data:`FIELDS`)."""
        values = {"op": int(self.op), "reduce": int(self.reduce), "fwd_en": int(self.fwd is not None),
                  "port": self.port, "fwd_port": self.fwd or 0, "slot": self.slot, "block": self.block,
                  "peer": self.peer, "key": self.key, "fwd_key": self.fwd_key}
        word = 0
        for name, lsb, _ in FIELDS:
            word |= values[name] << lsb
        return word

    @classmethod
    def decode(cls, word):
        """Inverse of :meth:`encode`; raises ProgramError on a word that is not a canonical step."""
        if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word < (1 << STEP_BITS):
            raise ProgramError(f"instruction word must be a {STEP_BITS}-bit unsigned integer, got {word!r}")
        v = {name: (word >> lsb) & ((1 << width) - 1) for name, lsb, width in FIELDS}
        if v["op"] not in StepOp._value2member_map_:
            raise ProgramError(f"instruction word {word:#018x} has unknown opcode {v['op']}")
        if not v["fwd_en"] and v["fwd_port"]:
            raise ProgramError(f"instruction word {word:#018x} has fwd_port without fwd_en")
        step = cls(StepOp(v["op"]), v["slot"], v["block"], v["port"], v["peer"], v["key"], bool(v["reduce"]),
                   v["fwd_port"] if v["fwd_en"] else None, v["fwd_key"])
        return step

    def __str__(self):
        op = self.op
        if op in (StepOp.LOAD, StepOp.STORE):
            return f"{op.name} slot={self.slot} block={self.block}"
        if op in (StepOp.SEND, StepOp.PUT):
            return (f"{op.name} slot={self.slot} block={self.block} port={self.port} peer={self.peer} "
                    f"key={self.key}")
        s = f"RECV slot={self.slot} block={self.block} port={self.port} key={self.key}"
        if self.reduce:
            s += " reduce"
        if self.fwd is not None:
            s += f" fwd={self.fwd} peer={self.peer} fwd_key={self.fwd_key}"
        return s


@dataclass(frozen=True)
class Phase:
    """One phase: a name, the ports it uses (informative: which links / FSM group) and its ordered steps."""

    name: str
    ports: tuple
    steps: tuple

    def __post_init__(self):
        object.__setattr__(self, "ports", tuple(self.ports))
        object.__setattr__(self, "steps", tuple(self.steps))


@dataclass(frozen=True)
class Program:
    """The program of one endpoint for one collective instance.

    ``n_blocks`` blocks per chunk (a multiple of :func:`~.chunking.segments_for`), ``n_slots`` SRAM slots
    per chunk context (each one block in size), ``phases`` run in order for each chunk. ``arrivals``: the
    deposits (PUT messages of other ranks) this rank receives per chunk; 0 for programs without PUTs.
    """

    rank: int
    nranks: int
    collective: str
    algorithm: str
    n_blocks: int
    n_slots: int
    phases: tuple
    root: int = None
    arrivals: int = 0

    def __post_init__(self):
        object.__setattr__(self, "collective", normalize_collective(self.collective))
        object.__setattr__(self, "phases", tuple(self.phases))
        if isinstance(self.arrivals, bool) or not isinstance(self.arrivals, int) or self.arrivals < 0:
            raise ProgramError(f"arrivals must be a non-negative integer, got {self.arrivals!r}")
        if self.n_blocks % segments_for(self.collective, self.nranks):
            raise ProgramError(f"n_blocks={self.n_blocks} is not a multiple of the "
                               f"{segments_for(self.collective, self.nranks)} segments of {self.collective}")

    @property
    def segments(self):
        """Segments of a chunk's working set (see :func:`~.chunking.segments_for`)."""
        return segments_for(self.collective, self.nranks)

    @property
    def sub_blocks(self):
        """Blocks per segment; two blocks have the same size in every chunk iff equal modulo this."""
        return self.n_blocks // self.segments

    def steps(self):
        """All steps in execution order as ``(phase_index, step_index, step)``."""
        return [(pi, si, s) for pi, ph in enumerate(self.phases) for si, s in enumerate(ph.steps)]

    def instruction_words(self):
        """The encoded steps of all phases, concatenated in execution order."""
        return tuple(s.encode() for ph in self.phases for s in ph.steps)

    def phase_table(self):
        """Per phase ``(first instruction index, number of steps, port mask)``."""
        out, start = [], 0
        for ph in self.phases:
            mask = 0
            for p in ph.ports:
                mask |= 1 << p
            out.append((start, len(ph.steps), mask))
            start += len(ph.steps)
        return tuple(out)

    def listing(self):
        """Human-readable assembly listing of the program."""
        root = f" root={self.root}" if self.root is not None else ""
        arr = f" arrivals={self.arrivals}" if self.arrivals else ""
        lines = [f"; rank {self.rank}/{self.nranks} {self.collective} {self.algorithm} "
                 f"n_blocks={self.n_blocks} n_slots={self.n_slots}{root}{arr}"]
        for pi, ph in enumerate(self.phases):
            lines.append(f"phase {pi} {ph.name} ports={list(ph.ports)}")
            lines.extend(f"  {s}" for s in ph.steps)
        return "\n".join(lines)


class _Where:
    """Location of a step, formatted only when an error message needs it."""

    __slots__ = ("prog", "pi", "si", "step")

    def __init__(self, prog, pi, si, step):
        self.prog, self.pi, self.si, self.step = prog, pi, si, step

    def __str__(self):
        return f"rank {self.prog.rank} phase {self.pi} ({self.prog.phases[self.pi].name}) step {self.si} [{self.step}]"


def check_programs(programs, topology):
    """Validate a set of programs (one per endpoint of ``topology``); raise ProgramError listing every problem.

    Rules: one program per rank in rank order with consistent header fields; fields in range (slot < n_slots,
    block < n_blocks); ports exist and have a link in the needed direction; the emitted message's ``peer`` is
    reachable from that port (the neighbour, or any other rank through a switch); LOAD only of blocks the
    rank has input for, STORE only of blocks it has output for; no slot is read (SEND, STORE, RECV reduce,
    forward) before it is written (LOAD, RECV); the block sizes of a slot, a message and its receiver agree;
    every emitted message is matched by exactly one RECV with the same (phase, key) at its destination,
    arriving on the RECV's port; RECV keys are unique per (rank, phase); no RECV without a sender. A PUT
    deposits into block ``key`` of its destination, which must have output for that block of the same size,
    must not STORE it itself, and gets no other deposit for it; each rank's ``arrivals`` is the number of
    PUTs addressed to it.
    """
    errors = []
    progs = list(programs)
    topology = parse_topology(topology)
    n = topology.n_endpoints
    if len(progs) != n:
        raise ProgramError(f"{len(progs)} programs for {n} endpoints of {topology.spec}")
    head = progs[0]
    for r, p in enumerate(progs):
        if not isinstance(p, Program):
            raise ProgramError(f"programs[{r}] is not a Program: {p!r}")
        if p.rank != r:
            errors.append(f"programs[{r}] has rank {p.rank}")
        if p.nranks != n:
            errors.append(f"rank {r}: nranks={p.nranks} but the topology has {n} endpoints")
        for attr in ("collective", "algorithm", "n_blocks", "n_slots", "root"):
            if getattr(p, attr) != getattr(head, attr):
                errors.append(f"rank {r}: {attr}={getattr(p, attr)!r} differs from rank 0's "
                              f"{getattr(head, attr)!r}")
        if len(p.phases) != len(head.phases):
            errors.append(f"rank {r}: {len(p.phases)} phases, rank 0 has {len(head.phases)}")
    if head.collective in ROOTED and (head.root is None or not 0 <= head.root < n):
        errors.append(f"{head.collective} needs a root in 0..{n - 1}, got {head.root!r}")
    if errors:
        raise ProgramError("invalid programs:\n  " + "\n  ".join(errors))

    m = head.sub_blocks
    recvs = {}   # (rank, phase, key) -> (where, port, sub)
    emits = []   # (dst, phase, key, where, arrival_port, sub)
    puts = {}    # (dst, block) -> where
    stored = {}  # (rank, block) -> where
    for p in progs:
        r = p.rank
        slot_sub = {}  # slot -> sub-block index of the datum it holds (None: unwritten)
        for pi, si, s in p.steps():
            w = _Where(p, pi, si, s)
            if s.slot >= p.n_slots:
                errors.append(f"{w}: slot {s.slot} >= n_slots {p.n_slots}")
            if s.block >= p.n_blocks:
                errors.append(f"{w}: block {s.block} >= n_blocks {p.n_blocks}")
                continue
            sub, seg = s.block % m, s.block // m
            if s.op == StepOp.LOAD:
                if send_segment(p.collective, r, n, seg, p.root) is None:
                    errors.append(f"{w}: rank {r} has no input for block {s.block} of {p.collective}")
                slot_sub[s.slot] = sub
                continue
            if s.op == StepOp.STORE:
                stored.setdefault((r, s.block), w)
                if recv_segment(p.collective, r, n, seg, p.root) is None:
                    errors.append(f"{w}: rank {r} has no output for block {s.block} of {p.collective}")
                if s.slot not in slot_sub:
                    errors.append(f"{w}: STORE reads slot {s.slot} before anything was written to it")
                elif slot_sub[s.slot] != sub:
                    errors.append(f"{w}: slot {s.slot} holds a datum of sub-block {slot_sub[s.slot]}, "
                                  f"not the size of block {s.block} (sub-block {sub})")
                continue
            if s.op in (StepOp.SEND, StepOp.PUT):
                if s.slot not in slot_sub:
                    errors.append(f"{w}: {s.op.name} reads slot {s.slot} before anything was written to it")
                elif slot_sub[s.slot] != sub:
                    errors.append(f"{w}: slot {s.slot} holds a datum of sub-block {slot_sub[s.slot]}, "
                                  f"not the size of block {s.block} (sub-block {sub})")
            if s.op == StepOp.RECV:
                if s.port >= topology.n_ports or not topology.has_rx(r, s.port):
                    errors.append(f"{w}: rank {r} cannot receive on port {s.port}")
                if s.reduce:
                    if s.slot not in slot_sub:
                        errors.append(f"{w}: RECV reduce into slot {s.slot} before anything was written to it")
                    elif slot_sub[s.slot] != sub:
                        errors.append(f"{w}: reduce into slot {s.slot} holding sub-block {slot_sub[s.slot]}, "
                                      f"message is block {s.block} (sub-block {sub})")
                slot_sub[s.slot] = sub
                k = (r, pi, s.key)
                if k in recvs:
                    errors.append(f"{w}: duplicate RECV key {s.key} in phase {pi} "
                                  f"(also at {recvs[k][0]})")
                else:
                    recvs[k] = (w, s.port, sub)
            if s.emits:
                port = s.out_port
                if s.peer == r:
                    errors.append(f"{w}: message to itself")
                    continue
                if s.peer >= n:
                    errors.append(f"{w}: destination {s.peer} is not a rank of {topology.spec}")
                    continue
                try:
                    dst, arrival = topology.link(r, port, s.peer)
                except ValueError as e:
                    errors.append(f"{w}: {e}")
                    continue
                if s.op == StepOp.PUT:
                    if s.key >= p.n_blocks:
                        errors.append(f"{w}: deposit block {s.key} >= n_blocks {p.n_blocks}")
                    elif recv_segment(p.collective, dst, n, s.key // m, p.root) is None:
                        errors.append(f"{w}: rank {dst} has no output for block {s.key}")
                    elif s.key % m != sub:
                        errors.append(f"{w}: block {s.block} deposited into block {s.key} of another size")
                    if (dst, s.key) in puts:
                        errors.append(f"{w}: a second deposit into block {s.key} of rank {dst} "
                                      f"(also {puts[(dst, s.key)]})")
                    puts[(dst, s.key)] = w
                    continue
                emits.append((dst, pi, s.out_key, w, arrival, sub))
    for (dst, block), w in puts.items():
        if (dst, block) in stored:
            errors.append(f"{w}: rank {dst} also STOREs block {block} ({stored[(dst, block)]})")
    for p in progs:
        got = sum(1 for dst, _ in puts if dst == p.rank)
        if p.arrivals != got:
            errors.append(f"rank {p.rank}: arrivals={p.arrivals} but {got} deposit(s) are addressed to it")
    matched = set()
    for dst, pi, key, w, arrival, sub in emits:
        k = (dst, pi, key)
        if k not in recvs:
            errors.append(f"{w}: no RECV with key {key} in phase {pi} at rank {dst}")
            continue
        if k in matched:
            errors.append(f"{w}: a second message with key {key} in phase {pi} for rank {dst} "
                          f"(its RECV {recvs[k][0]} is already matched)")
            continue
        matched.add(k)
        rw, rport, rsub = recvs[k]
        if rport != arrival:
            errors.append(f"{w}: message arrives at rank {dst} on port {arrival}, but {rw} waits on port {rport}")
        if rsub != sub:
            errors.append(f"{w}: message of sub-block {sub} matched by {rw} expecting sub-block {rsub}")
    for k, (rw, _, _) in recvs.items():
        if k not in matched:
            errors.append(f"{rw}: no message is ever sent with key {k[2]} in phase {k[1]} to rank {k[0]}")
    if errors:
        raise ProgramError(f"{len(errors)} problem(s) in programs of {head.collective}/{head.algorithm} on "
                           f"{topology.spec}:\n  " + "\n  ".join(errors[:50])
                           + ("\n  ..." if len(errors) > 50 else ""))


def check_link_order(programs, topology):
    """Check the in-order property every generator guarantees; raise ProgramError if it does not hold.

    For every phase and every (sender, destination, arrival port), the sender emits its messages in the same
    order as the destination's RECVs on that port consume them. So within one chunk and phase each link
    delivers messages in consumption order: an implementation may keep one FIFO per (input port, chunk
    context) and use the key only as a check. (The executor does not rely on it; :func:`check_programs`
    does not require it.)
    """
    topology = parse_topology(topology)
    programs = list(programs)
    emitted, consumed = {}, {}
    for p in programs:
        for pi, _, s in p.steps():
            if s.emits and s.op != StepOp.PUT:     # deposits are not consumed by RECVs
                dst, arrival = topology.link(p.rank, s.out_port, s.peer)
                emitted.setdefault((pi, p.rank, dst, arrival), []).append(s.out_key)
    senders = {}
    for (pi, src, dst, arrival) in emitted:
        senders.setdefault((pi, dst, arrival), []).append(src)
    for p in programs:
        for pi, _, s in p.steps():
            if s.op == StepOp.RECV:
                consumed.setdefault((pi, p.rank, s.port), []).append(s.key)
    errors = []
    for (pi, dst, port), keys in consumed.items():
        srcs = senders.get((pi, dst, port), [])
        for src in srcs:
            sent = emitted[(pi, src, dst, port)]
            sent_set = set(sent)
            mine = [k for k in keys if k in sent_set]
            if mine != sent:
                errors.append(f"phase {pi}: rank {src} -> rank {dst} port {port}: sent keys {sent[:8]}..., "
                              f"consumed in order {mine[:8]}...")
    if errors:
        raise ProgramError("messages not delivered in consumption order:\n  " + "\n  ".join(errors[:20]))
