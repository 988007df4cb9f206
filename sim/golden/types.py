"""Element types and reduction operators: the codes shared by the RTL, the golden models and the driver.

This module is the single definition of these encodings. It is plain Python (no Amaranth, no numpy) so that
the golden models can use it; the RTL layouts in :mod:`syncfabric.hdl.common.layouts` take their field shapes
from these enums, and the host driver packs descriptors with the same values.
"""

import enum

__all__ = ["DType", "ReduceOp", "DTYPE_BYTES", "dtype_bytes"]


class _Parsable(enum.IntEnum):
    @classmethod
    def parse(cls, name):
        """Return the member named ``name`` (case-insensitive, e.g. ``"fp16"``, ``"sum"``) or the member itself,
        with a clear error listing the valid names otherwise."""
        if isinstance(name, cls):
            return name
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"unknown {cls._what} {name!r}; expected one of "
                             f"{', '.join(m.name.lower() for m in cls)}") from None


class DType(_Parsable):
    """Element type of a payload (2-bit code in descriptors and ALU beats)."""

    FP32 = 0
    FP16 = 1
    BF16 = 2
    INT32 = 3


class ReduceOp(_Parsable):
    """Element-wise reduction operator (2-bit code)."""

    SUM = 0
    MAX = 1
    MIN = 2


DType._what = "dtype"
ReduceOp._what = "reduction op"


DTYPE_BYTES = {DType.FP32: 4, DType.FP16: 2, DType.BF16: 2, DType.INT32: 4}


def dtype_bytes(dtype):
    """Size in bytes of one element of ``dtype``."""
    return DTYPE_BYTES[DType(dtype)]


class FloatFormat:
    """Bit layout of an IEEE-754-style binary floating-point format (sign, exponent, fraction)."""

    def __init__(self, name, exp_bits, frac_bits):
        self.name = name
        self.exp_bits = exp_bits
        self.frac_bits = frac_bits
        self.width = 1 + exp_bits + frac_bits
        self.bias = (1 << (exp_bits - 1)) - 1
        self.exp_max = (1 << exp_bits) - 1
        #: The one NaN the engine produces: positive, quiet bit set, zero payload.
        self.canonical_nan = (self.exp_max << frac_bits) | (1 << (frac_bits - 1))
        self.inf = self.exp_max << frac_bits

    def __repr__(self):
        return f"FloatFormat({self.name}, e{self.exp_bits}m{self.frac_bits})"


FLOAT_FORMATS = {
    DType.FP32: FloatFormat("fp32", 8, 23),
    DType.FP16: FloatFormat("fp16", 5, 10),
    DType.BF16: FloatFormat("bf16", 8, 7),
}

__all__ += ["FloatFormat", "FLOAT_FORMATS"]
