"""The partition manager: how many chunks each SRAM partition holds, and the moves between partitions.

A dispatched chunk enters phase 0's partition. At the end of a phase that is not its last, it moves to the next
phase's partition; after its last step it moves to the terminal partition (once no LOAD into its buffer is
outstanding) and its FSM takes its next chunk; it leaves the terminal partition - it is done - when every STORE it
posted is acknowledged (the lowest buffer first when several are). One move per cycle, oldest chunk first; a
wide engine (``AceConfig.control_stages``) registers the grant and applies it a cycle later, granting one move
per two cycles, and registers the chunk leaving the terminal partition.

A move needs room in the target partition (fewer chunks than its PART register) - except for the oldest chunk
held by any FSM, which always moves: every rank holds the same oldest chunk (same dispatch order), so it can never
wait on younger chunks filling a partition on another rank, whatever the PART sizes (docs/engine.md section 3).
Both the oldest chunk and the move's pick come from the FSM bank's age matrix (:class:`~.arbiter.AgeMatrix`):
each is one AND-OR per FSM, and the moving chunk's context is selected by the one-hot pick.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import MAX_PHASES
from ..common.logic import one_hot_mux, up_down_below
from .arbiter import OldestPick, age_layout
from .fsm import fsm_context_layout
from .regs import N_PARTITIONS, TERMINAL_PARTITION
from .sram import sram_read_layout
from .units import STATUS_SHAPE, _w

__all__ = ["PartitionManager", "chunk_done_layout"]


def chunk_done_layout(cfg):
    """A chunk that left the terminal partition: its command, buffer (back to the free list) and status."""
    return data.StructLayout({"cmd": _w(cfg.n_cmds), "buf": sram_read_layout(cfg).members["buf"],
                              "status": STATUS_SHAPE})


class PartitionManager(wiring.Component):
    """Counts the chunks per partition and grants the moves between them.

    Ports
    -----
    part : In(ArrayLayout(unsigned(8), N_PARTITIONS))
        Partition sizes (PART registers).
    dispatch : In(1)
        A chunk enters phase 0 this cycle.
    active : In(n_fsms), ctx : In(ArrayLayout(fsm_context_layout, n_fsms))
        The FSM holds a chunk; the chunk's context (phase, buffer, command, status).
    age : In(age_layout(n_fsms))
        The FSM bank's age matrix (which FSM's chunk was dispatched first).
    at_end : In(n_fsms)
        The FSM's chunk finished a phase that is not its last (it asks to move on).
    handoff : In(n_fsms)
        The FSM's chunk finished its last step and no LOAD into its buffer is outstanding.
    stores_pending : In(n_buffers)
        The buffer has posted STOREs without their write response.
    move_valid, move_fsm : Out
        The FSM whose chunk moves this cycle (to its next phase, or to the terminal partition; in a wide engine
        granted in the cycle before, while the FSM still asked).
    phase_wait, handoff_wait : Out(n_fsms)
        Requests refused for want of room.
    room0 : Out(1)
        Phase 0's partition has room for a dispatched chunk.
    done : Out(stream(chunk_done_layout), always_ready)
        A chunk left the terminal partition.
    used : Out(ArrayLayout(unsigned(8), MAX_PHASES)), used_term : Out(8)
    """

    def __init__(self, cfg):
        self.cfg = cfg
        F = cfg.n_fsms
        super().__init__({
            "part": In(data.ArrayLayout(unsigned(8), N_PARTITIONS)),
            "dispatch": In(1),
            "active": In(F), "at_end": In(F), "handoff": In(F),
            "ctx": In(data.ArrayLayout(fsm_context_layout(cfg), F)),
            "age": In(age_layout(F)),
            "stores_pending": In(cfg.n_buffers),
            "move_valid": Out(1), "move_fsm": Out(_w(F)),
            "phase_wait": Out(F), "handoff_wait": Out(F),
            "room0": Out(1),
            "done": Out(stream.Signature(chunk_done_layout(cfg), always_ready=True)),
            "used": Out(data.ArrayLayout(unsigned(8), MAX_PHASES)),
            "used_term": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, NB = cfg.n_fsms, cfg.n_buffers
        m.submodules.oldest = oldest = OldestPick(F)
        m.submodules.moves = moves = OldestPick(F)
        m.d.comb += [oldest.req.eq(self.active), oldest.older.eq(self.age), moves.older.eq(self.age)]
        # room in each partition (p from p-1; the terminal one): flip-flops kept with the counts (below), so
        # the moves' requests start from registers. A PART register written is followed a cycle late.
        term_free = Signal()
        next_free = Signal(MAX_PHASES)
        move_req = Signal(F)
        for f in range(F):
            is_oldest = oldest.onehot[f]
            room = next_free.bit_select((self.ctx[f].phase + 1)[:3], 1)
            at_end, ho = self.at_end[f], self.handoff[f]
            m.d.comb += [
                move_req[f].eq((at_end & (room | is_oldest)) | (ho & (term_free | is_oldest))),
                self.phase_wait[f].eq(at_end & ~room & ~is_oldest),
                self.handoff_wait[f].eq(ho & ~term_free & ~is_oldest),
            ]
        m.d.comb += self.room0.eq(next_free[0])
        if self.cfg.control_stages:
            # the grant registered and applied a cycle later (the FSM holds its request and context until it
            # sees it); no grant in that cycle, so the room flags a grant reads count every earlier move
            sel, gone, gone_ho = Signal.like(moves.sel), Signal(F), Signal(F)
            valid = Signal()
            m.d.comb += moves.req.eq(Mux(valid, 0, move_req))
            m.d.sync += [valid.eq(moves.valid), sel.eq(moves.sel), gone.eq(moves.onehot),
                         gone_ho.eq(moves.onehot & self.handoff)]
            h_handoff = gone_ho.any()
        else:
            m.d.comb += moves.req.eq(move_req)
            valid, sel, gone = moves.valid, moves.sel, moves.onehot
            h_handoff = one_hot_mux([(gone[f], self.handoff[f]) for f in range(F)])
        m.d.comb += [self.move_valid.eq(valid), self.move_fsm.eq(sel)]

        # the moving chunk: a hand-off (else a phase change), its phase, buffer, command and status
        def moving(value):
            return one_hot_mux([(gone[f], value(f)) for f in range(F)])
        h_phase, h_buf, h_cmd, h_status = (moving(lambda f, k=k: self.ctx[f][k])
                                           for k in ("phase", "buf", "cmd", "status"))

        # the terminal partition: a chunk is done when every STORE it posted is acknowledged
        term = Signal(NB)
        t_cmd = Signal(data.ArrayLayout(_w(self.cfg.n_cmds), NB))
        t_status = Signal(data.ArrayLayout(STATUS_SHAPE, NB))
        done = self.done.payload
        ready = Signal(NB)
        m.d.comb += ready.eq(term & ~self.stores_pending)
        first = Signal(NB)                      # the lowest buffer ready to leave, one-hot
        m.d.comb += [first[b].eq(ready[b] & ~ready[:b].any() if b else ready[0]) for b in range(NB)]
        leaving = [(self.done.valid, first.any()), (done.buf, one_hot_mux([(first[b], b) for b in range(NB)])),
                   (done.cmd, one_hot_mux([(first[b], t_cmd[b]) for b in range(NB)])),
                   (done.status, one_hot_mux([(first[b], t_status[b]) for b in range(NB)]))]
        # with the stage, the chunk leaves a cycle after it is picked (its term bit clears at once)
        domain = m.d.sync if self.cfg.control_stages else m.d.comb
        domain += [port.eq(value) for port, value in leaving]
        to_term = valid & h_handoff
        for b in range(NB):
            with m.If(to_term & (h_buf == b)):
                m.d.sync += [term[b].eq(1), t_cmd[b].eq(h_cmd), t_status[b].eq(h_status)]
            with m.Elif(first[b]):
                m.d.sync += term[b].eq(0)
        for p in range(MAX_PHASES):
            leave = valid & (h_phase == p)
            enter = self.dispatch if p == 0 else (valid & ~h_handoff & (h_phase == p - 1))
            m.d.comb += next_free[p].eq(up_down_below(m, self.used[p], enter, leave, self.part[p],
                                                       name=f"free{p}"))
        m.d.comb += term_free.eq(up_down_below(m, self.used_term, to_term, self.done.valid,
                                               self.part[TERMINAL_PARTITION], name="free_term"))
        return m
