"""The command table: what the control unit keeps per command in flight, and when a command is finished.

The command processor fills a :func:`cmd_entry_layout` entry when it accepts a descriptor; the dispatcher, the
step decoder, the load sequencer and the deposit unit read it by table slot until the command completes with a
:func:`cmd_done_layout` report. :class:`CommandTable` holds the entries and each command's progress (chunks
done, deposits arrived, first error, count lane) and raises the completion.

The FSMs do not read the entries: each has a registered read port of the *view memory*, a memory indexed by
table slot whose rows (:func:`fsm_view_layout`) hold only what an FSM and its steps need (the phases' step
ranges, already offset past the load sequencer's LOADs, and the fields a unit job takes).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..common.layouts import COUNT_BITS, DTYPE_SHAPE, LOAD_MASK_BITS, MAX_PHASES, OP_SHAPE
from .geometry import geometry_layout
from .units import STATUS_SHAPE, _w

__all__ = ["cmd_entry_layout", "cmd_done_layout", "report_layout", "fsm_view_layout", "CommandTable"]


def cmd_entry_layout(cfg):
    """What the control unit keeps per command in flight (filled in by the command processor)."""
    return data.StructLayout({
        "dtype": DTYPE_SHAPE,
        "op": OP_SHAPE,
        "tag": unsigned(16),
        "comm": unsigned(4),
        "rank": unsigned(9),
        "count": unsigned(32),
        "elem_shift": unsigned(2),
        "src": unsigned(cfg.addr_width),
        "dst": unsigned(cfg.addr_width),
        "in_seg": 1,
        "out_seg": 1,
        "geom": geometry_layout(cfg),
        "n_phases": unsigned(3),
        "phase_start": data.ArrayLayout(unsigned(10), MAX_PHASES),
        "phase_len": data.ArrayLayout(unsigned(11), MAX_PHASES),
        "load_end": unsigned(11),
        "load_mask": unsigned(LOAD_MASK_BITS),
        "n_slots": unsigned(11),
        "null": 1,          # null contribution: LOADs fill zeros, the count lane starts at 0
        "arrivals": unsigned(24),   # deposits (PUT messages) the command receives before it completes
        "windows": unsigned(cfg.n_windows),     # the memory windows holding its buffers (locked while it runs)
    })


def fsm_view_layout(cfg):
    """What an FSM reads of its command (a row of the view memory): per program phase the first step to decode
    (``first``: phase 0 starts after the steps the load sequencer issues) and the end of its steps (``stop``),
    the number of phases, and the fields a step's unit job takes."""
    bounds = data.StructLayout({"first": unsigned(11), "stop": unsigned(11)})
    return data.StructLayout({
        "phases": data.ArrayLayout(bounds, MAX_PHASES),
        "n_phases": unsigned(3),
        "tag": unsigned(16),
        "rank": unsigned(9),
        "dtype": DTYPE_SHAPE,
        "op": OP_SHAPE,
        "null": 1,
    })


def cmd_done_layout(cfg):
    """A finished command: its table slot, first error (status, detail) and the count lane of its output
    (the smallest count its STOREs carried; 0 if it stored nothing)."""
    return data.StructLayout({"slot": _w(cfg.n_cmds), "status": STATUS_SHAPE, "detail": unsigned(32),
                              "contributors": unsigned(COUNT_BITS)})


def report_layout(cfg):
    """One error report in one cycle: command ``cmd`` saw ``status`` (with ``detail``)."""
    return data.StructLayout({"valid": 1, "cmd": _w(cfg.n_cmds), "status": STATUS_SHAPE, "detail": unsigned(32)})


class CommandTable(wiring.Component):
    """The commands in flight, by table slot.

    Ports
    -----
    alloc : In(valid, slot, entry)
        A command accepted into ``slot`` this cycle (the slot must be free, see ``busy``).
    dispatched : In(n_cmds)
        Pulses: the dispatcher handed out the last chunk of the command in that slot.
    chunk_done, arrived : In(valid, cmd)
        A chunk of ``cmd`` finished (its buffer is free again); a deposit (PUT message) for ``cmd`` was written.
    fold : In(valid, cmd, count)
        A STORE of ``cmd`` carried ``count`` in its count lane: the command's contributors are the smallest
        such count (0 if it stored nothing).
    reports : In(ArrayLayout(report_layout, n_reports))
        Errors seen this cycle. A command keeps its first error; of several in one cycle, the one with the
        highest index.
    entries, busy : Out
        Every slot's entry (read by the shared lookups of the control unit: dispatcher, decoder, load sequencer,
        deposit unit) and which slots hold a command.
    lookup_addr, lookup : In(slot per reader), Out(cmd_entry_layout per reader)
        Combinational reads of the entries for the shared readers (``n_lookups`` of them).
    view_addr, views : In(slot per FSM), Out(fsm_view_layout per FSM)
        One read port of the view memory per FSM: ``views[f]`` is the row of slot ``view_addr[f]`` one cycle
        later. A row written by an ``alloc`` in cycle ``t`` is read by addresses presented from ``t + 1`` on.
    done : Out(stream.Signature(cmd_done_layout))
        A finished command: busy, every chunk dispatched and done, every deposit arrived. The lowest finished
        slot is offered; the slot is free the cycle after the handshake.
    """

    def __init__(self, cfg, n_reports, n_lookups=1):
        self.cfg, self.n_reports = cfg, n_reports
        NC = cfg.n_cmds
        super().__init__({
            "alloc": In(data.StructLayout({"valid": 1, "slot": _w(NC), "entry": cmd_entry_layout(cfg)})),
            "dispatched": In(NC),
            "chunk_done": In(data.StructLayout({"valid": 1, "cmd": _w(NC)})),
            "arrived": In(data.StructLayout({"valid": 1, "cmd": _w(NC)})),
            "fold": In(data.StructLayout({"valid": 1, "cmd": _w(NC), "count": unsigned(COUNT_BITS)})),
            "reports": In(data.ArrayLayout(report_layout(cfg), n_reports)),
            "entries": Out(data.ArrayLayout(cmd_entry_layout(cfg), NC)),
            "busy": Out(NC),
            "lookup_addr": In(data.ArrayLayout(_w(NC), n_lookups)),
            "lookup": Out(data.ArrayLayout(cmd_entry_layout(cfg), n_lookups)),
            "view_addr": In(data.ArrayLayout(_w(NC), cfg.n_fsms)),
            "views": Out(data.ArrayLayout(fsm_view_layout(cfg), cfg.n_fsms)),
            "done": Out(stream.Signature(cmd_done_layout(cfg))),
        })

    def elaborate(self, platform):
        m = Module()
        NC = self.cfg.n_cmds
        NONE = (1 << COUNT_BITS) - 1               # contributors before the first STORE
        dispatched_all = Signal(NC)
        chunks_done = [Signal(16, name=f"cmd{i}_done") for i in range(NC)]
        arrived = [Signal(24, name=f"cmd{i}_arrived") for i in range(NC)]
        status = [Signal(STATUS_SHAPE, name=f"cmd{i}_status") for i in range(NC)]
        detail = [Signal(32, name=f"cmd{i}_detail") for i in range(NC)]
        contrib = [Signal(COUNT_BITS, init=NONE, name=f"cmd{i}_contrib") for i in range(NC)]
        busy_set, busy_clr = Signal(NC), Signal(NC)
        a, e = self.alloc, self.entries
        with m.If(a.valid):
            m.d.comb += busy_set.eq(1 << a.slot)
        m.d.sync += [self.busy.eq((self.busy | busy_set) & ~busy_clr),
                     dispatched_all.eq((dispatched_all | self.dispatched) & ~busy_set)]

        for addr, out in zip(self.lookup_addr, self.lookup):
            with m.Switch(addr):
                for i in range(NC):
                    with m.Case(i):
                        m.d.comb += out.eq(e[i])

        # the view memory: written at allocation, one registered read port per FSM
        m.submodules.views = views = Memory(shape=fsm_view_layout(self.cfg), depth=NC, init=[])
        wp = views.write_port()
        row = Signal(fsm_view_layout(self.cfg))
        m.d.comb += [wp.en.eq(a.valid), wp.addr.eq(a.slot), wp.data.eq(row)]
        m.d.comb += [row.n_phases.eq(a.entry.n_phases), row.tag.eq(a.entry.tag), row.rank.eq(a.entry.rank),
                     row.dtype.eq(a.entry.dtype), row.op.eq(a.entry.op), row.null.eq(a.entry.null)]
        for p in range(MAX_PHASES):
            start = a.entry.phase_start[p]
            m.d.comb += [row.phases[p].first.eq(start + (a.entry.load_end if p == 0 else 0)),
                         row.phases[p].stop.eq(start + a.entry.phase_len[p])]
        for f in range(self.cfg.n_fsms):
            rp = views.read_port()
            m.d.comb += [rp.addr.eq(self.view_addr[f]), self.views[f].eq(rp.data)]

        for i in range(NC):
            with m.If(busy_set[i]):
                m.d.sync += [e[i].eq(a.entry), chunks_done[i].eq(0), arrived[i].eq(0), status[i].eq(0),
                             detail[i].eq(0), contrib[i].eq(NONE)]
            with m.Else():
                with m.If(self.chunk_done.valid & (self.chunk_done.cmd == i)):
                    m.d.sync += chunks_done[i].eq(chunks_done[i] + 1)
                with m.If(self.arrived.valid & (self.arrived.cmd == i)):
                    m.d.sync += arrived[i].eq(arrived[i] + 1)
                with m.If(self.fold.valid & (self.fold.cmd == i) & (self.fold.count < contrib[i])):
                    m.d.sync += contrib[i].eq(self.fold.count)
                for r in self.reports:
                    with m.If(r.valid & (r.cmd == i) & (status[i] == 0)):
                        m.d.sync += [status[i].eq(r.status), detail[i].eq(r.detail)]
        finished = Cat(*[self.busy[i] & dispatched_all[i] & (chunks_done[i] == e[i].geom.n_chunks)
                         & (arrived[i] == e[i].arrivals) for i in range(NC)])
        sel = Signal(_w(NC))
        for i in reversed(range(NC)):
            with m.If(finished[i]):
                m.d.comb += sel.eq(i)
        m.d.comb += [self.done.valid.eq(finished.any()), self.done.payload.slot.eq(sel)]
        with m.Switch(sel):
            for i in range(NC):
                with m.Case(i):
                    m.d.comb += [self.done.payload.status.eq(status[i]), self.done.payload.detail.eq(detail[i]),
                                 self.done.payload.contributors.eq(Mux(contrib[i] == NONE, 0, contrib[i]))]
        with m.If(self.done.valid & self.done.ready):
            m.d.comb += busy_clr.eq(1 << sel)
        return m
