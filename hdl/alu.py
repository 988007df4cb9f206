"""The reduction ALU: element-wise sum/max/min of two operand vectors, fp32/fp16/bf16/int32, full rate.

One input beat carries two operand vectors of ``lanes`` x 32 bits, the element type and the operator; one output
beat carries the reduced vector. Element type and operator may change on every beat. The arithmetic is exactly
:func:`syncfabric.sim.golden.arith.reduce_elements` (IEEE round-to-nearest-even with subnormals, canonical NaN,
wrapping int32, signed compares).

Pipeline (latency 5, one beat per cycle)::

    S1  register 1   float adders: unpack/swap/exponent difference      max/min/int32 results computed here
    S2  register 2   float adders: align + add/subtract                 ... and delayed
    S3  register 3   float adders: normalise                            ... and delayed
    S4  register 4   float adders: round                                ... and delayed
    S5  register 5   float adders: overflow/pack; dtype/op select -> output register (o.payload comes from flops)

Built for an FPGA (``fabric``, latency 8): a register S0 in front of S1 takes the operands, the float adders'
S2 and S3 are two stages each (align | add, count leading zeros and clamp | shift), and the max/min and int32
decisions are registered in S1 and selected in S2. Each 45 nm stage is 15-17 ns of ECP5 LUTs and routing.

Flow control: one pipeline enable ``en = ~o.valid | o.ready`` advances every stage at once and is also
``i.ready``. Each stage carries a valid bit, so bubbles flow through, and a stalled output holds every stage
in place: no beat is lost or duplicated, and the pipeline still accepts a beat each cycle while ``o.ready`` is
high.

Datapath per 32-bit lane: one fp32 adder, two fp16 adders, two bf16 adders (all from
:class:`~syncfabric.hdl.common.fp.FloatAdder`), max/min selectors for each float format, an int32 adder and a
signed comparator; the result is picked by dtype/op. This is the simple, obviously-correct arrangement; sharing
one wide adder between the formats (an fp32 datapath split into two 16-bit halves) would save area and is left
as a later optimisation. The reserved op code 3 behaves as ``min``.

An ALU may be built for a subset of the element types (``dtypes``): it then has only those formats' adders and
selectors, and a beat of another type gives zeros (the engine refuses such descriptors before any beat is
formed, with ``BAD_DTYPE``). On a prototype FPGA the fp16 and bf16 adders are most of the ALU.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..sim.golden.types import DType, ReduceOp, FLOAT_FORMATS
from .common.fp import FloatAdder, float_pick, float_select
from .common.layouts import alu_operands_layout, alu_result_layout

__all__ = ["ReductionAlu"]


class ReductionAlu(wiring.Component):
    """Pipelined element-wise reduction of two ``lanes`` x 32-bit operand vectors (see the module docstring).

    Ports: ``i`` (stream of :func:`alu_operands_layout` beats), ``o`` (stream of :func:`alu_result_layout`
    beats, in input order, the input ``tag`` copied through). ``dtypes`` (names or :class:`DType` members,
    default all) are the element types it is built for; beats of other types give zeros. :attr:`latency` cycles from an accepted input
    beat to its output beat when the output is not stalled.

    ``fabric`` builds the ALU for an FPGA's LUTs (latency 8 instead of 5, the same results): the operands
    are registered on entry (a block RAM's output, which feeds ``i`` in the engine, then reaches no logic in
    its cycle) and the float adders have two more stages (:class:`FloatAdder` ``fabric``).
    """

    #: Cycles from ``i`` handshake to ``o.valid`` of the same beat (when ``o`` is not stalled), of an ALU built
    #: without ``fabric``; an instance's :attr:`latency` is its own.
    latency = FloatAdder.latency + 1

    def __init__(self, lanes=16, tag_width=0, dtypes=None, fabric=False):
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, not {lanes}")
        try:
            self.dtypes = tuple(DType) if dtypes is None else \
                tuple(sorted({DType(d) if isinstance(d, int) else DType.parse(d) for d in dtypes}))
        except ValueError as e:
            raise ValueError(f"dtypes: {e}") from None
        if not self.dtypes:
            raise ValueError("dtypes must name at least one element type")
        self.lanes = lanes
        self.tag_width = tag_width
        self.fabric = bool(fabric)
        self.latency = FloatAdder.latency_for(self.fabric) + 1 + (1 if self.fabric else 0)
        super().__init__({
            "i": In(stream.Signature(alu_operands_layout(lanes, tag_width))),
            "o": Out(stream.Signature(alu_result_layout(lanes, tag_width))),
        })

    def elaborate(self, platform):
        m = Module()
        stages = self.latency
        fp32, fp16, bf16 = FLOAT_FORMATS[DType.FP32], FLOAT_FORMATS[DType.FP16], FLOAT_FORMATS[DType.BF16]

        # ---- flow control -----------------------------------------------------------------------------------
        en = Signal()
        m.d.comb += [
            en.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(en),
        ]

        def delay(value, count, name, reset_less=True):
            """``value`` after ``count`` enabled register stages. Only the valid bits need a reset."""
            for k in range(count):
                reg = Signal(value.shape(), name=f"{name}_d{k + 1}", reset_less=reset_less)
                with m.If(en):
                    m.d.sync += reg.eq(value)
                value = reg
            return value

        # ---- input register (``fabric``): the operands come from flip-flops --------------------------------
        in_valid, p = self.i.valid, self.i.payload
        a, b, in_dtype, in_op, in_tag = p.a, p.b, p.dtype, p.op, p.tag
        if self.fabric:
            in_valid = delay(in_valid, 1, "in_valid", reset_less=False)
            a, b, in_dtype, in_op, in_tag = (
                delay(v, 1, f"in_{name}")
                for v, name in ((a, "a"), (b, "b"), (in_dtype, "dtype"), (in_op, "op"), (in_tag, "tag")))
            stages -= 1

        valid = delay(in_valid, stages, "valid", reset_less=False)
        tag = delay(in_tag, stages, "tag")
        # dtype/op reach the select mux in front of the last register together with the adder results.
        dtype = delay(in_dtype, stages - 1, "dtype")
        op = delay(in_op, stages - 1, "op")
        if self.fabric:                 # S2's max/min/int32 select: the dtype and whether the op is a sum
            dtype_d1, sum_d1 = delay(in_dtype, 1, "sel_dtype"), delay(in_op == ReduceOp.SUM, 1, "sel_sum")

        # ---- datapath -------------------------------------------------------------------------------------
        is_max = in_op == ReduceOp.MAX
        float_sum = op == ReduceOp.SUM          # op as it reaches S5
        result = Signal(32 * self.lanes)
        lane_results = []
        for lane in range(self.lanes):
            a32, b32 = a[32 * lane:32 * lane + 32], b[32 * lane:32 * lane + 32]
            halves = [(a32[16 * h:16 * h + 16], b32[16 * h:16 * h + 16]) for h in range(2)]

            def adder(fmt, x, y, name):
                unit = FloatAdder(fmt.exp_bits, fmt.frac_bits, fabric=self.fabric)
                m.submodules[f"{name}_l{lane}"] = unit
                m.d.comb += [unit.a.eq(x), unit.b.eq(y), unit.en.eq(en)]
                return unit.result

            sums = {}
            if DType.FP32 in self.dtypes:
                sums[DType.FP32] = adder(fp32, a32, b32, "add_fp32")
            for code, fmt, name in ((DType.FP16, fp16, "fp16"), (DType.BF16, bf16, "bf16")):
                if code in self.dtypes:
                    sums[code] = Cat(*(adder(fmt, x, y, f"add_{name}_h{h}") for h, (x, y) in enumerate(halves)))

            # Everything that is not a float sum is one compare or one add: done in S1, then delayed. Built for
            # an FPGA, S1 registers the decisions (compares, NaN tests, the int32 sum) and S2 selects.
            signed_a, signed_b = a32.as_signed(), b32.as_signed()
            int_pick_a = Mux(is_max, signed_a >= signed_b, signed_a <= signed_b)
            int_sum = (a32 + b32)[:32]
            picks = {code: [float_pick(x, y, fmt.exp_bits, fmt.frac_bits, is_max) for x, y in parts]
                     for code, fmt, parts in ((DType.FP32, fp32, [(a32, b32)]), (DType.FP16, fp16, halves),
                                              (DType.BF16, bf16, halves)) if code in self.dtypes}
            sel_a, sel_b, sel_dtype, sel_sum, held = a32, b32, in_dtype, in_op == ReduceOp.SUM, 1
            if self.fabric:
                int_pick_a, int_sum = delay(int_pick_a, 1, f"ipick_l{lane}"), delay(int_sum, 1, f"isum_l{lane}")
                picks = {code: [(delay(p, 1, f"pick{int(code)}_{k}_l{lane}"),
                                 delay(n, 1, f"nan{int(code)}_{k}_l{lane}")) for k, (p, n) in enumerate(ps)]
                         for code, ps in picks.items()}
                sel_a, sel_b = delay(a32, 1, f"sel_a_l{lane}"), delay(b32, 1, f"sel_b_l{lane}")
                sel_dtype, sel_sum = dtype_d1, sum_d1
                held = 2
            sel_halves = [(sel_a[16 * h:16 * h + 16], sel_b[16 * h:16 * h + 16]) for h in range(2)]
            other = Signal(32, name=f"other_l{lane}")
            with m.Switch(sel_dtype):
                for code, fmt, parts in ((DType.FP32, fp32, [(sel_a, sel_b)]), (DType.FP16, fp16, sel_halves),
                                         (DType.BF16, bf16, sel_halves)):
                    if code in self.dtypes:
                        with m.Case(code):
                            m.d.comb += other.eq(Cat(*(float_select(x, y, fmt.exp_bits, fmt.frac_bits, p, n)
                                                       for (x, y), (p, n) in zip(parts, picks[code]))))
                if DType.INT32 in self.dtypes:
                    with m.Case(DType.INT32):
                        m.d.comb += other.eq(Mux(sel_sum, int_sum, Mux(int_pick_a, sel_a, sel_b)))
            other = delay(other, stages - held, f"other_l{lane}")

            lane_result = Signal(32, name=f"result_l{lane}")
            m.d.comb += lane_result.eq(other)
            for code, total in sums.items():
                with m.If(float_sum & (dtype == code)):
                    m.d.comb += lane_result.eq(total)
            lane_results.append(lane_result)
        m.d.comb += result.eq(Cat(*lane_results))

        # ---- output register (the end of S5) ----------------------------------------------------------------
        data = delay(result, 1, "data")
        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.data.eq(data),
            self.o.payload.tag.eq(tag),
        ]
        return m
