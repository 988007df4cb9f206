"""ACE Figs. 6, 9b and 12 in the performance model: the properties each reproduction must have, whatever
the model's figures are (docs/results.md has the figures)."""

import math

import pytest

from syncfabric.sim.perf import repro
from syncfabric.sim.perf.collective import collective_time
from syncfabric.sim.perf.system import CONFIGS, Endpoint, SystemParams, torus_for
from syncfabric.sim.perf.training import simulate
from syncfabric.sim.perf.workload import load_workload

GB = 1e9


@pytest.fixture(scope="module")
def fig6_rows(tmp_path_factory):
    rows, summary = repro.fig6(str(tmp_path_factory.mktemp("fig6")), sizes=(16, 64), sms=range(1, 13),
                               budgets=(256, 450, 900))
    return rows, summary


def test_fig6_bandwidth_grows_with_sms_until_the_memory_budget_and_stops_there(fig6_rows):
    """More SMs never drive less; below the SMs whose 80 GB/s each cover the budget every SM adds bandwidth,
    beyond them none does; the plateau is what the budget alone drives with every SM (fig5's point)."""
    rows, _ = fig6_rows
    for n in (16, 64):
        ideal = collective_time("allreduce", 64 << 20, torus_for(n), CONFIGS["Ideal"]).network_bw / GB
        for b in (256, 450, 900):
            bw = [r["network_bw_GBps"] for r in rows if r["npus"] == n and r["mem_budget_GBps"] == b]
            assert all(y >= x * (1 - 1e-9) for x, y in zip(bw, bw[1:]))
            assert max(bw) <= ideal * (1 + 1e-9)
            full = math.ceil(b / 80)
            if full <= len(bw):
                # below the budget each SM adds bandwidth until the links, not the SMs, are the limit
                assert all(y > x * 1.01 for x, y in zip(bw[:full - 1], bw[1:full]) if x < 0.99 * bw[-1])
                assert bw[-1] == pytest.approx(bw[full - 1], rel=1e-6)
                every = Endpoint("Baseline", "npu", comm_mem_bw=b * GB, comm_sms=80)
                assert bw[-1] == pytest.approx(
                    collective_time("allreduce", 64 << 20, torus_for(n), every).network_bw / GB, rel=1e-6)


def test_fig6_summary_agrees_with_its_rows(fig6_rows):
    rows, summary = fig6_rows
    for key, v in summary.items():
        n, b = map(int, key.split("@"))
        sel = {r["sms"]: r for r in rows if r["npus"] == n and r["mem_budget_GBps"] == b}
        if v["sms_for_90pct_ideal"] is None:
            assert all(r["of_ideal"] < 0.9 for r in sel.values())
        else:
            k = v["sms_for_90pct_ideal"]
            assert sel[k]["of_ideal"] >= 0.9 and (k == 1 or sel[k - 1]["of_ideal"] < 0.9)


def test_busy_time_is_the_union_of_intervals_clipped_to_the_window():
    assert repro._busy([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    assert repro._busy([(-1, 1), (9, 12)], 0, 10) == 2
    assert repro._busy([(2, 3), (0, 5)], 0, 10) == 5
    assert repro._busy([], 0, 1) == 0


@pytest.fixture(scope="module")
def fig9b_rows(tmp_path_factory):
    return repro.fig9b(str(tmp_path_factory.mktemp("fig9b")), npus=16, compute="roofline")


def test_fig9b_utilization_is_a_fraction_and_back_propagation_uses_ace_more(fig9b_rows):
    got = {(r["workload"], r["pass"]): r for r in fig9b_rows}
    for w in ("resnet50", "gnmt", "dlrm"):
        fwd, bwd = got[(w, "fwd")], got[(w, "bwd")]
        for r in (fwd, bwd):
            assert 0 <= r["utilization"] <= r["from_first"] <= 1
            assert r["busy_us"] <= r["window_us"] * (1 + 1e-9)
        assert bwd["utilization"] > fwd["utilization"]
        assert bwd["collectives"] > fwd["collectives"]
    # DLRM issues its forward all-to-all in the forward pass, so ACE works there; the others issue nothing
    assert got[("dlrm", "fwd")]["collectives"] == 1 and got[("dlrm", "fwd")]["utilization"] > 0


def test_pass_utilization_counts_each_collective_in_the_pass_that_issued_it():
    res = simulate(load_workload("dlrm"), torus_for(16), CONFIGS["ACE"], iterations=3)
    windows = {ps: (s, e) for it, ps, s, e in res.passes if it == 1}
    assert windows["fwd"][1] == windows["bwd"][0]
    for iv in res.history:
        if iv.iteration == 1:
            s, e = windows[iv.phase]
            assert s <= iv.issued <= e and iv.start >= iv.issued
    u = repro.pass_utilization(res, 1)
    assert u["fwd"]["collectives"] + u["bwd"]["collectives"] == res.collectives


@pytest.mark.parametrize("config", ["BaselineCompOpt", "ACE"])
def test_embedding_side_stream_takes_lookup_and_update_off_the_compute_stream(config):
    wl = load_workload("dlrm")
    ep = CONFIGS[config]
    base = simulate(wl, torus_for(16), ep, iterations=4)
    side = simulate(wl, torus_for(16), ep, iterations=4, embedding_side=(1, 80 * GB))
    assert side.compute < base.compute
    assert side.collectives == base.collectives
    emb = [iv for iv in side.timeline if iv.layer == "embeddings"]
    assert {iv.kind for iv in emb} >= {"lookup", "update"}
    assert not [iv for iv in emb if iv.kind in ("fwd", "wg")]
    # one side stream: its intervals never overlap
    stream = sorted((iv.start, iv.end) for iv in side.timeline if iv.kind in ("lookup", "update"))
    assert all(b[0] >= a[1] - 1e-15 for a, b in zip(stream, stream[1:]))
    # iteration k's all-to-all is issued during iteration k - 1, once its lookup ran there
    starts = {it: s for it, ps, s, _ in side.passes if ps == "fwd"}
    early = [iv for iv in side.history if iv.phase == "fwd" and 1 <= iv.iteration < side.iterations]
    assert early
    for iv in early:
        assert starts[iv.iteration - 1] < iv.issued < starts[iv.iteration]


def test_embedding_side_stream_is_refused_where_it_cannot_run(tmp_path):
    wl = load_workload("dlrm")
    with pytest.raises(ValueError, match="must take part"):
        simulate(wl, torus_for(16), CONFIGS["ACE"], embedding_side=(80, 80 * GB))
    with pytest.raises(ValueError, match="must take part"):
        simulate(wl, torus_for(16), CONFIGS["ACE"], embedding_side=(1, 2000 * GB))
    with pytest.raises(ValueError, match="side stream"):
        simulate(wl, torus_for(16), CONFIGS["ACE"], compute_s=1e-3, embedding_side=(1, 80 * GB))
    with pytest.raises(ValueError, match="no model-parallel embedding"):
        repro.fig12(str(tmp_path), sizes=(16,), workload="resnet50")


def test_fig12_overlap_is_never_much_slower_and_ace_gains_more_than_the_baseline(tmp_path):
    rows = repro.fig12(str(tmp_path), sizes=(16, 64))
    for r in rows:
        assert r["overlap_compute_ms"] < r["default_compute_ms"]
        assert r["speedup"] > 0.99          # a communication-bound DLRM may lose the SM's compute share
    at16 = {r["config"]: r["speedup"] for r in rows if r["npus"] == 16}
    assert at16["ACE"] > at16["BaselineCompOpt"] >= 1.0
