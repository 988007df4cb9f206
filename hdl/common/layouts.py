"""Wire layouts shared by the RTL, the testbenches and the host driver.

Each layout is an ``amaranth.lib.data`` layout defined once here; testbenches and the driver pack and unpack
values with ``layout.const({...}).as_value().value`` and ``layout.from_bits(int)`` so they can never drift from
the RTL. Enumerated fields take their codes from :mod:`syncfabric.sim.golden.types`.
"""

from amaranth.hdl import Shape, unsigned
from amaranth.lib import data

from ...sim.golden.types import DType, ReduceOp

__all__ = ["DTYPE_SHAPE", "OP_SHAPE", "alu_operands_layout", "alu_result_layout", "pack", "unpack",
           "DESCRIPTOR_BYTES", "COMPLETION_BYTES", "descriptor_layout", "completion_layout", "DescFlags",
           "packet_header_layout", "HEADER_CRC_BYTES", "flit_layout", "credit_layout", "pack_bytes",
           "unpack_bytes", "program_entry_layout", "MAX_PHASES", "LOAD_MASK_BITS", "COUNT_BITS", "CHANNEL_BITS"]

#: 2-bit fields holding a :class:`DType` / :class:`ReduceOp` code.
DTYPE_SHAPE = unsigned(max(DType).bit_length())
OP_SHAPE = unsigned(max(ReduceOp).bit_length())


def alu_operands_layout(lanes=16, tag_width=0):
    """One ALU input beat: two operand vectors of ``lanes`` x 32 bits, the element type and operator for this
    beat, and an opaque tag carried to the output (the engine uses it to route the result).

    Elements are packed little-endian as in memory: 32-bit element ``k`` is bits ``[32k, 32k+32)``, 16-bit
    element ``k`` is bits ``[16k, 16k+16)``.
    """
    return data.StructLayout({
        "a": unsigned(32 * lanes),
        "b": unsigned(32 * lanes),
        "dtype": DTYPE_SHAPE,
        "op": OP_SHAPE,
        "tag": unsigned(tag_width),
    })


def alu_result_layout(lanes=16, tag_width=0):
    """One ALU output beat: the reduced vector and the tag of the input beat it came from."""
    return data.StructLayout({
        "data": unsigned(32 * lanes),
        "tag": unsigned(tag_width),
    })


def _flat_fields(layout):
    """``{name: (offset, width)}`` when every field is a plain unsigned value, else None."""
    out = {}
    for name, field in layout:
        shape = field.shape
        if not isinstance(shape, Shape) or shape.signed:
            return None
        out[name] = (field.offset, field.width)
    return out


def pack(layout, fields):
    """Integer bit pattern of ``fields`` (a dict; missing fields are 0) in ``layout``; enum members are accepted
    for code fields. Out-of-range values and unknown names raise ``ValueError``. Fast enough for million-beat
    testbenches: flat layouts are packed by shifts, others through ``layout.const``."""
    flat = _flat_fields(layout)
    if flat is None:
        return layout.const({k: int(v) for k, v in fields.items()}).as_value().value
    bits = 0
    for name, value in fields.items():
        if name not in flat:
            raise ValueError(f"{name!r} is not a field of this layout ({', '.join(flat)})")
        offset, width = flat[name]
        value = int(value)
        if not 0 <= value < (1 << width):
            raise ValueError(f"field {name}={value} does not fit in {width} bits")
        bits |= value << offset
    return bits


def unpack(layout, bits):
    """Dict of integer field values of the bit pattern ``bits`` in ``layout``."""
    flat = _flat_fields(layout)
    bits = int(bits)
    if flat is None:
        view = layout.from_bits(bits)
        return {name: int(getattr(view, name)) for name, _ in layout}
    return {name: (bits >> offset) & ((1 << width) - 1) for name, (offset, width) in flat.items()}


# -- command interface (NPU memory) -------------------------------------------------------------------------

#: A descriptor is one 64-byte record in the submission ring; a completion one 32-byte record in the completion
#: ring. Both are little-endian: field bit 0 is bit 0 of the record's first byte.
DESCRIPTOR_BYTES = 64
COMPLETION_BYTES = 32


class DescFlags:
    """Bits of a descriptor's ``flags`` field."""

    IN_PLACE = 1 << 0   #: the result overwrites the source buffer (``dst`` must equal ``src``)
    #: null contribution (partial all-reduce): the rank's LOADs read nothing and fill their slots with zeros,
    #: and it counts 0 in the count lane; all-reduce, reduce-scatter and reduce with op SUM only (BAD_FLAGS
    #: otherwise)
    NULL = 1 << 1
    #: Flags this engine accepts; any other bit set gives a BAD_FLAGS completion.
    SUPPORTED = IN_PLACE | NULL


#: Width of the count lane (contributions reduced into a datum, up to 512 ranks): the ``count`` of packet
#: headers and the ``contributors`` of completions.
COUNT_BITS = 10


def descriptor_layout():
    """A collective command (``DESCRIPTOR_BYTES``). ``count`` is per rank as in NCCL (see docs/programs.md
    section 2); ``src``/``dst`` are byte addresses in NPU memory; ``cookie`` is returned in the completion."""
    return data.StructLayout({
        "collective": unsigned(8),   # Collective code
        "algorithm": unsigned(8),    # Algorithm code, 0 = the program loaded for this collective
        "dtype": unsigned(8),        # DType code
        "op": unsigned(8),           # ReduceOp code
        "flags": unsigned(8),        # DescFlags
        "comm": unsigned(8),         # communicator id
        "root": unsigned(16),        # root rank of broadcast / reduce
        "tag": unsigned(32),         # carried in every packet header (low 16 bits) and the completion
        "count": unsigned(32),       # elements per rank
        "src": unsigned(64),
        "dst": unsigned(64),
        "cookie": unsigned(64),
        "reserved": unsigned(192),
    })


def completion_layout():
    """A completion record (``COMPLETION_BYTES``), written to the completion ring when a command finishes or is
    rejected. ``status`` is a :class:`~syncfabric.sim.golden.types.Status`; ``detail`` says which check failed
    or which step faulted; ``cycles`` from descriptor fetch to completion; ``seq`` counts completions from 1
    (the driver's validity check: a zeroed ring slot has seq 0); ``contributors`` is the count lane of the
    command's output: the smallest count any of its STOREs carried, i.e. how many ranks contributed a
    non-null input to every element this rank received (the group size for an all-reduce without null
    contributions; 0 when the rank stored nothing, and for a rejected command)."""
    return data.StructLayout({
        "cookie": unsigned(64),
        "tag": unsigned(32),
        "status": unsigned(8),
        "collective": unsigned(8),
        "sq_index": unsigned(16),
        "cycles": unsigned(32),
        "detail": unsigned(32),
        "seq": unsigned(32),
        "contributors": unsigned(16),
        "reserved": unsigned(16),
    })


# -- link ---------------------------------------------------------------------------------------------------

def packet_header_layout():
    """The header of a link packet. It travels on the link's header lanes beside the packet's first flit (a
    sideband, like AXI-Stream TUSER), so the payload flits carry only payload. ``vc`` is the FSM (virtual
    channel) whose landing buffer the message goes to; ``length`` is the whole message's payload bytes and
    ``offset`` the byte offset of this packet's payload in it; ``last`` marks the message's last packet;
    ``poison`` says the payload derives from data that failed a check upstream (CRC, header mismatch), so every
    rank the error reaches reports it instead of completing with wrong data; ``count`` is the message's count
    lane: how many ranks' non-null contributions the payload holds (docs/programs.md); ``put`` marks a deposit
    (a PUT step's message, taken by the receiver's deposit unit instead of a RECV); ``op`` and ``dtype`` are
    the sending rank's command's reduction operator and element type, which the receiving RECV checks against
    its own command (``Status.MISMATCH``); ``final`` says the message belongs to its command's final chunk, so
    a rank whose command has another element count (hence another chunk count, or other lengths) is told
    apart by its header as well (``Status.MISMATCH``). The header fits the ``HEADER_CRC_BYTES`` its CRC covers
    (128 bits: this one uses all of them)."""
    return data.StructLayout({
        "dst": unsigned(9),
        "src": unsigned(9),
        "vc": unsigned(5),
        "tag": unsigned(16),
        "chunk": unsigned(16),
        "phase": unsigned(3),
        "key": unsigned(12),
        "length": unsigned(20),
        "offset": unsigned(20),
        "last": unsigned(1),
        "poison": unsigned(1),
        "count": unsigned(COUNT_BITS),
        "put": unsigned(1),
        "op": OP_SHAPE,
        "dtype": DTYPE_SHAPE,
        "final": unsigned(1),
    })


#: The CRC of a packet covers its header zero-extended to this many bytes, then every payload flit in full
#: (the transmitter zeroes the bytes of a message's last flit beyond its length).
HEADER_CRC_BYTES = 16


#: Bits of a link packet's sequence number (link-level retransmission, docs/engine.md section 15).
SEQ_BITS = 12


def flit_layout(beat_bytes=64):
    """One link flit: a beat of payload, the packet header (meaningful on the first flit of a packet), the
    first/last markers, the packet's CRC-32 (meaningful on the last flit) and the packet's link sequence number
    ``seq`` (on every flit of the packet; 0 on links without retransmission; the CRC covers it). A header-only
    packet (an empty message) is one flit with ``first`` and ``last`` set and no payload."""
    return data.StructLayout({
        "data": unsigned(8 * beat_bytes),
        "hdr": packet_header_layout(),
        "first": unsigned(1),
        "last": unsigned(1),
        "crc": unsigned(32),
        "seq": unsigned(SEQ_BITS),
    })


#: Bits of a landing channel number (credit layout): ``vc + n_fsms * source``.
CHANNEL_BITS = 14


def credit_layout():
    """One cycle of the credit return path (receiver -> transmitter): at most one landing-buffer beat and one
    message-header entry freed, each with its landing channel. On point-to-point links the channel is the
    virtual channel (FSM). Through a switch the receiver names channel ``vc + n_fsms * source`` and the switch
    hands the credit to ``source`` as channel ``vc + n_fsms * receiver`` (the transmitter keeps credits per
    destination and virtual channel).

    The same path carries the link-level retransmission's acknowledgements (point-to-point links only):
    ``ack`` says the receiver has every packet up to sequence number ``ack_seq``; ``nak`` says it has every
    packet before ``ack_seq`` and wants the transmitter to send again from ``ack_seq`` on."""
    return data.StructLayout({
        "beat": unsigned(1),
        "beat_vc": unsigned(CHANNEL_BITS),
        "hdr": unsigned(1),
        "hdr_vc": unsigned(CHANNEL_BITS),
        "ack": unsigned(1),
        "nak": unsigned(1),
        "ack_seq": unsigned(SEQ_BITS),
    })


def pack_bytes(layout, fields, nbytes=None):
    """``fields`` packed into ``layout`` as little-endian bytes (``nbytes`` long, default the layout's size)."""
    n = nbytes if nbytes is not None else (layout.size + 7) // 8
    return pack(layout, fields).to_bytes(n, "little")


def unpack_bytes(layout, raw):
    """Inverse of :func:`pack_bytes`."""
    return unpack(layout, int.from_bytes(bytes(raw), "little"))


# -- program table ------------------------------------------------------------------------------------------

#: Phases a program may have (the torus all-reduce has 4).
MAX_PHASES = 4
#: Bits of a program entry's ``load_mask`` (slots filled by the prefetched LOADs; slots beyond are not tracked).
LOAD_MASK_BITS = 64


def program_entry_layout():
    """One program table entry: which program (in the instruction memory) runs a collective on a communicator.
    ``phase_start``/``phase_len`` locate each phase's steps in the instruction memory (a chunk leaves its FSM
    for the terminal partition after the last step; its STOREs were posted to the RX DMA as the FSM met them);
    ``load_end`` the number of LOADs at the head of the first phase, which
    the TX DMA prefetches as soon as the chunk has a buffer (the FSM starts after them), and ``load_mask`` the
    slots they fill (a step using such a slot waits until its LOAD is done); ``arrivals`` the deposits (PUT
    messages) the rank receives per chunk. Written by the driver from a golden
    :class:`~syncfabric.sim.golden.program.Program` (``syncfabric.host.programs``)."""
    return data.StructLayout({
        "valid": unsigned(1),
        "comm": unsigned(4),
        "collective": unsigned(4),
        "algorithm": unsigned(4),
        "n_phases": unsigned(3),
        "n_blocks": unsigned(11),
        "n_slots": unsigned(11),
        "segments": unsigned(10),
        "root": unsigned(9),
        "load_end": unsigned(11),
        "load_mask": unsigned(LOAD_MASK_BITS),
        "phase_start": data.ArrayLayout(unsigned(10), MAX_PHASES),
        "phase_len": data.ArrayLayout(unsigned(11), MAX_PHASES),
        "arrivals": unsigned(10),
    })
