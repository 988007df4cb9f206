"""Stimulus and reference for the reduction ALU, shared by its cocotb testbench and its Amaranth unit tests.

Plain numpy (no cocotb, no simulator): :func:`random_operands` draws operand element pairs biased towards the
cases where adders go wrong, :func:`pack_elements` / :func:`unpack_elements` convert between element arrays and
the flat ``lanes`` x 32-bit operand vectors of :func:`~syncfabric.hdl.common.layouts.alu_operands_layout`, and
:func:`expected_data` is the golden result of one beat (:func:`~syncfabric.sim.golden.arith.reduce_elements`).
"""

import numpy as np

from ...sim.golden.arith import reduce_elements
from ...sim.golden.types import DType, ReduceOp, FLOAT_FORMATS, dtype_bytes

__all__ = ["COMBOS", "elements_per_beat", "pack_elements", "unpack_elements", "expected_data",
           "random_operands", "combo_name"]

#: Every (dtype, op) pair the ALU supports.
COMBOS = [(d, o) for d in DType for o in ReduceOp]


def combo_name(dtype, op):
    """``"fp16-max"`` style label of a (dtype, op) pair."""
    return f"{DType(dtype).name.lower()}-{ReduceOp(op).name.lower()}"


def elements_per_beat(dtype, lanes):
    """Elements of ``dtype`` in one ``lanes`` x 32-bit vector."""
    return lanes * 4 // dtype_bytes(dtype)


def _np_type(dtype):
    return np.dtype("<u4") if dtype_bytes(dtype) == 4 else np.dtype("<u2")


def pack_elements(elements, dtype):
    """The flat vector (an int) holding ``elements``: element ``k`` at bits ``[k*w, k*w+w)``."""
    return int.from_bytes(np.asarray(elements).astype(_np_type(dtype)).tobytes(), "little")


def unpack_elements(vector, dtype, lanes):
    """Element bit patterns (unsigned numpy array) of the flat ``lanes`` x 32-bit ``vector``."""
    raw = int(vector).to_bytes(4 * lanes, "little")
    return np.frombuffer(raw, dtype=_np_type(dtype)).astype(_np_type(dtype).newbyteorder("="))


def expected_data(a, b, dtype, op, lanes):
    """Golden output vector (an int) for operand vectors ``a`` and ``b`` (ints) of one beat."""
    return pack_elements(reduce_elements(unpack_elements(a, dtype, lanes), unpack_elements(b, dtype, lanes),
                                         dtype, op), dtype)


# ---- biased random operands ---------------------------------------------------------------------------------

def _float_elements(rng, fmt, n):
    """Float bit patterns: one class drawn per element, weighted to the edges of the format."""
    F, exp_max = fmt.frac_bits, fmt.exp_max
    frac_mask = (1 << F) - 1
    sign = rng.integers(0, 2, n, dtype=np.int64)
    exp = rng.integers(0, exp_max, n, dtype=np.int64)                 # any finite exponent
    frac = rng.integers(0, 1 << F, n, dtype=np.int64)
    kind = rng.choice(9, n, p=[0.36, 0.07, 0.12, 0.08, 0.08, 0.05, 0.04, 0.10, 0.10])
    exp = np.where(kind == 1, 0, exp)                                             # zero
    frac = np.where(kind == 1, 0, frac)
    exp = np.where(kind == 2, 0, exp)                                             # subnormal
    exp = np.where(kind == 3, rng.integers(1, 4, n), exp)                         # smallest normals
    exp = np.where(kind == 4, exp_max - rng.integers(1, 4, n), exp)               # largest normals
    exp = np.where(kind == 5, exp_max, exp)                                       # infinity
    frac = np.where(kind == 5, 0, frac)
    exp = np.where(kind == 6, exp_max, exp)                                       # NaN, any payload,
    frac = np.where(kind == 6, np.maximum(frac, 1), frac)                         # quiet or signalling
    edges = np.array([0, 1, 2, frac_mask, frac_mask - 1, 1 << (F - 1), (1 << (F - 1)) - 1, (1 << (F - 1)) + 1])
    frac = np.where(kind == 7, edges[rng.integers(0, len(edges), n)], frac)      # fraction edges
    exp = np.where(kind == 8, fmt.bias + rng.integers(-3, 4, n), exp)             # near 1.0
    return (sign << (fmt.width - 1)) | (exp << F) | frac


def _float_partners(rng, fmt, a, n):
    """Second operands: independent ones, or ones placed relative to ``a`` (cancellation, ties, gaps)."""
    F, exp_max = fmt.frac_bits, fmt.exp_max
    sign_bit = 1 << (fmt.width - 1)
    b = _float_elements(rng, fmt, n)
    a_sign, a_exp, a_frac = a & sign_bit, (a >> F) & exp_max, a & ((1 << F) - 1)
    rel = rng.choice(6, n, p=[0.40, 0.15, 0.10, 0.15, 0.10, 0.10])
    rsign = rng.integers(0, 2, n, dtype=np.int64) * sign_bit
    rfrac = rng.integers(0, 1 << F, n, dtype=np.int64)
    # 1: near cancellation: -a give or take a few ulps (same exponent, opposite sign).
    near = (a ^ sign_bit) + rng.integers(-3, 4, n)
    b = np.where((rel == 1) & (a_exp < exp_max) & (near >= 0) & (near < (1 << fmt.width)), near, b)
    # 2: exactly -a or a (x - x = +0, x + x carries).
    b = np.where(rel == 2, a ^ (rng.integers(0, 2, n, dtype=np.int64) * sign_bit), b)
    # 3: exponent within 2 of a's: alignment by 0..2 bits, where subtraction cancels most.
    e = np.clip(a_exp + rng.integers(-2, 3, n), 0, exp_max - 1)
    b = np.where(rel == 3, rsign | (e << F) | rfrac, b)
    # 4: exponent gap just below, at and beyond the fraction width (everything goes into the sticky bit).
    e = a_exp - (F + rng.integers(-1, 5, n))
    b = np.where((rel == 4) & (e >= 0), rsign | (np.maximum(e, 0) << F) | rfrac * rng.integers(0, 2, n), b)
    # 5: a tie: b is exactly half an ulp of a (fraction 0), so the sum sits midway between two floats.
    e = a_exp - F - 1
    b = np.where((rel == 5) & (e >= 1), rsign | (np.maximum(e, 0) << F), b)
    return b


def _int_elements(rng, n):
    specials = np.array([0, 1, 2, 0x7FFFFFFF, 0x7FFFFFFE, 0x80000000, 0x80000001, 0xFFFFFFFF, 0xFFFFFFFE],
                        dtype=np.int64)
    v = rng.integers(0, 1 << 32, n, dtype=np.int64)
    kind = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    v = np.where(kind == 1, specials[rng.integers(0, len(specials), n)], v)
    v = np.where(kind == 2, rng.integers(-100, 100, n) & 0xFFFFFFFF, v)
    return v


def random_operands(rng, dtype, n):
    """Two arrays of ``n`` element bit patterns of ``dtype`` (unsigned numpy), biased to the hard cases:
    zeros, subnormals, smallest and largest normals, infinities, NaNs with any payload and sign, fraction
    edges, near-cancellation, exact negation, small and large exponent gaps, ties; int32 extremes.
    """
    dtype = DType(dtype)
    if dtype == DType.INT32:
        a = _int_elements(rng, n)
        b = _int_elements(rng, n)
        neg = rng.random(n) < 0.1
        b = np.where(neg, (-a) & 0xFFFFFFFF, b)
        return a.astype(np.uint32), b.astype(np.uint32)
    fmt = FLOAT_FORMATS[dtype]
    a = _float_elements(rng, fmt, n)
    b = _float_partners(rng, fmt, a, n)
    swap = rng.random(n) < 0.5          # the relative cases above are built from a: mix the order
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    st = np.uint32 if fmt.width == 32 else np.uint16
    return a.astype(st), b.astype(st)
