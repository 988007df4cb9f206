"""RxDeframer in Amaranth's simulator against a model of the receive checks: random messages on random
channels, their packets interleaved on the link with idle cycles, and faults injected now and then (a payload
or CRC bit flipped, a flit lost or repeated, a later packet's header changed or its offset at the message's
end, a VC or source out of range).
Every cycle the header pushes, beat writes and out-of-range flits are compared with the model, and the
per-channel error flags with the model's of the cycle before (the checks are registered); the model takes
its CRCs from the golden link model.

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.rxframe import RxDeframer
from syncfabric.hdl.common.layouts import pack, packet_header_layout, unpack
from syncfabric.sim.golden.link import packet_crc

from sim_helpers import run_sim, seed_for
from test_link import Msg, flit_fields, golden_flits, random_msg

CONFIGS = {"p2p": AceConfig.small(), "switch": AceConfig.small(rx_sources=4, n_ports=1)}
HDR = packet_header_layout()
#: Header fields a later packet must repeat from its message's first packet.
SAME = ("dst", "src", "tag", "chunk", "phase", "key", "length")


class DeframerModel:
    """The checks of :class:`RxDeframer`, flit by flit (docs/engine.md section 5)."""

    def __init__(self, cfg):
        n = cfg.n_channels
        self.cfg = cfg
        self.cur = [unpack(HDR, 0)] * n
        self.in_msg, self.exp_off = [0] * n, [0] * n
        self.in_pkt = self.pkt_ch = self.pkt_ok = self.pkt_nonempty = self.pkt_left = 0
        self.pkt_hdr, self.body = 0, b""
        self.flits = self.packets = self.crc_errors = 0

    def channel(self, h):
        cfg = self.cfg
        ok = h["vc"] < cfg.n_fsms and (cfg.rx_sources == 1 or h["src"] < cfg.rx_sources)
        return h["vc"] % cfg.n_fsms + cfg.n_fsms * (h["src"] % cfg.rx_sources), ok

    def step(self, f):
        """Expected outputs for flit ``f`` (``flit_fields``), then the state update."""
        cfg, w, pb = self.cfg, self.cfg.beat_bytes, self.cfg.packet_bytes
        h = unpack(HDR, f["hdr"])
        first, last = f["first"], f["last"]
        hdr_ch, hdr_ok = self.channel(h)
        ch, ok = (hdr_ch, hdr_ok) if first else (self.pkt_ch, self.pkt_ok)
        nonempty = h["length"] != 0 if first else self.pkt_nonempty
        framed = first or self.in_pkt
        rest = (h["length"] - h["offset"]) % (1 << 20)
        flits = -(-min(rest, pb) // w)
        left = ((0 if h["length"] == 0 else flits - 1) if first else self.pkt_left) % (1 << (cfg.packet_beats - 1).bit_length())
        err = set()
        if self.pkt_ok and (first and self.in_pkt or not framed):
            err.add(self.pkt_ch)
        if framed and ok and last != (left == 0):
            err.add(ch)
        out = {"hdr": None, "beat": None, "bad_channel": int(bool(framed and not ok))}
        if first and ok:
            c, start = self.cur[ch], h["offset"] == 0
            bad = (self.in_msg[ch] if start else
                   not self.in_msg[ch] or any(h[k] != c[k] for k in SAME) or h["offset"] != self.exp_off[ch])
            if bad or h["last"] != (h["offset"] + pb >= h["length"]) or (h["length"] and h["offset"] >= h["length"]):
                err.add(ch)
            self.in_msg[ch], self.exp_off[ch] = int(not h["last"]), h["offset"] + pb
            if start:
                self.cur[ch] = h
                out["hdr"] = (ch, f["hdr"])
        if framed and ok and nonempty:
            out["beat"] = (ch, f["data"])
        # CRC: the header word, then the packet's payload flits
        if first:
            self.pkt_hdr, self.body = f["hdr"], b""
        if nonempty:
            self.body += f["data"].to_bytes(w, "little")
        if framed and last and packet_crc(self.pkt_hdr, self.body, w) != f["crc"]:
            self.crc_errors += 1
            if ok:
                err.add(ch)
        out["err"] = sum(1 << c for c in err)
        self.flits, self.packets = self.flits + 1, self.packets + last
        if first:
            self.pkt_ch, self.pkt_ok, self.pkt_nonempty = hdr_ch, hdr_ok, int(h["length"] != 0)
        self.in_pkt, self.pkt_left = int(framed and not last), (left - 1) % (1 << (cfg.packet_beats - 1).bit_length())
        return out


def link_traffic(rng, cfg, n_msgs, p_fault):
    """Flits (``flit_fields`` dicts, None for an idle cycle) of ``n_msgs`` random messages: packets of different
    channels interleaved, each channel's messages in order, with faults injected at rate ``p_fault``."""
    queues = {}
    for _ in range(n_msgs):
        msg = random_msg(rng, cfg)
        msg.fields["src"] = rng.randrange(cfg.rx_sources)
        if rng.random() < p_fault / 2:            # a VC or a source the port has no channel for
            msg.fields["vc" if cfg.rx_sources == 1 or rng.random() < 0.5 else "src"] += cfg.n_fsms * cfg.rx_sources
        flits = [flit_fields(cfg.beat_bytes, b) for b in golden_flits(Msg(msg.fields, msg.payload), cfg)]
        pkts, cur = [], []
        for fl in flits:
            cur.append(fl)
            if fl["last"]:
                pkts.append(cur)
                cur = []
        queues.setdefault((msg.fields["vc"], msg.fields["src"]), []).extend(pkts)
    out = []
    while queues:
        key = rng.choice(list(queues))
        pkt = [dict(fl) for fl in queues[key].pop(0)]
        if not queues[key]:
            del queues[key]
        if rng.random() < p_fault:
            fault = rng.choice(["data", "crc", "lose", "repeat", "header", "at_end"])
            i = rng.randrange(len(pkt))
            if fault == "data":
                pkt[i]["data"] ^= 1 << rng.randrange(8 * cfg.beat_bytes)
            elif fault == "crc":
                pkt[-1]["crc"] ^= 1 << rng.randrange(32)
            elif fault == "lose":
                del pkt[i]
            elif fault == "repeat":
                pkt.insert(i, dict(pkt[i]))
            elif fault == "at_end":         # a header whose offset is its message's length: no bytes left
                h = unpack(HDR, pkt[0]["hdr"])
                h["offset"] = h["length"]
                pkt[0]["hdr"] = pack(HDR, h)
            else:
                h = unpack(HDR, pkt[0]["hdr"])
                h[rng.choice(["tag", "offset", "last", "key"])] ^= 1
                pkt[0]["hdr"] = pack(HDR, h)
        for fl in pkt:
            out.extend([None] * (rng.random() < 0.2))
            out.append(fl)
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_deframer_lands_checked_packets_and_flags_every_fault_on_its_channel(name):
    cfg = CONFIGS[name]
    rng = random.Random(seed_for(92))
    dut = RxDeframer(cfg)
    model = DeframerModel(cfg)
    traffic = link_traffic(rng, cfg, 120, p_fault=0.15)

    async def bench(ctx):
        errs = 0
        want_err = 0                        # the errors of the cycle before: ``err`` is a cycle after its flit
        assert ctx.get(dut.flit.ready)
        for cycle, fl in enumerate(traffic + [None]):
            ctx.set(dut.flit.valid, fl is not None)
            if fl is None:
                want = {"hdr": None, "beat": None, "bad_channel": 0, "err": 0}
            else:
                for k, v in fl.items():
                    ctx.set(getattr(dut.flit.payload, k).as_value() if k == "hdr" else getattr(dut.flit.payload, k), v)
                want = model.step(fl)
            got_hdr = (ctx.get(dut.hdr.payload.ch), ctx.get(dut.hdr.payload.hdr.as_value())) \
                if ctx.get(dut.hdr.valid) else None
            got_beat = (ctx.get(dut.beat.payload.ch), ctx.get(dut.beat.payload.data)) \
                if ctx.get(dut.beat.valid) else None
            assert got_hdr == want["hdr"], cycle
            assert got_beat == want["beat"], cycle
            assert ctx.get(dut.err) == want_err, cycle
            assert ctx.get(dut.bad_channel) == want["bad_channel"], cycle
            errs += want["err"] != 0
            want_err = want["err"]
            await ctx.tick()
        assert (ctx.get(dut.flits), ctx.get(dut.packets), ctx.get(dut.crc_errors)) == \
            (model.flits, model.packets, model.crc_errors)
        assert errs > 5 and model.crc_errors > 2          # the faults were seen

    run_sim(dut, bench)


def test_clean_traffic_raises_no_error():
    cfg = CONFIGS["switch"]
    rng = random.Random(seed_for(93))
    dut = RxDeframer(cfg)
    traffic = link_traffic(rng, cfg, 40, p_fault=0)

    async def bench(ctx):
        beats = 0
        for fl in traffic:
            ctx.set(dut.flit.valid, fl is not None)
            for k, v in (fl or {}).items():
                ctx.set(getattr(dut.flit.payload, k).as_value() if k == "hdr" else getattr(dut.flit.payload, k), v)
            assert ctx.get(dut.err) == 0 and ctx.get(dut.bad_channel) == 0
            beats += ctx.get(dut.beat.valid)
            await ctx.tick()
        assert ctx.get(dut.crc_errors) == 0 and beats > 100

    run_sim(dut, bench)
