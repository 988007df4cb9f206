"""Golden COARSE and BytePS models: reduction orders, cycle/time formulas, partitioning, the optimizer."""

import numpy as np
import pytest

from syncfabric.sim.golden import byteps, coarse
from syncfabric.sim.golden.arith import reduce_bytes, to_bytes
from syncfabric.sim.golden.types import DType, ReduceOp
from syncfabric.tb.alu import random_operands

DTYPES = [DType.FP32, DType.FP16, DType.BF16, DType.INT32]


def _buffers(rng, dtype, p, nbytes):
    out = []
    for _ in range(p):
        a, _ = random_operands(rng, dtype, nbytes // (4 if dtype in (DType.FP32, DType.INT32) else 2))
        out.append(to_bytes(a))
    return out


def test_sync_chunk_reduces_each_entry_along_the_ring_from_its_owner():
    # int32 sum is associative, so check the order with non-associative fp16 instead: entry e starts at e
    rng = np.random.default_rng(1)
    p, entry = 4, 8
    chunks = _buffers(rng, DType.FP16, p, p * entry)
    got = coarse.sync_chunk(chunks, DType.FP16, ReduceOp.SUM)
    for e in range(p):
        sl = slice(e * entry, (e + 1) * entry)
        acc = chunks[e][sl]
        for k in range(1, p):
            acc = reduce_bytes(acc, chunks[(e + k) % p][sl], DType.FP16, ReduceOp.SUM)
        assert np.array_equal(got[sl], acc)


def test_sync_chunk_int32_sum_equals_plain_sum():
    rng = np.random.default_rng(2)
    vals = [rng.integers(-1000, 1000, 16, dtype=np.int32) for _ in range(4)]
    got = coarse.sync_chunk([v.view(np.uint8) for v in vals], DType.INT32, ReduceOp.SUM)
    assert np.array_equal(got.view(np.int32), sum(vals))


def test_odd_groups_run_the_reverse_ring():
    assert coarse.ring_positions(4, 0) == [0, 1, 2, 3]
    assert coarse.ring_positions(4, 1) == [0, 3, 2, 1]
    with pytest.raises(ValueError):
        coarse.ring_positions(1, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(ReduceOp))
def test_coarse_allreduce_two_groups_matches_per_chunk_sync(dtype, op):
    rng = np.random.default_rng(3)
    p, entry = 4, 16
    bufs = _buffers(rng, dtype, p, 4 * p * entry)
    got = coarse.coarse_allreduce(bufs, dtype, op, entry, n_groups=2)
    chunk = p * entry
    for k in range(4):
        sl = slice(k * chunk, (k + 1) * chunk)
        want = coarse.sync_chunk([b[sl] for b in bufs], dtype, op, coarse.ring_positions(p, k % 2))
        assert np.array_equal(got[sl], want)


def test_coarse_allreduce_refuses_partial_chunks():
    with pytest.raises(ValueError, match="whole number"):
        coarse.coarse_allreduce([np.zeros(40, np.uint8)] * 2, DType.FP32, ReduceOp.SUM, 16)


def test_crossover_and_full_bandwidth_size_on_path_models():
    lat, bw = coarse.PathModel(2e-6, 9e9), coarse.PathModel(4e-6, 16e9)
    s = coarse.crossover_size(lat.time, bw.time)
    exact = 2e-6 / (1 / 9e9 - 1 / 16e9)
    assert abs(s - exact) <= 1
    assert coarse.crossover_size(bw.time, lat.time) == 1 or bw.time(1) > lat.time(1)
    sizes = [1 << k for k in range(10, 26)]
    sp = coarse.full_bandwidth_size(sizes, [bw.time(n) for n in sizes], 0.95)
    assert sp / bw.time(sp) >= 0.95 * sizes[-1] / bw.time(sizes[-1])
    assert (sp // 2) / bw.time(sp // 2) < 0.95 * sizes[-1] / bw.time(sizes[-1])


def test_partitioned_pipeline_beats_fifo_on_unequal_tensors():
    path = coarse.PathModel(1e-6, 10e9)
    tensors = [64 << 20, 1 << 20, 32 << 20]
    shard = 2 << 20
    shards = [ln for n in tensors for _, ln in coarse.partition(n, shard)]
    assert coarse.pipeline_time(shards, path) < coarse.fifo_time(tensors, path)
    half = coarse.PathModel(1e-6, 10e9, full_duplex=False)
    assert coarse.pipeline_time(shards, half) > coarse.pipeline_time(shards, path)


def test_optimal_m_balances_the_two_terms_and_beats_every_layer_split():
    n, p = 100e6, 4
    assert coarse.optimal_m(n, p, 16e9, 9e9, 0.01, 0.02)[0] == n     # long back-prop: proxies take all
    m, t = coarse.optimal_m(n, p, 16e9, 9e9, 0.01, 0.002)
    assert 0 < m < n
    a = 0.01 + 0.002 + 1.5 * (n - m) / 9e9
    b = 0.01 + 1.5 * m / 16e9
    assert abs(a - b) < 1e-9 and abs(t - a) < 1e-12
    layers = [10e6] * 10
    ml, tl = coarse.optimal_m(n, p, 16e9, 9e9, 0.01, 0.002, layers)
    assert tl >= t - 1e-12
    assert all(tl <= coarse.dual_sync_time(sum(layers[10 - k:]), n, p, 16e9, 9e9, 0.01, 0.002) + 1e-12
               for k in range(11))


def test_byteps_worked_example_and_placement():
    n, k, M, B = 32, 16, 1e9, 1e10
    assert byteps.bucket_count(n, k) == 1504
    assert abs(byteps.speedup_over_allreduce(n, k) - 1.46875) < 1e-9
    assert abs(byteps.allreduce_time(n, M, B) / byteps.byteps_time(n, k, M, B) - 1504 / 1024) < 1e-9
    assert abs(16 * byteps.cpu_share(n, k, M) + 32 * byteps.gpu_share(n, k, M) - M) < 1e-3
    assert byteps.byteps_time(n, 0, M, B) == pytest.approx(byteps.allreduce_time(n, M, B))
    assert byteps.byteps_time(n, n, M, B) == pytest.approx(M / B * 2 * (n - 1) * n / byteps.bucket_count(n, n))
    # over D parts, every service gets exactly its share of buckets
    n, k = 4, 2
    D = byteps.bucket_count(n, k)
    placed = byteps.place_parts(3 * D, n, k)
    for j in range(k):
        assert placed.count(("cpu", j)) == 3 * 2 * (n - 1)
    for j in range(n):
        assert placed.count(("gpu", j)) == 3 * (n - k)


def test_summation_service_answers_only_after_all_workers():
    svc = byteps.SummationService(3, DType.FP32)
    xs = [np.full(4, i + 0.5, np.float32).view(np.uint8) for i in range(3)]
    assert svc.push(7, 2, xs[2]) is None
    assert svc.push(7, 0, xs[0]) is None
    with pytest.raises(ValueError, match="twice"):
        svc.push(7, 0, xs[0])
    out = svc.push(7, 1, xs[1])
    assert np.array_equal(out.view(np.float32), np.full(4, 4.5, np.float32))
    asy = byteps.SummationService(2, DType.INT32, asynchronous=True)
    asy.push(0, 0, np.array([5], np.int32).view(np.uint8))
    assert asy.push(0, 1, np.array([2], np.int32).view(np.uint8)).view(np.int32)[0] == 7


def test_byteps_pcie_split_matches_derived_optimum():
    assert byteps.optimal_x(4, 1.0) == pytest.approx(0.2)
    xs = np.linspace(0, 1, 1001)
    best = xs[np.argmin([byteps.pcie_time(x, 4, 1.0, 1.0, 1.0) for x in xs])]
    assert abs(best - 0.2) < 2e-3


def test_docs_hold_the_formats_generated_from_the_layouts():
    from pathlib import Path
    from syncfabric.hdl.coarse.layouts import format_markdown
    text = (Path(__file__).resolve().parents[2] / "docs" / "coarse.md").read_text()
    start = text.index("<!-- generated: format_markdown(16) -->\n") + len("<!-- generated: format_markdown(16) -->\n")
    end = text.index("<!-- end generated -->")
    assert text[start:end] == format_markdown(16)


def test_core_address_map_round_trips():
    from syncfabric.hdl.coarse.layouts import Region, core_addr, decode_core_addr, is_core_addr
    a = core_addr(5, Region.CTRL, 0x30)
    assert is_core_addr(a) and decode_core_addr(a) == (5, Region.CTRL, 0x30)
    assert not is_core_addr(0x1000)
    with pytest.raises(ValueError):
        core_addr(200, Region.RECV)
