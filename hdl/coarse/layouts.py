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
                 region 3  control registers (:class:`CoreReg`, one 32-bit register per beat address)
"""

import enum

from amaranth.hdl import unsigned
from amaranth.lib import data

from ..common.layouts import DTYPE_SHAPE, OP_SHAPE, pack, unpack

__all__ = ["CciOpcode", "ADDR_BITS", "TAG_BITS", "cci_flit_layout", "Region", "CoreReg", "core_addr",
           "is_core_addr", "decode_core_addr", "CORE_SPACE", "MAX_CORES", "pack_flit", "unpack_flit",
           "core_mode_layout", "core_mode", "CoreStatus", "cci_pending_layout"]

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


class CoreReg(enum.IntEnum):
    """Control registers of a sync core (byte offset = index x beat_bytes in region ``CTRL``)."""
    BASE = 0        #: DRAM byte address of the core's first chunk
    STRIDE = 1      #: bytes from one of its chunks to the next
    CHUNKS = 2      #: chunks to synchronize
    RANK = 3        #: ring position of this device in the core's group
    RANKS = 4       #: devices in the ring
    MODE = 5        #: element type and operator (:func:`core_mode_layout`)
    START = 6       #: write: start (clears DONE); read: status (:class:`CoreStatus`)
    CYCLES = 7      #: read: cycles busy in the last run
    STALLS = 8      #: read: cycles the ring steps waited for a RecvBuf entry
    ALU_BEATS = 9   #: read: beats through the ALU in the last run


def core_mode_layout():
    """The MODE register of a sync core: the element type and the reduction operator of its all-reduce."""
    return data.StructLayout({"dtype": DTYPE_SHAPE, "op": OP_SHAPE})


def core_mode(dtype, op):
    """MODE register value for ``dtype`` (:class:`~syncfabric.sim.golden.types.DType`) and ``op``
    (:class:`~syncfabric.sim.golden.types.ReduceOp`)."""
    return pack(core_mode_layout(), {"dtype": dtype, "op": op})


class CoreStatus(enum.IntFlag):
    """Bits of the status register."""
    BUSY = 1
    DONE = 2
    ERROR = 4       #: an AXI error response, or a bad ``RANKS`` / ``RANK``


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
    this text; a test keeps them equal)."""
    lines = [f"Flit ({cci_flit_layout(beat_bytes).size} bits with {beat_bytes}-byte beats):", "",
             "| field | bits | width |", "|---|---|---|"]
    for name, field in cci_flit_layout(beat_bytes):
        lines.append(f"| `{name}` | {field.offset}..{field.offset + field.width - 1} | {field.width} |")
    lines += ["", "| opcode | code | direction | carries |", "|---|---|---|---|"]
    carries = {CciOpcode.MEM_RD: ("request", "tag, addr"), CciOpcode.MEM_WR: ("request", "tag, addr, data"),
               CciOpcode.MEM_DATA: ("response", "tag, data"), CciOpcode.CMP: ("response", "tag")}
    for op in CciOpcode:
        lines.append(f"| `{op.name}` | {op.value} | {carries[op][0]} | {carries[op][1]} |")
    lines += ["", "| register | index | byte offset in region 3 |", "|---|---|---|"]
    for reg in CoreReg:
        lines.append(f"| `{reg.name}` | {reg.value} | {reg.value} x beat_bytes |")
    return "\n".join(lines) + "\n"
