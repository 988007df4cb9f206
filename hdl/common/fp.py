"""Floating-point datapath pieces shared by every reduction unit: a pipelined adder and a max/min selector.

Both are generated from the exponent and fraction widths, so fp32 (e8m23), fp16 (e5m10) and bf16 (e8m7) come
from one description. The arithmetic is the one fixed by :mod:`syncfabric.sim.golden.arith`: IEEE 754 addition
rounded to nearest, ties to even; subnormal inputs and results kept; overflow to infinity; the canonical NaN
(positive, quiet, zero payload) for any NaN operand and for ``inf - inf``; ``+0`` for an exact zero sum unless
both operands are ``-0``; max/min return one operand unchanged, order ``-0 < +0`` and turn any NaN into the
canonical NaN.

:class:`FloatAdder` is a single-path adder split into five stages, all advanced by one shared enable so a
pipeline that stalls keeps every stage in place. S1-S4 end in registers; S5 is combinational so that the user
can put its own selection logic (the ALU's dtype/op mux) in front of the one register that ends S5. Each stage
is about 20-30 cells deep, for a 1 GHz clock in 45 nm:

====  ====================================================================================================
S1    unpack (hidden bit; a subnormal's exponent counts as 1), magnitude compare and swap so that
      ``|big| >= |small|``, exponent difference, effective operation, special cases (NaN, infinity, zero
      sign) decided here and carried alongside the datapath
S2    align ``small`` by the exponent difference keeping guard, round and sticky bits, then add or subtract
S3    normalise: carry-out -> shift right by one; otherwise count leading zeros (log-depth tree) and shift
      left by ``min(lz, exponent - 1)`` so the exponent never drops below 1 (subnormal results fall out)
S4    round to nearest even on the packed ``{exponent, fraction}`` integer (a carry out of the fraction
      renormalises a full significand and turns a subnormal into a normal)
S5    overflow to infinity, pack, then override with the special result
====  ====================================================================================================

Why guard/round/sticky suffice: when the exponent difference is at most 1 the alignment is exact; when it is
2 or more the result needs at most a one-bit left shift, after which the guard bit and ``round | sticky``
decide the rounding exactly (the sticky bit takes part in the subtraction, so the borrow is right).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatAdder", "leading_zeros", "float_is_nan", "float_order_key", "float_max_min", "float_pick",
           "float_select", "canonical_nan"]


def canonical_nan(exp_bits, frac_bits):
    """The one NaN the engine produces: positive, exponent all ones, quiet bit set, zero payload."""
    return (((1 << exp_bits) - 1) << frac_bits) | (1 << (frac_bits - 1))


def float_is_nan(value, exp_bits, frac_bits):
    """1 when the float bit pattern ``value`` is a NaN (exponent all ones, fraction non-zero)."""
    return (value[frac_bits:frac_bits + exp_bits] == (1 << exp_bits) - 1) & (value[:frac_bits] != 0)


def float_order_key(value, width):
    """An unsigned key that orders sign-magnitude floats (infinities included) with ``-0 < +0``.

    Positive values get the sign bit set (they sort above every negative one); negative values are inverted
    so a larger magnitude sorts lower. ``-0`` maps to ``0111..1`` and ``+0`` to ``1000..0``.
    """
    value = value[:width]
    sign = value[width - 1]
    return Mux(sign, ~value, value | (1 << (width - 1)))[:width]


def float_pick(a, b, exp_bits, frac_bits, is_max):
    """The decisions of :func:`float_max_min`: ``(pick_a, nan)``, whether the max (``is_max`` = 1) or min is
    ``a`` and whether either operand is a NaN; :func:`float_select` makes the result from them (a pipeline
    may register them in between)."""
    width = 1 + exp_bits + frac_bits
    ka, kb = float_order_key(a, width), float_order_key(b, width)
    pick_a = Mux(is_max, ka >= kb, ka <= kb)
    nan = float_is_nan(a, exp_bits, frac_bits) | float_is_nan(b, exp_bits, frac_bits)
    return pick_a, nan


def float_select(a, b, exp_bits, frac_bits, pick_a, nan):
    """The max/min of :func:`float_pick`'s decisions: the canonical NaN, or ``a`` or ``b`` unchanged."""
    width = 1 + exp_bits + frac_bits
    return Mux(nan, canonical_nan(exp_bits, frac_bits), Mux(pick_a, a[:width], b[:width]))


def float_max_min(a, b, exp_bits, frac_bits, is_max):
    """Combinational max (``is_max`` = 1) or min of two float bit patterns, as the golden model defines it:
    one operand unchanged, ``-0 < +0``, and the canonical NaN when either operand is a NaN.
    """
    return float_select(a, b, exp_bits, frac_bits, *float_pick(a, b, exp_bits, frac_bits, is_max))


def leading_zeros(value):
    """Number of leading zeros of ``value`` (its width when it is zero), as a log-depth priority tree.

    The value is padded on the right to a power of two; the pad bits are ones, so the count saturates at the
    original width without a separate all-zero test.
    """
    width = len(value)
    size = 1
    while size < width:
        size *= 2
    padded = Cat(Const((1 << (size - width)) - 1, size - width), value) if size > width else value

    def tree(bits):
        # Returns (count, all_zero) for ``bits``; count has log2(len(bits)) bits.
        n = len(bits)
        if n == 1:
            return Const(0, 0), ~bits[0]
        lo_count, lo_zero = tree(bits[:n // 2])
        hi_count, hi_zero = tree(bits[n // 2:])
        count = Mux(hi_zero, Cat(lo_count, Const(1, 1)), Cat(hi_count, Const(0, 1)))
        return count, hi_zero & lo_zero

    count, _ = tree(padded)
    return count


class FloatAdder(wiring.Component):
    """Pipelined IEEE adder for a binary float format with ``exp_bits`` / ``frac_bits``.

    Ports: ``a``, ``b`` (operand bit patterns), ``en`` (advance every stage by one), ``result`` (the sum of the
    operands presented :attr:`latency` enabled cycles earlier). ``result`` is combinational (the packing
    stage S5) from the fourth register stage: the user registers it, usually after a selection mux, which
    makes the adder a five-stage pipeline. There is no valid bit: the caller tracks which stages hold real
    data, which keeps the adder reusable inside any pipeline.

    ``fabric`` adds two register stages for an FPGA's LUTs and carry chains, where each of the 45 nm stages
    is 15-17 ns on an ECP5: S2 registers the aligned operand before the add, S3 the clamped leading-zero
    count before the shift (:attr:`latency` 6 instead of 4; the same results).
    """

    #: Register stages (enabled clock cycles) from operands to the combinational ``result``.
    latency = 4

    @staticmethod
    def latency_for(fabric=False):
        """Register stages of an adder built with ``fabric`` (two more: see the class docstring)."""
        return FloatAdder.latency + (2 if fabric else 0)

    def __init__(self, exp_bits, frac_bits, fabric=False):
        if exp_bits < 2 or frac_bits < 1:
            raise ValueError(f"unsupported float format e{exp_bits}m{frac_bits}")
        self.exp_bits = exp_bits
        self.frac_bits = frac_bits
        self.fabric = bool(fabric)
        self.latency = self.latency_for(self.fabric)
        self.width = 1 + exp_bits + frac_bits
        super().__init__({
            "a": In(self.width),
            "b": In(self.width),
            "en": In(1),
            "result": Out(self.width),
        })

    def elaborate(self, platform):
        m = Module()
        E, F = self.exp_bits, self.frac_bits
        W = F + 1                 # significand with its hidden bit
        exp_max = (1 << E) - 1

        def stage(name, value):
            """A pipeline register for ``value``, loaded when the pipeline advances. Datapath registers
            need no reset (the caller's valid bits say what they hold), which saves a mux per flop."""
            reg = Signal(value.shape(), name=name, reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- S1: unpack, order by magnitude, exponent difference, specials --------------------------------
        a, b = self.a, self.b
        sign_a, sign_b = a[-1], b[-1]
        exp_a, exp_b = a[F:F + E], b[F:F + E]
        nan_a, nan_b = float_is_nan(a, E, F), float_is_nan(b, E, F)
        inf_a = (exp_a == exp_max) & (a[:F] == 0)
        inf_b = (exp_b == exp_max) & (b[:F] == 0)
        # Comparing {exponent, fraction} as unsigned integers orders magnitudes, subnormals included.
        swap = b[:-1] > a[:-1]
        big = Mux(swap, b, a)
        small = Mux(swap, a, b)
        big_exp_field, small_exp_field = big[F:F + E], small[F:F + E]
        big_normal, small_normal = big_exp_field != 0, small_exp_field != 0
        # A subnormal has the exponent of the smallest normal number and no hidden bit.
        big_exp = Mux(big_normal, big_exp_field, 1)
        # The exponent difference (never negative: |big| >= |small|) both ways from the operands' own
        # exponents, beside the magnitude compare, which only picks one: the compare and the subtract run in
        # parallel instead of one behind the other.
        eff_a, eff_b = Mux(exp_a != 0, exp_a, 1), Mux(exp_b != 0, exp_b, 1)
        s1_diff = Mux(swap, (eff_b - eff_a)[:E], (eff_a - eff_b)[:E])
        s1 = {
            "sign": stage("s1_sign", big[-1]),
            "exp": stage("s1_exp", big_exp),
            "big_sig": stage("s1_big_sig", Cat(big[:F], big_normal)),
            "small_sig": stage("s1_small_sig", Cat(small[:F], small_normal)),
            "diff": stage("s1_diff", s1_diff),
            "sub": stage("s1_sub", sign_a ^ sign_b),
            # inf - inf and any NaN give the canonical NaN; otherwise an infinite operand is |big| and wins.
            "nan": stage("s1_nan", nan_a | nan_b | (inf_a & inf_b & (sign_a ^ sign_b))),
            "inf": stage("s1_inf", inf_a | inf_b),
            # An exact zero sum is -0 only for (-0) + (-0).
            "zero_sign": stage("s1_zero_sign", sign_a & sign_b),
        }

        # ---- S2: align and add ---------------------------------------------------------------------------
        # {small significand, guard, round} shifted right by the exponent difference (a difference of ext or
        # more leaves nothing). The sticky bit - the OR of the significand bits shifted below the round bit,
        # bit j when diff > j + 2 - comes from the unshifted significand and a mask (ones shifted left by the
        # difference: a decoder once the constant folds in), beside the shifter: neither a clamp of the amount
        # nor an OR after the shift lies between the registers and the add. (Per-bit compares with the
        # difference did as well at 45 nm but cost an fp32 adder 14 LUTs and 51 carry cells on the ECP5; the
        # mask saves 32 LUTs and 3 carry cells against the clamp-and-OR.)
        ext = W + 2
        diff, small_sig = s1["diff"], s1["small_sig"]
        high = (Cat(Const(0, 2), small_sig) >> diff)[:ext]
        below = (Const((1 << (W + 3)) - 1, W + 3) << diff)[:W + 3]      # bit k: k >= diff
        sticky = (small_sig & ~below[2:W + 2]).any()
        aligned = Cat(sticky, high)                               # W + 3 bits: sig, guard, round, sticky
        big_ext = Cat(Const(0, 3), s1["big_sig"])                 # W + 3 bits
        s1x = s1
        if self.fabric:                       # the aligned operand registered before the add
            s1x = {k: stage(f"s2a_{k}", s1[k]) for k in ("sign", "exp", "nan", "inf", "zero_sign", "sub")}
            aligned, big_ext = stage("s2a_aligned", aligned), stage("s2a_big", big_ext)
        total = Mux(s1x["sub"], big_ext - aligned, big_ext + aligned)[:W + 4]   # bit W+3 = carry out
        s2 = {k: stage(f"s2_{k}", s1x[k]) for k in ("sign", "exp", "nan", "inf", "zero_sign")}
        s2["sum"] = stage("s2_sum", total)

        # ---- S3: normalise ---------------------------------------------------------------------------------
        ssum = s2["sum"]
        carry = ssum[W + 3]
        # Carry out: shift right by one, folding the two lowest bits into the new sticky bit.
        right = Cat(ssum[0] | ssum[1], ssum[2:W + 4])
        low = ssum[:W + 3]
        lz = leading_zeros(low)
        # Shift left no further than exponent 1: what is then left without a hidden bit is a subnormal.
        limit = (s2["exp"] - 1)[:E]
        zero = ssum == 0
        s2x = s2
        amount = Mux(lz > limit, limit, lz)
        if self.fabric:                       # the clamped shift amount registered before the shift
            s2x = {k: stage(f"s3a_{k}", s2[k]) for k in ("sign", "exp", "nan", "inf", "zero_sign")}
            amount, zero = stage("s3a_amount", amount), stage("s3a_zero", zero)
            carry, right, low = stage("s3a_carry", carry), stage("s3a_right", right), stage("s3a_low", low)
        left = (low << amount)[:W + 3]
        s3 = {k: stage(f"s3_{k}", s2x[k]) for k in ("sign", "nan", "inf", "zero_sign")}
        s3["norm"] = stage("s3_norm", Mux(carry, right, left))
        # One spare exponent bit so the carry case can reach exp_max (or beyond) and be seen as overflow.
        s3["exp"] = stage("s3_exp", Mux(carry, s2x["exp"] + 1, s2x["exp"] - amount)[:E + 1])
        s3["zero"] = stage("s3_zero", zero)

        # ---- S4: round ---------------------------------------------------------------------------------------
        norm = s3["norm"]                     # bits: [W+2] hidden, [3:W+2] fraction, [2] guard, [0:2] rest
        hidden = norm[W + 2]
        guard = norm[2]
        sticky = norm[0] | norm[1]
        lsb = norm[3]
        round_up = guard & (sticky | lsb)
        exp_field = Mux(hidden, s3["exp"], 0)
        # Rounding on the packed integer: a fraction carry bumps the exponent, which is exactly the
        # renormalisation of 1.11..1 + ulp and the step from the largest subnormal to the smallest normal.
        s4 = {k: stage(f"s4_{k}", s3[k]) for k in ("sign", "nan", "inf", "zero", "zero_sign")}
        # The increment as a parallel prefix (bit i flips when every bit below it is one): a log-depth AND
        # tree per bit, where the adder ABC made of ``+ round_up`` rippled (35 levels, 1.25 ns at 45 nm).
        unrounded = Cat(norm[3:W + 2], exp_field)
        rounded = Cat(*(unrounded[i] ^ (round_up & (unrounded[:i].all() if i else 1))
                        for i in range(F + E + 1)))
        s4["packed"] = stage("s4_packed", rounded)

        # ---- S5: overflow, pack, specials ---------------------------------------------------------------------
        packed = s4["packed"]
        overflow = packed[F:] >= exp_max
        finite = Mux(overflow, exp_max << F, packed[:F + E])
        with m.If(s4["nan"]):
            m.d.comb += self.result.eq(canonical_nan(E, F))
        with m.Elif(s4["inf"]):
            m.d.comb += self.result.eq(Cat(Const(exp_max << F, E + F), s4["sign"]))
        with m.Elif(s4["zero"]):
            m.d.comb += self.result.eq(Cat(Const(0, E + F), s4["zero_sign"]))
        with m.Else():
            m.d.comb += self.result.eq(Cat(finite, s4["sign"]))
        return m
