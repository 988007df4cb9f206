"""Collective time at chunk granularity: the chunks of a payload flow through the phases of the algorithm's
program, each phase reserving the resources its traffic needs.

For every chunk ``c`` and phase ``p`` (in order) the model computes

* the entry time: when the chunk left phase ``p-1`` and a place in phase ``p`` is free (at most ``K_p``
  chunks in a phase: the SRAM partition's chunk buffers and the phase's FSMs for an engine, ``inflight`` for
  a memory-backed endpoint);
* a reservation on every resource the phase uses - each output port's link (``rate * link_bw *
  efficiency``), the memory channel(s) reserved for communication, the ALUs, the phase's FSMs (the paper's
  engine; the RTL's, below) - of
  ``demand / capacity`` seconds starting when both the chunk and the resource are free (a resource keeps its
  reservations as busy intervals and a later request may fill a gap an earlier one left); for an RTL engine
  all of them start together (the chunk streams through them: memory, SRAM, ALU and link move the same data
  in one pass) at the first time the chunk is there and every one of them has room - per torus dimension
  when a phase sends on two (``hierarchical-rotated``: its two rings run side by side, each starting when
  its own links have room; memory, ALU and FSM start with the first);
* the exit time: the last reservation's end plus the phase's latency, ``depth * (link latency + step
  overhead)`` (the longest chain of dependent messages, each crossing one link and one endpoint); an RTL
  engine's STORE of what the phase received follows that (it cannot start before the data has arrived) and
  holds the chunk's buffer until it is written.

The RTL's engine (an endpoint calibrated against it, ``buffer_granular``) binds a chunk to one FSM through
every phase, as its dispatcher does (chunk ``c`` on FSM ``c mod F``): the chunk's time through a phase alone,
replayed step by step from the programs (:mod:`.steptime`: every step's overhead, messages streamed one after
another, RECVs waiting for their messages, forwards cut through), is the least time it spends in the phase;
the FSM takes chunk ``c + F`` once chunk ``c`` has taken its last step and moved to the terminal partition
(whose buffers wait for the STOREs), and chunk ``c + 2F``, then queued behind it, starts its LOADs (the load
sequencer's prefetch). With few FSMs, or chunks whose trip through the phases is long against their traffic
(small chunks on slow, long links), the FSMs, not the SRAM, bound the chunks in flight.

So a lone chunk pays every hop (the alpha-beta time of the ring), and many chunks in flight approach the
busiest resource's bound (the link bound for ACE, the memory bound for a baseline short of memory bandwidth).
Demands come from :mod:`.profile` (the golden programs), so the model follows whatever algorithm runs.
"""

import bisect
from dataclasses import dataclass, field
from functools import lru_cache
import heapq
import math

from ...hdl.common.layouts import MAX_PHASES
from ..golden.algorithms import generate
from ..golden.partitions import partition_sizes, residence
from ..golden.topology import Torus, parse as parse_topology
from .profile import MAX_PROGRAM_RANKS, profile as get_profile
from .steptime import phase_step_times
from .system import SystemParams

__all__ = ["CollectiveResult", "collective_time", "phase_slots", "link_capacity", "ring_bound"]


@dataclass
class CollectiveResult:
    """Time of one collective and what it used. ``sent``: bytes one NPU put on its links; ``busy``: seconds
    each resource was reserved; ``slots``: chunks in flight allowed per phase; ``phase_busy``: seconds at least one
    chunk held a place in each phase (the engine's ``PHASE_BUSY`` counters)."""

    time: float
    n_chunks: int
    sent: float
    bound: float
    slots: tuple
    busy: dict = field(default_factory=dict)
    phase_busy: tuple = ()

    @property
    def network_bw(self):
        """Bytes per second one NPU drives into the network."""
        return self.sent / self.time if self.time > 0 else 0.0


class _Timeline:
    """One resource's reservations: disjoint busy intervals, sorted. A reservation takes the earliest gap at or
    after its request that fits it (the resource is work conserving: a later request may use time an earlier
    one left idle), adjacent intervals merged."""

    __slots__ = ("starts", "ends")

    def __init__(self):
        self.starts, self.ends = [], []

    def earliest(self, t, d):
        """The earliest start ``>= t`` of a free gap of ``d`` seconds."""
        starts, ends = self.starts, self.ends
        i = bisect.bisect_right(ends, t)             # intervals before i end at or before t
        s = t
        while i < len(starts) and starts[i] < s + d:
            s = max(s, ends[i])
            i += 1
        return s

    def reserve(self, s, d):
        """Reserve ``[s, s + d)`` (free: found by :meth:`earliest`)."""
        starts, ends = self.starts, self.ends
        i = bisect.bisect_left(starts, s)
        e = s + d
        # i: the first interval starting at or after e; merge with the neighbours that touch [s, e)
        lo = i
        if lo > 0 and ends[lo - 1] >= s:
            lo -= 1
            s0 = min(starts[lo], s)
        else:
            s0 = s
        if i < len(starts) and starts[i] <= e:
            e = max(e, ends[i])
            i += 1
        starts[lo:i] = [s0]
        ends[lo:i] = [e]
        return s


def link_capacity(topo, port, system):
    """Bytes per second a link leaving ``port`` carries (rank 0's; the fabrics are symmetric)."""
    attr = topo.link_attr(0, port)
    return attr.rate * system.link_bw * system.link_efficiency


def _phase_latency(topo, ports, system):
    lat = max((topo.link_attr(0, p).latency for p in ports if p < topo.n_ports and topo.has_tx(0, p)),
              default=0)
    hops = 2 if topo.routed else 1          # up-link and down-link through a switch
    return hops * lat / system.clock_hz


def phase_slots(prof, topo, ep, system, chunk):
    """Chunks in flight per phase: an engine's SRAM partition for the phase; ``inflight`` for memory-backed
    endpoints.

    An RTL-calibrated engine (``buffer_granular``) splits whole chunk buffers as its driver does
    (:func:`~syncfabric.sim.golden.partitions.partition_sizes`, one chunk per buffer whatever the phase), in
    proportion to each phase's :func:`~syncfabric.sim.golden.partitions.residence`: its dependency depth of
    hops plus its busiest port's share of the chunk at the port's capacity. The paper's engine follows the
    ACE heuristic (size proportional to the phase's link bandwidth x its initial chunk size, the terminal
    partition as large as the last phase's) and splits bytes: a chunk takes only its share of the chunk in a
    later phase."""
    n = len(prof.phases)
    if ep.kind != "ace":
        return (ep.inflight,) * n
    if ep.buffer_granular:
        n_buffers = max(n + 1, ep.sram_bytes // chunk)
        if n > MAX_PHASES:
            return (max(1, n_buffers // (n + 1)),) * n
        weights = [residence(ph.depth, _phase_latency(topo, ph.ports, system),
                             max((frac * chunk / link_capacity(topo, port, system)
                                  for port, frac in ph.link.items()), default=0.0))
                   for ph in prof.phases]
        return tuple(partition_sizes([weights], n_buffers)[:n])
    weights = []
    for ph in prof.phases:
        bw = sum(topo.link_attr(0, p).rate for p in ph.ports if p < topo.n_ports and topo.has_tx(0, p))
        weights.append(bw * ph.input)
    w = weights + [weights[-1]]
    total = sum(w) or 1.0
    return tuple(max(1, int(ep.sram_bytes * wi / total / (chunk * max(ph.input, 1e-12))))
                 for wi, ph in zip(w, prof.phases))


def _step_times(collective, topo, algorithm, prof, chunk, ep, system):
    """Seconds one chunk takes through each phase, step by step (:mod:`.steptime`); None where the
    programs are not generated (composed tori beyond the program encoding)."""
    if topo.n_endpoints > MAX_PROGRAM_RANKS:
        return None
    progs = _programs(collective, prof.algorithm, topo.spec)
    beats = prof.phases[0].message * chunk * system.clock_hz / system.link_bw
    return [t / system.clock_hz for t in phase_step_times(progs, topo, beats, ep.step_cycles)]


@lru_cache(maxsize=64)
def _programs(collective, algorithm, spec):
    return tuple(generate(collective, algorithm, spec))


def _gangs(need, lead, torus):
    """``need`` (resource, seconds) grouped by the resources that start together: on a torus one group per
    dimension whose links the phase uses, the non-link resources with the ``lead`` dimension's links."""
    out = {}
    for r, d in need:
        g = r[1] // 2 if torus and isinstance(r, tuple) and r[0] == "link" else lead
        out.setdefault(g, []).append((r, d))
    return out


def fsms_per_phase(work, n_fsms):
    """FSMs per phase: at least one each, the rest one at a time to the phase with the most FSM work per FSM
    (``work``: FSM seconds per chunk). Monotone in ``n_fsms``."""
    n = len(work)
    out = [1] * n
    for _ in range(max(0, n_fsms - n)):
        i = max(range(n), key=lambda i: (work[i] / out[i], -i))
        out[i] += 1
    return out


def ring_bound(nbytes, p, bandwidth):
    """The bandwidth bound of a unidirectional ring all-reduce: ``2(p-1)/p * nbytes / bandwidth``."""
    return 2 * (p - 1) / p * nbytes / bandwidth


def collective_time(collective, nbytes, topology, ep, system=None, algorithm=None):
    """:class:`CollectiveResult` of ``collective`` on ``nbytes`` per NPU (NCCL's buffer convention) over
    ``topology`` with endpoint configuration ``ep`` (:class:`~.system.Endpoint`)."""
    system = system or SystemParams()
    topo = parse_topology(topology)
    prof = get_profile(collective, topo, algorithm)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    chunk = ep.chunk_bytes or system.chunk_bytes
    sent = nbytes * sum(ph.sent for ph in prof.phases)
    if nbytes == 0:
        return CollectiveResult(0.0, 0, 0.0, 0.0, ())
    n_chunks = math.ceil(nbytes / chunk)
    sizes = [chunk] * (n_chunks - 1) + [nbytes - chunk * (n_chunks - 1)]
    step_s = ep.step_cycles / system.clock_hz

    # Per phase: [(resource, seconds per byte of chunk)], latency.
    plans = []
    n_ph = len(prof.phases)
    for pi, ph in enumerate(prof.phases):
        dem = {}
        for port, frac in ph.link.items():
            dem[("link", port)] = dem.get(("link", port), 0.0) + frac / link_capacity(topo, port, system)
        if ep.kind == "ace":
            rd, wr = ("mem_rd", "mem_wr") if ep.split_memory else ("mem", "mem")
            if ph.ace_read:
                dem[rd] = dem.get(rd, 0.0) + ph.ace_read / ep.comm_mem_bw
            if ph.ace_write:
                dem[wr] = dem.get(wr, 0.0) + ph.ace_write / ep.comm_mem_bw
            if ph.reduce:
                dem["alu"] = ph.reduce / (ep.alus * ep.alu_bytes * system.clock_hz)
        elif ep.kind == "npu":
            cap = min(ep.comm_mem_bw, max(ep.comm_sms, 1) * system.sm_bw)
            if ep.split_memory:
                dem["mem_rd"] = ph.npu_read / cap
                dem["mem_wr"] = ph.npu_write / cap
            else:
                dem["mem"] = (ph.npu_read + ph.npu_write) / cap
        lat = ph.depth * (_phase_latency(topo, ph.ports, system) + step_s)
        # a port's messages each cost the endpoint's per-message cycles beside their beats (full-rate links)
        msgs = {("link", port): (frac, frac / ph.message) for port, frac in ph.link.items()
                if ep.message_cycles and ph.message}
        plans.append([dem, {}, lat, msgs])
    slots = phase_slots(prof, topo, ep, system, chunk)
    # The RTL's engines (``buffer_granular``, calibrated against it): see ``gang`` below.
    gang = ep.kind == "ace" and ep.buffer_granular
    fsm_time = [0.0] * n_ph
    if ep.kind == "ace":
        # An FSM runs a chunk's steps one after another: per step its overhead, per message the time to
        # stream it through the datapath. The RTL's FSM holds one chunk through every phase, so the chunk's
        # step-by-step time through the phase (which also waits for its messages) is the least time it spends
        # there; the paper's engine has FSMs per phase, which share the phase's work as a resource.
        datapath = ep.alu_bytes * system.clock_hz
        work = [(ph.steps * step_s + ph.transfers * ph.message * chunk / datapath) for ph in prof.phases]
        if gang:
            fsm_time = _step_times(collective, topo, algorithm, prof, chunk, ep, system) or work
        else:
            fsms = fsms_per_phase(work, ep.n_fsms)
            for pi in range(n_ph):
                plans[pi][1] = {("fsm", pi): work[pi] / fsms[pi]}

    # Event-driven: chunks ask for a phase in time order; each resource serves its reservations first come,
    # first served (so phases sharing a link, like a torus's first and last, interleave their chunks).
    lines, busy = {}, {}
    # The RTL's engines (``gang``): a chunk streams through a phase's resources together (one start for all),
    # and the engine stores what a phase received once it has arrived: the STORE follows the phase's messages
    # (their links and latency) instead of overlapping them, and the chunk's buffer is free only after it.
    # Chunk c runs on FSM c mod F from its first phase to its last (the dispatcher's assignment): the FSM
    # takes chunk c + F when chunk c has taken its last step and moved to the terminal partition, and the
    # dispatcher may then queue chunk c + 2F (the FSM's 2-entry queue). Dispatching a chunk takes its place in
    # the first phase's partition (waiting while it is full) and starts its LOADs (the load sequencer's
    # prefetch); its FSM starts its steps once it has taken the chunk and the chunk's data starts to arrive.
    # The paper's endpoints keep independent reservations and no such binding.
    serial_after = [{"mem_wr", "mem"} if gang and ph.ace_write and ph.link else set() for ph in prof.phases]
    torus = isinstance(topo, Torus)
    lead = [ph.ports[0] // 2 if torus and ph.ports else 0 for ph in prof.phases]
    inphase = [0] * n_ph
    held = [0.0] * n_ph                     # seconds a phase held at least one chunk
    since = [0.0] * n_ph                    # when it last went from none to some

    def occupy(pi, t, d):
        if d > 0 and inphase[pi] == 0:
            since[pi] = t
        inphase[pi] += d
        if d < 0 and inphase[pi] == 0:
            held[pi] += t - since[pi]

    waiting = [[] for _ in range(n_ph)]
    done = [0.0] * n_chunks
    per_fsm = ep.n_fsms if gang else n_chunks
    # (time, seq, kind, chunk): kind 0 the chunk is ready for its phase (for phase 0 of an RTL engine: it may
    # be dispatched), 1 it leaves the phase, 2 its STOREs are done, 3 its FSM starts its first phase
    events = [(0.0, c, 0, c) for c in range(min(n_chunks, 2 * per_fsm))]
    heapq.heapify(events)
    seq = n_chunks
    phase_of = [0] * n_chunks
    fsm_free = [0.0 if c < per_fsm else None for c in range(n_chunks)]    # when its FSM may take it
    loaded = [None] * n_chunks              # (first LOAD's start, last LOAD's end) once dispatched
    stored = [0.0] * n_chunks               # when its STOREs end
    # the RTL's terminal partition: chunks whose STOREs are still streaming
    terminal = max(1, max(n_ph + 1, ep.sram_bytes // chunk) - sum(slots)) if gang else n_chunks
    in_terminal, terminal_wait = 0, []

    def enter(c, pi, t):
        nonlocal seq
        dem, fixed, lat, msgs = plans[pi]
        size = sizes[c]
        end = t

        def hold(r, spb):
            if r not in msgs:
                return spb * size
            frac, n = msgs[r]
            return max(spb * size, (frac * size / system.link_bw + n * ep.message_cycles) / system.clock_hz)

        post = [(r, hold(r, spb)) for r, spb in dem.items() if r in serial_after[pi]]
        need = [(r, hold(r, spb)) for r, spb in dem.items() if r not in serial_after[pi]] + list(fixed.items())
        for r, _ in need + post:
            if r not in lines:
                lines[r] = _Timeline()
        if gang:
            # the chunk streams through its resources together: one start at which every one has room, per
            # torus dimension the phase sends on (a phase on two dimensions runs two rings side by side; the
            # memory, ALU and FSM stream with the first)
            starts = {}
            t0 = t
            if pi == 0:
                # its LOADs were booked when it was dispatched: the chunk streams on from the time its data
                # starts to arrive
                need = [(r, d) for r, d in need if r not in ("mem_rd", "mem")]
                t0, end = max(t, loaded[c][0]), max(end, loaded[c][1])
            for g, members in _gangs(need, lead[pi], torus).items():
                s = t0
                while True:
                    s2 = max((lines[r].earliest(s, d) for r, d in members), default=s)
                    if s2 == s:
                        break
                    s = s2
                starts.update((r, s) for r, _ in members)
        for r, d in need:
            s = starts[r] if gang else lines[r].earliest(t, d)
            lines[r].reserve(s, d)
            busy[r] = busy.get(r, 0.0) + d
            end = max(end, s + d)
        end += lat
        if gang and need:
            end = max(end, min(starts.values()) + fsm_time[pi] * size / chunk)
        leave = end
        for r, d in post:
            s = lines[r].earliest(end, d)
            lines[r].reserve(s, d)
            busy[r] = busy.get(r, 0.0) + d
            end = s + d
        stored[c] = end
        if not (gang and pi == 0):          # a dispatched chunk holds its place in phase 0 already
            occupy(pi, t, 1)
        seq += 1
        # the RTL's chunk leaves its last phase's partition for the terminal one after its last step, its
        # STOREs still streaming
        heapq.heappush(events, (leave if gang and pi == n_ph - 1 else end, seq, 1, c))

    def leave_phase(pi, t):
        occupy(pi, t, -1)
        if waiting[pi]:
            (dispatch if gang and pi == 0 else enter)(waiting[pi].pop(0), pi, t)

    def dispatch(c, pi, t):
        # the RTL: the chunk takes its place in phase 0's partition and its LOADs start
        nonlocal seq
        occupy(0, t, 1)
        first, last = t, t
        for r, spb in plans[0][0].items():
            if r in ("mem_rd", "mem"):
                d = spb * sizes[c]
                lines.setdefault(r, _Timeline())
                s = lines[r].earliest(t, d)
                lines[r].reserve(s, d)
                busy[r] = busy.get(r, 0.0) + d
                first, last = max(first, s), max(last, s + d)
        loaded[c] = (first, last)
        if fsm_free[c] is not None:
            seq += 1
            heapq.heappush(events, (max(t, fsm_free[c]), seq, 3, c))

    def to_terminal(c, t):
        # the RTL: the chunk moves to the terminal partition and its FSM takes its next chunk (and the
        # dispatcher queues the one after on that FSM) while its STOREs finish
        nonlocal seq, in_terminal
        leave_phase(n_ph - 1, t)
        in_terminal += 1
        nxt = c + per_fsm
        if nxt < n_chunks:
            fsm_free[nxt] = t
            if loaded[nxt] is not None:
                seq += 1
                heapq.heappush(events, (t, seq, 3, nxt))
            if nxt + per_fsm < n_chunks:
                seq += 1
                heapq.heappush(events, (t, seq, 0, nxt + per_fsm))
        seq += 1
        heapq.heappush(events, (max(t, stored[c]), seq, 2, c))

    while events:
        t, _, kind, c = heapq.heappop(events)
        pi = phase_of[c]
        if kind == 0:
            if inphase[pi] < slots[pi]:
                (dispatch if gang and pi == 0 else enter)(c, pi, t)
            else:
                waiting[pi].append(c)
        elif kind == 3:
            enter(c, 0, t)
        elif kind == 2:                                 # the chunk's STOREs are done: its buffer is free
            in_terminal -= 1
            done[c] = t
            if terminal_wait:
                to_terminal(terminal_wait.pop(0), t)
        elif pi + 1 < n_ph:
            leave_phase(pi, t)
            phase_of[c] = pi + 1
            seq += 1
            heapq.heappush(events, (t, seq, 0, c))
        elif gang:
            if in_terminal < terminal:
                to_terminal(c, t)
            else:
                terminal_wait.append(c)
        else:
            leave_phase(pi, t)
            done[c] = t
    total = max(done) + ep.command_cycles / system.clock_hz
    bound = max((sum(ph.link.get(port, 0.0) for ph in prof.phases) * nbytes / link_capacity(topo, port, system)
                 for port in {p for ph in prof.phases for p in ph.link}), default=0.0)
    return CollectiveResult(total, n_chunks, sent, bound, slots, busy, tuple(held))
