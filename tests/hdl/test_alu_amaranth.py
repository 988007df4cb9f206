"""ReductionAlu in Amaranth's simulator: hand-derived edge cases, flow control, random beats vs the golden model.

Every output element is compared with :func:`syncfabric.sim.golden.arith.reduce_elements`; the directed cases
also carry the expected bits worked out by hand, so a wrong table or a golden-model change shows up too.
Small lane counts keep the simulator fast (lanes only replicate the per-lane datapath); one test runs the
production width of 16 lanes. ``SEED=<n>`` replaces the random seeds.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from syncfabric.hdl.alu import ReductionAlu
from syncfabric.hdl.common.layouts import alu_operands_layout, pack
from syncfabric.sim.golden.types import DType, ReduceOp, FLOAT_FORMATS
from syncfabric.tb.alu import (COMBOS, combo_name, elements_per_beat, expected_data, pack_elements,
                               random_operands, unpack_elements)

from sim_helpers import seed_for

FLOATS = [DType.FP32, DType.FP16, DType.BF16]
SUM, MAX, MIN = ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN
#: Random beats per (dtype, op) in test_random_beats_match_golden.
RANDOM_BEATS = 2000


# ---- simulation helpers ---------------------------------------------------------------------------------------

def simulate(dut, beats, *, seed=0, valid_prob=1.0, ready_prob=1.0, max_cycles=None):
    """Stream ``beats`` (dicts with a, b, dtype, op, tag) through ``dut`` with random input gaps and random
    output backpressure; return the output beats as ``(data, tag)`` in arrival order.

    The sink also checks the stream rule that a presented output beat stays unchanged until it is taken.
    """
    rng_in, rng_out = random.Random(seed), random.Random(seed + 1)
    layout = alu_operands_layout(dut.lanes, dut.tag_width)
    packed = [pack(layout, {"tag": 0, **beat}) for beat in beats]    # one simulator write per beat
    outputs = []
    max_cycles = max_cycles or 10 * len(beats) / (valid_prob * ready_prob) + 100

    async def producer(ctx):
        for bits in packed:
            while rng_in.random() >= valid_prob:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.as_value(), bits)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        held = None          # an output beat seen but not taken: it must still be there next cycle
        cycles = 0
        while len(outputs) < len(beats):
            assert cycles < max_cycles, f"only {len(outputs)} of {len(beats)} beats after {cycles} cycles"
            ctx.set(dut.o.ready, rng_out.random() < ready_prob)
            _, _, valid, ready, data, tag = await ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload.data, dut.o.payload.tag)
            cycles += 1
            if held is not None:
                assert valid and (data, tag) == held, "a stalled output beat changed or vanished"
            held = None
            if valid and ready:
                outputs.append((data, tag))
            elif valid:
                held = (data, tag)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return outputs


def check_against_golden(dut, beats, outputs):
    """Assert every output beat equals the golden reduction of its input beat, in order, tags included."""
    assert len(outputs) == len(beats)
    for n, (beat, (data, tag)) in enumerate(zip(beats, outputs)):
        assert tag == beat.get("tag", 0), f"beat {n}: tag {tag} (expected {beat.get('tag', 0)}): order broken"
        want = expected_data(beat["a"], beat["b"], beat["dtype"], beat["op"], dut.lanes)
        if data != want:
            dt = DType(beat["dtype"])
            got_e, want_e = unpack_elements(data, dt, dut.lanes), unpack_elements(want, dt, dut.lanes)
            a_e, b_e = unpack_elements(beat["a"], dt, dut.lanes), unpack_elements(beat["b"], dt, dut.lanes)
            bad = [f"[{k}] {int(a_e[k]):#x} op {int(b_e[k]):#x}: got {int(got_e[k]):#x}, want {int(want_e[k]):#x}"
                   for k in np.flatnonzero(got_e != want_e)[:8]]
            pytest.fail(f"beat {n} ({combo_name(dt, beat['op'])}) differs from golden:\n  " + "\n  ".join(bad))


def run_cases(dtype, op, cases, lanes=1):
    """Run hand-derived ``(label, a, b, expected)`` cases of one dtype/op; check hand values and golden."""
    dut = ReductionAlu(lanes=lanes)
    per_beat = elements_per_beat(dtype, lanes)
    padded = cases + cases[:(-len(cases)) % per_beat]
    beats = []
    for k in range(0, len(padded), per_beat):
        chunk = padded[k:k + per_beat]
        beats.append({"a": pack_elements([c[1] for c in chunk], dtype),
                      "b": pack_elements([c[2] for c in chunk], dtype),
                      "dtype": dtype, "op": op})
    outputs = simulate(dut, beats)
    got = np.concatenate([unpack_elements(data, dtype, lanes) for data, _ in outputs])
    wrong = [f"{label}: {a:#x} {b:#x} -> {int(g):#x}, expected {want:#x}"
             for (label, a, b, want), g in zip(padded, got) if int(g) != want]
    assert not wrong, f"{combo_name(dtype, op)}:\n  " + "\n  ".join(wrong)
    check_against_golden(dut, beats, outputs)


# ---- hand-derived cases ---------------------------------------------------------------------------------------

class Fmt:
    """Bit-pattern builders for one float format."""

    def __init__(self, dtype):
        f = FLOAT_FORMATS[dtype]
        self.F, self.bias, self.emax = f.frac_bits, f.bias, f.exp_max
        self.M = (1 << f.frac_bits) - 1                    # all-ones fraction
        self.S = 1 << (f.width - 1)
        self.one = self.bits(f.bias)
        self.max = self.bits(f.exp_max - 1, self.M)        # largest finite
        self.inf = f.inf
        self.nan = f.canonical_nan

    def bits(self, exp, frac=0, neg=False):
        return (self.S if neg else 0) | (exp << self.F) | frac


def sum_subnormal_cases(x):
    M = x.M
    return [
        ("sub + sub", x.bits(0, 1), x.bits(0, 1), x.bits(0, 2)),
        ("-sub + -sub", x.bits(0, 3, True), x.bits(0, 5, True), x.bits(0, 8, True)),
        ("largest sub + smallest sub -> smallest normal", x.bits(0, M), x.bits(0, 1), x.bits(1)),
        ("largest sub + largest sub -> normal", x.bits(0, M), x.bits(0, M), x.bits(1, M - 1)),
        ("smallest normal - smallest sub -> largest sub", x.bits(1), x.bits(0, 1, True), x.bits(0, M)),
        ("normal - normal -> sub", x.bits(1, 5), x.bits(1, 2, True), x.bits(0, 3)),
        ("-normal + normal -> -sub", x.bits(2, 0, True), x.bits(1, M), x.bits(0, 1, True)),
        ("smallest normal + largest sub", x.bits(1), x.bits(0, M), x.bits(1, M)),
        ("sub - same sub -> +0", x.bits(0, 7), x.bits(0, 7, True), 0),
    ]


def sum_tie_cases(x):
    half_ulp = x.bits(x.bias - x.F - 1)                   # half an ulp of 1.0
    quarter_ulp = x.bits(x.bias - x.F - 2)                # half an ulp of the binade below 1.0
    return [
        ("1 + half ulp: tie stays even", x.one, half_ulp, x.one),
        ("(1+ulp) + half ulp: tie goes up to even", x.bits(x.bias, 1), half_ulp, x.bits(x.bias, 2)),
        ("1 + just over half ulp rounds up", x.one, x.bits(x.bias - x.F - 1, 1), x.bits(x.bias, 1)),
        ("1 + just under half ulp rounds down", x.one, x.bits(x.bias - x.F - 2, x.M), x.one),
        ("1 - quarter ulp: tie up to 1", x.one, quarter_ulp | x.S, x.one),
        ("(1+ulp) + 1 carry tie stays even", x.bits(x.bias, 1), x.one, x.bits(x.bias + 1)),
        ("(1+3ulp) + 1 carry tie goes up", x.bits(x.bias, 3), x.one, x.bits(x.bias + 1, 2)),
        ("-(1+ulp) - half ulp: tie to even", x.bits(x.bias, 1, True), half_ulp | x.S, x.bits(x.bias, 2, True)),
    ]


def sum_overflow_cases(x):
    return [
        ("max + max -> inf", x.max, x.max, x.inf),
        ("-max - max -> -inf", x.max | x.S, x.max | x.S, x.inf | x.S),
        ("max + half ulp: tie to even overflows", x.max, x.bits(x.emax - x.F - 2), x.inf),
        ("max + quarter ulp stays max", x.max, x.bits(x.emax - x.F - 3), x.max),
        ("1.5*2^emax twice: carry overflows", x.bits(x.emax - 1, 1 << (x.F - 1)),
         x.bits(x.emax - 1, 1 << (x.F - 1)), x.inf),
        ("-max - half ulp -> -inf", x.max | x.S, x.bits(x.emax - x.F - 2, 0, True), x.inf | x.S),
    ]


def sum_nan_inf_cases(x):
    q = 1 << (x.F - 1)
    return [
        ("qNaN with payload + 1", x.bits(x.emax, q | 5), x.one, x.nan),
        ("1 + negative sNaN", x.one, x.bits(x.emax, 3, True), x.nan),
        ("sNaN + qNaN", x.bits(x.emax, 1), x.bits(x.emax, q), x.nan),
        ("-NaN all-ones payload + 0", x.bits(x.emax, x.M, True), 0, x.nan),
        ("NaN + inf", x.bits(x.emax, 2), x.inf, x.nan),
        ("canonical NaN + -0", x.nan, x.S, x.nan),
        ("inf - inf", x.inf, x.inf | x.S, x.nan),
        ("-inf + inf", x.inf | x.S, x.inf, x.nan),
        ("inf + inf", x.inf, x.inf, x.inf),
        ("-inf - inf", x.inf | x.S, x.inf | x.S, x.inf | x.S),
        ("inf - max", x.inf, x.max | x.S, x.inf),
        ("sub - inf", x.bits(0, 1), x.inf | x.S, x.inf | x.S),
    ]


def sum_zero_cancellation_cases(x):
    return [
        ("+0 + +0", 0, 0, 0),
        ("+0 + -0", 0, x.S, 0),
        ("-0 + +0", x.S, 0, 0),
        ("-0 + -0", x.S, x.S, x.S),
        ("1 - 1 -> +0", x.one, x.one | x.S, 0),
        ("-1 + 1 -> +0", x.one | x.S, x.one, 0),
        ("-max + max -> +0", x.max | x.S, x.max, 0),
        ("x + -0 = x", x.bits(x.bias + 3, 77), x.S, x.bits(x.bias + 3, 77)),
        ("-0 + -sub = -sub", x.S, x.bits(0, 1, True), x.bits(0, 1, True)),
        ("(1+ulp) - 1: cancellation to one ulp", x.bits(x.bias, 1), x.one | x.S, x.bits(x.bias - x.F)),
        ("2 - (2-ulp): cancellation across a binade", x.bits(x.bias + 1), x.bits(x.bias, x.M, True),
         x.bits(x.bias - x.F)),
        ("near-equal large: many leading zeros", x.bits(x.bias + 5, x.M), x.bits(x.bias + 5, x.M - 1, True),
         x.bits(x.bias + 5 - x.F)),
        ("cancellation into subnormal", x.bits(2, 1), x.bits(2, 0, True), x.bits(0, 2)),
    ]


def sum_exponent_gap_cases(x):
    return [
        ("1 + smallest sub", x.one, x.bits(0, 1), x.one),
        ("1 - smallest sub", x.one, x.bits(0, 1, True), x.one),
        ("max + 1", x.max, x.one, x.max),
        ("-max + 1", x.max | x.S, x.one, x.max | x.S),
        ("(1+ulp) - ulp/4: gap F+2", x.bits(x.bias, 1), x.bits(x.bias - x.F - 2, 0, True), x.bits(x.bias, 1)),
        ("1 - just under a low ulp: borrow through sticky", x.one, x.bits(x.bias - x.F - 2, x.M, True),
         x.bits(x.bias - 1, x.M)),
        ("1 - just over half a low ulp", x.one, x.bits(x.bias - x.F - 2, 1, True), x.bits(x.bias - 1, x.M)),
        ("1 + tiny normal, gap >= 2F", x.one, x.bits(max(x.bias - 2 * x.F, 1), x.M), x.one),
        ("gap F+1 with odd partner", x.bits(x.bias + 2, 1), x.bits(x.bias + 1 - x.F, 1), x.bits(x.bias + 2, 2)),
    ]


def max_min_cases(x, op):
    q = 1 << (x.F - 1)
    rows = [  # label, a, b, max, min
        ("+0 vs -0", 0, x.S, 0, x.S),
        ("-0 vs +0", x.S, 0, 0, x.S),
        ("qNaN vs 1", x.bits(x.emax, q | 3), x.one, x.nan, x.nan),
        ("1 vs -sNaN", x.one, x.bits(x.emax, 1, True), x.nan, x.nan),
        ("NaN vs NaN", x.bits(x.emax, 9), x.bits(x.emax, q, True), x.nan, x.nan),
        ("-inf vs sub", x.inf | x.S, x.bits(0, 1), x.bits(0, 1), x.inf | x.S),
        ("inf vs max", x.inf, x.max, x.inf, x.max),
        ("-sub1 vs -sub2", x.bits(0, 1, True), x.bits(0, 2, True), x.bits(0, 1, True), x.bits(0, 2, True)),
        ("1 vs 1+ulp", x.one, x.bits(x.bias, 1), x.bits(x.bias, 1), x.one),
        ("-1 vs +sub", x.one | x.S, x.bits(0, 3), x.bits(0, 3), x.one | x.S),
        ("+0 vs -smallest sub", 0, x.bits(0, 1, True), 0, x.bits(0, 1, True)),
        ("equal", x.bits(9, 9), x.bits(9, 9), x.bits(9, 9), x.bits(9, 9)),
    ]
    return [(label, a, b, mx if op == MAX else mn) for label, a, b, mx, mn in rows]


INT_ROWS = [  # label, a, b, sum, max, min
    ("INT_MAX + 1 wraps", 0x7FFFFFFF, 1, 0x80000000, 0x7FFFFFFF, 1),
    ("-1 + 1", 0xFFFFFFFF, 1, 0, 1, 0xFFFFFFFF),
    ("INT_MIN + INT_MIN wraps", 0x80000000, 0x80000000, 0, 0x80000000, 0x80000000),
    ("INT_MIN vs INT_MAX", 0x80000000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000),
    ("-1 vs 0", 0xFFFFFFFF, 0, 0xFFFFFFFF, 0, 0xFFFFFFFF),
    ("5 vs -5", 5, 0xFFFFFFFB, 0, 5, 0xFFFFFFFB),
    ("INT_MIN - 1 wraps", 0x80000000, 0xFFFFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000),
    ("positives", 123456789, 987654321, 1111111110, 987654321, 123456789),
]

SUM_CATEGORIES = {
    "subnormals": sum_subnormal_cases,
    "ties_to_even": sum_tie_cases,
    "overflow_to_inf": sum_overflow_cases,
    "nan_and_inf": sum_nan_inf_cases,
    "signed_zero_and_cancellation": sum_zero_cancellation_cases,
    "exponent_gap_beyond_fraction": sum_exponent_gap_cases,
}


@pytest.mark.parametrize("category", SUM_CATEGORIES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name.lower())
def test_float_sum_edge_cases(dtype, category):
    run_cases(dtype, SUM, SUM_CATEGORIES[category](Fmt(dtype)))


@pytest.mark.parametrize("op", [MAX, MIN], ids=lambda o: o.name.lower())
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name.lower())
def test_float_max_min_nan_and_signed_zero(dtype, op):
    run_cases(dtype, op, max_min_cases(Fmt(dtype), op))


def test_int32_sum_wraps_and_compares_signed():
    dut = ReductionAlu(lanes=1)
    beats, want = [], []
    for op, col in ((SUM, 3), (MAX, 4), (MIN, 5)):   # consecutive beats switch op
        for row in INT_ROWS:
            beats.append({"a": row[1], "b": row[2], "dtype": DType.INT32, "op": op})
            want.append((row[0], op.name, row[col]))
    outputs = simulate(dut, beats)
    wrong = [f"{label} {op}: got {data:#x}, expected {w:#x}" for (label, op, w), (data, _) in zip(want, outputs)
             if data != w]
    assert not wrong, "\n".join(wrong)
    check_against_golden(dut, beats, outputs)


# ---- flow control -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fabric", [False, True], ids=["asic", "fabric"])
def test_latency_and_full_rate(fabric):
    """With o.ready high the ALU takes a beat every cycle and returns each one exactly ``latency`` later."""
    dut = ReductionAlu(lanes=1, tag_width=8, fabric=fabric)
    n = 40
    log = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle in range(n + dut.latency + 2):
            ctx.set(dut.i.valid, cycle < n)
            ctx.set(dut.i.payload.tag, cycle % 256)
            ctx.set(dut.i.payload.a, cycle)
            ctx.set(dut.i.payload.dtype, DType.INT32)
            _, _, i_valid, i_ready, o_valid, o_tag = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.payload.tag)
            log.append((cycle, i_valid and i_ready, o_valid, o_tag))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert all(accepted for cycle, accepted, _, _ in log if cycle < n), "input stalled with o.ready high"
    outs = [(cycle, tag) for cycle, _, valid, tag in log if valid]
    assert [tag for _, tag in outs] == list(range(n))
    assert all(cycle == tag + dut.latency for cycle, tag in outs), outs[:5]
    # five stages: the fp adders round in a stage of their own (1 GHz at 45 nm); for an FPGA's LUTs the
    # operands are registered on entry and the adders align and normalise in two stages each
    assert dut.latency == (8 if fabric else 5)


@pytest.mark.parametrize("fabric", [False, True], ids=["asic", "fabric"])
def test_stalled_output_holds_pipeline(fabric):
    """o.ready low: the ALU fills its stages, then drops i.ready and holds the head beat; nothing is lost."""
    dut = ReductionAlu(lanes=1, tag_width=8, fabric=fabric)
    taken, accepted = [], []

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.dtype, DType.INT32)
        tag = 0
        for cycle in range(30):
            ctx.set(dut.o.ready, cycle >= 20)
            ctx.set(dut.i.payload.tag, tag)
            ctx.set(dut.i.payload.a, tag * 3)
            ctx.set(dut.i.payload.b, tag)
            _, _, i_ready, o_valid, o_ready, o_tag, o_data = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload.tag, dut.o.payload.data)
            if i_ready:
                accepted.append((cycle, tag))
                tag += 1
            if o_valid and o_ready:
                taken.append((o_tag, o_data))
            if dut.latency + 5 <= cycle < 20:
                assert not i_ready and o_valid and o_tag == 0, f"cycle {cycle}: pipeline did not hold"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    # While stalled, exactly `latency` beats fit (one per stage); afterwards one beat per cycle again.
    assert [c for c, _ in accepted[:dut.latency]] == list(range(dut.latency))
    assert accepted[dut.latency][0] == 20
    assert taken == [(t, 4 * t) for t in range(len(taken))] and len(taken) == 10


@pytest.mark.parametrize("fabric", [False, True], ids=["asic", "fabric"])
def test_random_valid_and_ready_keep_every_beat_in_order(fabric):
    dut = ReductionAlu(lanes=2, tag_width=10, fabric=fabric)
    seed = seed_for(11)
    rng = np.random.default_rng(seed)
    beats = []
    for n in range(600):
        dtype, op = COMBOS[rng.integers(len(COMBOS))]
        a, b = random_operands(rng, dtype, elements_per_beat(dtype, 2))
        beats.append({"a": pack_elements(a, dtype), "b": pack_elements(b, dtype), "dtype": dtype, "op": op,
                      "tag": n % 1024})
    outputs = simulate(dut, beats, seed=seed, valid_prob=0.7, ready_prob=0.5)
    check_against_golden(dut, beats, outputs)


# ---- random beats -----------------------------------------------------------------------------------------

def random_beats(rng, dtype, ops, count, lanes):
    """``count`` beats per op of ``dtype``, ops interleaved in random order."""
    order = rng.permutation(np.repeat(np.arange(len(ops)), count))
    per_beat = elements_per_beat(dtype, lanes)
    a, b = random_operands(rng, dtype, len(order) * per_beat)
    return [{"a": pack_elements(a[k * per_beat:(k + 1) * per_beat], dtype),
             "b": pack_elements(b[k * per_beat:(k + 1) * per_beat], dtype),
             "dtype": dtype, "op": ops[int(o)]} for k, o in enumerate(order)]


@pytest.mark.parametrize("fabric", [False, True], ids=["asic", "fabric"])
@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.name.lower())
def test_random_beats_match_golden(dtype, fabric):
    """RANDOM_BEATS beats of each op (ops mixed beat by beat), operands biased to the hard cases; the same
    results from the ALU built for an FPGA's fabric (more stages)."""
    dut = ReductionAlu(lanes=1, fabric=fabric)  # one lane keeps the simulator fast; the lane count only replicates
    seed = seed_for(1000 + int(dtype))
    beats = random_beats(np.random.default_rng(seed), dtype, list(ReduceOp), RANDOM_BEATS, 1)
    outputs = simulate(dut, beats, seed=seed, ready_prob=0.9)
    check_against_golden(dut, beats, outputs)


def test_full_width_mixed_dtype_op_every_beat():
    """The production width (16 lanes, 32 fp16/bf16 elements per beat), dtype and op changing every beat."""
    dut = ReductionAlu(lanes=16, tag_width=4)
    seed = seed_for(7)
    rng = np.random.default_rng(seed)
    beats = []
    for n in range(96):
        dtype, op = COMBOS[n % len(COMBOS)]
        a, b = random_operands(rng, dtype, elements_per_beat(dtype, 16))
        beats.append({"a": pack_elements(a, dtype), "b": pack_elements(b, dtype), "dtype": dtype, "op": op,
                      "tag": n % 16})
    outputs = simulate(dut, beats, seed=seed, valid_prob=0.8, ready_prob=0.7)
    check_against_golden(dut, beats, outputs)


@pytest.mark.parametrize("dtypes", [("fp32", "int32"), ("bf16",)], ids=["fp32+int32", "bf16"])
def test_dtype_subset_builds_only_its_formats_and_stays_exact(dtypes):
    """An ALU built for a subset of the element types (a prototype board's) has only those formats' adders,
    reduces them bit-exactly with dtype and op changing every beat, and gives zeros for the others."""
    dut = ReductionAlu(lanes=2, dtypes=dtypes)
    kept = {DType.parse(d) for d in dtypes}
    names = [name for _, name, _ in Fragment.get(dut, None).subfragments]
    formats = {n.split("_")[1] for n in names if n.startswith("add_")}
    assert formats == {d.name.lower() for d in kept if d != DType.INT32}
    assert len([n for n in names if n.startswith("add_")]) == sum(
        {DType.FP32: 1, DType.FP16: 2, DType.BF16: 2, DType.INT32: 0}[d] for d in kept) * 2
    rng = np.random.default_rng(seed_for(31))
    beats = [b for dt in sorted(kept) for b in random_beats(rng, dt, list(ReduceOp), 150, 2)]
    order = rng.permutation(len(beats))
    beats = [beats[k] for k in order]
    outputs = simulate(dut, beats, seed=3, ready_prob=0.8)
    check_against_golden(dut, beats, outputs)
    other = next(d for d in DType if d not in kept)
    a, b = random_operands(rng, other, elements_per_beat(other, 2))
    (data, _), = simulate(dut, [{"a": pack_elements(a, other), "b": pack_elements(b, other), "dtype": other,
                                 "op": SUM}])
    assert data == 0
