"""The FSM bank: the engine's ``n_fsms`` :class:`~.fsm.ChunkFsm` s, their chunk queues, and the routing of
every per-FSM event between them and the shared blocks (docs/engine.md section 4).

- Chunks from the dispatcher enter FSM ``enq.fsm``'s queue (two entries; ``q_ready`` says which have room).
- Each FSM reads its command's row of the view memory through its own port (``view_addr``/``views``).
- Age: the FSMs' chunks in dispatch order, as an age matrix (:class:`~.arbiter.AgeMatrix`, ``age``) that the
  decode pick, the issue arbiter and the partition manager use to favour the oldest chunk.
- Decode: of the FSMs asking for a step (``fetch``), the one holding the oldest chunk is picked
  (:class:`~.arbiter.OldestPick`) and handed to the decoder (``dec_req``); the decoded step comes back
  ``StepDecoder.latency_for(cfg)`` cycles later (``dec_wb``) to the FSM it names.
- Issue: every FSM's current step, with its chunk's identity, is offered to the issue arbiter (``offers``). The
  grant comes back a cycle later from the issue stage's register (``grant``), when its job goes out: the
  granted FSM still holds the step, so its step, context and view are selected for the job builder from the
  FSM's registers (``g_step``, ``g_ctx``, ``g_view``); an FSM's own LOAD reaches it then too (``own_load``). The count of each FSM's current step's slot (``counts``) goes to the issue stage, which
  registers the granted one's: the job builder adds it to a message's count, and that sum is written back to
  the count lanes in the same cycle.
- Count lanes: each FSM's chunk's slot counts (:class:`~.slotcount.SlotCounts`), cleared when it takes a chunk
  and set by its granted RECVs (``recv_count``, from the job builder).
- The units' completions (``unit_done``, by FSM), the LOADs that ended (``filled``) and the partition
  manager's moves reach the FSMs; the FSMs' phase ends, handoffs and contexts go to the partition manager.
"""

from amaranth.hdl import Cat, Module, Mux, Value, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import COUNT_BITS
from ..common.logic import one_hot_mux
from .arbiter import AgeMatrix, OldestPick, age_layout
from .cmdtable import fsm_view_layout
from .decoder import decode_request_layout, decoded_layout, step_layout
from .fsm import ChunkFsm, FsmState, chunk_layout, fsm_context_layout, load_err_layout
from .issue import fsm_request_layout
from .slotcount import SlotCounts
from .sram import sram_read_layout
from .units import STATUS_SHAPE, _w

__all__ = ["FsmBank", "unit_done_layout"]


def unit_done_layout(cfg):
    """A SEND or RECV unit retiring a step of FSM ``fsm`` with ``status``."""
    return data.StructLayout({"valid": 1, "fsm": _w(cfg.n_fsms), "status": STATUS_SHAPE})


class FsmBank(wiring.Component):
    """The FSMs and their queues (see the module docstring).

    Ports
    -----
    enq : In(valid, fsm, chunk), q_ready : Out(n_fsms)
        A dispatched chunk for FSM ``fsm`` (its queue must have room: ``q_ready``).
    view_addr, views : one view-memory read port per FSM (:class:`~.cmdtable.CommandTable`).
    dec_req, dec_wb : the decode request of the picked FSM, and decoded steps coming back.
    offers : Out(fsm_request_layout per FSM)
        What the issue arbiter sees of each FSM.
    grant : In(n_fsms)
        The issue stage's registered grant, one-hot: the step FSM ``f`` offered last cycle was granted and its
        job goes out now (no bit set: no grant).
    own_load : In(valid, fsm, slot)
        FSM ``fsm``'s LOAD of ``slot`` goes to the load unit now (the issue stage's job, granted the cycle before).
    g_step, g_ctx, g_view : Out
        The granted FSM's step, chunk context and command view (an AND-OR on ``grant``, from the FSMs'
        registers).
    counts : Out(COUNT_BITS per FSM)
        The count of each FSM's current step's slot (from registers).
    recv_count : In(valid, fsm, slot, count)
        A granted RECV sets its FSM's slot count (the job builder, a cycle after the grant).
    filled : In(2 x (valid, buf, slot))
    load_err : In(load_err_layout)
        A LOAD that failed: the FSM holding its buffer poisons its chunk.
        LOADs that ended this cycle (load unit, sequencer skipping an empty block), any buffer.
    unit_done : In(unit_done_layout per SEND/RECV unit)
    buf_loading : In(n_buffers)
        Buffers with a LOAD outstanding (a chunk hands off only when none is).
    move : In(valid, fsm), phase_wait : In(n_fsms)
        The partition manager moves FSM ``fsm``'s chunk on; the FSMs waiting for partition room.
    at_end, handoff : Out(n_fsms)
        A phase that is not the last is done / the last step retired and no LOAD into the buffer is outstanding.
    ctx : Out(fsm_context_layout per FSM), active : Out(n_fsms), gap : Out(n_fsms)
        Each FSM's chunk context; which FSMs hold a chunk; which had nothing to offer this cycle (STEP_GAP).
    age : Out(age_layout(n_fsms))
        The age matrix of the FSMs' chunks (registered, exact in every cycle).
    timeout : In(32), cmd_new : In(valid, slot), given_up : Out(n_cmds)
        STEP_TIMEOUT; a command entering table slot ``slot``; the commands one of whose chunks gave a step up
        (set when an FSM's step expires, cleared when the slot takes a new command): every FSM holding a chunk
        of such a command skips the rest of its steps.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        F, NC = cfg.n_fsms, cfg.n_cmds
        buf = sram_read_layout(cfg).members["buf"]
        ev = data.StructLayout({"valid": 1, "buf": buf, "slot": unsigned(10)})
        sel = data.StructLayout({"valid": 1, "fsm": _w(F)})
        own = data.StructLayout({"valid": 1, "fsm": _w(F), "slot": unsigned(10)})
        super().__init__({
            "enq": In(data.StructLayout({"valid": 1, "fsm": _w(F), "chunk": chunk_layout(cfg)})),
            "q_ready": Out(F),
            "view_addr": Out(data.ArrayLayout(_w(NC), F)),
            "views": In(data.ArrayLayout(fsm_view_layout(cfg), F)),
            "dec_req": Out(stream.Signature(decode_request_layout(cfg), always_ready=True)),
            "dec_wb": In(stream.Signature(decoded_layout(cfg), always_ready=True)),
            "offers": Out(data.ArrayLayout(fsm_request_layout(cfg), F)),
            "grant": In(F), "own_load": In(own),
            "g_step": Out(step_layout(cfg)), "g_ctx": Out(fsm_context_layout(cfg)),
            "g_view": Out(fsm_view_layout(cfg)), "counts": Out(data.ArrayLayout(COUNT_BITS, F)),
            "recv_count": In(data.StructLayout({"valid": 1, "fsm": _w(F), "slot": unsigned(10),
                                                "count": unsigned(COUNT_BITS)})),
            "filled": In(data.ArrayLayout(ev, 2)),
            "load_err": In(load_err_layout(cfg)),
            "unit_done": In(data.ArrayLayout(unit_done_layout(cfg), 2 * cfg.n_ports)),
            "buf_loading": In(cfg.n_buffers),
            "move": In(sel), "phase_wait": In(F),
            "at_end": Out(F), "handoff": Out(F),
            "ctx": Out(data.ArrayLayout(fsm_context_layout(cfg), F)),
            "active": Out(F),
            "gap": Out(F),
            "age": Out(age_layout(F)),
            "timeout": In(32), "cmd_new": In(data.StructLayout({"valid": 1, "slot": _w(NC)})),
            "given_up": Out(NC),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F = cfg.n_fsms
        q_layout = chunk_layout(cfg)
        fsms, counts = [], []
        for f in range(F):
            fsm, q = ChunkFsm(cfg), fifo.SyncFIFOBuffered(width=q_layout.size, depth=2)
            m.submodules[f"fsm{f}"], m.submodules[f"fsmq{f}"] = fsm, q
            m.submodules[f"counts{f}"] = cnt = SlotCounts(cfg)
            fsms.append(fsm)
            counts.append(cnt)
            rc = self.recv_count
            m.d.comb += [
                cnt.take.eq(fsm.chunk.valid & fsm.chunk.ready), cnt.null.eq(self.views[f].null),
                cnt.rd_slot.eq(fsm.offer.step.slot),
                cnt.wr.valid.eq(rc.valid & (rc.fsm == f)), cnt.wr.slot.eq(rc.slot), cnt.wr.count.eq(rc.count),
            ]
            m.d.comb += [
                q.w_en.eq(self.enq.valid & (self.enq.fsm == f)), q.w_data.eq(self.enq.chunk),
                self.q_ready[f].eq(q.w_rdy),
                fsm.chunk.valid.eq(q.r_rdy), fsm.chunk.payload.eq(q.r_data), q.r_en.eq(fsm.chunk.ready),
                self.view_addr[f].eq(fsm.view_addr), fsm.view.eq(self.views[f]),
                self.ctx[f].eq(fsm.ctx),
            ]

        # the age matrix, from the sequence number each FSM holds next cycle (a chunk it takes now, else its own)
        m.submodules.age = age = AgeMatrix(F)
        m.d.comb += [age.seq_next[f].eq(Mux(fsm.chunk.valid & fsm.chunk.ready, fsm.chunk.payload.seq, fsm.ctx.seq))
                     for f, fsm in enumerate(fsms)]
        m.d.comb += self.age.eq(age.older)

        # decode: the oldest chunk's FSM among those fetching
        m.submodules.dec_pick = pick = OldestPick(F)
        m.d.comb += [pick.req.eq(Cat(*[fsm.fetch for fsm in fsms])), pick.older.eq(age.older)]
        req, wb = self.dec_req.payload, self.dec_wb
        m.d.comb += [self.dec_req.valid.eq(pick.valid), req.fsm.eq(pick.sel)]
        # the picked FSM's fields by the one-hot pick (an AND-OR), not by its encoded number (encode, then decode)
        for name, value in (("cmd", lambda f: fsms[f].ctx.cmd), ("chunk", lambda f: fsms[f].ctx.chunk),
                            ("buf", lambda f: fsms[f].ctx.buf), ("pc", lambda f: fsms[f].pc)):
            m.d.comb += getattr(req, name).eq(one_hot_mux([(pick.onehot[f], value(f)) for f in range(F)]))

        # issue: offers, and the granted FSM's step, context and view
        g = self.grant

        def granted(value):
            return one_hot_mux([(g[f], Value.cast(value(f))) for f in range(F)])
        m.d.comb += [self.g_step.eq(granted(lambda f: fsms[f].offer.step)),
                     self.g_ctx.eq(granted(lambda f: fsms[f].ctx)),
                     self.g_view.eq(granted(lambda f: self.views[f]))]
        m.d.comb += [self.counts[f].eq(counts[f].rd) for f in range(F)]

        for f, fsm in enumerate(fsms):
            c, r = fsm.ctx, self.offers[f]
            m.d.comb += [
                r.ready.eq(fsm.offer.ready), r.behind.eq(fsm.offer.behind), r.step.eq(fsm.offer.step),
                r.tag.eq(self.views[f].tag), r.chunk.eq(c.chunk), r.phase.eq(c.phase),
                # the FSM's events: the decoder picked it / wrote its step back; its grant; its own LOAD
                # going out now; LOADs that ended; a unit's completion; its chunk moved on
                fsm.picked.eq(pick.onehot[f]),
                fsm.wb.valid.eq(wb.valid & (wb.payload.fsm == f)), fsm.wb.step.eq(wb.payload.step),
                fsm.granted.eq(g[f]),
                fsm.own_load.valid.eq(self.own_load.valid & (self.own_load.fsm == f)),
                fsm.own_load.slot.eq(self.own_load.slot),
                fsm.filled.eq(self.filled), fsm.load_err.eq(self.load_err),
                fsm.move.eq(self.move.valid & (self.move.fsm == f)), fsm.phase_wait.eq(self.phase_wait[f]),
                # to the partition manager
                self.at_end[f].eq(fsm.at_end),
                self.handoff[f].eq((fsm.state == FsmState.HANDOFF) & ~self.buf_loading.bit_select(c.buf, 1)),
                self.active[f].eq(fsm.state != FsmState.IDLE),
            ]
            for u in self.unit_done:
                with m.If(u.valid & (u.fsm == f)):
                    m.d.comb += [fsm.unit_done.valid.eq(1), fsm.unit_done.status.eq(u.status)]
        m.d.comb += self.gap.eq(Cat(*(fsm.gap for fsm in fsms)))

        # commands given up (the step timeout): a chunk's expired step marks its command, and the FSMs holding
        # its other chunks learn it a cycle later (a flip-flop per FSM, off the table's flags)
        for i in range(cfg.n_cmds):
            with m.If(self.cmd_new.valid & (self.cmd_new.slot == i)):
                m.d.sync += self.given_up[i].eq(0)
            with m.Elif(Cat(*[fsm.expired & (fsm.ctx.cmd == i) for fsm in fsms]).any()):
                m.d.sync += self.given_up[i].eq(1)
        for fsm in fsms:
            m.d.comb += fsm.timeout.eq(self.timeout)
            m.d.sync += fsm.give_up.eq(self.given_up.bit_select(fsm.ctx.cmd, 1))
        return m
