"""The chunk dispatcher: walks the accepted commands in order and their chunks in order, one chunk per cycle.

Chunk ``c`` of a command goes to FSM ``(tag + c) mod FSM_LIMIT``: every rank of a communicator puts the same
chunk on the same FSM (= virtual channel, hence landing channel) whatever other commands - on other
communicators, with other members - it ran before. A chunk also takes the next number of the engine's dispatch
sequence (the arbiters favour the oldest chunk) and the next free chunk buffer. The dispatcher never skips to
another FSM or command: when the head chunk cannot go, nothing goes (every rank dispatches in the same order,
which keeps ranks from deadlocking on each other's buffers).

The head command's fields the dispatch needs (its chunk 0's FSM, chunk count, prefetch range, LOAD mask) are
registered when the command reaches the head (``FSM_LIMIT`` is sampled then), so a dispatch decision starts
from flip-flops, not from a command-table lookup and the tag's reduction modulo ``FSM_LIMIT``; the FSM of the
next chunk is a register too. The next command is taken the cycle after its predecessor's last chunk goes (a
cycle between commands), so the order queue's read does not hang off the dispatch decision. In a wide engine
(``AceConfig.control_stages``: 16 FSMs, four steps of conditional subtraction) the modulo is itself a register,
computed over three cycles while the command waits at the queue's head (the tag and limit registered, then
two subtractions per cycle): a command is taken once it has been the head for three cycles under the same
``FSM_LIMIT``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import LOAD_MASK_BITS
from ..common.logic import one_hot
from .arbiter import SEQ_BITS
from .cmdtable import cmd_entry_layout
from .sram import sram_read_layout
from .units import _w

__all__ = ["ChunkDispatcher", "dispatch_layout", "prefetch_layout"]


def dispatch_layout(cfg):
    """A dispatched chunk: its FSM, command slot, chunk number, buffer, sequence number, whether it is the
    command's final chunk (``final``), the range of instructions the load sequencer prefetches (phase 0's head
    LOADs) and the slots they fill (``load_mask``)."""
    return data.StructLayout({"fsm": _w(cfg.n_fsms), "cmd": _w(cfg.n_cmds), "chunk": unsigned(16),
                              "buf": sram_read_layout(cfg).members["buf"], "seq": unsigned(SEQ_BITS), "final": 1,
                              "first": unsigned(11), "end": unsigned(11), "load_mask": unsigned(LOAD_MASK_BITS)})


def prefetch_layout(cfg):
    """A dispatched chunk as the load sequencer takes it: command slot, chunk number, buffer and the range of
    instructions to prefetch."""
    return data.StructLayout({"cmd": _w(cfg.n_cmds), "chunk": unsigned(16),
                              "buf": sram_read_layout(cfg).members["buf"], "first": unsigned(11),
                              "end": unsigned(11)})


class ChunkDispatcher(wiring.Component):
    """Dispatches the chunks of the accepted commands in order.

    Ports
    -----
    cmd : In(stream(cmd slot))
        Accepted commands in order (a queue of ``n_cmds`` inside).
    e_cmd : Out(cmd), e : In(cmd_entry_layout)
        Combinational command-table lookup of the command entering the head register.
    enable : In(1), fsm_limit : In(6)
    buf : In(stream(buf))
        The free-buffer list; a buffer is taken (``ready``) with each chunk.
    room : In(1)
        The phase-0 partition has room for a chunk.
    q_ready : In(n_fsms)
        Each FSM's chunk queue has room.
    chunk : Out(stream(dispatch_layout), always_ready)
        One pulse per dispatched chunk (the caller queues it for its FSM).
    load : Out(stream(prefetch_layout))
        The dispatched chunks again, queued for the load sequencer (``n_buffers`` entries: one per chunk
        buffer, so the queue has room whenever a buffer is free and never holds the dispatch back).
    dispatched : Out(n_cmds)
        Pulses the command whose last chunk is dispatched.
    stall_part, stall_queue : Out(1)
        The head chunk waits for a buffer or partition room / for its FSM's queue.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        rl = sram_read_layout(cfg)
        super().__init__({
            "cmd": In(stream.Signature(_w(cfg.n_cmds))),
            "e_cmd": Out(_w(cfg.n_cmds)), "e": In(cmd_entry_layout(cfg)),
            "enable": In(1), "fsm_limit": In(6),
            "buf": In(stream.Signature(rl.members["buf"])),
            "room": In(1),
            "q_ready": In(cfg.n_fsms),
            "chunk": Out(stream.Signature(dispatch_layout(cfg), always_ready=True)),
            "load": Out(stream.Signature(prefetch_layout(cfg))),
            "dispatched": Out(cfg.n_cmds),
            "stall_part": Out(1), "stall_queue": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, NC = cfg.n_fsms, cfg.n_cmds
        m.submodules.order = order = fifo.SyncFIFOBuffered(width=_w(NC).width, depth=NC)
        m.d.comb += [self.cmd.ready.eq(order.w_rdy), order.w_en.eq(self.cmd.valid), order.w_data.eq(self.cmd.payload)]

        chunk = Signal(16)
        fsm = Signal(_w(F))         # FSM of the head command's next chunk (registered)
        seq = Signal(SEQ_BITS)
        e = self.e
        m.d.comb += self.e_cmd.eq(order.r_data)
        # the tag's low bits reduced modulo FSM_LIMIT by conditional subtraction (as the command enters the head)
        tbits = max(1, (F - 1).bit_length())
        ks = tuple(reversed(range(tbits)))          # the subtractions of limit << k, largest first

        def modulo(t, limit, ks=ks):
            for k in ks:
                step = Signal(tbits + 7, name=f"tag_mod{k}")
                m.d.comb += step.eq(Mux(t >= (limit << k), t - (limit << k), t))
                t = step
            return t
        # the head command, registered
        h_valid, h_cmd = Signal(), Signal(_w(NC))
        # (the last chunk's number, not the count: the final-chunk flag is then an equality, no increment)
        h_last, h_first, h_end = Signal.like(e.geom.last_chunk), Signal(11), Signal(11)
        h_mask = Signal(LOAD_MASK_BITS)
        last = Signal()
        # the next command becomes the head a cycle after the last chunk of this one went (a cycle per
        # command), so the order queue's read does not hang off this cycle's dispatch decision
        take = order.r_rdy & ~h_valid
        if cfg.control_stages:
            # while the command waits at the queue's head: its tag's low bits and FSM_LIMIT into registers, the
            # first half of the modulo's subtractions into the next, the rest into a third; the command is taken
            # once the third holds its modulo under this FSM_LIMIT (the head was there, not popped, for three
            # cycles, and the limit is unchanged)
            t_raw, lim_raw = Signal(tbits, name="tag_low"), Signal.like(self.fsm_limit, name="limit_used")
            t_half, lim_half = Signal(tbits, name="tag_mod_half"), Signal.like(self.fsm_limit, name="limit_half")
            t_mod, lim_mod = Signal(tbits, name="tag_mod_q"), Signal.like(self.fsm_limit, name="limit_mod")
            stay, seen = order.r_rdy & ~order.r_en, Signal(3)
            m.d.sync += [t_raw.eq(e.tag[:tbits]), lim_raw.eq(self.fsm_limit),
                         t_half.eq(modulo(t_raw, lim_raw, ks[:len(ks) // 2])), lim_half.eq(lim_raw),
                         t_mod.eq(modulo(t_half, lim_half, ks[len(ks) // 2:])), lim_mod.eq(lim_half),
                         seen.eq(Cat(stay, seen[:2] & Cat(stay, stay)))]
            take = take & seen[2] & (lim_mod == self.fsm_limit)
        else:
            t_mod = modulo(e.tag[:tbits], self.fsm_limit)
        m.d.comb += order.r_en.eq(take)
        with m.If(take):
            m.d.sync += [h_valid.eq(1), h_cmd.eq(order.r_data), h_last.eq(e.geom.last_chunk),
                         h_first.eq(e.phase_start[0]), h_end.eq(e.phase_start[0] + e.load_end),
                         h_mask.eq(e.load_mask)]
        with m.Elif(last):
            m.d.sync += h_valid.eq(0)

        q_ready = Signal()
        m.d.comb += q_ready.eq(self.q_ready.bit_select(fsm, 1))
        head = self.enable & h_valid
        go = Signal()
        final = Signal()            # the head command's next chunk is its last
        m.d.comb += [
            go.eq(head & self.buf.valid & self.room & q_ready),
            final.eq(chunk == h_last),
            last.eq(go & final),
            self.stall_part.eq(head & ~(self.room & self.buf.valid)),
            self.stall_queue.eq(head & self.room & self.buf.valid & ~q_ready),
            self.buf.ready.eq(go),
        ]
        out = self.chunk.payload
        m.d.comb += [
            self.chunk.valid.eq(go),
            out.fsm.eq(fsm), out.cmd.eq(h_cmd), out.chunk.eq(chunk), out.buf.eq(self.buf.payload),
            out.seq.eq(seq), out.final.eq(final), out.first.eq(h_first), out.end.eq(h_end), out.load_mask.eq(h_mask),
        ]
        # the load sequencer's queue
        m.submodules.prefetch = pf = fifo.SyncFIFOBuffered(width=prefetch_layout(cfg).size, depth=cfg.n_buffers)
        pf_in = Signal(prefetch_layout(cfg))
        m.d.comb += [
            pf_in.cmd.eq(out.cmd), pf_in.chunk.eq(out.chunk), pf_in.buf.eq(out.buf), pf_in.first.eq(out.first),
            pf_in.end.eq(out.end), pf.w_en.eq(go), pf.w_data.eq(pf_in),
            self.load.valid.eq(pf.r_rdy), self.load.payload.eq(pf.r_data), pf.r_en.eq(self.load.ready),
        ]
        with m.If(go):
            m.d.sync += [seq.eq(seq + 1), chunk.eq(Mux(last, 0, chunk + 1))]
        if F > 1:
            with m.If(take):
                m.d.sync += fsm.eq(t_mod)
            with m.Elif(go):
                m.d.sync += fsm.eq(Mux(fsm + 1 >= self.fsm_limit, 0, fsm + 1))
        m.d.comb += self.dispatched.eq(Mux(last, one_hot(h_cmd, NC), 0))
        return m
