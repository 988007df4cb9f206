"""The control unit: command table, FSMs and issue arbiter, around the named blocks it instantiates
(``CommandTable``, ``ChunkDispatcher``, ``FsmBank``, ``StepDecoder``, ``IssueArbiter``, ``IssueStage``,
``JobBuilder``, ``PartitionManager``, ``BufferPool``, ``BufferState``, ``LoadSequencer``). It drives the
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

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from ..common.layouts import MAX_PHASES
from .bufstate import BufferPool, BufferState
from .counters import ControlCounters
from .cmdtable import CommandTable, cmd_done_layout, cmd_entry_layout
from .datapath import datapath_signature, port_signature
from .decoder import StepDecoder
from .dispatcher import ChunkDispatcher
from .fsm import FsmState
from .fsmbank import FsmBank
from .geometry import BlockGeometry
from .issue import MATCH_FIELDS, IssueArbiter
from .issuestage import STEP_FIELDS, IssueStage
from .jobs import JobBuilder
from .partition import PartitionManager
from .progmem import ProgramMemories
from .regs import N_PARTITIONS, STALL_CAUSES
from .units import LoadSequencer

__all__ = ["ControlUnit"]
# (cmd_entry_layout and cmd_done_layout live in cmdtable.py, STALL_CAUSES in regs.py: reasons an FSM's ready
# step waits, in the order of the STALL counter array; they stay importable from here)


def _w(n):
    return unsigned(max(1, (n - 1).bit_length()))


class ControlUnit(wiring.Component):
    """The engine's control plane: everything between the command processor and the datapath.

    Ports: ``new_cmd`` (a validated command and the table slot it takes; ``slot_busy`` tells which are free;
    ``win_busy``, registered: the memory windows that hold a buffer of a command in the table),
    ``cmd_done`` (slot, status, detail when a command finished), the instruction memory and routing table
    write/read ports for the register windows, ``part`` (partition sizes), ``step_timeout`` (STEP_TIMEOUT:
    cycles a step may wait for its grant before its FSM gives it up), ``dp`` and ``port`` (the datapath's units
    and, per link port, its units, credits and landing-buffer heads: :func:`~.datapath.datapath_signature`,
    :func:`~.datapath.port_signature`), and counters.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        n_causes = len(STALL_CAUSES)
        super().__init__({
            "enable": In(1),
            "part": In(data.ArrayLayout(unsigned(8), N_PARTITIONS)),
            "fsm_limit": In(6),
            "step_timeout": In(32),
            "new_cmd": In(stream.Signature(data.StructLayout({"slot": _w(cfg.n_cmds),
                                                              "entry": cmd_entry_layout(cfg)}))),
            "slot_busy": Out(cfg.n_cmds),
            "win_busy": Out(cfg.n_windows),
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
        K, NC = cfg.n_ports, cfg.n_cmds
        dp, ports = self.dp, self.port

        # ---- IMEM and ROUTE (progmem.py), written and read through the register windows ----------------------
        m.submodules.progmem = pmem = ProgramMemories(cfg)
        m.d.comb += [pmem.imem_we.eq(self.imem_we), pmem.imem_addr.eq(self.imem_addr),
                     pmem.imem_wdata.eq(self.imem_wdata), self.imem_rdata.eq(pmem.imem_rdata),
                     pmem.route_we.eq(self.route_we), pmem.route_addr.eq(self.route_addr),
                     pmem.route_wdata.eq(self.route_wdata), self.route_rdata.eq(pmem.route_rdata)]

        # ---- command table (cmdtable.py): entries and progress of the commands in flight ----------------------
        # errors are reported by the sequencer, the decoder, the four kinds of units, the deposit unit and the
        # partition manager (chunk completions); the shared readers of its entries look them up by slot
        m.submodules.cmdtable = table = CommandTable(cfg, n_reports=2 * K + 6, n_lookups=len(_LOOKUPS))
        entries, busy = table.entries, table.busy
        wiring.connect(m, table.done, wiring.flipped(self.cmd_done))
        m.d.comb += self.slot_busy.eq(busy)

        def entry_of(slot, reader):
            """Command table entry ``slot`` (a signal), read by ``reader`` (one of ``_LOOKUPS``)."""
            m.d.comb += table.lookup_addr[_LOOKUPS.index(reader)].eq(slot)
            return table.lookup[_LOOKUPS.index(reader)]

        error_reports = []          # (valid, cmd, status, detail) this cycle: a command keeps its first error

        def report(valid, cmd, code, det=0):
            error_reports.append((valid, cmd, code, det))

        # ---- the load sequencer and its block geometry ------------------------------------------------------
        m.submodules.loadseq = seqr = LoadSequencer(cfg)
        m.submodules.load_geo = lgeo = BlockGeometry(cfg)
        ls_entry = entry_of(seqr.geo_cmd, "load")
        m.d.comb += _drive_geometry(lgeo, ls_entry, seqr.geo_chunk, seqr.geo_block)
        m.d.comb += [
            seqr.geo_nbytes.eq(lgeo.nbytes), seqr.geo_empty.eq(lgeo.empty), seqr.geo_beats.eq(lgeo.beats),
            seqr.geo_addr.eq(lgeo.in_addr),
            seqr.slot_beats.eq(ls_entry.geom.slot_beats),
            pmem.seq_imem_addr.eq(seqr.imem_addr), seqr.imem_data.eq(pmem.seq_imem_data),
        ]
        report(seqr.error.valid, seqr.error.cmd, Status.ILLEGAL_INSTRUCTION)

        # ---- buffers and partitions ------------------------------------------------------------------------
        # chunks per partition and the moves between them; a chunk is done (its buffer free again) when its FSM
        # handed it over and every STORE it posted is acknowledged
        m.submodules.partitions = pm = PartitionManager(cfg)
        cd = pm.done
        m.submodules.pool = pool = BufferPool(cfg)
        m.d.comb += [pool.free.valid.eq(cd.valid), pool.free.buf.eq(cd.payload.buf)]
        # per chunk buffer (bufstate.py): the slots still to be loaded, the count lane, unacknowledged STOREs
        m.submodules.buffers = bufs = BufferState(cfg)

        # ---- the FSMs (fsmbank.py) --------------------------------------------------------------------------
        m.submodules.fsms = bank = FsmBank(cfg)
        m.d.comb += [table.view_addr.eq(bank.view_addr), bank.views.eq(table.views),
                     bank.timeout.eq(self.step_timeout)]

        # ---- dispatcher: chunks to the FSMs' queues and to the load sequencer's prefetch queue ---------------
        m.submodules.dispatcher = disp = ChunkDispatcher(cfg)
        new_slot = self.new_cmd.payload.slot
        m.d.comb += [self.new_cmd.ready.eq(disp.cmd.ready), disp.cmd.valid.eq(self.new_cmd.valid),
                     disp.cmd.payload.eq(new_slot)]
        m.d.comb += [table.alloc.valid.eq(self.new_cmd.valid & self.new_cmd.ready),
                     table.alloc.slot.eq(new_slot), table.alloc.entry.eq(self.new_cmd.payload.entry),
                     bank.cmd_new.valid.eq(table.alloc.valid), bank.cmd_new.slot.eq(new_slot)]
        d_entry = entry_of(disp.e_cmd, "dispatch")
        dispatch, dc = disp.chunk.valid, disp.chunk.payload
        m.d.comb += [
            disp.e.eq(d_entry), disp.enable.eq(self.enable), disp.fsm_limit.eq(self.fsm_limit),
            disp.buf.valid.eq(pool.take.valid), disp.buf.payload.eq(pool.take.payload),
            pool.take.ready.eq(disp.buf.ready), disp.room.eq(pm.room0), disp.q_ready.eq(bank.q_ready),
            bank.enq.valid.eq(dispatch), bank.enq.fsm.eq(dc.fsm), table.dispatched.eq(disp.dispatched),
            bank.enq.chunk.cmd.eq(dc.cmd), bank.enq.chunk.chunk.eq(dc.chunk), bank.enq.chunk.buf.eq(dc.buf),
            bank.enq.chunk.seq.eq(dc.seq), bank.enq.chunk.final.eq(dc.final),
        ]
        wiring.connect(m, disp.load, seqr.entry)      # the load sequencer's prefetch queue

        # ---- steps: decode (one step ahead of the step waiting for its grant), issue, unit jobs --------------
        m.submodules.decoder = dec = StepDecoder(cfg)
        wiring.connect(m, bank.dec_req, dec.req)
        wiring.connect(m, dec.o, bank.dec_wb)
        m.d.comb += [
            pmem.dec_imem_addr.eq(dec.imem_addr), dec.imem_data.eq(pmem.dec_imem_data),
            pmem.dec_route_addr.eq(dec.route_addr), dec.route_data.eq(pmem.dec_route_data),
            dec.e1.eq(entry_of(dec.e1_cmd, "dec1")),
            bufs.probe.eq(dec.probe), dec.probe_next.eq(bufs.probe_next),
        ]
        # the illegal-step report a cycle late (off the decoder's last stage, where the legality is decided): the
        # step retires at its grant, cycles after this, so its command cannot finish without the report
        ill_v, ill_cmd, ill_word = Signal(), Signal.like(dec.o.payload.cmd), Signal(32)
        m.d.sync += [ill_v.eq(dec.o.valid & dec.o.payload.step.illegal), ill_cmd.eq(dec.o.payload.cmd),
                     ill_word.eq(dec.o.payload.word_lo)]
        report(ill_v, ill_cmd, Status.ILLEGAL_INSTRUCTION, ill_word)

        # issue arbiter (issue.py): the oldest chunk's step whose resources are free; the issue stage
        # (issuestage.py) registers the grant, and holds back what its job takes as it goes out
        m.submodules.issue = iss = IssueArbiter(cfg)
        m.submodules.istage = ist = IssueStage(cfg)
        m.d.comb += [iss.load_ready.eq(dp.load_room2), iss.store_ready.eq(dp.store_job.ready),
                     iss.hold.eq(ist.hold_fsm), iss.held.eq(ist.take_q),
                     iss.fsm.eq(bank.offers), iss.age.eq(bank.age),
                     ist.grant.eq(iss.grant), ist.grant_oh.eq(iss.grant_oh), ist.takes.eq(iss.takes),
                     ist.cand.eq(iss.cand),
                     bank.grant.eq(ist.o.oh)]
        m.d.comb += [t for f in range(cfg.n_fsms)
                     for t in (ist.status[f].eq(bank.ctx[f].status), ist.counts[f].eq(bank.counts[f]),
                               ist.steps[f].eq(bank.offers[f].step))]
        # the registered grant becomes a unit job (jobs.py), from the granted FSM's registers
        m.submodules.jobs = jb = JobBuilder(cfg)
        js, g, gv = ist.o, bank.g_step, bank.g_view
        for k, p in enumerate(ports):
            _wire_port(m, p, iss, jb, k)
        m.d.comb += [
            jb.grant.valid.eq(js.grant.valid), jb.grant.fsm.eq(js.grant.fsm), jb.grant.ch.eq(js.grant.ch),
            jb.take.eq(ist.take_q),
            jb.msg_count.eq(js.grant.count), jb.sum_count.eq(js.sum_count), jb.step.eq(g), jb.ctx.eq(bank.g_ctx),
            jb.ctx.status.eq(js.status),
            # (the fields the issue stage registers override the FSM's: the same values, from flip-flops)
            *[getattr(jb.step, n).eq(getattr(js.step, n)) for n in STEP_FIELDS],
            jb.rank.eq(gv.rank), jb.tag.eq(gv.tag),
            jb.dtype.eq(gv.dtype), jb.op.eq(gv.op), jb.null.eq(gv.null), jb.slot_count.eq(js.slot_count),
            bank.recv_count.eq(jb.recv),
            jb.seq_zero.eq(entry_of(seqr.issue.payload.cmd, "seq").null),
            table.fold.eq(jb.fold), bank.own_load.valid.eq(jb.fsm_load), bank.own_load.fsm.eq(js.grant.fsm),
            bank.own_load.slot.eq(js.step.slot),
        ]
        wiring.connect(m, seqr.issue, jb.seq_load)
        wiring.connect(m, jb.load_job, wiring.flipped(dp.load_job))
        wiring.connect(m, jb.store_job, wiring.flipped(dp.store_job))
        m.d.comb += _track_buffers(bufs, bank, jb, dp, seqr, disp.chunk)
        report(dp.store_done.valid & (dp.store_done.status != 0), dp.store_done.cmd, dp.store_done.status)
        report(dp.load_done.valid & (dp.load_done.status != 0), dp.load_done.cmd, dp.load_done.status)
        for i, u in enumerate([p.send_done for p in ports] + [p.recv_done for p in ports]):
            report(u.valid & (u.status != 0), u.cmd, u.status)
            m.d.comb += [bank.unit_done[i].valid.eq(u.valid), bank.unit_done[i].fsm.eq(u.fsm),
                         bank.unit_done[i].status.eq(u.status)]

        # partition moves (PartitionManager): one per cycle, oldest chunk first; a chunk moves on at the end of a
        # phase that is not its last, and to the terminal partition after its last step once no LOAD into its
        # buffer is outstanding
        m.d.comb += [pm.part.eq(self.part), pm.dispatch.eq(dispatch), pm.active.eq(bank.active),
                     pm.stores_pending.eq(bufs.stores_pending), pm.at_end.eq(bank.at_end),
                     pm.handoff.eq(bank.handoff), bank.buf_loading.eq(bufs.buf_loading),
                     bank.move.valid.eq(pm.move_valid), bank.move.fsm.eq(pm.move_fsm),
                     bank.phase_wait.eq(pm.phase_wait), pm.ctx.eq(bank.ctx), pm.age.eq(bank.age)]

        # ---- deposit unit (PUT messages of the asynchronous all-to-all, in the datapath) ---------------------
        # it looks a deposit's (chunk, block) up in a geometry unit of its own and counts each deposit written
        # against its command
        m.submodules.dep_geo = pgeo = BlockGeometry(cfg)
        m.d.comb += _drive_geometry(pgeo, entry_of(dp.dep_geo_cmd, "deposit"), dp.dep_geo_chunk, dp.dep_geo_block)
        m.d.comb += [dp.dep_geo_addr.eq(pgeo.out_addr), dp.dep_geo_nbytes.eq(pgeo.nbytes),
                     dp.dep_geo_in_range.eq(pgeo.in_range)]
        for i in range(NC):
            m.d.comb += [dp.cmd_tag[i].eq(entries[i].tag), dp.cmd_live[i].eq(busy[i] & (entries[i].arrivals != 0))]
        # the memory windows holding a buffer of a command in the table: the register bank refuses host writes
        # to them (a window moved under a running command would let its DMA reach memory no window allows)
        win_busy = 0
        for i in range(cfg.n_cmds):
            win_busy = win_busy | Mux(busy[i], entries[i].windows, 0)
        m.d.sync += self.win_busy.eq(win_busy)
        report(dp.arrived.valid & (dp.arrived.status != 0), dp.arrived.cmd, dp.arrived.status)

        # ---- command completion --------------------------------------------------------------------------
        # the command table counts a chunk's completion (and takes its error) a cycle after its buffer is freed:
        # the partition manager's search of the finished buffers stops at a register
        cd_v, cd_cmd, cd_status = Signal(), Signal.like(cd.payload.cmd), Signal.like(cd.payload.status)
        m.d.sync += [cd_v.eq(cd.valid), cd_cmd.eq(cd.payload.cmd), cd_status.eq(cd.payload.status)]
        report(cd_v & (cd_status != 0), cd_cmd, cd_status)
        m.d.comb += [table.chunk_done.valid.eq(cd_v), table.chunk_done.cmd.eq(cd_cmd),
                     table.arrived.valid.eq(dp.arrived.valid), table.arrived.cmd.eq(dp.arrived.cmd)]
        assert len(error_reports) == len(table.reports)
        for r, (valid, cmd, code, det) in zip(table.reports, error_reports):
            m.d.comb += [r.valid.eq(valid), r.cmd.eq(cmd), r.status.eq(code), r.detail.eq(det)]

        # ---- status and counters (counters.py) ----------------------------------------------------------------
        m.d.comb += self.idle.eq((busy == 0) & (pm.used_term == 0) & (bank.active == 0) & dp.dep_idle)
        # a status field read by the host: a cycle late, off the partitions' counters into the CSR read path
        m.d.sync += self.chunks_active.eq(sum(pm.used) + pm.used_term)
        m.submodules.counters = cnt = ControlCounters(cfg)
        m.d.sync += _count(cnt, bank, iss, ist, disp, pm)      # a cycle late: off the grant's and stall paths
        m.d.comb += [self.fsm_busy.eq(cnt.fsm_busy), self.steps.eq(cnt.steps), self.step_gap.eq(cnt.step_gap),
                     self.stall.eq(cnt.stall), self.phase_busy.eq(cnt.phase_busy)]
        return m


#: The shared readers of the command table's entries, one combinational lookup each.
_LOOKUPS = ("load", "dispatch", "dec1", "seq", "deposit")


def _count(cnt, bank, iss, ist, disp, pm):
    """What :class:`~.counters.ControlCounters` ``cnt`` counts: the FSM bank's busy and idle FSMs, the grants
    (as the issue stage ``ist`` registers them), the issue arbiter's stall causes, the dispatcher's and the
    partition manager's waits. The caller registers them (the counters count a cycle late)."""
    c = cnt.cause
    return [
        cnt.active.eq(bank.active), cnt.step.eq(ist.o.grant.valid), cnt.gap.eq(bank.gap),
        cnt.phase_used.eq(Cat(*[u != 0 for u in pm.used])),
        c.port_busy.eq(iss.cause_port.any()), c.credits.eq(iss.cause_cred.any()),
        c.landing_empty.eq(iss.cause_land.any()), c.dma_busy.eq(iss.cause_dma.any()),
        c.partition_full.eq(disp.stall_part | pm.phase_wait.any() | pm.handoff_wait.any()),
        c.queue_full.eq(disp.stall_queue),      # (alu_busy and cpl_ring_full: never, in this engine)
    ]


def _track_buffers(bufs, bank, jb, dp, seqr, chunk):
    """What :class:`~.bufstate.BufferState` ``bufs`` tracks per chunk buffer: a dispatched ``chunk`` (its
    command's LOAD mask), the LOADs job builder ``jb`` issues and the datapath ``dp`` finishes or
    the load sequencer ``seqr`` skips, and STOREs; and the LOADs that ended this cycle,
    which reach FSM bank ``bank``."""
    g, dc = jb.step, chunk.payload
    return [
        bufs.new.valid.eq(chunk.valid), bufs.new.buf.eq(dc.buf), bufs.new.load_mask.eq(dc.load_mask),
        bufs.load_issue.valid.eq(jb.fsm_load), bufs.load_issue.buf.eq(jb.ctx.buf), bufs.load_issue.slot.eq(g.slot),
        bufs.load_done.valid.eq(dp.load_done.valid), bufs.load_done.buf.eq(dp.load_done.buf),
        bufs.load_done.slot.eq(dp.load_done.slot), bufs.skip.eq(seqr.skip),
        bufs.store_issue.valid.eq(jb.store_job.valid), bufs.store_issue.buf.eq(jb.ctx.buf),
        bufs.store_done.valid.eq(dp.store_done.valid), bufs.store_done.buf.eq(dp.store_done.buf),
        bank.filled[0].valid.eq(dp.load_done.valid), bank.filled[0].buf.eq(dp.load_done.buf),
        bank.filled[0].slot.eq(dp.load_done.slot), bank.filled[1].eq(seqr.skip),
        bank.load_err.valid.eq(dp.load_done.valid & (dp.load_done.status != 0)),
        bank.load_err.buf.eq(dp.load_done.buf), bank.load_err.status.eq(dp.load_done.status),
    ]


def _wire_port(m, p, iss, jb, k):
    """Link port ``k``, ``p`` (:func:`~.datapath.port_signature`): its units', credits' and landing buffers'
    state to issue arbiter ``iss`` (which holds back, per step, what the issue stage's job takes as it goes out),
    and job builder ``jb``'s jobs, reservations and orders to it."""
    status = iss.port[k]
    m.d.comb += [status.send_ready.eq(p.send_job.ready), status.recv_ready.eq(p.recv_job.ready),
                 status.order_ready.eq(p.order.ready)]
    for name in ("dep_req", "tx_room", "beat_credits", "hdr_credits", "hdr_valid", "hdr_two", "unpopped"):
        m.d.comb += status[name].eq(getattr(p, name))
    for c in range(len(status.heads)):          # the fields the arbiter compares (MATCH_FIELDS)
        m.d.comb += [status.heads[c][f].eq(p.heads[c][f]) for f in MATCH_FIELDS]
        m.d.comb += status.next_counts[c].eq(p.nexts[c].count)
    wiring.connect(m, jb.send_job[k], wiring.flipped(p.send_job))
    wiring.connect(m, jb.recv_job[k], wiring.flipped(p.recv_job))
    m.d.comb += [p.reserve.eq(jb.reserve[k]), p.order.valid.eq(jb.order[k].valid),
                 p.order.payload.src.eq(jb.order[k].src), p.order.payload.empty.eq(jb.order[k].empty)]


def _drive_geometry(geo, e, chunk, block):
    """Drive :class:`~.geometry.BlockGeometry` ``geo`` with command entry ``e`` and (``chunk``, ``block``)."""
    return [geo.geom.eq(e.geom), geo.count.eq(e.count), geo.elem_shift.eq(e.elem_shift), geo.chunk.eq(chunk),
            geo.block.eq(block), geo.in_base.eq(e.src), geo.out_base.eq(e.dst), geo.in_seg.eq(e.in_seg),
            geo.out_seg.eq(e.out_seg)]
