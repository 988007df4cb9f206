"""Bit-exact element-wise reduction: the arithmetic every ALU in syncfabric must reproduce.

Rules (the RTL in :mod:`syncfabric.hdl.alu` implements exactly these; ``docs/arithmetic.md`` repeats them):

Floating point (fp32, fp16, bf16)
  * ``sum`` is IEEE 754 addition, rounded to nearest, ties to even. Subnormal inputs and results are kept
    (no flush to zero). A finite sum whose rounded magnitude exceeds the largest finite value becomes
    infinity of the same sign.
  * An exact zero sum is ``+0``, except ``(-0) + (-0) = -0`` (IEEE default rounding).
  * NaN: if either operand is NaN, or the operands are infinities of opposite sign, the result is the
    *canonical NaN* of the format (positive, quiet bit set, zero payload: fp32 ``0x7fc00000``, fp16
    ``0x7e00``, bf16 ``0x7fc0``). Payloads are not propagated, so the result never depends on operand order.
  * ``max``/``min`` propagate NaN the same way (canonical NaN if either operand is NaN, as IEEE 754-2019
    ``maximum``/``minimum``) and order ``-0 < +0``. Otherwise they return one operand unchanged (subnormals
    included).
  * Hence every operation is commutative bit for bit; none of the float sums is associative, so the order in
    which an algorithm combines partial results is part of its definition.

int32
  * ``sum`` wraps modulo 2**32 (two's complement); ``max``/``min`` compare signed.

Buffers are little-endian byte arrays (``numpy.uint8``), as they sit in NPU memory and on the links.
"""

import numpy as np

from .types import DType, ReduceOp, FLOAT_FORMATS, dtype_bytes

__all__ = ["reduce_bytes", "reduce_elements", "storage_dtype", "to_bytes", "from_bytes",
           "bf16_from_float32", "float32_from_bf16"]

_STORAGE = {DType.FP32: np.uint32, DType.FP16: np.uint16, DType.BF16: np.uint16, DType.INT32: np.uint32}


def storage_dtype(dtype):
    """The unsigned numpy integer type holding one element's bits."""
    return _STORAGE[DType(dtype)]


def to_bytes(bits):
    """Little-endian bytes of an array of element bit patterns (any numpy integer or float array)."""
    return np.ascontiguousarray(bits).astype(bits.dtype.newbyteorder("<"), copy=False).view(np.uint8).copy()


def from_bytes(data, dtype):
    """Element bit patterns (unsigned integers) of a little-endian byte buffer."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    size = dtype_bytes(dtype)
    if data.size % size:
        raise ValueError(f"buffer of {data.size} bytes is not a whole number of {DType(dtype).name} elements")
    return data.view(np.dtype(storage_dtype(dtype)).newbyteorder("<")).astype(storage_dtype(dtype))


def float32_from_bf16(bits):
    """float32 values of bf16 bit patterns (exact: bf16 is the top half of fp32)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def bf16_from_float32(values):
    """bf16 bit patterns of float32 values, rounded to nearest even (NaNs become the canonical NaN)."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(FLOAT_FORMATS[DType.BF16].canonical_nan), rounded)


def _is_nan(bits, fmt):
    exp = (bits >> fmt.frac_bits) & fmt.exp_max
    frac = bits & ((1 << fmt.frac_bits) - 1)
    return (exp == fmt.exp_max) & (frac != 0)


def _order_key(bits, fmt):
    """A signed integer key that orders finite and infinite floats, with -0 < +0."""
    bits = bits.astype(np.int64)
    mag = bits & ((1 << (fmt.width - 1)) - 1)
    neg = (bits >> (fmt.width - 1)) & 1
    return np.where(neg == 1, -mag - 1, mag)


def _float_sum(a, b, dtype):
    with np.errstate(all="ignore"):
        if dtype == DType.FP32:
            return (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
        if dtype == DType.FP16:
            # numpy adds halves in float32 and rounds once to half; float32 has 24 >= 2*11+2 bits, so the
            # double rounding is innocuous and the result is the correctly rounded half sum.
            return (a.view(np.float16) + b.view(np.float16)).view(np.uint16)
        # bf16: the float32 sum is exact or correctly rounded with 24 >= 2*8+2 bits; one more RNE to bf16.
        return bf16_from_float32(float32_from_bf16(a) + float32_from_bf16(b))


def reduce_elements(a, b, dtype, op):
    """Reduce two arrays of element bit patterns (unsigned integers of :func:`storage_dtype`)."""
    dtype, op = DType(dtype), ReduceOp(op)
    st = storage_dtype(dtype)
    a = np.asarray(a, dtype=st)
    b = np.asarray(b, dtype=st)
    if a.shape != b.shape:
        raise ValueError(f"operand shapes differ: {a.shape} vs {b.shape}")
    if dtype == DType.INT32:
        sa, sb = a.view(np.int32), b.view(np.int32)
        if op == ReduceOp.SUM:
            with np.errstate(over="ignore"):
                r = sa + sb
        elif op == ReduceOp.MAX:
            r = np.maximum(sa, sb)
        else:
            r = np.minimum(sa, sb)
        return r.view(np.uint32)
    fmt = FLOAT_FORMATS[dtype]
    if op == ReduceOp.SUM:
        r = _float_sum(a, b, dtype)
    else:
        ka, kb = _order_key(a, fmt), _order_key(b, fmt)
        pick_a = (ka >= kb) if op == ReduceOp.MAX else (ka <= kb)
        r = np.where(pick_a, a, b).astype(st)
    nan = _is_nan(r, fmt) | _is_nan(a, fmt) | _is_nan(b, fmt)
    return np.where(nan, st(fmt.canonical_nan), r).astype(st)


def reduce_bytes(a, b, dtype, op):
    """Element-wise reduction of two little-endian byte buffers of ``dtype`` elements; returns a new buffer."""
    a = np.asarray(a, dtype=np.uint8)
    b = np.asarray(b, dtype=np.uint8)
    if a.shape != b.shape:
        raise ValueError(f"buffers differ in length: {a.size} vs {b.size} bytes")
    return to_bytes(reduce_elements(from_bytes(a, dtype), from_bytes(b, dtype), dtype, op))
