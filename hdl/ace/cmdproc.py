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
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Collective, Status
from ..common.layouts import (COMPLETION_BYTES, DESCRIPTOR_BYTES, completion_layout, descriptor_layout,
                              program_entry_layout)
from .geometry import CommandGeometry
from .cmdtable import cmd_done_layout, cmd_entry_layout
from .units import beat_stream, dma_cmd_layout
from .validate import SUPPORTED_COLLECTIVES, DescriptorValidator, effective_count, elem_shift

__all__ = ["CommandProcessor", "SUPPORTED_COLLECTIVES", "PTAB_WORDS"]

#: 32-bit words per program table entry in the PTAB register window.
PTAB_WORDS = 8


def _w(n):
    return unsigned(max(1, (n - 1).bit_length()))


class CommandProcessor(wiring.Component):
    """See the module docstring. Register values come in as plain inputs (the engine top wires them from the
    register bank); ``ptab_*`` is the program table's register window.

    Per descriptor, ``cmd`` FSM: IDLE (read command) -> FETCH (descriptor beats) -> LOOKUP/LOOKUP2 (two
    cycles per program table entry scanned) -> GEOM -> GEOM_WAIT (``CommandGeometry.CYCLES``) -> VALIDATE
    (the validator starts in the geometry's done cycle and answers ``DescriptorValidator.LATENCY`` = 3 cycles
    later) -> ISSUE. Validation takes 3 cycles between the geometry's done and ISSUE where the single-cycle
    check it replaced took 1: two cycles more per command, accepted or rejected (the ``cycles`` of every
    completion grow by 2)."""

    def __init__(self, cfg):
        self.cfg = cfg
        A = cfg.addr_width
        super().__init__({
            "enable": In(1),
            "sq_base": In(64), "sq_size": In(32), "sq_tail": In(32), "sq_head": Out(32),
            "cq_base": In(64), "cq_size": In(32), "cq_head": In(32), "cq_tail": Out(32),
            "chunk_beats": In(16),
            "part": In(data.ArrayLayout(unsigned(8), 5)),
            "win_base": In(data.ArrayLayout(unsigned(64), cfg.n_windows)),
            "win_size": In(data.ArrayLayout(unsigned(64), cfg.n_windows)),
            "comm_cfg": In(data.ArrayLayout(unsigned(32), cfg.n_comms)),
            "ptab_we": In(PTAB_WORDS),
            "ptab_addr": In(range(max(2, cfg.n_programs))),
            "ptab_wdata": In(32 * PTAB_WORDS),
            "ptab_rdata": Out(32 * PTAB_WORDS),
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
        W = cfg.beat_bytes
        NC = cfg.n_cmds
        desc_l = descriptor_layout()
        cpl_l = completion_layout()
        pe_l = program_entry_layout()

        m.d.sync += self.cycles.eq(self.cycles + 1)

        # ---- program table (register window) ------------------------------------------------------------
        ptab = Memory(shape=unsigned(32 * PTAB_WORDS), depth=max(2, cfg.n_programs), init=[])
        m.submodules.ptab = ptab
        pw = ptab.write_port(granularity=32)
        pr_csr = ptab.read_port()
        pr = ptab.read_port()
        m.d.comb += [pw.addr.eq(self.ptab_addr), pw.data.eq(self.ptab_wdata), pw.en.eq(self.ptab_we),
                     pr_csr.addr.eq(self.ptab_addr), self.ptab_rdata.eq(pr_csr.data)]

        # ---- descriptor fetch ----------------------------------------------------------------------------
        desc_bits = Signal(8 * DESCRIPTOR_BYTES)
        desc = data.View(desc_l, desc_bits)
        sq_head = self.sq_head
        n_desc_beats = DESCRIPTOR_BYTES // W if W <= DESCRIPTOR_BYTES else 1
        beat_i = Signal(range(n_desc_beats + 1))
        fetch_err = Signal()
        start_cycle = Signal(32)
        sq_index = Signal(16)

        # per-slot facts the completion needs
        s_cookie = [Signal(64, name=f"slot{i}_cookie") for i in range(NC)]
        s_tag = [Signal(32, name=f"slot{i}_tag") for i in range(NC)]
        s_coll = [Signal(8, name=f"slot{i}_coll") for i in range(NC)]
        s_index = [Signal(16, name=f"slot{i}_index") for i in range(NC)]
        s_start = [Signal(32, name=f"slot{i}_start") for i in range(NC)]

        # ---- completion records -------------------------------------------------------------------------
        m.submodules.cplq = cplq = fifo.SyncFIFOBuffered(width=cpl_l.size, depth=4)
        rej = Signal(cpl_l)              # a rejection built by the validator
        rej_push = Signal()
        fin = Signal(cpl_l)              # a finished command
        seq = Signal(32)
        m.d.comb += [
            fin.cookie.eq(0), fin.tag.eq(0),
        ]
        with m.Switch(self.cmd_done.payload.slot):
            for i in range(NC):
                with m.Case(i):
                    m.d.comb += [fin.cookie.eq(s_cookie[i]), fin.tag.eq(s_tag[i]), fin.collective.eq(s_coll[i]),
                                 fin.sq_index.eq(s_index[i]), fin.cycles.eq(self.cycles[:32] - s_start[i])]
        m.d.comb += [fin.status.eq(self.cmd_done.payload.status), fin.detail.eq(self.cmd_done.payload.detail),
                     fin.contributors.eq(self.cmd_done.payload.contributors)]
        # the validator has priority on the queue; a finished command waits a cycle
        with m.If(rej_push):
            m.d.comb += [cplq.w_en.eq(1), cplq.w_data.eq(rej)]
        with m.Elif(self.cmd_done.valid & cplq.w_rdy):
            m.d.comb += [cplq.w_en.eq(1), cplq.w_data.eq(fin), self.cmd_done.ready.eq(1)]

        # ---- completion writer -----------------------------------------------------------------------------
        cq_mask = Signal(32)
        m.d.comb += cq_mask.eq(self.cq_size - 1)
        cq_full = Signal()
        m.d.comb += cq_full.eq(((self.cq_tail + 1) & cq_mask) == (self.cq_head & cq_mask))
        cur = Signal(cpl_l)
        cpl_beats = max(1, COMPLETION_BYTES // W)
        wbeat = Signal(range(cpl_beats + 1))
        cur_bits = Signal(8 * max(COMPLETION_BYTES, W))
        with m.FSM(name="cpl"):
            with m.State("IDLE"):
                with m.If(cplq.r_rdy & (self.cq_size != 0)):
                    with m.If(cq_full):
                        m.d.sync += self.cpl_stall.eq(self.cpl_stall + 1)
                    with m.Else():
                        rec = data.View(cpl_l, cplq.r_data)
                        m.d.comb += cplq.r_en.eq(1)
                        m.d.sync += [cur.eq(cplq.r_data), cur.seq.eq(seq + 1), seq.eq(seq + 1), wbeat.eq(0)]
                        with m.If(rec.status == Status.OK):
                            m.d.sync += self.cmds_ok.eq(self.cmds_ok + 1)
                        with m.Else():
                            m.d.sync += self.cmds_err.eq(self.cmds_err + 1)
                        m.next = "CMD"
            with m.State("CMD"):
                m.d.comb += [
                    self.wr_cmd.valid.eq(1),
                    self.wr_cmd.payload.addr.eq(self.cq_base + (self.cq_tail & cq_mask) * COMPLETION_BYTES),
                    self.wr_cmd.payload.length.eq(COMPLETION_BYTES),
                ]
                with m.If(self.wr_cmd.ready):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += cur_bits.eq(cur.as_value())
                with m.Switch(wbeat):
                    for b in range(cpl_beats):
                        with m.Case(b):
                            m.d.comb += self.wr_data.payload.data.eq(cur_bits[8 * W * b:8 * W * (b + 1)])
                m.d.comb += [self.wr_data.valid.eq(1), self.wr_data.payload.last.eq(wbeat == cpl_beats - 1)]
                with m.If(self.wr_data.ready):
                    m.d.sync += wbeat.eq(wbeat + 1)
                    with m.If(wbeat == cpl_beats - 1):
                        m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += self.wr_done.ready.eq(1)
                with m.If(self.wr_done.valid):
                    m.d.sync += [
                        self.cq_tail.eq((self.cq_tail + 1) & cq_mask),
                        self.cpl_bytes.eq(self.cpl_bytes + COMPLETION_BYTES),
                    ]
                    m.d.comb += [self.irq_cpl.eq(1), self.irq_err.eq(cur.status != Status.OK)]
                    m.next = "IDLE"

        # ---- fetch, look up, validate ---------------------------------------------------------------------
        m.submodules.geo = geo = CommandGeometry(cfg)
        sq_mask = Signal(32)
        m.d.comb += sq_mask.eq(self.sq_size - 1)
        free_slot = Signal(_w(NC))
        any_free = Signal()
        for i in reversed(range(NC)):
            with m.If(~self.slot_busy[i]):
                m.d.comb += [free_slot.eq(i), any_free.eq(1)]
        slot = Signal(_w(NC))
        pidx = Signal(range(max(2, cfg.n_programs) + 1))
        found = Signal()
        prog = Signal(pe_l)
        coll = desc.collective
        eshift = Signal(2)
        count = Signal(32)
        m.d.comb += [eshift.eq(elem_shift(desc.dtype)), count.eq(effective_count(desc))]

        # every check, in the documented order, and the command table entry: LATENCY cycles from the
        # geometry's done cycle; its outputs hold until the next descriptor's
        m.submodules.validate = val = DescriptorValidator(cfg)
        m.d.comb += [
            val.desc.eq(desc), val.fetch_err.eq(fetch_err), val.found.eq(found), val.prog.eq(prog),
            val.geom.eq(geo.result), val.geom_err.eq(geo.error),
            val.comm_cfg.eq(self.comm_cfg), val.win_base.eq(self.win_base), val.win_size.eq(self.win_size),
            val.part.eq(self.part), val.chunk_beats.eq(self.chunk_beats),
        ]
        code, det, entry = val.code, val.det, val.entry

        with m.FSM(name="cmd"):
            with m.State("IDLE"):
                with m.If(self.enable & (self.sq_size != 0) & ((sq_head & sq_mask) != (self.sq_tail & sq_mask))
                          & any_free):
                    m.d.comb += [
                        self.rd_cmd.valid.eq(1),
                        self.rd_cmd.payload.addr.eq(self.sq_base + (sq_head & sq_mask) * DESCRIPTOR_BYTES),
                        self.rd_cmd.payload.length.eq(DESCRIPTOR_BYTES),
                    ]
                    with m.If(self.rd_cmd.ready):
                        m.d.sync += [beat_i.eq(0), fetch_err.eq(0), start_cycle.eq(self.cycles[:32]),
                                     sq_index.eq(sq_head & sq_mask), slot.eq(free_slot)]
                        m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += self.rd_data.ready.eq(1)
                with m.If(self.rd_data.valid):
                    with m.Switch(beat_i):
                        for b in range(n_desc_beats):
                            with m.Case(b):
                                lo = 8 * W * b
                                hi = min(8 * W * (b + 1), 8 * DESCRIPTOR_BYTES)
                                m.d.sync += desc_bits[lo:hi].eq(self.rd_data.payload.data[:hi - lo])
                    m.d.sync += [beat_i.eq(beat_i + 1), self.desc_bytes.eq(self.desc_bytes + min(W, DESCRIPTOR_BYTES))]
                    with m.If(self.rd_data.payload.err):
                        m.d.sync += fetch_err.eq(1)
                    with m.If(self.rd_data.payload.last):
                        m.d.sync += [pidx.eq(0), found.eq(0), sq_head.eq((sq_head + 1) & sq_mask)]
                        m.next = "LOOKUP"
            with m.State("LOOKUP"):
                # scan the program table: read entry pidx (data next cycle)
                m.d.comb += pr.addr.eq(pidx)
                m.next = "LOOKUP2"
            with m.State("LOOKUP2"):
                pe = data.View(pe_l, pr.data[:pe_l.size])
                # broadcast and reduce programs are per root: the entry must have the descriptor's
                rooted = (coll == Collective.BROADCAST) | (coll == Collective.REDUCE)
                hit = pe.valid & (pe.comm == desc.comm) & (pe.collective == coll) & \
                    ((desc.algorithm == 0) | (pe.algorithm == desc.algorithm)) & (~rooted | (pe.root == desc.root))
                with m.If(hit):
                    m.d.sync += [prog.eq(pr.data[:pe_l.size]), found.eq(1)]
                    m.next = "GEOM"
                with m.Elif(pidx + 1 >= cfg.n_programs):
                    m.next = "GEOM"
                with m.Else():
                    m.d.sync += pidx.eq(pidx + 1)
                    m.next = "LOOKUP"
            with m.State("GEOM"):
                m.d.comb += [
                    geo.start.eq(1),
                    geo.count.eq(count), geo.elem_shift.eq(eshift),
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
                with m.If(code != Status.OK):
                    m.d.comb += [
                        rej_push.eq(cplq.w_rdy),
                        rej.cookie.eq(desc.cookie), rej.tag.eq(desc.tag), rej.status.eq(code),
                        rej.collective.eq(coll), rej.sq_index.eq(sq_index),
                        rej.cycles.eq(self.cycles[:32] - start_cycle), rej.detail.eq(det),
                    ]
                    with m.If(cplq.w_rdy):
                        m.next = "IDLE"
                with m.Else():
                    m.d.comb += [
                        self.new_cmd.valid.eq(1),
                        self.new_cmd.payload.slot.eq(slot),
                        self.new_cmd.payload.entry.eq(entry),
                    ]
                    with m.If(self.new_cmd.ready):
                        with m.Switch(slot):
                            for i in range(NC):
                                with m.Case(i):
                                    m.d.sync += [s_cookie[i].eq(desc.cookie), s_tag[i].eq(desc.tag),
                                                 s_coll[i].eq(coll), s_index[i].eq(sq_index),
                                                 s_start[i].eq(start_cycle)]
                        m.next = "IDLE"
        return m
