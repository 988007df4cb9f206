"""cocotb tests of :class:`~syncfabric.hdl.common.axiram.AxiRam` (top level) through its back door.

Data is loaded through :class:`~syncfabric.host.transports.backdoor.MemoryBackdoor`, moved by AXI traffic from
cocotbext-axi's ``AxiMaster`` (which checks the RAM's side of the protocol: IDs, RLAST, response counts) and
read back through the back door, compared with a byte model of the memory. A timing test loads and dumps the
whole memory and writes the wall times to ``backdoor_timing.json`` in the run directory.

Parameters (:func:`syncfabric.host.transports.harness.tb_params`): ``params`` (the factory's: ``size_bytes`` and
``AxiRam`` options), ``seed``, ``transfers``.
"""

import json
import os
import random
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiMaster

from ...host.transports.backdoor import BULK_MIN_WORDS, MemoryBackdoor
from ...host.transports.harness import tb_params

CLOCK_NS = 10


async def _start(dut):
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    dut.host__we.value = 0
    dut.host__re.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def _setup():
    params = tb_params()
    seed = int(params.get("seed", cocotb.RANDOM_SEED))
    dut_params = params.get("params", {})
    return params, random.Random(seed), seed, dut_params


def _array(dut):
    """The RAM's words: the Amaranth memory ``mem``, or the ``mem`` of its RamArray instance ``array``
    (``storage="verilog"``)."""
    params = _setup()[0]
    return dut.array.mem if params.get("params", {}).get("storage") == "verilog" else dut.mem


@cocotb.test()
async def test_bulk_backdoor_moves_buffers_through_files_without_a_handle_per_word(dut):
    """RamArray storage: load() and dump() at any alignment give the bytes write() and read() give, in two
    time steps each and no clock edge, and reach only the partial words at a buffer's ends word by word
    (cocotb keeps every word's handle for the rest of the run: this test runs first, before any word has
    one)."""
    params, rng, seed, dut_params = _setup()
    if dut_params.get("storage") != "verilog":
        return
    mem = MemoryBackdoor(dut.array.mem, bulk=dut.array)
    size = mem.size
    model = bytearray(rng.randbytes(size))
    handles = len(mem.handle._sub_handles)          # word 0's, which told the width
    await mem.load(0, model)
    assert await mem.dump(0, size) == bytes(model)
    assert len(mem.handle._sub_handles) == handles
    t0 = get_sim_time("step")
    for _ in range(30):
        addr = rng.randrange(0, size // 2)
        data = rng.randbytes(rng.randint(0, 3000))
        await mem.load(addr, data)
        model[addr:addr + len(data)] = data
        a = rng.randrange(0, size // 2)
        n = rng.randint(0, 3000)
        assert await mem.dump(a, n) == bytes(model[a:a + n]), f"dump {a:#x}+{n}"
    assert get_sim_time("step") - t0 <= 30 * 4          # no clock edge: two time steps per load or dump
    assert len(mem.handle._sub_handles) <= 30 * 2 * (BULK_MIN_WORDS + 2)
    assert mem.read(0, size) == bytes(model)


@cocotb.test()
async def test_backdoor_unaligned_writes_read_back_without_clock(dut):
    """Back-door writes at any alignment (read-modify-write of partial words) match a byte model, before
    any clock edge."""
    params, rng, seed, _ = _setup()
    dut._log.info(f"seed {seed}")
    mem = MemoryBackdoor(_array(dut))
    model = bytearray(mem.read(0, 4096))
    for _ in range(200):
        addr = rng.randrange(0, 4000)
        data = rng.randbytes(rng.randint(0, 90))
        mem.write(addr, data)
        model[addr:addr + len(data)] = data
        a = rng.randrange(0, 4000)
        n = rng.randint(0, 96)
        assert mem.read(a, n) == bytes(model[a:a + n]), f"read {a:#x}+{n}"
    assert mem.read(0, 4096) == bytes(model)


@cocotb.test()
async def test_backdoor_loaded_data_moved_by_axi_master_reads_back(dut):
    """Load a source region through the back door; AxiMaster reads every range (compared with the load) and
    writes it elsewhere at another alignment; the back door then finds exactly the model's bytes."""
    params, rng, seed, dut_params = _setup()
    dut._log.info(f"seed {seed}")
    size = int(dut_params.get("size_bytes", 1 << 16))
    errors = [tuple(r) for r in dut_params.get("error_ranges", [])]
    await _start(dut)
    mem = MemoryBackdoor(_array(dut))
    half = size // 2
    model = bytearray(rng.randbytes(size))
    mem.write(0, model)
    master = AxiMaster(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst)
    for _ in range(int(params.get("transfers", 40))):
        n = rng.randint(1, 700)
        src = rng.randrange(0, half - n)
        dst = rng.randrange(half, size - n)
        hit_src = any(src < e and s < src + n for s, e in errors)
        hit_dst = any(dst < e and s < dst + n for s, e in errors)
        if hit_src or hit_dst:
            continue
        got = await master.read(src, n)
        assert got.data == bytes(model[src:src + n]), f"AXI read {src:#x}+{n}"
        await master.write(dst, got.data)
        model[dst:dst + n] = got.data
    await ClockCycles(dut.clk, 2)
    assert mem.read(0, size) == bytes(model), "memory differs from the model after the AXI transfers"


@cocotb.test()
async def test_backdoor_load_and_dump_whole_memory_timed(dut):
    """Load the whole memory and dump it through the back door (no clock); the bytes survive and the wall
    times go to backdoor_timing.json."""
    params, rng, seed, dut_params = _setup()
    mem = MemoryBackdoor(_array(dut))
    data = rng.randbytes(mem.size)
    t0 = time.perf_counter()
    mem.write(0, data)
    t1 = time.perf_counter()
    back = mem.read(0, mem.size)
    t2 = time.perf_counter()
    assert back == data
    timing = {"bytes": mem.size, "words": mem.depth, "load_s": t1 - t0, "dump_s": t2 - t1,
              "simulator": cocotb.SIM_NAME}
    dut._log.info(f"back door: {timing}")
    with open(os.path.join(os.getcwd(), "backdoor_timing.json"), "w") as f:
        json.dump(timing, f)
