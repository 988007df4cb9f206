"""Small combinational building blocks shared by the RTL."""

from amaranth.hdl import Cat, Const, Mux, Signal

__all__ = ["one_hot", "one_hot_mux", "or_tree", "late", "at_least_two", "up_down", "up_down_below", "split_product",
           "split_counter", "split_counter_lag"]


def one_hot(index, n):
    """The ``n``-bit one-hot decode of ``index`` (all zero when ``index >= n``): ``n`` comparators, where
    ``1 << index`` would build a ``2**len(index)``-bit shifter and truncate it."""
    return Cat(*(index == i for i in range(n)))


def or_tree(values, width=None):
    """The OR of ``values`` as a balanced tree (``log2(len(values))`` levels). A left fold ``((a | b) | c) | ...``
    is a chain of ``$or`` cells that the synthesis script maps as it stands: a 16-way select came out of the
    45 nm flow as a chain of 10 AND-OR gates. ``width``: the result's width when ``values`` is empty."""
    values = list(values)
    if not values:
        return Const(0, width or 1)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0]


def one_hot_mux(choices):
    """The value of the one ``(select, value)`` pair of ``choices`` whose select is set (zero if none): an AND
    per value and a balanced OR tree (:func:`or_tree`), where a chain of ``If`` s would build a priority mux as
    deep as the choices are many. At most one select may be set."""
    return or_tree([Mux(sel, value, 0) for sel, value in choices])


def late(m, value, name=None):
    """``value`` a cycle late (a flip-flop, reset to zero): what a status counter adds, so that its adder
    starts at a flip-flop instead of at the end of the logic that raises the event. The count lags the
    events by one cycle, which nothing reading a counter register can tell."""
    reg = Signal.like(value, name=name, init=0)
    m.d.sync += reg.eq(value)
    return reg


def at_least_two(bits):
    """Whether two or more of ``bits`` (a list of 1-bit values) are set, as a balanced tree of (any, two)
    pairs: ``log2(len(bits))`` AND-OR levels, where ``sum(bits) > 1`` builds a population count."""
    def tree(part):
        if len(part) == 1:
            return part[0], Const(0, 1)
        half = len(part) // 2
        (a1, t1), (a2, t2) = tree(part[:half]), tree(part[half:])
        return a1 | a2, t1 | t2 | (a1 & a2)
    return tree(list(bits))[1] if bits else Const(0, 1)


def up_down(m, count, up, down):
    """Step the register ``count`` (reset value 0, written nowhere else) by ``up - down`` (1-bit each) this
    cycle. ``count + 1`` and ``count - 1`` are kept in flip-flops beside it (stepped with it, their own
    candidates made from ``count``), so the late ``up``/``down`` only pick among registers: a mux at the end of
    their logic. (Candidates made by adders in the same cycle do not do it: the synthesis tool merges them
    back into one adder with the late select as its carry in.) Wraps as ``count + up - down`` would. Returns
    the two candidate registers."""
    width = len(count)
    base = count.name if isinstance(count, Signal) else "count"
    inc = Signal(width, name=f"{base}_inc", init=1)
    dec = Signal(width, name=f"{base}_dec", init=(1 << width) - 1)
    same = up == down
    m.d.sync += [
        count.eq(Mux(same, count, Mux(up, inc, dec))),
        inc.eq(Mux(same, inc, Mux(up, count + 2, count))),
        dec.eq(Mux(same, dec, Mux(up, count, count - 2))),
    ]
    return inc, dec


def up_down_below(m, count, up, down, cap, name=None):
    """:func:`up_down` on ``count``, and a flip-flop that is ``count < cap`` for the count it holds: each
    candidate's compare (``count``, ``count + 1``, ``count - 1`` against ``cap``) is made from registers and
    the late ``up``/``down`` only pick one. ``cap`` (a register) is followed a cycle late. Returns the flag."""
    inc, dec = up_down(m, count, up, down)
    below = Signal(name=name, init=1)       # count 0 < any cap but 0; the first cycle after reset follows cap
    m.d.sync += below.eq(Mux(up == down, count < cap, Mux(up, inc < cap, dec < cap)))
    return below


def split_product(m, a, b, name, *, en=1):
    """``a * b`` over two cycles: the partial products of ``b``'s low and high halves go into flip-flops (loaded
    in cycles with ``en``), and the value returned - their shifted sum, combinational - is the product of the
    operands presented a cycle earlier. Each partial product's tree is half as tall and its adder narrower
    than the whole product's, and the final addition moves into the next cycle, where the caller registers it.
    Nothing here resets: the caller's valid bits say which cycle holds a real product."""
    k = (len(b) + 1) // 2
    lo = Signal(len(a) + k, name=f"{name}_lo", reset_less=True)
    hi = Signal(len(a) + len(b) - k, name=f"{name}_hi", reset_less=True)
    with m.If(en):
        m.d.sync += [lo.eq(a * b[:k]), hi.eq(a * b[k:])]
    return lo + (hi << k)


def split_counter_lag(width, part=16):
    """Cycles by which :func:`split_counter`'s value of ``width`` bits trails its increments (one per part
    beyond the first)."""
    return -(-width // part) - 1


def split_counter(m, inc, width, name, *, part=16):
    """A free-running ``width``-bit counter that adds ``inc`` (an unsigned value narrower than ``part`` bits,
    best a flip-flop: see :func:`late`) every cycle, built as ``part``-bit counters with a registered carry
    between neighbours: no adder is wider than ``part`` bits, where a 32- or 64-bit incrementer is a carry
    chain of 20 and more cells. Returns the count, made of flip-flops only: part ``k`` is read
    ``n - 1 - k`` cycles late (``n`` parts), so every part shows the same cycle and the value is always a
    true count, ``n - 1`` cycles old. Wraps at ``2**width`` as one counter would; everything resets to 0."""
    if len(inc) >= part:
        raise ValueError(f"split_counter: the increment ({len(inc)} bits) must be narrower than a part ({part})")
    n = split_counter_lag(width, part) + 1
    parts, carry = [], inc
    for k in range(n):
        w = min(part, width - k * part)
        reg = Signal(w, name=f"{name}_p{k}")
        total = reg + carry                                 # w + 1 bits: the carry out on top
        m.d.sync += reg.eq(total[:w])
        if k < n - 1:
            carry = Signal(name=f"{name}_c{k}")
            m.d.sync += carry.eq(total[w])
        for d in range(n - 1 - k):                          # align the part with the highest one
            late_part = Signal(w, name=f"{name}_p{k}_d{d}")
            m.d.sync += late_part.eq(reg)
            reg = late_part
        parts.append(reg)
    return Cat(*parts)
