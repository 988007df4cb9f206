"""Partitioned co-simulation (syncfabric.host.transports.ace.partition): a system cut into partitions, each its own
simulator process exchanging the cut links' rows through the hub, against the same system in one process.

The single-process reference is a run with one partition: the whole system (no link cut), the same barrier
rule (ranks post at the first window boundary after all are ready). Every rank's completion cycles, counters,
statuses and output bytes must agree; the completion cycles also agree with the plain testbench (its barrier
posts at once, and a collective's cycles count from its descriptor fetch).
"""

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.run import engine_config_for, job_spec
from syncfabric.host.transports.ace import run_system
from syncfabric.host.transports.ace.partition import Hub, plan, run_partitioned, split_ranks

pytestmark = pytest.mark.cocotb


def _jobs(topology, both=True):
    """An all-reduce and (``both``) an all-gather: two commands in a row, so the second starts with the cut
    links' rings holding the first's rows."""
    jobs = [{"spec": job_spec("allreduce", topology, 1536, "fp32", "sum", seed=5), "tag": 1},
            {"spec": job_spec("allgather", topology, 512, "int32", "sum", seed=6), "tag": 2}]
    return jobs if both else jobs[:1]


def _fingerprint(res):
    """What must agree between runs: per command and rank the status, completion cycles, bytes; per rank the
    counters."""
    jobs = [(j["status"], j["mismatches"], j["guard_touched"], j.get("cycles")) for j in res["jobs"]]
    return jobs, res["counters"]


@pytest.mark.parametrize("sim,topology", [pytest.param("verilator", "torus:2x2", marks=pytest.mark.slow),
                                          ("verilator", "ring:2"), ("icarus", "ring:2")])
def test_a_partitioned_torus_is_cycle_identical_to_one_process(sim, topology):
    """The default run cuts ring:2 on both simulators (Icarus, the slow one, runs the all-reduce only); the
    torus is behind the slow marker."""
    cfg = engine_config_for(AceConfig.small(), topology)
    jobs = _jobs(topology, both=sim == "verilator")
    one = run_partitioned(cfg, topology, jobs, partitions=1, sim=sim, latency=12, window=11,
                          scheduler="processes")
    two = run_partitioned(cfg, topology, jobs, partitions=2, sim=sim, latency=12)
    assert all(s == "OK" for j in one["jobs"] for s in j["status"])
    assert _fingerprint(two) == _fingerprint(one)
    assert [p["ranks"] for p in two["partitions"]] == split_ranks(topology, 2)
    assert two["window"] == 11
    assert all(p["crossed"] > 0 for p in two["partitions"])      # flits and credits did cross the cut
    plain = run_system(cfg, topology, jobs, sim=sim, latency=12)
    assert [j["cycles"] for j in plain["jobs"]] == [j["cycles"] for j in one["jobs"]]


def test_retransmission_acknowledgements_cross_the_cut():
    """With link retransmission (64-flit replay buffers, an all-reduce of 96 flits per direction) the ACKs
    ride the cut links' credit rows, and each partition sets its own ranks' REPLAY_TIMEOUT at bring-up: the
    partitioned run is cycle-identical to one process, with no replay. (That a row carrying only an ACK is
    shipped is checked on the cut link itself: tests/hdl/test_cut.py.)"""
    cfg = engine_config_for(AceConfig.small(replay_flits=64), "ring:2")
    jobs = _jobs("ring:2", both=False)
    one = run_partitioned(cfg, "ring:2", jobs, partitions=1, sim="icarus", latency=12, window=11,
                          scheduler="processes")
    two = run_partitioned(cfg, "ring:2", jobs, partitions=2, sim="icarus", latency=12)
    assert all(s == "OK" for j in one["jobs"] for s in j["status"])
    assert _fingerprint(two) == _fingerprint(one)
    assert all(sum(c["TX_REPLAYS"]) == 0 for c in one["counters"])


def test_a_partitioned_run_that_fails_stops_every_partition():
    """A rank that cannot finish (a timeout far too short) fails its partition; the other is stopped through
    the hub rather than left waiting, and the error names the partition."""
    topology = "ring:4"
    cfg = engine_config_for(AceConfig.small(), topology)
    res = run_partitioned(cfg, topology, _jobs(topology)[:1], partitions=2, sim="icarus", latency=8,
                          timeout_cycles=50, check=False, scheduler="processes")
    assert "error" in res and "partition" in res["error"]


def test_partitionings_are_checked():
    assert split_ranks("torus:4x2", 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_ranks("ring:5", 2) == [[0, 1], [2, 3, 4]]
    with pytest.raises(ValueError, match="partitions must be"):
        split_ranks("ring:4", 5)
    with pytest.raises(ValueError, match="exactly once"):
        plan("ring:4", [[0, 1], [1, 2, 3]])
    with pytest.raises(ValueError, match="switch"):
        plan("switch:4", [[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="latency 1"):
        plan("ring:4", [[0, 1], [2, 3]], latency=1)
    with pytest.raises(ValueError, match="window must be"):
        plan("ring:4", [[0, 1], [2, 3]], latency=8, window=8)
    assert plan("ring:4", [[0, 1], [2, 3]], latency=8) == 7
    cfg = engine_config_for(AceConfig.small(), "ring:4")
    with pytest.raises(ValueError, match="no late posting"):
        run_partitioned(cfg, "ring:4", _jobs("ring:4"), latency=8, link_stall=0.1)


def test_the_hub_routes_rows_to_the_other_half_and_ands_the_flags():
    """Two partitions of ring:2 (links (0,0,1,0) and (1,0,0,0)... as keys) through a real hub on a socket."""
    import threading

    from syncfabric.host.transports.ace.partition import HubPeer

    hub = Hub("ring:2", [[0], [1]])
    key01, key10 = (0, 0, 1, 1), (1, 0, 0, 1)
    replies = [None, None]

    def partition(k, message):
        peer = HubPeer(hub.address, hub.authkey.hex(), k)
        replies[k] = [peer.exchange(message)]
        replies[k].append(peer.exchange({"flits": {}, "credits": {}, "arrived": True, "done": True}))
        peer.close()

    t = [threading.Thread(target=partition, args=(0, {"flits": {key01: [(3, 7)]}, "credits": {key10: [(4, 1)]},
                                                       "arrived": True, "done": False})),
         threading.Thread(target=partition, args=(1, {"flits": {key10: [(5, 9)]}, "credits": {key01: [(6, 2)]},
                                                       "arrived": False, "done": True}))]
    for th in t:
        th.start()
    for th in t:
        th.join(timeout=30)
    hub.close()
    assert replies[1][0]["flits"] == {key01: [(3, 7)]} and replies[0][0]["flits"] == {key10: [(5, 9)]}
    assert replies[0][0]["credits"] == {key01: [(6, 2)]} and replies[1][0]["credits"] == {key10: [(4, 1)]}
    assert not replies[0][0]["go"] and not replies[0][0]["stop"]
    assert replies[0][1]["go"] and replies[0][1]["stop"] and replies[1][1]["stop"]
    assert hub.error is None


def test_a_partition_that_goes_away_aborts_the_others():
    """A partition whose simulator dies mid-run (its connection closes) ends the run for the others with an
    error that names it, instead of leaving them waiting for its rows."""
    from syncfabric.host.transports.ace.partition import HubPeer

    hub = Hub("ring:2", [[0], [1]])
    alive = HubPeer(hub.address, hub.authkey.hex(), 0)
    dead = HubPeer(hub.address, hub.authkey.hex(), 1)
    dead.close()
    with pytest.raises(RuntimeError, match="partition 1 went away"):
        alive.exchange({"flits": {}, "credits": {}, "arrived": False, "done": False})
    hub.close()
    assert "partition 1" in hub.error
