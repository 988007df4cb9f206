"""Chunk and block geometry (the chunker's arithmetic): a command's chunk geometry, and the size and addresses
of one block of one chunk.

Bit-exact with :class:`~syncfabric.sim.golden.chunking.Decomposition` (docs/programs.md sections 1-2) for a
chunk of ``chunk_beats`` beats (``chunk_bytes = chunk_beats * beat_bytes``). Per command (``S`` segments,
``count`` elements per segment of ``eb = 1 << elem_shift`` bytes, ``n_blocks`` blocks per chunk)::

    m               = n_blocks / S                  sub-blocks per segment
    seg_chunk_beats = chunk_beats // S              per-segment share of a full chunk
    E               = seg_chunk_beats * W / eb      elements per segment of a full chunk
    n_chunks        = ceil(count / E)
    chunk c         = elements [c*E, min((c+1)*E, count)) of every segment, cb_c bytes, ceil(cb_c / W) beats
    sub-block j     = beats [first, first + beats) with q, rem = divmod(n_beats, m),
                      first = j*q + min(j, rem), beats = q + (j < rem); bytes clipped to cb_c (may be empty)
    block b         = segment b // m, sub-block b % m
    address         = base + (segmented ? segment * count * eb : 0) + c*E*eb + min(first*W, cb_c)

:class:`CommandGeometry` divides once per command (one :class:`SeqDivider`, used five times in sequence) and
stores everything a lookup needs in a :func:`geometry_layout` struct, which the engine keeps in its command
table. :class:`BlockGeometry` then answers a (chunk, block) lookup per cycle, pipelined over four stages, with no
division: it needs only shifts (``W`` and ``eb`` are powers of two, and so is ``m`` when ``S > 1``), a multiply
by the sub-block index and two address multiplies.
"""

from amaranth.hdl import Cat, Const as C, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from ...sim.golden.program import FIELD_WIDTH
from ..common.layouts import packet_header_layout
from ..common.logic import split_product

__all__ = ["SeqDivider", "geometry_layout", "geometry_error_layout", "CommandGeometry", "BlockGeometry",
           "slot_offset", "MAX_CHUNKS"]

_HEADER = packet_header_layout()
_CHUNK_BITS = _HEADER["chunk"].width  # chunk index, as the ``chunk`` field of a packet header carries it
_KEY_BITS = _HEADER["key"].width      # a block number as a header's ``key`` carries it (a lookup may be out of range)

#: Most chunks a command may have: chunk indices travel in the ``chunk`` field of packet headers.
MAX_CHUNKS = 1 << _CHUNK_BITS

_COUNT_BITS = 32                          # elements per segment (descriptor field)
_BLOCK_BITS = FIELD_WIDTH["block"] + 1    # n_blocks up to 2**width: an instruction's block field, plus one
_SEGMENT_BITS = FIELD_WIDTH["peer"] + 1   # segments up to one per rank a ``peer`` field names
_BEAT_BITS = 16                           # chunk_beats register and every beat count derived from it


def _log2(x):
    assert x > 0 and x & (x - 1) == 0, f"{x} is not a power of two"
    return x.bit_length() - 1


class SeqDivider(wiring.Component):
    """Restoring sequential unsigned divider, radix 4: two quotient bits per cycle.

    A cycle with ``start`` high samples ``dividend`` and ``divisor`` (a ``start`` while ``busy`` abandons the
    division in progress and begins the new one). ``busy`` is high from the next cycle for ``ceil(width / 2)``
    cycles; then ``done`` pulses for one cycle, :attr:`latency` cycles after the ``start`` cycle, with
    ``quotient`` and ``remainder`` valid; they hold until the next ``start``. A zero divisor raises ``div_zero``
    and gives quotient all ones and remainder = dividend (the restoring loop's natural result, as RISC-V's
    ``divu``). Each cycle compares the shifted partial remainder with 1, 2 and 3 times the divisor at once.
    """

    @staticmethod
    def latency_for(width):
        """Cycles from a ``start`` cycle to its ``done`` cycle for a divider of ``width`` bits."""
        return (width + 1) // 2 + 1

    def __init__(self, width):
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self.width = width
        #: Cycles from a ``start`` cycle to its ``done`` cycle.
        self.latency = self.latency_for(width)
        super().__init__({
            "start": In(1),
            "dividend": In(width),
            "divisor": In(width),
            "busy": Out(1),
            "done": Out(1),
            "quotient": Out(width),
            "remainder": Out(width),
            "div_zero": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.width
        N = n + n % 2                  # an even number of dividend bits (a leading zero if n is odd)
        rem = Signal(N + 2)            # partial remainder (< divisor), room for the shift by two
        quo = Signal(N)                # dividend bits leave at the top, quotient digits enter at the bottom
        d1, d2, d3 = Signal(n + 2), Signal(n + 2), Signal(n + 2)     # 1, 2 and 3 times the divisor
        left = Signal(range(N // 2 + 1))
        shifted = Signal(N + 2)
        t1, t2, t3 = Signal(N + 3), Signal(N + 3), Signal(N + 3)     # shifted - k * divisor; top bit: borrow
        m.d.comb += [
            shifted.eq(Cat(quo[N - 2:N], rem[:N])),
            t1.eq(shifted - d1), t2.eq(shifted - d2), t3.eq(shifted - d3),
            self.quotient.eq(quo[:n]),
            self.remainder.eq(rem[:n]),
        ]
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            # 3 x divisor is added from the registers in the first busy cycle, not from the operands (their
            # select is the caller's): the first step compares a partial remainder below 4, which only a
            # divisor of 0 or 1 fits three times, so d3 starts as 0 or 3 for those and as "too large" otherwise
            m.d.sync += [
                rem.eq(0), quo.eq(self.dividend), d1.eq(self.divisor), d2.eq(self.divisor << 1),
                d3.eq(Mux(self.divisor[1:] == 0, Cat(self.divisor[0], self.divisor[0]), -1)), left.eq(N // 2),
                self.busy.eq(1), self.div_zero.eq(self.divisor == 0),
            ]
        with m.Elif(self.busy):
            with m.If(left == N // 2):
                m.d.sync += d3.eq(d1 + d2)
            with m.If(~t3[N + 2]):
                m.d.sync += [rem.eq(t3[:N + 2]), quo.eq(Cat(C(3, 2), quo[:N - 2]))]
            with m.Elif(~t2[N + 2]):
                m.d.sync += [rem.eq(t2[:N + 2]), quo.eq(Cat(C(2, 2), quo[:N - 2]))]
            with m.Elif(~t1[N + 2]):
                m.d.sync += [rem.eq(t1[:N + 2]), quo.eq(Cat(C(1, 2), quo[:N - 2]))]
            with m.Else():
                m.d.sync += [rem.eq(shifted), quo.eq(Cat(C(0, 2), quo[:N - 2]))]
            m.d.sync += left.eq(left - 1)
            with m.If(left == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m


def geometry_layout(cfg):
    """Per-command chunk geometry: what :class:`CommandGeometry` computes and :class:`BlockGeometry` reads.

    ``m`` sub-blocks per segment, ``m_shift`` = floor(log2 m) and ``m_pow2`` (m is a power of two: then block
    ``b`` is segment ``b >> m_shift``, sub-block ``b & (m - 1)``); ``seg_chunk_beats`` per-segment beats of a
    full chunk; ``e_elems`` its elements (E); ``n_chunks`` and ``last_chunk`` = n_chunks - 1 (a block
    lookup compares a chunk with it instead of adding 1 first); ``q_full``/``rem_full`` = divmod(seg_chunk_beats,
    m) (beat split of a full chunk); ``last_bytes`` per-segment bytes of the last chunk and
    ``q_last``/``rem_last`` = divmod(ceil(last_bytes / W), m); ``slot_beats`` = ceil(seg_chunk_beats / m),
    the largest block (golden ``slot_bytes / W``); ``n_blocks`` blocks per chunk (a deposit's block is checked
    against it).
    """
    wide = _BEAT_BITS + _log2(cfg.beat_bytes)     # a full chunk's bytes (or elements, eb >= 1)
    return data.StructLayout({
        "m": unsigned(_BLOCK_BITS),
        "m_shift": unsigned(4),
        "m_pow2": 1,
        "seg_chunk_beats": unsigned(_BEAT_BITS),
        "e_elems": unsigned(wide),
        "n_chunks": unsigned(_CHUNK_BITS + 1),
        "last_chunk": unsigned(_CHUNK_BITS + 1),
        "q_full": unsigned(_BEAT_BITS),
        "rem_full": unsigned(_BLOCK_BITS),
        "last_bytes": unsigned(wide),
        "q_last": unsigned(_BEAT_BITS),
        "rem_last": unsigned(_BLOCK_BITS),
        "slot_beats": unsigned(_BEAT_BITS),
        "n_blocks": unsigned(_BLOCK_BITS),
    })


def geometry_error_layout():
    """Why :class:`CommandGeometry` rejects a command (any bit set = ``bad``).

    ``count_zero``          count == 0.
    ``blocks_indivisible``  n_blocks % segments != 0, or segments == 0, or n_blocks == 0 (m would be 0).
    ``chunk_too_small``     seg_chunk_beats == 0: chunk_beats < segments (less than a beat per segment).
    ``m_not_pow2``          segments > 1 and m not a power of two (BlockGeometry splits block numbers with
                            shifts; the golden algorithms use m in {1, 2} there).
    ``too_many_chunks``     n_chunks > MAX_CHUNKS (the chunk index would not fit packet headers).
    """
    return data.StructLayout({
        "count_zero": 1,
        "blocks_indivisible": 1,
        "chunk_too_small": 1,
        "m_not_pow2": 1,
        "too_many_chunks": 1,
    })


class CommandGeometry(wiring.Component):
    """A command's chunk geometry, computed sequentially with one :class:`SeqDivider`.

    A cycle with ``start`` high samples ``count``, ``elem_shift`` (log2 of the element bytes), ``n_blocks``,
    ``segments`` and ``chunk_beats`` and raises ``busy``; ``done`` pulses :attr:`CYCLES` cycles after the
    ``start`` cycle, with ``result`` (:func:`geometry_layout`), ``error`` (:func:`geometry_error_layout`) and
    ``bad`` (any error) valid until the next ``start``. When ``bad`` is set, ``result`` may be meaningless.
    ``start`` is ignored while ``busy``; the ``done`` cycle is idle (``busy`` low) and takes a new ``start``.

    The five divisions, in order: n_blocks / S (m), chunk_beats / S (seg_chunk_beats), (count / k) /
    seg_chunk_beats with ``k = W / eb`` elements per beat (n_chunks and the tail), seg_chunk_beats / m and
    last_beats / m. Multiplying or dividing by W and eb is shifting.
    """

    _DIV_WIDTH = _COUNT_BITS
    _N_DIVS = 5
    #: Cycles from a ``start`` cycle to its ``done`` cycle (fixed): one to latch the inputs, then per
    #: division one to issue it and the divider's latency.
    CYCLES = 1 + _N_DIVS * (1 + SeqDivider.latency_for(_DIV_WIDTH))

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "start": In(1),
            "count": In(_COUNT_BITS),
            "elem_shift": In(2),
            "n_blocks": In(_BLOCK_BITS),
            "segments": In(_SEGMENT_BITS),
            "chunk_beats": In(_BEAT_BITS),
            "busy": Out(1),
            "done": Out(1),
            "result": Out(geometry_layout(cfg)),
            "error": Out(geometry_error_layout()),
            "bad": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        wb = _log2(self.cfg.beat_bytes)
        g = self.result
        err = self.error
        m.submodules.div = div = SeqDivider(self._DIV_WIDTH)

        count = Signal(_COUNT_BITS)
        eshift = Signal(2)
        n_blocks = Signal(_BLOCK_BITS)
        segments = Signal(_SEGMENT_BITS)
        chunk_beats = Signal(_BEAT_BITS)
        step = Signal(range(self._N_DIVS))

        # count = a * k + r0 with k = W / eb elements per beat, so count / E = a / seg_chunk_beats
        kshift = Signal(range(wb + 1))
        a = Signal(_COUNT_BITS)
        r0 = Signal(wb)
        m.d.comb += [
            kshift.eq(wb - eshift),
            a.eq(count >> kshift),
            r0.eq(count - (a << kshift)),
        ]
        last_beats = Signal(_BEAT_BITS + 1)
        m.d.comb += last_beats.eq((g.last_bytes + (self.cfg.beat_bytes - 1)) >> wb)
        # the division by seg_chunk_beats leaves tail = r * k + r0 elements; zero means the last chunk is full
        tail = Signal(_BEAT_BITS + wb)
        n_chunks = Signal(_COUNT_BITS + 1)
        m.d.comb += [
            tail.eq((div.remainder << kshift) | r0),
            n_chunks.eq(div.quotient + (tail != 0)),
        ]

        operands = [
            (n_blocks, segments),
            (chunk_beats, segments),
            (a, g.seg_chunk_beats),
            (g.seg_chunk_beats, g.m),
            (last_beats, g.m),
        ]
        assert len(operands) == self._N_DIVS
        q, r = div.quotient, div.remainder

        m.d.comb += self.bad.eq(err.as_value().any())
        m.d.sync += self.done.eq(0)
        with m.FSM(name="geometry"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [
                        count.eq(self.count), eshift.eq(self.elem_shift), n_blocks.eq(self.n_blocks),
                        segments.eq(self.segments), chunk_beats.eq(self.chunk_beats),
                        step.eq(0), err.eq(0),
                    ]
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += [self.busy.eq(1), div.start.eq(1)]
                with m.Switch(step):
                    for i, (dividend, divisor) in enumerate(operands):
                        with m.Case(i):
                            m.d.comb += [div.dividend.eq(dividend), div.divisor.eq(divisor)]
                m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += self.busy.eq(1)
                with m.If(div.done):
                    m.d.sync += step.eq(step + 1)
                    m.next = "ISSUE"
                    with m.Switch(step):
                        with m.Case(0):
                            mq = q[:_BLOCK_BITS]
                            pow2 = (mq != 0) & ((mq & (mq - 1)) == 0)
                            m.d.sync += [
                                g.m.eq(mq), g.m_pow2.eq(pow2), g.n_blocks.eq(n_blocks),
                                err.blocks_indivisible.eq((r != 0) | div.div_zero | (n_blocks == 0)),
                                err.m_not_pow2.eq((segments > 1) & ~pow2),
                                err.count_zero.eq(count == 0),
                            ]
                            m.d.sync += g.m_shift.eq(0)
                            for bit in range(_BLOCK_BITS):      # highest set bit wins
                                with m.If(mq[bit]):
                                    m.d.sync += g.m_shift.eq(bit)
                        with m.Case(1):
                            scb = q[:_BEAT_BITS]
                            m.d.sync += [
                                g.seg_chunk_beats.eq(scb),
                                g.e_elems.eq((scb << wb) >> eshift),
                                err.chunk_too_small.eq(scb == 0),
                            ]
                        with m.Case(2):
                            m.d.sync += [
                                g.n_chunks.eq(n_chunks), g.last_chunk.eq(n_chunks - 1),
                                g.last_bytes.eq(Mux(tail != 0, tail << eshift, g.seg_chunk_beats << wb)),
                                # not a second reason when seg_chunk_beats == 0 made the quotient all ones
                                err.too_many_chunks.eq((n_chunks > MAX_CHUNKS) & ~div.div_zero),
                            ]
                        with m.Case(3):
                            m.d.sync += [
                                g.q_full.eq(q), g.rem_full.eq(r),
                                g.slot_beats.eq(q + (r != 0)),
                            ]
                        with m.Case(4):
                            # done coincides with IDLE so that a new start may come in the done cycle
                            m.d.sync += [g.q_last.eq(q), g.rem_last.eq(r), self.done.eq(1)]
                            m.next = "IDLE"
        return m


class BlockGeometry(wiring.Component):
    """Size and addresses of block ``block`` of chunk ``chunk`` of a command, pipelined: a lookup presented in
    one cycle is answered :attr:`latency` cycles later, one lookup per cycle.

    Inputs: the command's ``geom`` (:func:`geometry_layout`), ``count``, ``elem_shift``, ``chunk``, ``block``
    (a header's whole ``key``), the send / receive buffer bases ``in_base`` / ``out_base`` and whether each is
    segmented for this collective (``in_seg``: reduce-scatter, all-to-all; ``out_seg``: all-gather,
    all-to-all).

    Outputs, registered (valid :attr:`latency` cycles after the inputs): ``segment`` and ``sub`` (block =
    segment*m + sub), ``is_last`` (the last chunk), ``nbytes`` (0 for an empty block; ``empty`` says so from
    a flip-flop of its own, the clipped ends' compare, so a decision on it starts at a register), ``beats`` =
    ceil(nbytes / W), ``first_beat`` (the sub-block's first beat inside the chunk's segment range, before
    clipping to the payload tail) and the byte addresses ``in_addr`` / ``out_addr`` of the block's first byte,
    equal to the golden :func:`~syncfabric.sim.golden.chunking.block_buffer_ranges` ``lo * eb`` plus the base,
    also for an empty block (modulo ``2**addr_width``), and ``in_range``: chunk < n_chunks and block <
    n_blocks (the other outputs hold only for a lookup in range: an FSM's or the load sequencer's lookups are
    by the program's legality; the deposit unit's come from a packet header and are checked). The buffer's
    segment is the block's segment: the engine only looks up blocks whose data the rank has (LOAD/STORE
    legality is the program's).

    Stages (each ends in registers; about one adder, compare or multiply deep, for a 1 GHz-class clock):

    1. last chunk?; in range?; the full or last chunk's beat split (q, rem) and bytes; segment and sub-block
       (shifts); a segment's bytes (count << elem_shift)
    2. the three products: sub * q, chunk * seg_chunk_beats, segment * segment bytes (each beat count and the
       segment only as wide as the configuration's ``chunk_beats`` allows); min(sub, rem)
    3. the sub-block's first beat and end beat; each buffer's base plus segment and chunk offsets
    4. clip both ends to the chunk's bytes; size, beats and the two addresses

    A wide engine (``cfg.control_stages``: the design point's 1,024-beat chunks make the chunk and segment
    products 16 x 11 and 10 x 48 bits) takes stage 2 in two: the two address products as two half products
    each (the low and high half of the narrower operand), then their sum, so :attr:`latency` is 5 there.
    """

    @staticmethod
    def latency_for(cfg):
        """Cycles from a lookup to its answer for an engine of configuration ``cfg``."""
        return 5 if cfg.control_stages else 4

    def __init__(self, cfg):
        self.cfg = cfg
        #: Cycles from a lookup to its answer.
        self.latency = self.latency_for(cfg)
        wide = _BEAT_BITS + _log2(cfg.beat_bytes)
        super().__init__({
            "geom": In(geometry_layout(cfg)),
            "count": In(_COUNT_BITS),
            "elem_shift": In(2),
            "chunk": In(_CHUNK_BITS),
            "block": In(_KEY_BITS),
            "in_base": In(cfg.addr_width),
            "out_base": In(cfg.addr_width),
            "in_seg": In(1),
            "out_seg": In(1),
            "segment": Out(_SEGMENT_BITS),
            "sub": Out(_BLOCK_BITS),
            "is_last": Out(1),
            "nbytes": Out(wide),
            "empty": Out(1),
            "beats": Out(_BEAT_BITS),
            "first_beat": Out(_BEAT_BITS),
            "in_addr": Out(cfg.addr_width),
            "out_addr": Out(cfg.addr_width),
            "in_range": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.cfg.beat_bytes
        A = self.cfg.addr_width
        wb = _log2(W)
        g = self.geom
        b = self.block[:_BLOCK_BITS]
        cbw = _BEAT_BITS + wb                   # bytes of a chunk's segment range
        ext = wb + 1                            # first/end beats -> bytes, one bit of headroom

        def regs(prefix, **shapes):
            return {k: Signal(v, name=f"{prefix}_{k}") for k, v in shapes.items()}

        # ---- stage 1: which split applies, and where the block is -------------------------------------------
        # m is a power of two whenever S > 1 (else CommandGeometry reports bad); with S == 1 every b < m
        # gives segment 0 and sub-block b either way.
        r1 = regs("s1", is_last=1, q=_BEAT_BITS, rem=_BLOCK_BITS, cb=cbw, seg=_SEGMENT_BITS, sub=_BLOCK_BITS,
                  chunk=_CHUNK_BITS, scb=_BEAT_BITS, seg_bytes=A, in_base=A, out_base=A, in_seg=1, out_seg=1,
                  in_range=1)
        is_last = Signal()
        m.d.comb += is_last.eq(self.chunk == g.last_chunk)
        m.d.sync += [
            r1["is_last"].eq(is_last),
            r1["in_range"].eq((self.chunk <= g.last_chunk) & (self.block < g.n_blocks)),
            r1["q"].eq(Mux(is_last, g.q_last, g.q_full)),
            r1["rem"].eq(Mux(is_last, g.rem_last, g.rem_full)),
            r1["cb"].eq(Mux(is_last, g.last_bytes, g.seg_chunk_beats << wb)),
            r1["seg"].eq(Mux(g.m_pow2, b >> g.m_shift, 0)),
            r1["sub"].eq(Mux(g.m_pow2, b & (g.m - 1), b)),
            r1["chunk"].eq(self.chunk), r1["scb"].eq(g.seg_chunk_beats),
            r1["seg_bytes"].eq(self.count << self.elem_shift),     # a segment's bytes (modulo the address space)
            r1["in_base"].eq(self.in_base), r1["out_base"].eq(self.out_base),
            r1["in_seg"].eq(self.in_seg), r1["out_seg"].eq(self.out_seg),
        ]

        # ---- stage 2: the products ----------------------------------------------------------------------------
        # c * E * eb = c * seg_chunk_beats * W: a chunk x beats multiply instead of chunk x E. The operands are only as
        # wide as a looked-up command allows: it passed validation (CHUNK_BEATS <= cfg.chunk_beats), so a
        # segment's beats and a sub-block's (q <= seg_chunk_beats) fit ``cbb`` bits, and its segments
        # (<= chunk_beats, else chunk_too_small) bound the segment of a block < n_blocks to ``sgb`` bits
        cbb = bits_for(self.cfg.chunk_beats)
        sgb = bits_for(max(self.cfg.chunk_beats - 1, 1))
        r2 = regs("s2", subq=_BLOCK_BITS + _BEAT_BITS, minsr=_BLOCK_BITS, extra=1, coff=_CHUNK_BITS + _BEAT_BITS,
                  in_soff=A, out_soff=A, q=_BEAT_BITS, cb=cbw, seg=_SEGMENT_BITS, sub=_BLOCK_BITS, is_last=1,
                  in_base=A, out_base=A, in_range=1)
        extra = Signal()
        m.d.comb += extra.eq(r1["sub"] < r1["rem"])
        subs = {"subq": r1["sub"] * r1["q"][:cbb], "minsr": Mux(extra, r1["sub"], r1["rem"]), "extra": extra}
        passed = ("q", "cb", "seg", "sub", "is_last", "in_base", "out_base", "in_range", "in_seg", "out_seg")
        if self.latency == 4:
            seg_off, coff = r1["seg"][:sgb] * r1["seg_bytes"], r1["chunk"] * r1["scb"][:cbb]
        else:
            # stage 2a: each address product as two partial products (``split_product``: the second operand's
            # low and high halves), and the sub-block's products, which stage 2b passes on
            coff = split_product(m, r1["chunk"], r1["scb"][:cbb], "s2a_coff")
            seg_off = split_product(m, r1["seg_bytes"], r1["seg"][:sgb], "s2a_soff")
            r = regs("s2a", **{k: len(r2[k]) for k in subs}, **{k: len(r1[k]) for k in passed})
            m.d.sync += [r[k].eq(v) for k, v in subs.items()] + [r[k].eq(r1[k]) for k in passed]
            # stage 2b: their sums
            subs, r1 = {k: r[k] for k in subs}, r
        m.d.sync += [
            r2["coff"].eq(coff),
            r2["in_soff"].eq(Mux(r1["in_seg"], seg_off[:A], 0)),
            r2["out_soff"].eq(Mux(r1["out_seg"], seg_off[:A], 0)),
        ] + [r2[k].eq(v) for k, v in subs.items()] + [r2[k].eq(r1[k]) for k in passed if k in r2]

        # ---- stage 3: the sub-block's beats, and the buffers' offsets up to the chunk -------------------------
        r3 = regs("s3", first=_BEAT_BITS + 1, end=_BEAT_BITS + 2, in_part=A, out_part=A, cb=cbw,
                  cbeats=_BEAT_BITS + 1, seg=_SEGMENT_BITS, sub=_BLOCK_BITS, is_last=1, in_range=1)
        chunk_off = Signal(A)
        first = Signal(_BEAT_BITS + 1)
        m.d.comb += [
            chunk_off.eq(r2["coff"] << wb),
            first.eq(r2["subq"] + r2["minsr"]),
        ]
        m.d.sync += [
            r3["first"].eq(first),
            r3["end"].eq(r2["subq"] + r2["minsr"] + r2["q"] + r2["extra"]),
            r3["in_part"].eq(r2["in_base"] + r2["in_soff"] + chunk_off),
            r3["out_part"].eq(r2["out_base"] + r2["out_soff"] + chunk_off),
            r3["cbeats"].eq((r2["cb"] + (W - 1)) >> wb),          # the chunk's bytes in beats, rounded up
        ] + [r3[k].eq(r2[k]) for k in ("cb", "seg", "sub", "is_last", "in_range")]

        # ---- stage 4: clip to the chunk's bytes; size and addresses -------------------------------------------
        # The sub-block's beats [first, end) clipped to the chunk's cb bytes: first * W < cb exactly when
        # first < ceil(cb / W) (cbeats), likewise end, so the compares are on beat counts, and every result is
        # computed for each outcome while the compares run (the compares only pick): size in beats
        # min(end, cbeats) - first, in bytes min(end * W, cb) - first * W, both 0 when the block starts past cb.
        lo_raw = Signal(_BEAT_BITS + 1 + ext)
        lo_in, hi_in = Signal(), Signal()
        m.d.comb += [
            lo_raw.eq(r3["first"] << wb),
            lo_in.eq(r3["first"] < r3["cbeats"]),
            hi_in.eq(r3["end"] < r3["cbeats"]),
        ]
        d_end = (r3["end"] - r3["first"])[:_BEAT_BITS + 1]
        d_cb = (r3["cbeats"] - r3["first"])[:_BEAT_BITS + 1]
        nbytes = Mux(lo_in, Mux(hi_in, d_end << wb, (r3["cb"] - lo_raw)[:cbw]), 0)
        beats = Mux(lo_in, Mux(hi_in, d_end, d_cb), 0)
        # each address is summed with both clip candidates while the compare runs, and the compare picks one
        # (a compare, a mux and a 32-bit add in series missed 1 GHz by a fraction of a picosecond)
        addrs = {}
        for k in ("in", "out"):
            addrs[k] = Mux(lo_in, r3[f"{k}_part"] + lo_raw, r3[f"{k}_part"] + r3["cb"])
        m.d.sync += [
            self.segment.eq(r3["seg"]),
            self.sub.eq(r3["sub"]),
            self.is_last.eq(r3["is_last"]),
            self.in_range.eq(r3["in_range"]),
            self.nbytes.eq(nbytes),
            self.empty.eq(~lo_in | (r3["end"] == r3["first"])),
            self.beats.eq(beats),
            self.first_beat.eq(r3["first"]),
            self.in_addr.eq(addrs["in"]),
            self.out_addr.eq(addrs["out"]),
        ]
        return m


def slot_offset(slot, geom):
    """Beat offset of slot ``slot`` in a chunk buffer: ``slot * geom.slot_beats`` (an Amaranth expression;
    slots are ``slot_beats`` apart, golden ``slot_bytes``)."""
    return slot * geom.slot_beats
