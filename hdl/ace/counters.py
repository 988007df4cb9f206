"""The control plane's status counters (the FSM_BUSY, STEPS, STEP_GAP, STALL and PHASE_BUSY registers of
docs/registers.md): free-running 64- and 32-bit counts of per-cycle events, which the host reads to see where
an engine's cycles go.
"""

from amaranth.hdl import Module, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import MAX_PHASES
from ..common.logic import late
from .regs import STALL_CAUSES

__all__ = ["ControlCounters", "stall_layout"]


def stall_layout():
    """One bit per stall cause (:data:`~.regs.STALL_CAUSES`), in the order of the STALL counter array."""
    return data.StructLayout({name: 1 for name in STALL_CAUSES})


class ControlCounters(wiring.Component):
    """Counts, every cycle: FSMs holding a chunk (``active``, into ``fsm_busy``), steps granted (``step``,
    into ``steps``), FSMs that held a chunk but had no decoded step and nothing in flight (``gap``, into
    ``step_gap``), each stall cause seen (``cause``, into ``stall``; a cause counts once per cycle whatever
    the number of FSMs waiting on it; counted a cycle late, so the adders start at flip-flops) and each
    program phase with a chunk in it (``phase_used``, into ``phase_busy``). The counters wrap."""

    def __init__(self, cfg):
        F = cfg.n_fsms
        super().__init__({
            "active": In(F), "step": In(1), "gap": In(range(F + 1)),
            "cause": In(stall_layout()),
            "phase_used": In(MAX_PHASES),
            "fsm_busy": Out(64), "steps": Out(64), "step_gap": Out(64),
            "stall": Out(data.ArrayLayout(unsigned(32), len(STALL_CAUSES))),
            "phase_busy": Out(data.ArrayLayout(unsigned(32), MAX_PHASES)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += [
            self.fsm_busy.eq(self.fsm_busy + sum(self.active)),
            self.steps.eq(self.steps + self.step),
            self.step_gap.eq(self.step_gap + self.gap),
        ]
        for i, name in enumerate(STALL_CAUSES):
            m.d.sync += self.stall[i].eq(self.stall[i] + late(m, getattr(self.cause, name), f"{name}_late"))
        for p in range(MAX_PHASES):
            m.d.sync += self.phase_busy[p].eq(self.phase_busy[p] + self.phase_used[p])
        return m
