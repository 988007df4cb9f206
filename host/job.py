"""Collectives on an ACE system, driven through each endpoint's driver: the job layer of ``syncfabric run`` and
of the system testbenches.

A :class:`CollectiveJob` is one collective on every rank of a topology: seeded input data, the golden
library's programs, buffers in each endpoint's memory, the descriptor each rank posts, and the golden result
every output byte is compared with. :func:`run_endpoint` is what one emulated NPU does - bring its engine up,
load the programs, write its inputs, post its descriptors, wait for the completions and check its outputs -
written once against :class:`~syncfabric.host.driver.AceDriver`, so the same code runs under cocotb (Verilator,
Icarus) and Amaranth's simulator: the testbench runs one :func:`run_endpoint` per endpoint concurrently.

Endpoint memory map (every endpoint the same)::

    0x00000  submission ring   (SQ_ENTRIES x 64 B)
    0x04000  completion ring   (CQ_ENTRIES x 32 B)
    0x10000  data window 0     (the only region descriptors may name): the jobs' buffers, 4 KiB aligned,
                               each followed by a guard band that must stay untouched
"""

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from ..hdl.ace.config import AceConfig
from ..sim.golden.algorithms import generate
from ..sim.golden.chunking import buffer_counts
from ..sim.golden.executor import execute, landing_deadlock
from ..sim.golden.topology import parse as parse_topology
from ..sim.golden.types import DType, ReduceOp, Status, dtype_bytes
from ..sim.golden.inputs import make_inputs
from . import bringup
from .bringup import (CQ_BASE, CQ_ENTRIES, DATA_BASE, SPILL_BASE, SQ_BASE, SQ_ENTRIES, descriptor,
                      memory_layout, spill_entries_for)

__all__ = ["SQ_BASE", "SQ_ENTRIES", "CQ_BASE", "CQ_ENTRIES", "DATA_BASE", "GUARD_BYTES", "CANARY",
           "SPILL_BASE", "spill_entries_for", "slot_beats_for", "CollectiveJob", "RejectedCommand",
           "engine_chunk_bytes", "landing_headers_needed",
           "engine_config_for_job", "job_chunk_beats", "REJECTIONS", "Buffers", "EndpointResult", "memory_bytes",
           "bring_up", "load_programs", "run_endpoint"]

#: Bytes after each buffer that no command may touch (checked after every run).
GUARD_BYTES = 256
#: Fill byte of output buffers and guard bands before a run: a byte the engine did not write keeps it.
CANARY = 0xA5
_ALIGN = 4096


def _round_up(x, a):
    return -(-x // a) * a


@dataclass
class Buffers:
    """Where a job's buffers are in one endpoint's memory (``src``/``dst`` None: the rank has none)."""

    src: int
    src_bytes: int
    dst: int
    dst_bytes: int
    end: int        #: first byte after the job's region (guards included)


def slot_beats_for(chunk_beats, n_blocks, segments=1):
    """Beats of one slot (a program's largest message) with chunks of ``chunk_beats`` beats: a segment's
    beats over its blocks, rounded up; 0 when a segment would be empty."""
    seg = chunk_beats // segments
    return -(-seg // (n_blocks // segments)) if seg else 0


def _fits(cfg, chunk_beats, n_blocks, segments, n_slots):
    """Whether a chunk of ``chunk_beats`` beats passes the engine's SRAM checks for a program with these
    blocks, segments and slots (the command processor's SRAM_TOO_SMALL rule, docs/engine.md)."""
    slot = slot_beats_for(chunk_beats, n_blocks, segments)
    return 0 < slot and slot * n_slots <= cfg.buffer_beats and slot <= cfg.max_message_beats


def engine_chunk_bytes(cfg, n_blocks, requested=None, *, segments=1, n_slots=None):
    """The chunk size an engine of ``cfg`` runs a program of ``n_blocks`` blocks, ``segments`` segments and
    ``n_slots`` slots (default ``n_blocks``) with: ``requested`` if given (checked), else the largest chunk
    whose blocks fit a landing buffer's message limit (a block is one message) and whose slots fit a chunk
    buffer - for most programs ``min(chunk_bytes, n_blocks * max_message_beats * beat_bytes)``; a program
    with spare slots (an all-to-all that forwards) gets a proportionally smaller chunk."""
    n_slots = n_blocks if n_slots is None else n_slots
    limit = min(cfg.chunk_beats, n_blocks * cfg.max_message_beats)
    while limit > 0 and not _fits(cfg, limit, n_blocks, segments, n_slots):
        limit -= 1
    if limit == 0:
        raise ValueError(f"a program of {n_blocks} blocks and {n_slots} slots does not fit this engine's "
                         f"{cfg.buffer_beats}-beat chunk buffers")
    limit *= cfg.beat_bytes
    if requested is None:
        return limit
    if requested <= 0 or requested % cfg.beat_bytes:
        raise ValueError(f"chunk size {requested} must be a positive multiple of the {cfg.beat_bytes}-byte beat")
    if requested > limit:
        raise ValueError(f"chunk size {requested} exceeds what this engine runs a {n_blocks}-block program with "
                         f"({limit} B: {cfg.chunk_bytes} B chunk buffers, messages of at most "
                         f"{cfg.max_message_beats * cfg.beat_bytes} B)")
    return requested


def _slot_beats(spec, programs, cfg, chunk_bytes):
    from ..sim.golden.chunking import decomposition_for
    head = programs[0]
    d = decomposition_for(spec["collective"], head.nranks, max(1, spec["count"]),
                          dtype_bytes(DType.parse(spec["dtype"])), head.n_blocks, chunk_bytes, cfg.packet_bytes,
                          cfg.beat_bytes)
    return max(1, -(-d.slot_bytes // cfg.beat_bytes))


def engine_config_for_job(cfg, spec):
    """``cfg`` with enough landing space per (port, FSM) for the job ``spec`` (a power-of-two
    ``landing_headers``, ``landing_beats`` to match): an engine is sized for the collectives it runs, as it
    is for its topology's ports. Unchanged when ``cfg`` already suffices."""
    topo = parse_topology(spec["topology"])
    programs = generate(spec["collective"], spec["algorithm"], topo, root=spec["root"])
    head = programs[0]
    chunk = engine_chunk_bytes(cfg, head.n_blocks, spec.get("chunk_bytes"), segments=head.segments,
                               n_slots=head.n_slots)
    mb = _slot_beats(spec, programs, cfg, chunk)
    if landing_deadlock(programs, topo, cfg.landing_headers, cfg.landing_beats, mb) is None:
        return cfg
    need = landing_headers_needed(programs, topo, cfg, mb)
    if need is None:
        raise ValueError(f"{spec['collective']} on {topo.spec} needs more than 64 landing messages per port")
    beats = cfg.landing_beats
    while beats < need * mb:
        beats *= 2
    return cfg.replace(landing_headers=max(need, cfg.landing_headers), landing_beats=beats)


def landing_headers_needed(programs, topology, cfg, message_beats):
    """The smallest power-of-two ``landing_headers`` (up to 64) with which ``programs`` run on an engine like
    ``cfg`` without waiting forever for landing space (None if even 64 is not enough)."""
    for h in (2, 4, 8, 16, 32, 64):
        if landing_deadlock(programs, topology, h, max(cfg.landing_beats, h * message_beats),
                            message_beats) is None:
            return h
    return None


def job_chunk_beats(jobs):
    """The CHUNK_BEATS register value ``jobs`` need (it is engine-wide, so they must agree)."""
    sizes = {j.chunk_bytes // j.cfg.beat_bytes for j in jobs if isinstance(j, CollectiveJob)}
    if len(sizes) > 1:
        raise ValueError(f"jobs on one engine must share a chunk size (CHUNK_BEATS is engine-wide); got "
                         f"{sorted(sizes)} beats")
    return sizes.pop() if sizes else None


class CollectiveJob:
    """One collective on every rank of ``spec["topology"]``.

    ``spec``: a :func:`~syncfabric.host.run.job_spec` dict (collective, topology, algorithm, count, dtype, op,
    root, seed). ``cfg``: the engines' :class:`~syncfabric.hdl.ace.config.AceConfig` (its chunk, packet and
    beat sizes drive the golden decomposition). ``comm``/``tag``: the communicator the job runs on and the tag
    of its descriptors; ``in_place``: the result overwrites the input (the descriptor's IN_PLACE flag);
    ``misalign``: bytes (a multiple of the element size) added to each buffer's 4 KiB-aligned address.
    """

    def __init__(self, spec, cfg=None, *, comm=0, tag=0, in_place=False, misalign=0, cookie=None):
        self.spec = dict(spec)
        self.cfg = AceConfig() if cfg is None else cfg
        self.comm, self.tag, self.in_place = comm, tag, in_place
        self.topology = parse_topology(spec["topology"])
        self.P = self.topology.n_endpoints
        self.dtype, self.op = DType.parse(spec["dtype"]), ReduceOp.parse(spec["op"])
        self.eb = dtype_bytes(self.dtype)
        if misalign % self.eb:
            raise ValueError(f"misalign={misalign} is not a multiple of the {self.eb}-byte element")
        self.misalign = misalign
        self.cookie = cookie
        self.programs = generate(spec["collective"], spec["algorithm"], self.topology, root=spec["root"])
        head = self.programs[0]
        self.chunk_bytes = engine_chunk_bytes(self.cfg, head.n_blocks, spec.get("chunk_bytes"),
                                              segments=head.segments, n_slots=head.n_slots)
        self.check_landing()
        self.inputs = make_inputs(spec)
        self.null_ranks = frozenset(spec.get("null_ranks", ()))
        self.golden = execute(self.programs, self.topology, self.inputs, self.dtype, self.op, spec["count"],
                              self.chunk_bytes, self.cfg.packet_bytes, self.cfg.beat_bytes,
                              null_ranks=self.null_ranks)
        self.buffers = [None] * self.P
        self.status, self.detail = Status.OK, 0

    def slot_beats(self):
        """Beats of the job's largest block (its messages are at most this long)."""
        return _slot_beats(self.spec, self.programs, self.cfg, self.chunk_bytes)

    def check_landing(self):
        """Raise ValueError if the programs would wait forever on this engine's landing buffers: a rank may send
        several messages on a port before its neighbour RECVs the first, and each (port, FSM) holds only
        ``landing_headers`` messages of ``landing_beats`` beats (:func:`~syncfabric.sim.golden.executor.
        landing_deadlock` runs one chunk with those limits)."""
        stuck = landing_deadlock(self.programs, self.topology, self.cfg.landing_headers, self.cfg.landing_beats,
                                 self.slot_beats())
        if stuck:
            need = landing_headers_needed(self.programs, self.topology, self.cfg, self.slot_beats())
            raise ValueError(f"{self.spec['collective']} on {self.topology.spec} needs landing buffers of "
                             f"{need if need else 'more than 64'} messages per port and FSM; this engine has "
                             f"{self.cfg.landing_headers} (landing_headers) and would wait forever "
                             f"(blocked: {stuck[:200]})")

    @property
    def collective(self):
        return self.spec["collective"]

    def buffer_bytes(self, rank):
        """(send, receive) buffer bytes of ``rank``."""
        n_in, n_out = buffer_counts(self.collective, self.spec["count"], self.P, rank, self.spec["root"])
        return n_in * self.eb, n_out * self.eb

    def place(self, rank, base):
        """Put ``rank``'s buffers at or after ``base`` (4 KiB aligned, plus ``misalign``); returns the end."""
        n_in, n_out = self.buffer_bytes(rank)
        start = _round_up(base, _ALIGN) + self.misalign
        if self.in_place:
            # NCCL's in-place convention: the own segment of the bigger buffer is the smaller one
            seg = self.spec["count"] * self.eb
            if self.collective == "reduce_scatter":
                src, dst = start, start + rank * seg
            elif self.collective == "allgather":
                dst, src = start, start + rank * seg
            else:
                src = dst = start
            end = start + max(n_in, n_out)
        else:
            src = start
            dst = _round_up(src + n_in + GUARD_BYTES, _ALIGN) + self.misalign
            end = dst + n_out
        self.buffers[rank] = Buffers(src, n_in, dst, n_out, end + GUARD_BYTES)
        return self.buffers[rank].end

    def descriptor(self, rank):
        """The descriptor ``rank`` posts (fields of ``descriptor_layout()``)."""
        b = self.buffers[rank]
        return descriptor(self.collective, self.dtype, self.op, comm=self.comm, root=self.spec["root"],
                          tag=self.tag, count=self.spec["count"], src=b.src, dst=b.dst,
                          cookie=self.cookie if self.cookie is not None else rank, in_place=self.in_place,
                          null=rank in self.null_ranks)

    async def write_inputs(self, transport, rank):
        """Canary-fill the receive buffer and guard bands, then write the send buffer."""
        b = self.buffers[rank]
        lo = min(b.src, b.dst)
        await transport.write_mem(lo, bytes([CANARY]) * (b.end - lo))
        if b.src_bytes:
            await transport.write_mem(b.src, np.ascontiguousarray(self.inputs[rank]).view(np.uint8).tobytes())

    def expected(self, rank):
        """Bytes the receive buffer of ``rank`` must hold after the collective."""
        return self.golden.outputs[rank].tobytes()

    def expected_contributors(self, rank):
        """The completion's ``contributors`` for ``rank`` (the golden count lane)."""
        return self.golden.contributors[rank]

    async def check(self, transport, rank):
        """``(mismatching output bytes, modified guard bytes)`` of ``rank`` after the run."""
        b = self.buffers[rank]
        out = await transport.read_mem(b.dst, b.dst_bytes) if b.dst_bytes else b""
        exp = self.expected(rank)
        bad = int(np.count_nonzero(np.frombuffer(out, np.uint8) != np.frombuffer(exp, np.uint8)))
        guard = await transport.read_mem(b.end - GUARD_BYTES, GUARD_BYTES)
        touched = sum(1 for x in guard if x != CANARY)
        if not self.in_place and b.src_bytes:
            # the source must be unchanged and the gap between the buffers untouched
            src = await transport.read_mem(b.src, b.src_bytes)
            bad += int(np.count_nonzero(np.frombuffer(src, np.uint8)
                                        != np.ascontiguousarray(self.inputs[rank]).view(np.uint8)))
            gap = await transport.read_mem(b.src + b.src_bytes, GUARD_BYTES)
            touched += sum(1 for x in gap if x != CANARY)
        return bad, touched


class RejectedCommand:
    """A descriptor the engine must reject: ``kind`` (a key of :data:`REJECTIONS`) spoils one field of an
    otherwise valid descriptor of ``template`` (a :class:`CollectiveJob`, whose buffers it does not share).
    It expects an error completion with the documented status and detail, and no byte written: its
    destination buffer and guard bands keep their canary."""

    def __init__(self, kind, template, *, cookie=None):
        if kind not in REJECTIONS:
            raise ValueError(f"unknown rejection {kind!r}; expected one of {', '.join(REJECTIONS)}")
        self.kind, self.template, self.cookie = kind, template, cookie
        self.status, self._mutate = REJECTIONS[kind]
        self.comm, self.collective = template.comm, template.collective
        self.programs = template.programs
        self.topology, self.P = template.topology, template.P
        self.misalign = 0
        self.buffers = [None] * self.P

    def buffer_bytes(self, rank):
        return self.template.buffer_bytes(rank)

    def place(self, rank, base):
        n_in, n_out = self.buffer_bytes(rank)
        src = _round_up(base, _ALIGN)
        dst = _round_up(src + n_in + GUARD_BYTES, _ALIGN)
        self.buffers[rank] = Buffers(src, n_in, dst, n_out, dst + n_out + GUARD_BYTES)
        return self.buffers[rank].end

    def descriptor(self, rank):
        b = self.buffers[rank]
        t = self.template
        desc = descriptor(t.collective, t.dtype, t.op, comm=t.comm, root=t.spec["root"], tag=t.tag,
                          count=t.spec["count"], src=b.src, dst=b.dst,
                          cookie=self.cookie if self.cookie is not None else rank)
        self.detail = self._mutate(desc, self)
        return desc

    async def write_inputs(self, transport, rank):
        b = self.buffers[rank]
        await transport.write_mem(b.src, bytes([CANARY]) * (b.end - b.src))

    async def check(self, transport, rank):
        """``(0, bytes of the command's region that changed)``: nothing may be written."""
        b = self.buffers[rank]
        region = await transport.read_mem(b.src, b.end - b.src)
        return 0, sum(1 for x in region if x != CANARY)


def _set(**fields):
    def mutate(desc, cmd):
        desc.update(fields)
        return next(iter(fields.values())) if len(fields) == 1 else 0
    return mutate


def _misalign(field):
    def mutate(desc, cmd):
        desc[field] += 2 if dtype_bytes(desc["dtype"]) == 4 else 1
        return 0 if field == "src" else 1
    return mutate


def _outside(field):
    def mutate(desc, cmd):
        desc[field] = SQ_BASE if field == "dst" else DATA_BASE - 4096    # below the data window
        return 0 if field == "src" else 1
    return mutate


def _in_place_mismatch(desc, cmd):
    from ..hdl.common.layouts import DescFlags as F
    desc["flags"] = F.IN_PLACE
    return F.IN_PLACE


def _null_with_max(desc, cmd):
    from ..hdl.common.layouts import DescFlags as F
    desc.update(flags=F.NULL, op=ReduceOp.MAX)
    return F.NULL


def _bad_root(desc, cmd):
    desc["root"] = cmd.P
    return cmd.P


#: Rejections a descriptor can earn: kind -> (status, how the descriptor is spoiled; returns the detail the
#: completion must carry). The order of the checks is in docs/engine.md.
REJECTIONS = {
    "bad_collective": (Status.BAD_COLLECTIVE, _set(collective=0x3F)),
    "bad_comm": (Status.BAD_COMM, _set(comm=0xEE)),
    "bad_dtype": (Status.BAD_DTYPE, _set(dtype=7)),
    "bad_op": (Status.BAD_OP, _set(op=3)),
    "bad_flags": (Status.BAD_FLAGS, _set(flags=0x80)),
    "in_place_mismatch": (Status.BAD_FLAGS, _in_place_mismatch),
    "null_with_max": (Status.BAD_FLAGS, _null_with_max),
    "zero_count": (Status.ZERO_COUNT, lambda d, c: d.update(count=0) or 0),
    "misaligned_src": (Status.MISALIGNED, _misalign("src")),
    "misaligned_dst": (Status.MISALIGNED, _misalign("dst")),
    "bad_root": (Status.BAD_ROOT, _bad_root),
    "bad_algorithm": (Status.BAD_ALGORITHM, _set(algorithm=5)),
    "src_out_of_window": (Status.OUT_OF_WINDOW, _outside("src")),
    "dst_out_of_window": (Status.OUT_OF_WINDOW, _outside("dst")),
}


def memory_bytes(jobs, rank=0):
    """Endpoint memory needed by ``jobs`` (placed one after the other from :data:`DATA_BASE`)."""
    end = DATA_BASE
    for job in jobs:
        n_in, n_out = job.buffer_bytes(rank)
        end = _round_up(end, _ALIGN) + job.misalign + n_in + n_out + 2 * GUARD_BYTES + 2 * _ALIGN
    return _round_up(end, _ALIGN)


async def bring_up(drv, mem_bytes, chunk_beats=None, spill_entries=None, replay_timeout=None):
    """:func:`syncfabric.host.bringup.bring_up` for a job runner's endpoint of ``mem_bytes``: the rings and
    spill window at :data:`SQ_BASE`..:data:`SPILL_BASE`, the data window from :data:`DATA_BASE` to the end of
    memory, the chunk size ``chunk_beats`` (default: the configuration's), ``spill_entries`` spill records
    (default: :func:`spill_entries_for`) and, when given, the link retransmission's ``REPLAY_TIMEOUT``."""
    layout = memory_layout(mem_bytes, drv.cfg, compact=False)
    if spill_entries is not None:
        layout = dataclasses.replace(layout, spill_entries=spill_entries)
    await bringup.bring_up(drv, layout, window=(DATA_BASE, mem_bytes - DATA_BASE),
                           chunk_beats=drv.cfg.chunk_beats if chunk_beats is None else chunk_beats,
                           replay_timeout=replay_timeout)


async def load_programs(drv, rank, jobs):
    """Load every job's program of ``rank`` on its communicator (one
    :func:`syncfabric.host.bringup.load_programs` per communicator)."""
    by_comm = {}
    for job in jobs:
        progs = by_comm.setdefault(job.comm, {})
        prog = job.programs[rank]
        key = (job.collective, prog.root or 0)       # broadcast / reduce: one program per root
        prev = progs.get(key)
        if prev is not None and prev[0] != prog:
            raise ValueError(f"communicator {job.comm} has two different {job.collective} programs")
        progs[key] = (prog, job.topology)
    for comm, progs in by_comm.items():
        topos = {t.spec for _, t in progs.values()}
        if len(topos) != 1:
            raise ValueError(f"communicator {comm} is used on several topologies: {sorted(topos)}")
        topo = next(iter(progs.values()))[1]
        await bringup.load_programs(drv, comm, rank, topo, [prog for _, (prog, _) in sorted(progs.items())])


@dataclass
class EndpointResult:
    """What one endpoint saw: the completion of each job (in posting order), its mismatches and guard
    damage, the cycles from the first doorbell to the last completion, the engine's counters, whether it
    ever saw an SRAM bank conflict (STATUS.sram_conflict: never, in a correct engine) and per job the
    completion's count lane (``contributors``) beside the golden model's."""

    rank: int
    completions: list = field(default_factory=list)
    mismatches: list = field(default_factory=list)
    guard_touched: list = field(default_factory=list)
    cycles: int = 0
    counters: dict = field(default_factory=dict)
    sram_conflict: bool = False
    contributors: list = field(default_factory=list)    #: per job: (completion's, golden's) count lane
    wall_s: float = 0.0     #: wall-clock seconds of those ``cycles`` (the simulator's speed on the collective)


async def run_endpoint(drv, rank, jobs, *, mem_bytes=None, timeout_cycles=None, sync=None, setup=True,
                       fsm_limit=None, spill_entries=None, replay_timeout=None):
    """Everything endpoint ``rank`` does for ``jobs`` (posted in list order): bring-up and program loading (if
    ``setup``; ``spill_entries``: the spill window's records, see :func:`bring_up`), inputs, one descriptor per job, then wait for as many completions and check every output
    byte against the golden model. ``fsm_limit`` (with ``setup``) writes FSM_LIMIT: chunks go to that many
    FSMs only. ``sync`` (an async callable) is awaited just before the first doorbell,
    e.g. a barrier so that all endpoints post at the same cycle. Returns an :class:`EndpointResult`;
    completions are matched to jobs by their cookie."""
    tr = drv.transport
    if mem_bytes is None:
        mem_bytes = memory_bytes(jobs, rank)
    if setup:
        await bring_up(drv, mem_bytes, job_chunk_beats(jobs), spill_entries, replay_timeout)
        await load_programs(drv, rank, jobs)
        if fsm_limit is not None:
            if not 1 <= fsm_limit <= drv.cfg.n_fsms:
                raise ValueError(f"FSM limit {fsm_limit} out of range (the engine has {drv.cfg.n_fsms} FSMs)")
            await drv.write("FSM_LIMIT", fsm_limit)
    base = DATA_BASE
    for job in jobs:
        base = job.place(rank, base)
        if base > mem_bytes:
            raise ValueError(f"the jobs need {base:#x} bytes of endpoint memory, there are {mem_bytes:#x}")
        await job.write_inputs(tr, rank)
    if sync is not None:
        await sync()
    t0 = await tr.cycles()
    w0 = time.monotonic()
    cookies = []
    for k, job in enumerate(jobs):
        desc = job.descriptor(rank)
        if job.cookie is None:      # unique per command: (position << 16) | rank
            desc["cookie"] = (k << 16) | rank
        cookies.append(desc["cookie"])
        await drv.post(desc)
    cpls = await drv.wait(len(jobs), timeout_cycles=timeout_cycles)
    res = EndpointResult(rank, cycles=await tr.cycles() - t0, wall_s=time.monotonic() - w0)
    by_cookie = {c["cookie"]: c for c in cpls}
    if len(by_cookie) != len(cpls):
        raise RuntimeError(f"rank {rank}: several completions carry the same cookie")
    for job, cookie in zip(jobs, cookies):
        cpl = by_cookie.get(cookie)
        if cpl is None:
            raise RuntimeError(f"rank {rank}: no completion with cookie {cookie:#x}")
        res.completions.append(cpl)
        if isinstance(job, RejectedCommand) or cpl["status"] == Status.OK:
            bad, touched = await job.check(tr, rank)
        else:
            bad, touched = job.buffer_bytes(rank)[1], 0
        res.mismatches.append(bad)
        res.guard_touched.append(touched)
        expect = job.expected_contributors(rank) if isinstance(job, CollectiveJob) else 0
        res.contributors.append((cpl["contributors"], expect))
    res.counters = await drv.counters()
    res.sram_conflict = bool((await drv.status())["sram_conflict"])
    return res
