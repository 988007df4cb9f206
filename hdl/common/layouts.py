"""Wire layouts shared by the RTL, the testbenches and the host driver.

Each layout is an ``amaranth.lib.data`` layout defined once here; testbenches and the driver pack and unpack
values with ``layout.const({...}).as_value().value`` and ``layout.from_bits(int)`` so they can never drift from
the RTL. Enumerated fields take their codes from :mod:`syncfabric.sim.golden.types`.
"""

from amaranth.hdl import Shape, unsigned
from amaranth.lib import data

from ...sim.golden.types import DType, ReduceOp

__all__ = ["DTYPE_SHAPE", "OP_SHAPE", "alu_operands_layout", "alu_result_layout", "pack", "unpack"]

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
