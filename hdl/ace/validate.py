"""Descriptor validation: every check the command processor makes on a fetched descriptor, as a short pipeline
beside the command path.

:class:`DescriptorValidator` takes the fetched descriptor, the program table entry found for it, the chunk
geometry from :class:`~.geometry.CommandGeometry` and the engine settings it depends on, and answers
:attr:`DescriptorValidator.LATENCY` = 5 cycles later with the completion status (``code``), its ``det`` (detail)
and the command table entry (:func:`~.cmdtable.cmd_entry_layout`) of an accepted command.

The checks, first failing one wins (:data:`CHECKS`; docs/engine.md; the host's expected rejections in
``host/job.py`` depend on this order):

=====================  ================  ============  =========================================================
check                  status            detail        fails when
=====================  ================  ============  =========================================================
``fetch_err``          AXI_ERROR         0             the descriptor fetch got an AXI error response
``bad_collective``     BAD_COLLECTIVE    collective    the code is not in :data:`SUPPORTED_COLLECTIVES`
``bad_comm``           BAD_COMM          comm          comm >= n_comms, or COMM_CFG not enabled, size 0 or
                                                       rank >= size
``bad_dtype``          BAD_DTYPE         dtype         an unknown code, or a reduction of a type the ALUs were
                                                       not built for (AceConfig.dtypes)
``bad_op``             BAD_OP            op            an unknown reduction operator
``bad_flags``          BAD_FLAGS         flags         a flag outside ``DescFlags.SUPPORTED``
``in_place``           BAD_FLAGS         flags         IN_PLACE, but the output does not overwrite the input
``null``               BAD_FLAGS         flags         NULL, but not all-reduce / reduce-scatter / reduce with SUM
``zero_count``         ZERO_COUNT        0             count == 0 (not a barrier)
``misaligned_src``     MISALIGNED        0             src (used by this rank) not a multiple of the element size
``misaligned_dst``     MISALIGNED        1             dst (used by this rank) not a multiple of the element size
``bad_root``           BAD_ROOT          root          root >= size (every collective)
``bad_algorithm``      BAD_ALGORITHM     algorithm     no program entry found, or its n_phases not 1..MAX_PHASES
``src_window``         OUT_OF_WINDOW     0             src buffer (used) not inside one enabled window open to comm
``dst_window``         OUT_OF_WINDOW     1             dst buffer (used) not inside one enabled window open to comm
``geometry``           SRAM_TOO_SMALL    slot_beats    CommandGeometry error (other than count_zero)
``chunk_beats``        SRAM_TOO_SMALL    slot_beats    CHUNK_BEATS is 0 or above the configured chunk
``partitions``         SRAM_TOO_SMALL    slot_beats    PART[0] or the terminal partition has no buffer
``buffer``             SRAM_TOO_SMALL    slot_beats    slot_beats * n_slots > buffer_beats
``message``            SRAM_TOO_SMALL    slot_beats    slot_beats > max_message_beats
``slots``              SRAM_TOO_SMALL    slot_beats    n_slots > min(max_slots, LOAD_MASK_BITS)
=====================  ================  ============  =========================================================

None failing: OK, detail 0.

Pipeline (one descriptor at a time; commands are rare, the stages are there to keep each cycle's logic short
for a 1 GHz / 45 nm target, not to overlap descriptors):

1. the ``start`` cycle: communicator lookup (COMM_CFG fields by the register map), element size, the products
   of registered inputs (``slot_beats * n_slots``, arrivals), window ends ``base + size``, the operands of
   the placement products, and every check that needs no product -> registers; the entry is registered here
   too.
2. the placement products as partial products and ``hi - lo`` of the two addresses
   (:class:`~.placement.PlacementCheck`; their operands come out of the lookup, too late in the start cycle
   for a multiply) -> registers; the chunk buffer size -> register.
3. the partial products summed: the buffer lengths and the in-place offset -> registers.
4. the checks that need a product: each buffer against each window (one add, one compare), the
   reduce-scatter / all-gather in-place offset (one compare) (both :class:`~.placement.PlacementCheck`)
   -> registers.
5. :class:`~.firstfail.FirstFailing`: a one-hot priority select of the first failing check gives ``code`` and
   ``det`` (AND-OR, no Elif chain) -> registers, ``done``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Collective, DType, ReduceOp, Status
from ..common.layouts import LOAD_MASK_BITS, MAX_PHASES, DescFlags, descriptor_layout, program_entry_layout
from .cmdtable import cmd_entry_layout
from .firstfail import FirstFailing
from .geometry import geometry_error_layout, geometry_layout
from .placement import PlacementCheck
from .regs import N_PARTITIONS, TERMINAL_PARTITION, ace_regmap
from .units import STATUS_SHAPE

__all__ = ["SUPPORTED_COLLECTIVES", "CHECKS", "checks_layout", "comm_cfg_layout", "elem_shift",
           "effective_count", "DescriptorValidator"]

#: Collectives this engine runs (the others are rejected with BAD_COLLECTIVE).
SUPPORTED_COLLECTIVES = (Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.ALLGATHER, Collective.ALLTOALL,
                         Collective.BROADCAST, Collective.REDUCE, Collective.BARRIER)

#: The checks in priority order: (name, status, detail). The detail is a descriptor field, ``slot_beats`` (of
#: the geometry) or a constant.
CHECKS = (
    ("fetch_err", Status.AXI_ERROR, 0),
    ("bad_collective", Status.BAD_COLLECTIVE, "collective"),
    ("bad_comm", Status.BAD_COMM, "comm"),
    ("bad_dtype", Status.BAD_DTYPE, "dtype"),
    ("bad_op", Status.BAD_OP, "op"),
    ("bad_flags", Status.BAD_FLAGS, "flags"),
    ("in_place", Status.BAD_FLAGS, "flags"),
    ("null", Status.BAD_FLAGS, "flags"),
    ("zero_count", Status.ZERO_COUNT, 0),
    ("misaligned_src", Status.MISALIGNED, 0),
    ("misaligned_dst", Status.MISALIGNED, 1),
    ("bad_root", Status.BAD_ROOT, "root"),
    ("bad_algorithm", Status.BAD_ALGORITHM, "algorithm"),
    ("src_window", Status.OUT_OF_WINDOW, 0),
    ("dst_window", Status.OUT_OF_WINDOW, 1),
    ("geometry", Status.SRAM_TOO_SMALL, "slot_beats"),
    ("chunk_beats", Status.SRAM_TOO_SMALL, "slot_beats"),
    ("partitions", Status.SRAM_TOO_SMALL, "slot_beats"),
    ("buffer", Status.SRAM_TOO_SMALL, "slot_beats"),
    ("message", Status.SRAM_TOO_SMALL, "slot_beats"),
    ("slots", Status.SRAM_TOO_SMALL, "slot_beats"),
)


def checks_layout():
    """One bit per check of :data:`CHECKS` (set = failed), in priority order from bit 0."""
    return data.StructLayout({name: 1 for name, _, _ in CHECKS})


def detail_layout():
    """The descriptor fields and the geometry's ``slot_beats`` that :data:`CHECKS` name as details."""
    return data.StructLayout({"collective": 8, "comm": 8, "dtype": 8, "op": 8, "flags": 8, "root": 16,
                              "algorithm": 8, "slot_beats": 16})


def comm_cfg_layout(cfg):
    """A COMM_CFG register word with its fields where the register map (:func:`~.regs.ace_regmap`) puts them."""
    reg = ace_regmap(cfg).register("COMM_CFG", 0)
    return data.FlexibleLayout(reg.width, {f.name: data.Field(unsigned(f.width), f.lsb) for f in reg.fields})


def elem_shift(dtype):
    """log2 of the element bytes of ``dtype`` (a descriptor's 8-bit code): 1 for FP16/BF16, else 2 (unknown
    codes too; they are rejected)."""
    return Mux((dtype == DType.FP16) | (dtype == DType.BF16), 1, 2)


def effective_count(desc):
    """The descriptor's element count, 0 for a barrier (its count is ignored: every block is empty)."""
    return Mux(desc.collective == Collective.BARRIER, 0, desc.count)


class DescriptorValidator(wiring.Component):
    """Checks a descriptor and builds its command table entry in :attr:`LATENCY` cycles (see the module
    docstring for the checks, their order and the stages).

    Ports
    -----
    start : In(1)
        Validate the inputs as they are in this cycle (all of them are sampled in the ``start`` cycle only). A
        ``start`` while a validation is in flight abandons it (no ``done`` for it).
    desc, fetch_err : In
        The descriptor (:func:`~..common.layouts.descriptor_layout`) and whether its fetch failed.
    found, prog : In
        Whether the program table has an entry for it, and that entry (ignored unless ``found``).
    geom, geom_err : In
        :class:`~.geometry.CommandGeometry`'s ``result`` and ``error`` for the descriptor's count and the
        program's blocks and segments.
    comm_cfg, win_base, win_size, win_comms, part, chunk_beats : In
        Register values: COMM_CFG (:func:`comm_cfg_layout`) per communicator, the memory windows and the
        communicators each is open to (bit c: communicator c), the SRAM partitions, CHUNK_BEATS.
    done : Out(1)
        Pulses :attr:`LATENCY` cycles after ``start``.
    code, det, checks : Out
        From the ``done`` cycle until the next ``start``: the status (``Status``), its detail and every failed
        check (:func:`checks_layout`; ``code``/``det`` are those of the lowest set bit).
    entry : Out(cmd_entry_layout)
        From the cycle after ``start`` until the next ``start`` (meaningful when ``code`` is OK): the command
        table entry.
    """

    #: Cycles from a ``start`` cycle to its ``done`` cycle.
    LATENCY = PlacementCheck.LATENCY + 1

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "start": In(1),
            "desc": In(descriptor_layout()),
            "fetch_err": In(1),
            "found": In(1),
            "prog": In(program_entry_layout()),
            "geom": In(geometry_layout(cfg)),
            "geom_err": In(geometry_error_layout()),
            "comm_cfg": In(data.ArrayLayout(comm_cfg_layout(cfg), cfg.n_comms)),
            "win_base": In(data.ArrayLayout(unsigned(64), cfg.n_windows)),
            "win_size": In(data.ArrayLayout(unsigned(64), cfg.n_windows)),
            "win_comms": In(data.ArrayLayout(unsigned(cfg.n_comms), cfg.n_windows)),
            "part": In(data.ArrayLayout(unsigned(8), N_PARTITIONS)),
            "chunk_beats": In(16),
            "done": Out(1),
            "code": Out(STATUS_SHAPE),
            "det": Out(32),
            "checks": Out(checks_layout()),
            "entry": Out(cmd_entry_layout(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        d, p, start = self.desc, self.prog, self.start
        coll = d.collective

        # ---- stage 1 (the start cycle): lookup, products, product-free checks ------------------------------
        cw = Signal(comm_cfg_layout(cfg))       # zero (disabled) for a communicator out of range
        with m.Switch(d.comm):
            for c in range(cfg.n_comms):
                with m.Case(c):
                    m.d.comb += cw.eq(self.comm_cfg[c])
        rank, size = cw.rank, cw.size

        is_rs = coll == Collective.REDUCE_SCATTER
        is_ag = coll == Collective.ALLGATHER
        a2a = coll == Collective.ALLTOALL
        barrier = coll == Collective.BARRIER
        in_seg = is_rs | a2a
        out_seg = is_ag | a2a
        is_root = rank == d.root
        # which buffers this rank's program touches: a broadcast reads only at the root, a reduce writes only
        # at the root, a barrier moves no data
        uses_src = Signal()
        uses_dst = Signal()
        m.d.comb += [uses_src.eq(~barrier & ((coll != Collective.BROADCAST) | is_root)),
                     uses_dst.eq(~barrier & ((coll != Collective.REDUCE) | is_root))]
        eshift = Signal(2)
        count = Signal(32)
        nbytes = Signal(34)
        m.d.comb += [eshift.eq(elem_shift(d.dtype)), count.eq(effective_count(d)), nbytes.eq(count << eshift)]
        # a barrier is one chunk of empty blocks: its messages are headers only
        g = Signal.like(self.geom)
        m.d.comb += g.eq(self.geom)
        with m.If(barrier):
            m.d.comb += [g.n_chunks.eq(1), g.last_chunk.eq(0), g.last_bytes.eq(0), g.q_last.eq(0), g.rem_last.eq(0)]

        def one_of(value, choices):
            return Cat(*[value == c for c in choices]).any()

        emask = Mux(eshift == 1, 1, 3)
        flag_in_place = (d.flags & DescFlags.IN_PLACE) != 0
        flag_null = (d.flags & DescFlags.NULL) != 0
        early = {       # check -> failed, for the checks that need no product
            "fetch_err": self.fetch_err,
            "bad_collective": ~one_of(coll, SUPPORTED_COLLECTIVES),
            "bad_comm": ~((d.comm < cfg.n_comms) & cw.enable & (size != 0) & (rank < size)),
            # the other collectives only move bytes: any known type goes
            "bad_dtype": (d.dtype > max(DType)) | (one_of(coll, [c for c in Collective if c.reduces])
                                                   & ~one_of(d.dtype, cfg.dtype_codes)),
            "bad_op": d.op > max(ReduceOp),
            "bad_flags": (d.flags & ~DescFlags.SUPPORTED) != 0,
            # a null contribution (partial all-reduce) is defined for the reductions that sum inputs
            "null": flag_null & ~(one_of(coll, (Collective.ALLREDUCE, Collective.REDUCE_SCATTER,
                                                Collective.REDUCE)) & (d.op == ReduceOp.SUM)),
            "zero_count": (d.count == 0) & ~barrier,
            "misaligned_src": uses_src & ((d.src & emask) != 0),
            "misaligned_dst": uses_dst & ((d.dst & emask) != 0),
            "bad_root": d.root >= size,
            "bad_algorithm": ~self.found | (p.n_phases < 1) | (p.n_phases > MAX_PHASES),
            "geometry": (self.geom_err.blocks_indivisible | self.geom_err.chunk_too_small
                         | self.geom_err.m_not_pow2 | self.geom_err.too_many_chunks),
            "chunk_beats": (self.chunk_beats > cfg.chunk_beats) | (self.chunk_beats == 0),
            "partitions": (self.part[0] == 0) | (self.part[TERMINAL_PARTITION] == 0),
            "message": g.slot_beats > cfg.max_message_beats,
            "slots": p.n_slots > min(cfg.max_slots, LOAD_MASK_BITS),
        }
        s1 = {name: Signal(name=f"s1_{name}") for name in early}
        s1_slot_total = Signal(16 + 11)     # slot_beats * n_slots
        s1_det = Signal(detail_layout())
        e = self.entry
        with m.If(start):
            m.d.sync += [s1[name].eq(failed) for name, failed in early.items()]
            m.d.sync += [
                s1_slot_total.eq(g.slot_beats * p.n_slots),
                s1_det.collective.eq(coll), s1_det.comm.eq(d.comm), s1_det.dtype.eq(d.dtype), s1_det.op.eq(d.op),
                s1_det.flags.eq(d.flags), s1_det.root.eq(d.root), s1_det.algorithm.eq(d.algorithm),
                s1_det.slot_beats.eq(g.slot_beats),
            ]
            m.d.sync += [
                e.dtype.eq(d.dtype), e.op.eq(d.op), e.tag.eq(d.tag[:16]),
                e.comm.eq(d.comm), e.rank.eq(rank), e.count.eq(count),
                e.elem_shift.eq(eshift), e.src.eq(d.src), e.dst.eq(d.dst),
                e.in_seg.eq(in_seg), e.out_seg.eq(out_seg), e.geom.eq(g),
                e.n_phases.eq(p.n_phases), e.phase_start.eq(p.phase_start), e.phase_len.eq(p.phase_len),
                e.load_end.eq(p.load_end), e.load_mask.eq(p.load_mask),
                e.n_slots.eq(p.n_slots), e.null.eq(flag_null),
                # (a barrier's one chunk picked after the product: the collective's decode does not sit in
                # front of the multiplier)
                e.arrivals.eq(Mux(barrier, p.arrivals, p.arrivals * self.geom.n_chunks)),
            ]

        # ---- stages 1 to 4 of the checks that need a product: in place, windows, the chunk buffer size -----
        m.submodules.placement = place = PlacementCheck(cfg, comm_cfg_layout(cfg))
        m.d.comb += [
            place.start.eq(start), place.src.eq(d.src), place.dst.eq(d.dst), place.nbytes.eq(nbytes),
            place.rank.eq(rank), place.size.eq(size), place.win_base.eq(self.win_base),
            place.win_size.eq(self.win_size),
            place.win_ok.eq(Cat(*[self.win_comms[i].bit_select(d.comm, 1)
                                  for i in range(cfg.n_windows)])),
            place.mode.rs.eq(is_rs), place.mode.ag.eq(is_ag), place.mode.in_seg.eq(in_seg),
            place.mode.out_seg.eq(out_seg), place.mode.uses_src.eq(uses_src), place.mode.uses_dst.eq(uses_dst),
            place.mode.in_place.eq(flag_in_place),
        ]
        s1_valid = Signal()
        s2_valid = Signal()
        s3_valid = Signal()
        s4_valid = Signal()
        s2_buffer = Signal()
        with m.If(s1_valid):
            m.d.sync += s2_buffer.eq(s1_slot_total > cfg.buffer_beats)

        # ---- stage 5: the first failing check -> code, det -------------------------------------------------
        m.submodules.first = first = FirstFailing(CHECKS, detail_layout())
        late = {"in_place": place.in_place, "src_window": place.src_window, "dst_window": place.dst_window,
                "buffer": s2_buffer}
        for name, _, _ in CHECKS:
            m.d.comb += getattr(first.failed, name).eq(late[name] if name in late else s1[name])
        with m.If(s4_valid):
            m.d.sync += e.windows.eq(place.windows)
        m.d.comb += [first.details.eq(s1_det), first.capture.eq(s4_valid),
                     self.code.eq(first.code), self.det.eq(first.det), self.checks.eq(first.checks)]
        m.d.sync += [s1_valid.eq(start), s2_valid.eq(s1_valid & ~start), s3_valid.eq(s2_valid & ~start),
                     s4_valid.eq(s3_valid & ~start), self.done.eq(s4_valid & ~start)]
        return m
