"""The link model (``hdl/system/link.py``): latency, rate and credit delays, random fault injection.

``SEED=<n>`` replaces the random seeds.
"""

import random

import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.common.layouts import flit_layout
from syncfabric.hdl.system.link import DelayLine, Link, fault_threshold

from sim_helpers import seed_for
from link_helpers import (CREDIT)

# ---- Link ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", [False, True], ids=["reset_values", "set_at_run_time"])
@pytest.mark.parametrize("latency,credit_latency,rate", [(1, 1, (1, 1)), (2, 5, (1, 2)), (3, None, (2, 3)),
                                                         (17, 1, (1, 1)), (1000, 300, (3, 4)), (4, 4, (1, 256))])
def test_link_delays_every_flit_and_credit_exactly(latency, credit_latency, rate, runtime):
    """Every flit and credit arrives exactly its latency later, at no more than the rate; with ``runtime``
    the parameters are not the link's reset values but set on its ports before traffic starts (one build,
    any latency up to ``max_latency`` and any rate)."""
    seed = seed_for(latency)
    rng = random.Random(seed)
    w = 8
    cl = latency if credit_latency is None else credit_latency
    if runtime:
        dut = Link(w, 1, (1, 1), max_latency=max(latency, cl) + 7)
    else:
        dut = Link(w, latency, rate, credit_latency)
    n_cycles = max(latency, cl) + 300
    sent, received, credits_in, credits_out = [], [], {}, {}

    async def driver(ctx):
        if runtime:
            ctx.set(dut.latency, latency)
            ctx.set(dut.credit_latency, cl)
            ctx.set(dut.rate_num, rate[0])
            ctx.set(dut.rate_den, rate[1])
        pending = None
        for cycle in range(n_cycles):
            if pending is None and rng.random() < 0.7:
                pending = rng.getrandbits(len(dut.tx.payload.as_value()))
            ctx.set(dut.tx.valid, pending is not None)
            if pending is not None:
                ctx.set(dut.tx.payload.as_value(), pending)
            credit = rng.getrandbits(CREDIT.size)
            ctx.set(dut.credit_in.as_value(), credit)
            credits_in[cycle] = credit
            ctx.set(dut.inject, rng.random() < 0.1)
            _, _, ready, inject, rx_valid, rx_bits, c_out = await ctx.tick().sample(
                dut.tx.ready, dut.inject, dut.rx.valid, dut.rx.payload.as_value(), dut.credit_out.as_value())
            if pending is not None and ready:
                sent.append((cycle, pending ^ inject))      # inject flips data bit 0 = payload bit 0
                pending = None
            if rx_valid:
                received.append((cycle, rx_bits))
            credits_out[cycle] = c_out
        ctx.set(dut.tx.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(driver)
    sim.run()
    assert flit_layout(w)["data"].offset == 0
    expect = [(c + latency, bits) for c, bits in sent if c + latency < n_cycles]
    assert received == expect
    for cycle, value in credits_out.items():
        assert value == (credits_in[cycle - cl] if cycle >= cl else 0), f"credit at cycle {cycle}"
    # The rate limit: the bucket holds at most den + num - 1 tokens (one flit of burst) and gains num per
    # cycle, so flits i..j (j - i + 1 of them, den tokens each) need their span of cycles to have paid for them.
    num, den = rate
    times = [c for c, _ in sent]
    for i in range(len(times)):
        for j in range(i, min(i + 40, len(times))):
            assert (j - i + 1) * den <= den + num - 1 + (times[j] - times[i]) * num, "rate exceeded"


def test_random_faults_flip_one_data_bit_per_chosen_flit_and_stall_at_their_rates():
    """``flip_prob`` flips one data bit (a random position, never the header lanes) of about that share of the
    accepted flits, ``stall_prob`` holds ready low in about that share of the cycles; two salts draw
    different sequences; 0 means none."""
    w, n_cycles = 16, 4000

    def run(flip, stall, salt):
        dut = Link(w, 2)
        out = {"sent": 0, "flipped": [], "stalled": 0}

        async def driver(ctx):
            ctx.set(dut.flip_prob, fault_threshold(flip))
            ctx.set(dut.stall_prob, fault_threshold(stall))
            ctx.set(dut.salt, salt)
            ctx.set(dut.tx.valid, 1)            # an all-zero flit offered every cycle
            for _ in range(n_cycles):
                _, _, ready, rx_valid, rx_bits = await ctx.tick().sample(
                    dut.tx.ready, dut.rx.valid, dut.rx.payload.as_value())
                out["sent"] += ready
                out["stalled"] += not ready
                if rx_valid and rx_bits:
                    out["flipped"].append(rx_bits)

        sim = Simulator(dut)
        sim.add_clock(1e-6)
        sim.add_testbench(driver)
        sim.run()
        return out

    a = run(0.05, 0.2, 1)
    assert all(bin(b).count("1") == 1 and b < 1 << 8 * w for b in a["flipped"])     # one data bit each
    assert 0.035 < len(a["flipped"]) / a["sent"] < 0.065, len(a["flipped"]) / a["sent"]
    assert 0.15 < a["stalled"] / n_cycles < 0.25, a["stalled"] / n_cycles
    assert len({b.bit_length() for b in a["flipped"]}) > 30                       # positions spread
    assert run(0.05, 0.2, 2)["flipped"] != a["flipped"]
    none = run(0.0, 0.0, 1)
    assert none["flipped"] == [] and none["stalled"] <= 1                         # (the bucket's first cycle)
    with pytest.raises(ValueError):
        fault_threshold(1.0)


def test_link_rejects_bad_parameters():
    # (that a refused link leaves no unused design behind: tests/hdl/test_refuse.py)
    for args in [(8, 0), (8, 1, (3, 2)), (8, 1, (0, 1)), (8, 2, (1, 1), 0), (8, 1, (1, 257)), (8, 9, (1, 1), 1, 8)]:
        with pytest.raises(ValueError):
            Link(*args)
    with pytest.raises(ValueError):
        DelayLine(8, 0)
    with pytest.raises(ValueError):
        DelayLine(8, 5, 4)

