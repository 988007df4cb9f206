"""RNA's protocol model (sim/golden/rna.py): probes and expiry, null contributions, merging and the staleness
bound, learning-rate scaling, the grouping rule, the hierarchical mode's parameter server, and what it buys
under stragglers."""

import math

import numpy as np
import pytest

from syncfabric.sim.golden import rna


def ring_ms(k):
    return 0.5 * (k - 1) / k


class Recording(rna.SumCollectives):
    """Sums as the model does and keeps every round's contributions."""

    def __init__(self):
        super().__init__(ring_ms)
        self.calls = []

    def allreduce(self, ranks, contributions):
        self.calls.append({r: (None if c is None else c.copy()) for r, c in contributions.items()})
        return super().allreduce(ranks, contributions)


def run(n=8, delays=None, rounds=60, seed=3, coll=None, **kw):
    task = rna.LeastSquares(n, dim=16, seed=seed)
    coll = coll or rna.SumCollectives(ring_ms)
    settings = rna.RnaSettings(lr=0.5 / n, **kw)
    return task, rna.simulate(task, delays or rna.Delays(20.0, 50.0), settings, coll, n, rounds=rounds, seed=seed)


@pytest.mark.parametrize("kw", [dict(probes=1), dict(probes=2), dict(probes=3, staleness=0),
                                dict(mode="barrier"), dict(groups=[[0, 1, 2], [3, 4, 5, 6, 7]])])
def test_every_gradient_is_merged_dropped_or_still_waiting_and_rounds_are_consistent(kw):
    _, res = run(**kw)
    assert all(c == a + d + w for c, a, d, w in zip(res.computed, res.applied, res.dropped, res.waiting))
    assert sum(res.applied) > 0
    sizes = {i: len(g) for i, g in enumerate(res.groups)}
    for r in res.rounds:
        assert 1 <= r.contributors == sizes[r.group] - r.nulls
        assert r.start <= r.activate < r.end
        if kw.get("mode") == "barrier":
            assert r.initiator is None and r.nulls == 0 and not r.probed
        else:
            assert r.initiator in r.probed and r.expired == len(r.probed) - 1
            assert len(set(r.probed)) == len(r.probed) == min(kw.get("probes", 2), sizes[r.group])
    per_group = [[r for r in res.rounds if r.group == g] for g in sizes]
    for rounds in per_group:      # a group's rounds follow each other: the controller starts one at a time
        assert all(a.end <= b.start + 1e-9 for a, b in zip(rounds, rounds[1:]))


def test_the_first_probed_rank_to_be_ready_initiates_and_the_other_probes_expire():
    # deterministic compute: rank r finishes a gradient every 10 * (r + 1) ms; every rank probed
    n, probe = 4, 0.5
    _, res = run(n=n, delays=rna.Delays(tuple(10.0 * (r + 1) for r in range(n))), probes=n, rounds=12,
                 probe_ms=probe)
    first = res.rounds[0]
    assert first.initiator == 0 and first.expired == n - 1
    assert first.response_ms == pytest.approx(10.0)
    assert first.activate == pytest.approx(10.0 + 2 * probe)      # the reply, then the activation
    after = 0.0                         # gradients finished after the last activation wait for this round
    for r in res.rounds:
        ready = r.activate - 2 * probe
        done = [k * 10.0 * (q + 1) for q in range(n) for k in range(1, 100)
                if after < k * 10.0 * (q + 1) <= ready + 1e-9]
        # ready is the first moment a rank holds a gradient: at the probe's arrival or a finish after it
        assert ready == pytest.approx(max(r.start + probe, min(done)))
        assert any(k * 10.0 * (r.initiator + 1) == pytest.approx(t) for t in done for k in range(1, 100))
        after = r.activate
    # rank 3 (40 ms) is ready only every fourth round or so: it contributes null in between
    assert sum(r.nulls for r in res.rounds) > 0 and res.applied[0] > res.applied[3]


def test_a_round_applies_the_contributors_sum_with_the_learning_rate_scaled_by_their_count():
    coll = Recording()
    n = 6
    task, res = run(n=n, coll=coll, rounds=1, probes=1)
    got = res.params[0]
    contribs = [c for c in coll.calls[0].values() if c is not None]
    total = np.zeros(task.dim, dtype=np.float32)
    for r in range(n):                  # the model's sum: rank order, float32
        c = coll.calls[0][r]
        if c is not None:
            total = total + c
    k = len(contribs)
    want = (task.initial() - np.float32(0.5 / n * k) * (total / np.float32(k))).astype(np.float32)
    assert res.rounds[0].contributors == k
    assert got.tobytes() == want.tobytes()


def test_waiting_gradients_merge_linearly_by_version_and_stale_ones_are_dropped():
    g = [np.full(3, v, dtype=np.float32) for v in range(6)]
    queue = [(1, g[1]), (3, g[3]), (4, g[4]), (0, g[0])]
    merged, used, dropped = rna.merge_gradients(queue, version=5, staleness=4)
    # version 0 is 5 old (> 4): dropped; kept 1, 3, 4 weigh 1, 3, 4 (t - oldest + 1)
    assert (used, dropped) == (3, 1)
    assert merged == pytest.approx(np.full(3, (1 * 1 + 3 * 3 + 4 * 4) / 8))
    assert rna.merge_gradients([(2, g[2])], 9, 4) == (None, 0, 1)
    one, used, dropped = rna.merge_gradients([(7, g[5])], 9, 4)
    assert one is g[5] and (used, dropped) == (1, 0)


def test_no_merged_gradient_is_older_than_the_staleness_bound():
    for bound in (0, 1, 3):
        task = rna.LeastSquares(8, dim=8, seed=2)
        seen = []
        real = rna.merge_gradients

        def spy(queue, version, staleness):
            seen.extend(version - v for v, _ in queue if version - v <= staleness)
            return real(queue, version, staleness)
        rna.merge_gradients = spy
        try:
            rna.simulate(task, rna.Delays(5.0, 60.0, slow_ranks=(7,), slow_ms=(100.0, 200.0)),
                         rna.RnaSettings(staleness=bound, lr=0.05), rna.SumCollectives(ring_ms), 8, rounds=80)
        finally:
            rna.merge_gradients = real
        assert seen and max(seen) <= bound


def test_the_grouping_rule_splits_while_the_spread_exceeds_the_mean():
    assert rna.group_ranks({0: 10, 1: 12, 2: 11, 3: 13}) == [[0, 1, 2, 3]]
    assert rna.group_ranks({0: 10, 1: 11, 2: 100, 3: 105}) == [[0, 1], [2, 3]]
    # a spread inside the fast half splits it again: 1 vs 9 (mean 5, spread 8)
    assert rna.group_ranks({0: 1, 1: 9, 2: 200, 3: 210}) == [[0], [1], [2, 3]]
    times = rna.profile_ranks(rna.Delays(10.0, 5.0, slow_ranks=(2, 3), slow_ms=(100.0, 110.0)), 4, 20, 1)
    assert rna.group_ranks(times) == [[0, 1], [2, 3]]


def test_hierarchical_groups_run_asynchronously_through_the_parameter_server():
    delays = rna.Delays(10.0, 5.0, slow_ranks=(4, 5, 6, 7), slow_ms=(100.0, 110.0))
    task, res = run(delays=delays, groups="auto", rounds=120, ps_ms=2.0)
    assert res.groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    fast = [r for r in res.rounds if r.group == 0]
    slow = [r for r in res.rounds if r.group == 1]
    assert len(fast) > 3 * len(slow) > 0          # the fast group does not wait for the slow one
    assert res.server_pushes == len(res.rounds)
    assert res.rounds[-1].loss < 0.2 * task.loss(task.initial())
    with pytest.raises(ValueError, match="exactly once"):
        run(groups=[[0, 1], [1, 2, 3, 4, 5, 6, 7]])


def test_under_stragglers_rna_reaches_the_target_loss_before_the_barrier():
    """The protocol against Horovod's barrier on the same model and delays: RNA's rounds are shorter but carry
    fewer contributions (nulls, stale gradients), so this can go either way; with 0-50 ms delays on 20 ms of
    compute RNA must win, and without delays every rank contributes to every round."""
    n = 8
    task = rna.LeastSquares(n, dim=32, seed=1)
    goal = 0.05 * task.loss(task.initial())
    coll = rna.SumCollectives(ring_ms)
    times = {}
    for name, settings in (("barrier", rna.RnaSettings(mode="barrier", lr=0.5 / n)),
                           ("rna2", rna.RnaSettings(probes=2, lr=0.5 / n))):
        res = rna.simulate(task, rna.Delays(20.0, 50.0), settings, coll, n, rounds=2000, target_loss=goal)
        times[name] = res.time_to(goal)
    print(times)
    assert math.isfinite(times["barrier"]) and times["rna2"] < times["barrier"] / 1.1
    _, calm = run(n=n, delays=rna.Delays(20.0), rounds=30)
    assert all(r.contributors == n for r in calm.rounds[1:])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="mode"):
        rna.RnaSettings(mode="gossip")
    with pytest.raises(ValueError, match="probes"):
        rna.RnaSettings(probes=0)
    with pytest.raises(ValueError, match="positive"):
        rna.Delays(0.0)
    with pytest.raises(ValueError, match="rounds"):
        rna.simulate(rna.LeastSquares(2), rna.Delays(), rna.RnaSettings(), rna.SumCollectives(ring_ms), 2)
    with pytest.raises(ValueError, match="3 ranks"):
        rna.simulate(rna.LeastSquares(3), rna.Delays(), rna.RnaSettings(), rna.SumCollectives(ring_ms), 2,
                     rounds=1)
    with pytest.raises(ValueError, match="base compute times"):
        rna.simulate(rna.LeastSquares(2), rna.Delays((1.0, 2.0, 3.0)), rna.RnaSettings(),
                     rna.SumCollectives(ring_ms), 2, rounds=1)
