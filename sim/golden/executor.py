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

__all__ = ["execute", "ExecResult", "DeadlockError", "ExecutionError"]


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
    ``mem_read_bytes``/``mem_write_bytes``: LOAD / STORE payload per rank (the DMA traffic to NPU memory).
    ``read_counts``/``write_counts``: per rank, how often each byte of the send / receive buffer was
    loaded / stored.
    """

    outputs: tuple
    decomposition: Decomposition
    link_bytes: dict = field(default_factory=dict)
    link_messages: dict = field(default_factory=dict)
    link_packets: dict = field(default_factory=dict)
    bytes_sent: list = None
    mem_read_bytes: list = None
    mem_write_bytes: list = None
    read_counts: list = None
    write_counts: list = None
    n_messages: int = 0
    n_packets: int = 0
    n_steps: int = 0

    @property
    def n_chunks(self):
        """Number of chunks the payload was split into."""
        return self.decomposition.n_chunks

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
    __slots__ = ("port", "data", "where")

    def __init__(self, port, data, where):
        self.port, self.data, self.where = port, data, where


class _Where:
    """Location of a step, formatted only when an error message needs it."""

    __slots__ = ("prog", "chunk", "pi", "si", "step")

    def __init__(self, prog, chunk, pi, si, step):
        self.prog, self.chunk, self.pi, self.si, self.step = prog, chunk, pi, si, step

    def __str__(self):
        return (f"rank {self.prog.rank} chunk {self.chunk} phase {self.pi} ({self.prog.phases[self.pi].name}) "
                f"step {self.si} [{self.step}]")


class _Ctx:
    __slots__ = ("rank", "chunk", "pc", "slots")

    def __init__(self, rank, chunk, n_slots):
        self.rank, self.chunk, self.pc, self.slots = rank, chunk, 0, [None] * n_slots


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


def execute(programs, topology, inputs, dtype, op, count, chunk_bytes=65536, packet_bytes=256, beat_bytes=64,
            *, max_chunks_in_flight=1, seed=None, check=True, reducer=None):
    """Run ``programs`` (one per rank of ``topology``) on ``inputs`` and return an :class:`ExecResult`.

    ``inputs[r]``: rank ``r``'s send buffer (any numpy array, taken as its little-endian bytes, of
    ``buffer_counts(...)[0]`` elements; None for a rank without one). ``count``: elements per rank in NCCL
    convention (see :func:`~.chunking.buffer_counts`). ``chunk_bytes``/``packet_bytes``/``beat_bytes``:
    the decomposition (:class:`~.chunking.Decomposition`). ``max_chunks_in_flight``: chunks live at once;
    ``seed``: if not None, interleave the live contexts in a random order drawn from this seed (the result
    must not change). ``check``: run :func:`~.program.check_programs` first. ``reducer``: a function with the
    signature of :func:`~.arith.reduce_bytes` computing every RECV reduction instead of the golden arithmetic
    (used to run the reductions on RTL while the executor moves the data).
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
    eb = dtype_bytes(dtype)
    decomp = Decomposition(count, eb, head.n_blocks, head.segments, chunk_bytes, packet_bytes, beat_bytes)
    if len(inputs) != P:
        raise ValueError(f"{len(inputs)} input buffers for {P} ranks")
    sizes = [buffer_counts(coll, count, P, r, root) for r in range(P)]
    ins = [_as_bytes(inputs[r], sizes[r][0] * eb, r) for r in range(P)]
    outs = [np.zeros(sizes[r][1] * eb, np.uint8) for r in range(P)]
    res = ExecResult(tuple(outs), decomp, bytes_sent=[0] * P, mem_read_bytes=[0] * P, mem_write_bytes=[0] * P,
                     read_counts=[np.zeros(sizes[r][0] * eb, np.uint16) for r in range(P)],
                     write_counts=[np.zeros(sizes[r][1] * eb, np.uint16) for r in range(P)])
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

    def emit(ctx, pi, w, data, port, peer, key):
        lk = (ctx.rank, port)
        try:
            dst, arrival = links[lk + (peer,)]
        except KeyError:
            dst, arrival = links[lk + (peer,)] = topology.link(ctx.rank, port, peer)
        k = (ctx.chunk, pi, key)
        box = mailbox[dst]
        if k in box:
            raise ExecutionError(f"{w}: rank {dst} already holds an unconsumed message with key {key} in phase "
                                 f"{pi} of chunk {ctx.chunk} (from {box[k].where})")
        box[k] = _Msg(arrival, data, w)
        n = data.size
        packets = max(1, -(-n // packet_bytes))
        res.link_bytes[lk] = res.link_bytes.get(lk, 0) + n
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
                else:
                    ctx.slots[step.slot] = msg.data
                if step.fwd is not None:
                    emit(ctx, pi, w, ctx.slots[step.slot], step.fwd, step.peer, step.fwd_key)
            elif step.op == StepOp.SEND:
                w = where(ctx, pi, si, step)
                _, nbytes = byte_range(ctx, step.block, seg_in)
                emit(ctx, pi, w, slot_data(ctx, step, w, nbytes), step.port, step.peer, step.key)
            elif step.op == StepOp.LOAD:
                rng_, nbytes = byte_range(ctx, step.block, seg_in)
                if rng_ is None:
                    raise ExecutionError(f"{where(ctx, pi, si, step)}: rank {r} has no input for this block")
                lo, hi = rng_
                ctx.slots[step.slot] = ins[r][lo:hi].copy()
                res.mem_read_bytes[r] += hi - lo
                res.read_counts[r][lo:hi] += 1
            else:  # STORE
                w = where(ctx, pi, si, step)
                rng_, nbytes = byte_range(ctx, step.block, seg_out)
                if rng_ is None:
                    raise ExecutionError(f"{w}: rank {r} has no output for this block")
                lo, hi = rng_
                outs[r][lo:hi] = slot_data(ctx, step, w, nbytes)
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
    return res


def _check_drained(mailbox, chunk):
    left = [(dst, k, msg) for dst, box in enumerate(mailbox) for k, msg in box.items() if k[0] == chunk]
    if left:
        lines = [f"to rank {dst} phase {k[1]} key {k[2]} (sent by {msg.where})" for dst, k, msg in left[:20]]
        raise ExecutionError(f"chunk {chunk} finished with {len(left)} message(s) never received:\n  "
                             + "\n  ".join(lines))
