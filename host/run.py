"""One collective end to end on emulated NPUs: the job behind ``syncfabric run`` and ``syncfabric demo``.

Every endpoint gets a send buffer of seeded random data; the collective's algorithm program (the same program
the engine's FSMs run) is executed for all endpoints. Backends:

``golden``              the numpy golden executor alone; its result is checked against a plain numpy reference
                        (exact for integers and max/min, within the accumulated rounding bound for float sums).
``verilator``/``icarus``  the executor moves the data and every reduction of the program is computed by the
                        reduction ALU RTL under cocotb; the outputs are compared byte for byte with the pure
                        golden run. (The engine RTL - DMA, SRAM, FSMs, links - replaces the executor's data
                        movement when it lands; until then there are no engine cycle counts.)
"""

import json
import os
import tempfile
import time

import numpy as np

from ..sim.golden import topology as topo_mod
from ..sim.golden.algorithms import default_algorithm, generate
from ..sim.golden.arith import bf16_from_float32, float32_from_bf16
from ..sim.golden.chunking import buffer_counts, normalize_collective
from ..sim.golden.executor import execute
from ..sim.golden.types import DType, ReduceOp, dtype_bytes

__all__ = ["job_spec", "make_inputs", "run_golden", "run_collective", "format_summary",
           "count_for_bytes"]

BACKENDS = ("golden", "verilator", "icarus")


def count_for_bytes(collective, nbytes, nranks, dtype):
    """NCCL ``count`` for a per-endpoint buffer of ``nbytes`` (nccl-tests' size convention)."""
    eb = dtype_bytes(dtype)
    per = nranks if collective in ("reduce_scatter", "allgather", "alltoall") else 1
    if nbytes <= 0 or nbytes % (eb * per):
        what = f"{eb}-byte {DType(dtype).name.lower()} elements"
        if per > 1:
            what += f" times {nranks} endpoints"
        raise ValueError(f"--bytes {nbytes} must be a positive multiple of {eb * per} ({what}) for {collective}")
    return nbytes // (eb * per)


def job_spec(collective, topology, nbytes, dtype, op, *, algorithm=None, root=0, chunk_bytes=65536, seed=1,
             lanes=16):
    """Validate the parameters of a job and return them as a JSON-friendly dict."""
    coll = normalize_collective(collective)
    topo = topo_mod.parse(topology)
    dtype, op = DType.parse(dtype), ReduceOp.parse(op)
    p = topo.n_endpoints
    if coll in ("broadcast", "reduce") and not 0 <= root < p:
        raise ValueError(f"--root {root} is not a rank of {topo.spec} (0..{p - 1})")
    if chunk_bytes <= 0 or chunk_bytes % 64:
        raise ValueError(f"--chunk-bytes {chunk_bytes} must be a positive multiple of 64")
    count = count_for_bytes(coll, nbytes, p, dtype)
    algo = algorithm or default_algorithm(coll, topo)
    return {"collective": coll, "topology": topo.spec, "algorithm": algo, "npus": p, "bytes": nbytes,
            "count": count, "dtype": dtype.name.lower(), "op": op.name.lower(), "root": root,
            "chunk_bytes": chunk_bytes, "seed": seed, "lanes": lanes}



def make_inputs(spec):
    """Seeded random send buffers of every endpoint (None where a rank has no send buffer)."""
    dtype = DType.parse(spec["dtype"])
    rng = np.random.default_rng(spec["seed"])
    inputs = []
    for r in range(spec["npus"]):
        n, _ = buffer_counts(spec["collective"], spec["count"], spec["npus"], r, spec["root"])
        if n == 0:
            inputs.append(None)
        elif dtype == DType.INT32:
            inputs.append(rng.integers(-(1 << 24), 1 << 24, n, dtype=np.int32))
        elif dtype == DType.FP16:
            inputs.append(rng.standard_normal(n).astype(np.float16))
        elif dtype == DType.BF16:
            inputs.append(bf16_from_float32(rng.standard_normal(n).astype(np.float32)))
        else:
            inputs.append(rng.standard_normal(n).astype(np.float32))
    return inputs


def _programs(spec):
    return generate(spec["collective"], spec["algorithm"], spec["topology"], root=spec["root"])


def run_golden(spec, inputs=None, reducer=None):
    """Execute the job's programs in the golden executor; ``reducer`` replaces the golden reduction."""
    inputs = make_inputs(spec) if inputs is None else inputs
    kwargs = {"reducer": reducer} if reducer is not None else {}
    return execute(_programs(spec), topo_mod.parse(spec["topology"]), inputs, DType.parse(spec["dtype"]),
                   ReduceOp.parse(spec["op"]), spec["count"], spec["chunk_bytes"], **kwargs)


def _as_float64(buf, dtype):
    if dtype == DType.FP32:
        return buf.view(np.float32).astype(np.float64)
    if dtype == DType.FP16:
        return buf.view(np.float16).astype(np.float64)
    if dtype == DType.BF16:
        return float32_from_bf16(buf.view(np.uint16)).astype(np.float64)
    return buf.view(np.int32).astype(np.int64)


def reference_mismatches(spec, inputs, result):
    """Elements of the golden result that disagree with a plain numpy reference of the collective.

    Integers and max/min must match exactly; float sums must lie within ``(P-1) * eps * sum|x|`` (the bound
    of any summation order) of the float64 sum.
    """
    dtype, op = DType.parse(spec["dtype"]), ReduceOp.parse(spec["op"])
    p, coll, count, root = spec["npus"], spec["collective"], spec["count"], spec["root"]
    xs = [None if x is None else _as_float64(np.ascontiguousarray(x).view(np.uint8), dtype) for x in inputs]
    outs = [_as_float64(result.outputs[r], dtype) if result.outputs[r].size else None for r in range(p)]
    eps = {DType.FP32: 2.0 ** -24, DType.FP16: 2.0 ** -11, DType.BF16: 2.0 ** -8, DType.INT32: 0.0}[dtype]

    def reduced(arrays):
        stack = np.stack(arrays)
        if op == ReduceOp.SUM:
            if dtype == DType.INT32:
                return (stack.sum(axis=0) + 2**31) % 2**32 - 2**31, 0
            return stack.sum(axis=0), (p - 1) * eps * np.abs(stack).sum(axis=0)
        return (stack.max(axis=0) if op == ReduceOp.MAX else stack.min(axis=0)), 0

    bad = 0
    if coll in ("allreduce", "reduce"):
        ref, tol = reduced(xs)
        for r in range(p):
            if outs[r] is not None:
                bad += int(np.count_nonzero(np.abs(outs[r] - ref) > tol))
    elif coll == "reduce_scatter":
        ref, tol = reduced(xs)
        for r in range(p):
            sl = slice(r * count, (r + 1) * count)
            bad += int(np.count_nonzero(np.abs(outs[r] - ref[sl]) > (tol[sl] if np.ndim(tol) else tol)))
    elif coll == "allgather":
        ref = np.concatenate(xs)
        bad += sum(int(np.count_nonzero(outs[r] != ref)) for r in range(p))
    elif coll == "alltoall":
        for r in range(p):
            ref = np.concatenate([xs[s][r * count:(r + 1) * count] for s in range(p)])
            bad += int(np.count_nonzero(outs[r] != ref))
    elif coll == "broadcast":
        bad += sum(int(np.count_nonzero(outs[r] != xs[root])) for r in range(p))
    return bad


def _traffic(spec, res):
    return {
        "mem_read_bytes": list(res.mem_read_bytes),
        "mem_write_bytes": list(res.mem_write_bytes),
        "bytes_sent": list(res.bytes_sent),
        "bytes_sent_per_byte_read": res.bytes_sent_per_byte_read,
        "link_bytes": {f"{r}:{port}": b for (r, port), b in sorted(res.link_bytes.items())},
        "messages": res.n_messages,
        "packets": res.n_packets,
        "chunks": res.n_chunks,
    }


def run_collective(collective="allreduce", topology="ring:4", nbytes=65536, dtype="fp32", op="sum", *,
                   algorithm=None, root=0, chunk_bytes=65536, backend="verilator", lanes=16, seed=1,
                   progress=True):
    """Run one collective end to end and return a result dict (see the module docstring for backends)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    spec = job_spec(collective, topology, nbytes, dtype, op, algorithm=algorithm, root=root,
                    chunk_bytes=chunk_bytes, seed=seed, lanes=lanes)
    t0 = time.monotonic()
    result = {**spec, "backend": backend}
    if backend == "golden":
        inputs = make_inputs(spec)
        res = run_golden(spec, inputs)
        result.update(_traffic(spec, res))
        result["mismatches"] = reference_mismatches(spec, inputs, res)
        result["checked_against"] = "numpy reference"
    else:
        from ..hdl.alu import ReductionAlu
        from ..tb.harness import run_cocotb

        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            run_cocotb(ReductionAlu, {"lanes": lanes, "tag_width": 0}, toplevel="reduction_alu",
                       test_module="syncfabric.tb.collective_alu", sim=backend,
                       tb_params={"spec": spec, "out": out, "progress": progress},
                       build_tag=f"run-alu{lanes}")
            with open(out) as f:
                result.update(json.load(f))
        result["checked_against"] = "golden executor, byte for byte"
    result["wall_s"] = round(time.monotonic() - t0, 3)
    return result


def format_summary(r):
    """A human-readable summary of a :func:`run_collective` result."""
    lines = [
        f"{r['collective']} on {r['topology']} ({r['algorithm']}), {r['npus']} NPUs, {r['bytes']} B per NPU, "
        f"{r['dtype']} {r['op']}, backend {r['backend']}",
        f"  chunks {r['chunks']}, messages {r['messages']}, packets {r['packets']}, "
        f"bytes sent per byte read {r['bytes_sent_per_byte_read']:.4f}",
        f"  NPU memory per endpoint: read {min(r['mem_read_bytes'])}..{max(r['mem_read_bytes'])} B, "
        f"written {min(r['mem_write_bytes'])}..{max(r['mem_write_bytes'])} B",
    ]
    if "alu_beats" in r:
        lines.append(f"  ALU RTL: {r['alu_beats']} beats in {r['sim_cycles']} cycles "
                     f"({r['sim_cycles_per_s']:.0f} simulated cycles/s)")
    verdict = "PASS" if r["mismatches"] == 0 else "FAIL"
    lines.append(f"  {verdict}: {r['mismatches']} mismatches against the {r['checked_against']}; "
                 f"{r['wall_s']:.2f} s")
    return "\n".join(lines)
