"""Golden executor: runs the programs of all endpoints on byte buffers, exactly as the engine would.

The executor knows nothing about algorithms; it interprets the step semantics of :mod:`.program`:

* Each (endpoint, chunk) pair is a *chunk context* with its own slots and a program counter over the steps
  of all phases in order. Contexts are independent; the scheduler interleaves them (round robin, or in a
  random order with ``seed``) and up to ``max_chunks_in_flight`` chunks are live at once.
* SEND (and the forward of RECV ``fwd``) never blocks: the message is delivered to the destination's
  mailbox under ``(chunk, phase, key)``; a RECV blocks until its message is there. Matching is by key only,
  so the result does not depend on the interleaving - a property the tests check.
* RECV ``reduce`` computes ``arith.reduce_bytes(incoming, slot, dtype, op)``: the program fixes which partial
  result is combined with which, hence every floating-point bit.
* Count lane: every slot and every message carries a small integer next to its bytes, the number of ranks'
  contributions in the datum. LOAD sets it to 1 (0 at a *null rank*, see ``null_ranks``), RECV ``reduce``
  adds the incoming count to the slot's, a plain RECV takes the incoming count, SEND and the forward of a
  RECV carry the slot's count, and STORE records it (:attr:`ExecResult.store_counts`,
  :attr:`ExecResult.contributors`).
* PUT delivers its message as a deposit: the bytes go straight to the destination's output range of block
  ``key`` (counted as the destination's memory writes, its count lane recorded like a STORE's); no RECV.
* A barrier (``collective == "barrier"``) runs as exactly one chunk of empty blocks whatever ``count`` is:
  LOAD and STORE move nothing, SEND / RECV exchange header-only messages.

Errors: :class:`DeadlockError` when no context can progress (lists the blocked steps);
:class:`ExecutionError` for a message left unconsumed, a message arriving on the wrong port, a size mismatch,
a read of an empty slot, or a LOAD/STORE of a block the rank has no buffer for.
"""

from dataclasses import dataclass, field
import random

import numpy as np

from .arith import reduce_bytes
from .chunking import Decomposition, buffer_counts, recv_segment, send_segment
from .program import StepOp, check_programs
from .topology import parse as parse_topology
from .types import DType, ReduceOp, dtype_bytes

__all__ = ["execute", "ExecResult", "DeadlockError", "ExecutionError", "NULL_COLLECTIVES", "landing_deadlock"]


class ExecutionError(RuntimeError):
    """The programs did something illegal at run time."""


class DeadlockError(ExecutionError):
    """No chunk context can make progress; ``blocked`` lists the blocked steps as strings."""

    def __init__(self, message, blocked):
        super().__init__(message)
        self.blocked = blocked


@dataclass
class ExecResult:
    """Outputs and traffic statistics of one :func:`execute` run.

    ``outputs[r]``: rank ``r``'s receive buffer (uint8; empty if it has none). Byte counts are payload bytes
    (headers excluded). ``link_bytes``/``link_messages``/``link_packets`` are keyed by the transmitting
    ``(rank, port)``; for a switch that is the rank's uplink. A message of ``n`` bytes is
    ``max(1, ceil(n / packet_bytes))`` packets (an empty block still sends a header-only packet).
    ``phase_link_bytes`` splits ``link_bytes`` by the program phase that sent them: ``(phase, rank, port)``;
    ``phase_link_flits`` counts the same messages in link flits (``max(1, ceil(n / beat_bytes))`` each: the
    header rides beside the payload).
    ``mem_read_bytes``/``mem_write_bytes``: LOAD / STORE payload per rank (the DMA traffic to NPU memory).
    ``read_counts``/``write_counts``: per rank, how often each byte of the send / receive buffer was
    loaded / stored.

    Count lane: ``store_counts[r]`` maps each block rank ``r`` STOREs to the count its (last) STORE of that
    block carried, the number of non-null contributions reduced into it; every chunk stores the same count
    for a block (the executor checks it). :attr:`contributors` is the minimum of these per rank.
    ``null_ranks``: the ranks that contributed a null contribution (see :func:`execute`).
    """

    outputs: tuple
    decomposition: Decomposition
    link_bytes: dict = field(default_factory=dict)
    link_messages: dict = field(default_factory=dict)
    link_packets: dict = field(default_factory=dict)
    phase_link_bytes: dict = field(default_factory=dict)
    phase_link_flits: dict = field(default_factory=dict)
    bytes_sent: list = None
    mem_read_bytes: list = None
    mem_write_bytes: list = None
    read_counts: list = None
    write_counts: list = None
    n_messages: int = 0
    n_packets: int = 0
    n_steps: int = 0
    store_counts: list = None
    null_ranks: frozenset = frozenset()

    @property
    def n_chunks(self):
        """Number of chunks the payload was split into."""
        return self.decomposition.n_chunks

    @property
    def contributors(self):
        """Per rank, the minimum count over the blocks it STOREd (0 if it stored nothing): how many ranks
        contributed to every block of its output. For an all-reduce ``P - len(null_ranks)`` on every rank."""
        return [min(sc.values(), default=0) for sc in self.store_counts or ()]

    @property
    def total_bytes_sent(self):
        """Payload bytes sent by all endpoints (every hop counts)."""
        return sum(self.bytes_sent)

    @property
    def bytes_sent_per_byte_read(self):
        """Bytes put on the network per byte read from NPU memory, over all endpoints (ACE section VI-A)."""
        read = sum(self.mem_read_bytes)
        return self.total_bytes_sent / read if read else float("nan")

    def output_as(self, rank, np_dtype):
        """Rank ``rank``'s output viewed as a numpy array of ``np_dtype`` (little-endian)."""
        return self.outputs[rank].view(np.dtype(np_dtype).newbyteorder("<"))


class _Msg:
    __slots__ = ("port", "data", "count", "where")

    def __init__(self, port, data, count, where):
        self.port, self.data, self.count, self.where = port, data, count, where


class _Where:
    """Location of a step, formatted only when an error message needs it."""

    __slots__ = ("prog", "chunk", "pi", "si", "step")

    def __init__(self, prog, chunk, pi, si, step):
        self.prog, self.chunk, self.pi, self.si, self.step = prog, chunk, pi, si, step

    def __str__(self):
        return (f"rank {self.prog.rank} chunk {self.chunk} phase {self.pi} ({self.prog.phases[self.pi].name}) "
                f"step {self.si} [{self.step}]")


class _Ctx:
    __slots__ = ("rank", "chunk", "pc", "slots", "counts", "stored")

    def __init__(self, rank, chunk, n_slots):
        self.rank, self.chunk, self.pc, self.slots = rank, chunk, 0, [None] * n_slots
        self.counts = [0] * n_slots  # the count lane of each slot
        self.stored = {}             # block -> count of its last STORE in this chunk


def _as_bytes(x, nbytes, rank):
    if nbytes == 0 and x is None:
        return np.zeros(0, np.uint8)
    if x is None:
        raise ValueError(f"rank {rank} needs an input buffer of {nbytes} bytes, got None")
    a = np.ascontiguousarray(x)
    if a.dtype.byteorder == ">":
        raise ValueError(f"rank {rank}: input must be little-endian, got {a.dtype}")
    u8 = a.reshape(-1).view(np.uint8)
    if nbytes == 0:
        return np.zeros(0, np.uint8)  # a rank without input (broadcast non-root): its buffer is not read
    if u8.size != nbytes:
        raise ValueError(f"rank {rank}: input has {u8.size} bytes, the collective needs {nbytes}")
    return u8


#: Collectives that accept null contributions (``execute(..., null_ranks=...)``).
NULL_COLLECTIVES = ("allreduce", "reduce_scatter", "reduce")


def _check_null_ranks(null_ranks, nranks, collective, op):
    """``null_ranks`` as a frozenset of ranks, after checking that the run may have null contributions."""
    null = set()
    for r in () if null_ranks is None else null_ranks:
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)) or not 0 <= r < nranks:
            raise ValueError(f"null rank {r!r} is not a rank of the {nranks} ranks")
        null.add(int(r))
    if null and collective not in NULL_COLLECTIVES:
        raise ValueError(f"null contributions are only defined for {', '.join(NULL_COLLECTIVES)}, "
                         f"not {collective}")
    if null and op != ReduceOp.SUM:
        raise ValueError(f"null contributions need the op sum (a null rank contributes zeros), "
                         f"not {op.name.lower()}")
    return frozenset(null)


def execute(programs, topology, inputs, dtype, op, count, chunk_bytes=65536, packet_bytes=256, beat_bytes=64,
            *, max_chunks_in_flight=1, seed=None, check=True, reducer=None, null_ranks=()):
    """Run ``programs`` (one per rank of ``topology``) on ``inputs`` and return an :class:`ExecResult`.

    ``inputs[r]``: rank ``r``'s send buffer (any numpy array, taken as its little-endian bytes, of
    ``buffer_counts(...)[0]`` elements; None for a rank without one; ``inputs=None``: no rank passes one,
    e.g. for a barrier). ``count``: elements per rank in NCCL convention (see
    :func:`~.chunking.buffer_counts`); a barrier ignores it and runs one chunk of empty blocks.
    ``chunk_bytes``/``packet_bytes``/``beat_bytes``: the decomposition (:class:`~.chunking.Decomposition`).
    ``max_chunks_in_flight``: chunks live at once; ``seed``: if not None, interleave the live contexts in a
    random order drawn from this seed (the result must not change). ``check``: run
    :func:`~.program.check_programs` first. ``reducer``: a function with the signature of
    :func:`~.arith.reduce_bytes` computing every RECV reduction instead of the golden arithmetic (used to run
    the reductions on RTL while the executor moves the data).

    ``null_ranks``: ranks that make a null contribution (partial all-reduce): their LOADs read no memory (not
    counted in ``mem_read_bytes`` / ``read_counts``; their input may be None) and fill the slot with zeros of
    the block's size and the count 0, so the outputs are the reduction with those ranks' inputs replaced by
    zeros, in the program's order, and :attr:`ExecResult.contributors` tells how many ranks really
    contributed. Only for allreduce, reduce_scatter and reduce (:data:`NULL_COLLECTIVES`) with op sum
    (``ValueError`` otherwise).
    """
    dtype, op = DType(dtype), ReduceOp(op)
    topology = parse_topology(topology)
    progs = list(programs)
    reduce_fn = reduce_bytes if reducer is None else reducer
    if check:
        check_programs(progs, topology)
    P = topology.n_endpoints
    if len(progs) != P:
        raise ValueError(f"{len(progs)} programs for {P} endpoints")
    head = progs[0]
    coll, root = head.collective, head.root
    null = _check_null_ranks(null_ranks, P, coll, op)
    eb = dtype_bytes(dtype)
    decomp = Decomposition(count, eb, head.n_blocks, head.segments, chunk_bytes, packet_bytes, beat_bytes,
                           barrier=coll == "barrier")
    if inputs is None:
        inputs = [None] * P
    if len(inputs) != P:
        raise ValueError(f"{len(inputs)} input buffers for {P} ranks")
    sizes = [buffer_counts(coll, count, P, r, root) for r in range(P)]
    ins = [None if r in null and inputs[r] is None else _as_bytes(inputs[r], sizes[r][0] * eb, r)
           for r in range(P)]
    outs = [np.zeros(sizes[r][1] * eb, np.uint8) for r in range(P)]
    res = ExecResult(tuple(outs), decomp, bytes_sent=[0] * P, mem_read_bytes=[0] * P, mem_write_bytes=[0] * P,
                     read_counts=[np.zeros(sizes[r][0] * eb, np.uint16) for r in range(P)],
                     write_counts=[np.zeros(sizes[r][1] * eb, np.uint16) for r in range(P)],
                     store_counts=[{} for _ in range(P)], null_ranks=null)
    flat = [p.steps() for p in progs]
    m = head.sub_blocks
    seg_in = [[send_segment(coll, r, P, s, root) for s in range(head.segments)] for r in range(P)]
    seg_out = [[recv_segment(coll, r, P, s, root) for s in range(head.segments)] for r in range(P)]
    mailbox = [dict() for _ in range(P)]
    chunk_cache = {}
    rng = random.Random(seed) if seed is not None else None

    def where(ctx, pi, si, step):
        return _Where(progs[ctx.rank], ctx.chunk, pi, si, step)

    def byte_range(ctx, block, segmap):
        ch = chunk_cache[ctx.chunk]
        b = ch.blocks[block]
        seg = segmap[ctx.rank][block // m]
        if seg is None:
            return None, b.nbytes
        lo = (seg * count + b.lo) * eb
        return (lo, lo + b.nbytes), b.nbytes

    links = {}

    def emit(ctx, pi, w, data, cnt, port, peer, key, deposit=False):
        lk = (ctx.rank, port)
        try:
            dst, arrival = links[lk + (peer,)]
        except KeyError:
            dst, arrival = links[lk + (peer,)] = topology.link(ctx.rank, port, peer)
        if deposit:
            _, nbytes = byte_range(ctx, key, seg_out)
            rng_ = byte_range(_Ctx(dst, ctx.chunk, 0), key, seg_out)[0]
            if rng_ is None or nbytes != data.size:
                raise ExecutionError(f"{w}: rank {dst} has no output block {key} of {data.size} bytes")
            lo, hi = rng_
            outs[dst][lo:hi] = data
            res.mem_write_bytes[dst] += hi - lo
            res.write_counts[dst][lo:hi] += 1
            _merge_store_counts(res.store_counts[dst], _Deposit(dst, ctx.chunk, {key: cnt}))
        else:
            k = (ctx.chunk, pi, key)
            box = mailbox[dst]
            if k in box:
                raise ExecutionError(f"{w}: rank {dst} already holds an unconsumed message with key {key} in "
                                     f"phase {pi} of chunk {ctx.chunk} (from {box[k].where})")
            box[k] = _Msg(arrival, data, cnt, w)
        n = data.size
        packets = max(1, -(-n // packet_bytes))
        res.link_bytes[lk] = res.link_bytes.get(lk, 0) + n
        res.phase_link_bytes[(pi,) + lk] = res.phase_link_bytes.get((pi,) + lk, 0) + n
        res.phase_link_flits[(pi,) + lk] = res.phase_link_flits.get((pi,) + lk, 0) + max(1, -(-n // beat_bytes))
        res.link_messages[lk] = res.link_messages.get(lk, 0) + 1
        res.link_packets[lk] = res.link_packets.get(lk, 0) + packets
        res.bytes_sent[ctx.rank] += n
        res.n_messages += 1
        res.n_packets += packets

    def slot_data(ctx, step, w, nbytes):
        data = ctx.slots[step.slot]
        if data is None:
            raise ExecutionError(f"{w}: slot {step.slot} is empty")
        if data.size != nbytes:
            raise ExecutionError(f"{w}: slot {step.slot} holds {data.size} bytes, block {step.block} has {nbytes}")
        return data

    def run(ctx, budget):
        """Execute up to ``budget`` steps of ``ctx``; return the number executed."""
        steps = flat[ctx.rank]
        done = 0
        while ctx.pc < len(steps) and done < budget:
            pi, si, step = steps[ctx.pc]
            r = ctx.rank
            if step.slot >= len(ctx.slots) or step.block >= head.n_blocks:
                raise ExecutionError(f"{where(ctx, pi, si, step)}: slot or block out of range "
                                     f"(n_slots={len(ctx.slots)}, n_blocks={head.n_blocks})")
            if step.op == StepOp.RECV:
                k = (ctx.chunk, pi, step.key)
                msg = mailbox[r].get(k)
                if msg is None:
                    break
                w = where(ctx, pi, si, step)
                del mailbox[r][k]
                if msg.port != step.port:
                    raise ExecutionError(f"{w}: message (sent by {msg.where}) arrived on port {msg.port}")
                _, nbytes = byte_range(ctx, step.block, seg_out)
                if msg.data.size != nbytes:
                    raise ExecutionError(f"{w}: message of {msg.data.size} bytes (sent by {msg.where}) for a "
                                         f"block of {nbytes}")
                if step.reduce:
                    local = slot_data(ctx, step, w, nbytes)
                    ctx.slots[step.slot] = reduce_fn(msg.data, local, dtype, op)
                    ctx.counts[step.slot] += msg.count
                else:
                    ctx.slots[step.slot] = msg.data
                    ctx.counts[step.slot] = msg.count
                if step.fwd is not None:
                    emit(ctx, pi, w, ctx.slots[step.slot], ctx.counts[step.slot], step.fwd, step.peer,
                         step.fwd_key)
            elif step.op in (StepOp.SEND, StepOp.PUT):
                w = where(ctx, pi, si, step)
                _, nbytes = byte_range(ctx, step.block, seg_in)
                emit(ctx, pi, w, slot_data(ctx, step, w, nbytes), ctx.counts[step.slot], step.port, step.peer,
                     step.key, step.op == StepOp.PUT)
            elif step.op == StepOp.LOAD:
                rng_, nbytes = byte_range(ctx, step.block, seg_in)
                if rng_ is None:
                    raise ExecutionError(f"{where(ctx, pi, si, step)}: rank {r} has no input for this block")
                if r in null:  # a null contribution: zeros, count 0, no memory read
                    ctx.slots[step.slot] = np.zeros(nbytes, np.uint8)
                    ctx.counts[step.slot] = 0
                else:
                    lo, hi = rng_
                    ctx.slots[step.slot] = ins[r][lo:hi].copy()
                    ctx.counts[step.slot] = 1
                    res.mem_read_bytes[r] += hi - lo
                    res.read_counts[r][lo:hi] += 1
            else:  # STORE
                w = where(ctx, pi, si, step)
                rng_, nbytes = byte_range(ctx, step.block, seg_out)
                if rng_ is None:
                    raise ExecutionError(f"{w}: rank {r} has no output for this block")
                lo, hi = rng_
                outs[r][lo:hi] = slot_data(ctx, step, w, nbytes)
                ctx.stored[step.block] = ctx.counts[step.slot]
                res.mem_write_bytes[r] += hi - lo
                res.write_counts[r][lo:hi] += 1
            ctx.pc += 1
            done += 1
        return done

    next_chunk, live = 0, []
    while True:
        while next_chunk < decomp.n_chunks and len({c.chunk for c in live}) < max_chunks_in_flight:
            chunk_cache[next_chunk] = decomp.chunk(next_chunk)
            live.extend(_Ctx(r, next_chunk, head.n_slots) for r in range(P))
            next_chunk += 1
        if not live:
            break
        order = list(live)
        if rng is not None:
            rng.shuffle(order)
        progressed = 0
        for ctx in order:
            progressed += run(ctx, rng.randint(1, 4) if rng is not None else len(flat[ctx.rank]))
        res.n_steps += progressed
        finished = [c for c in live if c.pc == len(flat[c.rank])]
        for ctx in finished:
            _merge_store_counts(res.store_counts[ctx.rank], ctx)
        if finished:
            live = [c for c in live if c.pc < len(flat[c.rank])]
            live_chunks = {c.chunk for c in live}
            for ch in {c.chunk for c in finished} - live_chunks:
                _check_drained(mailbox, ch)
                del chunk_cache[ch]
        elif not progressed:
            blocked = []
            for ctx in live:
                pi, si, step = flat[ctx.rank][ctx.pc]
                blocked.append(f"{where(ctx, pi, si, step)} waits for key {step.key} on port {step.port}")
            raise DeadlockError(f"deadlock: {len(blocked)} chunk context(s) blocked on RECV with no matching "
                                f"message:\n  " + "\n  ".join(blocked[:20])
                                + ("\n  ..." if len(blocked) > 20 else ""), blocked)
    res.store_counts = [dict(sorted(sc.items())) for sc in res.store_counts]
    return res


class _Deposit:
    """The store-count record of one deposit (for :func:`_merge_store_counts`)."""

    def __init__(self, rank, chunk, stored):
        self.rank, self.chunk, self.stored = rank, chunk, stored


def _merge_store_counts(counts, ctx):
    """Fold a finished context's STORE counts into its rank's ``counts``; every chunk must agree."""
    for block, n in ctx.stored.items():
        if counts.get(block, n) != n:
            raise ExecutionError(f"rank {ctx.rank} chunk {ctx.chunk} stored block {block} with count {n}, an "
                                 f"earlier chunk with count {counts[block]}")
        counts[block] = n


def _check_drained(mailbox, chunk):
    left = [(dst, k, msg) for dst, box in enumerate(mailbox) for k, msg in box.items() if k[0] == chunk]
    if left:
        lines = [f"to rank {dst} phase {k[1]} key {k[2]} (sent by {msg.where})" for dst, k, msg in left[:20]]
        raise ExecutionError(f"chunk {chunk} finished with {len(left)} message(s) never received:\n  "
                             + "\n  ".join(lines))


def landing_deadlock(programs, topology, headers, beats, message_beats):
    """Whether ``programs`` can run one chunk with bounded landing buffers, as on the engine: every receiving
    (rank, input port) holds at most ``headers`` messages and ``beats`` beats that have arrived but not been
    RECVed, a SEND (or the forward of a RECV) waits until its whole message fits, each rank runs its steps in
    order, and a RECV takes the message at the head of its port's queue. Through a switch every (receiving
    port, source rank) pair has its own queue of that size and a RECV takes the awaited message from the head
    of any of them (the engine's per-source landing channels). Every message counts ``message_beats`` beats
    (the largest block: a bound for every chunk).

    Returns None when the chunk completes, else a description of the blocked steps: the programs need more
    landing space than that (the golden executor's unbounded mailboxes hide this). LOAD and STORE always
    proceed."""
    topology = parse_topology(topology)
    flat = [[step for _, _, step in p.steps()] for p in programs]
    phase_of = [[pi for pi, _, _ in p.steps()] for p in programs]
    pcs = [0] * len(programs)
    queues = {}                 # (rank, port, source or None) -> list of (phase, key)
    used = {}                   # (rank, port, source or None) -> beats held
    routed = topology.routed

    def room(queue, nb):
        return len(queues.get(queue, [])) < headers and used.get(queue, 0) + nb <= beats

    def emit(queue, pi, key):
        queues.setdefault(queue, []).append((pi, key))
        used[queue] = used.get(queue, 0) + message_beats

    def target(rank, port, peer):
        """The queue a message from ``rank`` leaving on ``port`` towards ``peer`` lands in."""
        dst, dport = topology.link(rank, port, peer if routed else None)
        return (dst, dport, rank if routed else None)

    def awaited(rank, port, pi, key):
        """The queue whose head is message (pi, key) for ``rank``'s ``port``, or None."""
        for queue, q in queues.items():
            if queue[:2] == (rank, port) and q and q[0] == (pi, key):
                return queue
            if not routed and queue[:2] == (rank, port):
                return None
        return None

    progress = True
    while progress:
        progress = False
        for r, steps in enumerate(flat):
            while pcs[r] < len(steps):
                s, pi = steps[pcs[r]], phase_of[r][pcs[r]]
                if s.op == StepOp.PUT:
                    pass            # drained by the destination's deposit unit, which spills when it must
                elif s.op == StepOp.SEND:
                    if not room(target(r, s.port, s.peer), message_beats):
                        break
                    emit(target(r, s.port, s.peer), pi, s.key)
                elif s.op == StepOp.RECV:
                    queue = awaited(r, s.port, pi, s.key)
                    if queue is None:
                        break
                    if s.fwd is not None and not room(target(r, s.fwd, s.peer), message_beats):
                        break
                    queues[queue].pop(0)
                    used[queue] -= message_beats
                    if s.fwd is not None:
                        emit(target(r, s.fwd, s.peer), pi, s.fwd_key)
                pcs[r] += 1
                progress = True
    blocked = [f"rank {r} step {pcs[r]} [{flat[r][pcs[r]]}]" for r in range(len(flat)) if pcs[r] < len(flat[r])]
    return "; ".join(blocked) if blocked else None
