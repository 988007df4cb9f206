"""Partial all-reduce (null contributions) and the count lane of the golden executor.

A null rank's LOAD reads no memory and yields zeros with count 0; the output must be bit for bit the output of
the same programs with the null ranks' inputs replaced by zeros, and the count lane must tell every rank how
many ranks contributed. Randomized data and null subsets come from ``numpy.random.default_rng(SEED + case)``;
the case's parameters are in the assertion messages and printed (``pytest -s``).
"""

import zlib

import numpy as np
import pytest

from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.chunking import buffer_counts
from syncfabric.sim.golden.executor import ExecutionError, NULL_COLLECTIVES, execute, _merge_store_counts
from syncfabric.sim.golden.program import StepOp
from syncfabric.sim.golden.topology import parse
from syncfabric.sim.golden.types import DType, ReduceOp

from _collective_ref import make_inputs, reference

SEED = 20250117
TOPOLOGIES = ["ring:4", "bidir-ring:5", "torus:2x2x2", "torus:4x2x1"]
NP = {DType.FP32: np.float32, DType.INT32: np.int32, DType.BF16: np.uint16, DType.FP16: np.float16}


def _inputs(coll, P, n, root, dtype, rng):
    """Random send buffers of every rank; fp16 with a wide exponent range and both signs."""
    if dtype != DType.FP16:
        return make_inputs(coll, P, n, root, dtype, rng)
    out = []
    for r in range(P):
        cnt, _ = buffer_counts(coll, n, P, r, root)
        out.append((rng.standard_normal(cnt) * np.exp2(rng.integers(-10, 10, cnt))).astype(np.float16))
    return out


def _null_subset(P, rng, edge):
    """A random proper non-empty subset of the ranks, or (``edge``) none or all of them."""
    k = int(rng.choice([0, P])) if edge else int(rng.integers(1, P))
    return sorted(int(r) for r in rng.choice(P, size=k, replace=False))


def _expected_contributors(coll, P, root, null):
    if coll == "reduce":
        return [P - len(null) if r == root else 0 for r in range(P)]
    return [P - len(null)] * P


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.name.lower())
@pytest.mark.parametrize("coll", NULL_COLLECTIVES)
@pytest.mark.parametrize("spec", TOPOLOGIES)
def test_null_ranks_equal_zero_inputs(spec, coll, dtype):
    t = parse(spec)
    P = t.n_endpoints
    case = zlib.crc32(f"{spec}/{coll}/{dtype.name}".encode())
    rng = np.random.default_rng(SEED + case)
    root = int(rng.integers(P))
    progs = generate(coll, None, t, root=root)
    m = progs[0].sub_blocks
    chunk_bytes = progs[0].n_blocks * 64 * int(rng.integers(1, 3))
    for trial in range(3):
        n = int(rng.integers(1, 3 * chunk_bytes // (4 * progs[0].segments) + 40))
        null = _null_subset(P, rng, edge=trial == 1)
        inputs = _inputs(coll, P, n, root, dtype, rng)
        zeros = [np.zeros_like(x) if r in null else x for r, x in enumerate(inputs)]
        # Null ranks pass no buffer, or one full of garbage (it must not be read).
        given = [(None if trial % 2 else np.full_like(x, 0x7f)) if r in null else x for r, x in enumerate(inputs)]
        what = f"case {case} trial {trial}: {coll} on {spec} {dtype.name} n={n} root={root} null={null}"
        print(what)
        kw = {"chunk_bytes": chunk_bytes}
        if trial == 2:
            kw.update(seed=case, max_chunks_in_flight=3)
        res = execute(progs, t, given, dtype, ReduceOp.SUM, n, null_ranks=null, **kw)
        ref = execute(progs, t, zeros, dtype, ReduceOp.SUM, n, chunk_bytes=chunk_bytes)
        assert res.null_ranks == frozenset(null) and ref.null_ranks == frozenset()
        for r in range(P):
            assert np.array_equal(res.outputs[r], ref.outputs[r]), f"{what}: rank {r} output differs"
        assert res.contributors == _expected_contributors(coll, P, root, null), what
        assert ref.contributors == _expected_contributors(coll, P, root, []), what
        for r in range(P):
            assert set(res.store_counts[r]) == set(ref.store_counts[r]), what
            assert set(res.store_counts[r].values()) <= {P - len(null)}, what
        # Null ranks read nothing; everything else (traffic, writes) is unchanged.
        for r in range(P):
            if r in null:
                assert res.mem_read_bytes[r] == 0 and not res.read_counts[r].any(), what
            else:
                assert res.mem_read_bytes[r] == ref.mem_read_bytes[r], what
                assert np.array_equal(res.read_counts[r], ref.read_counts[r]), what
        assert res.mem_write_bytes == ref.mem_write_bytes and res.link_bytes == ref.link_bytes, what
        assert res.link_messages == ref.link_messages and res.n_chunks == ref.n_chunks, what
        if dtype == DType.INT32:  # order-independent: also against plain numpy
            exp = reference(coll, zeros, P, n, root, dtype, ReduceOp.SUM)
            for r in range(P):
                if exp[r] is not None:
                    assert np.array_equal(res.output_as(r, np.int32), exp[r]), f"{what}: rank {r}"


def test_all_ranks_null_gives_zeros_and_no_contributors():
    t = parse("bidir-ring:5")
    progs = generate("allreduce", None, t)
    res = execute(progs, t, None, DType.FP32, ReduceOp.SUM, 100, null_ranks=range(5), chunk_bytes=320)
    assert res.contributors == [0] * 5 and res.mem_read_bytes == [0] * 5 and res.n_chunks == 2
    assert all(not o.any() and o.size == 400 for o in res.outputs)


def test_count_lane_without_null_ranks():
    """Counts are computed on every run: the reductions count all ranks, moves carry the count 1."""
    t = parse("torus:2x2x2")
    P = 8
    rng = np.random.default_rng(SEED)
    for coll, expected in [("allreduce", [P] * P), ("reduce_scatter", [P] * P), ("reduce", [0, 0, 0, P, 0, 0, 0, 0]),
                           ("allgather", [1] * P), ("alltoall", [1] * P), ("broadcast", [1] * P)]:
        progs = generate(coll, None, t, root=3)
        n = 300
        inputs = make_inputs(coll, P, n, 3, DType.INT32, rng)
        res = execute(progs, t, inputs, DType.INT32, ReduceOp.MAX, n, chunk_bytes=progs[0].n_blocks * 64)
        assert res.n_chunks > 1, coll
        assert res.contributors == expected, coll
        assert all(set(sc.values()) <= {expected[r]} for r, sc in enumerate(res.store_counts)), coll
        # Every block a rank STOREs is recorded: exactly the blocks it has output for.
        stored = {s.block for _, _, s in progs[0].steps() if s.op == StepOp.STORE}
        assert set(res.store_counts[0]) == stored, coll


def test_null_rank_still_needs_a_well_formed_buffer_if_it_passes_one():
    t = parse("ring:4")
    progs = generate("allreduce", None, t)
    x = np.zeros(10, np.int32)
    with pytest.raises(ValueError, match="rank 1: input has 36 bytes, the collective needs 40"):
        execute(progs, t, [x, np.zeros(9, np.int32), x, x], DType.INT32, ReduceOp.SUM, 10, null_ranks=[1])
    with pytest.raises(ValueError, match="rank 2 needs an input buffer of 40 bytes, got None"):
        execute(progs, t, [x, None, None, x], DType.INT32, ReduceOp.SUM, 10, null_ranks=[1])


@pytest.mark.parametrize("coll", ["allgather", "alltoall", "broadcast", "barrier"])
def test_null_ranks_only_for_reductions(coll):
    t = parse("ring:4")
    progs = generate(coll, None, t, root=0)
    inputs = [np.zeros(buffer_counts(coll, 8, 4, r, 0)[0], np.int32) for r in range(4)]
    with pytest.raises(ValueError, match=f"null contributions are only defined for allreduce, reduce_scatter, "
                                         f"reduce, not {coll}"):
        execute(progs, t, inputs, DType.INT32, ReduceOp.SUM, 8, null_ranks=[2])
    # No null ranks: these collectives run as always.
    execute(progs, t, inputs, DType.INT32, ReduceOp.SUM, 8, null_ranks=())


@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN])
def test_null_ranks_only_with_sum(op):
    t = parse("ring:4")
    progs = generate("allreduce", None, t)
    x = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match=f"null contributions need the op sum .*, not {op.name.lower()}"):
        execute(progs, t, [x] * 4, DType.FP32, op, 8, null_ranks=[0])
    res = execute(progs, t, [x] * 4, DType.FP32, op, 8, null_ranks=[])
    assert res.contributors == [4] * 4


@pytest.mark.parametrize("null", [[4], [-1], [True], ["1"], [1.0]])
def test_null_ranks_must_be_ranks(null):
    t = parse("ring:4")
    progs = generate("allreduce", None, t)
    with pytest.raises(ValueError, match="null rank .* is not a rank of the 4 ranks"):
        execute(progs, t, [np.zeros(8, np.int32)] * 4, DType.INT32, ReduceOp.SUM, 8, null_ranks=null)


def test_null_ranks_accept_numpy_integers_and_duplicates():
    t = parse("ring:4")
    progs = generate("reduce_scatter", None, t)
    x = np.ones(16, np.int32)
    res = execute(progs, t, [x] * 4, DType.INT32, ReduceOp.SUM, 4, null_ranks=np.array([3, 3, 0]))
    assert res.null_ranks == frozenset({0, 3}) and res.contributors == [2] * 4
    assert all((res.output_as(r, np.int32) == 2).all() for r in range(4))


def test_chunks_disagreeing_on_a_store_count_is_an_error():
    """Every chunk runs the same steps, so the counts cannot differ; the executor still checks it."""
    class Ctx:
        rank, chunk, stored = 2, 5, {0: 3, 1: 4}
    counts = {0: 3}
    _merge_store_counts(counts, Ctx)
    assert counts == {0: 3, 1: 4}
    Ctx.stored = {1: 3}
    with pytest.raises(ExecutionError, match="rank 2 chunk 5 stored block 1 with count 3, an earlier chunk "
                                             "with count 4"):
        _merge_store_counts(counts, Ctx)
