"""DMA engines in Amaranth's simulator against the AXI4 RAM model (:mod:`syncfabric.host.transports.axi_model`):
random byte ranges (any alignment, 1..20 beats, 4 KiB crossings) under random AXI stalls and stream backpressure
compared byte for byte with the model's memory, full-rate throughput behind a slow slave, error responses, latencies,
and the AXI signatures. ``SEED=<n>`` replaces the random seeds.
"""

import random

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.dma import (DmaReader, DmaWriter, dma_cmd_layout, dma_write_data_layout)
from syncfabric.hdl.common.axi import (AXI4ReadSignature, AXI4Signature, AXI4WriteSignature, READ_MEMBERS,
                                       WRITE_MEMBERS, connect_axi)
from syncfabric.host.transports.axi_model import AxiRamModel

from sim_helpers import seed_for

SMALL = AceConfig.small()
#: Configurations the random tests run on: the small one, narrow beats with short bursts, one burst at a time
#: with single-beat bursts, and the production beat width.
CONFIGS = {
    "small": SMALL,
    "w8_burst4_out2": AceConfig.small(beat_bytes=8, packet_bytes=64, dma_max_burst=4, dma_outstanding=2),
    "burst1_out1": AceConfig.small(dma_max_burst=1, dma_outstanding=1),
    "w64": AceConfig.small(beat_bytes=64, packet_bytes=256, dma_max_burst=16, dma_outstanding=4),
    # bursts longer than a page holds: every burst of a run but the last ends at a page's end
    "w64_burst128": AceConfig.small(beat_bytes=64, packet_bytes=256, dma_max_burst=128),
    # the FPGA form (last-burst flags in flip-flops): the boards' DMA and one with single-beat bursts
    "board_fabric": AceConfig.board(fabric=1),
    "burst1_fabric": AceConfig.small(dma_max_burst=1, dma_outstanding=1, fabric=1),
    "w64_burst128_fabric": AceConfig.small(beat_bytes=64, packet_bytes=256, dma_max_burst=128, fabric=1),
}
MEM_BYTES = 1 << 15
#: Random AXI timing of the random tests.
SLOW_RAM = dict(latency=3, jitter=6, ready_prob=0.6, valid_prob=0.7)


def beats_of(length, w):
    return -(-length // w)


def random_commands(rng, cfg, n, mem_bytes=MEM_BYTES, max_beats=20):
    """``n`` (addr, length) pairs: lengths 1..max_beats beats biased to beat-size edges, any byte address, about
    a third of them straddling a 4 KiB boundary."""
    w = cfg.beat_bytes
    top = max_beats * w
    cmds = []
    for _ in range(n):
        length = rng.choice([1, 2, w - 1, w, w + 1, 2 * w - 1, top, rng.randint(1, top), rng.randint(1, top),
                             rng.randint(1, 4 * w)])
        if rng.random() < 0.35:
            page = rng.randrange(1, mem_bytes // 4096)
            addr = page * 4096 - rng.randint(1, length) if length > 1 else page * 4096 - 1
            addr = max(addr, 0)
        else:
            addr = rng.randrange(0, mem_bytes - length)
        cmds.append((addr, length))
    return cmds


def max_beats_for(cfg):
    """Longest command of the random tests, in beats: 20, or two pages and more where a burst may be longer
    than a page (so that runs have bursts from one page's start to its end)."""
    page_beats = 4096 // cfg.beat_bytes
    return 2 * page_beats + 5 if cfg.dma_max_burst >= page_beats else 20


def make_sim(dut):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    return sim


async def produce(ctx, port, items, rng, idle_prob=0.0, times=None, deadline=20_000):
    """Offer ``items`` (payload constants) on stream ``port`` with random idle cycles; record accept cycles."""
    cycle = 0
    for item in items:
        while idle_prob and rng.random() < idle_prob:
            ctx.set(port.valid, 0)
            await ctx.tick()
            cycle += 1
        ctx.set(port.payload, item)
        ctx.set(port.valid, 1)
        while True:
            _, _, ready = await ctx.tick().sample(port.ready)
            cycle += 1
            assert cycle < deadline, "stream input stalled"
            if ready:
                break
        if times is not None:
            times.append(cycle)
    ctx.set(port.valid, 0)


async def consume(ctx, port, n, rng, ready_prob=1.0, deadline=20_000):
    """Take ``n`` beats from stream ``port`` with a random ``ready``; returns ``[(cycle, payload)]``."""
    got = []
    cycle = 0
    while len(got) < n:
        ready = ready_prob >= 1.0 or rng.random() < ready_prob
        ctx.set(port.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
        cycle += 1
        assert cycle < deadline, f"stream output stalled after {len(got)} of {n} beats"
        if ready and valid:
            got.append((cycle, payload))
    ctx.set(port.ready, 0)
    return got


def domain_of(cfg, i):
    """The protection domain the tests give command ``i``."""
    return i % (cfg.n_cmds + 1)


def watch_domains(dut, ch, out):
    """A process recording ``(addr, beats, domain)`` of every burst ``dut`` issues on AXI channel ``ch``
    (``ar``/``aw``) into ``out``."""
    axi = dut.axi
    dom = dut.ar_domain if ch == "ar" else dut.aw_domain

    async def process(ctx):
        async for _, _, valid, ready, addr, alen, d in ctx.tick().sample(
                getattr(axi, ch + "valid"), getattr(axi, ch + "ready"), getattr(axi, ch + "addr"),
                getattr(axi, ch + "len"), dom):
            if valid and ready:
                out.append((addr, alen + 1, d))
    return process


def check_domains(cfg, cmds, bursts):
    """Each command's bursts (in command order, covering its AXI beats) carry its domain, and each is as long
    as the rules let it be: the beats left, ``dma_max_burst``, the beats to the end of its 4 KiB page."""
    w = cfg.beat_bytes
    k = 0
    for i, (addr, length) in enumerate(cmds):
        left = (addr + length + w - 1) // w - addr // w
        while left > 0:
            a, beats, d = bursts[k]
            k += 1
            assert d == domain_of(cfg, i), f"command {i} ({addr:#x}, {length}): a burst at {a:#x} in domain {d}"
            longest = min(left, cfg.dma_max_burst, (4096 - a % 4096) // w)
            assert beats == longest, f"command {i} ({addr:#x}, {length}): {beats} beats at {a:#x}, not {longest}"
            left -= beats
        assert left == 0
    assert k == len(bursts)


# ---- reader -------------------------------------------------------------------------------------------------

def run_reader(cfg, cmds, *, seed, ram_kw=None, ready_prob=1.0, idle_prob=0.0, error_ranges=()):
    """Run ``cmds`` through a :class:`DmaReader`; returns (beats, command accept cycles, model, counters)."""
    dut = DmaReader(cfg)
    rng = random.Random(seed)
    ram = AxiRamModel(dut.axi, size=MEM_BYTES, seed=seed, max_burst=cfg.dma_max_burst,
                      max_reads=cfg.dma_outstanding, error_ranges=error_ranges, **(ram_kw or {}))
    ram.write(0, rng.randbytes(MEM_BYTES))
    sim = make_sim(dut)
    ram.add_to(sim)
    layout = dma_cmd_layout(cfg)
    total = sum(beats_of(n, cfg.beat_bytes) for _, n in cmds)
    result = {"accepted": [], "bursts": []}

    async def commands(ctx):
        await produce(ctx, dut.cmd, [layout.const({"addr": a, "length": n, "domain": domain_of(cfg, i)})
                                     for i, (a, n) in enumerate(cmds)],
                      random.Random(seed + 1), idle_prob, times=result["accepted"])

    async def sink(ctx):
        beats = await consume(ctx, dut.data, total, random.Random(seed + 2), ready_prob)
        result["beats"] = [(c, int(p.data), int(p.last), int(p.err)) for c, p in beats]
        await ctx.tick().repeat(4)
        result["counters"] = {k: ctx.get(getattr(dut, k)) for k in ("beats", "bytes", "bursts", "busy")}

    sim.add_testbench(commands)
    sim.add_testbench(sink)
    sim.add_process(watch_domains(dut, "ar", result["bursts"]))
    sim.run()
    check_domains(cfg, cmds, result["bursts"])
    return result["beats"], result["accepted"], ram, result["counters"]


def check_read_beats(cfg, cmds, beats, ram, expect_err=lambda a, n: False):
    """Every command's beats: realigned bytes of the model's memory, zero past ``length``, ``last``, ``err``."""
    w = cfg.beat_bytes
    k = 0
    for i, (addr, length) in enumerate(cmds):
        nb = beats_of(length, w)
        want = ram.read(addr, length) + bytes(nb * w - length)
        for b in range(nb):
            _, data, last, err = beats[k]
            k += 1
            got = data.to_bytes(w, "little")
            assert got == want[b * w:(b + 1) * w], \
                f"command {i} ({addr:#x}, {length}) beat {b}: got {got.hex()}, want {want[b * w:(b + 1) * w].hex()}"
            assert last == (b == nb - 1), f"command {i} beat {b}: last={last}"
            assert err == (b == nb - 1 and expect_err(addr, length)), \
                f"command {i} ({addr:#x}, {length}) beat {b}: err={err}"
    assert k == len(beats)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_reader_random_ranges_match_memory_under_random_stalls(name):
    cfg = CONFIGS[name]
    seed = seed_for(1000 + list(CONFIGS).index(name))
    rng = random.Random(seed)
    cmds = random_commands(rng, cfg, 30 if cfg.beat_bytes >= 64 else 100, max_beats=max_beats_for(cfg))
    beats, _, ram, counters = run_reader(cfg, cmds, seed=seed, ram_kw=SLOW_RAM, ready_prob=0.7, idle_prob=0.3)
    check_read_beats(cfg, cmds, beats, ram)
    assert any(a // 4096 != (a + n - 1) // 4096 for a, n in cmds), "no 4 KiB crossing tested"
    # The model asserts burst length, 4 KiB, INCR, full-size beats and outstanding bursts; RREADY never drops.
    assert ram.r_stalls == 0
    assert counters["beats"] == len(beats)
    assert counters["bytes"] == sum(n for _, n in cmds)
    assert counters["bursts"] == len(ram.reads)
    assert counters["busy"] >= len(beats)
    print(f"{name}: {len(cmds)} commands, {len(beats)} beats, {len(ram.reads)} bursts, "
          f"max {ram.max_reads_in_flight} in flight, {ram.cycles} cycles")


@pytest.mark.parametrize("latency", [0, 6])
def test_reader_pipelines_back_to_back_single_beat_commands(latency):
    """Aligned one-beat commands: the next command's AR goes while earlier data streams, so a fast slave gives
    one command per cycle; behind a slow one, ``dma_outstanding`` reads overlap (one burst per command)."""
    cfg = SMALL
    seed = seed_for(1100)
    w = cfg.beat_bytes
    cmds = [(0x400 + 3 * w * i, w) for i in range(32)]
    beats, accepted, ram, _ = run_reader(cfg, cmds, seed=seed, ram_kw=dict(latency=latency))
    check_read_beats(cfg, cmds, beats, ram)
    span = beats[-1][0] - beats[0][0] + 1
    print(f"32 single-beat reads, slave latency {latency}: {span} cycles, max {ram.max_reads_in_flight} in flight")
    if latency == 0:
        assert span == len(cmds)
    else:
        assert ram.max_reads_in_flight == cfg.dma_outstanding


def test_reader_never_overruns_its_buffer_when_the_consumer_stalls():
    """A fast slave and a consumer taking one beat in five: ARs wait for buffer space, no beat is lost."""
    cfg = SMALL
    seed = seed_for(1150)
    w = cfg.beat_bytes
    cmds = [(0x100 + 3, 60 * w), (0x2000, 40 * w + 5), *random_commands(random.Random(seed), cfg, 10)]
    beats, _, ram, _ = run_reader(cfg, cmds, seed=seed, ready_prob=0.2)
    check_read_beats(cfg, cmds, beats, ram)
    assert ram.r_stalls == 0


def stream_rate(beats):
    """Beats per cycle from the first to the last beat (inclusive)."""
    return len(beats) / (beats[-1][0] - beats[0][0] + 1)


@pytest.mark.parametrize("offset", [0, 5])
def test_reader_sustains_one_beat_per_cycle_behind_a_slow_slave(offset):
    """One long read from a slave with a fixed 16-cycle latency: outstanding bursts hide it."""
    cfg = SMALL
    seed = seed_for(1200)
    w = cfg.beat_bytes
    n_beats = 400
    cmds = [(0x1000 + offset, n_beats * w)]
    beats, accepted, ram, counters = run_reader(cfg, cmds, seed=seed, ram_kw=dict(latency=16))
    check_read_beats(cfg, cmds, beats, ram)
    total = n_beats / (beats[-1][0] - accepted[0] + 1)
    print(f"read, offset {offset}: {stream_rate(beats):.3f} beats/cycle while streaming, {total:.3f} from command "
          f"to last beat; max {ram.max_reads_in_flight} bursts in flight; busy {counters['busy']} cycles")
    assert stream_rate(beats) >= 0.99
    assert total >= 0.9


def test_reader_back_to_back_commands_stream_without_gaps():
    """Eight aligned 32-beat commands behind a 16-cycle slave stream back to back."""
    cfg = SMALL
    seed = seed_for(1250)
    w = cfg.beat_bytes
    cmds = [(0x2000 + 32 * w * i, 32 * w) for i in range(8)]
    beats, accepted, ram, _ = run_reader(cfg, cmds, seed=seed, ram_kw=dict(latency=16))
    check_read_beats(cfg, cmds, beats, ram)
    print(f"8 x 32 beats: {stream_rate(beats):.3f} beats/cycle")
    assert stream_rate(beats) >= 0.99


def test_reader_flags_error_responses_on_the_last_beat():
    cfg = SMALL
    seed = seed_for(1300)
    w = cfg.beat_bytes
    bad = (0x3000, 0x3000 + 2 * w)          # two beats answer SLVERR

    def overlaps(addr, length):
        lo, hi = addr // w * w, beats_of(addr + length, w) * w
        return lo < bad[1] and bad[0] < hi

    # Single beats, a range ending in the bad beats, ranges starting in them, one whose FIRST of three bursts
    # is bad and one whose LAST burst is bad.
    cmds = [(0x2f00, 64), (0x2fff, 3), (0x3000, 1), (0x300f + w, 40), (0x3020, 100), (0x2ff0, 17),
            (0x3001, 20 * w), (0x3000 - 17 * w, 17 * w + 1), *random_commands(random.Random(seed), cfg, 20)]
    beats, _, ram, _ = run_reader(cfg, cmds, seed=seed, ram_kw=SLOW_RAM, ready_prob=0.8, error_ranges=[bad])
    check_read_beats(cfg, cmds, beats, ram, expect_err=overlaps)
    assert sum(overlaps(a, n) for a, n in cmds) >= 3


def test_reader_latency_from_command_to_first_beat():
    """Command accepted at (clock edge) c: AR handshake at c+4 (a cycle each in the command and burst register
    slices), first beat handshake at c+8 (c+9 when ``addr`` is not beat-aligned) with a zero-latency
    always-ready slave and consumer."""
    cfg = SMALL
    beats, accepted, ram, _ = run_reader(cfg, [(0x100, 16), (0x203, 20)], seed=1)
    first_aligned = beats[0][0] - accepted[0]
    first_unaligned = beats[1][0] - accepted[1]
    ar = [b.cycle - c for b, c in zip(ram.reads, accepted)]
    print(f"read latency: command -> AR handshake {ar}, command -> first beat {first_aligned} cycles aligned, "
          f"{first_unaligned} unaligned")
    assert ar[0] == 4 and first_aligned == 8 and first_unaligned == 9


# ---- writer -------------------------------------------------------------------------------------------------

def run_writer(cfg, cmds, *, seed, ram_kw=None, ready_prob=1.0, idle_prob=0.0, data_idle_prob=None,
               error_ranges=()):
    """Run ``cmds`` through a :class:`DmaWriter` with random payloads (garbage past ``length``).

    Returns (memory before, payloads, done beats, stream-beat accept cycles, command accept cycles, model,
    counters)."""
    w = cfg.beat_bytes
    dut = DmaWriter(cfg)
    rng = random.Random(seed)
    ram = AxiRamModel(dut.axi, size=MEM_BYTES, seed=seed, max_burst=cfg.dma_max_burst,
                      max_writes=cfg.dma_outstanding, error_ranges=error_ranges, **(ram_kw or {}))
    before = rng.randbytes(MEM_BYTES)
    ram.write(0, before)
    payloads = [rng.randbytes(beats_of(n, w) * w) for _, n in cmds]
    layout, wlayout = dma_cmd_layout(cfg), dma_write_data_layout(cfg)
    beats = []
    for (_, n), payload in zip(cmds, payloads):
        nb = beats_of(n, w)
        beats += [wlayout.const({"data": int.from_bytes(payload[b * w:(b + 1) * w], "little"), "last": b == nb - 1})
                  for b in range(nb)]
    sim = make_sim(dut)
    ram.add_to(sim)
    result = {"cmd_times": [], "data_times": [], "bursts": []}

    async def commands(ctx):
        await produce(ctx, dut.cmd, [layout.const({"addr": a, "length": n, "domain": domain_of(cfg, i)})
                                     for i, (a, n) in enumerate(cmds)],
                      random.Random(seed + 1), idle_prob, times=result["cmd_times"])

    async def data(ctx):
        await produce(ctx, dut.data, beats, random.Random(seed + 3),
                      idle_prob if data_idle_prob is None else data_idle_prob, times=result["data_times"])

    async def done(ctx):
        got = await consume(ctx, dut.done, len(cmds), random.Random(seed + 2), ready_prob)
        result["done"] = [(c, int(p.err)) for c, p in got]
        await ctx.tick().repeat(4)
        result["counters"] = {k: ctx.get(getattr(dut, k)) for k in ("beats", "bytes", "bursts", "busy")}

    sim.add_testbench(commands)
    sim.add_testbench(data)
    sim.add_testbench(done)
    sim.add_process(watch_domains(dut, "aw", result["bursts"]))
    sim.run()
    check_domains(cfg, cmds, result["bursts"])
    return before, payloads, result["done"], result["data_times"], result["cmd_times"], ram, result["counters"]


def expected_memory(before, cmds, payloads, skip=lambda addr: False):
    mem = bytearray(before)
    for (addr, length), payload in zip(cmds, payloads):
        for i in range(length):
            if not skip(addr + i):
                mem[addr + i] = payload[i]
    return bytes(mem)


def check_memory(ram, want):
    got = ram.read(0, len(want))
    if got != want:
        bad = [i for i in range(len(want)) if got[i] != want[i]]
        raise AssertionError(f"{len(bad)} bytes differ, first at {bad[0]:#x}: {got[bad[0]]:#x} != {want[bad[0]]:#x}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_writer_random_ranges_write_exactly_their_bytes_under_random_stalls(name):
    """Whole-memory comparison: every byte of each range written, no byte outside any range touched."""
    cfg = CONFIGS[name]
    seed = seed_for(2000 + list(CONFIGS).index(name))
    rng = random.Random(seed)
    cmds = random_commands(rng, cfg, 30 if cfg.beat_bytes >= 64 else 100, max_beats=max_beats_for(cfg))
    before, payloads, done, _, _, ram, counters = run_writer(cfg, cmds, seed=seed, ram_kw=SLOW_RAM,
                                                             ready_prob=0.7, idle_prob=0.3)
    check_memory(ram, expected_memory(before, cmds, payloads))
    assert [err for _, err in done] == [0] * len(cmds)
    assert counters["beats"] == sum(beats_of(n, cfg.beat_bytes) for _, n in cmds)
    assert counters["bytes"] == sum(n for _, n in cmds)
    assert counters["bursts"] == len(ram.writes)
    print(f"{name}: {len(cmds)} commands, {counters['beats']} beats, {len(ram.writes)} bursts, "
          f"max {ram.max_writes_in_flight} awaiting B, {ram.cycles} cycles")


def test_writer_reports_done_after_the_last_response_of_each_command():
    """With a 30-cycle B latency, no command is reported before its last burst's response can have arrived."""
    cfg = SMALL
    seed = seed_for(2100)
    w = cfg.beat_bytes
    cmds = [(0x100 + 7, 3 * w), (0x800, 20 * w), (0x1ff0, 2 * w)]
    before, payloads, done, data_times, _, ram, _ = run_writer(cfg, cmds, seed=seed,
                                                               ram_kw=dict(write_latency=30))
    check_memory(ram, expected_memory(before, cmds, payloads))
    ends = []
    k = 0
    for _, n in cmds:
        k += beats_of(n, w)
        ends.append(data_times[k - 1])
    for (cycle, err), end in zip(done, ends):
        assert err == 0
        assert cycle >= end + 30, f"done at cycle {cycle}, last beat taken at {end}"
    print("write latency: last stream beat -> done", [c - e for (c, _), e in zip(done, ends)])


def test_writer_latencies():
    """Command accepted at (clock edge) c: AW handshake at c+4; the data's register slice takes the first beat at
    once (it holds two beats ahead of the realigner); done handshake 4 cycles after the last beat is taken
    (zero-latency always-ready slave and consumer, data offered early)."""
    cfg = SMALL
    w = cfg.beat_bytes
    cmds = [(0x100, 3 * w), (0x203, 2 * w)]
    _, _, done, data_times, cmd_times, ram, _ = run_writer(cfg, cmds, seed=1)
    aw = [b.cycle - c for b, c in zip(ram.writes, cmd_times)]
    first_data = data_times[0] - cmd_times[0]
    done_after = done[0][0] - data_times[2]
    print(f"write latency: command -> AW handshake {aw}, command -> first beat taken {first_data}, "
          f"last beat taken -> done {done_after}")
    assert aw[0] == 4 and first_data == 0 and done_after == 4


@pytest.mark.parametrize("latency", [0, 6])
def test_writer_pipelines_back_to_back_single_beat_commands(latency):
    cfg = SMALL
    seed = seed_for(2150)
    w = cfg.beat_bytes
    cmds = [(0x400 + 3 * w * i, w) for i in range(32)]
    before, payloads, done, data_times, _, ram, _ = run_writer(cfg, cmds, seed=seed, ram_kw=dict(latency=latency))
    check_memory(ram, expected_memory(before, cmds, payloads))
    # the data's register slice takes the first two beats ahead of the realigner; from the third on, one a cycle
    span = data_times[-1] - data_times[2] + 1
    print(f"32 single-beat writes, slave latency {latency}: beats 3-32 in {span} cycles, max "
          f"{ram.max_writes_in_flight} awaiting B")
    if latency == 0:
        assert span == len(cmds) - 2
    else:
        assert ram.max_writes_in_flight == cfg.dma_outstanding


@pytest.mark.parametrize("offset", [0, 9])
def test_writer_sustains_one_beat_per_cycle_behind_a_slow_slave(offset):
    """One long write to a slave answering B 16 cycles after each burst: stream beats go at one per cycle."""
    cfg = SMALL
    seed = seed_for(2200)
    w = cfg.beat_bytes
    n_beats = 400
    cmds = [(0x1000 + offset, n_beats * w)]
    before, payloads, done, data_times, cmd_times, ram, counters = run_writer(
        cfg, cmds, seed=seed, ram_kw=dict(latency=16))
    check_memory(ram, expected_memory(before, cmds, payloads))
    streaming = n_beats / (data_times[-1] - data_times[0] + 1)
    total = n_beats / (done[0][0] - cmd_times[0] + 1)
    print(f"write, offset {offset}: {streaming:.3f} beats/cycle while streaming, {total:.3f} from command to done; "
          f"max {ram.max_writes_in_flight} bursts awaiting B; busy {counters['busy']} cycles")
    assert streaming >= 0.99
    assert total >= 0.9


def test_writer_back_to_back_commands_stream_without_gaps():
    cfg = SMALL
    seed = seed_for(2250)
    w = cfg.beat_bytes
    cmds = [(0x2000 + 32 * w * i, 32 * w) for i in range(8)]
    before, payloads, done, data_times, _, ram, _ = run_writer(cfg, cmds, seed=seed, ram_kw=dict(latency=16))
    check_memory(ram, expected_memory(before, cmds, payloads))
    # from the third beat: the data's register slice takes the first two ahead of the first burst
    rate = (len(data_times) - 2) / (data_times[-1] - data_times[2] + 1)
    print(f"8 x 32 beats: {rate:.3f} beats/cycle")
    assert rate == 1.0


def test_writer_flags_error_responses_per_command():
    cfg = SMALL
    seed = seed_for(2300)
    w = cfg.beat_bytes
    bad = (0x3000, 0x3000 + 2 * w)

    def overlaps(addr, length):
        lo, hi = addr // w * w, beats_of(addr + length, w) * w
        return lo < bad[1] and bad[0] < hi

    # Single beats, a range ending in the bad beats, ranges starting in them, one whose FIRST of three bursts
    # is bad and one whose LAST burst is bad.
    cmds = [(0x2f00, 64), (0x2fff, 3), (0x3000, 1), (0x300f + w, 40), (0x3020, 100), (0x2ff0, 17),
            (0x3001, 20 * w), (0x3000 - 17 * w, 17 * w + 1), *random_commands(random.Random(seed), cfg, 20)]
    before, payloads, done, _, _, ram, _ = run_writer(cfg, cmds, seed=seed, ram_kw=SLOW_RAM, ready_prob=0.8,
                                                      error_ranges=[bad])
    assert [err for _, err in done] == [int(overlaps(a, n)) for a, n in cmds]
    assert sum(overlaps(a, n) for a, n in cmds) >= 3
    # The model drops beats answered SLVERR: whole beats of the bad range keep their old bytes.
    check_memory(ram, expected_memory(before, cmds, payloads, skip=lambda a: bad[0] <= a < bad[1]))


# ---- AXI signatures -----------------------------------------------------------------------------------------

AXI_NAMES = ("awid awaddr awlen awsize awburst awlock awcache awprot awvalid awready wdata wstrb wlast wvalid "
             "wready bid bresp bvalid bready arid araddr arlen arsize arburst arlock arcache arprot arvalid "
             "arready rid rdata rresp rlast rvalid rready").split()
MASTER_INPUTS = {"awready", "wready", "bid", "bresp", "bvalid", "arready", "rid", "rdata", "rresp", "rlast",
                 "rvalid"}


def test_axi4_signature_has_the_amba_members_with_master_directions():
    sig = AXI4Signature(32, 128, id_width=2)
    members = sig.members
    assert set(members) == set(AXI_NAMES)
    for name in AXI_NAMES:
        assert members[name].flow == (In if name in MASTER_INPUTS else Out), name
    assert members["wdata"].shape.width == 128 and members["wstrb"].shape.width == 16
    assert members["araddr"].shape.width == 32 and members["rid"].shape.width == 2
    assert set(READ_MEMBERS) | set(WRITE_MEMBERS) == set(AXI_NAMES)
    assert set(AXI4ReadSignature(32, 128).members) == set(READ_MEMBERS)
    assert set(AXI4WriteSignature(32, 128).members) == set(WRITE_MEMBERS)
    assert AXI4Signature(32, 128) == AXI4Signature(32, 128) != AXI4Signature(32, 64)
    with pytest.raises(ValueError):
        AXI4Signature(32, 12)


class _SharedPort(wiring.Component):
    """A reader and a writer on one AXI port (what a top level does)."""

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({"axi": Out(AXI4Signature(cfg.addr_width, 8 * cfg.beat_bytes))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = DmaReader(self.cfg)
        m.submodules.writer = writer = DmaWriter(self.cfg)
        connect_axi(m, self.axi, read=reader.axi, write=writer.axi)
        return m


def test_connect_axi_gives_one_port_with_cocotbext_axi_names():
    text = rtlil.convert(_SharedPort(SMALL), name="top")
    for name in AXI_NAMES:
        assert f"\\axi__{name} " in text or f"\\axi__{name}\n" in text, name
    # Mismatched interfaces are refused before anything is added to the module (so none is needed here).
    port = AXI4Signature(32, 128).create()
    with pytest.raises(TypeError):
        connect_axi(None, port, read=AXI4ReadSignature(32, 64).create())
    with pytest.raises(TypeError):
        connect_axi(None, port, read=AXI4WriteSignature(32, 128).create())
    with pytest.raises(TypeError):
        connect_axi(None, AXI4Signature(32, 128).flip().create(), read=AXI4ReadSignature(32, 128).create())


# ---- cocotb on Verilator with cocotbext-axi's AxiRam ---------------------------------------------------------

@pytest.mark.cocotb
@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_dma_on_verilog_simulators_with_cocotbext_axi_ram(sim):
    """Reader and writer sharing one AXI port (:class:`syncfabric.tb.dma.DmaTestTop`) served by cocotbext-axi's
    ``AxiRam``, bound with ``AxiBus.from_prefix(dut, "axi_")``: one cocotb test per traffic regime (full rate,
    random pauses on every AXI channel and backpressure, a slow memory behind a slow consumer)."""
    from syncfabric.tb.dma import dma_test_top
    from syncfabric.host.transports.harness import run_cocotb, simulators

    assert sim in simulators(), f"{sim} is not installed: run `make setup`"
    seed = seed_for(3000)
    summary = run_cocotb(dma_test_top, {}, toplevel="dma_test_top", test_module="syncfabric.tb.dma.test_dma_cocotb",
                         sim=sim, seed=seed, tb_params={"seed": seed, "commands": 150})
    assert summary["tests"] == 3, summary
    print(f"{sim}: {summary['tests']} cocotb tests passed, build {summary['build_s']:.1f} s, "
          f"run {summary['test_s']:.1f} s")
