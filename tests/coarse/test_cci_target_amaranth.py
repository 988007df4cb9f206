"""The CCI target in Amaranth's simulator: random host requests (DRAM reads and writes to a few addresses, so
read-after-write and write-after-read hazards are common; sync-core register writes and reads; other sync-core
regions; response opcodes sent as requests) against a sequential model, with random request gaps, random
response backpressure and an AXI RAM with random stalls and latency; and the throughput several outstanding
requests buy over one at a time, in cycles against the one-flit-per-cycle bound."""

import os
import random
import sys

import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.coarse.cci import CciTarget
from syncfabric.hdl.coarse.layouts import CciOpcode, Region, cci_pending_layout, core_addr, core_register_map, \
    pack_flit, unpack_flit
from syncfabric.host.transports.axi_model import AxiRamModel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402

BEAT = 8
#: The sync-core registers (names and CTRL addresses) the target serves.
REGS = core_register_map(BEAT)
WRITABLE = ("BASE", "STRIDE", "CHUNKS", "RANK", "RANKS", "MODE")
READ_BACK = {"START": "status", "CYCLES": "cycles", "STALLS": "stalls", "ALU_BEATS": "alu_beats"}


def read_back_value(core, name):
    """What the test drives on read-back port ``name`` of core ``core``: distinct per core and register."""
    return 1000 * core + REGS.addr(name) // BEAT


def random_requests(rng, n, n_cores=2, addrs=4):
    """``(opcode, addr, data)`` requests: mostly DRAM to ``addrs`` beats, some register and odd ones."""
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.75:
            op = rng.choice([CciOpcode.MEM_RD, CciOpcode.MEM_WR])
            out.append((op, 0x100 + BEAT * rng.randrange(addrs), rng.getrandbits(8 * BEAT)))
        elif kind < 0.9:
            reg = rng.choice(WRITABLE + tuple(READ_BACK))
            op = rng.choice([CciOpcode.MEM_RD, CciOpcode.MEM_WR])
            out.append((op, core_addr(rng.randrange(n_cores), Region.CTRL, REGS.addr(reg)), rng.getrandbits(40)))
        elif kind < 0.95:
            out.append((rng.choice(list(CciOpcode)), core_addr(0, Region.SEND, BEAT * rng.randrange(4)), 5))
        else:                       # a response opcode in DRAM space: dropped, no answer
            out.append((rng.choice([CciOpcode.MEM_DATA, CciOpcode.CMP]), 0x100, 0))
    return out


def model(reqs, n_cores=2):
    """Responses ``(opcode, tag, data)`` in order and the final register values, executing requests one by one."""
    mem, regs, starts, rsps = {}, {(k, r): 0 for k in range(n_cores) for r in WRITABLE}, [0] * n_cores, []
    for tag, (op, addr, data) in enumerate(reqs):
        tag &= 0xFF
        rsp_op = CciOpcode.MEM_DATA if op == CciOpcode.MEM_RD else CciOpcode.CMP
        if addr >> 31:
            core, region, hit = (addr >> 24) & 0x7F, (addr >> 20) & 0xF, REGS.at(addr & 0xFFFFF)
            reg = hit[0].name if hit else None
            value = 0
            if region == Region.CTRL and core < n_cores:
                if op == CciOpcode.MEM_WR:
                    if reg in WRITABLE:
                        regs[(core, reg)] = data & 0xFFFFFFFF
                    if reg == "START":
                        starts[core] += 1
                elif reg in WRITABLE:
                    value = regs[(core, reg)]
                elif reg in READ_BACK:
                    value = read_back_value(core, reg)
            rsps.append((rsp_op, tag, value))
        elif op == CciOpcode.MEM_WR:
            mem[addr] = data
            rsps.append((rsp_op, tag, 0))
        elif op == CciOpcode.MEM_RD:
            rsps.append((rsp_op, tag, mem.get(addr, 0)))
    return rsps, regs, starts


def run_target(reqs, *, depth, seed, idle=0.0, backpressure=0.0, ram_kw=None, n_cores=2):
    """Drive ``reqs`` into a :class:`CciTarget`; returns ``(responses, target, ram, cycles from the first
    request to the last response, start pulses per core)``."""
    dut = CciTarget(BEAT, n_cores, depth)
    ram = AxiRamModel(dut.axi, size=4096, seed=seed, max_burst=1, **(ram_kw or {}))
    rng_in, rng_out = random.Random(seed + 1), random.Random(seed + 2)
    rsps, span, starts = [], {}, [0] * n_cores
    want = len(model(reqs, n_cores)[0])

    async def producer(ctx):
        for k in range(n_cores):
            for reg, name in READ_BACK.items():
                ctx.set(getattr(dut, f"c{k}_{name}"), read_back_value(k, reg))
        for tag, (op, addr, data) in enumerate(reqs):
            while rng_in.random() < idle:
                ctx.set(dut.i_req.valid, 0)
                await ctx.tick()
            ctx.set(dut.i_req.valid, 1)
            ctx.set(dut.i_req.payload.as_value(), pack_flit(BEAT, op, tag & 0xFF, addr, data))
            await ctx.tick().until(dut.i_req.ready)
        ctx.set(dut.i_req.valid, 0)

    async def consumer(ctx):
        held, cycles = None, 0
        while len(rsps) < want:
            assert cycles < 200 * (len(reqs) + 10), f"only {len(rsps)} of {want} responses after {cycles} cycles"
            ctx.set(dut.o_rsp.ready, rng_out.random() >= backpressure)
            _, _, valid, ready, bits, req_fire, *pulses = await ctx.tick().sample(
                dut.o_rsp.valid, dut.o_rsp.ready, dut.o_rsp.payload.as_value(),
                dut.i_req.valid & dut.i_req.ready, *[getattr(dut, f"c{k}_start") for k in range(n_cores)])
            cycles += 1
            if req_fire and "first" not in span:
                span["first"] = cycles
            for k, p in enumerate(pulses):
                starts[k] += p
            if held is not None:
                assert valid and bits == held, "a response waiting for ready changed or vanished"
            held = None
            if valid and ready:
                f = unpack_flit(BEAT, bits)
                rsps.append((CciOpcode(f["opcode"]), f["tag"], f["data"]))
                span["last"] = cycles
            elif valid:
                held = bits

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    ram.add_to(sim)
    sim.add_testbench(producer)
    sim.add_testbench(consumer, background=False)
    sim.run()
    return rsps, dut, ram, span["last"] - span["first"] + 1, starts


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_random_requests_match_the_sequential_model_under_random_stalls_and_backpressure(depth):
    seed = seed_for(40 + depth)
    reqs = random_requests(random.Random(seed), 300)
    want, regs, starts = model(reqs)
    got, dut, ram, _, pulses = run_target(reqs, depth=depth, seed=seed, idle=0.3, backpressure=0.4,
                                          ram_kw={"latency": 3, "jitter": 4, "ready_prob": 0.6, "valid_prob": 0.7})
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"response {k}: got {g}, model {w} (seed {seed})"
    assert len(got) == len(want)
    assert pulses == starts
    assert ram.max_reads_in_flight <= depth and ram.max_writes_in_flight <= depth


def test_independent_requests_keep_several_in_flight():
    """Reads only (no hazard): with 8 entries several reads are on AXI at once."""
    seed = seed_for(50)
    reqs = [(CciOpcode.MEM_RD, 0x100 + BEAT * (k % 64), 0) for k in range(64)]
    _, _, ram, _, _ = run_target(reqs, depth=8, seed=seed, ram_kw={"latency": 4})
    assert ram.max_reads_in_flight >= 4


@pytest.mark.parametrize("op", [CciOpcode.MEM_WR, CciOpcode.MEM_RD])
def test_outstanding_requests_approach_one_flit_per_cycle_and_one_at_a_time_does_not(op):
    """256 requests against a RAM of 4 cycles latency with no stalls: cycles from the first request accepted to
    the last response, divided by the bound (one request flit in and one response flit out per cycle). The
    figures are exact simulated cycles (deterministic), the bounds leave room for small timing changes."""
    reqs = [(op, BEAT * (k % 256), k) for k in range(256)]
    ratio = {}
    for depth in (1, 8):
        got, _, _, cycles, _ = run_target(reqs, depth=depth, seed=1, ram_kw={"latency": 4})
        assert len(got) == len(reqs)
        ratio[depth] = cycles / len(reqs)
    print(f"{op.name}: cycles per request, depth 1: {ratio[1]:.3f}, depth 8: {ratio[8]:.3f}")
    assert ratio[8] < 1.25          # 8 entries cover a write's ~9-cycle life in the target at latency 4
    assert ratio[1] > 5


def test_pending_layout_has_the_opcode_tag_addr_of_a_flit():
    lay = cci_pending_layout()
    assert {name for name, _ in lay} == {"opcode", "tag", "addr", "dram", "value"}


def test_a_target_without_a_response_queue_is_refused():
    with pytest.raises(ValueError, match="at least 1 entry"):
        CciTarget(BEAT, 1, depth=0)
