"""``perf sven`` (sim/perf/sven.py): stage times from the collective model and the roofline, and the
reproduction's outputs."""

import json
import math
import os

import pytest

from syncfabric.sim.golden import sven as model
from syncfabric.sim.perf import sven as perf


def test_one_gpu_has_no_communication_and_a_slower_link_makes_more():
    for m in perf.MODELS:
        one = perf.stages(m, 1)
        assert one.communication == 0 and one.input_a2a == 0 and one.compute > 0
        fast, slow = perf.stages(m, 8, link_GBps=25.0), perf.stages(m, 8, link_GBps=12.5)
        assert slow.fa2a > fast.fa2a and slow.allreduce > fast.allreduce
        assert slow.compute == pytest.approx(fast.compute)


def test_host_embeddings_slow_only_the_sparse_stages():
    gpu, host = perf.stages("DeepFM", 8, hit_ratio=1.0), perf.stages("DeepFM", 8, hit_ratio=0.0)
    assert host.sfp > 10 * gpu.sfp and host.sbp > 10 * gpu.sbp
    assert host.fp == gpu.fp and host.fa2a == gpu.fa2a


def test_wide_models_carry_more_dense_parameters():
    assert perf.dense_params("W&D") > perf.dense_params("DeepFM")
    assert perf.dense_params("DCN") > perf.dense_params("DeepFM")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sven")
    rows, meta = perf.sven(str(out), npus=8, sizes=(1, 4, 8), iterations=30, alphas=(0.01, 0.05, 0.2),
                           rows=4000, batches=20)
    return out, rows, meta


def test_outputs_are_written(run):
    out, rows, _ = run
    for f in ("sven.csv", "sven.json", "sven.svg", "sven_placement.svg"):
        assert os.path.getsize(out / f) > 0
    assert json.load(open(out / "sven.json"))["rows"] == json.loads(json.dumps(rows))


def test_pipeline_rows_lie_between_the_bounds(run):
    _, rows, meta = run
    for r in (r for r in rows if r["part"] == "pipeline"):
        st = model.Stages(**meta["stages_ms"][r["model"]])
        assert r["pipelined_ms"] >= max(st.compute, st.communication) - 1e-12
        assert 1 < r["speedup"] <= r["sequential_ms"] / max(st.compute, st.communication) + 1e-9
        assert r["max_staleness"] <= 3


def test_scaling_factor_is_one_alone_and_at_most_one_beyond(run):
    _, rows, _ = run
    for m in perf.MODELS:
        f = {r["npus"]: r for r in rows if r["part"] == "scaling" and r["model"] == m}
        assert f[1]["scaling_factor"] == pytest.approx(1.0)
        assert all(0 < f[n]["scaling_factor"] < 1 for n in (4, 8))
        # the pipeline hides communication the sequential execution pays
        assert all(f[n]["scaling_factor"] > f[n]["scaling_factor_sequential"] for n in (4, 8))


def test_hot_placement_trains_faster_than_random(run):
    _, rows, _ = run
    for r in (r for r in rows if r["part"] == "placement"):
        assert r["hot_hit"] > r["random_hit"]
        for m in perf.MODELS:
            assert r[f"{m}_hot_over_random"] > 1


@pytest.mark.parametrize("kw", [dict(npus=1), dict(npus=2048), dict(sizes=(0,)), dict(sizes=()),
                                dict(iterations=0), dict(link_GBps=math.nan), dict(link_GBps=0.0)])
def test_bad_parameters_are_refused(tmp_path, kw):
    with pytest.raises(ValueError):
        perf.sven(str(tmp_path), **kw)
