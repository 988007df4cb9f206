"""The ACE engine's register map: the one definition the RTL register bank, the host driver and the docs use.

:func:`ace_regmap` builds the map for an :class:`~syncfabric.hdl.ace.config.AceConfig` (array lengths, window
sizes and the read-only configuration words depend on it). ``python -m syncfabric.hdl.ace.regs`` prints the
Markdown table for the default configuration; ``docs/registers.md`` is that output (a test keeps it current).

Layout (byte addresses, 32-bit words):

* ``0x000`` identification and configuration (read-only), ``0x020`` control, status and interrupts;
* ``0x030`` submission ring, ``0x050`` completion ring, ``0x070`` chunk size, ``0x080`` SRAM partitions;
* ``0x100`` memory windows, ``0x200`` communicators, ``0x400``-``0x65f`` performance counters;
* windows: ``0x1000`` program table, ``0x4000`` routing table, ``0x8000`` instruction memory.
"""

import functools

from ..common.layouts import MAX_PHASES, program_entry_layout
from ..common.regmap import Field, Register, RegisterArray, RegisterMap, RegisterMapError, Window
from .config import AceConfig

__all__ = ["ace_regmap", "ACE_ID", "ACE_VERSION", "MAP_SIZE", "STALL_CAUSES", "N_PARTITIONS", "TERMINAL_PARTITION",
           "PTAB_BASE", "PTAB_ENTRY_WORDS", "ROUTE_BASE", "ROUTE_VALID", "IMEM_BASE", "COUNTERS", "PORT_COUNTERS",
           "PHASE_COUNTERS", "N_DIMS", "IRQ_CPL", "IRQ_ERROR", "IRQ_TIMEOUT", "TX_LOOKAHEAD_DEFAULT", "REPLAY_TIMEOUT_DEFAULT", "route_index", "ptab_addr", "imem_addr", "registers_markdown"]

#: Value of the ID register: ``"ACE1"`` in ASCII.
ACE_ID = 0x41434531
#: Value of the VERSION register (bump it when the map changes incompatibly).
ACE_VERSION = 1
#: Bytes of register space (a 16-bit CSR address).
MAP_SIZE = 0x10000

#: Why an FSM's ready step waits, in the order of the STALL counter array.
STALL_CAUSES = ("port_busy", "credits", "landing_empty", "dma_busy", "partition_full", "alu_busy",
                "queue_full", "cpl_ring_full")
#: PART registers: one per program phase, then the terminal partition (drained by the RX DMA).
N_PARTITIONS = MAX_PHASES + 1
TERMINAL_PARTITION = MAX_PHASES

#: Program table window: entry ``i`` is ``PTAB_ENTRY_WORDS`` words at ``PTAB_BASE + 4*PTAB_ENTRY_WORDS*i``,
#: holding the bits of :func:`~syncfabric.hdl.common.layouts.program_entry_layout` little-endian.
PTAB_BASE = 0x1000
PTAB_ENTRY_WORDS = 8
#: Routing table window: word ``comm*max_ranks + rank`` is ``ROUTE_VALID | port``.
ROUTE_BASE = 0x4000
ROUTE_VALID = 1 << 3
#: Instruction memory window: 64-bit word ``i`` is two 32-bit words, low half at ``IMEM_BASE + 8*i``.
IMEM_BASE = 0x8000

#: Dimensions described by a COMM_DIMS register.
N_DIMS = 3

#: Reset value of TX_LOOKAHEAD (flits).
TX_LOOKAHEAD_DEFAULT = 16
#: Reset value of REPLAY_TIMEOUT (cycles): above the round trip of a 500-cycle link at 1/8 flit per cycle.
REPLAY_TIMEOUT_DEFAULT = 4096

#: Bits of the IRQ register.
IRQ_CPL = 1 << 0
IRQ_ERROR = 1 << 1
IRQ_TIMEOUT = 1 << 2

#: Engine-wide counters (read-only, in address order) and the per-port counters (arrays indexed by port).
COUNTERS = ("CYCLES", "PAYLOAD_RD_BYTES", "PAYLOAD_WR_BYTES", "DESC_RD_BYTES", "CPL_WR_BYTES", "CMDS_OK",
            "CMDS_ERR", "ALU_BEATS", "FSM_BUSY", "DEPOSITS", "SPILLS", "SPILL_BYTES", "STEPS", "STEP_GAP")
PORT_COUNTERS = ("TX_FLITS", "TX_BUSY", "TX_STALL", "RX_FLITS", "RX_CRC_ERRS", "TX_REPLAYS", "TX_RESENT",
                 "RX_NAKS")
#: Counters per program phase (arrays indexed by phase, ``MAX_PHASES`` long): link use phase by phase.
PHASE_COUNTERS = ("PHASE_FLITS", "PHASE_BUSY")
PHASE_COUNTERS_BASE = 0x640

_COUNTER_DOCS = {
    "CYCLES": (64, "clock cycles since reset"),
    "PAYLOAD_RD_BYTES": (64, "payload bytes read from NPU memory by the TX DMA (LOAD)"),
    "PAYLOAD_WR_BYTES": (64, "payload bytes written to NPU memory by the RX DMA (STORE)"),
    "DESC_RD_BYTES": (64, "descriptor bytes fetched from the submission ring"),
    "CPL_WR_BYTES": (64, "completion bytes written to the completion ring"),
    "CMDS_OK": (32, "commands completed with status OK"),
    "CMDS_ERR": (32, "commands completed with an error status (rejected or faulted)"),
    "ALU_BEATS": (64, "beats reduced by the ALU"),
    "FSM_BUSY": (64, "sum over the FSMs of the cycles each had a chunk"),
    "DEPOSITS": (32, "deposits (PUT messages) written to their command's output by the deposit unit"),
    "SPILLS": (32, "deposits spilled to the spill window because they came early and their landing channel "
                   "was full"),
    "SPILL_BYTES": (64, "payload bytes written to the spill window"),
    "STEPS": (64, "program steps issued by the FSMs (one grant each, empty LOAD/STORE steps included)"),
    "STEP_GAP": (64, "sum over the FSMs of the cycles each held a chunk with no step to issue and none in "
                     "flight (waiting for the step decoder, or loading a phase's bounds; not the cycles a "
                     "chunk waited for partition room, which STALL counts)"),
}
_PORT_COUNTER_DOCS = {
    "TX_FLITS": "flits sent",
    "TX_BUSY": "cycles the output port was sending a packet",
    "TX_STALL": "cycles a packet waited for the link (ready low) or for credits",
    "RX_FLITS": "flits received",
    "RX_CRC_ERRS": "packets received with a bad CRC",
    "TX_REPLAYS": "link retransmission: times the port went back to its oldest unacknowledged packet (on a "
                  "NAK or REPLAY_TIMEOUT); 0 without retransmission (CFG3.replay_log2 = 0)",
    "TX_RESENT": "link retransmission: flits sent again",
    "RX_NAKS": "link retransmission: NAKs sent (a packet failed its CRC or framing, or came after a lost one)",
}


def _cfg_word(reg, cfg, values):
    """``reg``'s value for the configuration fields ``values``, with a clear error if one does not fit."""
    for name, v in values.items():
        f = reg.field(name)
        if v >> f.width:
            raise RegisterMapError(f"{cfg!r}: {name}={v} does not fit {reg.name}.{name} ({f.width} bits)")
    return reg.encode(**values)


def _ro_const(name, offset, fields, doc, cfg, values):
    """A read-only register whose reset value holds the configuration ``values`` in its ``fields``."""
    reg = Register(name, offset, "ro", fields=fields, doc=doc)
    return Register(name, offset, "ro", fields=fields, doc=doc, init=_cfg_word(reg, cfg, values))


def _f(name, msb, lsb, doc=""):
    """A field written as in the datasheet: ``[msb:lsb]``."""
    return Field(name, lsb, msb - lsb + 1, doc)


@functools.lru_cache(maxsize=None)
def ace_regmap(cfg=None):
    """The register map of an engine configured by ``cfg`` (default :class:`AceConfig`\\ ``()``).

    Raises :class:`~syncfabric.hdl.common.regmap.RegisterMapError` when a configuration value does not fit
    its CFG field or the arrays and windows of ``cfg`` do not fit the map without overlapping.
    """
    cfg = AceConfig() if cfg is None else cfg
    beat_log2 = cfg.beat_bytes.bit_length() - 1
    entry_bits = program_entry_layout().size
    if entry_bits > 32 * PTAB_ENTRY_WORDS:    # a layout change must not silently truncate entries
        raise RegisterMapError(f"program_entry_layout() has {entry_bits} bits, more than the "
                               f"{PTAB_ENTRY_WORDS} words of a PTAB entry")
    items = [
        Register("ID", 0x000, "ro", init=ACE_ID, doc='Identifies an ACE engine: "ACE1" in ASCII.'),
        Register("VERSION", 0x004, "ro", init=ACE_VERSION, doc="Register map version."),
        _ro_const("CFG0", 0x008, (
            _f("beat_log2", 3, 0, "log2 of the datapath width in bytes"),
            _f("n_ports", 7, 4, "link ports"),
            _f("n_fsms", 13, 8, "FSMs of the control unit (virtual channels per link)"),
            _f("n_buffers", 21, 14, "chunk buffers of the SRAM"),
            _f("n_cmds", 25, 22, "collectives in flight at once"),
            _f("n_comms", 29, 26, "communicators")),
            "Elaboration parameters (AceConfig).", cfg,
            dict(beat_log2=beat_log2, n_ports=cfg.n_ports, n_fsms=cfg.n_fsms, n_buffers=cfg.n_buffers,
                 n_cmds=cfg.n_cmds, n_comms=cfg.n_comms)),
        _ro_const("CFG1", 0x00C, (
            _f("chunk_beats", 15, 0, "beats of one chunk buffer's payload (largest CHUNK_BEATS)"),
            _f("landing_beats", 31, 16, "beats of each (RX port, FSM) landing buffer")),
            "Elaboration parameters (AceConfig).", cfg,
            dict(chunk_beats=cfg.chunk_beats, landing_beats=cfg.landing_beats)),
        _ro_const("CFG2", 0x010, (
            _f("landing_headers", 7, 0, "message headers per landing buffer"),
            _f("n_windows", 11, 8, "memory windows (WIN_BASE/WIN_SIZE pairs)"),
            _f("n_programs", 19, 12, "program table entries"),
            _f("max_ranks", 29, 20, "routing table entries per communicator (largest group)")),
            "Elaboration parameters (AceConfig).", cfg,
            dict(landing_headers=cfg.landing_headers, n_windows=cfg.n_windows, n_programs=cfg.n_programs,
                 max_ranks=cfg.max_ranks)),
        Register("IMEM_WORDS", 0x014, "ro", init=cfg.imem_words, doc="64-bit words of the instruction memory."),
        _ro_const("CFG3", 0x018, (
            _f("dtypes", 3, 0, "bit d set: the ALUs reduce element type code d (descriptors of other types "
                               "complete with BAD_DTYPE)"),
            _f("replay_log2", 8, 4, "link retransmission: log2 of the flits each TX port keeps for "
                                    "replay (replay_flits); 0 = no retransmission")),
            "Elaboration parameters (AceConfig).", cfg,
            dict(dtypes=cfg.dtype_mask, replay_log2=cfg.replay_flits.bit_length() - 1 if cfg.replay_flits else 0)),

        Register("CTRL", 0x020, "rw", fields=(
            _f("enable", 0, 0, "fetch and run descriptors"),
            _f("irq_enable", 1, 1, "drive the interrupt line while an IRQ bit is set"),
            _f("abort", 2, 2, "abort: while set, the engine closes its AXI port (bursts under way are "
                              "completed, write beats with no strobes) and then holds every unit but this "
                              "register bank in reset: commands, chunks, buffers, credits and counters are "
                              "cleared, the link ports send nothing and drop what arrives; windows, programs, "
                              "routes, communicators and ring registers stay. Clear it once STATUS.quiet is set "
                              "(the engine leaves reset when both hold); SQ_HEAD and CQ_TAIL restart at 0, so set "
                              "SQ_TAIL and CQ_HEAD to 0 before clearing it")),
            doc="Engine control."),
        Register("STATUS", 0x024, "ro", fields=(
            _f("idle", 0, 0, "no command in flight and the submission ring is empty"),
            _f("cmds_active", 7, 4, "commands in flight"),
            _f("chunks_active", 15, 8, "chunks in flight"),
            _f("sram_conflict", 16, 16, "sticky: two units addressed one SRAM bank in the same cycle (never set "
                                        "in a correct engine; testbenches check it)"),
            _f("aborting", 17, 17, "an abort is under way (CTRL.abort was set and the engine has not left "
                                   "reset yet)"),
            _f("quiet", 18, 18, "the aborted engine is held in reset and its AXI port owes and is owed "
                                "nothing"),
            _f("hung", 19, 19, "sticky until an abort: the watchdog saw WATCHDOG cycles with work in the "
                               "engine and no transfer on any of its ports")),
            doc="Engine status."),
        Register("IRQ", 0x028, "w1c", fields=(
            _f("cpl", 0, 0, "a completion was written"),
            _f("error", 1, 1, "a completion with an error status was written"),
            _f("timeout", 2, 2, "the watchdog fired (STATUS.hung)")),
            doc="Interrupt causes; write 1 to clear."),

        Register("SQ_BASE", 0x030, "rw", 64, doc="Byte address of the submission ring in NPU memory."),
        Register("SQ_SIZE", 0x038, "rw",
                 doc="Submission ring entries (a power of two; 0 = ring off). The ring holds SQ_SIZE-1 "
                     "descriptors of 64 bytes."),
        Register("SQ_TAIL", 0x03C, "rw",
                 doc="Doorbell: the driver writes the index of the slot after its last descriptor."),
        Register("SQ_HEAD", 0x040, "ro", doc="Index of the next descriptor the engine fetches."),
        Register("CQ_BASE", 0x050, "rw", 64, doc="Byte address of the completion ring in NPU memory."),
        Register("CQ_SIZE", 0x058, "rw",
                 doc="Completion ring entries (a power of two; 0 = ring off) of 32 bytes."),
        Register("CQ_TAIL", 0x05C, "ro", doc="Index of the slot the engine writes the next completion to."),
        Register("CQ_HEAD", 0x060, "rw",
                 doc="Index of the next completion the driver consumes; the engine never overwrites an "
                     "unconsumed completion (it waits while the ring is full)."),
        Register("CHUNK_BEATS", 0x070, "rw", init=cfg.chunk_beats,
                 doc=f"Effective chunk size in beats (at most CFG1.chunk_beats = {cfg.chunk_beats})."),
        Register("TX_LOOKAHEAD", 0x074, "rw", init=TX_LOOKAHEAD_DEFAULT,
                 doc="Flits an output port may have granted but not yet sent before another message is granted "
                     "to it: messages are scheduled just in time, so the oldest chunk's forward is chosen over a "
                     "younger chunk's start. Large values queue messages early (the order of grants)."),
        Register("FSM_LIMIT", 0x078, "rw", init=cfg.n_fsms,
                 doc=f"FSMs the dispatcher hands chunks to (1..{cfg.n_fsms}; 0 counts as 1), sampled for a "
                     f"command's first chunk when the command reaches the head of the dispatch queue. Every rank "
                     f"of a communicator must use the same value (a chunk's FSM is its virtual channel)."),
        RegisterArray("PART", 0x080, N_PARTITIONS, 4, (Register(
            "PART", 0, "rw", doc="Chunk buffers of SRAM partition i: 0-3 the program phases, 4 the terminal "
                                  "partition. Reset: the split for one-phase programs (half each for "
                                  "phase 0 and the terminal partition)."),),
            prefix="", inits={("PART", 0): cfg.n_buffers - cfg.n_buffers // 2,
                              ("PART", TERMINAL_PARTITION): cfg.n_buffers // 2}),
        Register("SPILL_BASE", 0x098, "rw", 64,
                 doc="Byte address of the deposit unit's spill window in NPU memory: SPILL_ENTRIES records of "
                     f"{cfg.max_message_beats * cfg.beat_bytes} bytes (max_message_beats beats) each."),
        Register("SPILL_ENTRIES", 0x0A0, "rw", fields=(
            _f("entries", 7, 0, f"records of the spill window in use (at most {cfg.spill_entries}; 0 = early "
                                f"deposits wait in the landing buffers only)"),),
                 doc="Size of the spill window in records."),
        Register("WATCHDOG", 0x0A4, "rw",
                 doc="Progress watchdog: cycles an engine with work may go without a transfer on any port "
                     "(AXI address or data, link flit) before it sets STATUS.hung and IRQ.timeout (0 = off). "
                     "A rank waiting for a peer that posts late waits without transfers too: set it above the "
                     "longest such wait."),
        Register("REPLAY_TIMEOUT", 0x0A8, "rw", init=REPLAY_TIMEOUT_DEFAULT, fields=(
            _f("cycles", 15, 0, "0 = the timer is off (a lost last packet is then never sent again)"),),
                 doc="Link retransmission (CFG3.replay_log2 > 0): cycles a TX port waits with unacknowledged "
                     "packets and no acknowledgement freeing one before it sends again from the oldest. Set it "
                     "above the link's round trip (both latencies plus a packet's time at the link's rate); "
                     "too low wastes bandwidth on needless resends, too high slows recovery from a lost last "
                     "packet or a lost resend."),
        Register("WIN_REFUSED", 0x0AC, "ro",
                 doc="Host writes to a window register (WIN_BASE, WIN_SIZE, WIN_COMMS) the engine refused "
                     "because the window was in use: it holds a buffer of a command in flight, or a descriptor "
                     "was being checked against the windows (a few cycles per descriptor; write again). "
                     "Counts every refused word; wraps."),
        Register("STEP_TIMEOUT", 0x0B0, "rw",
                 doc="Step timeout: cycles a step may wait for its grant (a message to arrive, credits, its "
                     "unit) before its FSM gives it up (0 = off, the reset value). The chunk's status becomes "
                     "TIMEOUT (unless it already has an error) and every later step of its command retires "
                     "unissued, so the command completes TIMEOUT on its own. The same limit applies to a link "
                     "port whose link takes no flit while one waits: the port is down (LINK_DOWN) and drops its "
                     "flits until an abort. Set it above the longest wait a healthy run can see (a peer posting "
                     "late, a long link's round trip). A timed-out command may leave messages on the links that "
                     "later commands would take: abort the engines (CTRL.abort) before the next command."),
        Register("LINK_DOWN", 0x0B4, "ro", fields=(
            _f("ports", cfg.n_ports - 1, 0, "bit k: port k's link took no flit for STEP_TIMEOUT cycles while "
                                            "one waited; the port drops its flits until an abort"),),
                 doc="Link ports declared down by the step timeout (sticky until an abort)."),
        Register("DMA_REFUSED", 0x0B8, "ro",
                 doc="AXI bursts the engine's firewall refused: a burst outside the 4 KiB pages of every enabled "
                     "memory window its command's descriptor named (for the engine's own accesses: of the "
                     "submission and completion rings and of the spill window) never reaches the memory; a read "
                     "gets zeros and a write is dropped, both answered SLVERR, so the command completes "
                     "AXI_ERROR. Never counts in a correct engine; wraps."),
        RegisterArray("WIN_COMMS", 0x0C0, cfg.n_windows, 0x4, (Register(
            "WIN_COMMS", 0, "rw", init=(1 << cfg.n_comms) - 1,
            doc="Communicators (bit c: communicator c) whose descriptors may name buffers in memory window i "
                "(reset: every communicator). Locked like WIN_BASE."),), prefix=""),
        RegisterArray("WIN", 0x100, cfg.n_windows, 0x10, (
            Register("BASE", 0x0, "rw", 64,
                     doc="Byte address of memory window i. Locked while the window is in use: a write then "
                         "changes nothing and counts in WIN_REFUSED."),
            Register("SIZE", 0x8, "rw", 64, doc="Bytes of memory window i (0 = disabled). Locked like "
                                                 "WIN_BASE."))),
        RegisterArray("COMM", 0x200, cfg.n_comms, 0x10, (
            Register("CFG", 0x0, "rw", fields=(
                _f("rank", 8, 0, "this endpoint's rank in communicator i"),
                _f("size", 18, 9, "ranks in communicator i"),
                _f("enable", 31, 31, "communicator i accepts descriptors")),
                doc="Communicator i."),
            Register("DIMS", 0x4, "rw", fields=tuple(
                f for d in range(N_DIMS) for f in (
                    _f(f"dim{d}_plus", 8 * d + 2, 8 * d, f"port facing +1 in dimension {d}"),
                    _f(f"dim{d}_minus", 8 * d + 6, 8 * d + 4, f"port facing -1 in dimension {d}"),
                    _f(f"dim{d}_valid", 8 * d + 7, 8 * d + 7, f"dimension {d} has neighbours"))),
                doc="Neighbour ports per dimension of communicator i (informational, for the driver and "
                    "programs)."))),
    ]
    items.extend(_counters(cfg))
    items += [
        Window("PTAB", PTAB_BASE, cfg.n_programs * PTAB_ENTRY_WORDS,
               doc=f"Program table: entry i ({PTAB_ENTRY_WORDS} words at {PTAB_BASE:#x} + "
                   f"{4 * PTAB_ENTRY_WORDS}*i) holds the program_entry_layout() bits, little-endian."),
        Window("ROUTE", ROUTE_BASE, cfg.n_comms * cfg.max_ranks,
               doc=f"Routing table: word c*{cfg.max_ranks} + r = valid[3] | port[2:0], the output port "
                   f"towards rank r on communicator c."),
        Window("IMEM", IMEM_BASE, 2 * cfg.imem_words,
               doc="Instruction memory: 64-bit word i has its low half at 8*i, its high half at 8*i + 4."),
    ]
    try:
        regmap = RegisterMap("ace", items, MAP_SIZE,
                             doc="Registers of one ACE collectives engine (syncfabric.hdl.ace.regs).")
    except RegisterMapError as e:
        raise RegisterMapError(f"{cfg!r} does not fit the ACE register map: {e}") from None
    return regmap


def _counters(cfg):
    """The counter registers: engine-wide at 0x400, per port at 0x500, stalls by cause at 0x600, per program
    phase at 0x640."""
    out, offset = [], 0x400
    for name in COUNTERS:
        width, doc = _COUNTER_DOCS[name]
        offset += -offset % (width // 8)        # 64-bit counters on 8-byte boundaries
        out.append(Register(name, offset, "ro", width, doc=doc[0].upper() + doc[1:] + "."))
        offset += width // 8
    out.append(RegisterArray("PORT", 0x500, cfg.n_ports, 0x20, tuple(
        Register(name, 4 * k, "ro", doc=f"Port i: {_PORT_COUNTER_DOCS[name]}.")
        for k, name in enumerate(PORT_COUNTERS)), prefix=""))
    out.append(RegisterArray("STALL", 0x600, len(STALL_CAUSES), 4, (Register(
        "STALL", 0, "ro", doc="Cycles FSMs waited for cause i: " + ", ".join(
            f"{i} {c}" for i, c in enumerate(STALL_CAUSES)) + " (a waiting FSM counts once per cycle)."),),
        prefix=""))
    out.append(RegisterArray("PHASE", PHASE_COUNTERS_BASE, MAX_PHASES, 8, (
        Register("PHASE_FLITS", 0, "ro", doc="Flits sent on all ports by messages of program phase i (a "
                                             "forwarded message counts in the phase its header names)."),
        Register("PHASE_BUSY", 4, "ro", doc="Cycles at least one chunk was in program phase i (its phase "
                                            "partition held it)."),
    ), prefix=""))
    return out


def route_index(cfg, comm, rank):
    """Word index in the ROUTE window of the entry for ``rank`` on communicator ``comm``."""
    if not 0 <= comm < cfg.n_comms or not 0 <= rank < cfg.max_ranks:
        raise ValueError(f"ROUTE entry (comm {comm}, rank {rank}) outside {cfg.n_comms} x {cfg.max_ranks}")
    return comm * cfg.max_ranks + rank


def ptab_addr(cfg, entry, word=0):
    """Byte address of word ``word`` of program table entry ``entry``."""
    if not 0 <= entry < cfg.n_programs or not 0 <= word < PTAB_ENTRY_WORDS:
        raise ValueError(f"PTAB entry {entry} word {word} outside {cfg.n_programs} x {PTAB_ENTRY_WORDS}")
    return ace_regmap(cfg).addr("PTAB", entry * PTAB_ENTRY_WORDS + word)


def imem_addr(cfg, index, half=0):
    """Byte address of the low (``half=0``) or high 32 bits of instruction word ``index``."""
    if not 0 <= index < cfg.imem_words or half not in (0, 1):
        raise ValueError(f"IMEM word {index} half {half} outside {cfg.imem_words} words")
    return ace_regmap(cfg).addr("IMEM", 2 * index + half)


def _entry_rows():
    """``(bits, field)`` of every program_entry_layout() field, array elements one by one."""
    rows = []
    for name, field in program_entry_layout():
        shape = field.shape
        if hasattr(shape, "elem_shape"):
            w = shape.elem_shape.width
            rows += [(field.offset + i * w, w, f"{name}[{i}]") for i in range(shape.length)]
        else:
            rows.append((field.offset, field.width, name))
    return [(f"{off + w - 1}:{off}" if w > 1 else f"{off}", name) for off, w, name in rows]


def registers_markdown(cfg=None):
    """``docs/registers.md``: the register table of ``cfg`` (default ``AceConfig()``) and the formats of the
    window words, all generated from this module and the shared layouts."""
    cfg = AceConfig() if cfg is None else cfg
    text = ace_regmap(cfg).markdown("ACE register map")
    lines = [
        "", "## Window formats", "",
        f"**PTAB** entry i: {PTAB_ENTRY_WORDS} words at `{PTAB_BASE:#x} + {4 * PTAB_ENTRY_WORDS}*i`; bit b of the "
        f"entry is bit b%32 of word b/32 (`program_entry_layout()` in `hdl/common/layouts.py`; the driver fills "
        f"it from a golden Program, `syncfabric.host.programs.program_entry`):", "",
        "| bits | field |", "|---|---|",
        *[f"| {bits} | `{name}` |" for bits, name in _entry_rows()],
        "", f"**ROUTE** word `c*{cfg.max_ranks} + r`: bit 3 valid, bits 2:0 the output port of the first hop "
        "from this endpoint towards rank r of communicator c (`syncfabric.host.programs.routing_table`).",
        "", f"**IMEM** instruction i: the low 32 bits at `{IMEM_BASE:#x} + 8*i`, the high 32 bits at "
        f"`{IMEM_BASE:#x} + 8*i + 4` (the 64-bit step encoding of `docs/programs.md`).",
        "", f"Generated for {'the default `AceConfig()`' if cfg == AceConfig() else f'`{cfg!r}`'} by "
        "`python -m syncfabric.hdl.ace.regs > docs/registers.md`; edit `hdl/ace/regs.py`, not this file.", "",
    ]
    return text + "\n".join(lines)


def main():
    """Print :func:`registers_markdown` for the default configuration (the content of ``docs/registers.md``)."""
    print(registers_markdown(), end="")


if __name__ == "__main__":
    main()
