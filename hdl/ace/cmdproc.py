"""Command processor: submission ring, descriptor validation, command table slots, completion ring, interrupt.

NIC style: the driver writes 64-byte descriptors into a ring in NPU memory and the new tail into SQ_TAIL (the
doorbell). The processor fetches each descriptor with the DMA, looks up the program loaded for its
(communicator, collective), computes the chunk geometry and has a :class:`~.validate.DescriptorValidator` check
everything (codes in :class:`~syncfabric.sim.golden.types.Status`, checked in the order of docs/engine.md and
:data:`~.validate.CHECKS`) and build the command table entry. A rejected descriptor
gets an error completion at once and nothing is written to memory for it; an accepted one takes a command
table slot and runs. Completions (32 bytes) go to the completion ring in the order commands finish; the ring
is never overrun (the processor waits while it is full) and each completion raises IRQ.cpl.
"""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from ..common.layouts import completion_layout
from ..common.skid import SkidBuffer
from .cmdrecords import CommandRecords
from .cmdtable import cmd_done_layout, cmd_entry_layout
from .cplwriter import CompletionWriter
from .geometry import CommandGeometry
from .progtable import ProgramTable
from .regs import N_PARTITIONS, PTAB_ENTRY_WORDS
from .sqfetch import DescriptorFetch
from .units import _w, beat_stream, dma_cmd_layout
from .validate import SUPPORTED_COLLECTIVES, DescriptorValidator, effective_count, elem_shift

__all__ = ["CommandProcessor"]


class CommandProcessor(wiring.Component):
    """See the module docstring. Register values come in as plain inputs (the engine top wires them from the
    register bank); ``ptab_*`` is the program table's register window.

    The blocks, as the data goes: :class:`~.sqfetch.DescriptorFetch` (submission ring, descriptor DMA read),
    :class:`~.progtable.ProgramTable` (the PTAB window and the lookup), :class:`~.geometry.CommandGeometry`,
    :class:`~.validate.DescriptorValidator`, :class:`~.cmdrecords.CommandRecords` (what each command keeps for
    its completion; rejections and finished commands as completion records) and
    :class:`~.cplwriter.CompletionWriter` (completion queue, completion ring, IRQ).

    Per descriptor, ``cmd`` FSM: FETCH (the reader's DMA read command and descriptor beats) -> LOOKUP (two
    cycles per program table entry scanned) -> GEOM -> GEOM_WAIT (``CommandGeometry.CYCLES``) -> VALIDATE
    (the validator starts in the geometry's done cycle and answers ``DescriptorValidator.LATENCY`` = 5 cycles
    later) -> ISSUE. Validation takes 5 cycles between the geometry's done and ISSUE where a single-cycle
    check would take 1: four cycles more per command, accepted or rejected, for logic short enough for a
    1 GHz clock."""

    #: Cycles ``checking`` stays high after a command leaves ISSUE: the control unit writes its table entry at
    #: the clock edge that takes ``new_cmd`` and registers the windows in use from it a cycle later.
    _LOCK_TAIL = 2

    def __init__(self, cfg):
        self.cfg = cfg
        A = cfg.addr_width
        super().__init__({
            "enable": In(1),
            "sq_base": In(64), "sq_size": In(32), "sq_tail": In(32), "sq_head": Out(32),
            "cq_base": In(64), "cq_size": In(32), "cq_head": In(32), "cq_tail": Out(32),
            "chunk_beats": In(16),
            "part": In(data.ArrayLayout(unsigned(8), N_PARTITIONS)),
            "win_base": In(data.ArrayLayout(unsigned(64), cfg.n_windows)),
            "win_size": In(data.ArrayLayout(unsigned(64), cfg.n_windows)),
            "win_comms": In(data.ArrayLayout(unsigned(cfg.n_comms), cfg.n_windows)),
            "checking": Out(1),
            "comm_cfg": In(data.ArrayLayout(unsigned(32), cfg.n_comms)),
            "ptab_we": In(PTAB_ENTRY_WORDS),
            "ptab_addr": In(range(max(2, cfg.n_programs))),
            "ptab_wdata": In(32 * PTAB_ENTRY_WORDS),
            "ptab_rdata": Out(32 * PTAB_ENTRY_WORDS),
            "irq_cpl": Out(1),
            "irq_err": Out(1),
            # DMA
            "rd_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "rd_data": In(beat_stream(cfg, err=True)),
            "wr_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "wr_data": Out(beat_stream(cfg)),
            "wr_done": In(stream.Signature(data.StructLayout({"err": 1}))),
            # control unit
            "new_cmd": Out(stream.Signature(data.StructLayout({"slot": _w(cfg.n_cmds),
                                                               "entry": cmd_entry_layout(cfg)}))),
            "slot_busy": In(cfg.n_cmds),
            "cmd_done": In(stream.Signature(cmd_done_layout(cfg))),
            # counters
            "desc_bytes": Out(64),
            "cpl_bytes": Out(64),
            "cmds_ok": Out(32),
            "cmds_err": Out(32),
            "cpl_stall": Out(32),
            "cycles": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        NC = cfg.n_cmds

        m.d.sync += self.cycles.eq(self.cycles + 1)

        m.submodules.ptab = ptab = ProgramTable(cfg)
        m.submodules.fetch = fetch = DescriptorFetch(cfg)
        m.submodules.geo = geo = CommandGeometry(cfg)
        # every check, in the documented order, and the command table entry: LATENCY cycles from the
        # geometry's done cycle; its outputs hold until the next descriptor's
        m.submodules.validate = val = DescriptorValidator(cfg)
        m.submodules.records = rec = CommandRecords(cfg)
        m.submodules.cplw = cplw = CompletionWriter(cfg)

        # ---- register window, DMA and counters of the sub-blocks ------------------------------------------
        m.d.comb += [ptab.ptab_we.eq(self.ptab_we), ptab.ptab_addr.eq(self.ptab_addr),
                     ptab.ptab_wdata.eq(self.ptab_wdata), self.ptab_rdata.eq(ptab.ptab_rdata)]
        m.d.comb += [fetch.enable.eq(self.enable), fetch.sq_base.eq(self.sq_base), fetch.sq_size.eq(self.sq_size),
                     fetch.sq_tail.eq(self.sq_tail), self.sq_head.eq(fetch.sq_head),
                     self.desc_bytes.eq(fetch.desc_bytes)]
        wiring.connect(m, wiring.flipped(self.rd_cmd), fetch.rd_cmd)
        wiring.connect(m, wiring.flipped(self.rd_data), fetch.rd_data)
        m.d.comb += [cplw.cq_base.eq(self.cq_base), cplw.cq_size.eq(self.cq_size), cplw.cq_head.eq(self.cq_head),
                     self.cq_tail.eq(cplw.cq_tail), self.irq_cpl.eq(cplw.irq_cpl), self.irq_err.eq(cplw.irq_err),
                     self.cpl_bytes.eq(cplw.cpl_bytes), self.cmds_ok.eq(cplw.cmds_ok),
                     self.cmds_err.eq(cplw.cmds_err), self.cpl_stall.eq(cplw.cpl_stall)]
        wiring.connect(m, wiring.flipped(self.wr_cmd), cplw.wr_cmd)
        wiring.connect(m, wiring.flipped(self.wr_data), cplw.wr_data)
        wiring.connect(m, wiring.flipped(self.wr_done), cplw.wr_done)

        # ---- completions: rejections and finished commands -> queue -> completion ring --------------------
        desc = fetch.desc
        start_cycle = Signal(32)
        slot = Signal(_w(NC))
        m.d.comb += [rec.now.eq(self.cycles[:32]), rec.cur.cookie.eq(desc.cookie), rec.cur.tag.eq(desc.tag),
                     rec.cur.collective.eq(desc.collective), rec.cur.sq_index.eq(fetch.sq_index),
                     rec.cur.start.eq(start_cycle), rec.save_slot.eq(slot)]
        # finished commands reach the records through a register slice: the report is picked out of the
        # command table in the control unit's cycle, too late to be written into the completion queue in it
        m.submodules.done_slice = done_slice = SkidBuffer(cmd_done_layout(cfg))
        wiring.connect(m, wiring.flipped(self.cmd_done), done_slice.i)
        wiring.connect(m, done_slice.o, rec.i_done)
        # and completions (a report or a rejection, picked by the command FSM's state) reach the completion
        # queue through one: the pick is too late to choose the queue's write data in its cycle
        m.submodules.cpl_slice = cpl_slice = SkidBuffer(completion_layout())
        wiring.connect(m, rec.o_cpl, cpl_slice.i)
        wiring.connect(m, cpl_slice.o, cplw.i_cpl)

        # ---- fetch, look up, validate ---------------------------------------------------------------------
        free_slot = Signal(_w(NC))
        any_free = Signal()
        for i in reversed(range(NC)):
            with m.If(~self.slot_busy[i]):
                m.d.comb += [free_slot.eq(i), any_free.eq(1)]
        m.d.comb += [ptab.comm.eq(desc.comm), ptab.collective.eq(desc.collective),
                     ptab.algorithm.eq(desc.algorithm), ptab.root.eq(desc.root)]
        prog = ptab.prog
        m.d.comb += [
            val.desc.eq(desc), val.fetch_err.eq(fetch.fetch_err), val.found.eq(ptab.found), val.prog.eq(prog),
            val.geom.eq(geo.result), val.geom_err.eq(geo.error),
            val.comm_cfg.eq(self.comm_cfg), val.win_base.eq(self.win_base), val.win_size.eq(self.win_size),
            val.win_comms.eq(self.win_comms),
            val.part.eq(self.part), val.chunk_beats.eq(self.chunk_beats),
        ]

        # ``checking``: from the geometry's start (the engine's window lock, a register behind it, is then up
        # long before the validator samples the windows) until the command is in the control unit's table, and
        # ``_LOCK_TAIL`` cycles more, until the table's windows in use take over
        checking, tail = Signal(), Signal(range(self._LOCK_TAIL + 1))
        m.d.comb += self.checking.eq(checking | (tail != 0))
        with m.If(tail != 0):
            m.d.sync += tail.eq(tail - 1)

        # the new command's payload straight from the validator's registers, not behind the FSM's state (the
        # control unit's table computes its phase bounds from it in the same cycle)
        m.d.comb += [self.new_cmd.payload.slot.eq(slot), self.new_cmd.payload.entry.eq(val.entry)]

        with m.FSM(name="cmd"):
            with m.State("FETCH"):
                m.d.comb += fetch.go.eq(any_free)
                with m.If(fetch.started):
                    m.d.sync += [start_cycle.eq(self.cycles[:32]), slot.eq(free_slot)]
                with m.If(fetch.fetched):
                    m.d.comb += ptab.start.eq(1)
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                with m.If(ptab.done):
                    m.d.sync += checking.eq(1)
                    m.next = "GEOM"
            with m.State("GEOM"):
                m.d.comb += [
                    geo.start.eq(1),
                    geo.count.eq(effective_count(desc)), geo.elem_shift.eq(elem_shift(desc.dtype)),
                    geo.n_blocks.eq(prog.n_blocks), geo.segments.eq(prog.segments),
                    geo.chunk_beats.eq(self.chunk_beats),
                ]
                m.next = "GEOM_WAIT"
            with m.State("GEOM_WAIT"):
                with m.If(geo.done):
                    m.d.comb += val.start.eq(1)
                    m.next = "VALIDATE"
            with m.State("VALIDATE"):
                with m.If(val.done):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If(val.code != Status.OK):
                    m.d.comb += [rec.i_reject.valid.eq(1), rec.i_reject.payload.status.eq(val.code),
                                 rec.i_reject.payload.detail.eq(val.det)]
                    with m.If(rec.i_reject.ready):
                        m.d.sync += [checking.eq(0), tail.eq(self._LOCK_TAIL)]
                        m.next = "FETCH"
                with m.Else():
                    m.d.comb += self.new_cmd.valid.eq(1)
                    with m.If(self.new_cmd.ready):
                        m.d.comb += rec.save.eq(1)
                        m.d.sync += [checking.eq(0), tail.eq(self._LOCK_TAIL)]
                        m.next = "FETCH"
        return m
