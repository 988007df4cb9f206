"""The count lanes of one FSM's chunk (docs/programs.md): how many ranks' non-null contributions each slot's
datum holds.

A chunk starts every slot at 1 (0 for a null contribution): golden programs LOAD a slot before anything else
writes it, so this is the LOAD's count. A granted RECV sets its slot to the count it computed (the message's, plus
the slot's when reducing); SENDs, forwards and STOREs read it.

Only the FSM holding a chunk runs its steps, so the counts live with the FSM: the FSM bank keeps one
:class:`SlotCounts` per FSM, and each offers the count of its FSM's current step's slot (``rd``) from
registers, ready before the issue arbiter grants. The grant selects it beside the granted step, and the issue
stage registers it: the job builder gets it from a flip-flop. The RECV's write lands at the end of the job
builder's cycle, in which its FSM is held (``IssueStage.hold_fsm``), so a step of the same FSM granted next reads
it. When the FSM takes a chunk the counts are cleared to "not written" (one flip-flop per slot) and a slot not
yet written reads as the command's initial count (``~null``).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import COUNT_BITS
from ..common.logic import one_hot, one_hot_mux
from .bufstate import mask_slot_bits, n_mask_slots

__all__ = ["SlotCounts"]


class SlotCounts(wiring.Component):
    """One FSM's count lanes (see the module docstring).

    Ports
    -----
    take : In(1)
        The FSM takes a new chunk: every slot is unwritten from the next cycle.
    null : In(1)
        The FSM's command contributes nothing (its slots start at 0, else 1).
    rd_slot : In(10), rd : Out(COUNT_BITS)
        The count of slot ``rd_slot`` (combinational from registers and ``null``; for a slot the FSM does not
        track, a value nothing uses).
    wr : In(valid, slot, count)
        A RECV of this FSM sets ``slot``'s count (``take`` wins in the same cycle).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "take": In(1), "null": In(1),
            "rd_slot": In(10), "rd": Out(COUNT_BITS),
            "wr": In(data.StructLayout({"valid": 1, "slot": unsigned(10), "count": unsigned(COUNT_BITS)})),
        })

    def elaborate(self, platform):
        m = Module()
        NM = n_mask_slots(self.cfg)
        cnt = [Signal(COUNT_BITS, name=f"cnt{k}") for k in range(NM)]
        written = Signal(NM)
        for k in range(NM):
            with m.If(self.take):
                m.d.sync += written[k].eq(0)
            with m.Elif(self.wr.valid & (self.wr.slot == k)):
                m.d.sync += [written[k].eq(1), cnt[k].eq(self.wr.count)]
        # the read: a one-hot decode of the slot bits a tracked slot has and a balanced AND-OR tree (a 34-way
        # case mux over the whole 10-bit slot was half a nanosecond of the design point's issue stage). A
        # slot beyond the tracked ones reads 0 or the count of the slot its low bits name; only an illegal
        # step (a no-op) names one, and nothing uses its count.
        sel = one_hot(self.rd_slot[:mask_slot_bits(self.cfg)], NM)
        m.d.comb += self.rd.eq(one_hot_mux((sel[k], Mux(written[k], cnt[k], ~self.null)) for k in range(NM)))
        return m
