"""Buffer placement checks of the descriptor validator: in place, and each buffer inside one memory window.

Four of :class:`~.validate.DescriptorValidator`'s pipeline stages for the checks that need a product:

0. the ``start`` cycle: the operands of the products (``nbytes``, ``rank``, ``size``), the addresses (and
   which is ``hi`` and ``lo`` for the in-place difference), each window's end ``base + size`` and whether each
   buffer starts inside it -> registers (the communicator lookup and the count's scaling that feed ``nbytes``
   and ``rank`` leave no room for a multiply in the same cycle at 1 GHz);
1. the products ``nbytes * size`` and ``nbytes * rank`` as partial products (:func:`~..common.logic.split_product`)
   and ``hi - lo`` of the two addresses -> registers;
2. the partial products summed: the buffer lengths (``nbytes * size`` for a segmented buffer, else ``nbytes``)
   and the in-place offset ``nbytes * rank`` -> registers;
3. each buffer's end against each window's end (one add, one compare), the in-place offset against
   ``hi - lo`` (one compare) -> registers.

A window counts for a buffer only if it is enabled (size != 0) and open to the descriptor's communicator
(``win_ok``, sampled in the start cycle); ``windows`` names every window that holds a used buffer (the engine
refuses host writes to those windows' registers while the command runs).

In place means the output overwrites the input where both exist. Reduce-scatter: ``src + nbytes * rank ==
dst``; all-gather: ``dst + nbytes * rank == src`` (both as ``hi - lo == nbytes * rank``, without wrapping at
2**64); the others (and a rank that has only one of the buffers of a broadcast/reduce, and a barrier):
``src == dst``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..common.logic import split_product

__all__ = ["PlacementCheck", "placement_mode_layout"]


def placement_mode_layout():
    """What the checks need to know of the collective: reduce-scatter (``rs``) / all-gather (``ag``), which
    buffers are ``size`` segments (``in_seg``, ``out_seg``), which buffers this rank uses and the IN_PLACE flag."""
    return data.StructLayout({"rs": 1, "ag": 1, "in_seg": 1, "out_seg": 1, "uses_src": 1, "uses_dst": 1,
                              "in_place": 1})


class PlacementCheck(wiring.Component):
    """The in-place and memory window checks in four stages (see the module docstring).

    ``comm_layout`` is the COMM_CFG layout (:func:`~.validate.comm_cfg_layout`): its ``rank`` and ``size``
    fields give those ports their widths.

    Ports
    -----
    start : In(1)
        Check the inputs as they are in this cycle (sampled in the ``start`` cycle only).
    src, dst, nbytes, rank, size, mode : In
        The buffers' addresses, the bytes per rank, the communicator's rank and size, the collective's mode
        (:func:`placement_mode_layout`).
    win_base, win_size : In
        The memory windows (size 0 = disabled).
    win_ok : In(n_windows)
        Per window: the descriptor's communicator may name buffers in it.
    in_place, src_window, dst_window : Out(1)
        Failed checks, from the :attr:`LATENCY`-th cycle after ``start`` until the cycle after the next ``start``: IN_PLACE
        flagged but the output does not overwrite the input; a used buffer not inside one enabled window open to
        the communicator.
    windows : Out(n_windows)
        As long: the windows that hold a used buffer whole.
    """

    #: Cycles from a ``start`` cycle to the first cycle its results are valid.
    LATENCY = 4

    def __init__(self, cfg, comm_layout):
        self.cfg = cfg
        NW = cfg.n_windows
        super().__init__({
            "start": In(1),
            "src": In(64), "dst": In(64), "nbytes": In(34),
            "rank": In(comm_layout["rank"].shape), "size": In(comm_layout["size"].shape),
            "mode": In(placement_mode_layout()),
            "win_base": In(data.ArrayLayout(64, NW)),
            "win_size": In(data.ArrayLayout(64, NW)),
            "win_ok": In(NW),
            "in_place": Out(1), "src_window": Out(1), "dst_window": Out(1), "windows": Out(NW),
        })

    def elaborate(self, platform):
        m = Module()
        NW = self.cfg.n_windows
        md, src, dst, nbytes = self.mode, self.src, self.dst, self.nbytes

        # ---- stage 0 (the start cycle): operands, address difference, window ends ----------------------------
        s0_valid = Signal()
        s0_nbytes = Signal.like(nbytes)
        s0_rank = Signal.like(self.rank)
        s0_size = Signal.like(self.size)
        s0_mode = Signal.like(md)
        s0_ip_other = Signal()              # IN_PLACE on another collective: src != dst
        s0_src = Signal(64)
        s0_dst = Signal(64)
        s0_hi = Signal(64)                  # the in-place difference's operands, picked in the start cycle (the
        s0_lo = Signal(64)                  # pick fans out to 128 bits: not in front of a 64-bit subtractor)
        s0_src_lo = Signal(NW)              # per window: enabled, open to the communicator, the buffer starts in it
        s0_dst_lo = Signal(NW)
        s0_win_end = [Signal(65, name=f"s0_win{i}_end") for i in range(NW)]
        m.d.sync += s0_valid.eq(self.start)
        with m.If(self.start):
            m.d.sync += [
                s0_nbytes.eq(nbytes), s0_rank.eq(self.rank), s0_size.eq(self.size), s0_mode.eq(md),
                s0_ip_other.eq(md.in_place & ~md.rs & ~md.ag & md.uses_src & md.uses_dst & (dst != src)),
                s0_src.eq(src), s0_dst.eq(dst),
                s0_hi.eq(Mux(md.rs, dst, src)), s0_lo.eq(Mux(md.rs, src, dst)),
            ]
            for i in range(NW):
                b, s, ok = self.win_base[i], self.win_size[i], self.win_ok[i]
                m.d.sync += [s0_win_end[i].eq(b + s),
                             s0_src_lo[i].eq(ok & (s != 0) & (src >= b)), s0_dst_lo[i].eq(ok & (s != 0) & (dst >= b))]

        # ---- stage 1: the partial products, the address difference -----------------------------------------
        p_valid = Signal()
        s1_ip_diff = Signal(65)             # hi - lo, bit 64 = borrow
        m.d.sync += p_valid.eq(s0_valid & ~self.start)
        rank_off = split_product(m, s0_nbytes, s0_rank, "p_rank_off", en=s0_valid)
        seg_len = split_product(m, s0_nbytes, s0_size, "p_seg_len", en=s0_valid)
        with m.If(s0_valid):
            m.d.sync += s1_ip_diff.eq(s0_hi - s0_lo)

        # ---- stage 2: the products summed ----------------------------------------------------------------------
        s1_valid = Signal()
        s1_rank_off = Signal(len(nbytes) + len(self.rank))
        s1_in_len = Signal(52)
        s1_out_len = Signal(52)
        m.d.sync += s1_valid.eq(p_valid & ~self.start)
        with m.If(p_valid):
            sm = s0_mode
            m.d.sync += [
                s1_rank_off.eq(rank_off),
                s1_in_len.eq(Mux(sm.in_seg, seg_len, s0_nbytes)),
                s1_out_len.eq(Mux(sm.out_seg, seg_len, s0_nbytes)),
            ]

        # ---- stage 3: the compares that need a product -----------------------------------------------------
        s2_src_in = Signal(NW)              # per window: the whole buffer is inside it
        s2_dst_in = Signal(NW)
        s2_ip_bad = Signal()
        src_end = Signal(65)
        dst_end = Signal(65)
        m.d.comb += [src_end.eq(s0_src + s1_in_len), dst_end.eq(s0_dst + s1_out_len)]
        with m.If(s1_valid):
            m.d.sync += [
                s2_src_in.eq(Cat(*[s0_src_lo[i] & (src_end <= s0_win_end[i]) for i in range(NW)])),
                s2_dst_in.eq(Cat(*[s0_dst_lo[i] & (dst_end <= s0_win_end[i]) for i in range(NW)])),
                s2_ip_bad.eq(s0_mode.in_place & (s0_mode.rs | s0_mode.ag) & (s1_ip_diff != s1_rank_off)),
            ]
        m.d.comb += [
            self.in_place.eq(s0_ip_other | s2_ip_bad),
            self.src_window.eq(s0_mode.uses_src & ~s2_src_in.any()),
            self.dst_window.eq(s0_mode.uses_dst & ~s2_dst_in.any()),
            self.windows.eq(Mux(s0_mode.uses_src, s2_src_in, 0) | Mux(s0_mode.uses_dst, s2_dst_in, 0)),
        ]
        return m
