"""The engine benchmarks pass every run option through to the runs (no simulation: the runs are stubbed)."""

import pytest

from syncfabric.host import bench


@pytest.mark.parametrize("which", ["sweep", "efficiency"])
def test_chunk_size_and_link_rate_reach_every_run(monkeypatch, which):
    calls = []
    monkeypatch.setattr(bench, "_run", lambda progress, **kw: calls.append(kw) or kw)
    monkeypatch.setattr(bench, "_row", lambda r: r)
    if which == "sweep":
        rows = bench.bench_sweep("small", nbytes=4096, topology="ring:4", buffers=[2, 4], fsms=[1, 2],
                                 progress=False, rate=0.5, chunk_bytes=512)
    else:
        rows = bench.bench_efficiency("small", sizes=[4096], topologies=["ring:4"], progress=False, rate=0.5,
                                      chunk_bytes=512)
    assert rows and len(rows) == len(calls)
    assert all(kw["chunk_bytes"] == 512 and kw["rate"] == 0.5 for kw in calls), calls


@pytest.mark.parametrize("topology, given, expected", [
    ("ring:4", None, bench.BENCH_LATENCY), ("switch:4", None, bench.BENCH_LATENCY),
    ("torus:4x2x2", None, None), ("torus:4x2x2", 40, 40), ("ring:4", 90, 90)])
def test_engine_benchmarks_keep_a_torus_links_unless_a_latency_is_given(monkeypatch, topology, given, expected):
    """A sweep on a torus runs the topology's package hierarchy (latency None reaches the runner) unless
    --latency overrides it; rings and switches keep the benchmarks' 10 cycles."""
    calls = []
    fake = {"cycles": 1, "link_efficiency": 1.0, "status": "OK", "mismatches": 0}
    monkeypatch.setattr(bench, "run_collective", lambda progress, **kw: calls.append(kw) or fake)
    monkeypatch.setattr(bench, "passed", lambda r: True)
    monkeypatch.setattr(bench, "_row", lambda r: r)
    bench.bench_sweep("small", nbytes=4096, topology=topology, latency=given, buffers=[2], fsms=[1],
                      progress=True)
    assert [kw["latency"] for kw in calls] == [expected]
    assert calls[0]["npu_mem"] == "hdl"          # the HDL RAMs by default on Verilator, as `syncfabric run`


@pytest.mark.parametrize("backend, given, expected", [
    ("verilator", None, "hdl"), ("icarus", None, "hdl"), ("amaranth", None, "cocotb"), ("verilator", "cocotb", "cocotb")])
def test_engine_benchmarks_npu_memories(backend, given, expected):
    assert bench.bench_npu_mem(backend, given) == expected
