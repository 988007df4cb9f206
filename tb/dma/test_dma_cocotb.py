"""cocotb testbench of the DMA engines (:class:`syncfabric.tb.dma.DmaTestTop`) against cocotbext-axi's ``AxiRam``.

The RAM binds the top's ``axi__*`` ports through ``AxiBus.from_prefix(dut, "axi_")``, which is what this test
proves besides the data: random writes (any alignment, 4 KiB crossings) run while random reads of another region
stream, both with random pauses on all five AXI channels and random stream backpressure; then the written
region is read back through the DMA. Reads are compared with the RAM's contents, writes with a model of the
memory (no byte outside a written range may change).

Parameters (:func:`syncfabric.host.transports.harness.tb_params`): ``params`` (``AceConfig.small`` overrides given to
the factory), ``seed``, ``commands`` (per phase and direction). The traffic regimes are the test's own parameters
(:data:`REGIMES`, one cocotb test each in the same simulation): ``pause`` (probability of a paused AXI cycle),
``ready_prob`` (stream sinks), ``idle`` (stream sources).
"""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiRam

from ...hdl.ace.config import AceConfig
from ...hdl.ace.dma import dma_cmd_layout, dma_done_layout, dma_read_data_layout, dma_write_data_layout
from ...hdl.common.layouts import pack, unpack
from ...host.transports.harness import tb_params
from ..stream import StreamSink, StreamSource

CLOCK_NS = 10
MEM_BYTES = 1 << 16
#: Writes go to the lower half of the RAM, the concurrent reads to the upper half.
WRITE_REGION = (0, MEM_BYTES // 2)
READ_REGION = (MEM_BYTES // 2, MEM_BYTES)
#: (pause, ready_prob, idle): every channel at full rate (the back-to-back paths), random pauses and
#: backpressure, and a slow memory behind a slow consumer.
REGIMES = ((0.0, 1.0, 0.0), (0.3, 0.8, 0.2), (0.6, 0.5, 0.5))


def pauses(rng, prob):
    """Pause generator for a cocotbext-axi channel: True pauses the channel for a cycle."""
    while True:
        yield rng.random() < prob


def random_ranges(rng, w, n, region, max_beats=20):
    lo, hi = region
    out = []
    for _ in range(n):
        length = rng.choice([1, w - 1, w, w + 1, rng.randint(1, max_beats * w), rng.randint(1, max_beats * w)])
        if rng.random() < 0.35:     # straddle a 4 KiB boundary inside the region
            page = rng.randrange(lo // 4096 + 1, hi // 4096)
            addr = page * 4096 - rng.randint(1, max(1, length - 1))
        else:
            addr = rng.randrange(lo, hi - length)
        out.append((addr, length))
    return out


class DmaTB:
    """Clock, reset, the AXI RAM with paused channels, stream drivers and the memory model."""

    def __init__(self, dut, params, *, pause, ready_prob, idle):
        self.dut = dut
        overrides = params.get("params", {})
        self.cfg = AceConfig.small(**overrides)
        self.w = self.cfg.beat_bytes
        self.seed = int(params.get("seed", cocotb.RANDOM_SEED))
        self.rng = random.Random(self.seed)
        self.pause, self.ready_prob, self.idle = pause, ready_prob, idle
        self.log = dut._log
        self.cmd_layout = dma_cmd_layout(self.cfg)
        self.rdata_layout = dma_read_data_layout(self.cfg)
        self.wdata_layout = dma_write_data_layout(self.cfg)
        self.done_layout = dma_done_layout()
        self.ram = AxiRam(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst, size=MEM_BYTES)
        for k, channel in enumerate((self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                                     self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                                     self.ram.read_if.r_channel)):
            channel.set_pause_generator(pauses(random.Random(self.seed * 8 + k), self.pause))
        stream_rng = lambda k: random.Random(self.seed * 16 + k)    # noqa: E731
        self.rd_cmd = StreamSource(dut, "rd_cmd", dut.clk, idle=self.idle, rng=stream_rng(1))
        self.rd_data = StreamSink(dut, "rd_data", dut.clk, backpressure=1 - self.ready_prob, rng=stream_rng(2))
        self.wr_cmd = StreamSource(dut, "wr_cmd", dut.clk, idle=self.idle, rng=stream_rng(3))
        self.wr_data = StreamSource(dut, "wr_data", dut.clk, idle=self.idle, rng=stream_rng(4))
        self.wr_done = StreamSink(dut, "wr_done", dut.clk, backpressure=1 - self.ready_prob, rng=stream_rng(5))
        self.beats_read = self.beats_written = 0
        self.mem = bytearray(self.rng.randbytes(MEM_BYTES))
        self.ram.write(0, bytes(self.mem))

    async def start(self):
        Clock(self.dut.clk, CLOCK_NS, unit="ns").start()
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        for drv in (self.rd_cmd, self.rd_data, self.wr_cmd, self.wr_data, self.wr_done):
            cocotb.start_soon(drv.run())
        await RisingEdge(self.dut.clk)

    async def read(self, ranges):
        """Read ``ranges`` through the DMA, checking every beat against the memory model."""
        for addr, length in ranges:
            self.rd_cmd.send_nowait(pack(self.cmd_layout, {"addr": addr, "length": length}))
        for i, (addr, length) in enumerate(ranges):
            nb = -(-length // self.w)
            want = bytes(self.mem[addr:addr + length]) + bytes(nb * self.w - length)
            for b in range(nb):
                beat = unpack(self.rdata_layout, await self.rd_data.recv())
                got = beat["data"].to_bytes(self.w, "little")
                assert got == want[b * self.w:(b + 1) * self.w], \
                    f"read {i} ({addr:#x}, {length}) beat {b}: {got.hex()} != {want[b * self.w:(b + 1) * self.w].hex()}"
                assert beat["last"] == (b == nb - 1) and beat["err"] == 0, (i, b, beat)
                self.beats_read += 1

    async def write(self, ranges):
        """Write random payloads to ``ranges`` through the DMA and update the memory model."""
        for addr, length in ranges:
            self.wr_cmd.send_nowait(pack(self.cmd_layout, {"addr": addr, "length": length}))
            nb = -(-length // self.w)
            payload = self.rng.randbytes(nb * self.w)       # bytes past `length` must not be written
            for b in range(nb):
                self.wr_data.send_nowait(pack(self.wdata_layout, {
                    "data": int.from_bytes(payload[b * self.w:(b + 1) * self.w], "little"), "last": b == nb - 1}))
            self.mem[addr:addr + length] = payload[:length]
            self.beats_written += nb
        for i in range(len(ranges)):
            done = unpack(self.done_layout, await self.wr_done.recv())
            assert done["err"] == 0, f"write {i}: error response"

    def check_memory(self):
        got = self.ram.read(0, MEM_BYTES)
        bad = [i for i in range(MEM_BYTES) if got[i] != self.mem[i]]
        assert not bad, f"{len(bad)} bytes differ from the model, first at {bad[0]:#x}"


@cocotb.test(timeout_time=1, timeout_unit="ms")      # 100,000 cycles: a hang fails instead of running forever
@cocotb.parametrize((("pause", "ready_prob", "idle"), REGIMES))
async def random_reads_and_writes_on_axi_ram(dut, pause, ready_prob, idle):
    p = tb_params()
    tb = DmaTB(dut, p, pause=pause, ready_prob=ready_prob, idle=idle)
    n = int(p.get("commands", 40))
    tb.log.info("seed %d, %d commands per direction and phase, pause %.2f, ready %.2f, idle %.2f, beat %d bytes",
                tb.seed, n, pause, ready_prob, idle, tb.w)
    await tb.start()
    writes = random_ranges(tb.rng, tb.w, n, WRITE_REGION)
    reads = random_ranges(tb.rng, tb.w, n, READ_REGION)
    # Phase 1: writes and reads of disjoint regions at the same time on the shared port.
    writer = cocotb.start_soon(tb.write(writes))
    await tb.read(reads)
    await writer
    tb.check_memory()
    # Phase 2: read back what was written (and around it).
    await tb.read(random_ranges(tb.rng, tb.w, n, WRITE_REGION))
    tb.log.info("%d reads (%d beats) and %d writes (%d beats) checked in %d cycles", 2 * n, tb.beats_read, n,
                tb.beats_written, get_sim_time("ns") // CLOCK_NS)
