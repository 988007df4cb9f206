"""The first failing check of a priority-ordered list -> a completion status and its detail.

The last stage of :class:`~.validate.DescriptorValidator`. A check list is ``(name, status, detail)`` tuples in
priority order (:data:`~.validate.CHECKS`); ``detail`` names a field of the details struct or is a constant.
A one-hot priority select of the lowest failed check gives the status and detail as AND-OR terms (no
if/else chain, so the path is a few gates whatever the list's length); no failed check gives OK, detail 0.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from ..common.logic import or_tree
from .units import STATUS_SHAPE

__all__ = ["FirstFailing"]


class FirstFailing(wiring.Component):
    """Registers the status and detail of the first failed check (see the module docstring).

    ``checks`` is the priority-ordered ``(name, status, detail)`` list, ``details`` the layout of the detail
    values the checks name.

    Ports
    -----
    failed : In(StructLayout)
        One bit per check, by name (set = failed).
    details : In(details)
        The detail values.
    capture : In(1)
        Register the select of this cycle's ``failed`` and ``details``.
    code, det, checks : Out
        From the cycle after ``capture``: the first failed check's status (``Status.OK`` if none), its detail
        (0 if none), and ``failed`` as it was.
    """

    def __init__(self, checks, details):
        assert Status.OK == 0       # no failed check: every AND-OR term is 0
        self.check_list = tuple(checks)
        layout = data.StructLayout({name: 1 for name, _, _ in self.check_list})
        super().__init__({
            "failed": In(layout), "details": In(details), "capture": In(1),
            "code": Out(STATUS_SHAPE), "det": Out(32), "checks": Out(layout),
        })

    def elaborate(self, platform):
        m = Module()
        checks = self.check_list
        bits = self.failed.as_value()
        first = Signal(len(checks))         # one-hot: the lowest set bit of `failed`
        m.d.comb += first.eq(Cat(*[bits[i] & ~bits[:i].any() if i else bits[0] for i in range(len(checks))]))

        def any_of(indices):
            return Cat(*[first[i] for i in indices]).any() if indices else Const(0, 1)

        # AND-OR select: a code bit is set if the first failing check's status has it; det ORs the selected
        # source (each check has one source; a constant 0 needs no term)
        code = Signal(STATUS_SHAPE)
        m.d.comb += code.eq(Cat(*[any_of([i for i, (_, status, _) in enumerate(checks) if status >> k & 1])
                                  for k in range(STATUS_SHAPE.width)]))
        det = Signal(32)
        det_terms = []
        for src in dict.fromkeys(src for _, _, src in checks if src != 0):
            picked = any_of([i for i, (_, _, s) in enumerate(checks) if s == src])
            value = getattr(self.details, src) if isinstance(src, str) else Const(src, 32)
            det_terms.append(Mux(picked, value, 0))
        m.d.comb += det.eq(or_tree(det_terms, 32))
        with m.If(self.capture):
            m.d.sync += [self.code.eq(code), self.det.eq(det), self.checks.eq(self.failed)]
        return m
