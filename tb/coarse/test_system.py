"""cocotb testbench of the COARSE system top: emulated GPUs push gradients into their memory devices over CCI,
program the sync cores through CCI register writes, poll them, pull the result and compare every byte (and
every device's DRAM) with the golden sync-core order; push/pull of tensors of many sizes; random link
latencies, random link stalls and random GPU-side backpressure.

Parameters (``tb_params``): ``params`` (the system's), ``seed``, ``runs`` (a list of ``[dtype, op]``),
``chunks`` (per group and run), ``max_latency`` (link latencies drawn from 1..this), ``stall`` (probability a
link stalls in a cycle), ``backpressure`` (GPU response side), ``tensors`` (push/pull sizes in bytes),
``ring_rate`` ([num, den] of the ring links), ``fixed_latency`` (every link's latency, instead of random ones),
``report`` (a JSON file for the measured cycles, link flits and core counters).
"""

import json
import logging
import random
import warnings

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiRam

from ...hdl.coarse.layouts import (CciOpcode, Region, core_addr, core_mode, core_register_map, pack_flit,
                                   unpack_flit)
from ...hdl.coarse.system import link_names
from ...sim.golden.arith import to_bytes
from ...sim.golden.coarse import coarse_allreduce, ring_positions
from ...sim.golden.types import DType, ReduceOp
from ..alu import random_operands
from ...host.transports.harness import tb_params
from ..stream import StreamSink, StreamSource

CLOCK_NS = 10
DATA_BASE = 0x1000


class CciMaster:
    """An emulated GPU's CCI port: MEM_WR / MEM_RD requests with tags, responses matched by tag. ``port``: the
    path to its memory device (``""``: ports ``gpu{d}_req``/``gpu{d}_rsp``) or to the summation service
    (``"s"``: ``gpu{d}_sreq``/``gpu{d}_srsp``)."""

    def __init__(self, dut, d, rng, backpressure, beat_bytes, window=8, port=""):
        self.src = StreamSource(dut, f"gpu{d}_{port}req", dut.clk, rng=rng)
        self.sink = StreamSink(dut, f"gpu{d}_{port}rsp", dut.clk, backpressure=backpressure, rng=rng)
        self.bb, self.window, self.d = beat_bytes, window, d
        cocotb.start_soon(self.src.run())
        cocotb.start_soon(self.sink.run())

    async def transact(self, reqs):
        """``reqs``: ``(opcode, addr, data)``; returns the response data in request order."""
        results = [None] * len(reqs)
        inflight, issued, done = {}, 0, 0
        while done < len(reqs):
            while issued < len(reqs) and len(inflight) < self.window:
                opcode, addr, data = reqs[issued]
                tag = issued & 0xFF
                assert tag not in inflight
                inflight[tag] = issued
                self.src.send_nowait(pack_flit(self.bb, opcode, tag, addr, data))
                issued += 1
            f = unpack_flit(self.bb, await self.sink.recv())
            assert f["tag"] in inflight, f"GPU {self.d}: response with unknown tag {f['tag']}"
            k = inflight.pop(f["tag"])
            want = CciOpcode.MEM_DATA if reqs[k][0] == CciOpcode.MEM_RD else CciOpcode.CMP
            assert f["opcode"] == want, f"GPU {self.d}: response {f['opcode']} to request {reqs[k][0]}"
            results[k] = f["data"]
            done += 1
        return results

    async def write(self, addr, raw):
        """Push ``raw`` (a whole number of beats) to device memory at ``addr``."""
        raw = bytes(raw)
        assert len(raw) % self.bb == 0
        await self.transact([(CciOpcode.MEM_WR, addr + o, int.from_bytes(raw[o:o + self.bb], "little"))
                             for o in range(0, len(raw), self.bb)])

    async def read(self, addr, nbytes):
        """Pull ``nbytes`` (a whole number of beats) from device memory at ``addr``."""
        data = await self.transact([(CciOpcode.MEM_RD, addr + o, 0) for o in range(0, nbytes, self.bb)])
        return b"".join(v.to_bytes(self.bb, "little") for v in data)

    async def reg_write(self, core, reg, value):
        """Write sync-core register ``reg`` (its name in :func:`core_register_map`) of core ``core``."""
        addr = core_addr(core, Region.CTRL, core_register_map(self.bb).addr(reg))
        await self.transact([(CciOpcode.MEM_WR, addr, value)])

    async def reg_read(self, core, reg):
        """Read sync-core register ``reg`` (its name in :func:`core_register_map`) of core ``core``."""
        addr = core_addr(core, Region.CTRL, core_register_map(self.bb).addr(reg))
        return (await self.transact([(CciOpcode.MEM_RD, addr, 0)]))[0]


class SystemTB:
    """Clock, reset, a cocotbext-axi ``AxiRam`` per device, an emulated GPU per device (and its port to the
    summation service, ``sum_gpus``, if the system has one), random link stalls."""

    def __init__(self, dut):
        self.dut = dut
        self.p = tb_params()
        self.sp = self.p["params"]
        self.n, self.G = self.sp["n_devices"], self.sp.get("n_groups", 1)
        self.bb, self.eb = self.sp.get("beat_bytes", 16), self.sp.get("entry_beats", 16)
        self.seed = int(self.p.get("seed", 1))
        self.rng = random.Random(self.seed)
        self.log = dut._log
        self.log.info("seed %d", self.seed)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
        self.mem_bytes = int(self.p.get("mem_bytes", 1 << 16))
        self.rams = []
        for d in range(self.n):
            ram = AxiRam(AxiBus.from_prefix(dut, f"d{d}_axi_"), dut.clk, dut.rst, size=self.mem_bytes)
            for log in (ram.write_if.log, ram.read_if.log, ram.write_if.aw_channel.log, ram.write_if.w_channel.log,
                        ram.write_if.b_channel.log, ram.read_if.ar_channel.log, ram.read_if.r_channel.log):
                log.setLevel(logging.WARNING)
            self.rams.append(ram)
        bp = float(self.p.get("backpressure", 0.0))
        self.gpus = [CciMaster(dut, d, random.Random(self.seed * 31 + d), bp, self.bb) for d in range(self.n)]
        self.summation = bool(self.sp.get("sum_parts", 0))
        self.sum_gpus = [CciMaster(dut, d, random.Random(self.seed * 37 + d), bp, self.bb, port="s")
                         for d in range(self.n)] if self.summation else []

    async def start(self):
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        max_lat = int(self.p.get("max_latency", 4))
        num, den = self.p.get("ring_rate", [1, 1])
        self.latencies = {}
        for name in link_names(self.n, self.summation):
            lat = int(self.p["fixed_latency"]) if "fixed_latency" in self.p else self.rng.randint(1, max_lat)
            self.latencies[name] = lat
            getattr(self.dut, f"{name}_latency").value = lat
            getattr(self.dut, f"{name}_stall").value = 0
            ring = name.startswith("r")
            getattr(self.dut, f"{name}_rate_num").value = num if ring else 1
            getattr(self.dut, f"{name}_rate_den").value = den if ring else 1
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        stall = float(self.p.get("stall", 0.0))
        if stall > 0:
            cocotb.start_soon(self._stall(stall))

    async def _stall(self, prob):
        pins = [getattr(self.dut, f"{name}_stall") for name in link_names(self.n, self.summation)]
        rng = random.Random(self.seed + 99)
        while True:
            await RisingEdge(self.dut.clk)
            for pin in pins:
                pin.value = int(rng.random() < prob)

    def cycles(self):
        return get_sim_time("ns") // CLOCK_NS

    async def sync(self, dtype, op, chunks_per_group, base):
        """One synchronization of ``chunks_per_group * G`` chunks at ``base``; returns the sync cycles."""
        chunk = self.n * self.eb * self.bb
        nbytes = chunks_per_group * self.G * chunk
        rng = np.random.default_rng(self.seed * 7 + int(dtype) * 3 + int(op))
        elems = nbytes // (4 if dtype in (DType.FP32, DType.INT32) else 2)
        bufs = [to_bytes(random_operands(rng, dtype, elems)[0]) for _ in range(self.n)]
        await _all(g.write(base, bufs[d].tobytes()) for d, g in enumerate(self.gpus))
        for d, gpu in enumerate(self.gpus):
            for g in range(self.G):
                for reg, value in (("BASE", base + g * chunk), ("STRIDE", self.G * chunk),
                                   ("CHUNKS", chunks_per_group),
                                   ("RANK", ring_positions(self.n, g)[d]), ("RANKS", self.n),
                                   ("MODE", core_mode(dtype, op))):
                    await gpu.reg_write(g, reg, value)
        flits0 = self._flits()
        t0 = self.cycles()
        start = core_register_map(self.bb).register("START")     # a read returns the status (its fields)
        await _all(gpu.reg_write(g, "START", 1) for gpu in self.gpus for g in range(self.G))
        for _ in range(100_000):
            await ClockCycles(self.dut.clk, 16)
            status = [await gpu.reg_read(g, "START") for gpu in self.gpus for g in range(self.G)]
            if all(start.field("DONE").extract(s) for s in status):
                break
        else:
            raise AssertionError("sync cores did not finish")
        assert not any(start.field("ERROR").extract(s) for s in status), f"a sync core reported an error: {status}"
        cycles = self.cycles() - t0
        flits = {k: v - flits0[k] for k, v in self._flits().items()}
        cores = []
        for gpu in self.gpus:
            for g in range(self.G):
                cores.append({"device": gpu.d, "group": g,
                              **{name: await gpu.reg_read(g, reg) for name, reg in (
                                  ("cycles", "CYCLES"), ("stalls", "STALLS"),
                                  ("alu_beats", "ALU_BEATS"))}})
        core_cycles = [c["cycles"] for c in cores]
        want = coarse_allreduce(bufs, dtype, op, self.eb * self.bb, self.G).tobytes()
        pulled = await _all(g.read(base, nbytes) for g in self.gpus)
        for d in range(self.n):
            backdoor = self.rams[d].read(base, nbytes)
            for what, got in (("pulled", pulled[d]), ("DRAM", backdoor)):
                if got != want:
                    bad = next(i for i in range(nbytes) if got[i] != want[i])
                    raise AssertionError(f"{DType(dtype).name} {ReduceOp(op).name}: device {d} {what} differs "
                                         f"first at byte {bad} (seed {self.seed})")
        self.log.info("%s %s: %d bytes per device on %d devices x %d groups: %d cycles (cores busy %d max)",
                      DType(dtype).name, ReduceOp(op).name, nbytes, self.n, self.G, cycles, max(core_cycles))
        return {"dtype": DType(dtype).name, "op": ReduceOp(op).name, "bytes": nbytes, "cycles": cycles,
                "core_cycles": max(core_cycles), "cores": cores, "links": flits}

    def _flits(self):
        return {name: int(getattr(self.dut, f"{name}_flits").value) for name in link_names(self.n, self.summation)}


async def _all(coros):
    tasks = [cocotb.start_soon(c) for c in coros]
    return [await t for t in tasks]


@cocotb.test()
async def sync_matches_golden(dut):
    """Every run of ``runs``: push, sync on every core of every group, pull; bit-exact against the golden model."""
    tb = SystemTB(dut)
    await tb.start()
    report = []
    chunks = int(tb.p.get("chunks", 2))
    for dtype, op in tb.p.get("runs", [["fp32", "sum"]]):
        report.append(await tb.sync(DType.parse(dtype), ReduceOp.parse(op), chunks, DATA_BASE))
    if tb.p.get("report"):
        with open(tb.p["report"], "w") as f:
            json.dump({"runs": report, "latencies": tb.latencies, "links": report[-1]["links"] if report else {},
                       "cores": report[-1]["cores"] if report else []}, f)


@cocotb.test()
async def push_pull_sizes(dut):
    """Tensors from 4 bytes to many beats pushed to and pulled from every device (beats padded with zeros)."""
    tb = SystemTB(dut)
    sizes = tb.p.get("tensors", [])
    if not sizes:
        return
    await tb.start()
    rng = random.Random(tb.seed + 5)
    addr = DATA_BASE
    placed = []
    for n in sizes:
        padded = -(-n // tb.bb) * tb.bb
        data = [rng.randbytes(n) + bytes(padded - n) for _ in range(tb.n)]
        placed.append((addr, n, data))
        await _all(g.write(addr, data[d]) for d, g in enumerate(tb.gpus))
        addr += padded
    for a, n, data in placed:
        got = await _all(g.read(a, -(-n // tb.bb) * tb.bb) for g in tb.gpus)
        for d in range(tb.n):
            assert got[d][:n] == data[d][:n], f"tensor of {n} bytes at {a:#x} on device {d} (seed {tb.seed})"
    tb.log.info("pushed and pulled %d tensors (%s bytes) on %d devices", len(sizes), sizes, tb.n)
