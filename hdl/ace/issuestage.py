"""The issue stage register: the arbiter's grant and the granted step become unit jobs one cycle later.

The grant decision (ready steps, unit and port status, credits, landing heads, oldest first) and what a grant
sets off (the job's header, the slot's count lane, credit reservations, the TX mux order entry, the FSM's own
LOAD) were one cycle of about 56 logic levels. This stage registers the grant with the granted FSM's step,
chunk context and command view; the job builder works from the register in the next cycle.

A grant is checked against the status of its own cycle, so the stage keeps the arbiter from granting, in the
cycle the registered job goes out, what that job is about to take (``hold_*``):

- its FSM (``hold_fsm``): the FSM's next step could use the same landing header (its channel is the FSM's) or
  credits, and its slot's LOAD wait is set only when the job goes;
- its unit: the send or receive unit of its port, the store unit, the load unit (the unit took no job yet, so
  its ``ready`` does not show this one);
- the TX mux order queue of the port its message goes out on (a SEND's port, a forward's port).

The load unit is also fed by the load sequencer, which may take it in the cycle of a grant: the arbiter
grants an FSM LOAD only while the load unit has room for two jobs (``LoadUnit.room2``).
"""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.program import StepOp
from ..common.layouts import CHANNEL_BITS, COUNT_BITS
from .cmdtable import fsm_view_layout
from .decoder import step_layout
from .fsm import fsm_context_layout
from .units import _w

__all__ = ["IssueStage"]


class IssueStage(wiring.Component):
    """Registers a grant (``grant``) with the granted FSM's ``step``, ``ctx``, the fields of its command
    ``view`` a job takes and its step's slot count (``count``) (``o``), and says what the arbiter must not grant while the registered job goes out
    (``hold_*``, from flip-flops)."""

    def __init__(self, cfg):
        self.cfg = cfg
        F, K = cfg.n_fsms, cfg.n_ports
        grant = data.StructLayout({"valid": 1, "fsm": _w(F), "ch": unsigned(CHANNEL_BITS),
                                   "count": unsigned(COUNT_BITS)})
        view = fsm_view_layout(cfg).members
        self.view_fields = ("tag", "rank", "dtype", "op", "null")       # what a unit job takes of the view
        job = data.StructLayout({"grant": grant, "step": step_layout(cfg), "ctx": fsm_context_layout(cfg),
                                 "view": data.StructLayout({n: view[n] for n in self.view_fields}),
                                 "slot_count": unsigned(COUNT_BITS)})
        super().__init__({
            "grant": In(grant), "step": In(step_layout(cfg)), "ctx": In(fsm_context_layout(cfg)),
            "view": In(fsm_view_layout(cfg)), "count": In(COUNT_BITS),
            "o": Out(job),
            "hold_fsm": Out(F), "hold_send": Out(K), "hold_recv": Out(K), "hold_order": Out(K),
            "hold_load": Out(1), "hold_store": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        F, K = self.cfg.n_fsms, self.cfg.n_ports
        o = self.o
        m.d.sync += [o.grant.eq(self.grant), o.step.eq(self.step), o.ctx.eq(self.ctx), o.slot_count.eq(self.count)]
        m.d.sync += [getattr(o.view, n).eq(getattr(self.view, n)) for n in self.view_fields]
        s = o.step
        real = Signal()
        m.d.comb += real.eq(o.grant.valid & ~s.noop)
        send, recv = real & (s.op == StepOp.SEND), real & (s.op == StepOp.RECV)
        m.d.comb += [
            self.hold_fsm.eq(Cat(*(o.grant.valid & (o.grant.fsm == f) for f in range(F)))),
            self.hold_load.eq(real & (s.op == StepOp.LOAD)),
            self.hold_store.eq(real & (s.op == StepOp.STORE)),
        ]
        for k in range(K):
            m.d.comb += [
                self.hold_send[k].eq(send & (s.port == k)),
                self.hold_recv[k].eq(recv & (s.port == k)),
                self.hold_order[k].eq((send & (s.port == k)) | (recv & s.fwd & (s.fwd_port == k))),
            ]
        return m
