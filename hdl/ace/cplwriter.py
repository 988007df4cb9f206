"""Completion writer: the completion queue and its writes into the completion ring in NPU memory.

Completion records (:func:`~..common.layouts.completion_layout`) wait in a 4-entry queue. The writer numbers
them (``seq`` from 1), writes each one (``COMPLETION_BYTES``) at ``CQ_BASE + CQ_TAIL * COMPLETION_BYTES`` with
the DMA, and moves ``CQ_TAIL`` on and raises IRQ.cpl (and IRQ.err for a status other than OK) when the write is
acknowledged. The ring is never overrun: while it is full (``CQ_TAIL + 1 == CQ_HEAD`` modulo ``CQ_SIZE``) the
writer waits and counts the cycles in CPL_STALL.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from ..common.layouts import COMPLETION_BYTES, completion_layout
from ..common.logic import late
from .dma import DOMAIN_ENGINE
from .units import beat_stream, dma_cmd_layout

__all__ = ["CompletionWriter"]


class CompletionWriter(wiring.Component):
    """The completion queue and the completion ring writes (see the module docstring).

    Ports
    -----
    i_cpl : In(stream(completion_layout))
        Completions (``seq`` is replaced); ready while the queue has room.
    cq_base, cq_size, cq_head : In
        Register values (CQ_BASE, CQ_SIZE, CQ_HEAD). Nothing is written while ``cq_size`` is 0.
    cq_tail : Out(32)
        CQ_TAIL: moves on in the cycle after a write is acknowledged.
    wr_cmd, wr_data, wr_done : Out, Out, In
        The DMA write: one command, the record's beats, then the acknowledgement (ready only while awaited).
    irq_cpl, irq_err : Out(1)
        High in the cycle a write is acknowledged (``irq_err`` for a status other than OK).
    cpl_bytes, cmds_ok, cmds_err, cpl_stall : Out
        Counter registers: bytes written, completions taken from the queue with status OK / not OK, cycles a
        completion waited for room in the ring.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "i_cpl": In(stream.Signature(completion_layout())),
            "cq_base": In(64), "cq_size": In(32), "cq_head": In(32), "cq_tail": Out(32),
            "wr_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "wr_data": Out(beat_stream(cfg)),
            "wr_done": In(stream.Signature(data.StructLayout({"err": 1}))),
            "irq_cpl": Out(1), "irq_err": Out(1),
            "cpl_bytes": Out(64), "cmds_ok": Out(32), "cmds_err": Out(32), "cpl_stall": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.cfg.beat_bytes
        cpl_l = completion_layout()
        m.submodules.cplq = cplq = fifo.SyncFIFOBuffered(width=cpl_l.size, depth=4)
        m.d.comb += [cplq.w_en.eq(self.i_cpl.valid), cplq.w_data.eq(self.i_cpl.payload),
                     self.i_cpl.ready.eq(cplq.w_rdy)]

        seq = Signal(32)
        cq_mask = Signal(32)
        m.d.sync += cq_mask.eq(self.cq_size - 1)
        # registered (one cycle behind the registers): the ring is enabled, and it has room. A completion written
        # moves CQ_TAIL on leaving WAIT, so SETTLE spends the cycle these need to see the new tail; a CQ_HEAD the
        # host just moved is seen a cycle late, which only delays a write.
        # The mask (CQ_SIZE - 1) is a register too, and a ring just set up counts as enabled a cycle after it,
        # once "full" has been judged with its mask (the host sets CQ_SIZE before the first command).
        cq_on, cq_on_pre = Signal(), Signal()
        cq_full = Signal()
        m.d.sync += [cq_on_pre.eq(self.cq_size != 0), cq_on.eq(cq_on_pre),
                     cq_full.eq(((self.cq_tail + 1) & cq_mask) == (self.cq_head & cq_mask))]
        # the write address, in two register stages off the command path: the ring slot (CQ_TAIL masked) every
        # cycle, then CQ_BASE plus the slot's offset when a completion is taken. CQ_TAIL moves only on leaving
        # WAIT, and SETTLE and IDLE come between that and the next CMD.
        slot = Signal(32)
        wr_addr = Signal(64)
        m.d.sync += slot.eq(self.cq_tail & cq_mask)
        cur = Signal(cpl_l)
        cpl_beats = max(1, COMPLETION_BYTES // W)
        wbeat = Signal(range(cpl_beats + 1))
        cur_bits = Signal(8 * max(COMPLETION_BYTES, W))
        with m.FSM(name="cpl"):
            with m.State("IDLE"):
                with m.If(cplq.r_rdy & cq_on):
                    with m.If(cq_full):
                        m.d.sync += self.cpl_stall.eq(self.cpl_stall + 1)
                    with m.Else():
                        rec = data.View(cpl_l, cplq.r_data)
                        m.d.comb += cplq.r_en.eq(1)
                        m.d.sync += [cur.eq(cplq.r_data), cur.seq.eq(seq + 1), seq.eq(seq + 1), wbeat.eq(0),
                                     wr_addr.eq(self.cq_base + slot * COMPLETION_BYTES)]
                        with m.If(rec.status == Status.OK):
                            m.d.sync += self.cmds_ok.eq(self.cmds_ok + 1)
                        with m.Else():
                            m.d.sync += self.cmds_err.eq(self.cmds_err + 1)
                        m.next = "CMD"
            with m.State("CMD"):
                m.d.comb += [
                    self.wr_cmd.valid.eq(1),
                    self.wr_cmd.payload.addr.eq(wr_addr),
                    self.wr_cmd.payload.length.eq(COMPLETION_BYTES),
                    self.wr_cmd.payload.domain.eq(DOMAIN_ENGINE),
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
                    m.d.sync += self.cq_tail.eq((self.cq_tail + 1) & cq_mask)
                    m.d.comb += [self.irq_cpl.eq(1), self.irq_err.eq(cur.status != Status.OK)]
                    m.next = "SETTLE"
            with m.State("SETTLE"):
                m.next = "IDLE"
        # the byte counter steps a cycle after the write's response (its 64-bit add starts at a flip-flop, not at
        # the FSM's state decode)
        with m.If(late(m, self.wr_done.valid & self.wr_done.ready, name="cpl_written")):
            m.d.sync += self.cpl_bytes.eq(self.cpl_bytes + COMPLETION_BYTES)
        return m
