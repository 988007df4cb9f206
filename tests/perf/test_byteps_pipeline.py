"""BytePS's priority pipeline model (sim/perf/byteps_pipeline.py): a hand-computed case, the bounds that hold
for every input, and the `perf byteps --pipeline` figure."""

import json
import os
import random
import sys

import pytest

from syncfabric.host.cli import main
from syncfabric.sim.perf import byteps_pipeline as bpp
from syncfabric.sim.perf import repro

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402


def test_two_layer_case_computed_by_hand():
    """Two layers of 2 bytes, parts of 1 byte, 1 s per byte and stage, 1 s of forward and backward each.
    Backward: layer 1 ends at 1 (parts a, b ready), layer 0 at 2 (parts c, d).
    FIFO: push a 1-2, b 2-3, c 3-4, d 4-5; pull a 2-3, b 3-4, c 4-5, d 5-6 -> forward 6-7, 7-8: 8 s.
    Priority: push a 1-2, then c 2-3, d 3-4 (layer 0 first), b 4-5; pull a 2-3, c 3-4, d 4-5, b 5-6 ->
    layer 0 ready at 5, layer 1 at 6: forward 5-6, 6-7: 7 s.
    Whole tensors, FIFO: push L1 1-3, L0 3-5; pull L1 3-5, L0 5-7 -> forward 7-9: 9 s.
    After the backward (both at 2): push L1 2-4, L0 4-6; pull L1 4-6, L0 6-8 -> 10 s."""
    layers = [bpp.ModelLayer("l0", 2, 1.0, 1.0), bpp.ModelLayer("l1", 2, 1.0, 1.0)]
    prio = bpp.iteration(layers, 1.0, part_bytes=1, policy="priority")
    fifo = bpp.iteration(layers, 1.0, part_bytes=1, policy="fifo")
    assert (prio.time, prio.layer_ready) == (7.0, (5.0, 6.0))
    assert (fifo.time, fifo.layer_ready) == (8.0, (6.0, 4.0))
    assert bpp.iteration(layers, 1.0, part_bytes=None, policy="fifo").time == 9.0
    assert bpp.iteration(layers, 1.0, part_bytes=None, policy="fifo", after_backward=True).time == 10.0
    # one stage (an all-reduce per part): FIFO a 1-2, b 2-3, c 3-4, d 4-5 -> forward 5-7
    assert bpp.iteration(layers, 1.0, part_bytes=1, policy="fifo", stages=1).time == 7.0


def _random_layers(rng, unit):
    return [bpp.ModelLayer(f"l{i}", unit * rng.randint(0, 6), rng.uniform(0, 3), rng.uniform(0, 3))
            for i in range(rng.randint(1, 8))]


def test_priority_never_slower_than_fifo_with_equal_parts():
    """With parts of one size both policies finish the same set of pulls at the same times (same busy periods
    in each stage); priority only reorders them so the first layers are ready first, and FIFO's first layer
    is always pulled last: priority's iteration is never longer."""
    rng = random.Random(seed_for(2026))
    for _ in range(300):
        unit = rng.choice([1, 3, 8])
        layers = _random_layers(rng, unit)
        c = rng.uniform(0.0, 2.0)
        for stages in (1, 2):
            p = bpp.iteration(layers, c, part_bytes=unit, policy="priority", stages=stages)
            f = bpp.iteration(layers, c, part_bytes=unit, policy="fifo", stages=stages)
            assert p.time <= f.time + 1e-9, (layers, c, stages, p.time, f.time)


def test_priority_at_most_one_part_slower_than_fifo_and_both_bounded_below():
    """Any part sizes: stage 1's unfinished work is the same under both policies, so priority's pulls can
    lag FIFO's by the part in service at most: its iteration is at most one largest part's stage time longer.
    Every iteration is at least the compute and at least one stage's busy time; with free communication it is
    exactly the compute."""
    rng = random.Random(seed_for(61))
    for _ in range(300):
        layers = [bpp.ModelLayer(f"l{i}", rng.randint(0, 50), rng.uniform(0, 3), rng.uniform(0, 3))
                  for i in range(rng.randint(1, 8))]
        c, part = rng.uniform(0.0, 1.0), rng.randint(1, 20)
        p = bpp.iteration(layers, c, part_bytes=part, policy="priority")
        f = bpp.iteration(layers, c, part_bytes=part, policy="fifo")
        whole = bpp.iteration(layers, c, part_bytes=None, policy="fifo")
        after = bpp.iteration(layers, c, part_bytes=None, policy="fifo", after_backward=True)
        assert p.time <= f.time + part * c + 1e-9
        for r in (p, f, whole, after):
            assert r.time >= max(r.compute, r.comm) - 1e-9
        assert after.time >= whole.time - 1e-9
        free = bpp.iteration(layers, 0.0, part_bytes=part, policy="priority")
        assert free.time == pytest.approx(free.compute)


def test_bad_arguments_are_refused():
    layers = [bpp.ModelLayer("l0", 2, 1.0, 1.0)]
    with pytest.raises(ValueError, match="policy"):
        bpp.iteration(layers, 1.0, policy="lifo")
    with pytest.raises(ValueError, match="stages"):
        bpp.iteration(layers, 1.0, stages=3)
    with pytest.raises(ValueError, match="no layers"):
        bpp.iteration([], 1.0)


def test_pipeline_figure_rows_follow_the_formulas(tmp_path):
    """`perf byteps --pipeline`: per model and k in (0, n), partitioning + priority against FIFO and the
    baselines. At k = n BytePS's per-byte time is the PS's (Eq. 6 with k = n is M/B), so their difference is
    the schedule; the rows' communication time is the model bytes at Eq. 6's per-byte time."""
    assert main(["perf", "byteps", "--n", "8", "--kmax", "0", "--pipeline", "--out", str(tmp_path),
                 "--quiet"]) == 0
    rows = json.loads((tmp_path / "byteps_pipeline.json").read_text())["rows"]
    assert {r["model"] for r in rows} == set(bpp.PAPER_MODEL_NOTES) and {r["k"] for r in rows} == {0, 8}
    for r in rows:
        c = bpp.per_byte_time("byteps", 8, r["k"], 100e9 / 8)
        assert r["comm_ms"] == pytest.approx(r["grad_MB"] * (1 << 20) * c * 1e3)
        assert r["priority_ms"] <= r["fifo_parts_ms"] + 4 * (1 << 20) * c * 1e3 + 1e-9
        assert r["priority_ms"] >= max(r["compute_ms"], r["comm_ms"]) - 1e-9
        if r["k"] == 8:
            assert bpp.per_byte_time("byteps", 8, 8, 1.0) == pytest.approx(bpp.per_byte_time("ps", 8, 8, 1.0))
            assert r["ps_ms"] == pytest.approx(r["fifo_tensors_ms"])
    with pytest.raises(ValueError, match="positive"):
        repro.byteps_pipeline(str(tmp_path), n=8, gpu_flops=0)
    for opt, value in (("--gpu-tflops", "nan"), ("--gpu-tflops", "0"), ("--part-mb", "inf"), ("--part-mb", "-1")):
        assert main(["perf", "byteps", "--pipeline", opt, value, "--out", str(tmp_path), "--quiet"]) != 0
