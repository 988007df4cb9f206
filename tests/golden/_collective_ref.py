"""Plain numpy references for the collectives, shared by the golden algorithm tests (not a test module)."""

import numpy as np

from syncfabric.sim.golden.chunking import buffer_counts
from syncfabric.sim.golden.types import DType, ReduceOp

NP = {DType.FP32: np.float32, DType.INT32: np.int32, DType.BF16: np.uint16, DType.FP16: np.float16}
EPS32 = float(np.finfo(np.float32).eps)


def make_inputs(collective, P, n, root, dtype, rng):
    """Random send buffers (numpy arrays of the element type) for every rank."""
    out = []
    for r in range(P):
        cnt, _ = buffer_counts(collective, n, P, r, root)
        if dtype == DType.INT32:
            x = rng.integers(-2**31, 2**31, cnt, dtype=np.int64).astype(np.int32)
        elif dtype == DType.FP32:
            # Wide exponent range and both signs so that the order of summation shows in the bits.
            x = (rng.standard_normal(cnt) * np.exp2(rng.integers(-20, 20, cnt))).astype(np.float32)
        elif dtype == DType.BF16:
            # Finite bf16 bit patterns: any sign/fraction, exponent field 0..254.
            sign = rng.integers(0, 2, cnt, dtype=np.uint16) << 15
            exp = rng.integers(0, 255, cnt, dtype=np.uint16) << 7
            frac = rng.integers(0, 128, cnt, dtype=np.uint16)
            frac[(exp == 0) & (frac == 0)] = 1  # no +-0: max/min tie-break between them is not numpy's
            x = (sign | exp | frac).astype(np.uint16)
        else:
            raise ValueError(dtype)
        out.append(x)
    return out


def _reduce(arrs, dtype, op):
    stack = np.stack(arrs)
    if dtype == DType.INT32:
        if op == ReduceOp.SUM:
            return stack.astype(np.int64).sum(axis=0).astype(np.int32)  # wraps modulo 2**32
        return stack.max(axis=0) if op == ReduceOp.MAX else stack.min(axis=0)
    if dtype == DType.FP32:
        if op == ReduceOp.SUM:
            return stack.astype(np.float64).sum(axis=0)
        return stack.max(axis=0) if op == ReduceOp.MAX else stack.min(axis=0)
    if dtype == DType.BF16:
        f = (stack.astype(np.uint32) << 16).view(np.float32)
        assert op != ReduceOp.SUM, "no plain reference for bf16 sums"
        keep = f.argmax(axis=0) if op == ReduceOp.MAX else f.argmin(axis=0)
        return np.take_along_axis(stack, keep[None], axis=0)[0]
    raise ValueError(dtype)


def reference(collective, inputs, P, n, root, dtype, op):
    """Expected output per rank (float64 for fp32 sums, else the exact element values); None = no output."""
    if collective == "allreduce":
        return [_reduce(inputs, dtype, op)] * P
    if collective == "reduce_scatter":
        red = _reduce(inputs, dtype, op)
        return [red[r * n:(r + 1) * n] for r in range(P)]
    if collective == "allgather":
        return [np.concatenate(inputs)] * P
    if collective == "alltoall":
        return [np.concatenate([inputs[s][r * n:(r + 1) * n] for s in range(P)]) for r in range(P)]
    if collective == "broadcast":
        return [inputs[root]] * P
    if collective == "reduce":
        red = _reduce(inputs, dtype, op)
        return [red if r == root else None for r in range(P)]
    raise ValueError(collective)


def abs_sum(collective, inputs, P, n):
    """Per output element of the reduction, the sum of |x_i| over ranks (float64), for the fp32 bound."""
    a = np.abs(np.stack(inputs).astype(np.float64)).sum(axis=0)
    if collective == "reduce_scatter":
        return [a[r * n:(r + 1) * n] for r in range(P)]
    return [a] * P


def check_result(res, collective, inputs, P, n, root, dtype, op):
    """Assert that an ExecResult matches the reference (exact, or within the fp32 rounding bound)."""
    exp = reference(collective, inputs, P, n, root, dtype, op)
    for r in range(P):
        got = res.output_as(r, NP[dtype])
        if exp[r] is None:
            assert got.size == 0, f"rank {r} should have no output"
            continue
        if dtype == DType.FP32 and op == ReduceOp.SUM and collective in ("allreduce", "reduce_scatter", "reduce"):
            bound = (P - 1) * EPS32 * abs_sum(collective, inputs, P, n)[r]
            err = np.abs(got.astype(np.float64) - exp[r])
            bad = np.nonzero(err > bound)[0]
            assert bad.size == 0, (f"rank {r}: {bad.size} elements outside the rounding bound, first at {bad[0]}: "
                                   f"got {got[bad[0]]!r}, exact {exp[r][bad[0]]!r}, bound {bound[bad[0]]!r}")
        else:
            same = got.view(np.uint8) == np.ascontiguousarray(exp[r]).view(np.uint8)
            assert same.all(), (f"rank {r}: output differs from the reference at byte "
                                f"{np.nonzero(~same)[0][0]} of {same.size}")
