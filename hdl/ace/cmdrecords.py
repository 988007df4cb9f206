"""Command records: what the command processor keeps of each command for its completion, and the completion
records themselves.

A completion (:func:`~..common.layouts.completion_layout`) carries the descriptor's cookie, tag, collective and
ring index and the cycles since its fetch started. A rejected descriptor completes at once, from the facts of
the command in hand (``cur``); an accepted one takes a command table slot, and its facts are saved per slot
until the control unit reports it finished (``i_done``). Both kinds leave on one stream (``o_cpl``), a
rejection first when both come in the same cycle (the finished command waits).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import completion_layout
from .cmdtable import cmd_done_layout
from .units import STATUS_SHAPE, _w

__all__ = ["CommandRecords", "command_facts_layout"]


def command_facts_layout():
    """What a completion needs of its descriptor: cookie, tag, collective, ring index and start cycle."""
    return data.StructLayout({"cookie": 64, "tag": 32, "collective": 8, "sq_index": 16, "start": 32})


class CommandRecords(wiring.Component):
    """Per-slot command facts and the completion records (see the module docstring).

    Ports
    -----
    now : In(32)
        The cycle counter, one more every cycle; a completion's ``cycles`` is ``now - start``. The differences
        are kept in registers a cycle ahead (``now + 1 - start`` of the command in hand and of every slot), so
        the completion's pick of its source does not sit in front of a subtractor; ``now + 1`` comes from
        ``now + 2`` registered, so ``now`` must have counted for two cycles before the first completion.
    cur : In(command_facts_layout)
        The command in hand; rejected no earlier than the cycle after it last changed.
    save : In(1)
        Store ``cur`` as the facts of slot ``save_slot`` (takes effect in the next cycle; the slot's command
        does not finish in that cycle).
    i_reject : In(stream)
        Reject the command in hand with ``status`` and ``detail``: a completion of ``cur``.
    i_done : In(stream(cmd_done_layout))
        A finished command: a completion of the facts saved for its slot. Ready only when no rejection is
        valid in the same cycle.
    o_cpl : Out(stream(completion_layout))
        The completions; ``seq`` is 0 (the completion writer numbers them).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "now": In(32),
            "cur": In(command_facts_layout()),
            "save": In(1),
            "save_slot": In(_w(cfg.n_cmds)),
            "i_reject": In(stream.Signature(data.StructLayout({"status": STATUS_SHAPE, "detail": 32}))),
            "i_done": In(stream.Signature(cmd_done_layout(cfg))),
            "o_cpl": Out(stream.Signature(completion_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        NC = self.cfg.n_cmds
        facts = [Signal(command_facts_layout(), name=f"slot{i}_facts") for i in range(NC)]
        with m.If(self.save):
            with m.Switch(self.save_slot):
                for i in range(NC):
                    with m.Case(i):
                        m.d.sync += facts[i].eq(self.cur)

        # the elapsed cycles of the command in hand and of each slot, registered one cycle ahead
        elapsed_cur = Signal(32)
        elapsed = [Signal(32, name=f"slot{i}_elapsed") for i in range(NC)]
        # `ahead` is `now + 1` in every cycle (from `now + 2` registered), so each difference is one subtraction
        # from registers (`now + 1 - start` chained two 32-bit adders)
        ahead = Signal(32)
        m.d.sync += [ahead.eq(self.now + 2), elapsed_cur.eq(ahead - self.cur.start),
                     *[e.eq(ahead - f.start) for e, f in zip(elapsed, facts)]]

        def record(f, cycles):
            return [o.cookie.eq(f.cookie), o.tag.eq(f.tag), o.collective.eq(f.collective),
                    o.sq_index.eq(f.sq_index), o.cycles.eq(cycles)]

        o, rej, done = self.o_cpl.payload, self.i_reject, self.i_done
        # a rejection has priority; a finished command waits a cycle
        with m.If(rej.valid):
            m.d.comb += [self.o_cpl.valid.eq(1), rej.ready.eq(self.o_cpl.ready)]
            m.d.comb += record(self.cur, elapsed_cur) + [o.status.eq(rej.payload.status),
                                                         o.detail.eq(rej.payload.detail)]
        with m.Else():
            m.d.comb += [self.o_cpl.valid.eq(done.valid), done.ready.eq(done.valid & self.o_cpl.ready),
                         o.status.eq(done.payload.status), o.detail.eq(done.payload.detail),
                         o.contributors.eq(done.payload.contributors)]
            with m.Switch(done.payload.slot):
                for i in range(NC):
                    with m.Case(i):
                        m.d.comb += record(facts[i], elapsed[i])
        return m
