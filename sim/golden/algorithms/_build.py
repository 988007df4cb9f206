"""Program construction helpers shared by the algorithm generators.

Generators describe messages by *symbolic ids* (any hashable, unique per receiving rank and phase). The
:class:`Builder` turns them into hardware message keys at the end: the key of a message is the index of
its RECV among the RECVs of the receiving rank's phase (0, 1, 2, ... in program order). Keys are therefore
dense and bounded by the number of RECVs per phase, and a receiver could even check an arriving key against
its RECV counter; the executor and the hardware only ever compare keys for equality.

Schedules are built in *ticks*: ``ticks[t]`` is the list of steps a rank issues in ring/chain step ``t``.
Schedules of independent flows (the two directions of a bidirectional ring, the rings of a torus dimension)
are merged tick by tick, so every rank's program interleaves them in lockstep.
"""

from ..program import Phase, Program, Step, StepOp

__all__ = ["Builder", "send", "put", "recv", "merge_ticks", "ring_schedule", "chain_schedule"]


class _Proto:
    """A step with symbolic message ids in place of keys."""

    __slots__ = ("op", "slot", "block", "port", "peer", "reduce", "fwd", "msg", "fwd_msg")

    def __init__(self, op, slot, block, port=0, peer=0, reduce=False, fwd=None, msg=None, fwd_msg=None):
        self.op, self.slot, self.block, self.port, self.peer = op, slot, block, port, peer
        self.reduce, self.fwd, self.msg, self.fwd_msg = reduce, fwd, msg, fwd_msg


def send(slot, block, port, peer, msg):
    """A symbolic SEND."""
    return _Proto(StepOp.SEND, slot, block, port, peer, msg=msg)


def put(slot, block, port, peer, dst_block):
    """A PUT: ``slot`` deposited into block ``dst_block`` of ``peer``'s output (no RECV, no symbolic id)."""
    return _Proto(StepOp.PUT, slot, block, port, peer, msg=dst_block)


def recv(slot, block, port, msg, reduce=False, fwd=None, peer=0, fwd_msg=None):
    """A symbolic RECV (with forwarding to ``peer`` on ``fwd`` as ``fwd_msg`` if ``fwd`` is given)."""
    return _Proto(StepOp.RECV, slot, block, port, peer if fwd is not None else 0, reduce, fwd, msg, fwd_msg)


class Builder:
    """Accumulates the phases of all ranks' programs, then resolves message keys (:meth:`build`)."""

    def __init__(self, nranks, collective, algorithm, n_blocks, n_slots, root=None):
        self.nranks = nranks
        self.collective, self.algorithm = collective, algorithm
        self.n_blocks, self.n_slots, self.root = n_blocks, n_slots, root
        self._phases = []  # [(name, ports, {rank: [proto]})]

    def phase(self, name, ports):
        """Start a new phase (for every rank)."""
        self._phases.append((name, tuple(ports), {r: [] for r in range(self.nranks)}))

    def _cur(self, rank):
        return self._phases[-1][2][rank]

    def load(self, rank, slot, block):
        """Append a LOAD to ``rank``'s current phase."""
        self._cur(rank).append(_Proto(StepOp.LOAD, slot, block))

    def store(self, rank, slot, block):
        """Append a STORE to ``rank``'s current phase."""
        self._cur(rank).append(_Proto(StepOp.STORE, slot, block))

    def add(self, rank, protos):
        """Append symbolic steps to ``rank``'s current phase."""
        self._cur(rank).extend(protos)

    def add_schedule(self, ticks_by_rank):
        """Append a tick schedule ``{rank: [[proto, ...], ...]}`` (ranks absent from it add nothing)."""
        for r, ticks in ticks_by_rank.items():
            for tick in ticks:
                self._cur(r).extend(tick)

    def build(self):
        """Resolve keys and return one :class:`Program` per rank (a tuple in rank order)."""
        keys = {}
        for pi, (_, _, steps) in enumerate(self._phases):
            for r, protos in steps.items():
                n = 0
                for p in protos:
                    if p.op == StepOp.RECV:
                        k = (r, pi, p.msg)
                        if k in keys:
                            raise RuntimeError(f"generator bug: message id {p.msg!r} received twice by rank {r} "
                                               f"in phase {pi}")
                        keys[k] = n
                        n += 1

        def key_of(dst, pi, msg, r):
            try:
                return keys[(dst, pi, msg)]
            except KeyError:
                raise RuntimeError(f"generator bug: rank {r} sends message {msg!r} in phase {pi} but rank "
                                   f"{dst} never receives it") from None

        arrivals = [0] * self.nranks
        for _, _, steps in self._phases:
            for protos in steps.values():
                for p in protos:
                    if p.op == StepOp.PUT:
                        arrivals[p.peer] += 1
        progs = []
        for r in range(self.nranks):
            phases = []
            for pi, (name, ports, steps) in enumerate(self._phases):
                out = []
                for p in _loads_by_first_use(steps[r]):
                    if p.op in (StepOp.LOAD, StepOp.STORE):
                        out.append(Step(p.op, p.slot, p.block))
                    elif p.op == StepOp.SEND:
                        out.append(Step(p.op, p.slot, p.block, p.port, p.peer, key_of(p.peer, pi, p.msg, r)))
                    elif p.op == StepOp.PUT:
                        out.append(Step(p.op, p.slot, p.block, p.port, p.peer, p.msg))
                    else:
                        fk = key_of(p.peer, pi, p.fwd_msg, r) if p.fwd is not None else 0
                        out.append(Step(p.op, p.slot, p.block, p.port, p.peer, keys[(r, pi, p.msg)],
                                        p.reduce, p.fwd, fk))
                phases.append(Phase(name, ports, out))
            phases[-1] = Phase(phases[-1].name, phases[-1].ports,
                               _stores_after_last_write(phases[-1].steps, phases[:-1]))
            progs.append(Program(r, self.nranks, self.collective, self.algorithm, self.n_blocks,
                                 self.n_slots, phases, self.root, arrivals[r]))
        return tuple(progs)


def _loads_by_first_use(protos):
    """``protos`` with its leading LOADs reordered by the first later step that uses their slot (unused ones
    last, ties in program order). A LOAD only copies memory into its slot, so the order of the leading LOADs
    changes nothing but timing: an engine that lets a step start once its own slot is loaded begins sending
    after one block instead of the whole chunk."""
    n = 0
    while n < len(protos) and protos[n].op == StepOp.LOAD:
        n += 1
    first_use = {}
    for i, p in enumerate(protos[n:]):
        first_use.setdefault(p.slot, i)
    order = sorted(range(n), key=lambda k: (first_use.get(protos[k].slot, len(protos)), k))
    return [protos[k] for k in order] + list(protos[n:])


def _stores_after_last_write(steps, earlier_phases=()):
    """``steps`` (the last phase) with every STORE moved up to just after the last step before it that writes
    its slot - one step later when that write is a RECV (after the step that follows it) - or to the start of
    the phase when that write is in an earlier phase; never into the leading LOADs of a first phase. A STORE
    only reads its slot, and no step between its old and new place writes that slot, so the data stored is the
    same: only the timing changes. An engine that posts STOREs as it meets them writes a block back as soon
    as it is final, while the chunk's other blocks are still on the links, instead of the whole chunk after
    its last message (ACE's RX DMA draining the terminal partition at the end, which leaves the last chunk's
    write-back exposed). Standing one step behind a RECV, the STORE does not come between two RECVs that an
    engine streams back to back through one unit: the next RECV is issued while the first still runs, and the
    STORE when the first has written its slot."""
    head = 0
    if not earlier_phases:
        while head < len(steps) and steps[head].op == StepOp.LOAD:
            head += 1
    rest = [s for s in steps if s.op != StepOp.STORE]
    after = {}              # index into rest -> STOREs that go right after it (-1: before everything)
    last_write = {}         # slot -> index into rest of its last write so far
    k = -1
    for s in steps:
        if s.op == StepOp.STORE:
            at = last_write.get(s.slot, -1)
            if (at >= 0 and rest[at].op == StepOp.RECV and at + 1 < len(rest)
                    and not (rest[at + 1].op in (StepOp.LOAD, StepOp.RECV) and rest[at + 1].slot == s.slot)):
                at += 1
            after.setdefault(max(at, head - 1), []).append(s)
            continue
        k += 1
        if s.op in (StepOp.LOAD, StepOp.RECV):
            last_write[s.slot] = k
    out = list(after.get(-1, []))
    for i, s in enumerate(rest):
        out.append(s)
        out.extend(after.get(i, []))
    return out


def merge_ticks(*schedules):
    """Merge tick schedules ``{rank: [tick, ...]}`` tick by tick (schedule order within a tick)."""
    out = {}
    for sched in schedules:
        for r, ticks in sched.items():
            mine = out.setdefault(r, [])
            for t, tick in enumerate(ticks):
                if t == len(mine):
                    mine.append([])
                mine[t].extend(tick)
    return out


def _port(p, rank):
    return p[rank] if isinstance(p, dict) else p


def ring_schedule(kind, members, groups, out_port, in_port, tag):
    """Ring reduce-scatter (``"rs"``), all-gather (``"ag"``) or all-reduce (``"ar"``) over ``members``.

    Data flows ``members[i] -> members[i+1]`` (mod G) leaving on ``out_port`` and arriving on ``in_port``
    (ports may be dicts rank -> port). ``groups[rank]`` is the list of blocks ``rank`` owns: the fully
    reduced result after RS, the contribution it starts with in AG. Slot = block. Returns ``{rank: ticks}``.

    RS: tick 0 sends the group of position ``i-1``; tick ``t+1`` receives (reduce) the group of position
    ``i-t-2`` and forwards it (reduce-and-forward), except the last, which is the own group. AR fuses the
    last RS receive with the first AG send (reduce-and-forward, ACE Fig. 8 steps 3-4), then AG ticks
    receive the group of position ``i-1-t`` and forward it (store-and-forward) except at the last tick.
    """
    G = len(members)
    if G < 2:
        raise ValueError("a ring phase needs at least 2 members")
    out = {}
    for i, r in enumerate(members):
        nxt = members[(i + 1) % G]
        op, ip = _port(out_port, r), _port(in_port, r)

        def g(j):
            return groups[members[j % G]]

        ticks = []
        if kind in ("rs", "ar"):
            ticks.append([send(b, b, op, nxt, (tag, "rs", b)) for b in g(i - 1)])
            for t in range(G - 1):
                last = t == G - 2
                tick = []
                for b in g(i - t - 2):
                    if not last:
                        tick.append(recv(b, b, ip, (tag, "rs", b), True, op, nxt, (tag, "rs", b)))
                    elif kind == "ar":
                        tick.append(recv(b, b, ip, (tag, "rs", b), True, op, nxt, (tag, "ag", b)))
                    else:
                        tick.append(recv(b, b, ip, (tag, "rs", b), True))
                ticks.append(tick)
        if kind == "ag":
            ticks.append([send(b, b, op, nxt, (tag, "ag", b)) for b in g(i)])
        if kind in ("ag", "ar"):
            for t in range(G - 1):
                last = t == G - 2
                ticks.append([recv(b, b, ip, (tag, "ag", b)) if last
                              else recv(b, b, ip, (tag, "ag", b), False, op, nxt, (tag, "ag", b))
                              for b in g(i - 1 - t)])
        if kind not in ("rs", "ag", "ar"):
            raise ValueError(f"unknown ring phase kind {kind!r}")
        out[r] = ticks
    return out


def chain_schedule(kind, flow, blocks, out_port, in_port, tag):
    """A pipeline along ``flow`` (ranks in data-flow order): broadcast (``"bcast"``) from ``flow[0]`` or
    reduce (``"reduce"``) into ``flow[-1]``. One tick per block; slot = block.

    The first rank SENDs each block, the middle ranks RECV it (reducing for ``"reduce"``) and forward it in
    the same pass, the last rank RECVs it.
    """
    if kind not in ("bcast", "reduce"):
        raise ValueError(f"unknown chain kind {kind!r}")
    red = kind == "reduce"
    out = {}
    n = len(flow)
    for i, r in enumerate(flow):
        op, ip = _port(out_port, r), _port(in_port, r)
        ticks = []
        for b in blocks:
            if i == 0:
                ticks.append([send(b, b, op, flow[1], (tag, b))])
            elif i < n - 1:
                ticks.append([recv(b, b, ip, (tag, b), red, op, flow[i + 1], (tag, b))])
            else:
                ticks.append([recv(b, b, ip, (tag, b), red)])
        out[r] = ticks
    return out
