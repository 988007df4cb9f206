"""Link-level retransmission (``hdl/ace/retry.py``: ReplayTx / ReplayRx) between the link ports, through a
faulty link.

``SEED=<n>`` replaces the random seeds.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig

from sim_helpers import seed_for
from link_helpers import (random_msg, golden_flits, run_bench, check_clean_finish)

# ---- link retransmission (ReplayTx / ReplayRx) ----------------------------------------------------------------

RETRY = AceConfig.small(replay_flits=64)


@pytest.mark.parametrize("faults", [
    {"flip": 0.02}, {"drop": 0.02}, {"dup": 0.02},
    {"flip": 0.01, "drop": 0.01, "dup": 0.01, "stall": 0.2},
])
def test_retransmission_delivers_every_message_intact_through_a_faulty_link(faults):
    """Bit flips, lost and duplicated flits on the link: every message arrives once, whole, in per-VC
    order, with no error on the port; the receiver NAKed, the transmitter went back and sent flits again."""
    seed = seed_for(7000 + len(faults))
    rng = random.Random(seed)
    msgs = [random_msg(rng, RETRY) for _ in range(60)]
    out = run_bench(RETRY, msgs, seed=seed, latency=5, bubble=0.2, pause=0.2, idle=0.2, faults=faults,
                    timeout=200, max_cycles=60000)
    assert out["corrupted"] == [] and out["rx_overflow"] == 0 and out["rx_crc_errors"] == 0
    assert out["beat_credits"] == [RETRY.landing_beats] * RETRY.n_fsms
    assert out["hdr_credits"] == [RETRY.landing_headers] * RETRY.n_fsms
    n_flits = sum(len(golden_flits(m, RETRY)) for m in msgs)
    assert out["tx_flits"] == out["rx_flits"] == n_flits          # the port saw each flit exactly once
    assert out["replays"] > 0 and out["resent"] > 0 and out["replay_dropped"] > 0
    assert out["link_flits"] == n_flits + out["resent"]
    if "flip" in faults:
        assert out["replay_crc_errors"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_retransmission_under_random_fault_mixes(seed):
    """Forty random mixes of flip, drop, duplicate and stall rates, latencies and rates, 80 messages each: every
    message arrives once, whole and in per-VC order."""
    rng = random.Random(seed_for(7300 + seed))
    faults = {k: rng.choice([0.0, 0.005, 0.02, 0.05]) for k in ("flip", "drop", "dup")}
    faults["stall"] = rng.choice([0.0, 0.3])
    msgs = [random_msg(rng, RETRY) for _ in range(80)]
    out = run_bench(RETRY, msgs, seed=rng.randrange(1 << 16), latency=rng.choice([1, 3, 12]),
                    rate=rng.choice([(1, 1), (2, 3)]), bubble=0.2, pause=0.2, idle=0.2, faults=faults,
                    timeout=rng.choice([60, 200]), max_cycles=200_000)
    assert out["corrupted"] == [] and out["rx_overflow"] == 0 and out["rx_crc_errors"] == 0
    assert out["tx_flits"] == out["rx_flits"] == sum(len(golden_flits(m, RETRY)) for m in msgs)


def test_retransmission_costs_nothing_but_latency_on_a_clean_link():
    """No faults: no replay, no NAK, nothing dropped, every flit sent once."""
    seed = seed_for(7100)
    rng = random.Random(seed)
    msgs = [random_msg(rng, RETRY) for _ in range(30)]
    out = run_bench(RETRY, msgs, seed=seed, latency=5, timeout=200)
    check_clean_finish(RETRY, out, msgs)
    assert out["replays"] == out["resent"] == out["replay_naks"] == out["replay_dropped"] == 0


def test_a_lost_last_packet_is_sent_again_by_the_timer():
    """The last packet is lost and nothing follows it, so no NAK can come: the replay timer resends it."""
    rng = random.Random(seed_for(7200))
    msgs = [random_msg(rng, RETRY, length=n) for n in (16, 100, 16)]
    n_flits = sum(len(golden_flits(m, RETRY)) for m in msgs)
    out = run_bench(RETRY, msgs, seed=3, latency=5, drop_flit=n_flits - 1, timeout=60)
    assert out["corrupted"] == [] and out["replays"] == 1 and out["replay_naks"] == 0
    assert out["resent"] == 1 and out["link_flits"] == n_flits + 1
