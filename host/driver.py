"""The ACE driver core: rings, windows, communicators, programs, descriptors, completions and counters.

:class:`AceDriver` drives one engine through a transport (:mod:`syncfabric.host.transport`). Every register
address comes from the register map (:func:`~syncfabric.hdl.ace.regs.ace_regmap`) by name; every record
(descriptor, completion, program table entry) is packed with the shared layouts of
:mod:`syncfabric.hdl.common.layouts`. Nothing here repeats an address or a bit position.

Sync/async: the driver's operations are coroutines written once against
:class:`~syncfabric.host.transport.AsyncTransport`. Under cocotb (or any event loop) ``await`` them; a
synchronous :class:`~syncfabric.host.transport.Transport` is adapted automatically, and
:class:`SyncAceDriver` offers the same methods as plain calls (each runs the coroutine to completion with
:func:`~syncfabric.host.transport.run_sync`).

Rings (NIC style, in endpoint memory): the submission ring has ``SQ_SIZE`` slots of ``DESCRIPTOR_BYTES`` and
holds at most ``SQ_SIZE - 1`` descriptors (full when the tail is one behind the head); the driver writes a
descriptor into slot ``tail`` and then the new tail into SQ_TAIL (the doorbell). The engine writes
completions of ``COMPLETION_BYTES`` at CQ_TAIL and never overtakes CQ_HEAD, which the driver advances as it
consumes them. Indices are slot numbers (``0 .. size-1``).
"""

import inspect
from collections import deque

from ..hdl.ace.config import AceConfig
from ..hdl.ace.regs import (ACE_ID, ACE_VERSION, COUNTERS, IRQ_CPL, IRQ_ERROR, IRQ_TIMEOUT, N_PARTITIONS,
                            PHASE_COUNTERS,
                            PORT_COUNTERS, PTAB_ENTRY_WORDS, STALL_CAUSES, ace_regmap)
from ..hdl.common.layouts import (COMPLETION_BYTES, DESCRIPTOR_BYTES, completion_layout, descriptor_layout,
                                  pack_bytes, unpack_bytes)
from ..sim.golden.program import Program
from ..sim.golden.topology import parse as parse_topology
from ..sim.golden.types import Algorithm, Collective, DType, ReduceOp, Status
from .programs import (ImemAllocator, collective_code, comm_dims, entry_words, instruction_words,
                       partition_sizes, program_entry, routing_table, split_weights)
from .transport import AsyncTransport, Transport, as_async, run_sync

__all__ = ["AceDriver", "SyncAceDriver", "AceError", "RingFullError", "WindowInUseError", "status_name"]


class AceError(RuntimeError):
    """The engine is not in the state the driver expects (wrong ID, inconsistent completion ring, ...)."""


class RingFullError(AceError):
    """The submission ring has no free slot."""


class WindowInUseError(AceError):
    """The engine refused to change a memory window: a command in flight has a buffer in it."""


def status_name(code):
    """Name of completion status ``code`` (``"OK"``, ``"OUT_OF_WINDOW"``, ... or ``"UNKNOWN_<n>"``)."""
    try:
        return Status(code).name
    except ValueError:
        return f"UNKNOWN_{code}"


def _pow2(n):
    return isinstance(n, int) and n >= 2 and n & (n - 1) == 0


#: Descriptor fields given as names (or enum members) and the enum that encodes them.
_CODED = {"collective": Collective, "algorithm": Algorithm, "dtype": DType, "op": ReduceOp}


class AceDriver:
    """Driver of one ACE engine configured by ``cfg`` (default ``AceConfig()``) behind ``transport`` (an
    :class:`~syncfabric.host.transport.AsyncTransport`, or a synchronous Transport that is adapted).

    Typical use::

        drv = AceDriver(transport, cfg)
        await drv.check_config()
        await drv.configure(sq_base, 64, cq_base, 64)
        await drv.add_window(0, base, size)
        await drv.configure_comm(0, rank, nranks, {"allreduce": program}, "ring:8")
        idx = await drv.post({"collective": "allreduce", "dtype": "fp32", "op": "sum", "count": n,
                              "src": src, "dst": dst, "cookie": 1})
        [cpl] = await drv.wait(1, timeout_cycles=10**6)
    """

    def __init__(self, transport, cfg=None):
        self.transport = as_async(transport)
        self.cfg = AceConfig() if cfg is None else cfg
        self.regmap = ace_regmap(self.cfg)
        #: Chunk buffers the partitions share (None: all ``cfg.n_buffers``); fewer models a smaller SRAM.
        self.buffer_budget = None
        #: The partition heuristic (:data:`~syncfabric.sim.golden.partitions.SPLITS`): ``"residence"`` or the
        #: ACE paper's ``"ace"``.
        self.sram_split = "residence"
        self.reset_state()

    def reset_state(self):
        """Forget everything the driver knows about the engine (rings, loaded programs, windows) without
        touching it, e.g. after the engine was reset."""
        self.sq = None              # dict(base, size, tail, head) once configured
        self.cq = None              # dict(base, size, head, seq)
        self._pending = deque()     # completions read by wait() beyond the ones it returned
        self.imem = ImemAllocator(self.cfg.imem_words)
        self.ptab = {}              # PTAB index -> (comm, Collective)
        self.loaded = {}            # (comm, Collective, root) -> dict(program, topology, ptab, imem)
        self.comms = {}             # comm -> dict(rank, size, topology)

    # -- registers by name ----------------------------------------------------------------------------------
    async def read(self, name, index=None):
        """Value of register ``name`` (``index`` for arrays); a 64-bit register reads its low word first,
        which captures the high word of a running counter (see :mod:`syncfabric.hdl.common.csr`)."""
        reg = self.regmap.register(name, index)
        value = 0
        for half, addr in enumerate(reg.addresses):
            value |= await self.transport.read_reg(addr) << (32 * half)
        return value

    async def write(self, name, value, index=None):
        """Write ``value`` to register ``name`` (low word first for 64-bit registers)."""
        reg = self.regmap.register(name, index)
        value = int(value)
        if not 0 <= value < (1 << reg.width):
            raise ValueError(f"{reg.label}: {value:#x} does not fit {reg.width} bits")
        for half, addr in enumerate(reg.addresses):
            await self.transport.write_reg(addr, (value >> (32 * half)) & 0xFFFFFFFF)

    async def read_fields(self, name, index=None):
        """``{field: value}`` of register ``name``."""
        return self.regmap.decode(name, await self.read(name, index), index)

    async def write_fields(self, name, index=None, **fields):
        """Write register ``name`` with the given fields (the others 0)."""
        await self.write(name, self.regmap.encode(name, index, **fields), index)

    async def _write_window(self, name, first_word, words):
        for i, w in enumerate(words):
            await self.transport.write_reg(self.regmap.addr(name, first_word + i), w)

    async def read_window(self, name, first_word, n):
        """``n`` 32-bit words of window ``name`` from word ``first_word``."""
        return [await self.transport.read_reg(self.regmap.addr(name, first_word + i)) for i in range(n)]

    # -- bring-up -------------------------------------------------------------------------------------------
    async def check_config(self):
        """Check ID, VERSION and the configuration registers against ``cfg``; raise :class:`AceError` listing
        the differences. Returns the decoded CFG registers."""
        ident = await self.read("ID")
        if ident != ACE_ID:
            raise AceError(f"ID register reads {ident:#010x}, not an ACE engine ({ACE_ID:#010x})")
        version = await self.read("VERSION")
        if version != ACE_VERSION:
            raise AceError(f"register map version {version}, this driver speaks {ACE_VERSION}")
        found, errors = {}, []
        for name in ("CFG0", "CFG1", "CFG2", "CFG3", "IMEM_WORDS"):
            value = await self.read(name)
            expect = self.regmap.register(name).init
            found[name] = self.regmap.decode(name, value) if self.regmap.register(name).fields else value
            if value != expect:
                errors.append(f"{name} reads {value:#x}, cfg gives {expect:#x}")
        if errors:
            raise AceError("the engine is not configured like the driver's AceConfig: " + "; ".join(errors))
        return found

    async def configure(self, sq_base, sq_entries, cq_base, cq_entries, *, irq=True):
        """Set up the submission and completion rings in endpoint memory (zeroed here) and enable the engine
        (and its interrupt if ``irq``). Ring sizes are powers of two >= 2; bases are aligned to their record
        size. The driver continues from the engine's current SQ_HEAD / CQ_TAIL, so it can reconfigure an
        idle engine."""
        for what, n in (("sq_entries", sq_entries), ("cq_entries", cq_entries)):
            if not _pow2(n):
                raise ValueError(f"{what}={n!r} must be a power of two >= 2")
        if sq_base % DESCRIPTOR_BYTES or cq_base % COMPLETION_BYTES:
            raise ValueError(f"ring bases must be aligned to their records: sq_base {sq_base:#x} to "
                             f"{DESCRIPTOR_BYTES}, cq_base {cq_base:#x} to {COMPLETION_BYTES}")
        await self.write("CTRL", 0)
        await self.transport.write_mem(sq_base, bytes(sq_entries * DESCRIPTOR_BYTES))
        await self.transport.write_mem(cq_base, bytes(cq_entries * COMPLETION_BYTES))
        await self.write("SQ_BASE", sq_base)
        await self.write("SQ_SIZE", sq_entries)
        await self.write("CQ_BASE", cq_base)
        await self.write("CQ_SIZE", cq_entries)
        head = await self.read("SQ_HEAD") & (sq_entries - 1)
        tail = await self.read("CQ_TAIL") & (cq_entries - 1)
        await self.write("SQ_TAIL", head)        # an empty ring: tail = head
        await self.write("CQ_HEAD", tail)        # nothing unconsumed
        await self.write("IRQ", IRQ_CPL | IRQ_ERROR)
        self.sq = {"base": sq_base, "size": sq_entries, "tail": head, "head": head}
        self.cq = {"base": cq_base, "size": cq_entries, "head": tail, "seq": None}
        self._pending.clear()
        await self.write_fields("CTRL", enable=1, irq_enable=int(bool(irq)))

    async def disable(self):
        """Stop fetching descriptors (CTRL.enable = 0); commands in flight finish."""
        await self.write("CTRL", 0)

    # -- watchdog and abort ---------------------------------------------------------------------------------
    async def set_watchdog(self, cycles):
        """Cycles the engine may hold work without a transfer on any port before it sets STATUS.hung and
        raises IRQ.timeout (0 = off)."""
        if isinstance(cycles, bool) or not isinstance(cycles, int) or not 0 <= cycles < 1 << 32:
            raise ValueError(f"watchdog cycles {cycles!r}: expected a whole number 0..{(1 << 32) - 1} (0 = off)")
        await self.write("WATCHDOG", cycles)

    async def set_step_timeout(self, cycles):
        """Cycles a step may wait for its grant before the engine gives it up and completes the command
        TIMEOUT; a link port whose link takes no flit for as long is declared down (0 = off)."""
        if isinstance(cycles, bool) or not isinstance(cycles, int) or not 0 <= cycles < 1 << 32:
            raise ValueError(f"step timeout cycles {cycles!r}: expected a whole number 0..{(1 << 32) - 1} "
                             f"(0 = off)")
        await self.write("STEP_TIMEOUT", cycles)

    async def links_down(self):
        """The link ports the step timeout declared down (LINK_DOWN), as a sorted list of port numbers."""
        bits = (await self.read_fields("LINK_DOWN"))["ports"]
        return [k for k in range(self.cfg.n_ports) if bits >> k & 1]

    async def hung(self):
        """True when the engine's watchdog has fired (STATUS.hung) and no abort has cleared it since."""
        return bool((await self.read_fields("STATUS"))["hung"])

    async def abort_hold(self):
        """First step of an abort: set CTRL.abort (fetching off, interrupt off). The engine closes its AXI port,
        then holds everything but its registers in reset; see :meth:`abort`."""
        await self.write_fields("CTRL", enable=0, irq_enable=0, abort=1)

    async def wait_quiet(self, timeout_cycles=100_000):
        """Wait until the aborted engine is held with nothing owed on its AXI port (STATUS.quiet)."""
        start = await self.transport.cycles()
        while not (await self.read_fields("STATUS"))["quiet"]:
            if await self.transport.cycles() - start > timeout_cycles:
                raise AceError(f"the engine did not become quiet within {timeout_cycles} cycles of the abort "
                               f"(its memory does not answer)")

    async def abort_release(self, *, irq=True):
        """Last step of an abort: restart both rings at slot 0 (the engine's SQ_HEAD and CQ_TAIL restarted at
        0), clear the interrupt causes and let the engine out of reset, enabled. Loaded programs, windows and
        communicators stay as they were; the driver forgets the completions it had not handed out."""
        if not (await self.read_fields("STATUS"))["quiet"]:
            raise AceError("abort_release before the engine is quiet (call abort_hold, then wait_quiet)")
        self._require_rings()
        await self.write("SQ_TAIL", 0)
        await self.write("CQ_HEAD", 0)
        await self.write("IRQ", IRQ_CPL | IRQ_ERROR | IRQ_TIMEOUT)
        self.sq.update(tail=0, head=0)
        self.cq.update(head=0, seq=None)
        self._pending.clear()
        await self.write_fields("CTRL", enable=1, irq_enable=int(bool(irq)), abort=0)
        if (await self.read_fields("STATUS"))["aborting"]:
            raise AceError("the engine did not leave the abort after CTRL.abort was cleared")

    async def abort(self, drain_cycles=64, timeout_cycles=100_000):
        """Abort this engine alone: every command in flight is dropped (no completion is written for it) and
        the engine is left empty and enabled. ``drain_cycles``: how long to keep it held after it is quiet,
        so that flits and credits already on its links arrive and are dropped (at least the links' latency).
        An engine joined to others by links is aborted together with them (``System.reset``): a peer that
        keeps running would send into the emptied landing buffers with stale credits."""
        await self.abort_hold()
        await self.wait_quiet(timeout_cycles)
        start = await self.transport.cycles()
        while await self.transport.cycles() - start < drain_cycles:
            await self.read("STATUS")
        await self.abort_release()

    #: Times :meth:`add_window` writes a window again after the engine refused a write (a descriptor being
    #: checked locks every window for a few cycles).
    WINDOW_ATTEMPTS = 8

    async def add_window(self, index, base, size, comms=None):
        """Register memory window ``index``: descriptors may only name buffers inside a window (``size`` 0
        disables it) open to their communicator (``comms``: the engine communicator ids that may use it;
        None: every one).

        The engine refuses writes to a window while a command in flight has a buffer in it, or while a
        descriptor is checked against the windows (a few cycles); ``WIN_REFUSED`` counts them. The window is
        written again when a write was refused, up to :attr:`WINDOW_ATTEMPTS` times; then
        :class:`WindowInUseError`."""
        count = self.regmap.count("WIN_BASE")
        if not 0 <= index < count:
            raise ValueError(f"window {index} out of range (the engine has {count})")
        n_comms = self.regmap.count("COMM_CFG")
        if comms is None:
            mask = (1 << n_comms) - 1
        else:
            comms = list(comms)
            bad = [c for c in comms if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < n_comms]
            if bad:
                raise ValueError(f"window {index}: communicator ids {bad} out of range (the engine has {n_comms})")
            mask = sum(1 << c for c in set(comms))
        for _ in range(self.WINDOW_ATTEMPTS):
            refused = await self.read("WIN_REFUSED")
            await self.write("WIN_SIZE", 0, index)     # never expose a half-written window
            await self.write("WIN_BASE", base, index)
            await self.write("WIN_COMMS", mask, index)
            await self.write("WIN_SIZE", size, index)
            if await self.read("WIN_REFUSED") == refused:
                return
        raise WindowInUseError(f"window {index}: the engine refused {self.WINDOW_ATTEMPTS} times to change it "
                               f"(a command in flight has a buffer in it; wait for it first)")

    def spill_record_bytes(self):
        """Bytes of one record of the spill window (one message of the largest size)."""
        return self.cfg.max_message_beats * self.cfg.beat_bytes

    async def set_spill_window(self, base, entries):
        """Give the deposit unit its spill window: ``entries`` records of :meth:`spill_record_bytes` from byte
        address ``base`` (0 entries: early deposits of an asynchronous all-to-all wait in the landing buffers
        only, and their senders wait when those are full). The window must be memory nothing else uses."""
        if not 0 <= entries <= self.cfg.spill_entries:
            raise ValueError(f"spill window of {entries} records: the engine's spill table has "
                             f"{self.cfg.spill_entries}")
        if base < 0 or base % self.cfg.beat_bytes:
            raise ValueError(f"spill window base {base:#x} must be a non-negative multiple of "
                             f"{self.cfg.beat_bytes} (the beat width)")
        await self.write("SPILL_ENTRIES", 0)        # never expose a half-written window
        await self.write("SPILL_BASE", base)
        await self.write("SPILL_ENTRIES", entries)

    async def set_partitions(self, sizes):
        """Write the PART registers (``N_PARTITIONS`` values: phases 0..3, then terminal)."""
        sizes = tuple(sizes)
        if len(sizes) != N_PARTITIONS or sum(sizes) > self.cfg.n_buffers:
            raise ValueError(f"need {N_PARTITIONS} partition sizes adding up to at most {self.cfg.n_buffers}, "
                             f"got {sizes}")
        for i, n in enumerate(sizes):
            await self.write("PART", n, i)

    # -- communicators and programs -------------------------------------------------------------------------
    async def configure_comm(self, comm, rank, size, programs, topology):
        """Make this endpoint rank ``rank`` of communicator ``comm`` (``size`` ranks on ``topology``) and load
        its programs: ``programs`` maps a collective (name or :class:`Collective`) to this rank's golden
        :class:`~syncfabric.sim.golden.program.Program`, or for broadcast and reduce to a list of programs,
        one per root (the engine picks the entry whose root is the descriptor's).

        Replaces whatever the communicator had loaded: writes the instructions into free instruction memory,
        a program table entry per program, the routing table, COMM_DIMS and COMM_CFG, then the SRAM
        partitions from the heuristic over every program loaded on any communicator. Returns
        ``{Collective: {"ptab": index, "imem": offset, "words": n}}`` (for broadcast and reduce one such dict
        per root: ``{Collective: {root: {...}}}``).
        """
        cfg = self.cfg
        topo = parse_topology(topology)
        if not 0 <= comm < cfg.n_comms:
            raise ValueError(f"communicator {comm} out of range (the engine has {cfg.n_comms})")
        if topo.n_endpoints != size:
            raise ValueError(f"{topo.spec} has {topo.n_endpoints} ranks, not {size}")
        if not 1 <= size <= cfg.max_ranks:
            raise ValueError(f"{size} ranks; the engine's routing table holds {cfg.max_ranks}")
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} out of range for {size} ranks")
        progs = {}
        for key, value in programs.items():
            coll = Collective.parse(key)
            many = isinstance(value, (list, tuple))
            if many and coll not in (Collective.BROADCAST, Collective.REDUCE):
                raise ValueError(f"programs[{key!r}]: only broadcast and reduce take several programs (one per "
                                 f"root)")
            for prog in (value if many else [value]):
                if not isinstance(prog, Program):
                    raise TypeError(f"programs[{key!r}] is not a Program: {prog!r}")
                if collective_code(prog) != coll:
                    raise ValueError(f"programs[{key!r}] is a {prog.collective} program")
                if (prog.rank, prog.nranks) != (rank, size):
                    raise ValueError(f"programs[{key!r}] is for rank {prog.rank} of {prog.nranks}, not {rank} of "
                                     f"{size}")
                root = prog.root or 0
                if (coll, root) in progs:
                    raise ValueError(f"programs[{key!r}] has two programs for root {root}")
                program_entry(prog, 0, comm)     # fields that cannot fit fail here, before anything is written
                progs[(coll, root)] = prog

        await self.write_fields("COMM_CFG", comm, enable=0)      # no descriptor may use a half-loaded comm
        await self._unload_comm(comm)
        placed = {}
        for (coll, root), prog in progs.items():
            words = instruction_words(prog)
            slot = self._free_ptab()
            offset = self.imem.alloc(len(words), owner=(comm, coll.name, root))
            self.ptab[slot] = (comm, coll)
            self.loaded[(comm, coll, root)] = {"program": prog, "topology": topo, "ptab": slot, "imem": offset,
                                               "words": len(words)}
            for i, w in enumerate(words):
                await self._write_window("IMEM", 2 * (offset + i), [w & 0xFFFFFFFF, w >> 32])
            await self._write_ptab(slot, entry_words(program_entry(prog, offset, comm)))
            info = {"ptab": slot, "imem": offset, "words": len(words)}
            if coll in (Collective.BROADCAST, Collective.REDUCE):
                placed.setdefault(coll, {})[root] = info
            else:
                placed[coll] = info
        route = routing_table(topo, rank, cfg.max_ranks)
        await self._write_window("ROUTE", comm * cfg.max_ranks, route)
        await self.write_fields("COMM_DIMS", comm, **comm_dims(topo))
        self.comms[comm] = {"rank": rank, "size": size, "topology": topo}
        await self.write_fields("COMM_CFG", comm, rank=rank, size=size, enable=1)
        if self.loaded:
            await self.set_partitions(self.partitions())
        return placed

    def partitions(self):
        """The PART values the heuristic gives for every loaded program
        (:func:`~syncfabric.sim.golden.partitions.partition_sizes`: buffers in proportion to the time a chunk
        of the configuration's ``chunk_beats`` stays in each phase; ``sram_split = "ace"``: the ACE paper's
        heuristic)."""
        weights = [split_weights(e["program"], e["topology"], self.cfg.chunk_beats, self.sram_split)
                   for e in self.loaded.values()]
        budget = self.cfg.n_buffers if self.buffer_budget is None else self.buffer_budget
        if not 1 <= budget <= self.cfg.n_buffers:
            raise ValueError(f"buffer budget {budget} out of range (the engine has {self.cfg.n_buffers} buffers)")
        return partition_sizes(weights, budget)

    def _free_ptab(self):
        for i in range(self.cfg.n_programs):
            if i not in self.ptab:
                return i
        raise ValueError(f"the program table is full ({self.cfg.n_programs} entries: "
                         + ", ".join(f"comm {c} {k.name.lower()}" for c, k in self.ptab.values()) + ")")

    async def _write_ptab(self, slot, words):
        # valid (bit 0 of word 0) goes last, so the engine never sees a half-written entry as valid
        base = slot * PTAB_ENTRY_WORDS
        await self._write_window("PTAB", base, [0])
        await self._write_window("PTAB", base + 1, words[1:])
        await self._write_window("PTAB", base, words[:1])

    async def _unload_comm(self, comm):
        for key in [k for k in self.loaded if k[0] == comm]:
            entry = self.loaded.pop(key)
            await self._write_ptab(entry["ptab"], [0] * PTAB_ENTRY_WORDS)
            del self.ptab[entry["ptab"]]
            if entry["words"]:          # an empty program takes no instruction memory
                self.imem.free(entry["imem"])
        self.comms.pop(comm, None)

    # -- commands -------------------------------------------------------------------------------------------
    def _require_rings(self):
        if self.sq is None:
            raise AceError("the rings are not configured: call configure() first")

    @staticmethod
    def encode_descriptor(desc):
        """The ``DESCRIPTOR_BYTES`` bytes of descriptor ``desc`` (a dict of descriptor_layout fields; the
        collective, algorithm, dtype and op may be names, e.g. ``"allreduce"``, ``"fp16"``, ``"sum"``)."""
        fields = dict(desc)
        for name, enum in _CODED.items():
            if name in fields:
                fields[name] = int(enum.parse(fields[name])) if isinstance(fields[name], str) else fields[name]
        return pack_bytes(descriptor_layout(), fields, DESCRIPTOR_BYTES)

    async def post(self, desc):
        """Write descriptor ``desc`` (see :meth:`encode_descriptor`) into the next submission slot and ring
        the doorbell. Returns the slot index (the completion's ``sq_index``); raises
        :class:`RingFullError` when the engine has not consumed enough of the ring."""
        self._require_rings()
        sq = self.sq
        raw = self.encode_descriptor(desc)
        nxt = (sq["tail"] + 1) % sq["size"]
        if nxt == sq["head"]:
            sq["head"] = await self.read("SQ_HEAD") & (sq["size"] - 1)
            if nxt == sq["head"]:
                raise RingFullError(f"submission ring full ({sq['size'] - 1} descriptors waiting)")
        index = sq["tail"]
        await self.transport.write_mem(sq["base"] + index * DESCRIPTOR_BYTES, raw)
        sq["tail"] = nxt
        await self.write("SQ_TAIL", nxt)
        return index

    async def poll(self):
        """Completions the engine has written since the last call (oldest first), consumed: CQ_HEAD moves
        past them. Each is a dict of completion_layout fields plus ``status_name``."""
        self._require_rings()
        out = list(self._pending)
        self._pending.clear()
        cq = self.cq
        tail = await self.read("CQ_TAIL") & (cq["size"] - 1)
        if tail == cq["head"]:
            return out
        while cq["head"] != tail:
            raw = await self.transport.read_mem(cq["base"] + cq["head"] * COMPLETION_BYTES, COMPLETION_BYTES)
            cpl = unpack_bytes(completion_layout(), raw)
            if cpl["seq"] == 0 or (cq["seq"] is not None and cpl["seq"] != (cq["seq"] + 1) & 0xFFFFFFFF):
                raise AceError(f"completion slot {cq['head']} has seq {cpl['seq']}, expected "
                               f"{'non-zero' if cq['seq'] is None else cq['seq'] + 1}: the ring is out of sync")
            cq["seq"] = cpl["seq"]
            cpl["status_name"] = status_name(cpl["status"])
            out.append(cpl)
            cq["head"] = (cq["head"] + 1) % cq["size"]
        await self.write("CQ_HEAD", cq["head"])
        return out

    async def wait(self, n, timeout_cycles=None):
        """The next ``n`` completions (oldest first), waiting on the interrupt; raises TimeoutError when they
        do not arrive within ``timeout_cycles`` engine cycles (None: wait forever)."""
        self._require_rings()
        got = []
        start = await self.transport.cycles()
        while True:
            got += await self.poll()
            if len(got) >= n:
                self._pending.extend(got[n:])
                return got[:n]
            # clear, then poll again: a completion landing between the poll and the clear is not lost
            await self.write("IRQ", IRQ_CPL | IRQ_ERROR)
            got += await self.poll()
            if len(got) >= n:
                self._pending.extend(got[n:])
                return got[:n]
            left = None
            if timeout_cycles is not None:
                left = timeout_cycles - (await self.transport.cycles() - start)
                if left <= 0:
                    self._pending.extend(got)
                    raise TimeoutError(f"{len(got)} of {n} completions after {timeout_cycles} cycles "
                                       f"(SQ head {await self.read('SQ_HEAD')}, tail {self.sq['tail']})")
            await self.transport.wait_irq(left)

    # -- counters -------------------------------------------------------------------------------------------
    async def counters(self):
        """Every counter register: ``{name: value}`` for the engine-wide ones, ``{name: [per port]}`` for the
        port counters and the per-phase counters and ``{"STALL": {cause: cycles}}``."""
        out = {name: await self.read(name) for name in COUNTERS}
        for name in PORT_COUNTERS + PHASE_COUNTERS:
            out[name] = [await self.read(name, p) for p in range(self.regmap.count(name))]
        out["STALL"] = {cause: await self.read("STALL", i) for i, cause in enumerate(STALL_CAUSES)}
        return out

    async def status(self):
        """The STATUS register's fields."""
        return await self.read_fields("STATUS")


def _sync_method(name, fn):
    def method(self, *args, **kwargs):
        return run_sync(getattr(self.driver, name)(*args, **kwargs))
    method.__name__ = name
    method.__qualname__ = f"SyncAceDriver.{name}"
    method.__doc__ = fn.__doc__
    method.__signature__ = inspect.signature(fn)
    return method


class SyncAceDriver:
    """:class:`AceDriver` for a synchronous :class:`~syncfabric.host.transport.Transport`: the same methods,
    returning their results directly (``drv.post(desc)`` instead of ``await drv.post(desc)``). ``driver`` is
    the underlying :class:`AceDriver`; its attributes (``cfg``, ``regmap``, ``reset_state``, ...) are
    reachable here too, and its settings (``buffer_budget``, ``sram_split``) are set through this object."""

    def __init__(self, transport, cfg=None):
        if isinstance(transport, AsyncTransport) or not isinstance(transport, Transport):
            raise TypeError(f"SyncAceDriver needs a synchronous Transport, got {transport!r}; await an "
                            f"AceDriver instead")
        self.driver = AceDriver(transport, cfg)

    def __getattr__(self, name):
        if name == "driver":        # not set yet (a failed __init__): do not recurse
            raise AttributeError(name)
        return getattr(self.driver, name)

    def __setattr__(self, name, value):
        # the driver's settings (``buffer_budget``, ``sram_split``, ...: its instance attributes) set here reach
        # the driver; anything else (a method wrapped by a test, say) stays on this object
        if name != "driver" and "driver" in self.__dict__ and name in vars(self.driver):
            setattr(self.driver, name, value)
        else:
            object.__setattr__(self, name, value)


for _name, _fn in inspect.getmembers(AceDriver, inspect.iscoroutinefunction):
    if not _name.startswith("_"):
        setattr(SyncAceDriver, _name, _sync_method(_name, _fn))
del _name, _fn
