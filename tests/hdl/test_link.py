"""The link ports (``hdl/ace/link.py``) in Amaranth's simulator: TxPort wire format vs the golden model,
RxPort checks, and TxPort -> Link -> RxPort end to end with credits looped back.

``SEED=<n>`` replaces the random seeds.
"""

import random

import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.link import RxPort
from syncfabric.hdl.common.layouts import flit_layout, pack, unpack
from syncfabric.sim.golden.link import payload_beats

from sim_helpers import seed_for
from link_helpers import (CFG, HDR, CREDIT, Msg, random_msg, flit_fields, golden_flits, Bench, run_bench,
                          check_clean_finish)


@pytest.mark.parametrize("fabric", [0, 1], ids=["asic", "fabric"])
@pytest.mark.parametrize("latency,rate,bubble,pause", [(3, (1, 1), 0.3, 0.3), (1, (2, 3), 0.1, 0.5),
                                                       (20, (1, 1), 0.0, 0.1)])
def test_random_messages_arrive_intact_in_per_vc_order(latency, rate, bubble, pause, fabric):
    seed = seed_for(1000 + latency)
    rng = random.Random(seed)
    cfg = CFG.replace(fabric=fabric)     # (fabric: a link slower than a flit per cycle fills the skid register)
    msgs = [random_msg(rng, cfg) for _ in range(40)]
    out = run_bench(cfg, msgs, seed=seed, latency=latency, rate=rate, bubble=bubble, pause=pause, idle=0.3)
    check_clean_finish(cfg, out, msgs)
    assert out["order"] != sorted(out["order"]), "the consumer never read out of arrival order"


@pytest.mark.parametrize("cfg", [
    AceConfig.small(beat_bytes=8, packet_bytes=24, landing_beats=32),           # 3-flit packets
    AceConfig.small(beat_bytes=64, packet_bytes=256, n_fsms=2, landing_beats=16),
    AceConfig.small(packet_bytes=16, n_fsms=1, landing_beats=8, landing_headers=2),  # 1-flit packets, 1 VC
    AceConfig.board(),                                                          # the boards' port, ASIC form
    AceConfig.board(fabric=1),                                                  # ... and the FPGA's (CRC stage)
    AceConfig.small(packet_bytes=16, n_fsms=1, landing_beats=8, landing_headers=2, fabric=1),
], ids=["w8p3", "w64p4", "w16p1v1", "board", "board-fabric", "w16p1v1-fabric"])
def test_other_widths_and_packet_sizes(cfg):
    seed = seed_for(cfg.beat_bytes)
    rng = random.Random(seed)
    msgs = [random_msg(rng, cfg) for _ in range(16)]
    out = run_bench(cfg, msgs, seed=seed, latency=4, bubble=0.2, pause=0.2, idle=0.2)
    check_clean_finish(cfg, out, msgs)
    want = [bits for m in msgs for bits in golden_flits(m, cfg)]
    assert [bits for _, bits in out["flits"]] == want


def test_flit_format_matches_golden():
    seed = seed_for(5)
    rng = random.Random(seed)
    cfg = CFG
    top = cfg.max_message_beats * cfg.beat_bytes
    lengths = [0, 1, 15, 16, 17, 63, 64, 65, 128, 130, top - 1, top]
    msgs = [random_msg(rng, cfg, length=n) for n in lengths]
    out = run_bench(cfg, msgs, seed=seed, latency=2, rate=(2, 3), bubble=0.2)
    check_clean_finish(cfg, out, msgs)
    want = [bits for m in msgs for bits in golden_flits(m, cfg)]
    got = [bits for _, bits in out["flits"]]
    assert len(got) == len(want)
    for i, (g, e) in enumerate(zip(got, want)):
        assert flit_fields(cfg.beat_bytes, g) == flit_fields(cfg.beat_bytes, e), f"flit {i}"


@pytest.mark.parametrize("fabric", [0, 1], ids=["asic", "fabric"])
def test_back_to_back_messages_one_flit_per_cycle(fabric):
    cfg = CFG.replace(landing_beats=512, fabric=fabric)
    rng = random.Random(seed_for(11))
    # Messages of several VCs, sizes not multiples of the packet: packet and message boundaries without gaps.
    msgs = [random_msg(rng, cfg, vc=i % cfg.n_fsms, length=n)
            for i, n in enumerate([4000, 1000, 33, 4096, 0, 17, 2000, 250])]
    out = run_bench(cfg, msgs, seed=11, latency=3)
    check_clean_finish(cfg, out, msgs)
    cycles = [c for c, _ in out["flits"]]
    ratio = len(cycles) / (cycles[-1] - cycles[0] + 1)
    print(f"rate 1: {len(cycles)} flits in {cycles[-1] - cycles[0] + 1} cycles ({ratio:.3f})")
    assert ratio >= 0.95
    assert cycles == list(range(cycles[0], cycles[0] + len(cycles))), "a bubble between flits"


@pytest.mark.parametrize("fabric", [0, 1], ids=["asic", "fabric"])
def test_half_rate_link_halves_throughput(fabric):
    cfg = CFG.replace(landing_beats=512, fabric=fabric)
    rng = random.Random(seed_for(12))
    msgs = [random_msg(rng, cfg, vc=0, length=4096)]
    out = run_bench(cfg, msgs, seed=12, latency=3, rate=(1, 2))
    check_clean_finish(cfg, out, msgs)
    cycles = [c for c, _ in out["flits"]]
    ratio = len(cycles) / (cycles[-1] - cycles[0] + 1)
    print(f"rate 1/2: {len(cycles)} flits in {cycles[-1] - cycles[0] + 1} cycles ({ratio:.3f})")
    assert 0.49 <= ratio <= 0.51
    assert out["tx_stall"] >= len(cycles) - 2


@pytest.mark.parametrize("latency", [1, 3, 40])
def test_first_flit_latency_exact(latency):
    # msg and its first beat in the same cycle -> the flit is on the link the next cycle -> at the receiver
    # `latency` cycles after the link accepted it.
    cfg = CFG
    dut = Bench(cfg, latency)
    events = {}

    async def tb(ctx):
        ctx.set(dut.tx.msg.payload.as_value(), pack(HDR, {"vc": 2, "length": 20}))
        ctx.set(dut.tx.msg.valid, 1)
        ctx.set(dut.tx.data.valid, 1)
        ctx.set(dut.tx.data.payload.data, 0x1234)
        cycle = 0
        while "rx" not in events:
            _, _, msg_ok, flit_ok, rx_valid, data_ready = await ctx.tick().sample(
                dut.tx.msg.ready, dut.tx.flit.valid & dut.tx.flit.ready, dut.rx.flit.valid, dut.tx.data.ready)
            if msg_ok and "msg" not in events:
                events["msg"] = cycle
                ctx.set(dut.tx.msg.valid, 0)
            if data_ready:
                ctx.set(dut.tx.data.payload.data, 0x5678)
            if flit_ok and "flit" not in events:
                events["flit"] = cycle
            if rx_valid:
                events["rx"] = cycle
            cycle += 1
            assert cycle < latency + 20

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert events["flit"] == events["msg"] + 1
    assert events["rx"] == events["flit"] + latency


def test_corrupted_flit_flags_only_its_vc():
    seed = seed_for(21)
    rng = random.Random(seed)
    cfg = CFG
    msgs = [random_msg(rng, cfg, vc=v, length=100) for v in range(cfg.n_fsms)]   # 7 flits each
    # Flit 3 of message 1 (VC 1): the last flit of its first packet, beat 3.
    out = run_bench(cfg, msgs, seed=seed, latency=3, inject_flit=7 + 3, expect_err=0b0010, pause=0.2)
    assert out["rx_crc_errors"] == 1
    assert out["corrupted"] == [(1, 1 << (3 * cfg.beat_bytes * 8))]
    assert out["beat_credits"] == [cfg.landing_beats] * cfg.n_fsms


@pytest.mark.parametrize("fabric", [0, 1], ids=["asic", "fabric"])
def test_a_poisoned_beat_stomps_its_packet_and_flags_its_vc_without_a_crc_error(fabric):
    """A beat handed over with ``poison`` (a forward whose input failed a check after its first packets
    left) makes its packet's CRC go out inverted (the golden ``STOMP``); the receiver flags that VC like a
    corrupted packet but counts no CRC error (the link is fine), the payload arrives as sent, and the other
    packets and messages are untouched (in the FPGA form too, whose CRC is a stage of its own)."""
    seed = seed_for(23)
    rng = random.Random(seed)
    cfg = CFG.replace(fabric=fabric)
    msgs = [random_msg(rng, cfg, vc=v, length=100) for v in range(cfg.n_fsms)]   # 7 beats, 2 packets each
    msgs[2].poison = 6                   # the last beat: the second packet
    msgs[3].poison = 0                   # the first beat: the first packet only
    out = run_bench(cfg, msgs, seed=seed, latency=3, expect_err=0b1100, pause=0.2)
    assert out["rx_crc_errors"] == 0 and out["corrupted"] == []
    want = [bits for m in msgs for bits in golden_flits(m, cfg)]
    assert [bits for _, bits in out["flits"]] == want
    clean = [flit_fields(cfg.beat_bytes, b) for b in golden_flits(Msg(msgs[3].fields, msgs[3].payload), cfg)]
    got = [flit_fields(cfg.beat_bytes, b) for b in golden_flits(msgs[3], cfg)]
    assert got[3]["crc"] == clean[3]["crc"] ^ 0xFFFFFFFF and got[6] == clean[6]    # only its packet


def test_crc_error_without_injection_is_not_reported_and_err_clear_works():
    # Drive the RxPort directly with golden flits: a good message, a bad CRC on VC 3, then err_clear.
    seed = seed_for(22)
    rng = random.Random(seed)
    cfg = CFG
    dut = RxPort(cfg)
    good = golden_flits(random_msg(rng, cfg, vc=0, length=70), cfg)
    bad = golden_flits(random_msg(rng, cfg, vc=3, length=40), cfg)
    crc_lsb = flit_layout(cfg.beat_bytes)["crc"].offset
    bad[-1] ^= 1 << crc_lsb

    async def tb(ctx):
        for bits in good:
            ctx.set(dut.flit.valid, 1)
            ctx.set(dut.flit.payload.as_value(), bits)
            await ctx.tick()
        ctx.set(dut.flit.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.err) == 0 and ctx.get(dut.crc_errors) == 0
        for bits in bad:
            ctx.set(dut.flit.valid, 1)
            ctx.set(dut.flit.payload.as_value(), bits)
            await ctx.tick()
        ctx.set(dut.flit.valid, 0)
        await ctx.tick()
        # the last flit is checked in the cycle after it enters (the port registers it), its CRC compared a
        # cycle later (the deframer registers the check), and the sticky flag is set at the end of that cycle
        assert ctx.get(dut.err) == 0
        await ctx.tick()
        assert ctx.get(dut.err) == 0b1000 and ctx.get(dut.crc_errors) == 1 and ctx.get(dut.overflow) == 0
        ctx.set(dut.sel, 0)
        ctx.set(dut.err_clear, 1)
        await ctx.tick()
        assert ctx.get(dut.err) == 0b1000          # err_clear clears only the selected VC
        ctx.set(dut.sel, 3)
        await ctx.tick()
        ctx.set(dut.err_clear, 0)
        assert ctx.get(dut.err) == 0
        assert ctx.get(dut.flits) == len(good) + len(bad) and ctx.get(dut.packets) == 3

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


def drive_rx(dut, flits, checker):
    async def tb(ctx):
        for bits in flits:
            ctx.set(dut.flit.valid, 1)
            ctx.set(dut.flit.payload.as_value(), bits)
            await ctx.tick()
        ctx.set(dut.flit.valid, 0)
        await ctx.tick()
        await checker(ctx)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


def test_header_mismatch_and_framing_errors_flag_the_vc():
    rng = random.Random(seed_for(23))
    cfg = CFG
    cases = {}
    # Second packet with a different tag (CRC recomputed so that only the header check can catch it).
    msg = random_msg(rng, cfg, vc=1, length=100)
    fl = golden_flits(msg, cfg)
    second = dict(msg.fields, tag=msg.fields["tag"] ^ 1)
    fl2 = golden_flits(Msg(second, msg.payload), cfg)
    cases["tag"] = (fl[:4] + fl2[4:], 0b0010)
    # A packet missing (offset jumps from 0 to 128).
    msg = random_msg(rng, cfg, vc=2, length=200)
    fl = golden_flits(msg, cfg)
    cases["offset"] = (fl[:4] + fl[8:], 0b0100)
    # A packet's last flit lost: the next first flit arrives inside a packet.
    msg = random_msg(rng, cfg, vc=3, length=100)
    fl = golden_flits(msg, cfg)
    cases["framing"] = (fl[:3] + fl[4:], 0b1000)
    # Clean reference.
    cases["clean"] = (golden_flits(random_msg(rng, cfg, vc=0, length=100), cfg), 0)

    for name, (flits, want) in cases.items():
        dut = RxPort(cfg)

        async def checker(ctx, dut=dut, want=want, name=name):
            assert ctx.get(dut.err) == want, name
            assert ctx.get(dut.crc_errors) == 0, name

        drive_rx(dut, flits, checker)


def test_landing_overflow_is_sticky_and_drops():
    cfg = CFG
    rng = random.Random(seed_for(24))
    w = cfg.beat_bytes
    # Three messages of max size on VC 2 = 1.5 landing buffers, nobody reading: the third overflows.
    msgs = [random_msg(rng, cfg, vc=2, length=cfg.max_message_beats * w) for _ in range(3)]
    flits = [b for m in msgs for b in golden_flits(m, cfg)]
    dut = RxPort(cfg)

    async def checker(ctx):
        assert ctx.get(dut.overflow) == 1 and ctx.get(dut.err) == 0b0100
        assert ctx.get(dut.crc_errors) == 0
        # The first two messages are intact.
        ctx.set(dut.sel, 2)
        ctx.set(dut.data.ready, 1)
        got = []
        while len(got) < 2 * cfg.max_message_beats:
            _, _, valid, beat = await ctx.tick().sample(dut.data.valid, dut.data.payload)
            if valid:
                got.append(beat)
        assert got == payload_beats(msgs[0].payload + msgs[1].payload, w)
        _, _, valid = await ctx.tick().sample(dut.data.valid)
        assert not valid

    drive_rx(dut, flits, checker)


def test_rx_sel_change_costs_one_cycle_and_loses_nothing():
    cfg = CFG
    w = cfg.beat_bytes
    rng = random.Random(seed_for(25))
    a = random_msg(rng, cfg, vc=0, length=3 * w)
    b = random_msg(rng, cfg, vc=1, length=2 * w)
    dut = RxPort(cfg)
    beats_a, beats_b = payload_beats(a.payload, w), payload_beats(b.payload, w)

    async def checker(ctx):
        # sel has been 0 all along: a0 was prefetched while nobody was taking it.
        assert ctx.get(dut.data.valid) and ctx.get(dut.data.payload) == beats_a[0]
        ctx.set(dut.data.ready, 1)
        await ctx.tick()                           # a0 taken, a1 shown
        assert ctx.get(dut.data.valid) and ctx.get(dut.data.payload) == beats_a[1]
        ctx.set(dut.sel, 1)
        assert not ctx.get(dut.data.valid)         # the cycle of the change shows nothing (a1 not taken)
        await ctx.tick()
        assert ctx.get(dut.data.valid) and ctx.get(dut.data.payload) == beats_b[0]
        await ctx.tick()                           # b0 taken, b1 shown
        ctx.set(dut.sel, 0)
        assert not ctx.get(dut.data.valid)
        await ctx.tick()
        got = []
        for _ in range(2):                         # a1 was not lost by the switch
            assert ctx.get(dut.data.valid)
            got.append(ctx.get(dut.data.payload))
            await ctx.tick()
        assert got == beats_a[1:]
        assert not ctx.get(dut.data.valid)
        ctx.set(dut.sel, 1)
        await ctx.tick()
        assert ctx.get(dut.data.valid) and ctx.get(dut.data.payload) == beats_b[1]
        await ctx.tick()
        assert not ctx.get(dut.data.valid)
        await ctx.tick().repeat(2)
        # Credits: 3 + 2 beats were taken, no header popped; the port has counted them all.
        assert ctx.get(dut.hdr_valid) == 0b0011

    drive_rx(dut, golden_flits(a, cfg) + golden_flits(b, cfg), checker)


def test_rx_returns_a_credit_per_beat_taken_and_header_popped():
    cfg = CFG
    w = cfg.beat_bytes
    rng = random.Random(seed_for(26))
    m1 = random_msg(rng, cfg, vc=1, length=2 * w)
    m2 = random_msg(rng, cfg, vc=1, length=5)
    m3 = random_msg(rng, cfg, vc=3, length=0)
    dut = RxPort(cfg)
    # Per cycle: (sel, hdr_pop, data.ready).
    plan = [(0, 1, 0),      # pop on an empty VC: no credit
            (3, 1, 0),      # the empty message's header
            (1, 1, 1),      # m1's header; sel just changed: no beat shown yet
            (1, 0, 1),      # m1 beat 0
            (1, 1, 1),      # m1 beat 1 and m2's header in the same cycle
            (1, 0, 1),      # m2 beat 0
            (1, 0, 1), (1, 0, 1), (1, 0, 1)]

    async def checker(ctx):
        taken, credits = [], []
        for sel, pop, ready in plan:
            ctx.set(dut.sel, sel)
            ctx.set(dut.hdr_pop, pop)
            ctx.set(dut.data.ready, ready)
            _, _, valid, beat, credit = await ctx.tick().sample(dut.data.valid, dut.data.payload,
                                                                dut.credit.as_value())
            if valid and ready:
                taken.append(beat)
            c = unpack(CREDIT, credit)
            if c["beat"] or c["hdr"]:       # (beat VC, header VC), None where that half is idle
                credits.append((c["beat_vc"] if c["beat"] else None, c["hdr_vc"] if c["hdr"] else None))
        assert taken == payload_beats(m1.payload, w) + payload_beats(m2.payload, w)
        assert credits == [(None, 3), (None, 1), (1, None), (1, 1), (1, None)]
        assert ctx.get(dut.hdr_valid) == 0 and ctx.get(dut.err) == 0

    drive_rx(dut, golden_flits(m1, cfg) + golden_flits(m2, cfg) + golden_flits(m3, cfg), checker)
