"""Shared material of the link tests: random messages, their golden flits, and the TxPort -> Link -> RxPort
bench (with link retransmission when the configuration has a replay buffer)."""

import random
from collections import deque
from dataclasses import dataclass

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.link import RxPort, TxPort
from syncfabric.hdl.ace.retry import ReplayRx, ReplayTx
from syncfabric.hdl.common.layouts import credit_layout, flit_layout, pack, packet_header_layout, unpack
from syncfabric.hdl.system.link import FAULT_ONE, Link, fault_threshold
from syncfabric.sim.golden.link import packet_crc, packets, payload_beats

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
