"""Link layer in Amaranth's simulator: CRC-32 update vs zlib, Link timing, TxPort wire format vs the golden
model, RxPort checks, and TxPort -> Link -> RxPort end to end with credits looped back.

``SEED=<n>`` replaces the random seeds.
"""

import gc
import random
import zlib
from collections import deque
from dataclasses import dataclass

import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.link import RxPort, TxPort
from syncfabric.hdl.ace.retry import ReplayRx, ReplayTx
from syncfabric.hdl.common.crc import CRC32_INIT, CRC32_XOROUT, crc32_matrix, crc32_next
from syncfabric.hdl.common.layouts import credit_layout, flit_layout, pack, packet_header_layout, unpack
from syncfabric.hdl.system.link import FAULT_ONE, DelayLine, Link, fault_threshold
from syncfabric.sim.golden.link import packet_crc, packets, payload_beats

from sim_helpers import seed_for

CFG = AceConfig.small()
HDR = packet_header_layout()
#: Header fields the sender sets (offset/last are the port's).
MSG_FIELDS = ("dst", "src", "vc", "tag", "chunk", "phase", "key", "length")
CREDIT = credit_layout()


# ---- messages and flits ---------------------------------------------------------------------------------------

@dataclass
class Msg:
    fields: dict        # MSG_FIELDS
    payload: bytes
    poison: int = None  # the index of a beat handed to the port poisoned (its packet is stomped)

    @property
    def vc(self):
        return self.fields["vc"]


def random_msg(rng, cfg, vc=None, length=None):
    if length is None:
        top = cfg.max_message_beats * cfg.beat_bytes
        length = rng.choice([0, 1, cfg.beat_bytes, cfg.packet_bytes, cfg.packet_bytes + 1, top,
                             rng.randrange(top + 1), rng.randrange(top + 1), rng.randrange(top + 1)])
    fields = {"dst": rng.getrandbits(9), "src": rng.getrandbits(9),
              "vc": rng.randrange(cfg.n_fsms) if vc is None else vc, "tag": rng.getrandbits(16),
              "chunk": rng.getrandbits(16), "phase": rng.getrandbits(3), "key": rng.getrandbits(12),
              "length": length}
    return Msg(fields, rng.randbytes(length))


def beats_of(n, w):
    return -(-n // w)


def flit_bits(w, data=0, hdr=0, first=0, last=0, crc=0):
    """A flit as an integer, placed by the shared layout's field offsets."""
    lay = flit_layout(w)
    return (data << lay["data"].offset | hdr << lay["hdr"].offset | first << lay["first"].offset
            | last << lay["last"].offset | crc << lay["crc"].offset)


def flit_fields(w, bits):
    lay = flit_layout(w)
    return {name: (bits >> lay[name].offset) & ((1 << lay[name].width) - 1)
            for name in ("data", "hdr", "first", "last", "crc")}


def golden_flits(msg, cfg):
    """The flits of ``msg`` as the golden model says they go on the wire."""
    w, out = cfg.beat_bytes, []
    length = msg.fields["length"]
    for off, nb in packets(length, cfg.packet_bytes):
        hdr = pack(HDR, {**msg.fields, "offset": off, "last": int(off + nb == length)})
        body = msg.payload[off:off + nb]
        beats = payload_beats(body, w) or [0]
        stomped = msg.poison is not None and off // w <= msg.poison < (off + nb + w - 1) // w
        crc = packet_crc(hdr, body, w, stomped=stomped)
        for i, beat in enumerate(beats):
            first, last = i == 0, i == len(beats) - 1
            out.append(flit_bits(w, beat, hdr if first else 0, int(first), int(last), crc if last else 0))
    return out


# ---- CRC ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nbytes", [1, 8, 16, 64, 128])
def test_crc32_next_matches_zlib(nbytes):
    seed = seed_for(nbytes)
    rng = random.Random(seed)
    crc, data = Signal(32), Signal(8 * nbytes)
    out = Signal(32)
    m = Module()
    m.d.comb += out.eq(crc32_next(crc, data))
    vectors = [(CRC32_INIT, 0), (0, 0), (CRC32_INIT, (1 << 8 * nbytes) - 1)]
    vectors += [(rng.getrandbits(32), rng.getrandbits(8 * nbytes)) for _ in range(30)]

    async def tb(ctx):
        for reg, word in vectors:
            ctx.set(crc, reg)
            ctx.set(data, word)
            want = zlib.crc32(word.to_bytes(nbytes, "little"), reg ^ CRC32_XOROUT) ^ CRC32_XOROUT
            assert ctx.get(out) == want, f"crc {reg:#x} data {word:#x}"

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()


def test_crc32_chained_words_equal_one_wide_word():
    # Header word then two flits, as the ports compute a packet CRC: same as zlib over the bytes.
    rng = random.Random(seed_for(7))
    raw = rng.randbytes(48)
    reg = CRC32_INIT
    for lo, hi in ((0, 16), (16, 32), (32, 48)):
        word = int.from_bytes(raw[lo:hi], "little")
        bits = reg | word << 32
        reg = sum((bin(bits & mask).count("1") & 1) << j for j, mask in enumerate(crc32_matrix(hi - lo)))
    assert reg ^ CRC32_XOROUT == zlib.crc32(raw)


def test_crc32_next_rejects_bad_widths():
    with pytest.raises(ValueError):
        crc32_next(Signal(31), Signal(8))
    with pytest.raises(ValueError):
        crc32_next(Signal(32), Signal(12))


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


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")   # the rejected objects
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
    for args in [(8, 0), (8, 1, (3, 2)), (8, 1, (0, 1)), (8, 2, (1, 1), 0), (8, 1, (1, 257)), (8, 9, (1, 1), 1, 8)]:
        with pytest.raises(ValueError):
            Link(*args)
    with pytest.raises(ValueError):
        DelayLine(8, 0)
    with pytest.raises(ValueError):
        DelayLine(8, 5, 4)
    gc.collect()                                   # while the warning filter is active


# ---- TxPort -> Link -> RxPort bench ---------------------------------------------------------------------------

class Bench(Elaboratable):
    """A TxPort and an RxPort joined by a Link, credits returned through the link; with ``replay_flits`` in
    the configuration, link retransmission (ReplayTx after the TX port, ReplayRx before the RX port, the
    acknowledgements on the credit path) as the engine's datapath wires it."""

    def __init__(self, cfg, latency=3, rate=(1, 1), credit_latency=None):
        self.tx = TxPort(cfg)
        self.link = Link(cfg.beat_bytes, latency, rate, credit_latency)
        self.rx = RxPort(cfg)
        self.rtx = ReplayTx(cfg) if cfg.replay_flits else None
        self.rrx = ReplayRx(cfg) if cfg.replay_flits else None

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx, m.submodules.link, m.submodules.rx = self.tx, self.link, self.rx
        if self.rtx is None:
            wiring.connect(m, self.tx.flit, self.link.tx)
            wiring.connect(m, self.link.rx, self.rx.flit)
            m.d.comb += self.link.credit_in.eq(self.rx.credit)
        else:
            m.submodules.rtx, m.submodules.rrx = self.rtx, self.rrx
            wiring.connect(m, self.tx.flit, self.rtx.i)
            wiring.connect(m, self.rtx.o, self.link.tx)
            wiring.connect(m, self.link.rx, self.rrx.i)
            wiring.connect(m, self.rrx.o, self.rx.flit)
            m.d.comb += [self.link.credit_in.eq(self.rx.credit.as_value() | self.rrx.ack.as_value()),
                         self.rtx.ack.eq(self.link.credit_out)]
        m.d.comb += self.tx.credit.eq(self.link.credit_out)
        return m


def run_bench(cfg, msgs, *, seed, latency=3, rate=(1, 1), bubble=0.0, pause=0.0, idle=0.0,
              inject_flit=None, drop_flit=None, expect_err=0, max_cycles=20000, faults=None, timeout=0):
    """Send ``msgs`` in order through a Bench; a consumer reads whole messages from VCs in random order.

    Checks on the fly: credits within bounds every cycle, a stalled flit stays put, every message arrives with
    its header and payload (zero padding included) in per-VC order, ``err`` as expected. Returns a dict with
    the transmitted flits ``(cycle, bits)``, the consumption order and the final counters.
    """
    rng = random.Random(seed)
    w, n = cfg.beat_bytes, cfg.n_fsms
    dut = Bench(cfg, latency, rate)
    tx, rx, link = dut.tx, dut.rx, dut.link
    expected = {v: deque() for v in range(n)}
    for i, msg in enumerate(msgs):
        expected[msg.vc].append((i, msg))
    beat_w, hdr_w = cfg.landing_beats.bit_length(), cfg.landing_headers.bit_length()
    out = {"flits": [], "order": [], "corrupted": []}

    async def msg_producer(ctx):
        for msg in msgs:
            nbeats = beats_of(msg.fields["length"], w)
            while (ctx.get(tx.beat_credits[msg.vc]) < nbeats or ctx.get(tx.hdr_credits[msg.vc]) < 1):
                await ctx.tick()
            ctx.set(tx.reserve, {"valid": 1, "vc": msg.vc, "beats": nbeats})
            await ctx.tick()
            ctx.set(tx.reserve.valid, 0)
            ctx.set(tx.msg.payload.as_value(), pack(HDR, {**msg.fields, "offset": rng.getrandbits(20)}))
            ctx.set(tx.msg.valid, 1)
            await ctx.tick().until(tx.msg.ready)
            ctx.set(tx.msg.valid, 0)

    async def data_producer(ctx):
        for msg in msgs:
            n_b = beats_of(msg.fields["length"], w)
            # Garbage beyond the message's length: the port must zero it.
            raw = msg.payload + rng.randbytes(n_b * w - len(msg.payload))
            for k in range(n_b):
                while rng.random() < bubble:
                    ctx.set(tx.data.valid, 0)
                    await ctx.tick()
                ctx.set(tx.data.valid, 1)
                ctx.set(tx.data.payload.data, int.from_bytes(raw[k * w:(k + 1) * w], "little"))
                ctx.set(tx.data.payload.poison, k == msg.poison)
                await ctx.tick().until(tx.data.ready)
            ctx.set(tx.data.valid, 0)

    async def monitor(ctx):
        cycle, held = 0, None
        for name, prob in (faults or {}).items():           # flip/stall/drop/dup probabilities
            ctx.set(getattr(link, f"{name}_prob"), fault_threshold(prob))
        ctx.set(link.salt, seed & 0xFFFF)
        if dut.rtx is not None:
            ctx.set(dut.rtx.timeout, timeout)
        if inject_flit is not None:
            ctx.set(link.inject, inject_flit == 0)
        async for _, _, valid, ready, bits, bc, hc in ctx.tick().sample(
                tx.flit.valid, tx.flit.ready, tx.flit.payload.as_value(), tx.beat_credits.as_value(),
                tx.hdr_credits.as_value()):
            if held is not None:
                assert valid and bits == held, "a stalled flit changed or vanished"
            held = bits if valid and not ready else None
            if valid and ready:
                out["flits"].append((cycle, bits))
            for v in range(n):
                b = bc >> (v * beat_w) & ((1 << beat_w) - 1)
                h = hc >> (v * hdr_w) & ((1 << hdr_w) - 1)
                assert b <= cfg.landing_beats and h <= cfg.landing_headers, \
                    f"credits of VC {v} out of range (wrapped below zero or above init): {b}, {h}"
            if inject_flit is not None:
                ctx.set(link.inject, ctx.get(link.flits) == inject_flit)
            if drop_flit is not None:
                ctx.set(link.drop_prob, (FAULT_ONE - 1) * (ctx.get(link.flits) == drop_flit))
            cycle += 1
            out["cycles"] = cycle
            if cycle >= max_cycles:
                out["timed_out"] = True
            assert cycle < max_cycles, "bench timed out"

    async def consumer(ctx):
        remaining = len(msgs)
        while remaining:
            while rng.random() < idle:
                await ctx.tick()
            valid = ctx.get(rx.hdr_valid)
            ready_vcs = [v for v in range(n) if valid >> v & 1]
            if not ready_vcs:
                await ctx.tick()
                continue
            v = rng.choice(ready_vcs)
            ctx.set(rx.sel, v)
            head = unpack(HDR, ctx.get(rx.heads[v].as_value()))
            index, msg = expected[v].popleft()
            out["order"].append(index)
            length = msg.fields["length"]
            assert {k: head[k] for k in MSG_FIELDS} == msg.fields, f"header of message {index}"
            assert head["offset"] == 0 and head["last"] == int(length <= cfg.packet_bytes)
            ctx.set(rx.hdr_pop, 1)
            await ctx.tick()
            ctx.set(rx.hdr_pop, 0)
            got = []
            while len(got) < beats_of(length, w):
                ready = rng.random() >= pause
                if not ready and rng.random() < 0.3:
                    ctx.set(rx.sel, rng.randrange(n))       # a glance at another VC must not cost a beat
                else:
                    ctx.set(rx.sel, v)
                ctx.set(rx.data.ready, ready)
                _, _, sel, d_valid, beat = await ctx.tick().sample(rx.sel, rx.data.valid, rx.data.payload)
                if ready and d_valid:
                    assert sel == v
                    got.append(beat)
            ctx.set(rx.data.ready, 0)
            raw = b"".join(b.to_bytes(w, "little") for b in got)
            assert raw[length:] == bytes(len(raw) - length), f"padding of message {index} not zero"
            if raw[:length] != msg.payload:
                out["corrupted"].append((index, int.from_bytes(raw[:length], "little")
                                         ^ int.from_bytes(msg.payload, "little")))
            remaining -= 1
        await ctx.tick().repeat(2 * latency + 10)         # credits in flight come home
        out["beat_credits"] = [ctx.get(tx.beat_credits[v]) for v in range(n)]
        out["hdr_credits"] = [ctx.get(tx.hdr_credits[v]) for v in range(n)]
        for name in ("overflow", "err", "flits", "packets", "crc_errors", "hdr_valid"):
            out["rx_" + name] = ctx.get(getattr(rx, name))
        for name in ("flits", "packets", "busy", "stall"):
            out["tx_" + name] = ctx.get(getattr(tx, name))
        out["link_flits"], out["link_busy"] = ctx.get(link.flits), ctx.get(link.busy)
        if dut.rtx is not None:
            out["replays"], out["resent"] = ctx.get(dut.rtx.replays), ctx.get(dut.rtx.resent)
            for name in ("crc_errors", "naks", "dropped"):
                out["replay_" + name] = ctx.get(getattr(dut.rrx, name))
        assert out["rx_err"] == expect_err

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(msg_producer)
    sim.add_testbench(data_producer)
    sim.add_testbench(monitor, background=True)
    sim.add_testbench(consumer)
    sim.run()
    out["dut"] = dut
    return out


def check_clean_finish(cfg, out, msgs):
    n_flits = sum(len(golden_flits(m, cfg)) for m in msgs)
    n_packets = sum(len(packets(m.fields["length"], cfg.packet_bytes)) for m in msgs)
    assert out["beat_credits"] == [cfg.landing_beats] * cfg.n_fsms
    assert out["hdr_credits"] == [cfg.landing_headers] * cfg.n_fsms
    assert out["rx_overflow"] == 0 and out["rx_crc_errors"] == 0 and out["rx_hdr_valid"] == 0
    assert out["corrupted"] == []
    assert out["tx_flits"] == out["rx_flits"] == out["link_flits"] == out["tx_busy"] == n_flits
    assert out["tx_packets"] == out["rx_packets"] == n_packets


@pytest.mark.parametrize("latency,rate,bubble,pause", [(3, (1, 1), 0.3, 0.3), (1, (2, 3), 0.1, 0.5),
                                                       (20, (1, 1), 0.0, 0.1)])
def test_random_messages_arrive_intact_in_per_vc_order(latency, rate, bubble, pause):
    seed = seed_for(1000 + latency)
    rng = random.Random(seed)
    msgs = [random_msg(rng, CFG) for _ in range(40)]
    out = run_bench(CFG, msgs, seed=seed, latency=latency, rate=rate, bubble=bubble, pause=pause, idle=0.3)
    check_clean_finish(CFG, out, msgs)
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


def test_half_rate_link_halves_throughput():
    cfg = CFG.replace(landing_beats=512)
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
