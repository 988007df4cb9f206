"""The control plane's status counters (the FSM_BUSY, STEPS, STEP_GAP, STALL and PHASE_BUSY registers of
docs/registers.md): free-running 64- and 32-bit counts of per-cycle events, which the host reads to see where
an engine's cycles go.
"""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import MAX_PHASES
from ..common.logic import late, split_counter, split_counter_lag
from .regs import STALL_CAUSES

__all__ = ["ControlCounters", "COUNTER_LAG", "stall_layout"]


def stall_layout():
    """One bit per stall cause (:data:`~.regs.STALL_CAUSES`), in the order of the STALL counter array."""
    return data.StructLayout({name: 1 for name in STALL_CAUSES})


class ControlCounters(wiring.Component):
    """Counts, every cycle: FSMs holding a chunk (``active``, into ``fsm_busy``), steps granted (``step``,
    into ``steps``), FSMs that held a chunk but had no decoded step and nothing in flight (``gap``, a bit per FSM,
    into ``step_gap``), each stall cause seen (``cause``, into ``stall``; a cause counts once per cycle whatever
    the number of FSMs waiting on it) and each program phase with a chunk in it (``phase_used``, into
    ``phase_busy``). Every input is taken into a flip-flop first, so the adders start at flip-flops, and the
    counters are made of 16-bit parts: a 64-bit counter shows the count of four cycles ago, a 32-bit one of
    two (:data:`COUNTER_LAG`), which nothing reading them over the register bank can tell. The counters
    wrap."""

    def __init__(self, cfg):
        F = cfg.n_fsms
        super().__init__({
            "active": In(F), "step": In(1), "gap": In(F),
            "cause": In(stall_layout()),
            "phase_used": In(MAX_PHASES),
            "fsm_busy": Out(64), "steps": Out(64), "step_gap": Out(64),
            "stall": Out(data.ArrayLayout(unsigned(32), len(STALL_CAUSES))),
            "phase_busy": Out(data.ArrayLayout(unsigned(32), MAX_PHASES)),
        })

    def elaborate(self, platform):
        m = Module()
        # every event a flip-flop first (late), then counters of 16-bit parts (split_counter): a 64-bit adder
        # behind the FSMs' population count was too long a path for 1 GHz at the design point's 16 FSMs
        # the FSMs' bits, not their population counts, go into the flip-flops (the gap bits come late in the
        # cycle: behind the partition manager's room and oldest-chunk decisions)
        def count(bits, name):
            n = Signal(range(len(bits) + 1), name=name)     # Python's sum widens a bit per term
            m.d.comb += n.eq(sum(late(m, bits, f"{name}_late")))
            return n
        m.d.comb += [
            self.fsm_busy.eq(split_counter(m, count(self.active, "n_active"), 64, "fsm_busy")),
            self.steps.eq(split_counter(m, late(m, self.step, "step_late"), 64, "steps")),
            self.step_gap.eq(split_counter(m, count(self.gap, "n_gap"), 64, "step_gap")),
        ]
        for i, name in enumerate(STALL_CAUSES):
            m.d.comb += self.stall[i].eq(split_counter(m, late(m, getattr(self.cause, name), f"{name}_late"), 32,
                                                       f"stall_{name}"))
        for p in range(MAX_PHASES):
            m.d.comb += self.phase_busy[p].eq(split_counter(m, late(m, self.phase_used[p], f"phase{p}_late"), 32,
                                                            f"phase{p}_busy"))
        return m


#: Cycles a counter of :class:`ControlCounters` lags its events: one for the event's flip-flop, then one per
#: 16-bit part beyond the first (:func:`~syncfabric.hdl.common.logic.split_counter`).
COUNTER_LAG = {w: 1 + split_counter_lag(w) for w in (32, 64)}
