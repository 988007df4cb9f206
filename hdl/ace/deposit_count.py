"""The deposit unit's arrival output and counters.

``arrive`` (one cycle) reports a deposit written, or given up, for command ``cmd`` with ``status``; it appears
on ``arrived`` one cycle later (``arrived.cmd`` follows ``arrive.cmd`` every cycle) and counts one deposit and
``bytes`` deposited bytes. ``spill`` (one cycle) counts one spilled message of ``bytes`` bytes. The counters
add registered events (:func:`~..common.logic.late`), so they lag ``arrived`` by a cycle: their 64-bit adders
start at flip-flops instead of behind the deposit unit's decisions.
"""

from amaranth.hdl import Module, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.logic import late
from .units import STATUS_SHAPE, _w

__all__ = ["DepositCounters", "counter_ports"]


def counter_ports(cfg):
    """The deposit unit's outputs that report deposits: ``arrived`` and the four counters."""
    return {
        "arrived": Out(data.StructLayout({"valid": 1, "cmd": _w(cfg.n_cmds), "status": STATUS_SHAPE})),
        "deposits": Out(32),
        "deposit_bytes": Out(64),
        "spills": Out(32),
        "spill_bytes": Out(64),
    }


class DepositCounters(wiring.Component):
    """Registers ``arrived`` and counts deposits, deposited bytes, spills and spilled bytes (module docstring)."""

    def __init__(self, cfg):
        NC = cfg.n_cmds
        super().__init__({
            "arrive": In(data.StructLayout({"valid": 1, "cmd": _w(NC), "status": STATUS_SHAPE, "bytes": unsigned(20)})),
            "spill": In(data.StructLayout({"valid": 1, "bytes": unsigned(20)})),
            **counter_ports(cfg),
        })

    def elaborate(self, platform):
        m = Module()
        a, s = self.arrive, self.spill
        m.d.sync += [self.arrived.valid.eq(a.valid), self.arrived.cmd.eq(a.cmd),
                     self.arrived.status.eq(a.status)]
        a_valid, a_bytes = late(m, a.valid, "arrive_late"), late(m, a.bytes, "arrive_bytes_late")
        s_valid, s_bytes = late(m, s.valid, "spill_late"), late(m, s.bytes, "spill_bytes_late")
        with m.If(a_valid):
            m.d.sync += [self.deposits.eq(self.deposits + 1), self.deposit_bytes.eq(self.deposit_bytes + a_bytes)]
        with m.If(s_valid):
            m.d.sync += [self.spills.eq(self.spills + 1), self.spill_bytes.eq(self.spill_bytes + s_bytes)]
        return m
