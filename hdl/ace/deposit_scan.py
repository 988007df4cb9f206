"""The deposit unit's landing scan: one landing channel per cycle, round robin, checked for a whole PUT message.

The scan pointer walks the ``n_ports * n_channels`` landing channels, one per cycle, all the time. A register
stage holds the channel it pointed at in the cycle before with that channel's state of that cycle (the header
at its head, header-valid bit, fill levels), so the deposit unit's decisions start at flip-flops instead of at
the RX ports' header FIFOs through a ``n_ports * n_channels``-way mux. From the stage: whether the head is a
complete PUT message (header valid, ``put`` set, every payload beat landed), whether the channel is *full* (it
cannot take another message of the largest size, or its header FIFO is full: the sender would wait), and the
lowest live command with the message's tag (``hit``/``cmd``, looked up as the header enters the stage, in the
command table of that cycle, and kept if that command is still live).

A snapshot a cycle old is safe to act on: a complete PUT message stays at its channel's head with every beat
until the deposit unit itself pops it (the pop moves the header FIFO's read pointer at the clock edge, and the
unit spends a cycle in ``FINISH`` after it, so the stage has seen the pop before the unit scans again); the
fill levels only grow under a PUT head; a command posted a cycle late is found a lap later.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.layouts import CHANNEL_BITS, packet_header_layout
from .units import _w

__all__ = ["LandingScan", "command_lookup"]


def command_lookup(m, tag, cmd_tag, cmd_live, name):
    """(hit, command index) of the lowest live command (``cmd_live``, ``cmd_tag``) whose tag is ``tag``."""
    NC = len(cmd_live)
    hit, idx = Signal(name=f"{name}_hit"), Signal(_w(NC), name=f"{name}_cmd")
    for i in reversed(range(NC)):
        with m.If(cmd_live[i] & (cmd_tag[i] == tag)):
            m.d.comb += [hit.eq(1), idx.eq(i)]
    return hit, idx


def landing_ports(cfg):
    """The landing buffers' state as the RX ports show it: per port and channel the head header, header-valid
    bit, payload fill level (beats) and header FIFO level."""
    K, n = cfg.n_ports, cfg.n_channels
    hl = packet_header_layout()
    lvl = unsigned(exact_log2(cfg.landing_beats) + 1)
    hlvl = unsigned(exact_log2(cfg.landing_headers) + 1)
    return {
        "heads": In(data.ArrayLayout(data.ArrayLayout(hl, n), K)),
        "hdr_valid": In(data.ArrayLayout(unsigned(n), K)),
        "levels": In(data.ArrayLayout(data.ArrayLayout(lvl, n), K)),
        "hdr_levels": In(data.ArrayLayout(data.ArrayLayout(hlvl, n), K)),
    }


class LandingScan(wiring.Component):
    """The landing channel in the scan's register stage and what its head message is (see the module
    docstring).

    Ports: the landing state (``heads``, ``hdr_valid``, ``levels``, ``hdr_levels``), the command table's tags
    and live bits; out: the channel (``port``, ``ch``), its ``head`` and the head's payload ``beats``,
    ``complete`` and ``full`` (the channel's state one cycle ago), and the command lookup (``hit``, ``cmd``).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        NC = cfg.n_cmds
        super().__init__({
            **landing_ports(cfg),
            "cmd_tag": In(data.ArrayLayout(unsigned(16), NC)),
            "cmd_live": In(NC),
            "port": Out(range(max(2, cfg.n_ports))),
            "ch": Out(CHANNEL_BITS),
            "head": Out(packet_header_layout()),
            "beats": Out(16),
            "complete": Out(1),
            "full": Out(1),
            "hit": Out(1),
            "cmd": Out(_w(NC)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        K, n = cfg.n_ports, cfg.n_channels
        W, mmb, lb, nh = cfg.beat_bytes, cfg.max_message_beats, cfg.landing_beats, cfg.landing_headers
        cptr = Signal(range(K * n))
        m.d.sync += cptr.eq(Mux(cptr == K * n - 1, 0, cptr + 1))
        # the stage: the channel under the pointer and its state, as of this cycle
        nxt = Signal(packet_header_layout())
        head_v = Signal()
        level = Signal(exact_log2(lb) + 1)
        hlevel = Signal(exact_log2(nh) + 1)
        m.d.sync += [self.port.eq(cptr // n if K > 1 else 0), self.ch.eq(cptr % n), self.head.eq(nxt)]
        with m.Switch(cptr):
            for k in range(K):
                for c in range(n):
                    with m.Case(k * n + c):
                        m.d.comb += nxt.eq(self.heads[k][c])
                        m.d.sync += [head_v.eq(self.hdr_valid[k][c]), level.eq(self.levels[k][c]),
                                     hlevel.eq(self.hdr_levels[k][c])]
        # what depends on the header alone goes into the stage with it: its payload beats, and the command
        # lookup (against the tags and live bits of that cycle; a command live in both cycles kept its tag, as
        # a slot's tag is written only while the slot is free, so the lookup stands if its command is still
        # live: one posted in between is found a lap later, as one posted a cycle late always was)
        hit_n, cmd_n = command_lookup(m, nxt.tag, self.cmd_tag, self.cmd_live, "next")
        hit_q = Signal()
        m.d.sync += [self.beats.eq((nxt.length + W - 1) >> exact_log2(W)), hit_q.eq(hit_n), self.cmd.eq(cmd_n)]
        m.d.comb += [
            self.complete.eq(head_v & self.head.put & (level >= self.beats)),
            self.full.eq(((lb - level) < mmb) | (hlevel >= nh)),
            self.hit.eq(hit_q & self.cmd_live.bit_select(self.cmd, 1)),
        ]
        return m
