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
