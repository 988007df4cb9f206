""":class:`~syncfabric.hdl.common.axiram.AxiRam` in Amaranth's simulator: bursts against a byte model of the
memory (plain and timed variants, random master stalls), the timed variant's latencies, jitter, LFSR stalls,
error ranges and read bursts in flight (the behaviour of :class:`syncfabric.host.transports.axi_model.AxiRamModel`), the
host port; and the cocotb test of the RAM with its back door (:mod:`syncfabric.tb.axiram`) on Verilator and
Icarus. ``SEED=<n>`` replaces the random seeds.
"""

import gc
import random
import warnings
from collections import deque

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from syncfabric.hdl.common.axi import AxiBurst, AxiResp
from syncfabric.hdl.common.axiram import AxiRam

from sim_helpers import seed_for

W = 8                   # bytes per beat of the tests' RAMs
SIZE = 1 << 13


class AxiMasterSim:
    """A cycle-by-cycle AXI master for Amaranth's simulator: issues the queued read and write bursts (several
    in flight), with VALID raised and READY given with the given probabilities, and records what happened.

    ``reads``: (addr, beats, burst) to issue; results in ``rdata`` (per burst: list of (data, resp)),
    ``ar_cycles``/``r_cycles`` (per burst: handshake cycle, cycles of its beats); ``writes``: (addr, beats,
    data beats, strobes); ``b`` (list of (resp, cycle)), ``wlast_cycles``. ``ready`` records of the slave's
    ARREADY/AWREADY/WREADY per cycle.
    """

    def __init__(self, dut, rng, *, valid_prob=1.0, ready_prob=1.0, id_=0):
        self.dut, self.rng = dut, rng
        self.valid_prob, self.ready_prob = valid_prob, ready_prob
        self.reads, self.writes = deque(), deque()
        self.rdata, self.ar_cycles, self.r_cycles = [], [], []
        self.b, self.wlast_cycles = [], []
        self.ready_log = {"arready": [], "awready": [], "wready": []}
        self.id = id_

    def _go(self, p):
        return p >= 1.0 or self.rng.random() < p

    async def run(self, ctx, max_cycles=100_000):
        axi = self.dut.axi
        n_reads, n_writes = len(self.rdata) + len(self.reads), len(self.b) + len(self.writes)
        ar = aw = w = None              # payload on the channel (VALID high)
        wq = deque()                    # write bursts whose AW went out: [addr, beats, data, strb, k]
        rq = deque()                    # read bursts accepted: index into rdata
        rvalid_prev = bvalid_prev = None
        for cycle in range(max_cycles):
            if ar is None and self.reads and self._go(self.valid_prob):
                ar = self.reads.popleft()
            if aw is None and self.writes and self._go(self.valid_prob):
                aw = self.writes.popleft()
            if w is None and wq and self._go(self.valid_prob):
                head = wq[0]
                k = head[4]
                w = (head[2][k], head[3][k], k == head[1] - 1)
                head[4] += 1
                if head[4] == head[1]:
                    wq.popleft()
            rready, bready = self._go(self.ready_prob), self._go(self.ready_prob)
            for sig, val in ((axi.arvalid, ar is not None), (axi.awvalid, aw is not None),
                             (axi.wvalid, w is not None), (axi.rready, rready), (axi.bready, bready)):
                ctx.set(sig, val)
            if ar is not None:
                ctx.set(axi.araddr, ar[0]), ctx.set(axi.arlen, ar[1] - 1), ctx.set(axi.arburst, ar[2])
                ctx.set(axi.arsize, W.bit_length() - 1), ctx.set(axi.arid, self.id)
            if aw is not None:
                ctx.set(axi.awaddr, aw[0]), ctx.set(axi.awlen, aw[1] - 1), ctx.set(axi.awburst, AxiBurst.INCR)
                ctx.set(axi.awsize, W.bit_length() - 1), ctx.set(axi.awid, self.id)
            if w is not None:
                ctx.set(axi.wdata, w[0]), ctx.set(axi.wstrb, w[1]), ctx.set(axi.wlast, w[2])
            arready, awready, wready = ctx.get(axi.arready), ctx.get(axi.awready), ctx.get(axi.wready)
            rvalid, bvalid = ctx.get(axi.rvalid), ctx.get(axi.bvalid)
            for name, v in (("arready", arready), ("awready", awready), ("wready", wready)):
                self.ready_log[name].append(v)
            # AXI: a VALID stays high until its handshake
            assert not (rvalid_prev and not rvalid), f"RVALID dropped in cycle {cycle}"
            assert not (bvalid_prev and not bvalid), f"BVALID dropped in cycle {cycle}"
            rvalid_prev, bvalid_prev = rvalid and not rready, bvalid and not bready
            if ar is not None and arready:
                self.ar_cycles.append(cycle)
                self.rdata.append([])
                self.r_cycles.append([])
                rq.append((len(self.rdata) - 1, ar[1]))
                ar = None
            if aw is not None and awready:
                wq.append([aw[0], aw[1], aw[2], aw[3], 0])
                aw = None
            if w is not None and wready:
                if w[2]:
                    self.wlast_cycles.append(cycle)
                w = None
            if rvalid and rready:
                assert rq, f"R beat in cycle {cycle} with no read burst accepted"
                i, beats = rq[0]
                self.rdata[i].append((ctx.get(axi.rdata), ctx.get(axi.rresp)))
                self.r_cycles[i].append(cycle)
                assert ctx.get(axi.rid) == self.id
                assert ctx.get(axi.rlast) == (len(self.rdata[i]) == beats), f"RLAST of burst {i}"
                if len(self.rdata[i]) == beats:
                    rq.popleft()
            if bvalid and bready:
                self.b.append((ctx.get(axi.bresp), cycle))
            await ctx.tick()
            if (not self.reads and not self.writes and ar is None and aw is None and w is None and not wq
                    and not rq and len(self.rdata) == n_reads and len(self.b) == n_writes):
                return cycle
        raise AssertionError(f"master not done after {max_cycles} cycles")


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


async def host_write(ctx, dut, addr, value):
    ctx.set(dut.host.addr, addr), ctx.set(dut.host.wdata, value), ctx.set(dut.host.we, 1)
    await ctx.tick()
    ctx.set(dut.host.we, 0)
    for _ in range(10):
        if ctx.get(dut.host.ack):
            await ctx.tick()
            return
        await ctx.tick()
    raise AssertionError("no host ack")


async def host_read(ctx, dut, addr):
    ctx.set(dut.host.addr, addr), ctx.set(dut.host.re, 1)
    await ctx.tick()
    ctx.set(dut.host.re, 0)
    for _ in range(10):
        if ctx.get(dut.host.ack):
            value = ctx.get(dut.host.rdata)
            await ctx.tick()
            return value
        await ctx.tick()
    raise AssertionError("no host ack")


def beats_of(mem, addr, beats):
    return [int.from_bytes(mem[addr + k * W:addr + (k + 1) * W], "little") for k in range(beats)]


def random_writes(rng, model, n, region=(0, SIZE), errors=()):
    """``n`` random write bursts (random data and strobes) in ``region``, applied to ``model`` (beats touching
    ``errors`` are dropped)."""
    out = []
    lo, hi = region
    for _ in range(n):
        beats = rng.randint(1, 16)
        addr = rng.randrange(lo // W, hi // W - beats) * W
        data = [rng.getrandbits(8 * W) for _ in range(beats)]
        strb = [rng.choice([(1 << W) - 1, rng.getrandbits(W)]) for _ in range(beats)]
        for k in range(beats):
            a = addr + k * W
            if any(a < e and s < a + W for s, e in errors):
                continue
            raw = data[k].to_bytes(W, "little")
            for j in range(W):
                if strb[k] >> j & 1:
                    model[a + j] = raw[j]
        out.append((addr, beats, data, strb))
    return out


TIMED = dict(read_latency=4, write_latency=3, jitter=5, ready_stall=0.3, valid_stall=0.3, max_reads=4,
             max_writes=3)
VARIANTS = {"plain": {}, "timed": TIMED, "timed_one_burst": dict(TIMED, max_reads=1, max_writes=1),
            "latency_only": dict(read_latency=9, write_latency=2)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_random_bursts_read_back_what_was_written_under_master_stalls(variant):
    """Random write bursts with random strobes, then random read bursts (INCR and FIXED) of the whole RAM,
    with random VALID/READY stalls on the master side: every beat matches a byte model, every B is OKAY."""
    seed = seed_for(11)
    rng = random.Random(seed)
    dut = AxiRam(SIZE, data_width=8 * W, seed=seed, **VARIANTS[variant])
    model = bytearray(SIZE)
    master = AxiMasterSim(dut, rng, valid_prob=0.7, ready_prob=0.7)
    master.writes.extend(random_writes(rng, model, 60))
    reads = []
    for _ in range(60):
        beats = rng.randint(1, 16)
        reads.append((rng.randrange(0, SIZE // W - beats) * W, beats, rng.choice([AxiBurst.INCR] * 3 +
                                                                                  [AxiBurst.FIXED])))

    async def bench(ctx):
        await master.run(ctx)
        assert [r for r, _ in master.b] == [AxiResp.OKAY] * 60
        master.reads.extend(reads)
        await master.run(ctx)
        for (addr, beats, burst), got in zip(reads, master.rdata):
            want = beats_of(model, addr, beats) if burst == AxiBurst.INCR else beats_of(model, addr, 1) * beats
            assert [d for d, _ in got] == want, f"read burst {addr:#x}+{beats} ({burst.name})"
            assert all(r == AxiResp.OKAY for _, r in got)

    run(dut, bench)


@pytest.mark.parametrize("latency,jitter", [(0, 0), (6, 0), (3, 7)])
def test_read_first_beat_comes_latency_plus_two_to_plus_jitter_cycles_after_ar(latency, jitter):
    """Without stalls, the first R beat of a burst comes 2 + latency cycles after its AR handshake, plus
    0..jitter (and the jitter takes more than one value)."""
    seed = seed_for(12)
    dut = AxiRam(SIZE, data_width=8 * W, read_latency=latency, jitter=jitter, seed=seed, max_reads=1,
                 error_ranges=[(SIZE - W, SIZE)] if latency == 0 else [])
    master = AxiMasterSim(dut, random.Random(seed))
    master.reads.extend((i * 64, 2, AxiBurst.INCR) for i in range(40))

    async def bench(ctx):
        await master.run(ctx)

    run(dut, bench)
    delays = [r[0] - a for a, r in zip(master.ar_cycles, master.r_cycles)]
    assert all(2 + latency <= d <= 2 + latency + jitter for d in delays), delays
    if jitter:
        assert len(set(delays)) > 2, delays
    else:
        assert set(delays) == {2 + latency}, delays
    assert all(r[1] == r[0] + 1 for r in master.r_cycles), "beats of a burst not back to back"


@pytest.mark.parametrize("latency", [0, 5])
def test_write_response_comes_latency_plus_one_cycle_after_last_w(latency):
    """Without stalls, B comes 1 + write_latency cycles after the burst's last W beat."""
    seed = seed_for(13)
    rng = random.Random(seed)
    dut = AxiRam(SIZE, data_width=8 * W, write_latency=latency, max_writes=2 if latency else 1)
    master = AxiMasterSim(dut, rng)
    master.writes.extend(random_writes(rng, bytearray(SIZE), 20))

    async def bench(ctx):
        await master.run(ctx)

    run(dut, bench)
    delays = [b[1] - w for w, b in zip(master.wlast_cycles, master.b)]
    assert set(delays) == {1 + latency}, delays


def test_read_bursts_overlap_their_latency_when_several_are_in_flight():
    """With max_reads=4 and a 30-cycle latency, 8 four-beat bursts take about 2 latencies, not 8; AR accepts
    4 bursts before the first R beat and never a fifth."""
    seed = seed_for(14)
    times = {}
    for max_reads in (1, 4):
        dut = AxiRam(SIZE, data_width=8 * W, read_latency=30, max_reads=max_reads)
        master = AxiMasterSim(dut, random.Random(seed))
        master.reads.extend((i * 32, 4, AxiBurst.INCR) for i in range(8))

        async def bench(ctx):
            times[max_reads] = await master.run(ctx)

        run(dut, bench)
        first_r = master.r_cycles[0][0]
        assert sum(a < first_r for a in master.ar_cycles) == max_reads
    assert times[1] >= 8 * 32, times
    assert times[4] <= 2 * 32 + 8 * 4 + 10, times


def test_ready_stalls_match_their_probability_and_differ_by_seed():
    """ARREADY/AWREADY are low in about ready_stall of the cycles (0.25 here), and two seeds give different
    patterns; the data still reads back (see the random bursts test)."""
    logs = []
    for seed in (1, 2):
        dut = AxiRam(SIZE, data_width=8 * W, ready_stall=0.25, seed=seed, max_reads=8)
        master = AxiMasterSim(dut, random.Random(0))
        master.reads.extend((0, 1, AxiBurst.INCR) for _ in range(400))

        async def bench(ctx):
            await master.run(ctx)

        run(dut, bench)
        log = master.ready_log["awready"][:600]
        logs.append(log)
        low = 1 - sum(log) / len(log)
        assert 0.18 < low < 0.32, low
    assert logs[0] != logs[1]


def test_seed_port_gives_instances_of_one_module_different_stalls():
    """With seed_port, RAMs of one seed (one converted module) driven with different lfsr_seed values stall
    differently; the same value repeats the pattern."""
    logs = []
    for salt in (1, 2, 1):
        dut = AxiRam(SIZE, data_width=8 * W, ready_stall=0.25, seed=7, max_reads=8, seed_port=True)
        master = AxiMasterSim(dut, random.Random(0))
        master.reads.extend((0, 1, AxiBurst.INCR) for _ in range(100))

        async def bench(ctx):
            ctx.set(dut.lfsr_seed, salt)
            await master.run(ctx)

        run(dut, bench)
        logs.append(master.ready_log["arready"][:150])
    assert logs[0] != logs[1] and logs[0] == logs[2]


def test_stall_port_inputs_stall_exactly_as_the_built_in_probabilities():
    """With stall_port the thresholds are inputs: driven with 64/256 and 128/256 the RAM's ready and valid
    pattern is, cycle for cycle, the one a RAM built with ready_stall=0.25, valid_stall=0.5 shows; driven
    with 0, the one of a RAM built without stalls."""
    logs = []
    for variant in ("built", "port", "none", "zero"):
        if variant == "built":
            dut = AxiRam(SIZE, data_width=8 * W, ready_stall=0.25, valid_stall=0.5, seed=5, max_reads=4)
        elif variant == "none":
            dut = AxiRam(SIZE, data_width=8 * W, seed=5, max_reads=4)
        else:
            dut = AxiRam(SIZE, data_width=8 * W, seed=5, max_reads=4, stall_port=True)
        master = AxiMasterSim(dut, random.Random(0))
        master.reads.extend((i * 64, 3, AxiBurst.INCR) for i in range(40))
        cycles = []

        async def bench(ctx):
            if variant in ("port", "zero"):
                ctx.set(dut.stall_ready, 64 if variant == "port" else 0)
                ctx.set(dut.stall_valid, 128 if variant == "port" else 0)
            cycles.append(await master.run(ctx))

        run(dut, bench)
        logs.append((master.ready_log["arready"][:150], cycles[0]))
    assert logs[0] == logs[1] and logs[2] == logs[3]
    assert logs[3][1] < logs[1][1] and not all(logs[1][0])


def test_valid_stalls_delay_beats_but_keep_them_in_order():
    """With valid_stall=0.5 the R beats of back-to-back bursts have gaps (about half the cycles), data intact."""
    seed = seed_for(15)
    dut = AxiRam(SIZE, data_width=8 * W, valid_stall=0.5, seed=seed, max_reads=2)
    master = AxiMasterSim(dut, random.Random(seed))
    master.reads.extend((i * 128, 16, AxiBurst.INCR) for i in range(10))

    async def bench(ctx):
        cycles = await master.run(ctx)
        assert cycles > 1.6 * 160, cycles

    run(dut, bench)


def test_error_ranges_answer_slverr_return_read_bytes_and_drop_written_beats():
    """A beat touching an error range reads the memory's bytes with SLVERR; a written one is dropped and its
    burst's B is SLVERR; beats next to the range are OKAY."""
    seed = seed_for(16)
    rng = random.Random(seed)
    errors = [(0x100 + 3, 0x100 + 4), (0x400, 0x420)]
    dut = AxiRam(SIZE, data_width=8 * W, error_ranges=errors)
    model = bytearray(SIZE)
    master = AxiMasterSim(dut, rng, valid_prob=0.8, ready_prob=0.8)
    # first write everything everywhere (beats in error ranges are dropped) ...
    writes = random_writes(rng, model, 0)
    for addr in range(0, 0x800, 16 * W):
        data = [rng.getrandbits(8 * W) for _ in range(16)]
        writes.append((addr, 16, data, [(1 << W) - 1] * 16))
        for k in range(16):
            a = addr + k * W
            if not any(a < e and s < a + W for s, e in errors):
                model[a:a + W] = data[k].to_bytes(W, "little")
    master.writes.extend(writes)

    async def bench(ctx):
        await master.run(ctx)
        want_b = [AxiResp.SLVERR if any(a < e and s < a + 16 * W for s, e in errors) else AxiResp.OKAY
                  for a, *_ in writes]
        assert [r for r, _ in master.b] == want_b
        master.reads.extend((a, 16, AxiBurst.INCR) for a in range(0, 0x800, 16 * W))
        await master.run(ctx)
        for i, got in enumerate(master.rdata):
            base = i * 16 * W
            assert [d for d, _ in got] == beats_of(model, base, 16)
            for k, (_, resp) in enumerate(got):
                a = base + k * W
                bad = any(a < e and s < a + W for s, e in errors)
                assert resp == (AxiResp.SLVERR if bad else AxiResp.OKAY), f"beat at {a:#x}"

    run(dut, bench)


@pytest.mark.parametrize("variant", ["plain", "timed"])
def test_host_port_words_meet_axi_bursts(variant):
    """Host word writes are seen by AXI reads, AXI writes by host word reads."""
    seed = seed_for(17)
    rng = random.Random(seed)
    dut = AxiRam(SIZE, data_width=8 * W, **VARIANTS[variant])
    model = bytearray(SIZE)
    master = AxiMasterSim(dut, rng)
    master.writes.extend(random_writes(rng, model, 10, region=(0, SIZE // 2)))

    async def bench(ctx):
        await master.run(ctx)
        for _ in range(30):
            a = rng.randrange(0, SIZE // 2, 4)
            assert await host_read(ctx, dut, a) == int.from_bytes(model[a:a + 4], "little"), f"{a:#x}"
        for _ in range(30):
            a = rng.randrange(SIZE // 2, SIZE, 4)
            v = rng.getrandbits(32)
            await host_write(ctx, dut, a, v)
            model[a:a + 4] = v.to_bytes(4, "little")
        master.reads.extend((a, 8, AxiBurst.INCR) for a in range(SIZE // 2, SIZE, 8 * W))
        await master.run(ctx)
        for i, got in enumerate(master.rdata):
            assert [d for d, _ in got] == beats_of(model, SIZE // 2 + i * 8 * W, 8)

    run(dut, bench)


def test_bad_options_are_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)     # the rejected objects
        for options in ({"error_ranges": [(0, SIZE + 1)]}, {"ready_stall": 1.0}, {"max_reads": 0},
                        {"valid_stall": 0.1, "stall_port": True}):
            with pytest.raises(ValueError):
                AxiRam(SIZE, **options)
        gc.collect()


#: The cocotb test's RAM: 64 KiB, plain or with every timing option on (so AxiMaster checks the protocol
#: under latency, jitter, stalls and several bursts in flight).
#: The ``-array`` variants keep the words in a RamArray (``storage="verilog"``, the NPU memory of system builds):
#: the same traffic and back door must give the same bytes.
COCOTB_VARIANTS = {
    "plain": {"size_bytes": 1 << 16},
    "timed": {"size_bytes": 1 << 16, "read_latency": 7, "write_latency": 3, "jitter": 5, "ready_stall": 0.3,
              "valid_stall": 0.3, "max_reads": 4, "max_writes": 3, "seed": 5},
    "plain-array": {"size_bytes": 1 << 16, "storage": "verilog"},
    "timed-array": {"size_bytes": 1 << 16, "read_latency": 7, "write_latency": 3, "jitter": 5, "ready_stall": 0.3,
                    "valid_stall": 0.3, "max_reads": 4, "max_writes": 3, "seed": 5, "storage": "verilog"},
}


@pytest.mark.parametrize("variant", COCOTB_VARIANTS)
@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_cocotb_backdoor_load_axi_master_moves_data_backdoor_dump(sim, variant):
    """On each simulator: back-door writes and reads at any alignment, data loaded through the back door and
    moved by cocotbext-axi's AxiMaster, dumped through the back door (see tb/axiram/test_axiram_cocotb.py)."""
    from syncfabric.tb.axiram import axiram_test_top
    from syncfabric.host.transports.harness import run_cocotb, simulators

    assert sim in simulators(), f"{sim} is not installed: run `make setup`"
    seed = seed_for(18)
    summary = run_cocotb(axiram_test_top, COCOTB_VARIANTS[variant], toplevel="axiram_top",
                         test_module="syncfabric.tb.axiram.test_axiram_cocotb", sim=sim, seed=seed,
                         tb_params={"seed": seed, "transfers": 40})
    print(f"{sim}: {summary['tests']} cocotb tests passed, build {summary['build_s']:.1f} s, "
          f"run {summary['test_s']:.1f} s")


def test_the_npu_memory_verilog_does_not_grow_with_the_memory_and_starts_at_zero(tmp_path):
    """The system's NPU memory (``npu_mem_verilog``) keeps its words in a RamArray: the Verilog of a 16 MiB
    memory is the size of a 4 KiB one's and converts in about a second (an Amaranth memory's zero initialiser
    is a depth x width constant: a 16 MiB memory took yosys over half an hour); Icarus runs the array's zero
    loop (a row reads 0, not X)."""
    import shutil
    import subprocess
    import time

    from syncfabric.hdl.ace.config import AceConfig
    from syncfabric.hdl.system.top import NPU_MEM_MODULE, npu_mem_verilog

    small = npu_mem_verilog(AceConfig.small(), {"size_bytes": 4096})
    t0 = time.monotonic()
    big = npu_mem_verilog(AceConfig.profile("paper"), {"size_bytes": 16 << 20})
    print(f"16 MiB NPU memory converted in {time.monotonic() - t0:.1f} s")
    assert len(big) < 2 * len(small) + 100_000 and "DEPTH(32'd262144)" in big
    assert "initial begin\n    mem[0]" not in small and "row < DEPTH" in small
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog not installed")
    (tmp_path / "mem.v").write_text(small)
    (tmp_path / "tb.v").write_text(f"module tb; {NPU_MEM_MODULE} dut(); initial begin #1 "
                                   f"$display(\"row=%h\", dut.array.mem[77]); $finish; end endmodule\n")
    out = subprocess.run(["iverilog", "-o", str(tmp_path / "a.out"), str(tmp_path / "mem.v"), str(tmp_path / "tb.v")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    run = subprocess.run(["vvp", "-n", str(tmp_path / "a.out")], capture_output=True, text=True)
    assert "row=" + "0" * 32 in run.stdout, run.stdout


def test_the_ram_array_module_reads_first_and_merges_two_writes_to_one_word(tmp_path):
    """RamArray's Verilog (Icarus): a read in the cycle of a write to its word returns the old word (an
    Amaranth read port not transparent for the write port); two writes to one word in one cycle both land,
    the second port winning the bytes both enable; a write with no byte enabled changes nothing."""
    import shutil
    import subprocess

    from syncfabric.hdl.common.axiram import RAM_ARRAY_MODULE, RAM_ARRAY_VERILOG

    if shutil.which("iverilog") is None:
        pytest.skip("iverilog not installed")
    tb = f"""module tb;
  reg clk = 0, r0_en = 0, r1_en = 0;
  reg [1:0] r0_addr = 0, r1_addr = 0, w0_addr = 0, w1_addr = 0;
  reg [3:0] w0_en = 0, w1_en = 0;
  reg [31:0] w0_data = 0, w1_data = 0;
  wire [31:0] r0_data, r1_data;
  {RAM_ARRAY_MODULE} #(.WIDTH(32), .DEPTH(4), .ABITS(2)) dut(.clk(clk), .r0_en(r0_en), .r0_addr(r0_addr),
    .r0_data(r0_data), .r1_en(r1_en), .r1_addr(r1_addr), .r1_data(r1_data), .w0_en(w0_en), .w0_addr(w0_addr),
    .w0_data(w0_data), .w1_en(w1_en), .w1_addr(w1_addr), .w1_data(w1_data));
  task tick; begin #1 clk = 1; #1 clk = 0; end endtask
  initial begin
    w0_addr = 1; w0_en = 4'b1111; w0_data = 32'h11223344; tick;
    // read word 1 while port 0 writes bytes 0-1 and port 1 bytes 1-2 of it
    r0_en = 1; r0_addr = 1; w0_en = 4'b0011; w0_data = 32'haaaaaaaa; w1_addr = 1; w1_en = 4'b0110;
    w1_data = 32'hbbbbbbbb; tick;
    $display("old=%h", r0_data);
    w0_en = 0; w1_en = 0; tick;
    $display("new=%h", r0_data);
    w0_addr = 1; w0_en = 0; w0_data = 0; tick;
    $display("kept=%h row2=%h", dut.mem[1], dut.mem[2]);
    $finish;
  end
endmodule
"""
    (tmp_path / "ram.v").write_text(RAM_ARRAY_VERILOG)
    (tmp_path / "tb.v").write_text(tb)
    out = subprocess.run(["iverilog", "-o", str(tmp_path / "a.out"), str(tmp_path / "ram.v"), str(tmp_path / "tb.v")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    run = subprocess.run(["vvp", "-n", str(tmp_path / "a.out")], capture_output=True, text=True).stdout
    assert "old=11223344" in run and "new=11bbbbaa" in run and "kept=11bbbbaa row2=00000000" in run, run
