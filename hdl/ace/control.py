"""The control unit: command table, FSMs and issue arbiter, around the named blocks it instantiates
(``ChunkDispatcher``, ``StepDecoder``, ``PartitionManager``, ``OldestFirst``, ``LoadSequencer``). It drives the
datapath (:mod:`.datapath`: SRAM, link ports, units, deposit unit) through its ``dp`` and ``port`` interfaces.

Dataflow of a command (see docs/engine.md):

1. The command processor hands a validated command to :class:`ControlUnit` (``new_cmd``); it sits in the
   command table until all its chunks are done.
2. The dispatcher walks the commands in order and their chunks in order. Chunk ``c`` of a command goes to
   FSM ``(t + c) mod FSM_LIMIT`` (``t`` from the command's tag) and needs a free buffer and room in the phase
   partition; buffers are taken in dispatch order on every rank, which keeps ranks from deadlocking on each
   other's buffers. The FSM number is also the chunk's virtual channel on every link, so a chunk's messages
   land in the landing buffer its FSM reads, on every rank.
3. An FSM runs its chunk's program (the golden library's steps, from the instruction memory): the shared
   decoder fetches each word and computes the block's length and addresses, one step ahead of the step
   waiting for its grant; the arbiter grants a step when every resource it needs is free (output port + a
   whole message of credits for SEND, input port + the awaited header for RECV, and for a forward also the
   forward port and its credits); the unit runs it and reports back. A SEND/RECV may issue behind the FSM's
   own SEND/RECV on the same unit. LOADs are posted (the FSM goes on while the TX DMA works), later steps
   wait for them.
4. STOREs are posted to the store unit (RX DMA) as the FSM meets them, behind the step that wrote their slot,
   so a block goes back to memory as soon as it is final. After the last step the chunk moves to the
   terminal partition (when it has room) and its FSM takes the next chunk. When the last write of the chunk
   is acknowledged its buffer is freed; when all chunks of a command are done it completes.
"""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from ..common.layouts import MAX_PHASES
from .arbiter import OldestFirst
from .bufstate import BufferPool, BufferState
from .datapath import datapath_signature, port_signature
from .cmdtable import CommandTable, cmd_done_layout, cmd_entry_layout
from .decoder import StepDecoder
from .dispatcher import ChunkDispatcher
from .fsm import ChunkFsm, FsmState, chunk_layout
from .geometry import BlockGeometry
from .issue import IssueArbiter
from .jobs import JobBuilder
from .partition import TERMINAL, PartitionManager
from .progmem import ProgramMemories
from .sram import sram_read_layout
from .units import STATUS_SHAPE, LoadSequencer

__all__ = ["ControlUnit", "FsmState", "cmd_entry_layout", "cmd_done_layout", "STALL_CAUSES", "TERMINAL"]
# (cmd_entry_layout and cmd_done_layout live in cmdtable.py; they stay importable from here)


#: Reasons an FSM's ready step waits, in the order of the STALL counter array.
STALL_CAUSES = ("port_busy", "credits", "landing_empty", "dma_busy", "partition_full", "alu_busy",
                "queue_full", "cpl_ring_full")

def _w(n):
    return unsigned(max(1, (n - 1).bit_length()))


class ControlUnit(wiring.Component):
    """The engine's control plane: everything between the command processor and the datapath.

    Ports: ``new_cmd`` (a validated command and the table slot it takes; ``slot_busy`` tells which are free),
    ``cmd_done`` (slot, status, detail when a command finished), the instruction memory and routing table
    write/read ports for the register windows, ``part`` (partition sizes), ``dp`` and ``port`` (the datapath's
    units and, per link port, its units, credits and landing-buffer heads: :func:`~.datapath.datapath_signature`,
    :func:`~.datapath.port_signature`), and counters.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        n_causes = len(STALL_CAUSES)
        super().__init__({
            "enable": In(1),
            "part": In(data.ArrayLayout(unsigned(8), 5)),
            "fsm_limit": In(6),
            "new_cmd": In(stream.Signature(data.StructLayout({"slot": _w(cfg.n_cmds),
                                                              "entry": cmd_entry_layout(cfg)}))),
            "slot_busy": Out(cfg.n_cmds),
            "cmd_done": Out(stream.Signature(cmd_done_layout(cfg))),
            "imem_we": In(2),
            "imem_addr": In(10),
            "imem_wdata": In(64),
            "imem_rdata": Out(64),
            "route_we": In(1),
            "route_addr": In(16),
            "route_wdata": In(4),
            "route_rdata": Out(4),
            "dp": Out(datapath_signature(cfg)), "port": Out(port_signature(cfg)).array(cfg.n_ports),
            # status and counters
            "idle": Out(1),
            "chunks_active": Out(8),
            "fsm_busy": Out(64),
            "steps": Out(64),
            "step_gap": Out(64),
            "stall": Out(data.ArrayLayout(unsigned(32), n_causes)),
            "phase_busy": Out(data.ArrayLayout(unsigned(32), MAX_PHASES)),
        })

    # ------------------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, K, NC, NB = cfg.n_fsms, cfg.n_ports, cfg.n_cmds, cfg.n_buffers
        rl = sram_read_layout(cfg)
        BUF = rl.members["buf"]
        entry_l = cmd_entry_layout(cfg)

        # ---- IMEM and ROUTE (progmem.py), written and read through the register windows ----------------------
        m.submodules.progmem = pmem = ProgramMemories(cfg)
        m.d.comb += [pmem.imem_we.eq(self.imem_we), pmem.imem_addr.eq(self.imem_addr),
                     pmem.imem_wdata.eq(self.imem_wdata), self.imem_rdata.eq(pmem.imem_rdata),
                     pmem.route_we.eq(self.route_we), pmem.route_addr.eq(self.route_addr),
                     pmem.route_wdata.eq(self.route_wdata), self.route_rdata.eq(pmem.route_rdata)]

        # ---- command table (cmdtable.py): entries and progress of the commands in flight ----------------------
        # errors are reported by the sequencer, the decoder, the four kinds of units, the deposit unit and the
        # partition manager (chunk completions)
        m.submodules.cmdtable = table = CommandTable(cfg, n_reports=2 * K + 6)
        entries, busy = table.entries, table.busy
        wiring.connect(m, table.done, wiring.flipped(self.cmd_done))
        m.d.comb += self.slot_busy.eq(busy)

        def entry_of(idx, name):
            """The command table entry ``idx`` (a signal) as a combinational view."""
            out = Signal(entry_l, name=name)
            with m.Switch(idx):
                for i in range(NC):
                    with m.Case(i):
                        m.d.comb += out.eq(entries[i])
            return out

        def geometry_of(geo, e, chunk, block):
            """Drive BlockGeometry ``geo`` with command entry ``e`` and (``chunk``, ``block``)."""
            return [geo.geom.eq(e.geom), geo.count.eq(e.count), geo.elem_shift.eq(e.elem_shift),
                    geo.chunk.eq(chunk), geo.block.eq(block), geo.in_base.eq(e.src), geo.out_base.eq(e.dst),
                    geo.in_seg.eq(e.in_seg), geo.out_seg.eq(e.out_seg)]

        # errors reported this cycle: (valid, cmd, status, detail) - the first error of a command is kept
        error_reports = []

        def report(valid, cmd, code, det=0):
            error_reports.append((valid, cmd, code, det))

        # ---- the datapath's units, ports and deposit unit (datapath.py), as the FSMs see them ---------------
        dp = self.dp
        ports = self.port
        # the load sequencer and its block geometry
        m.submodules.loadseq = seqr = LoadSequencer(cfg)
        m.submodules.load_geo = lgeo = BlockGeometry(cfg)
        ls_entry = entry_of(seqr.geo_cmd, "ls_entry")
        m.d.comb += geometry_of(lgeo, ls_entry, seqr.geo_chunk, seqr.geo_block)
        m.d.comb += [
            seqr.geo_nbytes.eq(lgeo.nbytes), seqr.geo_beats.eq(lgeo.beats), seqr.geo_addr.eq(lgeo.in_addr),
            seqr.slot_beats.eq(ls_entry.geom.slot_beats),
            pmem.seq_imem_addr.eq(seqr.imem_addr), seqr.imem_data.eq(pmem.seq_imem_data),
        ]
        report(seqr.error.valid, seqr.error.cmd, Status.ILLEGAL_INSTRUCTION)

        # ---- buffers and partitions ------------------------------------------------------------------------
        # chunks per partition and the moves between them; a chunk is done (its buffer free again) when its FSM
        # handed it over and every STORE it posted is acknowledged
        m.submodules.partitions = pm = PartitionManager(cfg)
        cd = Signal(data.StructLayout({"valid": 1, "cmd": _w(NC), "buf": BUF, "status": STATUS_SHAPE}))
        m.d.comb += [cd.valid.eq(pm.done.valid), cd.cmd.eq(pm.done.payload.cmd), cd.buf.eq(pm.done.payload.buf),
                     cd.status.eq(pm.done.payload.status)]
        m.submodules.pool = pool = BufferPool(cfg)
        m.d.comb += [pool.free.valid.eq(cd.valid), pool.free.buf.eq(cd.buf)]
        used, used_term = pm.used, pm.used_term

        # ---- the FSMs (fsm.py) and their chunk queues ---------------------------------------------------------
        q_layout = chunk_layout(cfg)
        fsms, queues = [], []
        for f in range(F):
            fsms.append(ChunkFsm(cfg))
            queues.append(fifo.SyncFIFOBuffered(width=q_layout.size, depth=2))
            m.submodules[f"fsm{f}"], m.submodules[f"fsmq{f}"] = fsms[f], queues[f]
            m.d.comb += [fsms[f].chunk.valid.eq(queues[f].r_rdy), fsms[f].chunk.payload.eq(queues[f].r_data),
                         queues[f].r_en.eq(fsms[f].chunk.ready)]
        ctx = [fsm.ctx for fsm in fsms]
        views = table.views            # each FSM's row of the view memory (cmdtable.py)
        for f, fsm in enumerate(fsms):
            m.d.comb += [table.view_addr[f].eq(fsm.view_addr), fsm.view.eq(views[f])]

        # ---- dispatcher ------------------------------------------------------------------------------------
        m.submodules.dispatcher = disp = ChunkDispatcher(cfg)
        new_slot = self.new_cmd.payload.slot
        m.d.comb += [
            self.new_cmd.ready.eq(disp.cmd.ready),
            disp.cmd.valid.eq(self.new_cmd.valid),
            disp.cmd.payload.eq(new_slot),
        ]
        m.d.comb += [table.alloc.valid.eq(self.new_cmd.valid & self.new_cmd.ready),
                     table.alloc.slot.eq(new_slot), table.alloc.entry.eq(self.new_cmd.payload.entry)]

        d_entry = entry_of(disp.e_cmd, "d_entry")
        dispatch = disp.chunk.valid
        dc = disp.chunk.payload
        m.d.comb += [
            disp.e.eq(d_entry), disp.enable.eq(self.enable), disp.fsm_limit.eq(self.fsm_limit),
            disp.buf.valid.eq(pool.take.valid), disp.buf.payload.eq(pool.take.payload),
            pool.take.ready.eq(disp.buf.ready),
            disp.room.eq(pm.room0),
            disp.q_ready.eq(Cat(*[q.w_rdy for q in queues])),
        ]
        dispatch_stall_part = disp.stall_part
        dispatch_stall_q = disp.stall_queue
        qin = Signal(q_layout)
        m.d.comb += [qin.cmd.eq(dc.cmd), qin.chunk.eq(dc.chunk), qin.buf.eq(dc.buf), qin.seq.eq(dc.seq)]
        for f in range(F):
            m.d.comb += [queues[f].w_data.eq(qin), queues[f].w_en.eq(dispatch & (dc.fsm == f))]
        # every dispatched chunk is queued for the load sequencer too (its LOADs go as soon as it has a buffer;
        # the prefetch queue has NB entries, one per buffer: it is never full when a buffer is free)
        pf_layout = data.StructLayout({"cmd": _w(NC), "chunk": unsigned(16), "buf": BUF, "first": unsigned(11),
                                       "end": unsigned(11)})
        m.submodules.prefetch = prefetch = fifo.SyncFIFOBuffered(width=pf_layout.size, depth=NB)
        pf_in = Signal(pf_layout)
        m.d.comb += [
            pf_in.cmd.eq(dc.cmd), pf_in.chunk.eq(dc.chunk), pf_in.buf.eq(dc.buf),
            pf_in.first.eq(dc.first), pf_in.end.eq(dc.end),
            prefetch.w_en.eq(dispatch), prefetch.w_data.eq(pf_in),
            seqr.entry.valid.eq(prefetch.r_rdy), seqr.entry.payload.eq(prefetch.r_data),
            prefetch.r_en.eq(seqr.entry.ready),
        ]
        m.d.comb += table.dispatched.eq(disp.dispatched)

        # ---- steps: decode, issue, jobs ----------------------------------------------------------------------
        # per chunk buffer (bufstate.py): the slots still to be loaded (a step waits only for its own slot),
        # the count lane, the STOREs not yet acknowledged
        m.submodules.buffers = bufs = BufferState(cfg)
        loading = bufs.loading

        # decoder: the oldest FSM that has room for a decoded step and none in the decoder is picked (stage
        # 0); its step comes back three cycles later, into `step` if that is free (or freed in that cycle), else
        # into `nstep`. So an FSM decodes its next step while the current one waits for its grant or transfers.
        m.submodules.decoder = dec = StepDecoder(cfg)
        pick = Signal(_w(F))
        pick_any = Signal()
        self._oldest_first(m, "dec_pick", Cat(*[fsm.fetch for fsm in fsms]), [c.seq for c in ctx], pick, pick_any)
        m.d.comb += [dec.req.valid.eq(pick_any), dec.req.payload.fsm.eq(pick)]
        with m.Switch(pick):
            for f, c in enumerate(ctx):
                with m.Case(f):
                    m.d.comb += [dec.req.payload.cmd.eq(c.cmd), dec.req.payload.chunk.eq(c.chunk),
                                 dec.req.payload.buf.eq(c.buf), dec.req.payload.pc.eq(fsms[f].pc)]
        m.d.comb += [
            pmem.dec_imem_addr.eq(dec.imem_addr), dec.imem_data.eq(pmem.dec_imem_data),
            pmem.dec_route_addr.eq(dec.route_addr), dec.route_data.eq(pmem.dec_route_data),
            dec.e1.eq(entry_of(dec.e1_cmd, "dec1_entry")),
            dec.e2.eq(entry_of(dec.e2_cmd, "dec2_entry")),
            dec.e3.eq(entry_of(dec.e3_cmd, "dec3_entry")),
        ]
        with m.Switch(dec.loading_buf):
            for b in range(NB):
                with m.Case(b):
                    m.d.comb += dec.loading.eq(loading[b])
        for f, fsm in enumerate(fsms):       # the decoder writes back to FSM dec.o.fsm three cycles later
            m.d.comb += [fsm.picked.eq(pick_any & (pick == f)),
                         fsm.wb.valid.eq(dec.o.valid & (dec.o.payload.fsm == f)), fsm.wb.step.eq(dec.o.payload.step)]
        report(dec.o.valid & dec.o.payload.step.illegal, dec.o.payload.cmd, Status.ILLEGAL_INSTRUCTION,
               dec.o.payload.word_lo)

        # issue arbiter (issue.py): each FSM offers its current step when it has no hazard with the steps it has
        # in flight; the arbiter checks the step's resources and grants the oldest chunk's
        m.submodules.issue = iss = IssueArbiter(cfg)
        m.d.comb += [iss.load_ready.eq(dp.load_job.ready), iss.store_ready.eq(dp.store_job.ready)]
        for k, p in enumerate(ports):
            st_k = iss.port[k]
            m.d.comb += [
                st_k.send_ready.eq(p.send_job.ready), st_k.recv_ready.eq(p.recv_job.ready), st_k.dep_req.eq(p.dep_req),
                st_k.order_ready.eq(p.order.ready), st_k.tx_room.eq(p.tx_room),
                st_k.beat_credits.eq(p.beat_credits), st_k.hdr_credits.eq(p.hdr_credits),
                st_k.hdr_valid.eq(p.hdr_valid), st_k.unpopped.eq(p.unpopped), st_k.heads.eq(p.heads),
            ]
        for f, (fsm, c) in enumerate(zip(fsms, ctx)):
            r = iss.fsm[f]
            m.d.comb += [r.ready.eq(fsm.offer.ready), r.behind.eq(fsm.offer.behind), r.step.eq(fsm.offer.step),
                         r.seq.eq(c.seq), r.tag.eq(views[f].tag), r.chunk.eq(c.chunk), r.phase.eq(c.phase)]
        gsel, gany = iss.grant.fsm, iss.grant.valid

        # the granted step becomes a unit job (jobs.py)
        m.submodules.jobs = jb = JobBuilder(cfg)
        g, g_view = jb.step, Signal.like(views[0])
        with m.Switch(gsel):
            for f, c in enumerate(ctx):
                with m.Case(f):
                    m.d.comb += [g.eq(fsms[f].offer.step), jb.ctx.eq(c), g_view.eq(views[f])]
        for k, p in enumerate(ports):
            with m.If(g.port == k):       # the count of the message a granted RECV takes
                m.d.comb += jb.msg_count.eq(p.heads[iss.grant.ch].count)
            wiring.connect(m, jb.send_job[k], wiring.flipped(p.send_job))
            wiring.connect(m, jb.recv_job[k], wiring.flipped(p.recv_job))
            m.d.comb += [p.reserve.eq(jb.reserve[k]),
                         p.order.valid.eq(jb.order[k].valid), p.order.payload.src.eq(jb.order[k].src),
                         p.order.payload.empty.eq(jb.order[k].empty)]
        m.d.comb += [
            jb.grant.eq(iss.grant), jb.rank.eq(g_view.rank), jb.tag.eq(g_view.tag), jb.dtype.eq(g_view.dtype),
            jb.op.eq(g_view.op), jb.null.eq(g_view.null), jb.slot_count.eq(bufs.cnt),
            bufs.cnt_buf.eq(jb.ctx.buf), bufs.cnt_slot.eq(g.slot),
            jb.seq_zero.eq(entry_of(seqr.issue.payload.cmd, "seq_entry").null),
            table.fold.eq(jb.fold),
        ]
        wiring.connect(m, seqr.issue, jb.seq_load)
        wiring.connect(m, jb.load_job, wiring.flipped(dp.load_job))
        wiring.connect(m, jb.store_job, wiring.flipped(dp.store_job))
        report(dp.store_done.valid & (dp.store_done.status != 0), dp.store_done.cmd, dp.store_done.status)
        fsm_load = jb.fsm_load
        m.d.comb += [
            bufs.new.valid.eq(dispatch), bufs.new.buf.eq(dc.buf), bufs.new.load_mask.eq(d_entry.load_mask),
            bufs.new.null.eq(d_entry.null),
            bufs.load_issue.valid.eq(fsm_load), bufs.load_issue.buf.eq(jb.ctx.buf), bufs.load_issue.slot.eq(g.slot),
            bufs.load_done.valid.eq(dp.load_done.valid), bufs.load_done.buf.eq(dp.load_done.buf),
            bufs.load_done.slot.eq(dp.load_done.slot), bufs.skip.eq(seqr.skip), bufs.recv.eq(jb.recv),
            bufs.store_issue.valid.eq(jb.store_job.valid), bufs.store_issue.buf.eq(jb.ctx.buf),
            bufs.store_done.valid.eq(dp.store_done.valid), bufs.store_done.buf.eq(dp.store_done.buf),
        ]

        # unit completions -> FSMs
        unit_dones = [p.send_done for p in ports] + [p.recv_done for p in ports]
        for u in unit_dones:
            report(u.valid & (u.status != 0), u.cmd, u.status)
        report(dp.load_done.valid & (dp.load_done.status != 0), dp.load_done.cmd, dp.load_done.status)

        # partition moves (PartitionManager): one per cycle, oldest chunk first; a chunk moves on at the end of a
        # phase that is not its last, and to the terminal partition after its last step once no LOAD into its
        # buffer is outstanding
        active = Cat(*[fsm.state != FsmState.IDLE for fsm in fsms])
        m.d.comb += [pm.part.eq(self.part), pm.dispatch.eq(dispatch), pm.active.eq(active),
                     pm.stores_pending.eq(bufs.stores_pending)]
        for f, (fsm, c) in enumerate(zip(fsms, ctx)):
            m.d.comb += [
                pm.at_end[f].eq(fsm.at_end),
                pm.handoff[f].eq((fsm.state == FsmState.HANDOFF) & ~bufs.buf_loading.bit_select(c.buf, 1)),
                pm.seq[f].eq(c.seq), pm.phase[f].eq(c.phase), pm.buf[f].eq(c.buf), pm.cmd[f].eq(c.cmd),
                pm.status[f].eq(c.status),
                fsm.move.eq(pm.move_valid & (pm.move_fsm == f)), fsm.phase_wait.eq(pm.phase_wait[f]),
                # the FSM's step events: its grant, its own LOAD granted now, LOADs that ended, a unit's done
                fsm.granted.eq(gany & (gsel == f)),
                fsm.own_load.valid.eq(fsm_load & (gsel == f)), fsm.own_load.slot.eq(g.slot),
                fsm.filled[0].valid.eq(dp.load_done.valid), fsm.filled[0].buf.eq(dp.load_done.buf),
                fsm.filled[0].slot.eq(dp.load_done.slot),
                fsm.filled[1].valid.eq(seqr.skip.valid), fsm.filled[1].buf.eq(seqr.skip.buf),
                fsm.filled[1].slot.eq(seqr.skip.slot),
            ]
            for u in unit_dones:
                with m.If(u.valid & (u.fsm == f)):
                    m.d.comb += [fsm.unit_done.valid.eq(1), fsm.unit_done.status.eq(u.status)]

        # ---- deposit unit (PUT messages of the asynchronous all-to-all, in the datapath) ---------------------
        # it looks a deposit's (chunk, block) up in a geometry unit of its own and counts each deposit written
        # against its command
        m.submodules.dep_geo = pgeo = BlockGeometry(cfg)
        dep_entry = entry_of(dp.dep_geo_cmd, "dep_entry")
        m.d.comb += geometry_of(pgeo, dep_entry, dp.dep_geo_chunk, dp.dep_geo_block)
        m.d.comb += [dp.dep_geo_addr.eq(pgeo.out_addr), dp.dep_geo_nbytes.eq(pgeo.nbytes)]
        for i in range(NC):
            m.d.comb += [dp.cmd_tag[i].eq(entries[i].tag), dp.cmd_live[i].eq(busy[i] & (entries[i].arrivals != 0))]
        report(dp.arrived.valid & (dp.arrived.status != 0), dp.arrived.cmd, dp.arrived.status)

        # ---- command completion --------------------------------------------------------------------------
        report(cd.valid & (cd.status != 0), cd.cmd, cd.status)
        m.d.comb += [table.chunk_done.valid.eq(cd.valid), table.chunk_done.cmd.eq(cd.cmd),
                     table.arrived.valid.eq(dp.arrived.valid), table.arrived.cmd.eq(dp.arrived.cmd)]
        assert len(error_reports) == len(table.reports)
        for r, (valid, cmd, code, det) in zip(table.reports, error_reports):
            m.d.comb += [r.valid.eq(valid), r.cmd.eq(cmd), r.status.eq(code), r.detail.eq(det)]

        # ---- status and counters ---------------------------------------------------------------------------
        n_active = sum(a for a in active)
        m.d.comb += [
            self.idle.eq((busy == 0) & (used_term == 0) & (active == 0) & dp.dep_idle),
            self.chunks_active.eq(sum(used) + used_term),
        ]
        m.d.sync += [
            self.fsm_busy.eq(self.fsm_busy + n_active),
            self.steps.eq(self.steps + gany),
            self.step_gap.eq(self.step_gap + sum(fsm.gap for fsm in fsms)),
        ]
        # per program phase: cycles a chunk was in it (the datapath counts the phase's flits)
        for p in range(MAX_PHASES):
            m.d.sync += self.phase_busy[p].eq(self.phase_busy[p] + (used[p] != 0))
        causes = {
            "port_busy": iss.cause_port.any(), "credits": iss.cause_cred.any(),
            "landing_empty": iss.cause_land.any(), "dma_busy": iss.cause_dma.any(),
            "partition_full": dispatch_stall_part | pm.phase_wait.any() | pm.handoff_wait.any(),
            "alu_busy": Const(0), "queue_full": dispatch_stall_q, "cpl_ring_full": Const(0),
        }
        for i, name in enumerate(STALL_CAUSES):
            with m.If(causes[name]):
                m.d.sync += self.stall[i].eq(self.stall[i] + 1)
        return m

    @staticmethod
    def _oldest_first(m, name, req, seqs, sel, any_):
        """``sel`` = the requester whose chunk was dispatched first, ``any_`` if there is one (an
        :class:`~.arbiter.OldestFirst` named ``name``)."""
        arb = OldestFirst(len(seqs))
        m.submodules[name] = arb
        m.d.comb += [arb.req.eq(req), sel.eq(arb.sel), any_.eq(arb.valid)]
        m.d.comb += [arb.seq[i].eq(s) for i, s in enumerate(seqs)]
