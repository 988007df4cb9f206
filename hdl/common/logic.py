"""Small combinational building blocks shared by the RTL."""

import functools
import operator

from amaranth.hdl import Cat, Mux, Signal

__all__ = ["one_hot", "one_hot_mux", "late"]


def one_hot(index, n):
    """The ``n``-bit one-hot decode of ``index`` (all zero when ``index >= n``): ``n`` comparators, where
    ``1 << index`` would build a ``2**len(index)``-bit shifter and truncate it."""
    return Cat(*(index == i for i in range(n)))


def one_hot_mux(choices):
    """The value of the one ``(select, value)`` pair of ``choices`` whose select is set (zero if none): an AND
    per value and an OR tree, where a chain of ``If`` s would build a priority mux as deep as the choices are
    many. At most one select may be set."""
    return functools.reduce(operator.or_, [Mux(sel, value, 0) for sel, value in choices])


def late(m, value, name=None):
    """``value`` a cycle late (a flip-flop, reset to zero): what a status counter adds, so that its adder
    starts at a flip-flop instead of at the end of the logic that raises the event. The count lags the
    events by one cycle, which nothing reading a counter register can tell."""
    reg = Signal.like(value, name=name, init=0)
    m.d.sync += reg.eq(value)
    return reg
