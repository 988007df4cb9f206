"""A link port on a few GPIO pins, for collectives between boards.

One :class:`PinLink` carries one engine link port (both directions) to the neighbouring board:

* the **flit lane** out: each flit of the engine's ``tx<k>`` stream, serialized onto ``width`` data pins with
  a ``frame`` pin (high on a flit's first word) and a ``strobe`` pin that toggles once per word (the receiver
  takes a word on each toggle);
* the **credit lane** back in: the neighbour's freed landing-buffer beats and headers (the engine's
  ``rx<k>_credit``), gathered per landing channel and sent as ``(channel, beats, headers)`` words, so no credit
  is ever lost however fast the neighbour frees them; they come out on ``tx_credit`` one beat and one header per
  cycle, as from an on-chip :class:`~syncfabric.hdl.system.link.Link`;
* and the same two lanes the other way (``flit_in``, ``credit_out``).

A flit sends its header only on a packet's first flit and its CRC only on the last (the fields the receiver
reads there, :func:`~syncfabric.hdl.common.layouts.flit_layout`), so a 16 B payload flit is 130 bits. A word
takes ``div`` cycles: data and frame change at the start of a word, the strobe toggles half-way. The receiver
passes every pin through a two-flop synchronizer and samples the data on the strobe's toggle, so the two boards
may run from separate oscillators as long as the receiver's clock is at least the sender's (within the usual
crystal tolerance; ``div >= 4``). Errors on the wires are caught by the engine's packet CRC.

Pins per link port (both directions): ``2 * (width + 2) + 2 * (credit_width + 2)`` (28 with the defaults).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from ..common.layouts import CHANNEL_BITS, credit_layout, flit_layout, packet_header_layout
from ..common.refuse import Checked

__all__ = ["LaneSignature", "LaneTx", "LaneRx", "PinLink", "flit_words", "credit_word_layout"]


def LaneSignature(width):
    """The pins of one lane, seen from its sender: ``data`` (``width``), ``frame``, ``strobe``."""
    return wiring.Signature({"data": Out(width), "frame": Out(1), "strobe": Out(1)})


def _words(bits, width):
    return -(-bits // width)


def flit_words(beat_bytes, width):
    """Words on the wire of a flit, by ``(first, last)``: ``{(0, 0): n, (1, 0): n, (0, 1): n, (1, 1): n}``."""
    d, h, c = 8 * beat_bytes, packet_header_layout().size, 32
    return {(f, l): _words(2 + d + f * h + l * c, width) for f in (0, 1) for l in (0, 1)}


def credit_word_layout(n_channels, count_bits):
    """One credit message: a landing channel and the beats and headers freed on it since the last one."""
    return data.StructLayout({
        "channel": unsigned(max(1, (n_channels - 1).bit_length())),
        "beats": unsigned(count_bits),
        "hdrs": unsigned(count_bits),
    })


class LaneTx(wiring.Component):
    """Sends each ``i`` payload (its low ``n_words * width`` bits) as ``n_words`` words on ``pins``, ``div``
    cycles per word; ``i.ready`` is high when the lane is idle."""

    def __init__(self, width, max_words, div=4):
        if div < 4 or div % 2:
            raise ValueError(f"div must be an even number >= 4, got {div}")
        self.width, self.max_words, self.div = width, max_words, div
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"bits": unsigned(width * max_words),
                                                        "n_words": range(max_words + 1)}))),
            "pins": Out(LaneSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.width
        sreg = Signal(w * self.max_words)
        left = Signal(range(self.max_words + 1))
        first = Signal()
        phase = Signal(range(self.div))
        m.d.comb += [self.pins.data.eq(sreg[:w]), self.i.ready.eq(left == 0)]
        with m.If(left == 0):
            with m.If(self.i.valid & (self.i.payload.n_words != 0)):
                m.d.sync += [sreg.eq(self.i.payload.bits), left.eq(self.i.payload.n_words), first.eq(1),
                             phase.eq(0)]
        with m.Else():
            m.d.comb += self.pins.frame.eq(first)
            m.d.sync += phase.eq(phase + 1)
            with m.If(phase == self.div // 2 - 1):
                m.d.sync += self.pins.strobe.eq(~self.pins.strobe)
            with m.If(phase == self.div - 1):
                m.d.sync += [phase.eq(0), sreg.eq(sreg >> w), left.eq(left - 1), first.eq(0)]
        return m


class LaneRx(wiring.Component):
    """Receives words from ``pins`` (through two-flop synchronizers) into a frame: the first word (``frame``
    high) starts it, ``n_words_of(first_word)`` words complete it, and ``o`` is valid for one cycle with the
    words in ``bits`` (first word lowest). Words outside a frame are dropped (``dropped`` counts them)."""

    def __init__(self, width, max_words, n_words_of):
        self.width, self.max_words, self.n_words_of = width, max_words, n_words_of
        super().__init__({
            "pins": In(LaneSignature(width)),
            "o": Out(stream.Signature(unsigned(width * max_words))),
            "dropped": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.width
        sync = Signal(w + 2)
        m.submodules.sync = FFSynchronizer(Cat(self.pins.data, self.pins.frame, self.pins.strobe), sync)
        word, frame, strobe = sync[:w], sync[w], sync[w + 1]
        last_strobe = Signal()
        m.d.sync += last_strobe.eq(strobe)
        take = strobe != last_strobe
        buf = Signal(w * self.max_words)
        idx = Signal(range(self.max_words + 1))
        need = Signal(range(self.max_words + 1))
        m.d.sync += self.o.valid.eq(0)
        m.d.comb += self.o.payload.eq(buf)
        with m.If(take):
            with m.If(frame):
                n = Signal.like(need)
                m.d.comb += n.eq(self.n_words_of(word))
                m.d.sync += [buf.word_select(0, w).eq(word), idx.eq(1), need.eq(n)]
                with m.If(n == 1):
                    m.d.sync += [self.o.valid.eq(1), idx.eq(0)]
            with m.Elif((idx != 0) & (idx < need)):
                m.d.sync += [buf.word_select(idx, w).eq(word), idx.eq(idx + 1)]
                with m.If(idx + 1 == need):
                    m.d.sync += [self.o.valid.eq(1), idx.eq(0)]
            with m.Else():
                m.d.sync += self.dropped.eq(self.dropped + 1)
        return m


class PinLink(Checked, wiring.Component):
    """Link port ``k`` of an engine configured by ``cfg``, on pins.

    Engine side (connect to the engine's ports as an on-chip :class:`~syncfabric.hdl.system.link.Link`
    would): ``tx`` (the engine's ``tx<k>`` flits), ``tx_credit`` (to its ``tx<k>_credit``), ``rx`` (to its
    ``rx<k>``; valid for one cycle per flit, the engine is always ready), ``rx_credit`` (its ``rx<k>_credit``).
    Pin side: ``flit_out``/``credit_out`` (lanes this board drives), ``flit_in``/``credit_in`` (lanes the
    neighbour drives). ``width``/``credit_width``: data pins per flit/credit lane; ``div``: cycles per word.
    Counters ``flits_out``, ``flits_in``; ``dropped`` counts words outside a frame (a wiring or clock
    problem).
    """

    @classmethod
    def check(cls, cfg, *, width=8, credit_width=2, div=4):
        if div < 4 or div % 2:
            raise ValueError(f"div must be an even number >= 4, got {div}")
        if width < 2 or credit_width < 1:
            raise ValueError(f"a flit lane needs >= 2 data pins and a credit lane >= 1, got {width}, {credit_width}")

    def __init__(self, cfg, *, width=8, credit_width=2, div=4):
        self.cfg, self.width, self.credit_width, self.div = cfg, width, credit_width, div
        self.words = flit_words(cfg.beat_bytes, width)
        self.max_words = max(self.words.values())
        self.n_channels = cfg.n_channels
        self.count_bits = max(cfg.landing_beats, cfg.landing_headers).bit_length() + 1
        self.cw_layout = credit_word_layout(self.n_channels, self.count_bits)
        self.credit_words = _words(self.cw_layout.size, credit_width)
        fl = flit_layout(cfg.beat_bytes)
        super().__init__({
            "tx": In(stream.Signature(fl)),
            "tx_credit": Out(credit_layout()),
            "rx": Out(stream.Signature(fl)),
            "rx_credit": In(credit_layout()),
            "flit_out": Out(LaneSignature(width)),
            "flit_in": In(LaneSignature(width)),
            "credit_out": Out(LaneSignature(credit_width)),
            "credit_in": In(LaneSignature(credit_width)),
            "flits_out": Out(32),
            "flits_in": Out(32),
            "dropped": Out(16),
        })

    def _flit_bits(self, m, flit, bits, n_words):
        """Drive ``bits``/``n_words`` with the wire form of ``flit``."""
        with m.Switch(Cat(flit.first, flit.last)):
            for (f, l), n in self.words.items():
                with m.Case(f | (l << 1)):
                    parts = [flit.first, flit.last, flit.data] + ([flit.hdr] if f else []) + ([flit.crc] if l else [])
                    m.d.comb += [bits.eq(Cat(*parts)), n_words.eq(n)]

    def _flit_of(self, m, bits, flit):
        """Drive ``flit`` from the wire form ``bits``."""
        d = len(flit.data.as_value()) if hasattr(flit.data, "as_value") else len(flit.data)
        h = packet_header_layout().size
        m.d.comb += [flit.first.eq(bits[0]), flit.last.eq(bits[1]), flit.data.eq(bits[2:2 + d])]
        with m.If(bits[0]):
            m.d.comb += flit.hdr.eq(bits[2 + d:2 + d + h])
            with m.If(bits[1]):
                m.d.comb += flit.crc.eq(bits[2 + d + h:2 + d + h + 32])
        with m.Elif(bits[1]):
            m.d.comb += flit.crc.eq(bits[2 + d:2 + d + 32])

    def elaborate(self, platform):
        m = Module()
        w, cw = self.width, self.credit_width
        words = self.words

        # ---- flits out ------------------------------------------------------------------------------------
        m.submodules.flit_tx = ftx = LaneTx(w, self.max_words, self.div)
        wiring.connect(m, ftx.pins, wiring.flipped(self.flit_out))
        fl = flit_layout(self.cfg.beat_bytes)
        # (fabric) every signal to and from the engine starts and ends at a flip-flop here, so the port's
        # place beside the pins adds no routing to a path inside the engine: a one-flit buffer in front of the
        # flit lane (its ready a flip-flop; a flit takes >= 4 words of `div` cycles on the wire, so the buffer
        # costs no throughput), the arriving flits and both credit streams each a cycle later
        fabric = bool(self.cfg.fabric)
        if fabric:
            held, full = Signal(fl, name="tx_held", reset_less=True), Signal(name="tx_full")
            m.d.comb += self.tx.ready.eq(~full)
            with m.If(self.tx.valid & ~full):
                m.d.sync += [held.eq(self.tx.payload), full.eq(1)]
            with m.Elif(ftx.i.ready):
                m.d.sync += full.eq(0)
            self._flit_bits(m, held, ftx.i.payload.bits, ftx.i.payload.n_words)
            m.d.comb += ftx.i.valid.eq(full)
        else:
            self._flit_bits(m, self.tx.payload, ftx.i.payload.bits, ftx.i.payload.n_words)
            m.d.comb += [ftx.i.valid.eq(self.tx.valid), self.tx.ready.eq(ftx.i.ready)]
        m.d.sync += self.flits_out.eq(self.flits_out + (self.tx.valid & self.tx.ready))

        # ---- flits in -------------------------------------------------------------------------------------
        def n_flit_words(word):
            return Mux(word[0], Mux(word[1], words[(1, 1)], words[(1, 0)]),
                       Mux(word[1], words[(0, 1)], words[(0, 0)]))
        m.submodules.flit_rx = frx = LaneRx(w, self.max_words, n_flit_words)
        wiring.connect(m, wiring.flipped(self.flit_in), frx.pins)
        if fabric:
            # (the flit registers hold data only: off the reset net, which reaches every unit's control state)
            rx_flit, rx_held = Signal(fl, name="rx_flit"), Signal(fl, name="rx_held", reset_less=True)
            self._flit_of(m, frx.o.payload, rx_flit)
            m.d.sync += [self.rx.valid.eq(frx.o.valid), rx_held.eq(rx_flit)]
            m.d.comb += self.rx.payload.eq(rx_held)
        else:
            self._flit_of(m, frx.o.payload, self.rx.payload)
            m.d.comb += self.rx.valid.eq(frx.o.valid)
        m.d.comb += frx.o.ready.eq(1)
        m.d.sync += self.flits_in.eq(self.flits_in + frx.o.valid)

        # ---- credits out: gather the engine's freed beats/headers per channel, send them as words ------------
        NC, cb = self.n_channels, self.count_bits
        beats = [Signal(cb, name=f"owe_beats{c}") for c in range(NC)]
        hdrs = [Signal(cb, name=f"owe_hdrs{c}") for c in range(NC)]
        m.submodules.credit_tx = ctx = LaneTx(cw, self.credit_words, self.div)
        wiring.connect(m, ctx.pins, wiring.flipped(self.credit_out))
        cwl = self.cw_layout
        msg = Signal(cwl)
        pick = Signal(range(max(2, NC)))
        any_owed = Signal()
        for c in reversed(range(NC)):
            with m.If((beats[c] != 0) | (hdrs[c] != 0)):
                m.d.comb += [pick.eq(c), any_owed.eq(1)]
        with m.Switch(pick):
            for c in range(NC):
                with m.Case(c):
                    m.d.comb += [msg.channel.eq(c), msg.beats.eq(beats[c]), msg.hdrs.eq(hdrs[c])]
        send = any_owed & ctx.i.ready
        m.d.comb += [ctx.i.valid.eq(any_owed), ctx.i.payload.bits.eq(msg), ctx.i.payload.n_words.eq(self.credit_words)]
        cr = self.rx_credit
        if fabric:
            cr = Signal(credit_layout(), name="rx_credit_late")
            m.d.sync += cr.eq(self.rx_credit)
        for c in range(NC):
            sent = send & (pick == c)
            m.d.sync += [
                beats[c].eq(beats[c] - Mux(sent, msg.beats, 0) + (cr.beat & (cr.beat_vc == c))),
                hdrs[c].eq(hdrs[c] - Mux(sent, msg.hdrs, 0) + (cr.hdr & (cr.hdr_vc == c))),
            ]

        # ---- credits in: add each message to what is due, hand out one beat and one header per cycle -------
        m.submodules.credit_rx = crx = LaneRx(cw, self.credit_words, lambda word: self.credit_words)
        wiring.connect(m, wiring.flipped(self.credit_in), crx.pins)
        got = Signal(cwl)
        m.d.comb += [got.eq(crx.o.payload), crx.o.ready.eq(1)]
        due_b = [Signal(cb + 1, name=f"due_beats{c}") for c in range(NC)]
        due_h = [Signal(cb + 1, name=f"due_hdrs{c}") for c in range(NC)]
        out = Signal(credit_layout(), name="tx_credit_next") if fabric else self.tx_credit
        if fabric:
            m.d.sync += self.tx_credit.eq(out)
        for due, flag, vc, field_ in ((due_b, out.beat, out.beat_vc, "beats"), (due_h, out.hdr, out.hdr_vc, "hdrs")):
            sel = Signal(range(max(2, NC)))
            for c in reversed(range(NC)):
                with m.If(due[c] != 0):
                    m.d.comb += [sel.eq(c), flag.eq(1)]
            m.d.comb += vc.eq(sel)
            for c in range(NC):
                add = Mux(crx.o.valid & (got.channel == c), getattr(got, field_), 0)
                m.d.sync += due[c].eq(due[c] + add - (flag & (sel == c)))
        m.d.comb += self.dropped.eq(frx.dropped + crx.dropped)
        return m
