"""Small combinational building blocks shared by the RTL."""

from amaranth.hdl import Cat

__all__ = ["one_hot"]


def one_hot(index, n):
    """The ``n``-bit one-hot decode of ``index`` (all zero when ``index >= n``): ``n`` comparators, where
    ``1 << index`` would build a ``2**len(index)``-bit shifter and truncate it."""
    return Cat(*(index == i for i in range(n)))
