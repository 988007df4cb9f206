"""Every collective on a switch: the engines' single port goes to an RTL crossbar (``hdl/system/switch.py``)
with per-input queues and credits routed back by source; the engines keep a landing channel per (source
rank, FSM) (``rx_sources``) and a RECV takes the awaited message from whichever source's channel holds it, so
messages may arrive in any order. Halving-doubling all-reduce / reduce-scatter / all-gather (4 and 8 ports:
powers of two), the direct all-to-all, ring broadcast and reduce on the switch's logical ring, the barrier;
on the engine RTL, every output byte against the golden executor running the same programs, and the switch
must never drop a flit.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.system.switch import Switch, queue_bound
from syncfabric.host.run import engine_config_for
from syncfabric.sim.golden.executor import landing_deadlock
from syncfabric.sim.golden.algorithms import generate
from syncfabric.host.transports.ace import run_system

from sim_helpers import seed_for
from test_engine_topologies import check, every_collective, job

BASE = AceConfig.small(landing_headers=8, landing_beats=64, imem_words=1024)
#: The small engine on an 8-port switch: one port, 8 source channels per FSM; 8 headers per channel.
CFG = engine_config_for(BASE, "switch:8")
#: A 4-port switch build with virtual output queues of a round trip (200 flits for links of up to 90 cycles)
#: instead of the 288 its engines' credits need, so that it holds its links (the 8-port and Icarus tests keep
#: queue_bound).
ROUND_TRIP = {"max_latency": 90, "switch_queue": 200}


def test_switch_engines_have_one_port_and_a_channel_per_source_and_fsm():
    assert CFG.n_ports == 1 and CFG.rx_sources == 8 and CFG.n_channels == 32
    assert engine_config_for(AceConfig.small(), "switch:5").rx_sources == 8
    assert engine_config_for(AceConfig.small(), "ring:8").rx_sources == 1
    assert queue_bound(4, 64, 8) == 4 * 72
    with pytest.raises(ValueError, match="at least 2 ports"):
        Switch(16, 1, 4, 64, 8)


def test_a_switch_queue_shorter_than_the_round_trip_or_off_a_switch_is_refused():
    from syncfabric.hdl.system.top import AceSystem
    cfg = engine_config_for(BASE, "switch:4")
    with pytest.raises(ValueError, match=r"more than the links' round trip \(184 flits\)"):
        AceSystem(cfg, "switch:4", max_latency=90, switch_queue=184)
    with pytest.raises(ValueError, match="applies to a switch, not ring:4"):
        AceSystem(engine_config_for(BASE, "ring:4"), "ring:4", switch_queue=4000)


@pytest.mark.parametrize("collective", ["allreduce", "alltoall", "reduce_scatter", "broadcast"])
def test_out_of_order_arrivals_fit_per_source_landing_channels(collective):
    """Through a switch every source has its own landing channel and a RECV takes its message from any of
    them: the landing model completes one chunk with the small engine's 4 messages per channel (halving-doubling
    sends P/2 blocks to its first partner before it receives one)."""
    progs = generate(collective, None, "switch:8")
    assert landing_deadlock(progs, "switch:8", 4, 16, 4) is None


@pytest.mark.cocotb
def test_every_collective_on_a_4_port_switch_with_backpressure_and_skewed_posting():
    seed = seed_for(20261127)
    topo = "switch:4"
    cfg = engine_config_for(BASE, topo)
    jobs = every_collective(topo, random.Random(seed), seed)
    # the build of the round-trip-queue test below (queues of 200 flits that hold their links)
    res = run_system(cfg, topo, jobs, sim="verilator", latency=6, seed=seed, pause=0.15, link_stall=0.05,
                     post_skew=400, **ROUND_TRIP)
    check(res, len(jobs))
    assert res["switch_overflow"] == 0


@pytest.mark.cocotb
def test_every_collective_on_an_8_port_switch():
    seed = seed_for(20261128)
    topo = "switch:8"
    jobs = every_collective(topo, random.Random(seed), seed, dtypes=("fp32",), max_count=40)
    res = run_system(CFG, topo, jobs, sim="verilator", latency=5, seed=seed, pause=0.1, post_skew=200)
    check(res, len(jobs))
    assert res["switch_overflow"] == 0


@pytest.mark.cocotb
def test_a_switch_with_round_trip_queues_holds_its_links_and_stays_exact():
    """Input queues of 200 flits where the engines' credits would need 864 (3 x 4 x 72): the build takes
    links of up to 90 cycles (the switch's own), so the margin is 2 x 90 + 4 = 184 flits and the switch holds
    an up-link while its queue has more than 16 (the build's delay lines for up to 90 cycles, not the default
    512: its margin would exceed the queue). The links run at latency 6 here. All-to-all, all-reduce
    and all-gather (every rank sends to every other at once) stay byte for byte, nothing is dropped, and
    the hold did work."""
    seed = seed_for(20261130)
    topo = "switch:4"
    cfg = engine_config_for(BASE, topo)
    jobs = [job("alltoall", topo, 600, "fp32", seed=seed, tag=0), job("allreduce", topo, 2000, "fp32", "sum",
                                                                     seed=seed + 1, tag=1),
            job("allgather", topo, 700, "fp16", seed=seed + 2, tag=2)]
    res = run_system(cfg, topo, jobs, sim="verilator", latency=6, seed=seed, pause=0.1, **ROUND_TRIP)
    check(res, len(jobs))
    assert res["switch_overflow"] == 0
    assert res["switch_hold_cycles"] > 0


@pytest.mark.cocotb
def test_switch_on_icarus():
    topo = "switch:4"
    cfg = engine_config_for(BASE, topo)
    jobs = [job("allreduce", topo, 70, "fp16", "sum", seed=3), job("alltoall", topo, 9, "int32", seed=4, tag=1)]
    res = run_system(cfg, topo, jobs, sim="icarus", seed=2)
    check(res, len(jobs))


@pytest.mark.cocotb
@pytest.mark.slow
@pytest.mark.parametrize("topology", ["switch:4", "switch:8"])
def test_every_dtype_and_bigger_sizes_on_switches(topology):
    from syncfabric.sim.golden.types import DType
    seed = seed_for(20261129)
    dtypes = tuple(d.name.lower() for d in DType)
    jobs = every_collective(topology, random.Random(seed), seed, dtypes=dtypes, max_count=700)
    res = run_system(engine_config_for(BASE, topology), topology, jobs, sim="verilator", latency=9, seed=seed,
                     pause=0.2, link_stall=0.1, post_skew=1000, timeout_cycles=4 * 10**6)
    check(res, len(jobs))
    assert res["switch_overflow"] == 0
