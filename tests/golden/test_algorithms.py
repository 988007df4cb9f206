"""Every algorithm on every topology it supports, executed by the golden executor against numpy references.

Randomized data comes from ``numpy.random.default_rng(SEED + case index)``; the seed of a failing case is in
its assertion message and printed (``pytest -s``).
"""

import functools
import zlib

import numpy as np
import pytest

from syncfabric.sim.golden.algorithms import generate, supported_algorithms, default_algorithm
from syncfabric.sim.golden.chunking import Decomposition, buffer_counts
from syncfabric.sim.golden.executor import execute
from syncfabric.sim.golden.program import check_link_order, check_programs, Step, StepOp
from syncfabric.sim.golden.topology import parse
from syncfabric.sim.golden.types import DType, ReduceOp

from _collective_ref import make_inputs, check_result

SEED = 20240611
RING_P = [2, 3, 4, 5, 8, 16]
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ALL = ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce")


def _cases():
    cases = []
    tops = [f"ring:{p}" for p in RING_P] + [f"bidir-ring:{p}" for p in RING_P]
    tops += ["torus:2x2x2", "torus:4x2x2", "torus:2x4x2", "torus:1x4x2", "torus:4x1x1"]
    tops += ["switch:2", "switch:4", "switch:8", "switch:16", "switch:6"]
    for spec in tops:
        t = parse(spec)
        for coll in ALL:
            for algo in supported_algorithms(coll, t):
                roots = sorted({0, t.n_endpoints - 1, t.n_endpoints // 2}) if coll in ("broadcast", "reduce") else [0]
                for root in roots:
                    cases.append((spec, coll, algo, root))
    # The big torus: the paper's all-reduce, and all-to-all with 3-hop routes; rooted ones are cheap.
    for coll in ("allreduce", "alltoall", "broadcast", "reduce"):
        cases.append(("torus:4x4x4", coll, default_algorithm(coll, parse("torus:4x4x4")), 21))
    return cases


CASES = _cases()


@functools.lru_cache(maxsize=None)
def _programs(spec, coll, algo, root):
    return generate(coll, algo, spec, root=root)


def _sizes(progs):
    """(count, chunk_bytes): two full chunks of 2 beats per block plus a ragged tail chunk."""
    p = progs[0]
    m = p.sub_blocks
    chunk_bytes = p.n_blocks * 128           # 32 fp32/int32 elements per block
    n = 2 * 32 * m + 16 * m + 3              # + a tail that is not a whole packet or beat
    return n, chunk_bytes


def _runs(coll):
    if coll in REDUCING:
        return [(DType.INT32, ReduceOp.SUM), (DType.INT32, ReduceOp.MAX), (DType.INT32, ReduceOp.MIN),
                (DType.FP32, ReduceOp.SUM), (DType.FP32, ReduceOp.MAX), (DType.FP32, ReduceOp.MIN)]
    return [(DType.INT32, ReduceOp.SUM), (DType.FP32, ReduceOp.SUM)]


@pytest.mark.parametrize("spec,coll,algo,root", CASES, ids=lambda v: str(v))
def test_algorithm_matches_reference(spec, coll, algo, root):
    t = parse(spec)
    P = t.n_endpoints
    progs = _programs(spec, coll, algo, root)
    check_programs(progs, t)
    n, chunk_bytes = _sizes(progs)
    runs = _runs(coll) if P < 64 else _runs(coll)[:1] + ([(DType.FP32, ReduceOp.SUM)] if coll in REDUCING else [])
    for dtype, op in runs:
        seed = SEED + zlib.crc32(f"{spec}/{coll}/{algo}/{root}/{dtype.name}/{op.name}".encode())
        print(f"seed {seed}: {spec} {coll} {algo} root={root} {dtype.name} {op.name}")
        rng = np.random.default_rng(seed)
        inputs = make_inputs(coll, P, n, root, dtype, rng)
        res = execute(progs, t, inputs, dtype, op, n, chunk_bytes=chunk_bytes, check=False)
        assert res.n_chunks == 3
        try:
            check_result(res, coll, inputs, P, n, root, dtype, op)
        except AssertionError as e:
            raise AssertionError(f"seed {seed} ({dtype.name} {op.name}): {e}") from None
        if coll == "allreduce":
            # Every rank ends with the very same bits (the all-gather part copies, never recomputes).
            for r in range(1, P):
                assert np.array_equal(res.outputs[r], res.outputs[0]), f"seed {seed}: rank {r} differs from rank 0"
        # Every byte of every output written exactly once; inputs read once (broadcast: only at the root).
        for r in range(P):
            assert (res.write_counts[r] == 1).all()
            assert (res.read_counts[r] == 1).all()


def _block_range(progs, count, chunk_bytes, block):
    d = Decomposition(count, 4, progs[0].n_blocks, progs[0].segments, chunk_bytes)
    b = d.chunk(0).blocks[block]
    return b.lo, b.hi


@pytest.mark.parametrize("P", [3, 4, 5])
def test_ring_allreduce_reduction_order_is_the_documented_one(P):
    """Unidirectional ring all-reduce: block g is reduced along the ring starting at rank g+1,
    acc = x[g+1]; acc = x[g+j] + acc for j = 2..P (ending at rank g, its owner) - bit for bit in fp32."""
    t = parse(f"ring:{P}")
    progs = generate("allreduce", "ring", t)
    seed = SEED + P
    rng = np.random.default_rng(seed)
    n, chunk_bytes = P * 64, P * 256          # one chunk, 64 elements per block
    inputs = make_inputs("allreduce", P, n, 0, DType.FP32, rng)
    res = execute(progs, t, inputs, DType.FP32, ReduceOp.SUM, n, chunk_bytes=chunk_bytes)
    out = res.output_as(0, np.float32)
    some_order_matters = False
    for g in range(P):
        lo, hi = _block_range(progs, n, chunk_bytes, g)
        acc = inputs[(g + 1) % P][lo:hi].copy()
        for j in range(2, P + 1):
            acc = (inputs[(g + j) % P][lo:hi] + acc).astype(np.float32)
        assert out[lo:hi].view(np.uint32).tolist() == acc.view(np.uint32).tolist(), f"seed {seed} block {g}"
        # The test can fail: summing in rank order gives different bits for some elements.
        naive = inputs[0][lo:hi].copy()
        for j in range(1, P):
            naive = (naive + inputs[j][lo:hi]).astype(np.float32)
        some_order_matters |= not np.array_equal(naive.view(np.uint32), acc.view(np.uint32))
    assert some_order_matters, f"seed {seed}: data too tame to distinguish reduction orders"


@pytest.mark.parametrize("spec", ["ring:4", "bidir-ring:5", "torus:2x2x2", "switch:8"])
@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN])
def test_bf16_max_min_exact(spec, op):
    t = parse(spec)
    P = t.n_endpoints
    progs = generate("allreduce", None, t)
    n, chunk_bytes = _sizes(progs)
    seed = SEED + zlib.crc32(f"bf16/{spec}/{op.name}".encode())
    inputs = make_inputs("allreduce", P, n, 0, DType.BF16, np.random.default_rng(seed))
    res = execute(progs, t, inputs, DType.BF16, op, n, chunk_bytes=chunk_bytes)
    try:
        check_result(res, "allreduce", inputs, P, n, 0, DType.BF16, op)
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None


def test_bf16_sum_identical_on_all_ranks():
    t = parse("bidir-ring:4")
    progs = generate("allreduce", None, t)
    n, chunk_bytes = _sizes(progs)
    inputs = make_inputs("allreduce", 4, n, 0, DType.BF16, np.random.default_rng(SEED))
    res = execute(progs, t, inputs, DType.BF16, ReduceOp.SUM, n, chunk_bytes=chunk_bytes)
    for r in range(1, 4):
        assert np.array_equal(res.outputs[r], res.outputs[0])
    assert not np.array_equal(res.outputs[0], np.ascontiguousarray(inputs[0]).view(np.uint8))


# ---- network and memory traffic -----------------------------------------------------------------------------

def _uniform_run(spec, coll="allreduce", algo=None):
    """Run with every block the same size (count a multiple of n_blocks beats), two chunks."""
    t = parse(spec)
    P = t.n_endpoints
    progs = generate(coll, algo, t)
    n = 2 * progs[0].sub_blocks * 16        # two chunks of one beat (16 int32) per block
    inputs = [np.arange(buffer_counts(coll, n, P, r)[0], dtype=np.int32) for r in range(P)]
    return execute(progs, t, inputs, DType.INT32, ReduceOp.SUM, n, chunk_bytes=progs[0].n_blocks * 64), n


def test_torus_4x4x4_hierarchical_allreduce_sends_2_25_bytes_per_byte_read():
    res, n = _uniform_run("torus:4x4x4")
    assert res.n_chunks == 2
    assert res.bytes_sent_per_byte_read == 2.25
    assert res.mem_read_bytes == [n * 4] * 64
    assert res.mem_write_bytes == [n * 4] * 64
    # Per phase (ACE section VI-A): 0.75 local RS + 0.375 vertical AR + 0.375 horizontal AR + 0.75 local AG.
    local = sum(v for (r, p), v in res.link_bytes.items() if p in (0, 1))
    vert = sum(v for (r, p), v in res.link_bytes.items() if p in (2, 3))
    horiz = sum(v for (r, p), v in res.link_bytes.items() if p in (4, 5))
    total_read = 64 * n * 4
    assert (local / total_read, vert / total_read, horiz / total_read) == (1.5, 0.375, 0.375)


@pytest.mark.parametrize("P", RING_P)
@pytest.mark.parametrize("kind", ["ring", "bidir-ring"])
def test_ring_allreduce_sends_2_p_minus_1_over_p(P, kind):
    res, n = _uniform_run(f"{kind}:{P}")
    assert res.bytes_sent_per_byte_read == 2 * (P - 1) / P
    assert res.mem_read_bytes == [4 * n] * P and res.mem_write_bytes == [4 * n] * P
    if kind == "bidir-ring":
        # Both directions carry the same load.
        fwd = sum(v for (r, p), v in res.link_bytes.items() if p == 0)
        bwd = sum(v for (r, p), v in res.link_bytes.items() if p == 1)
        assert fwd == bwd
    else:
        assert all(p == 0 for (_, p) in res.link_bytes)


@pytest.mark.parametrize("P", [2, 4, 8, 16])
def test_halving_doubling_traffic(P):
    res, n = _uniform_run(f"switch:{P}", algo="halving-doubling")
    assert res.bytes_sent_per_byte_read == 2 * (P - 1) / P
    # log2(P) exchange rounds each way, fused first all-gather send: messages per rank per chunk.
    assert res.n_messages == 2 * P * 2 * (P - 1)


def test_alltoall_forwarding_does_not_touch_memory():
    res, n = _uniform_run("torus:4x2x2", "alltoall")
    P = 16
    # Each rank reads its P segments once and writes P segments once, whatever the number of hops.
    assert res.mem_read_bytes == [P * n * 4] * P
    assert res.mem_write_bytes == [P * n * 4] * P
    t = parse("torus:4x2x2")
    hops = sum(len(t.route(s, d)) for s in range(P) for d in range(P))
    assert res.total_bytes_sent == hops * n * 4


# ---- dispatcher ---------------------------------------------------------------------------------------------

def test_default_algorithms():
    assert default_algorithm("allreduce", "ring:4") == "ring"
    assert default_algorithm("allreduce", "bidir-ring:4") == "bidir-ring"
    assert default_algorithm("allreduce", "torus:4x4x4") == "hierarchical"
    assert default_algorithm("allreduce", "switch:8") == "halving-doubling"
    assert default_algorithm("allreduce", "switch:6") == "ring"
    assert default_algorithm("all-to-all", "torus:2x2x2") == "direct"
    assert default_algorithm("broadcast", "switch:8") == "ring"


@pytest.mark.parametrize("args,match", [
    (("allreduce", "halving-doubling", "switch:6"), "power-of-two"),
    (("allreduce", "halving-doubling", "ring:8"), "does not support"),
    (("allreduce", "bidir-ring", "ring:8"), "does not support"),
    (("allreduce", "hierarchical", "bidir-ring:8"), "does not support"),
    (("allreduce", "ring", "torus:2x2x2"), "does not support"),
    (("alltoall", "ring", "ring:4"), "does not support"),
    (("allreduce", "quantum", "ring:4"), "unknown algorithm"),
    (("allsum", None, "ring:4"), "unknown collective"),
    (("allreduce", None, "mesh:4"), "bad topology spec"),
])
def test_generate_errors(args, match):
    with pytest.raises(ValueError, match=match):
        generate(*args)


@pytest.mark.parametrize("root", [-1, 4, True, "0"])
def test_generate_bad_root(root):
    with pytest.raises(ValueError, match="root"):
        generate("broadcast", None, "ring:4", root=root)


def test_generate_needs_topology():
    with pytest.raises(ValueError, match="topology"):
        generate("allreduce")


def test_programs_encode_roundtrip_everywhere():
    """Every step of every generated program survives encode/decode (all fields fit their bit widths)."""
    for spec, coll, algo, root in CASES:
        for prog in _programs(spec, coll, algo, root):
            words = prog.instruction_words()
            steps = [s for ph in prog.phases for s in ph.steps]
            assert [Step.decode(w) for w in words] == steps
            assert all(0 < w < 2 ** 64 for w in words)


def test_links_deliver_in_consumption_order_everywhere():
    """The in-order property of docs/programs.md holds for every generated program set."""
    for spec, coll, algo, root in CASES:
        check_link_order(_programs(spec, coll, algo, root), spec)


def test_every_store_follows_the_last_write_of_its_slot_everywhere():
    """STORE placement of docs/programs.md: each STORE comes right after the last write (LOAD/RECV) of its slot
    - after a RECV, right after the step that follows it - or first in the last phase when that write is in an
    earlier phase (after the leading LOADs of a single phase), and no step writes a slot after its STORE - an
    engine may post the STORE and go on."""
    for spec, coll, algo, root in CASES:
        for prog in _programs(spec, coll, algo, root):
            last = prog.phases[-1].steps
            head = 0
            if len(prog.phases) == 1:
                while head < len(last) and last[head].op == StepOp.LOAD:
                    head += 1
            for i, s in enumerate(last):
                if s.op != StepOp.STORE:
                    continue
                before = [k for k in range(i) if last[k].op in (StepOp.LOAD, StepOp.RECV) and last[k].slot == s.slot]
                lo = max(before[-1] + 1 if before else 0, head)
                if before and last[before[-1]].op == StepOp.RECV:
                    nxt = [k for k in range(before[-1] + 1, len(last)) if last[k].op != StepOp.STORE]
                    if nxt:     # one step (not a STORE) stands between the RECV and its STORE
                        assert nxt[0] < i, (spec, coll, prog.rank, i)
                        lo = nxt[0] + 1
                assert all(last[k].op == StepOp.STORE for k in range(lo, i)), (spec, coll, prog.rank, i)
                assert not any(t.op in (StepOp.LOAD, StepOp.RECV) and t.slot == s.slot for t in last[i:]), \
                    (spec, coll, prog.rank, i)
            assert all(t.op != StepOp.STORE for ph in prog.phases[:-1] for t in ph.steps)


def test_slot_and_block_counts():
    """The chunk-context sizes the RTL must provide (documented in docs/programs.md)."""
    def head(c, spec, a=None):
        p = generate(c, a, spec)[0]
        return p.n_blocks, p.n_slots, len(p.phases)
    assert head("allreduce", "ring:8") == (8, 8, 1)
    assert head("allreduce", "bidir-ring:8") == (16, 16, 1)
    assert head("reduce_scatter", "bidir-ring:8") == (16, 16, 1)
    assert head("allreduce", "torus:4x4x4") == (32, 32, 4)
    assert head("allreduce", "torus:4x2x2") == (16, 16, 4)
    assert head("allreduce", "torus:1x4x2") == (8, 8, 2)
    assert head("alltoall", "torus:4x4x4") == (64, 66, 1)
    assert head("alltoall", "switch:8") == (8, 8, 1)
    assert head("allreduce", "switch:16") == (16, 16, 1)
