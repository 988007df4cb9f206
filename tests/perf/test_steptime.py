"""Step-level time of one chunk through a phase (sim/perf/steptime.py): the latency each hop of the longest
message chain adds, the FSM's serial work where the messages hide the latency, and refusal of programs
whose messages nobody sends."""

import pytest

from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.topology import LinkAttr, Ring, Switch
from syncfabric.sim.perf.profile import profile
from syncfabric.sim.perf.steptime import phase_step_times

TOPOLOGIES = {"ring": lambda lat: Ring(8, False, LinkAttr(1.0, lat)),
              "bidir": lambda lat: Ring(8, True, LinkAttr(1.0, lat)),
              "switch": lambda lat: Switch(8, LinkAttr(1.0, lat))}


@pytest.mark.parametrize("kind", TOPOLOGIES)
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "alltoall"])
def test_each_hop_of_the_longest_chain_pays_the_latency(kind, collective):
    """With 1-beat messages and long links the time grows by the chain's depth (``data_depth``) per cycle
    of latency, twice that through a switch (up and down)."""
    far, near = TOPOLOGIES[kind](500), TOPOLOGIES[kind](400)
    progs = generate(collective, None, far)
    hops = 2 if kind == "switch" else 1
    grown = [a - b for a, b in zip(phase_step_times(progs, far, 1), phase_step_times(progs, near, 1))]
    assert grown == [hops * 100 * ph.depth for ph in profile(collective, far).phases]


def test_long_messages_hide_the_latency_behind_the_fsms_serial_work():
    """ring:8 all-reduce, 128-beat blocks, latency 10: each of the 31 steps costs its overhead and each of
    the 15 messages its beats, one after another; the neighbour's message is in before it is awaited."""
    topo = TOPOLOGIES["ring"](10)
    progs = generate("allreduce", None, topo)
    ph = profile("allreduce", topo).phases[0]
    assert (ph.steps, ph.transfers) == (31, 15)
    assert phase_step_times(progs, topo, 128, step_cycles=7) == (31 * 7 + 15 * 128,)


def test_a_slow_link_stretches_the_messages_on_it():
    """At 1/8 rate a block of 16 beats takes 128 cycles on the wire: the FSM waits for each to leave."""
    fast, slow = Ring(8, False, LinkAttr(1.0, 10)), Ring(8, False, LinkAttr(0.125, 10))
    progs = generate("allreduce", None, fast)
    assert phase_step_times(progs, slow, 16)[0] > 7 * phase_step_times(progs, fast, 16)[0] / 2


def test_a_message_nobody_sends_is_refused():
    topo = TOPOLOGIES["ring"](10)
    progs = generate("allreduce", None, topo)
    with pytest.raises(ValueError, match="wait for messages no rank sends"):
        phase_step_times(progs[:-1], topo, 4)          # rank 7 missing: rank 0 waits for it
