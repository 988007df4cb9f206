"""Sven's model (sim/golden/sven.py): the four-stage pipeline (dependencies, streams, FIFO queues, staleness,
eq. 6.1 and 6.2) and the embedding placement policies on a Zipf stream."""

import math

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from syncfabric.sim.golden import sven

_T = st.floats(0.0, 10.0, allow_nan=False)
_STAGES = st.builds(sven.Stages, _T, _T, _T, _T, _T, _T, _T, _T, _T)
_COMPUTE = ("sfp", "fp", "bp", "sbp", "opt")
_COMM = ("fa2a", "ba2a", "allreduce")
_NEEDS = {"fa2a": ("sfp",), "fp": ("fa2a",), "bp": ("fp",), "ba2a": ("bp",), "allreduce": ("bp",),
          "sbp": ("ba2a",), "opt": ("allreduce",)}


def _check_schedule(stg, res, n):
    """Every task runs once, after what it needs, and each stream runs one task at a time."""
    assert len(res.starts) == 8 * n
    end = {(k, i): s + getattr(stg, k) for (k, i), s in res.starts.items()}
    for (k, i), s in res.starts.items():
        for d in _NEEDS.get(k, ()):
            assert s >= end[(d, i)] - 1e-9, (k, i, d)
    for stream in (_COMPUTE, _COMM):
        spans = sorted((res.starts[(k, i)], end[(k, i)]) for k in stream for i in range(n))
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    assert max(end.values()) <= res.time + 1e-9
    # the slots a program runs: every task once, none needing another of its own slot
    flat = [t for slot in res.slots for t in slot]
    assert sorted(flat) == sorted(res.starts)
    for slot in res.slots:
        assert not any((d, i) in slot for k, i in slot for d in _NEEDS.get(k, ()))


@settings(max_examples=60, deadline=None)
@given(stg=_STAGES, n=st.integers(1, 12))
def test_pipeline_respects_dependencies_streams_queues_and_the_staleness_bound(stg, n):
    res = sven.pipeline(stg, n)
    _check_schedule(stg, res, n)
    assert res.max_queue <= sven.QUEUE_CAPACITY
    assert max(res.staleness) <= 3
    # each stream must do its iteration's work: throughput never above the busier stream's rate
    assert res.time >= n * max(stg.compute, stg.communication) - 1e-9
    for stream in (_COMPUTE, _COMM):
        assert sum(res.busy[k] for k in stream) <= 1 + 1e-9


@settings(max_examples=60, deadline=None)
@given(stg=_STAGES, n=st.integers(1, 12))
def test_sequential_is_the_sum_of_every_stage(stg, n):
    res = sven.pipeline(stg, n, pipelined=False)
    _check_schedule(stg, res, n)
    assert res.time == pytest.approx(sven.sequential_time(stg, n), rel=1e-9, abs=1e-9)
    assert max(res.staleness) == 0


@settings(max_examples=60, deadline=None)
@given(stg=_STAGES, n=st.integers(2, 30), extra=st.integers(1, 30))
def test_steady_state_rounds_cost_eq_6_2(stg, n, extra):
    """Fill and drain cost a constant; each further iteration costs exactly eq. 6.2's round. From two
    iterations on: a second iteration may still overlap the first one's fill (Stages(1, 1, 1, 0, ...) adds 1,
    not eq. 6.2's 2), so the pipeline is in steady state only from there."""
    a, b = sven.pipeline(stg, n), sven.pipeline(stg, n + extra)
    assert b.time - a.time == pytest.approx(sven.closed_form(stg, extra), rel=1e-9, abs=1e-9)
    assert b.rounds - a.rounds == extra


def test_the_queue_fills_to_its_capacity_and_a_smaller_queue_costs_throughput_and_staleness():
    stg = sven.Stages(1, 2, 3, 4, 2, 5, 1, 0.5)
    two, one = sven.pipeline(stg, 40), sven.pipeline(stg, 40, capacity=1)
    assert two.max_queue == 2 and max(two.staleness) == 3
    assert one.max_queue == 1 and max(one.staleness) < 3
    assert one.time > two.time


def test_pipelining_pays_when_compute_and_communication_are_comparable():
    comm_bound = sven.Stages(sfp=0.1, fp=1, fa2a=1, bp=2, ba2a=2, allreduce=1, sbp=1, opt=0.2)
    compute_only = sven.Stages(sfp=0.1, fp=1, fa2a=0, bp=2, ba2a=0, allreduce=0, sbp=1, opt=0.2)
    n = 50
    speed = sven.pipeline(comm_bound, n, False).time / sven.pipeline(comm_bound, n).time
    assert 1.5 < speed <= sven.sequential_time(comm_bound, 1) / max(comm_bound.compute, comm_bound.communication)
    assert sven.pipeline(compute_only, n).time >= sven.pipeline(compute_only, n, False).time - 1e-9


def test_busy_fractions_are_the_task_time_over_the_total():
    stg = sven.Stages(1, 2, 3, 4, 2, 5, 1, 0.5)
    res = sven.pipeline(stg, 20)
    for k in _COMPUTE + _COMM:
        assert res.busy[k] == pytest.approx(20 * getattr(stg, k) / res.time)
    assert res.throughput == pytest.approx(20 / res.time)


@pytest.mark.parametrize("bad", [dict(sfp=-1.0), dict(fp=math.nan), dict(opt=math.inf)])
def test_stage_times_must_be_finite_and_non_negative(bad):
    kw = dict(sfp=1, fp=1, fa2a=1, bp=1, ba2a=1, allreduce=1, sbp=1, opt=1)
    kw.update(bad)
    with pytest.raises(ValueError):
        sven.Stages(**kw)


# ---- placement ----------------------------------------------------------------------------------------------

STREAM = sven.ZipfStream(rows=4000, s=1.05, batches=40, batch=512, seed=3)
ALPHAS = (0.005, 0.02, 0.05, 0.1, 0.3)


@pytest.fixture(scope="module")
def hits():
    return {p: [sven.place(STREAM, a, p).hit_ratio for a in ALPHAS] for p in sven.POLICIES}


def test_hit_ratio_grows_with_alpha(hits):
    for p in ("hot", "lru", "importance"):
        assert all(x <= y + 1e-12 for x, y in zip(hits[p], hits[p][1:])), p
    assert hits["hot"][-1] > hits["hot"][0]


def test_frequency_placements_beat_lru_and_random_on_a_static_zipf_stream(hits):
    for a, hot, imp, lru, rnd in zip(ALPHAS, hits["hot"], hits["importance"], hits["lru"], hits["random"]):
        assert hot > lru and imp > lru, a
        assert hot > rnd, a


def test_a_uniform_stream_leaves_nothing_to_place():
    flat = sven.ZipfStream(rows=2000, s=0.0, batches=20, batch=512, seed=1)
    for p in ("hot", "random"):
        assert sven.place(flat, 0.25, p).hit_ratio == pytest.approx(0.25, abs=0.03)


def test_all_or_nothing_on_the_gpu():
    for p in sven.POLICIES:
        assert sven.place(STREAM, 0.0, p).hit_ratio == 0.0
        assert sven.place(STREAM, 1.0, p).hit_ratio >= (1.0 if p != "lru" else 0.9)


def test_importance_follows_a_shifting_hot_set():
    """After the warm-up the hot rows change: the static partition goes stale, eq. 6.3's weights follow."""
    a, b = sven.ZipfStream(rows=3000, batches=20, batch=512, seed=5), \
        sven.ZipfStream(rows=3000, batches=20, batch=512, seed=6)
    ids = np.concatenate([a.draw()[0][:4], b.draw()[0][4:]])

    class Shifted(sven.ZipfStream):
        def draw(self):
            return ids, np.zeros(ids.shape, bool)

    s = Shifted(rows=3000, batches=20, batch=512)
    assert sven.place(s, 0.05, "importance").hit_ratio > sven.place(s, 0.05, "hot").hit_ratio + 0.1


def test_lookup_time_falls_with_the_hit_ratio():
    lo, hi = sven.place(STREAM, 0.01, "hot"), sven.place(STREAM, 0.1, "hot")
    t_lo, t_hi = sven.lookup_time(lo, 16, 1.5e12, 16e9), sven.lookup_time(hi, 16, 1.5e12, 16e9)
    assert t_hi[0] < t_lo[0] and t_hi[1] < t_lo[1]
    assert t_hi[1] == pytest.approx(2 * t_hi[0])     # static: no migrations, the update reads and writes


@pytest.mark.parametrize("alpha", [-0.1, 1.5, math.nan])
def test_alpha_out_of_range_is_refused(alpha):
    with pytest.raises(ValueError):
        sven.place(STREAM, alpha)
