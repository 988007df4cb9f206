"""The deposit unit's spill table: the headers of the PUT messages spilled to the spill window in NPU memory.

Entry ``e`` describes the message in record ``e`` of the window (``SPILL_BASE + e * max_message_beats *
beat_bytes``). Only the first ``spill_entries`` entries (the register, at most ``cfg.spill_entries``) are used.
A scan pointer walks the entries, one per cycle, all the time; a register stage holds the entry it pointed at
in the cycle before and the lowest live command of its tag then (``cur``, ``cur_e``, ``cmd``), so the deposit
unit's decision starts at flip-flops. ``ready``: the staged entry is valid now, was not written or freed in
the cycle it was staged, and its command is posted and still live (the message can be copied to its output).
``free``/``free_e`` name the lowest usable entry not in use. ``fill`` writes an entry and marks it valid;
``clear`` frees one (``fill`` wins when both name the same entry in one cycle).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .deposit_scan import command_lookup
from .units import STATUS_SHAPE, _w

__all__ = ["SpillTable", "spill_entry_layout"]


def spill_entry_layout():
    """A spilled message: its header fields that name where it goes, and whether its payload is suspect."""
    return data.StructLayout({"tag": unsigned(16), "chunk": unsigned(16), "key": unsigned(12),
                              "length": unsigned(20), "bad": STATUS_SHAPE})


class SpillTable(wiring.Component):
    """Spilled-message headers, the scan over them and the free-entry pick (see the module docstring).

    Ports: the command table's tags and live bits, ``spill_entries`` (the entries in use); out: the staged
    entry (``cur``, ``cur_e``), ``ready`` and its command ``cmd``, ``free``/``free_e`` (combinational); in:
    ``fill`` and ``clear`` (one-cycle events, effective at the clock edge).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        NC, E = cfg.n_cmds, cfg.spill_entries
        e = unsigned(max(1, (max(1, E) - 1).bit_length()))
        super().__init__({
            "cmd_tag": In(data.ArrayLayout(unsigned(16), NC)),
            "cmd_live": In(NC),
            "spill_entries": In(8),
            "cur": Out(spill_entry_layout()),
            "cur_e": Out(e),
            "ready": Out(1),
            "cmd": Out(_w(NC)),
            "free": Out(1),
            "free_e": Out(e),
            "fill": In(data.StructLayout({"valid": 1, "e": e, "entry": spill_entry_layout()})),
            "clear": In(data.StructLayout({"valid": 1, "e": e})),
        })

    def elaborate(self, platform):
        m = Module()
        E = self.cfg.spill_entries
        ent = Signal(data.ArrayLayout(spill_entry_layout(), max(1, E)))
        ent_v = Signal(max(1, E))
        eptr = Signal(range(max(1, E)))
        if E > 1:
            m.d.sync += eptr.eq(Mux(eptr == E - 1, 0, eptr + 1))
        # the stage: the entry under the pointer, its command lookup, and whether this cycle writes or frees it
        hit, cmd = command_lookup(m, ent[eptr].tag, self.cmd_tag, self.cmd_live, "entry")
        s_hit, s_ok = Signal(), Signal()
        touched = ((self.fill.valid & (self.fill.e == eptr)) | (self.clear.valid & (self.clear.e == eptr)))
        m.d.sync += [self.cur.eq(ent[eptr]), self.cur_e.eq(eptr), s_hit.eq(hit), self.cmd.eq(cmd),
                     s_ok.eq(~touched)]
        if E:
            m.d.comb += self.ready.eq(s_ok & ent_v.bit_select(self.cur_e, 1) & s_hit
                                      & self.cmd_live.bit_select(self.cmd, 1))
        for e in reversed(range(E)):
            with m.If(~ent_v[e] & (e < self.spill_entries)):
                m.d.comb += [self.free.eq(1), self.free_e.eq(e)]
        with m.If(self.clear.valid):
            m.d.sync += ent_v.bit_select(self.clear.e, 1).eq(0)
        if E:
            with m.If(self.fill.valid):
                with m.Switch(self.fill.e):
                    for e in range(E):
                        with m.Case(e):
                            m.d.sync += [ent[e].eq(self.fill.entry), ent_v[e].eq(1)]
        return m
