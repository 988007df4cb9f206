"""Elaboration parameters of an ACE engine (plain Python: the driver, the golden model and the docs read them).

The design point of the ACE paper (section IV-I) is 4 MiB of SRAM, 16 FSMs and 64 B datapaths; tests use
smaller configurations of the same RTL (``AceConfig.small()``).
"""

from dataclasses import dataclass, asdict, replace

from ...sim.golden.types import DType
from ..common.layouts import CHANNEL_BITS, SEQ_BITS

__all__ = ["AceConfig", "PROFILES", "ALL_DTYPES"]

#: Every element type the ALU can be built for, in code order (the default of :attr:`AceConfig.dtypes`).
ALL_DTYPES = tuple(d.name.lower() for d in DType)

#: Named configurations (:meth:`AceConfig.profile`).
PROFILES = ("small", "medium", "paper", "board")


def _pow2(x):
    return x > 0 and x & (x - 1) == 0


@dataclass(frozen=True)
class AceConfig:
    """Parameters of one engine.

    beat_bytes      width of SRAM, ALU, AXI and link flits (bytes; a power of two >= 8).
    packet_bytes    payload bytes per link packet (multiple of beat_bytes).
    chunk_bytes     size of one chunk buffer's payload (the largest chunk working set; the effective chunk size
                    is a register, at most this).
    n_buffers       chunk buffers; each is one SRAM bank (1 read + 1 write port, beat wide). SRAM size =
                    n_buffers * buffer_bytes.
    max_blocks      largest ``n_blocks`` of a program (sets the buffer slack for rounding blocks up to beats).
    n_fsms          FSMs of the control unit (= virtual channels on every link).
    rx_sources      landing channels per virtual channel on every RX port (a power of two): 1 on point-to-point
                    links; on a switch at least the number of ranks, so that every (source rank, FSM) pair has its
                    own landing buffer and credits (messages from different sources arrive in any order).
    n_ports         link ports (each with a TX and an RX side).
    landing_beats   per (RX port, FSM) landing buffer in beats; a message may be at most half of it.
    landing_headers per (RX port, FSM) message headers the landing buffer holds (power of two).
    spill_entries   records of the deposit unit's spill table (asynchronous all-to-all): early PUT messages that
                    found their landing channel full go to a memory window of this many records of
                    ``max_message_beats`` beats (SPILL_ENTRIES may enable fewer; 0 = no spilling).
    n_cmds          collectives in flight at once (command table entries).
    n_comms         communicators.
    n_windows       registered memory windows.
    imem_words      instruction memory (64-bit words), shared by all loaded programs.
    n_programs      program table entries (one per (communicator, collective) loaded).
    max_ranks       largest group size (routing table entries).
    dma_max_burst   beats per AXI burst (<= 256).
    dma_outstanding read bursts in flight.
    addr_width      AXI address width.
    replay_flits    link-level retransmission (docs/engine.md section 15): flits each TX port keeps until the
                    receiver acknowledges them (a power of two >= 4 * packet_beats, covering the link's round trip
                    at its rate), 0 = none. Point-to-point links only (not through a switch or a board's pins).
    dtypes          element types the ALUs are built for (names, e.g. ``("fp32", "int32")``; default all). Each
                    float format costs adders in every lane; an engine refuses a descriptor of another type
                    with ``BAD_DTYPE``. Given in any order and case, kept in code order.
    fabric          1 = built for an FPGA's LUTs and carry chains (the ECP5 boards; ``syncfabric build`` sets
                    it), where each 45 nm stage is 15-17 ns: the ALUs register their operands (a landing
                    buffer's block RAM output then reaches no logic in its cycle), their float adders align
                    and normalise in two stages each and their max/min is decided a stage before it is
                    selected (ALU latency 8 instead of 5); the TX ports compute a flit's CRC a stage after
                    forming it (at 45 nm too from 64-byte beats: ``tx_crc_stage``); the RX ports queue a
                    header a cycle after its flit; the DMA's burst splitter keeps its last-burst flag in a
                    flip-flop and its writer's previous-beat register is neither reset nor cleared. The same results; 0 = the 45 nm form (default).
    wide_control    1 = the control unit's register stages of a wide engine (``control_stages``), 0 = without
                    them, -1 (default) = with them from 16 FSMs or 32 buffers. The same results, some cycles
                    later.
    """

    beat_bytes: int = 64
    packet_bytes: int = 256
    chunk_bytes: int = 65536
    n_buffers: int = 52
    max_blocks: int = 32
    n_fsms: int = 16
    n_ports: int = 2
    rx_sources: int = 1
    landing_beats: int = 256
    landing_headers: int = 4
    spill_entries: int = 8
    n_cmds: int = 4
    n_comms: int = 4
    n_windows: int = 4
    imem_words: int = 1024
    n_programs: int = 16
    max_ranks: int = 16
    dma_max_burst: int = 16
    dma_outstanding: int = 4
    addr_width: int = 48
    replay_flits: int = 0
    dtypes: tuple = ALL_DTYPES
    fabric: int = 0
    wide_control: int = -1

    def __post_init__(self):
        errors = []
        names = (self.dtypes,) if isinstance(self.dtypes, (str, DType)) else self.dtypes
        try:
            codes = {DType.parse(d) for d in names}
        except (TypeError, ValueError) as e:
            errors.append(f"dtypes: {e}")
        else:
            if not codes:
                errors.append(f"dtypes must name at least one of {', '.join(ALL_DTYPES)}")
            object.__setattr__(self, "dtypes", tuple(d.name.lower() for d in sorted(codes)))
        if not _pow2(self.beat_bytes) or self.beat_bytes < 8:
            errors.append(f"beat_bytes={self.beat_bytes} must be a power of two >= 8")
        if self.packet_bytes % self.beat_bytes or self.packet_bytes <= 0:
            errors.append(f"packet_bytes={self.packet_bytes} must be a positive multiple of beat_bytes")
        if self.chunk_bytes % self.beat_bytes or self.chunk_bytes <= 0:
            errors.append(f"chunk_bytes={self.chunk_bytes} must be a positive multiple of beat_bytes")
        for name in ("n_buffers", "max_blocks", "n_fsms", "n_ports", "n_cmds", "n_comms", "n_windows",
                     "imem_words", "n_programs", "max_ranks", "dma_outstanding"):
            if getattr(self, name) < 1:
                errors.append(f"{name} must be >= 1")
        if self.n_fsms > 32:
            errors.append("n_fsms must be <= 32 (5-bit virtual channel field)")
        if self.n_ports > 8:
            errors.append("n_ports must be <= 8 (3-bit port field of the instruction word)")
        if self.max_ranks > 512:
            errors.append("max_ranks must be <= 512 (9-bit rank fields)")
        if not 1 <= self.dma_max_burst <= 256:
            errors.append("dma_max_burst must be in 1..256")
        if self.landing_beats < 4 or not _pow2(self.landing_beats):
            errors.append("landing_beats must be a power of two >= 4")
        if self.fabric not in (0, 1):
            errors.append(f"fabric={self.fabric} must be 0 or 1")
        if self.wide_control not in (-1, 0, 1):
            errors.append(f"wide_control={self.wide_control} must be -1 (by size), 0 or 1")
        if not 0 <= self.spill_entries <= 255:
            errors.append(f"spill_entries={self.spill_entries} must be 0..255")
        if self.landing_headers < 2 or not _pow2(self.landing_headers):
            errors.append("landing_headers must be a power of two >= 2")
        if not _pow2(self.n_fsms):
            errors.append("n_fsms must be a power of two")
        if not _pow2(self.rx_sources) or self.rx_sources > 512:
            errors.append("rx_sources must be a power of two <= 512 (9-bit source rank)")
        elif self.n_channels > 1 << CHANNEL_BITS:
            errors.append(f"n_fsms * rx_sources must be <= {1 << CHANNEL_BITS} (landing channels)")
        if self.replay_flits and (not _pow2(self.replay_flits) or self.replay_flits < 4 * self.packet_beats
                                  or self.replay_flits > 1 << (SEQ_BITS - 1)):
            errors.append(f"replay_flits={self.replay_flits} must be 0 or a power of two in "
                          f"{4 * self.packet_beats}..{1 << (SEQ_BITS - 1)} (4 packets .. half the sequence space)")
        if errors:
            raise ValueError("bad ACE configuration: " + "; ".join(errors))

    # -- derived sizes --------------------------------------------------------------------------------------
    @property
    def lanes(self):
        """32-bit ALU lanes (one beat per cycle)."""
        return self.beat_bytes // 4

    @property
    def dtype_codes(self):
        """:attr:`dtypes` as :class:`DType` members."""
        return tuple(DType.parse(d) for d in self.dtypes)

    @property
    def dtype_mask(self):
        """Bit ``code`` set for each supported element type (the CFG3 register's ``dtypes`` field)."""
        return sum(1 << d for d in self.dtype_codes)

    def supports(self, dtype):
        """Whether the ALUs are built for ``dtype`` (a :class:`DType`, its code or its name)."""
        try:
            code = DType(dtype) if isinstance(dtype, int) else DType.parse(dtype)
        except ValueError:
            return False
        return code in self.dtype_codes

    @property
    def tx_crc_stage(self):
        """Whether the TX ports compute a flit's CRC in a register stage after forming it: in the fabric form,
        and at 45 nm for beats of 64 bytes or more, where the parity trees over a 512-bit beat behind the
        header mux and the last beat's byte mask are too deep for one 1 GHz cycle."""
        return bool(self.fabric) or self.beat_bytes >= 64

    @property
    def control_stages(self):
        """Whether the control unit has the register stages of a wide engine (from 16 FSMs or 32 buffers), where
        decisions over every FSM or buffer do not fit one 1 GHz cycle at 45 nm with what they update (the
        design point's control unit: docs/results.md): the partition manager registers a move's grant and
        applies it a cycle later (at most one move every two cycles; a move reaches its FSM a cycle later), and
        the chunk leaving the terminal partition; the dispatcher takes a queued command's first FSM (its tag
        modulo FSM_LIMIT) from registers computed over three cycles while the command waited at the queue's head,
        so a command arriving at an empty queue waits three cycles; the block geometry's wide products take two
        stages (its lookups one cycle more) and the load sequencer's skip of an empty block leaves from
        flip-flops. The smaller engines keep the one-cycle forms; ``wide_control`` 0 or 1 overrides the size
        rule."""
        if self.wide_control >= 0:
            return bool(self.wide_control)
        return self.n_fsms > 8 or self.n_buffers >= 32

    @property
    def n_channels(self):
        """Landing channels per RX port: channel ``vc + n_fsms * source`` (source 0 unless ``rx_sources`` > 1)."""
        return self.n_fsms * self.rx_sources

    @property
    def chunk_beats(self):
        return self.chunk_bytes // self.beat_bytes

    @property
    def buffer_beats(self):
        """Beats of one chunk buffer: a full chunk plus one beat per block of rounding slack."""
        return self.chunk_beats + self.max_blocks

    @property
    def buffer_bytes(self):
        return self.buffer_beats * self.beat_bytes

    @property
    def sram_bytes(self):
        return self.n_buffers * self.buffer_bytes

    @property
    def max_slots(self):
        """Most SRAM slots a program may use per chunk (the all-to-all's two spare slots beyond its blocks);
        the control unit tracks outstanding LOADs per slot."""
        return self.max_blocks + 2

    @property
    def packet_beats(self):
        return self.packet_bytes // self.beat_bytes

    @property
    def max_message_beats(self):
        """Largest message (block) the landing buffers accept: half a landing buffer, so that a sender can
        stream the next message while the previous one is consumed."""
        return self.landing_beats // 2

    def as_dict(self):
        return asdict(self)

    def replace(self, **kw):
        return replace(self, **kw)

    @classmethod
    def small(cls, **kw):
        """A configuration small enough for quick simulation: 16 B beats, 1 KiB chunks, 4 FSMs, 8 buffers."""
        base = dict(beat_bytes=16, packet_bytes=64, chunk_bytes=1024, n_buffers=8, max_blocks=32, n_fsms=4,
                    n_ports=2, landing_beats=64, landing_headers=4, n_cmds=4, n_comms=2, n_windows=4, imem_words=512,
                    n_programs=8, max_ranks=16, dma_max_burst=8, dma_outstanding=4, addr_width=32)
        base.update(kw)
        return cls(**base)

    @classmethod
    def medium(cls, **kw):
        """The demonstration configuration: 16 B beats, 4 KiB chunks, 8 FSMs, 16 buffers (80 KiB of SRAM). Its
        Verilator model builds in minutes where the design point takes a quarter of an hour."""
        base = dict(beat_bytes=16, packet_bytes=256, chunk_bytes=4096, n_buffers=16, max_blocks=32, n_fsms=8,
                    n_ports=2, landing_beats=128, landing_headers=4, n_cmds=4, n_comms=4, n_windows=4,
                    imem_words=512, n_programs=16, max_ranks=16, dma_max_burst=16, dma_outstanding=4,
                    addr_width=48)
        base.update(kw)
        return cls(**base)

    @classmethod
    def board(cls, **kw):
        """The prototype-board configuration: 8 B beats, 512 B chunks, 2 FSMs, 4 buffers; it runs every
        collective of ring:2 and a loop-back ring:1. The ULX3S 85F build (syncfabric.fpga.boards) narrows it to
        1 FSM, 1 command slot and fp32/int32 ALUs to fit two engines on the ECP5-85F."""
        base = dict(beat_bytes=8, packet_bytes=64, chunk_bytes=512, n_buffers=4, max_blocks=8, n_fsms=2,
                    n_ports=2, landing_beats=32, landing_headers=2, spill_entries=2, n_cmds=2, n_comms=1,
                    n_windows=2, imem_words=128, n_programs=4, max_ranks=4, dma_max_burst=8, dma_outstanding=2,
                    addr_width=32)
        base.update(kw)
        return cls(**base)

    @classmethod
    def profile(cls, name, **kw):
        """A named configuration: ``small`` (tests), ``medium`` (the demo), ``paper`` (the design point) or
        ``board`` (a prototype board)."""
        makers = {"small": cls.small, "medium": cls.medium, "paper": lambda **k: cls(**k), "board": cls.board}
        if name not in makers:
            raise ValueError(f"unknown engine configuration {name!r}; expected one of {', '.join(makers)}")
        return makers[name](**kw)
