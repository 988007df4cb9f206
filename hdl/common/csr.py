"""The engine's register bus and a register bank generated from a :class:`~.regmap.RegisterMap`.

Bus protocol (:class:`CsrSignature`, 32-bit data, byte addresses): the host starts an access by holding
``we`` (write) or ``re`` (read) high for exactly one cycle together with ``addr`` (and ``wdata``). The bank
answers with ``ack`` high for exactly one cycle, one or more cycles later; on a read ``rdata`` is valid while
``ack`` is high (and 0 on a write). One access is outstanding at a time: the host starts the next one at the
earliest in the cycle after ``ack``. Reads of an unmapped or misaligned address return 0, writes to one are
ignored; both are acknowledged (the host never hangs) and counted in ``unmapped``.

Latency of :class:`CsrBank`, counted from the request cycle (``we``/``re`` high) to the ``ack`` cycle:

=====================================================  =================
register write (and any write: unmapped, misaligned)   2 cycles
window write                                           2 cycles
register read (and a read of an unmapped address)      3 cycles
window read                                            ``3 + latency``
=====================================================  =================

(``latency`` of the window, see below.) The bank is a pipeline with no combinational path from the bus pins:
cycle 0 registers the request (``addr``, ``wdata``, ``we``, ``re``); cycle 1, the decode cycle, decodes it
from those flops, performs a register write (``ack`` and the new value in cycle 2), starts a window access,
and registers the first level of the read mux (one word per 256-byte page of registers); cycle 2 selects the
page into ``rdata`` (``ack`` in cycle 3). ``ack`` and ``rdata`` come straight from flops. (Before this
pipeline, every access but a window read took 1 cycle and a window read ``2 + latency``.)

Engine side of :class:`CsrBank`, by access type (``bank.reg(name, index)`` is the register's signal, 64-bit
registers are one 64-bit signal):

``rw``   ``reg`` holds the value; ``strobe(name)`` is high for one cycle after each host write to any of its
         words, in the first cycle the new value is visible, which is the write's ``ack`` cycle (2 cycles
         after the request).
``wo``   as ``rw``, but host reads return 0.
``ro``   the engine drives ``reg``; the bank samples it when the host reads, in the decode cycle (1 cycle
         after the request, 2 before ``ack``). Undriven, it reads as its reset value (how the ID and CFG
         registers are constants). A read of the low word of a 64-bit ``ro`` register also captures its high
         word (in the same cycle), and a read of the high word returns that capture, so a host that reads
         low then high gets a consistent 64-bit value of a running counter.
``w1c``  ``reg`` holds the bits; the engine sets bits by driving ``set(name)`` (an OR mask, any cycle); a host
         write clears the bits written as 1, in the decode cycle (visible from the ``ack`` cycle). A bit set
         in the cycle the clear takes effect stays set, and so does a bit set in the request cycle (the
         cycle before it), so no event that arrives during the write is lost.

``unmapped`` has counted an access to an unmapped or misaligned address by the cycle after its ``ack``.

Windows: ``bank.window(name)`` is a :class:`WindowSignature` interface. For a host access to word ``i`` the
bank drives ``addr`` = ``i`` and ``wdata``, and pulses ``we`` or ``re`` for one cycle (2 cycles after the
request; for a write, in its ``ack`` cycle); ``addr`` and ``wdata``
then stay unchanged until the next window access, so the engine may multiplex a wider memory by the low
address bits. On ``we`` the engine writes ``wdata`` at the end of that cycle. After ``re`` the engine must
present the word on ``rdata`` ``latency`` cycles later (``latency`` = 0: in the ``re`` cycle, combinationally;
1, the default: a synchronous ``Memory.read_port()`` whose ``addr`` is the window's ``addr``); the bank waits
for it before ``ack``.
"""

from collections import namedtuple

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .regmap import RegisterMap, RegisterMapError

__all__ = ["CsrSignature", "WindowSignature", "CsrBank"]


class CsrSignature(wiring.Signature):
    """The register bus as seen from the engine: ``addr`` (byte address), ``wdata``, ``we``, ``re`` come in,
    ``rdata`` and ``ack`` go out (protocol in the module docstring).

    A component serving the bus declares ``csr: Out(CsrSignature())``; the host side (a bridge, a
    testbench model) uses ``In(CsrSignature())``.
    """

    def __init__(self, addr_width=16):
        if not isinstance(addr_width, int) or not 3 <= addr_width <= 32:
            raise ValueError(f"addr_width must be an integer in 3..32, got {addr_width!r}")
        self.addr_width = addr_width
        super().__init__({
            "addr": In(addr_width),
            "wdata": In(32),
            "we": In(1),
            "re": In(1),
            "rdata": Out(32),
            "ack": Out(1),
        })

    def __eq__(self, other):
        return isinstance(other, CsrSignature) and other.addr_width == self.addr_width

    def __hash__(self):
        return hash((CsrSignature, self.addr_width))

    def __repr__(self):
        return f"CsrSignature({self.addr_width})"


class WindowSignature(wiring.Signature):
    """A window port as seen from the bank: word ``addr``, ``wdata``, ``we``, ``re`` go out to the engine's
    memory, ``rdata`` comes back ``latency`` cycles after ``re`` (see the module docstring)."""

    def __init__(self, words):
        self.words = words
        super().__init__({
            "addr": Out(range(max(2, words))),
            "wdata": Out(32),
            "we": Out(1),
            "re": Out(1),
            "rdata": In(32),
        })

    def __eq__(self, other):
        return isinstance(other, WindowSignature) and other.words == self.words

    def __hash__(self):
        return hash((WindowSignature, self.words))

    def __repr__(self):
        return f"WindowSignature({self.words})"


#: The registered bus request the bank decodes (stage 1 of its pipeline).
_Request = namedtuple("_Request", "addr wdata we re")


def _signal_name(reg):
    return reg.name.lower() + ("" if reg.index is None else f"_{reg.index}")


class CsrBank(wiring.Component):
    """Decodes the register bus for ``regmap`` (a :class:`~.regmap.RegisterMap`).

    Ports: ``bus`` (:class:`CsrSignature`, ``addr_width`` bits, by default the fewest that cover
    ``regmap.size`` and at least 16), ``unmapped`` (a saturating count of accesses to unmapped addresses) and
    ``refused`` (a pulse, the cycle after the decode cycle, for each host write ignored because its register
    was locked: :meth:`lock`).
    ``window_latency`` is the read latency of every window (an int) or a ``{window name: latency}`` dict
    (missing windows: 1).

    The engine-facing signals are reached by name (see the module docstring): :meth:`reg`, :meth:`field`,
    :meth:`strobe`, :meth:`set`, :meth:`window`.
    """

    def __init__(self, regmap, *, addr_width=None, window_latency=1):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"CsrBank needs a RegisterMap, got {regmap!r}")
        need = max(16, (regmap.size - 1).bit_length())
        addr_width = need if addr_width is None else addr_width
        if (1 << addr_width) < regmap.size:
            raise RegisterMapError(f"register map {regmap.name!r} ({regmap.size:#x} bytes) needs a "
                                   f"{need}-bit address, the bus has {addr_width}")
        self.regmap = regmap
        self._latency = {}
        for w in regmap.windows():
            lat = window_latency.get(w.name, 1) if isinstance(window_latency, dict) else window_latency
            if isinstance(lat, bool) or not isinstance(lat, int) or lat < 0:
                raise ValueError(f"read latency of window {w.name} must be a non-negative integer, got {lat!r}")
            self._latency[w.name] = lat
        if isinstance(window_latency, dict):
            unknown = set(window_latency) - set(self._latency)
            if unknown:
                raise RegisterMapError(f"window_latency names unknown windows: {', '.join(sorted(unknown))}")
        super().__init__({"bus": Out(CsrSignature(addr_width)), "unmapped": Out(16), "refused": Out(1)})

        self._regs, self._strobes, self._sets, self._shadows, self._locks = {}, {}, {}, {}, {}
        for reg in regmap.registers():
            name = _signal_name(reg)
            self._regs[reg.key] = Signal(reg.width, init=reg.init, name=name)
            if reg.access in ("rw", "wo"):
                self._strobes[reg.key] = Signal(name=f"{name}_strobe")
            elif reg.access == "w1c":
                self._sets[reg.key] = Signal(reg.width, name=f"{name}_set")
            elif reg.width == 64:     # ro: the high word captured by a read of the low word
                self._shadows[reg.key] = Signal(32, name=f"{name}_hi_capture")
        self._windows = {w.name: WindowSignature(w.words).create(path=("win", w.name.lower()))
                         for w in regmap.windows()}

    # -- engine-facing accessors ----------------------------------------------------------------------------
    def _key(self, name, index):
        return self.regmap.register(name, index).key     # raises a clear error for unknown names

    def reg(self, name, index=None):
        """The signal of register ``name`` (``index`` for arrays): the stored value for ``rw``/``wo``/``w1c``
        registers, the signal the engine drives for ``ro`` registers."""
        return self._regs[self._key(name, index)]

    def field(self, name, field, index=None):
        """The bits of ``field`` of register ``name`` (a slice of :meth:`reg`)."""
        f = self.regmap.register(name, index).field(field)
        return self.reg(name, index)[f.lsb:f.lsb + f.width]

    def strobe(self, name, index=None):
        """The one-cycle write strobe of ``rw``/``wo`` register ``name``."""
        key = self._key(name, index)
        if key not in self._strobes:
            raise RegisterMapError(f"{self.regmap.register(name, index).label} is "
                                   f"{self.regmap.register(name, index).access}: only rw and wo registers "
                                   f"have a write strobe")
        return self._strobes[key]

    def lock(self, name, index=None):
        """A signal the engine drives for ``rw`` register ``name``: while it is high in the decode cycle of a
        host write, the write is ignored (no new value, no strobe; the bus still acknowledges it) and
        ``refused`` pulses. Drive it from a register: it is decided on in the decode cycle."""
        reg = self.regmap.register(name, index)
        if reg.access != "rw":
            raise RegisterMapError(f"{reg.label} is {reg.access}: only rw registers can be locked")
        return self._locks.setdefault(reg.key, Signal(name=f"{_signal_name(reg)}_lock"))

    def set(self, name, index=None):
        """The set mask the engine drives for ``w1c`` register ``name``."""
        key = self._key(name, index)
        if key not in self._sets:
            raise RegisterMapError(f"{self.regmap.register(name, index).label} is not a w1c register")
        return self._sets[key]

    def window(self, name):
        """The port of window ``name`` (a :class:`WindowSignature` interface) to attach a memory to."""
        self.regmap.window(name)
        return self._windows[name]

    def window_latency(self, name):
        """The read latency the bank expects from window ``name``."""
        self.regmap.window(name)
        return self._latency[name]

    # -- logic --------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        busy = Signal()                      # a window read is waiting for its data
        wait = Signal(range(max(self._latency.values(), default=0) + 1))
        wins = list(self.regmap.windows())
        sel = Signal(range(max(2, len(wins))))

        # pulses last one cycle; rdata is only meaningful with ack, so it is 0 otherwise
        m.d.sync += [bus.ack.eq(0), bus.rdata.eq(0)]
        for strobe in self._strobes.values():
            m.d.sync += strobe.eq(0)
        for port in self._windows.values():
            m.d.sync += [port.we.eq(0), port.re.eq(0)]

        # -- stage 1 (the request cycle): the request goes from the bus pins straight into flops --------------
        req = _Request(addr=Signal(len(bus.addr), name="req_addr", reset_less=True),
                       wdata=Signal(32, name="req_wdata", reset_less=True),
                       we=Signal(name="req_we"), re=Signal(name="req_re"))
        m.d.sync += [req.addr.eq(bus.addr), req.wdata.eq(bus.wdata), req.we.eq(bus.we), req.re.eq(bus.re)]

        # -- stage 2 (the decode cycle): every decision from the registered request ----------------------------
        # A request is ignored while a window read waits (the protocol never issues one then); a write wins
        # if we and re are both high.
        wr = Signal(name="req_write")
        rd = Signal(name="req_read")
        m.d.comb += [wr.eq(req.we & ~busy), rd.eq(req.re & ~req.we & ~busy)]
        aligned = req.addr[:2] == 0

        hits, win_words = [], []
        for w in wins:
            hit = Signal(name=f"hit_{w.name.lower()}")
            size = w.end - w.offset
            if size & (size - 1) == 0 and w.offset % size == 0:     # aligned: an equality on the high bits
                k = size.bit_length() - 1
                m.d.comb += hit.eq((req.addr[k:] == w.offset >> k) & aligned)
                win_words.append(req.addr[2:k])
            else:
                m.d.comb += hit.eq((req.addr >= w.offset) & (req.addr < w.end) & aligned)
                win_words.append((req.addr - w.offset)[2:])
            hits.append(hit)
        win_hit = Signal()
        m.d.comb += win_hit.eq(Cat(*hits).any() if hits else 0)

        # registers: one flat comparator per word, not behind the window decode (their addresses are disjoint)
        clear = {key: Signal(len(self._regs[key]), name=f"{self._regs[key].name}_clear") for key in self._sets}
        refused = []
        for reg in self.regmap.registers():
            for half, addr in enumerate(reg.addresses):
                match = Signal(name=f"at_{_signal_name(reg)}_{half}" if reg.width == 64 else
                               f"at_{_signal_name(reg)}")
                m.d.comb += match.eq(req.addr == addr)
                write = wr & match
                if reg.key in self._locks:
                    refused.append(write & self._locks[reg.key])
                    write = write & ~self._locks[reg.key]
                self._word_access(m, req.wdata, write, rd & match, reg, half, clear)
        m.d.sync += self.refused.eq(_or_all(refused) if refused else 0)

        # w1c registers: an engine set wins over a host clear in the same cycle, so no event is lost. The clear
        # takes effect in the decode cycle; a set in the request cycle (the cycle before) wins as well, through
        # its one-cycle-delayed copy, as when the clear took effect in the request cycle.
        for key, s in self._sets.items():
            s_prev = Signal(len(s), name=f"{s.name}_prev")
            m.d.sync += s_prev.eq(s)
            m.d.sync += self._regs[key].eq((self._regs[key] & ~(clear[key] & ~s_prev)) | s)

        # unmapped: the decode cycle registers which page's register words (or which window) the access hit,
        # the next cycle counts an access that hit none
        access, in_window = Signal(name="access"), Signal(name="access_in_window")
        mapped = self._register_mapped(m, req.addr)
        m.d.sync += [access.eq(wr | rd), in_window.eq(win_hit)]
        with m.If(access & ~in_window & ~mapped.any() & (self.unmapped != 0xFFFF)):
            m.d.sync += self.unmapped.eq(self.unmapped + 1)

        # register reads: level 1 of the read mux (a word per page) is registered in the decode cycle, level 2
        # (the page) in the next one, with ack
        rd_reg = Signal(name="read_pending")             # a read of a register or of an unmapped address
        page_hit, page_word = self._read_mux_level1(m, req.addr, req.re)
        m.d.sync += rd_reg.eq(rd & ~win_hit)

        # windows
        with m.If(busy):
            with m.If(wait == 0):
                with m.Switch(sel):
                    for i, w in enumerate(wins):
                        with m.Case(i):
                            m.d.sync += bus.rdata.eq(self._windows[w.name].rdata)
                m.d.sync += [bus.ack.eq(1), busy.eq(0)]
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        with m.Elif(req.we | req.re):
            for i, (w, hit) in enumerate(zip(wins, hits)):
                with m.If(hit):
                    port = self._windows[w.name]
                    m.d.sync += [port.addr.eq(win_words[i]), port.wdata.eq(req.wdata)]
                    with m.If(req.we):
                        if w.access == "rw":
                            m.d.sync += port.we.eq(1)
                    with m.Else():   # the data comes back later: no ack yet
                        m.d.sync += [port.re.eq(1), busy.eq(1), wait.eq(self._latency[w.name]), sel.eq(i)]
            with m.If(req.we):
                m.d.sync += bus.ack.eq(1)          # every write: ack from the decode cycle

        # -- stage 3 (register reads): the page select, into rdata --------------------------------------------
        with m.If(rd_reg):
            m.d.sync += bus.ack.eq(1)
            if page_word:
                m.d.sync += bus.rdata.eq(_or_all([Mux(page_hit[i], word, 0) for i, word in enumerate(page_word)]))
        return m

    def _register_mapped(self, m, addr):
        """Whether ``addr`` is a register word, registered in the decode cycle, one bit per 256-byte page:
        the page's constant bit mask indexed by ``addr[2:8]`` (a small lookup, not one comparator per word)."""
        pages = {}
        for reg in self.regmap.registers():
            for a in reg.addresses:
                pages[a >> 8] = pages.get(a >> 8, 0) | 1 << ((a >> 2) & 63)
        mapped = Signal(max(1, len(pages)), name="register_mapped")
        for i, (page, mask) in enumerate(sorted(pages.items())):
            m.d.sync += mapped[i].eq((addr[8:] == page) & (addr[:2] == 0) &
                                     Const(mask, 64).bit_select(addr[2:8], 1))
        return mapped

    def _read_mux_level1(self, m, addr, capture):
        """Level 1 of the register read mux: for each 256-byte page that holds readable registers, the word at
        ``addr[2:8]`` (0 where no readable register is), registered when ``capture``; and the registered
        one-hot page select (the page of an aligned ``addr``; all zero for unmapped pages and misaligned
        addresses). Returns ``(page_hit, page_word)``; level 2 ORs the selected word into ``rdata``.

        ``ro`` registers are sampled here, in the decode cycle; the high word of a 64-bit ``ro`` register reads
        its capture (see :meth:`_word_access`)."""
        pages = {}
        for reg in self.regmap.registers():
            if reg.access == "wo":
                continue
            value = self._regs[reg.key]
            for half, a in enumerate(reg.addresses):
                if reg.access == "ro" and reg.width == 64 and half == 1:
                    src = self._shadows[reg.key]
                else:
                    src = value[32 * half:32 * half + 32]
                pages.setdefault(a >> 8, {})[(a >> 2) & 63] = src
        aligned = addr[:2] == 0
        page_hit = Signal(max(1, len(pages)), name="read_page")
        page_word = []
        for i, (page, words) in enumerate(sorted(pages.items())):
            word = Signal(32, name=f"read_page{page:x}_word", reset_less=True)
            n = 1 << max(words).bit_length()          # the table, padded to a power of two
            table = Cat(*(words.get(j, Const(0, 32)) for j in range(n)))
            with m.If(capture):
                m.d.sync += word.eq(table.word_select(addr[2:2 + (n - 1).bit_length()], 32) if n > 1 else table)
            m.d.sync += page_hit[i].eq((addr[8:] == page) & aligned & (addr[2:8] < n))
            page_word.append(word)
        return page_hit, page_word

    def _word_access(self, m, wdata, write, read, reg, half, clear):
        """A host write (``write``) or read (``read``) of word ``half`` of ``reg``, decided in the decode
        cycle."""
        value = self._regs[reg.key]
        word = value[32 * half:32 * half + 32]
        if reg.access in ("rw", "wo"):
            with m.If(write):
                m.d.sync += [word.eq(wdata), self._strobes[reg.key].eq(1)]
        elif reg.access == "w1c":
            m.d.comb += clear[reg.key][32 * half:32 * half + 32].eq(Mux(write, wdata, 0))
        # ro: writes are ignored
        if reg.access == "ro" and reg.width == 64 and half == 0:
            with m.If(read):    # the read returns the low word and captures the high one
                m.d.sync += self._shadows[reg.key].eq(value[32:])


def _or_all(values):
    """The OR of ``values`` as a balanced tree."""
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]
