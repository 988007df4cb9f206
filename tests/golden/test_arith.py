"""The golden reduction against an exact rational reference and the documented special cases."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from syncfabric.sim.golden.arith import (reduce_bytes, reduce_elements, to_bytes, from_bytes,
                                         bf16_from_float32)
from syncfabric.sim.golden.types import DType, ReduceOp, FLOAT_FORMATS

FLOATS = [DType.FP32, DType.FP16, DType.BF16]


def decode(bits, fmt):
    """Exact value of a finite float bit pattern as a Fraction (None for inf/NaN)."""
    sign = -1 if bits >> (fmt.width - 1) else 1
    exp = (bits >> fmt.frac_bits) & fmt.exp_max
    frac = bits & ((1 << fmt.frac_bits) - 1)
    if exp == fmt.exp_max:
        return None
    if exp == 0:
        return sign * Fraction(frac, 1 << fmt.frac_bits) * Fraction(2) ** (1 - fmt.bias)
    return sign * (1 + Fraction(frac, 1 << fmt.frac_bits)) * Fraction(2) ** (exp - fmt.bias)


def encode_rne(value, fmt, negative_zero=False):
    """Round an exact Fraction to the format with ties-to-even, subnormals and overflow to infinity."""
    sign = 0
    if value < 0 or (value == 0 and negative_zero):
        sign = 1
    mag = abs(value)
    if mag == 0:
        return sign << (fmt.width - 1)
    # Quantum of the binade holding mag (subnormal binade shares the quantum of the smallest normal one).
    e = max(mag.numerator.bit_length() - mag.denominator.bit_length(), 1 - fmt.bias)
    while Fraction(2) ** e > mag:
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    e = max(e, 1 - fmt.bias)
    quantum = Fraction(2) ** (e - fmt.frac_bits)
    q, r = divmod(mag, quantum)
    q = int(q)
    if r > quantum / 2 or (r == quantum / 2 and q & 1):
        q += 1
    # q is the significand in units of the quantum; it may have carried into the next binade.
    if q >= (2 << fmt.frac_bits):
        q >>= 1
        e += 1
    if e > fmt.bias:
        return (sign << (fmt.width - 1)) | fmt.inf
    if q < (1 << fmt.frac_bits):  # subnormal
        return (sign << (fmt.width - 1)) | q
    return (sign << (fmt.width - 1)) | ((e + fmt.bias) << fmt.frac_bits) | (q - (1 << fmt.frac_bits))


def reference_sum(a, b, fmt):
    va, vb = decode(a, fmt), decode(b, fmt)
    if va is None or vb is None:
        return None
    both_neg_zero = va == 0 and vb == 0 and (a >> (fmt.width - 1)) and (b >> (fmt.width - 1))
    return encode_rne(va + vb, fmt, negative_zero=both_neg_zero)


def finite_bits(fmt):
    """Bit patterns of finite values, biased towards exponent edges (subnormals, huge, close exponents)."""
    exp = st.one_of(st.integers(0, fmt.exp_max - 1), st.sampled_from([0, 1, 2, fmt.exp_max - 1, fmt.exp_max - 2]))
    frac = st.one_of(st.integers(0, (1 << fmt.frac_bits) - 1),
                     st.sampled_from([0, 1, (1 << fmt.frac_bits) - 1, 1 << (fmt.frac_bits - 1)]))
    return st.builds(lambda s, e, f: (s << (fmt.width - 1)) | (e << fmt.frac_bits) | f,
                     st.integers(0, 1), exp, frac)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name.lower())
def test_float_sum_matches_exact_rounding(dtype):
    fmt = FLOAT_FORMATS[dtype]

    @settings(max_examples=1500, deadline=None)
    @given(finite_bits(fmt), finite_bits(fmt), st.booleans())
    def check(a, b, near):
        if near:  # operands of close magnitude and opposite sign exercise cancellation
            b = (a ^ (1 << (fmt.width - 1))) + (b & 7) if (a & ((1 << (fmt.width - 1)) - 1)) < fmt.inf - 8 else b
        got = int(reduce_elements(np.array([a]), np.array([b]), dtype, ReduceOp.SUM)[0])
        assert got == reference_sum(a, b, fmt), f"{dtype.name}: {a:#x} + {b:#x} -> {got:#x}"

    check()


def test_float_sum_exhaustive_fp16_pairs_sample():
    # A dense deterministic sweep over fp16: every exponent pair with a few fractions each.
    fmt = FLOAT_FORMATS[DType.FP16]
    vals = []
    for s in (0, 1):
        for e in range(fmt.exp_max):
            for f in (0, 1, 0x155, 0x200, 0x3FF):
                vals.append((s << 15) | (e << 10) | f)
    a = np.array(vals, dtype=np.uint16).repeat(len(vals))
    b = np.tile(np.array(vals, dtype=np.uint16), len(vals))
    got = reduce_elements(a, b, DType.FP16, ReduceOp.SUM)
    rng = np.random.default_rng(1)
    for i in rng.choice(a.size, 4000, replace=False):
        assert int(got[i]) == reference_sum(int(a[i]), int(b[i]), fmt)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name.lower())
def test_float_special_cases(dtype):
    fmt = FLOAT_FORMATS[dtype]
    sign = 1 << (fmt.width - 1)
    pz, nz, inf, ninf, nan = 0, sign, fmt.inf, sign | fmt.inf, fmt.canonical_nan
    snan = fmt.inf | 1                       # signalling NaN with a payload
    one = fmt.bias << fmt.frac_bits
    big = ((fmt.exp_max - 1) << fmt.frac_bits) | ((1 << fmt.frac_bits) - 1)   # largest finite
    sub = 1                                  # smallest subnormal

    def r(op, a, b):
        return int(reduce_elements(np.array([a]), np.array([b]), dtype, op)[0])

    S, MX, MN = ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN
    assert r(S, pz, nz) == pz and r(S, nz, pz) == pz
    assert r(S, nz, nz) == nz
    assert r(S, one, one | sign) == pz                     # x + (-x) = +0
    assert r(S, inf, ninf) == nan and r(S, ninf, inf) == nan
    assert r(S, inf, one) == inf and r(S, ninf, one) == ninf
    assert r(S, big, big) == inf and r(S, big | sign, big | sign) == ninf    # overflow
    assert r(S, sub, sub) == 2                               # subnormals kept
    assert r(S, sub | sign, sub) == pz
    assert r(S, snan, one) == nan and r(S, one, snan | sign) == nan
    for op in (MX, MN):
        assert r(op, nan, one) == nan and r(op, one, snan) == nan
    assert r(MX, pz, nz) == pz and r(MX, nz, pz) == pz
    assert r(MN, pz, nz) == nz and r(MN, nz, pz) == nz
    assert r(MX, sub, pz) == sub and r(MN, sub | sign, nz) == sub | sign
    assert r(MX, ninf, big | sign) == big | sign and r(MN, inf, big) == big


def test_ties_to_even():
    one32 = 0x3F800000
    # 1 + 2^-24 is exactly halfway between 1 and 1+2^-23: ties to even keeps 1.
    assert int(reduce_elements(np.array([one32]), np.array([0x33800000]), DType.FP32, ReduceOp.SUM)[0]) == one32
    # (1+2^-23) + 2^-24 is halfway between two values; the even one is 1+2^-22.
    assert int(reduce_elements(np.array([one32 + 1]), np.array([0x33800000]), DType.FP32, ReduceOp.SUM)[0]) \
        == one32 + 2
    # bf16: 1 + 2^-8 ties to 1; fp16: 1 + 2^-11 ties to 1.
    assert int(reduce_elements(np.array([0x3F80]), np.array([0x3B80]), DType.BF16, ReduceOp.SUM)[0]) == 0x3F80
    assert int(reduce_elements(np.array([0x3C00]), np.array([0x1000]), DType.FP16, ReduceOp.SUM)[0]) == 0x3C00


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=64), st.data())
def test_int32_wraps_and_compares_signed(xs, data):
    ys = data.draw(st.lists(st.integers(-2**31, 2**31 - 1), min_size=len(xs), max_size=len(xs)))
    a = np.array(xs, dtype=np.int32).view(np.uint32)
    b = np.array(ys, dtype=np.int32).view(np.uint32)
    s = reduce_elements(a, b, DType.INT32, ReduceOp.SUM).view(np.int32)
    assert [int(v) for v in s] == [((x + y + 2**31) % 2**32) - 2**31 for x, y in zip(xs, ys)]
    assert list(reduce_elements(a, b, DType.INT32, ReduceOp.MAX).view(np.int32)) == [max(x, y) for x, y in zip(xs, ys)]
    assert list(reduce_elements(a, b, DType.INT32, ReduceOp.MIN).view(np.int32)) == [min(x, y) for x, y in zip(xs, ys)]


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.name.lower())
@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda o: o.name.lower())
def test_commutative_bitwise(dtype, op):
    rng = np.random.default_rng(7)
    n = 20000
    width = 32 if dtype in (DType.FP32, DType.INT32) else 16
    a = rng.integers(0, 1 << width, n, dtype=np.uint64).astype(np.uint32 if width == 32 else np.uint16)
    b = rng.integers(0, 1 << width, n, dtype=np.uint64).astype(a.dtype)
    assert np.array_equal(reduce_elements(a, b, dtype, op), reduce_elements(b, a, dtype, op))


def test_byte_buffers_round_trip_and_errors():
    x = np.array([1.5, -2.25, 3e38], dtype=np.float32)
    raw = to_bytes(x.view(np.uint32))
    assert raw.dtype == np.uint8 and raw.size == 12
    assert np.array_equal(from_bytes(raw, DType.FP32).view(np.float32), x)
    s = reduce_bytes(raw, raw, DType.FP32, ReduceOp.SUM)
    assert np.array_equal(from_bytes(s, DType.FP32).view(np.float32),
                          np.array([3.0, -4.5, np.inf], dtype=np.float32))
    with pytest.raises(ValueError, match="differ in length"):
        reduce_bytes(raw, raw[:8], DType.FP32, ReduceOp.SUM)
    with pytest.raises(ValueError, match="whole number"):
        reduce_bytes(raw[:6], raw[:6], DType.FP32, ReduceOp.SUM)


def test_bf16_rounding_from_float32():
    assert int(bf16_from_float32(np.float32(1.0))) == 0x3F80
    assert int(bf16_from_float32(np.float32(np.nan))) == FLOAT_FORMATS[DType.BF16].canonical_nan
    big = np.array([0x7F7FFFFF], dtype=np.uint32).view(np.float32)       # fp32 max rounds up to bf16 inf
    assert int(bf16_from_float32(big)[0]) == 0x7F80


def test_dtype_and_op_names_parse_with_clear_errors():
    assert DType.parse("BF16") is DType.BF16 and ReduceOp.parse("max") is ReduceOp.MAX
    assert DType.parse(DType.INT32) is DType.INT32
    with pytest.raises(ValueError, match="unknown dtype 'fp8'; expected one of fp32, fp16, bf16, int32"):
        DType.parse("fp8")
    with pytest.raises(ValueError, match="unknown reduction op 'prod'"):
        ReduceOp.parse("prod")
