"""End-to-end integrity under link faults: no rank may complete OK with wrong data.

Links flip data bits at random (``link_flip``, the system top's ``link<l>_inject`` pins). The rank whose link
corrupted a packet sees the CRC error (``LINK_CRC``), but its RECV has already forwarded the reduced beats
cut-through; the forward's last packet is then *stomped* (its CRC inverted) and every later message of the
chunk carries ``poison`` in its header, so each rank downstream completes with an error too
(docs/engine.md section 14). The property checked, per command and rank: the status is not OK, or every
output byte equals the golden model's and no guard byte changed. The engines must also finish every
command (no hang), and the faults must have been seen (CRC errors counted on the links that flipped bits
only: a stomped packet is not counted as its link's fault).
"""

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.cli import main as cli_main
from syncfabric.host.faults import fault_campaign, parse_faults
from syncfabric.host.run import engine_config_for, job_spec
from syncfabric.sim.golden.topology import parse as parse_topology
from syncfabric.host.transports.ace import run_system

from sim_helpers import seed_for


def _jobs(topology, seed):
    """An all-reduce of several chunks, a reduce-scatter and an all-gather."""
    n = parse_topology(topology).n_endpoints
    return [{"spec": job_spec("allreduce", topology, 6000 * 4, "fp32", "sum", seed=seed), "tag": 1},
            {"spec": job_spec("reduce_scatter", topology, 700 * 4 * n, "int32", "sum", seed=seed + 1), "tag": 2},
            {"spec": job_spec("allgather", topology, 900 * 4 * n, "fp32", "sum", seed=seed + 2), "tag": 3}]


def _silent(res):
    """(command, rank) pairs that completed OK with wrong or stray bytes."""
    return [(k, r) for k, j in enumerate(res["jobs"]) for r, s in enumerate(j["status"])
            if s == "OK" and (j["mismatches"][r] or j["guard_touched"][r])]


@pytest.mark.cocotb
@pytest.mark.parametrize("sim,topology,flip", [
    ("verilator", "ring:2", [0.01, 0.0]),           # one direction: rank 0's links never see a bad CRC
    ("verilator", "ring:4", 0.004),
    pytest.param("icarus", "ring:2", [0.01, 0.0], marks=pytest.mark.slow),
])
def test_bit_flips_never_complete_ok_with_wrong_data(sim, topology, flip):
    seed = seed_for(20261127)
    cfg = engine_config_for(AceConfig.small(), topology)
    res = run_system(cfg, topology, _jobs(topology, seed), sim=sim, seed=seed, link_flip=flip, check=False,
                     timeout_cycles=200_000)
    statuses = [j["status"] for j in res["jobs"]]
    assert all(s is not None and s != "TIMEOUT" for row in statuses for s in row), statuses   # nothing hung
    assert _silent(res) == [], f"completed OK with wrong data: {_silent(res)} ({statuses})"
    crc = [sum(c["RX_CRC_ERRS"]) for c in res["counters"]]
    assert sum(crc) > 0, "no fault was injected"
    failed = [r for r in range(len(crc)) if any(row[r] != "OK" for row in statuses)]
    assert failed, statuses
    if isinstance(flip, list):
        # the corrupted packets arrive at one rank only; its partner learns of them through the stomped and
        # poisoned messages it receives, not from its own link
        clean = [r for r in range(len(crc)) if crc[r] == 0]
        assert clean and set(clean) <= set(failed), (crc, statuses)


@pytest.mark.cocotb
def test_a_campaign_of_200_fault_injected_collectives_has_no_silent_corruption_and_no_hang():
    """``syncfabric bench faults``' campaign: 200 random collectives on ring:4 (Verilator) in four simulations,
    links flipping bits; every rank's completion is exact or an error, the faults were seen, and some
    collectives still completed exact (the engines went on working after failed ones)."""
    seed = seed_for(7)
    s = fault_campaign(200, "ring:4", {"flip": 0.003}, batch=50, max_bytes=2048, seed=seed, progress=False)
    assert s["collectives"] == 200 and s["completions"] == 800, s
    assert s["silent"] == 0 and s["hung"] == 0, (s["silent_at"], s["batches"])
    assert s["corrupted_packets"] > 0 and s["error"] > 0 and s["exact"] > 0, s


def test_fault_specs_are_checked(capsys):
    assert parse_faults("flip=1e-3,stall=0.01") == {"flip": 0.001, "stall": 0.01}
    assert parse_faults("drop=0.1,dup=0.2") == {"drop": 0.1, "dup": 0.2}
    for bad in ("lose=0.1", "flip", "flip=x", "flip=1.5", "stall=0.1", ""):
        with pytest.raises(ValueError):
            parse_faults(bad)
    # lost or duplicated flits need link retransmission
    assert cli_main(["bench", "faults", "--fault", "drop=1e-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "drop" in err[0] and "replay_flits" in err[0], err
    assert cli_main(["bench", "faults", "--fault", "flip=1e-3", "--engine", "replay_flits=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "replay_flits=3" in err[0], err
    for argv, what in ((["--collectives", "0"], "at least 1"), (["--bytes", "32"], "--bytes 32")):
        assert cli_main(["bench", "faults", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and what in err[0], err


@pytest.mark.cocotb
def test_run_with_faults_classes_every_completion():
    """``syncfabric run --fault``: the summary classes each NPU's completion; none is silent."""
    from syncfabric.host.run import format_summary, run_collective

    r = run_collective("allreduce", "ring:2", 8192, "fp32", "sum", backend="icarus", config="small",
                       fault="flip=0.01", seed=3, progress=False)
    f = r["faults"]
    assert f["flip"] == 0.01 and f["corrupted_packets"] > 0
    assert "silent" not in f["completions"] and "hung" not in f["completions"], f
    assert "error" in f["completions"]
    assert "silent 0" in format_summary(r)
    for kw in ({"backend": "amaranth"}, {"backend": "verilator", "partitions": 2}):
        with pytest.raises(ValueError, match="--fault"):
            run_collective("allreduce", "ring:2", 4096, config="small", fault="flip=0.01", progress=False, **kw)
    with pytest.raises(ValueError, match="at least one"):
        run_collective("allreduce", "ring:2", 4096, config="small", fault="stall=0", backend="icarus",
                       progress=False)


RETRY = dict(replay_flits=64)


@pytest.mark.cocotb
@pytest.mark.parametrize("sim,topology", [("verilator", "ring:4"), ("icarus", "ring:2")])
def test_link_retransmission_completes_every_collective_ok_through_faulty_links(sim, topology):
    """With link retransmission (docs/engine.md section 15) the links flip bits, lose and duplicate flits and
    stall, and every command still completes OK on every rank, byte for byte (``check=True``: the testbench's
    own checks); the ports did retransmit."""
    seed = seed_for(20261128)
    cfg = engine_config_for(AceConfig.small(**RETRY), topology)
    if sim == "verilator":
        jobs, rates = _jobs(topology, seed), dict(link_flip=0.004, link_drop=0.002, link_dup=0.002)
    else:       # Icarus, the slow simulator: a smaller all-reduce, more faults
        jobs = [{"spec": job_spec("allreduce", topology, 1500 * 4, "fp32", "sum", seed=seed), "tag": 1}]
        rates = dict(link_flip=0.02, link_drop=0.01, link_dup=0.01)
    res = run_system(cfg, topology, jobs, sim=sim, seed=seed, **rates, link_stall=0.05, timeout_cycles=400_000)
    assert all(s == "OK" for j in res["jobs"] for s in j["status"])
    assert sum(sum(c["TX_REPLAYS"]) for c in res["counters"]) > 0
    assert sum(sum(c["RX_CRC_ERRS"]) for c in res["counters"]) > 0
    assert sum(sum(c["RX_NAKS"]) for c in res["counters"]) > 0


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("retransmit", [False, True])
def test_two_thousand_fault_injected_collectives(retransmit):
    """The campaigns at the issue's slow size: 2,000 random collectives on ring:4, without retransmission
    (bit flips: exact or an error, never silent) and with it (every fault kind: every completion exact)."""
    seed = seed_for(9)
    if retransmit:
        s = fault_campaign(2000, "ring:4", {"flip": 0.003, "drop": 0.002, "dup": 0.002},
                           config=AceConfig.small(**RETRY), max_bytes=2048, seed=seed, progress=False)
        assert s["exact"] == s["completions"] == 8000, (s["statuses"], s["batches"])
    else:
        s = fault_campaign(2000, "ring:4", {"flip": 0.003}, max_bytes=2048, seed=seed, progress=False)
        assert s["completions"] == 8000 and s["silent"] == 0 and s["hung"] == 0, (s["silent_at"], s["batches"])


@pytest.mark.cocotb
def test_a_campaign_with_link_retransmission_completes_every_collective_exact():
    """The campaign with retransmission: 50 random collectives on ring:4, every fault kind; every rank's
    completion is exact (the faults were recovered on the links, not reported)."""
    seed = seed_for(8)
    cfg = AceConfig.small(**RETRY)
    s = fault_campaign(50, "ring:4", {"flip": 0.003, "drop": 0.002, "dup": 0.002}, config=cfg, batch=50,
                       max_bytes=2048, seed=seed, progress=False)
    assert s["completions"] == 200 and s["exact"] == 200, (s["statuses"], s["batches"])
    assert s["corrupted_packets"] > 0 and s["replays"] > 0 and s["resent_flits"] > 0, s
