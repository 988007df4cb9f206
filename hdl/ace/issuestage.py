"""The issue stage register: the arbiter's grant becomes unit jobs one cycle later.

The grant decision (ready steps, unit and port status, credits, landing heads, oldest first) and what a grant
sets off (the job's header, the slot's count lane, credit reservations, the TX mux order entry, the FSM's own
LOAD) were one cycle of about 56 logic levels. This stage registers the grant: the granted FSM (binary and
one-hot) and, for every FSM, what its step would need from the grant's cycle - the landing channel and count lane
of the header a RECV takes (``cand``), the count of the step's slot and the two added (a reducing RECV's count,
which the job builder writes back to the FSM's count lanes: the add is before the register, not after the
select), the chunk's status (a step that failed in the grant's cycle poisons what the
chunk sends from then on, not this job) and what its job takes (``takes``). The granted FSM's are selected after
the register by the registered one-hot (``o``), so the oldest-first pick ends at the one-hot's flip-flops instead
of running on through a 16-way select into every bit the stage holds (at the design point that select was the
last third of a 35-level path). The step's beats and slot (``STEP_FIELDS``: what the job builder's
reservations, the TX ports' queued-beat counters, the FSMs' own-LOAD waits and the count lanes' write decode
start from) are selected from the FSMs' step registers the same way: the FSM keeps its step until it sees the
grant here (:mod:`.fsm`). The job builder works from ``o`` in the next cycle; it reads the rest of the granted
step, the chunk's context and command view from the granted FSM's registers (:class:`~.fsmbank.FsmBank`
selects them by the same one-hot).

A grant is checked against the status of its own cycle, so the stage keeps the arbiter from granting, in the
cycle the registered job goes out, what that job is about to take (``hold_fsm``: the registered one-hot;
``take_q``: an AND-OR of flip-flops by it, which the arbiter applies to each step's request last):

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
from .issue import candidate_layout, take_layout
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
    """Registers a grant (``grant``, ``grant_oh``) and every FSM's grant candidates (``takes``, ``cand``,
    ``status``, ``counts``); ``o`` (``grant`` with the landing channel and count lane, ``oh``, ``status``,
    ``slot_count``, the ``STEP_FIELDS`` of ``steps``) is the registered FSM's, selected by the registered
    one-hot. Says what the arbiter must not grant while the registered job goes out (``hold_fsm``, and what the
    job takes: ``take_q``)."""

    def __init__(self, cfg):
        self.cfg = cfg
        F, K = cfg.n_fsms, cfg.n_ports
        sl = step_layout(cfg)
        fields = data.StructLayout({n: sl.members[n] for n in STEP_FIELDS})
        super().__init__({
            "grant": In(data.StructLayout({"valid": 1, "fsm": _w(F)})), "grant_oh": In(F),
            "takes": In(data.ArrayLayout(take_layout(cfg), F)), "cand": In(data.ArrayLayout(candidate_layout(), F)),
            "status": In(data.ArrayLayout(STATUS_SHAPE, F)), "counts": In(data.ArrayLayout(COUNT_BITS, F)),
            "steps": In(data.ArrayLayout(sl, F)),
            "o": Out(data.StructLayout({"grant": grant_layout(cfg), "oh": F, "status": STATUS_SHAPE,
                                        "slot_count": unsigned(COUNT_BITS), "sum_count": unsigned(COUNT_BITS),
                                        "step": fields})),
            "hold_fsm": Out(F), "take_q": Out(take_layout(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        F, o = self.cfg.n_fsms, self.o
        oh = o.oh
        # the grant, and every FSM's candidates of the grant's cycle
        takes = Signal.like(self.takes)
        cand = Signal.like(self.cand)
        status = Signal.like(self.status)
        counts = Signal.like(self.counts)
        sums = Signal.like(self.counts)         # a reducing RECV's count lane: the message's plus the slot's
        m.d.sync += [o.grant.valid.eq(self.grant.valid), o.grant.fsm.eq(self.grant.fsm), oh.eq(self.grant_oh),
                     takes.eq(self.takes), cand.eq(self.cand), status.eq(self.status), counts.eq(self.counts)]
        m.d.sync += [sums[f].eq(self.cand[f].count + self.counts[f]) for f in range(F)]

        def granted(value):
            return one_hot_mux([(oh[f], Value.cast(value(f))) for f in range(F)])
        take = Signal(take_layout(self.cfg))
        m.d.comb += [take.eq(granted(lambda f: takes[f])),
                     o.grant.ch.eq(granted(lambda f: cand[f].ch)), o.grant.count.eq(granted(lambda f: cand[f].count)),
                     o.status.eq(granted(lambda f: status[f])), o.slot_count.eq(granted(lambda f: counts[f])),
                     o.sum_count.eq(granted(lambda f: sums[f]))]
        m.d.comb += [getattr(o.step, n).eq(granted(lambda f: getattr(self.steps[f], n))) for n in STEP_FIELDS]
        m.d.comb += [self.take_q.eq(take), self.hold_fsm.eq(oh)]
        return m
