"""cocotb job: a collective whose every reduction runs on the reduction ALU RTL.

The golden executor runs the algorithm programs in a bridge thread; each RECV-reduce hands its two message
buffers to :class:`AluReducer`, which streams them through the ALU beat by beat and returns the result. The
outputs are compared byte for byte with a pure golden run, and a result file is written for the caller
(:func:`syncfabric.host.run.run_collective`).
"""

import json
import random
import sys
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_time

from ..hdl.common.layouts import alu_operands_layout, alu_result_layout, pack, unpack
from ..host.run import make_inputs, run_golden
from ..sim.golden.types import DType, ReduceOp
from .harness import tb_params
from .stream import StreamSink, StreamSource

__all__ = ["AluReducer"]

CLOCK_NS = 10


class AluReducer:
    """Reduces byte buffers on the ALU: splits them into beats (zero-padding the tail), streams them in and
    collects as many result beats. Counts beats for the summary."""

    def __init__(self, dut, lanes, *, idle=0.0, backpressure=0.0, seed=0):
        self.lanes = lanes
        self.beat_bytes = 4 * lanes
        self.in_layout = alu_operands_layout(lanes, 0)
        self.out_layout = alu_result_layout(lanes, 0)
        rng = random.Random(seed)
        self.source = StreamSource(dut, "i", dut.clk, idle=idle, rng=rng)
        self.sink = StreamSink(dut, "o", dut.clk, backpressure=backpressure, rng=rng)
        self.beats = 0
        self.calls = 0

    def start(self):
        cocotb.start_soon(self.source.run())
        cocotb.start_soon(self.sink.run())

    async def reduce(self, incoming, local, dtype, op):
        n = incoming.size
        padded = -(-n // self.beat_bytes) * self.beat_bytes
        a = np.zeros(padded, np.uint8)
        b = np.zeros(padded, np.uint8)
        a[:n], b[:n] = incoming, local
        beats = padded // self.beat_bytes
        for k in range(beats):
            sl = slice(k * self.beat_bytes, (k + 1) * self.beat_bytes)
            self.source.send_nowait(pack(self.in_layout, {
                "a": int.from_bytes(a[sl].tobytes(), "little"), "b": int.from_bytes(b[sl].tobytes(), "little"),
                "dtype": DType(dtype), "op": ReduceOp(op)}))
        out = bytearray()
        for _ in range(beats):
            out += unpack(self.out_layout, await self.sink.recv())["data"].to_bytes(self.beat_bytes, "little")
        self.beats += beats
        self.calls += 1
        return np.frombuffer(bytes(out[:n]), np.uint8).copy()


@cocotb.test()
async def collective_through_alu(dut):
    p = tb_params()
    spec = p["spec"]
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    alu = AluReducer(dut, spec["lanes"], idle=p.get("idle", 0.0), backpressure=p.get("backpressure", 0.0),
                     seed=spec["seed"])
    alu.start()
    inputs = make_inputs(spec)
    blocking_reduce = resume(alu.reduce)
    progress = p.get("progress", False)
    t0 = time.monotonic()
    last = [t0]

    def reducer(incoming, local, dtype, op):
        out = blocking_reduce(incoming, local, dtype, op)
        now = time.monotonic()
        if progress and now - last[0] > 2.0:
            last[0] = now
            print(f"  ... {alu.calls} reductions, {alu.beats} ALU beats, {now - t0:.0f} s", file=sys.stderr)
        return out

    start_ns = get_sim_time("ns")
    rtl = await bridge(run_golden)(spec, inputs, reducer)
    cycles = int((get_sim_time("ns") - start_ns) // CLOCK_NS)
    wall = time.monotonic() - t0
    golden = run_golden(spec, inputs)
    mismatches = sum(int(np.count_nonzero(x != y)) for x, y in zip(rtl.outputs, golden.outputs))
    result = {
        "mismatches": mismatches,
        "alu_beats": alu.beats,
        "alu_reductions": alu.calls,
        "sim_cycles": cycles,
        "sim_cycles_per_s": cycles / wall if wall > 0 else 0.0,
        "mem_read_bytes": list(rtl.mem_read_bytes),
        "mem_write_bytes": list(rtl.mem_write_bytes),
        "bytes_sent": list(rtl.bytes_sent),
        "bytes_sent_per_byte_read": rtl.bytes_sent_per_byte_read,
        "link_bytes": {f"{r}:{port}": b for (r, port), b in sorted(rtl.link_bytes.items())},
        "messages": rtl.n_messages,
        "packets": rtl.n_packets,
        "chunks": rtl.n_chunks,
    }
    with open(p["out"], "w") as f:
        json.dump(result, f)
    dut._log.info("%d reductions, %d ALU beats, %d mismatching bytes", alu.calls, alu.beats, mismatches)
    assert mismatches == 0, f"{mismatches} bytes differ between the ALU RTL run and the golden model"
