"""cocotb testbench of the reduction ALU (:class:`syncfabric.hdl.alu.ReductionAlu`) on Verilog simulators.

A driver streams random beats with random valid gaps, a sink drives a random ``o.ready`` (both the shared
stream models of :mod:`syncfabric.tb.stream`) and a scoreboard checks every output beat, in order, against
:func:`syncfabric.sim.golden.arith.reduce_elements`. Beats mix all dtype/op pairs in random order, with
operands biased to the hard cases (:func:`syncfabric.tb.alu.random_operands`).

Parameters come from the harness (:func:`syncfabric.host.transports.harness.tb_params`):
  ``params``            design parameters (``lanes``, ``tag_width``), as given to the factory;
  ``beats_per_combo``   random beats of each of the 12 dtype/op pairs (default 200);
  ``seed``              random seed (default: cocotb's ``RANDOM_SEED``);
  ``valid_prob``, ``ready_prob``  per-cycle probability of an input beat being offered / ``o.ready`` high;
  ``latency``           expected pipeline latency (checked by ``full_rate_and_latency``).

Signals are driven just after a rising edge and sampled in the read-only phase before the next one, which
is exactly what the design sees at that edge, on any simulator.
"""

import collections
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb.utils import get_sim_time

from ...hdl.common.layouts import alu_operands_layout, alu_result_layout, pack, unpack
from ...sim.golden.arith import reduce_elements
from ...sim.golden.types import DType, ReduceOp
from ...host.transports.harness import tb_params
from ..stream import StreamSink, StreamSource
from . import COMBOS, combo_name, elements_per_beat, random_operands

Beat = collections.namedtuple("Beat", "bits expected dtype op tag")
CLOCK_NS = 10


class AluTB:
    """Clock, reset, stimulus generator, driver, random-ready sink and in-order scoreboard for one ALU."""

    def __init__(self, dut, params):
        self.dut = dut
        design = params["params"]
        self.lanes = design.get("lanes", 16)
        self.tag_width = design.get("tag_width", 0)
        self.seed = int(params.get("seed", cocotb.RANDOM_SEED))
        self.rng = np.random.default_rng(self.seed)
        self.cycle_rng = random.Random(self.seed)
        self.in_layout = alu_operands_layout(self.lanes, self.tag_width)
        self.out_layout = alu_result_layout(self.lanes, self.tag_width)
        self.log = dut._log
        self.expected = collections.deque()
        self.checked = collections.Counter()
        self.sent = 0

    # ---- clock and reset ----------------------------------------------------------------------------------
    async def start(self):
        Clock(self.dut.clk, CLOCK_NS, unit="ns").start()
        self.dut.rst.value = 1
        self.dut.i__valid.value = 0
        self.dut.i__payload.value = 0
        self.dut.o__ready.value = 0
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    # ---- stimulus -------------------------------------------------------------------------------------------
    def beats(self, per_combo, batch=512):
        """``per_combo`` beats of every dtype/op pair in random order, with their golden results.

        Operands and golden results are made a batch at a time (one numpy call per pair and batch); the
        scoreboard still checks every output beat against them, in order.
        """
        order = self.rng.permutation(np.repeat(np.arange(len(COMBOS)), per_combo))
        for start in range(0, len(order), batch):
            chunk = order[start:start + batch]
            made = [None] * len(chunk)
            for c in np.unique(chunk):
                dtype, op = COMBOS[c]
                where = np.flatnonzero(chunk == c)
                per_beat = elements_per_beat(dtype, self.lanes)
                a, b = random_operands(self.rng, dtype, len(where) * per_beat)
                r = reduce_elements(a, b, dtype, op)
                a, b, r = (x.astype(x.dtype.newbyteorder("<")).reshape(len(where), per_beat) for x in (a, b, r))
                for row, k in enumerate(where):
                    made[k] = (a[row].tobytes(), b[row].tobytes(), r[row].tobytes(), dtype, op)
            for a, b, r, dtype, op in made:
                tag = self.sent & ((1 << self.tag_width) - 1)
                bits = pack(self.in_layout, {"a": int.from_bytes(a, "little"), "b": int.from_bytes(b, "little"),
                                             "dtype": dtype, "op": op, "tag": tag})
                self.sent += 1
                yield Beat(bits, int.from_bytes(r, "little"), dtype, op, tag)

    # ---- driver, sink, scoreboard ------------------------------------------------------------------------
    async def feed(self, beats, valid_prob):
        """Driver: stream ``beats`` through :class:`StreamSource` (random idle cycles between beats), topping
        its queue up a batch at a time so a million-beat run does not hold every beat in memory.
        """
        source = StreamSource(self.dut, "i", self.dut.clk, idle=1.0 - valid_prob, rng=self.cycle_rng)
        task = cocotb.start_soon(source.run())
        for beat in beats:
            while len(source.queue) >= 256:
                await RisingEdge(self.dut.clk)
            self.expected.append(beat)          # the ALU is in order: queue order is output order
            source.send_nowait(beat.bits)
        await source.wait_idle()
        task.cancel()
        self.dut.i__valid.value = 0

    async def scoreboard(self, ready_prob):
        """Random-ready sink (:class:`StreamSink`) feeding the in-order check of every output beat."""
        sink = StreamSink(self.dut, "o", self.dut.clk, backpressure=1.0 - ready_prob,
                          rng=random.Random(self.seed + 1))
        cocotb.start_soon(sink.run())
        while True:
            out = unpack(self.out_layout, await sink.recv())
            self.check(out["data"], out["tag"])

    def check(self, data, tag):
        """The output beat must be the golden result of the oldest input beat not yet checked."""
        assert self.expected, f"output beat (tag {tag}) with no input beat outstanding"
        beat = self.expected.popleft()
        assert tag == beat.tag, f"tag {tag}, expected {beat.tag}: beats lost, duplicated or reordered"
        if data != beat.expected:
            self.fail_beat(beat, data)
        self.checked[(beat.dtype, beat.op)] += 1
        if self.checked.total() % 100_000 == 0:
            self.log.info("%d beats checked", self.checked.total())

    def fail_beat(self, beat, data):
        dtype = DType(beat.dtype)
        width = 32 if dtype in (DType.FP32, DType.INT32) else 16
        mask = (1 << width) - 1
        operands = unpack(self.in_layout, beat.bits)
        a, b = operands["a"], operands["b"]
        lines = []
        for k in range(32 * self.lanes // width):
            got, want = (data >> (width * k)) & mask, (beat.expected >> (width * k)) & mask
            if got != want:
                lines.append(f"[{k}] {(a >> width * k) & mask:#x} {(b >> width * k) & mask:#x}: "
                             f"got {got:#x}, want {want:#x}")
        raise AssertionError(f"beat {self.checked.total()} ({combo_name(beat.dtype, beat.op)}, "
                             f"seed {self.seed}) differs from golden:\n  " + "\n  ".join(lines[:8]))

    async def drain(self, timeout_cycles):
        """Wait until every accepted beat has been checked."""
        for _ in range(timeout_cycles):
            if not self.expected:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"{len(self.expected)} beats still in flight after {timeout_cycles} cycles")


@cocotb.test()
async def random_beats_match_golden(dut):
    """Every dtype/op pair, mixed beat by beat, random valid gaps and random backpressure."""
    p = tb_params()
    tb = AluTB(dut, p)
    per_combo = int(p.get("beats_per_combo", 200))
    valid_prob, ready_prob = float(p.get("valid_prob", 0.8)), float(p.get("ready_prob", 0.8))
    tb.log.info("seed %d, %d beats per dtype/op (%d beats), lanes %d, valid %.2f, ready %.2f", tb.seed,
                per_combo, per_combo * len(COMBOS), tb.lanes, valid_prob, ready_prob)
    await tb.start()
    start = get_sim_time("ns")
    checker = cocotb.start_soon(tb.scoreboard(ready_prob))
    await tb.feed(tb.beats(per_combo), valid_prob)
    await tb.drain(1000 + int(100 / ready_prob))
    checker.cancel()
    total = tb.checked.total()
    cycles = int((get_sim_time("ns") - start) // CLOCK_NS)
    tb.log.info("checked %d beats in %d cycles (seed %d): %s", total, cycles, tb.seed,
                ", ".join(f"{combo_name(*c)} {tb.checked[c]}" for c in COMBOS))
    assert all(tb.checked[c] == per_combo for c in COMBOS), tb.checked
    assert total == tb.sent


@cocotb.test()
async def full_rate_and_latency(dut):
    """valid and ready always high: one beat per cycle, each result exactly ``latency`` cycles later."""
    p = tb_params()
    tb = AluTB(dut, p)
    latency = int(p["latency"])
    n = 64
    await tb.start()
    beats = list(tb.beats(max(1, n // len(COMBOS) + 1)))[:n]
    accepted, delivered = [], []
    dut.o__ready.value = 1
    for cycle in range(n + latency + 4):
        dut.i__valid.value = cycle < n
        if cycle < n:
            dut.i__payload.value = beats[cycle].bits
        await ReadOnly()
        if cycle < n:
            assert bool(dut.i__ready.value), f"cycle {cycle}: input stalled with o.ready high"
            accepted.append(cycle)
        if bool(dut.o__valid.value):
            delivered.append((cycle, dut.o__payload.value.to_unsigned()))
        await RisingEdge(dut.clk)
    assert [c for c, _ in delivered] == [c + latency for c in accepted], delivered[:3]
    for beat, (_, bits) in zip(beats, delivered):
        assert unpack(tb.out_layout, bits)["data"] == beat.expected, combo_name(beat.dtype, beat.op)
    tb.log.info("%d beats in %d consecutive cycles, latency %d", n, n, latency)
