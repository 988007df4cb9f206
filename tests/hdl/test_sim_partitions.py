"""A system simulated as partitions with cut links (hdl/system/cut.py, ``AceSystem(cut=True)``) against the
same system whole, in Amaranth's simulator: every rank's cycles, counters, completions and bytes agree.

The partitions share one simulator here and :class:`~syncfabric.host.transports.ace.amaranth_sim.Coordinator` copies
the cut links' ring rows between them every window, the protocol a multi-process partitioned run follows.
"""

import functools

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.job import CollectiveJob
from syncfabric.host.run import engine_config_for, job_spec
from syncfabric.host.transports.ace.amaranth_sim import Partitions, run_system_amaranth


@functools.lru_cache(maxsize=None)
def _run(topology, collective, nbytes, parts, latency, window=None):
    cfg = engine_config_for(AceConfig.small(), topology)
    j = CollectiveJob(job_spec(collective, topology, nbytes, "fp32", "sum", seed=3), cfg, tag=2)
    res = run_system_amaranth(cfg, topology, lambda r: [j], latency=latency, timeout_cycles=30_000,
                              parts=parts and [list(p) for p in parts], window=window)
    return [(r.cycles, r.counters, [c["status_name"] for c in r.completions], r.mismatches) for r in res]


@pytest.mark.parametrize("topology,collective,parts", [
    ("ring:2", "allreduce", ((0,), (1,))),
    pytest.param("bidir-ring:3", "allgather", ((0,), (1, 2)), marks=pytest.mark.slow),
    pytest.param("ring:4", "allreduce", ((0, 1), (2, 3)), marks=pytest.mark.slow),
])
def test_partitions_are_cycle_identical_to_the_whole_system(topology, collective, parts):
    whole = _run(topology, collective, 768, None, latency=6)
    cut = _run(topology, collective, 768, parts, latency=6)
    assert all(statuses == ["OK"] and mismatches == [0] for _, _, statuses, mismatches in whole)
    assert cut == whole


@pytest.mark.slow
def test_a_window_longer_than_the_links_allow_changes_the_run():
    """The coordinator's window is what keeps the cut exact: one cycle too long and the run differs (or
    fails), so the test above can fail."""
    whole = _run("ring:2", "allreduce", 768, None, latency=6)
    try:
        cut = _run("ring:2", "allreduce", 768, ((0,), (1,)), latency=6, window=6)
    except (AssertionError, TimeoutError):
        return
    assert cut != whole


def test_partitions_must_cover_the_ranks_and_links_must_be_long_enough():
    cfg = engine_config_for(AceConfig.small(), "ring:2")
    with pytest.raises(ValueError, match="every rank"):
        Partitions(cfg, "ring:4", [[0, 1], [2]])
    with pytest.raises(ValueError, match="latency 1 cannot be cut"):
        Partitions(cfg, "ring:2", [[0], [1]], latency=1)
