"""CCI wire formats and the memory device's address map, defined once for the RTL, the golden models, the
testbenches and ``docs/coarse.md``.

The CCI transaction layer follows CXL.mem: a host (GPU) or a sync core sends *requests* (``MEM_RD`` with a tag
and an address, ``MEM_WR`` with a tag, an address and one data beat), the target answers with *responses*
(``MEM_DATA``: the tag and the data read; ``CMP``: the tag of a completed write). Everything travels in
*flits*: one header slot (opcode, tag, address) and one data slot of ``beat_bytes``, the way a CXL 68-byte flit
carries a header slot and a 64-byte cache line. A request moves exactly one beat (CXL.mem moves one cache line
per request), so a tensor of ``N`` beats is ``N`` requests with distinct tags. Links carry flits under
credit-based flow control (:class:`~syncfabric.hdl.coarse.cci.CciLink`).

Address map of a memory device (``ADDR_BITS`` = 32)::

    bit 31 = 0   DRAM, byte address (the device's AXI port)
    bit 31 = 1   sync-core space: bits [30:24] core index, [23:20] region, [19:0] offset
                 region 0  RecvBuf  (write only: remote sync cores' ring traffic)
                 region 1  LocalBuf (read only)
                 region 2  SendBuf  (read only)
                 region 3  control registers (:func:`core_register_map`, one 32-bit register per beat address)
"""

import enum
import functools

from amaranth.hdl import unsigned
from amaranth.lib import data

from ..common.layouts import DTYPE_SHAPE, OP_SHAPE, pack, unpack
from ..common.regmap import Field, Register, RegisterMap, RegisterMapError

__all__ = ["CciOpcode", "ADDR_BITS", "TAG_BITS", "cci_flit_layout", "Region", "core_addr",
           "is_core_addr", "decode_core_addr", "CORE_SPACE", "MAX_CORES", "pack_flit", "unpack_flit",
           "core_mode_layout", "core_mode", "cci_pending_layout", "core_register_map",
           "CTRL_REGION_BYTES", "SUM_PUSH", "SUM_PULL", "SUM_CTRL", "summation_mode_layout",
           "summation_register_map", "sum_push_addr", "sum_pull_addr"]

#: Address and tag widths of the transaction layer.
ADDR_BITS = 32
TAG_BITS = 8
#: Sync cores a device may hold (core index field width 7).
MAX_CORES = 128
#: Bit 31: the sync-core space.
CORE_SPACE = 1 << 31


class CciOpcode(enum.IntEnum):
    """Flit opcodes: two requests (master to subordinate), two responses (back)."""
    MEM_RD = 0      #: read request: tag, addr
    MEM_WR = 1      #: write request: tag, addr, data (one beat)
    MEM_DATA = 2    #: read response: tag, data
    CMP = 3         #: write completion: tag


class Region(enum.IntEnum):
    """Regions of a sync core's window."""
    RECV = 0
    LOCAL = 1
    SEND = 2
    CTRL = 3


#: Bytes of a sync core's control region (the 20-bit offset of its window).
CTRL_REGION_BYTES = 1 << 20

#: The control registers in address order: ``(name, access, doc)``; register ``i`` is at byte ``i * beat_bytes``
#: of region ``CTRL`` (one 32-bit register per beat address, in data bits 0-31). The one list the RTL
#: (:class:`~syncfabric.hdl.coarse.cci.CciTarget`), the host driver, the testbenches and ``docs/coarse.md``
#: read, through :func:`core_register_map`.
_CORE_REGISTERS = (
    ("BASE", "rw", "DRAM byte address of the core's first chunk"),
    ("STRIDE", "rw", "bytes from one of its chunks to the next"),
    ("CHUNKS", "rw", "chunks to synchronize"),
    ("RANK", "rw", "ring position of this device in the core's group"),
    ("RANKS", "rw", "devices in the ring"),
    ("MODE", "rw", "element type and operator (`core_mode_layout()`; `core_mode(dtype, op)` packs it)"),
    ("START", "wo", "write (any value): start a run (clears DONE; a one-cycle strobe, the value is not kept). "
                    "Unlike other `wo` registers a read does not return 0 but the core's status (the fields)"),
    ("CYCLES", "ro", "cycles busy in the last run"),
    ("STALLS", "ro", "cycles the ring steps waited for a RecvBuf entry"),
    ("ALU_BEATS", "ro", "beats through the ALU in the last run"),
)

_MODE_FIELD_DOCS = {"dtype": "element type (`DType` code of `sim/golden/types.py`)",
                    "op": "reduction operator (`ReduceOp` code of `sim/golden/types.py`)"}
#: Bits of the status a read of ``START`` returns: ``(name, doc)`` from bit 0 up.
_STATUS_FIELDS = (
    ("BUSY", "a run is in progress"),
    ("DONE", "the last run finished (cleared by a write to START)"),
    ("ERROR", "an AXI error response, or a bad `RANKS` / `RANK`"),
)


def core_mode_layout():
    """The MODE register of a sync core: the element type and the reduction operator of its all-reduce."""
    return data.StructLayout({"dtype": DTYPE_SHAPE, "op": OP_SHAPE})


@functools.lru_cache(maxsize=None)
def core_register_map(beat_bytes=16):
    """The control registers of a sync core with ``beat_bytes``-byte beats, as a
    :class:`~syncfabric.hdl.common.regmap.RegisterMap` of region ``CTRL`` of the core's window (offsets from
    the region's start; :func:`core_addr` adds the core and the region): one 32-bit register per beat address,
    register ``i`` of :data:`_CORE_REGISTERS` at byte ``i * beat_bytes``. ``MODE`` has the fields of
    :func:`core_mode_layout`, ``START`` the status bits its read returns (``BUSY``, ``DONE``, ``ERROR``).

    Raises :class:`~syncfabric.hdl.common.regmap.RegisterMapError` for a beat that is not a power of two of at
    least 4 bytes (the registers would not be word aligned)."""
    if beat_bytes < 4 or beat_bytes & (beat_bytes - 1):
        raise RegisterMapError(f"sync-core registers need a power-of-two beat of at least 4 bytes, "
                               f"not {beat_bytes}")
    fields = {
        "MODE": tuple(Field(name, f.offset, f.width, _MODE_FIELD_DOCS[name]) for name, f in core_mode_layout()),
        "START": tuple(Field(name, bit, 1, doc) for bit, (name, doc) in enumerate(_STATUS_FIELDS)),
    }
    regs = [Register(name, i * beat_bytes, access, fields=fields.get(name, ()), doc=doc)
            for i, (name, access, doc) in enumerate(_CORE_REGISTERS)]
    return RegisterMap("sync-core", regs, CTRL_REGION_BYTES,
                       doc=f"Control registers of a sync core: region {int(Region.CTRL)} (`CTRL`) of its window "
                           f"(`core_addr(core, Region.CTRL, offset)`), one 32-bit register per "
                           f"{beat_bytes}-byte beat address (register i at byte i x beat_bytes, its value in "
                           f"data bits 0-31 of the flit); the `rw` registers give the core their value (no write "
                           f"strobe). Generated from `core_register_map({beat_bytes})` in `hdl/coarse/layouts.py`.")


#: The summation service's address space (bytes; :class:`~syncfabric.hdl.coarse.summation.SummationService`):
#: bit 31 selects its control registers (:func:`summation_register_map`), else bit 30 the pull region.
SUM_PUSH = 0
SUM_PULL = 1 << 30
SUM_CTRL = 1 << 31

#: The summation service's control registers in address order: ``(name, access, doc)``; register ``i`` at byte
#: ``SUM_CTRL + i * beat_bytes`` (one 32-bit register per beat address, in data bits 0-31).
_SUM_REGISTERS = (
    ("MODE", "rw", "training mode, element type and operator (`summation_mode_layout()`); set it while no "
                   "request is in flight"),
    ("PARTS_SUMMED", "ro", "parts summed in synchronous mode"),
    ("PUSHES_APPLIED", "ro", "beats of asynchronous pushes applied"),
    ("BAD_REQUESTS", "ro", "malformed requests (answered at once, changing nothing)"),
)

_SUM_MODE_FIELD_DOCS = {"asynchronous": "0: synchronous (a pull waits for every worker's push of the round), "
                                        "1: asynchronous (a push is applied at once, a pull answers at once)",
                        **_MODE_FIELD_DOCS}


def sum_push_addr(n_workers, part_beats, beat_bytes, part, worker, beat):
    """Service address of beat ``beat`` of ``worker``'s contribution to ``part``."""
    return SUM_PUSH | ((part * n_workers + worker) * part_beats + beat) * beat_bytes


def sum_pull_addr(part_beats, beat_bytes, part, beat):
    """Service address of beat ``beat`` of ``part``'s result (a pull)."""
    return SUM_PULL | (part * part_beats + beat) * beat_bytes


def summation_mode_layout():
    """The summation service's MODE register: the training mode (bit 0), then the element type and operator."""
    return data.StructLayout({"asynchronous": 1, "dtype": DTYPE_SHAPE, "op": OP_SHAPE})


@functools.lru_cache(maxsize=None)
def summation_register_map(beat_bytes=16):
    """The control registers of a summation service with ``beat_bytes``-byte beats, as a
    :class:`~syncfabric.hdl.common.regmap.RegisterMap` of offsets from :data:`SUM_CTRL` (one 32-bit register per
    beat address). Raises :class:`~syncfabric.hdl.common.regmap.RegisterMapError` for a beat that is not a power of
    two of at least 4 bytes."""
    if beat_bytes < 4 or beat_bytes & (beat_bytes - 1):
        raise RegisterMapError(f"summation-service registers need a power-of-two beat of at least 4 bytes, "
                               f"not {beat_bytes}")
    mode = tuple(Field(name, f.offset, f.width, _SUM_MODE_FIELD_DOCS[name]) for name, f in summation_mode_layout())
    regs = [Register(name, i * beat_bytes, access, fields=mode if name == "MODE" else (), doc=doc)
            for i, (name, access, doc) in enumerate(_SUM_REGISTERS)]
    return RegisterMap("summation-service", regs, len(regs) * beat_bytes,
                       doc=f"Control registers of the BytePS summation service at `SUM_CTRL` ({SUM_CTRL:#x}) of "
                           f"its CCI address space, one 32-bit register per {beat_bytes}-byte beat address "
                           f"(register i at byte i x beat_bytes, its value in data bits 0-31); any worker's port "
                           f"reaches them. Generated from `summation_register_map({beat_bytes})` in "
                           f"`hdl/coarse/layouts.py`.")


def core_mode(dtype, op):
    """MODE register value for ``dtype`` (:class:`~syncfabric.sim.golden.types.DType`) and ``op``
    (:class:`~syncfabric.sim.golden.types.ReduceOp`)."""
    return core_register_map().encode("MODE", dtype=int(dtype), op=int(op))


def cci_flit_layout(beat_bytes=16):
    """One flit: header slot (``opcode``, ``tag``, ``addr``) and data slot (``beat_bytes``)."""
    return data.StructLayout({
        "opcode": unsigned(2),
        "tag": unsigned(TAG_BITS),
        "addr": unsigned(ADDR_BITS),
        "data": unsigned(8 * beat_bytes),
    })


def cci_pending_layout():
    """What a CCI target remembers of a request it issued and has not answered yet (its response queue entry):
    the request's ``opcode``, ``tag`` and ``addr`` (echoed), ``dram`` (DRAM answers it: read data or a write
    response from AXI) or else the register ``value`` read (0 for a write)."""
    return data.StructLayout({
        "opcode": unsigned(2),
        "tag": unsigned(TAG_BITS),
        "addr": unsigned(ADDR_BITS),
        "dram": unsigned(1),
        "value": unsigned(32),
    })


def core_addr(core, region, offset=0):
    """Device address of ``offset`` in ``region`` of sync core ``core``."""
    if not 0 <= core < MAX_CORES or not 0 <= offset < (1 << 20):
        raise ValueError(f"core {core} / offset {offset} outside the sync-core space")
    return CORE_SPACE | (core << 24) | (int(region) << 20) | offset


def is_core_addr(addr):
    """Whether ``addr`` is in the sync-core space."""
    return bool(addr & CORE_SPACE)


def decode_core_addr(addr):
    """``(core, Region, offset)`` of a sync-core address."""
    if not is_core_addr(addr):
        raise ValueError(f"{addr:#x} is a DRAM address")
    return (addr >> 24) & (MAX_CORES - 1), Region((addr >> 20) & 0xF), addr & 0xFFFFF


def pack_flit(beat_bytes, opcode, tag=0, addr=0, data=0):
    """Integer bits of a flit."""
    return pack(cci_flit_layout(beat_bytes), {"opcode": opcode, "tag": tag, "addr": addr, "data": data})


def unpack_flit(beat_bytes, bits):
    """Fields of a flit's bits."""
    return unpack(cci_flit_layout(beat_bytes), bits)


def format_markdown(beat_bytes=16):
    """Markdown tables of the flit layout, the opcodes and the control registers (``docs/coarse.md`` holds
    this text; a test keeps them equal). The register part is :meth:`RegisterMap.markdown
    <syncfabric.hdl.common.regmap.RegisterMap.markdown>` of :func:`core_register_map`, its headings moved two
    levels down to sit in a section of the doc."""
    lines = [f"Flit ({cci_flit_layout(beat_bytes).size} bits with {beat_bytes}-byte beats):", "",
             "| field | bits | width |", "|---|---|---|"]
    for name, field in cci_flit_layout(beat_bytes):
        lines.append(f"| `{name}` | {field.offset}..{field.offset + field.width - 1} | {field.width} |")
    lines += ["", "| opcode | code | direction | carries |", "|---|---|---|---|"]
    carries = {CciOpcode.MEM_RD: ("request", "tag, addr"), CciOpcode.MEM_WR: ("request", "tag, addr, data"),
               CciOpcode.MEM_DATA: ("response", "tag, data"), CciOpcode.CMP: ("response", "tag")}
    for op in CciOpcode:
        lines.append(f"| `{op.name}` | {op.value} | {carries[op][0]} | {carries[op][1]} |")
    for regmap, title in ((core_register_map(beat_bytes), "Sync-core"),
                          (summation_register_map(beat_bytes), "Summation-service")):
        regs = regmap.markdown(f"{title} control registers ({beat_bytes}-byte beats)")
        lines += [""] + [f"##{line}" if line.startswith("#") else line for line in regs.splitlines()]
    return "\n".join(lines) + "\n"
