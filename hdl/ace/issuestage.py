"""The issue stage register: the arbiter's grant becomes unit jobs one cycle later.

The grant decision (ready steps, unit and port status, credits, landing heads, oldest first) and what a grant
sets off (the job's header, the slot's count lane, credit reservations, the TX mux order entry, the FSM's own
LOAD) were one cycle of about 56 logic levels. This stage registers the grant: the granted FSM (binary and
one-hot), the landing channel and count lane of the header a RECV takes, the count of the step's slot (the job
builder adds the two and writes the sum back to the FSM's count lanes), the step's beats and slot (``STEP_FIELDS``:
what the job builder's reservations, the TX ports' queued-beat counters, the FSMs' own-LOAD waits and the
count lanes' write decode start from), the chunk's status (a step that failed in the grant's cycle poisons what
the chunk sends from then on, not this job) and what the job takes.
The job builder works from the register in the next cycle; it reads the granted step, the chunk's context and
command view from the granted FSM's registers (:class:`~.fsmbank.FsmBank` selects them by
the registered one-hot), because the FSM keeps its step until it sees the grant here (:mod:`.fsm`). So the
grant ends at this register's few dozen flip-flops, not at every FSM's step registers or a copy of the step.

A grant is checked against the status of its own cycle, so the stage keeps the arbiter from granting, in the
cycle the registered job goes out, what that job is about to take (``hold_*``, flip-flops):

- its FSM (``hold_fsm``): the FSM's next step could use the same landing header (its channel is the FSM's) or
  credits, and its slot's LOAD wait is set only when the job goes;
- its unit: the send or receive unit of its port, the store unit, the load unit (the unit took no job yet, so
  its ``ready`` does not show this one);
- the TX mux order queue of the port its message goes out on (a SEND's port, a forward's port).

The load unit is also fed by the load sequencer, which may take it in the cycle of a grant: the arbiter
grants an FSM LOAD only while the load unit has room for two jobs (``LoadUnit.room2``).
"""

from amaranth.hdl import Module, Signal, Value, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import CHANNEL_BITS, COUNT_BITS
from ..common.logic import one_hot_mux
from .decoder import step_layout
from .issue import take_layout
from .units import STATUS_SHAPE, _w

__all__ = ["IssueStage", "grant_layout", "STEP_FIELDS"]

#: The fields of the granted step the stage registers (the rest the job builder reads from the FSM).
STEP_FIELDS = ("beats", "slot")


def grant_layout(cfg):
    """A grant as the issue stage registers it: the FSM, the landing channel and count lane of the header a
    RECV takes."""
    return data.StructLayout({"valid": 1, "fsm": _w(cfg.n_fsms), "ch": unsigned(CHANNEL_BITS),
                              "count": unsigned(COUNT_BITS)})


class IssueStage(wiring.Component):
    """Registers a grant (``grant``, ``grant_oh``, what its job takes: ``take``) with the granted FSM's chunk
    status, slot count and step fields ``STEP_FIELDS`` (one of ``status``, ``counts`` and ``steps``, by
    ``grant_oh``) into ``o`` (``grant``, ``oh``, ``status``, ``slot_count``, ``step``), and says what the arbiter
    must not grant while the registered job goes out (``hold_*``, from flip-flops; ``take_q``: all of them)."""

    def __init__(self, cfg):
        self.cfg = cfg
        F, K = cfg.n_fsms, cfg.n_ports
        sl = step_layout(cfg)
        fields = data.StructLayout({n: sl.members[n] for n in STEP_FIELDS})
        super().__init__({
            "grant": In(grant_layout(cfg)), "grant_oh": In(F), "take": In(take_layout(cfg)),
            "status": In(data.ArrayLayout(STATUS_SHAPE, F)), "counts": In(data.ArrayLayout(COUNT_BITS, F)),
            "steps": In(data.ArrayLayout(sl, F)),
            "o": Out(data.StructLayout({"grant": grant_layout(cfg), "oh": F, "status": STATUS_SHAPE,
                                        "slot_count": unsigned(COUNT_BITS), "step": fields})),
            "hold_fsm": Out(F), "hold_send": Out(K), "hold_recv": Out(K), "hold_order": Out(K),
            "hold_load": Out(1), "hold_store": Out(1), "take_q": Out(take_layout(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        F, o = self.cfg.n_fsms, self.o
        take = Signal(take_layout(self.cfg))
        m.d.sync += [o.grant.eq(self.grant), o.oh.eq(self.grant_oh), take.eq(self.take),
                     o.status.eq(one_hot_mux([(self.grant_oh[f], Value.cast(self.status[f])) for f in range(F)])),
                     o.slot_count.eq(one_hot_mux([(self.grant_oh[f], self.counts[f]) for f in range(F)]))]
        m.d.sync += [getattr(o.step, n).eq(one_hot_mux([(self.grant_oh[f], getattr(self.steps[f], n))
                                                        for f in range(F)])) for n in STEP_FIELDS]
        m.d.comb += [self.take_q.eq(take), self.hold_fsm.eq(o.oh), self.hold_send.eq(take.send),
                     self.hold_recv.eq(take.recv),
                     self.hold_order.eq(take.order), self.hold_load.eq(take.load), self.hold_store.eq(take.store)]
        return m
