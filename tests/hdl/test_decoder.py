"""StepDecoder in Amaranth's simulator: the steps of golden programs (and malformed words) decoded one per
cycle for random FSMs, commands, chunks and buffers, each compared with the word's fields, the golden block
geometry, the LOAD-outstanding mask and the illegal-step rules; latency exactly StepDecoder.latency_for(cfg), with the small engine's geometry (four stages) and
the wide engine's (five).

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib.memory import Memory

from syncfabric.hdl.ace.cmdtable import cmd_entry_layout
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.decoder import StepDecoder
from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.chunking import block_buffer_ranges
from syncfabric.sim.golden.program import Step, StepOp

from sim_helpers import run_sim, seed_for
from test_geometry import ceil_div, expected_geometry, golden_decomposition

#: the small engine, and the same with the wide engine's control stages (its block geometry over five stages)
CONFIGS = {"small": AceConfig.small(), "wide": AceConfig.small(wide_control=1)}


class DecoderBench(Elaboratable):
    """The decoder with its instruction memory, routing table, a command table of registers and per-buffer
    LOAD masks, wired as the control unit wires them."""

    def __init__(self, cfg, words, routes):
        self.dec = StepDecoder(cfg)
        self.words, self.routes = words, routes
        self.entries = [Signal(cmd_entry_layout(cfg), name=f"cmd{i}") for i in range(cfg.n_cmds)]
        self.loading = [Signal(self.dec.nmask, name=f"buf{b}_loading") for b in range(cfg.n_buffers)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dec = dec = self.dec
        m.submodules.imem = imem = Memory(shape=64, depth=len(self.words), init=self.words)
        m.submodules.route = route = Memory(shape=4, depth=len(self.routes), init=self.routes)
        ip, rp = imem.read_port(), route.read_port()
        m.d.comb += [ip.addr.eq(dec.imem_addr), dec.imem_data.eq(ip.data),
                     rp.addr.eq(dec.route_addr), dec.route_data.eq(rp.data)]
        with m.Switch(dec.e1_cmd):
            for i, e in enumerate(self.entries):
                with m.Case(i):
                    m.d.comb += dec.e1.eq(e)
        sbits = max(1, (dec.nmask - 1).bit_length())
        with m.Switch(dec.probe.buf):          # the masks are constant: the next cycle's are this cycle's
            for b, mask in enumerate(self.loading):
                with m.Case(b):
                    m.d.comb += dec.probe_next.eq(mask.bit_select(dec.probe.slot[:sbits], 1))
        return m


def _commands(CFG, rng):
    """Two all-reduce commands of 4 blocks (ring:4) with different sizes, bases and communicators (no rank of
    communicator 0 has a route: its messages are illegal)."""
    out = []
    for comm, count in ((1, rng.randint(300, 3000)), (0, rng.randint(1, 10))):     # the second leaves blocks empty
        d = golden_decomposition(CFG, count, 4, 4, 1, CFG.chunk_beats)
        out.append({"comm": comm, "count": count, "d": d, "src": rng.getrandbits(CFG.addr_width) & ~3,
                    "dst": rng.getrandbits(CFG.addr_width) & ~3})
    return out


def _words():
    """Every step of ring:4's all-reduce programs, then malformed words: an unknown op, a port and a forward
    port beyond the engine's, a slot beyond the program's, and a PUT."""
    words = sorted({s.encode() for p in generate("allreduce", None, "ring:4") for ph in p.phases for s in ph.steps})
    bad = [(Step(StepOp.LOAD, 0, 0).encode() & ~7) | 6,                # op 6
           Step(StepOp.SEND, 1, 1, 3, 1, 0).encode(),                     # port 3 of 2
           Step(StepOp.RECV, 1, 1, 0, 1, 0, False, 2, 0).encode(),        # fwd_port 2 of 2
           Step(StepOp.STORE, 5, 1).encode(),                             # slot 5 of 4
           Step(StepOp.PUT, 2, 2, 1, 3, 1).encode()]
    return words + bad


def _expect(CFG, word, cmd, chunk, loading, routes):
    op = word & 0x7
    c = cmd["d"].chunk(chunk)
    block = (word >> 21) & 0x3FF
    slot = (word >> 11) & 0x3FF
    port, fwd_port, fwd = (word >> 5) & 7, (word >> 8) & 7, (word >> 4) & 1
    peer = (word >> 31) & 0x1FF
    emits = op in (StepOp.SEND, StepOp.PUT) or (op == StepOp.RECV and fwd)
    route_ok = routes[cmd["comm"] * CFG.max_ranks + peer] & 8
    illegal = (op not in (StepOp.LOAD, StepOp.SEND, StepOp.RECV, StepOp.STORE, StepOp.PUT) or port >= CFG.n_ports
               or fwd_port >= CFG.n_ports or slot >= 4 or (emits and not route_ok))
    nbytes = c.blocks[block].nbytes if block < 4 else None
    exp = {"illegal": int(illegal), "slot": slot, "port": port, "fwd_port": fwd_port, "fwd": fwd,
           "reduce": (word >> 3) & 1, "peer": peer, "key": (word >> 40) & 0xFFF, "fwd_key": (word >> 52) & 0xFFF,
           "put": int(op == StepOp.PUT), "op": StepOp.SEND if op == StepOp.PUT else op,
           "sram_addr": slot * expected_geometry(CFG, cmd["d"])["slot_beats"]}
    if nbytes is not None:
        send, recv = block_buffer_ranges("allreduce", 0, 4, cmd["d"], c, block)
        amask = (1 << CFG.addr_width) - 1
        noop = illegal or (op in (StepOp.LOAD, StepOp.STORE) and nbytes == 0)
        exp.update({
            "nbytes": nbytes, "beats": ceil_div(nbytes, CFG.beat_bytes),
            "addr": ((cmd["dst"] + recv[0] * 4) if op == StepOp.STORE else (cmd["src"] + send[0] * 4)) & amask,
            "noop": int(noop),
            "wait": int(not noop and op != StepOp.LOAD and bool(loading >> (slot & 0xF) & 1)),
        })
    return exp


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_decoder_decodes_one_step_per_cycle_against_fields_and_golden_geometry(cfg_name):
    CFG = CONFIGS[cfg_name]
    LATENCY = StepDecoder.latency_for(CFG)        # 1 + the block geometry pipeline's
    rng = random.Random(seed_for(77))
    words = _words()
    routes = [0] * (CFG.n_comms * CFG.max_ranks)
    for r in range(4):              # communicator 1 has ranks 0..3 (port 0); communicator 0 has none
        routes[1 * CFG.max_ranks + r] = 8
    cmds = _commands(CFG, rng)
    dut = DecoderBench(CFG, words, routes)
    dec = dut.dec
    nb = CFG.n_buffers
    reqs = []
    for _ in range(400):
        i = rng.randrange(len(cmds))
        reqs.append({"fsm": rng.randrange(CFG.n_fsms), "cmd": i, "chunk": rng.randrange(cmds[i]["d"].n_chunks),
                     "buf": rng.randrange(nb), "pc": rng.randrange(len(words)), "valid": rng.random() < 0.8})
    masks = [rng.getrandbits(16) for _ in range(nb)]
    seen = []

    async def bench(ctx):
        for i, c in enumerate(cmds):
            e = dut.entries[i]
            for name, v in expected_geometry(CFG, c["d"]).items():
                ctx.set(e.geom[name], v)
            ctx.set(e.count, c["count"])
            ctx.set(e.elem_shift, 2)
            ctx.set(e.src, c["src"])
            ctx.set(e.dst, c["dst"])
            ctx.set(e.comm, c["comm"])
            ctx.set(e.n_slots, 4)
        for b, mask in enumerate(masks):
            ctx.set(dut.loading[b], mask)
        for t in range(len(reqs) + LATENCY + 1):
            if t < len(reqs):
                r = reqs[t]
                ctx.set(dec.req.valid, r["valid"])
                for k in ("fsm", "cmd", "chunk", "buf", "pc"):
                    ctx.set(dec.req.payload[k], r[k])
            else:
                ctx.set(dec.req.valid, 0)
            if ctx.get(dec.o.valid):
                o = dec.o.payload
                seen.append((t, {k: ctx.get(o[k]) for k in ("fsm", "cmd", "buf", "word_lo")},
                             {k: ctx.get(o.step[k]) for k in o.step.shape().members}))
            await ctx.tick()

    run_sim(dut, bench)
    issued = [(t, r) for t, r in enumerate(reqs) if r["valid"]]
    assert [s[0] for s in seen] == [t + LATENCY for t, _ in issued], \
        f"latency is not {LATENCY} cycles, one per cycle"
    n_illegal = n_wait = n_empty = 0
    for (t, r), (_, head, step) in zip(issued, seen):
        word = words[r["pc"]]
        assert head == {"fsm": r["fsm"], "cmd": r["cmd"], "buf": r["buf"], "word_lo": word & 0xFFFFFFFF}
        exp = _expect(CFG, word, cmds[r["cmd"]], r["chunk"], masks[r["buf"]], routes)
        got = {k: step[k] for k in exp}
        assert got == exp, f"cycle {t}: word {word:#018x}, request {r}"
        n_illegal += exp["illegal"]
        n_wait += exp.get("wait", 0)
        n_empty += exp.get("nbytes", 1) == 0
    print(f"{len(seen)} steps: {n_illegal} illegal, {n_wait} waiting, {n_empty} of empty blocks")
    assert n_illegal and n_wait and n_empty, "a case was not exercised"
