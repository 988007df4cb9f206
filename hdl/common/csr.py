"""The engine's register bus and a register bank generated from a :class:`~.regmap.RegisterMap`.

Bus protocol (:class:`CsrSignature`, 32-bit data, byte addresses): the host starts an access by holding
``we`` (write) or ``re`` (read) high for exactly one cycle together with ``addr`` (and ``wdata``). The bank
answers with ``ack`` high for exactly one cycle, one or more cycles later; on a read ``rdata`` is valid while
``ack`` is high (and 0 on a write). One access is outstanding at a time: the host starts the next one at the
earliest in the cycle after ``ack``. Reads of an unmapped or misaligned address return 0, writes to one are
ignored; both are acknowledged (the host never hangs) and counted in ``unmapped``.

Latency of :class:`CsrBank`: ``ack`` comes one cycle after the request for registers and window writes,
``2 + latency`` cycles after it for window reads (``latency`` of the window, see below).

Engine side of :class:`CsrBank`, by access type (``bank.reg(name, index)`` is the register's signal, 64-bit
registers are one 64-bit signal):

``rw``   ``reg`` holds the value; ``strobe(name)`` is high for one cycle after each host write to any of its
         words, in the first cycle the new value is visible.
``wo``   as ``rw``, but host reads return 0.
``ro``   the engine drives ``reg``; the bank samples it when the host reads. Undriven, it reads as its reset
         value (how the ID and CFG registers are constants). A read of the low word of a 64-bit ``ro``
         register also captures its high word, and a read of the high word returns that capture, so a host
         that reads low then high gets a consistent 64-bit value of a running counter.
``w1c``  ``reg`` holds the bits; the engine sets bits by driving ``set(name)`` (an OR mask, any cycle); a host
         write clears the bits written as 1. A bit set and cleared in the same cycle stays set.

Windows: ``bank.window(name)`` is a :class:`WindowSignature` interface. For a host access to word ``i`` the
bank drives ``addr`` = ``i`` and ``wdata``, and pulses ``we`` or ``re`` for one cycle; ``addr`` and ``wdata``
then stay unchanged until the next window access, so the engine may multiplex a wider memory by the low
address bits. On ``we`` the engine writes ``wdata`` at the end of that cycle. After ``re`` the engine must
present the word on ``rdata`` ``latency`` cycles later (``latency`` = 0: in the ``re`` cycle, combinationally;
1, the default: a synchronous ``Memory.read_port()`` whose ``addr`` is the window's ``addr``); the bank waits
for it before ``ack``.
"""

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


def _signal_name(reg):
    return reg.name.lower() + ("" if reg.index is None else f"_{reg.index}")


class CsrBank(wiring.Component):
    """Decodes the register bus for ``regmap`` (a :class:`~.regmap.RegisterMap`).

    Ports: ``bus`` (:class:`CsrSignature`, ``addr_width`` bits, by default the fewest that cover
    ``regmap.size`` and at least 16) and ``unmapped`` (a saturating count of accesses to unmapped addresses).
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
        super().__init__({"bus": Out(CsrSignature(addr_width)), "unmapped": Out(16)})

        self._regs, self._strobes, self._sets, self._shadows = {}, {}, {}, {}
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
        read_word = self._read_mux(m)       # combinational, outside the bus state machine

        # pulses last one cycle; rdata is only meaningful with ack, so it is 0 otherwise
        m.d.sync += [bus.ack.eq(0), bus.rdata.eq(0)]
        for strobe in self._strobes.values():
            m.d.sync += strobe.eq(0)
        for port in self._windows.values():
            m.d.sync += [port.we.eq(0), port.re.eq(0)]

        # w1c registers: an engine set wins over a host clear in the same cycle, so no event is lost
        clear = {key: Signal(len(self._regs[key]), name=f"{self._regs[key].name}_clear") for key in self._sets}
        for key, s in self._sets.items():
            m.d.sync += self._regs[key].eq((self._regs[key] & ~clear[key]) | s)

        hits = []
        for w in wins:
            hit = Signal(name=f"hit_{w.name.lower()}")
            m.d.comb += hit.eq((bus.addr >= w.offset) & (bus.addr < w.end) & (bus.addr[:2] == 0))
            hits.append(hit)

        with m.If(busy):
            with m.If(wait == 0):
                with m.Switch(sel):
                    for i, w in enumerate(wins):
                        with m.Case(i):
                            m.d.sync += bus.rdata.eq(self._windows[w.name].rdata)
                m.d.sync += [bus.ack.eq(1), busy.eq(0)]
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        with m.Elif(bus.we | bus.re):
            m.d.sync += bus.ack.eq(1)
            cond = m.If
            for i, (w, hit) in enumerate(zip(wins, hits)):
                with cond(hit):
                    port = self._windows[w.name]
                    m.d.sync += [port.addr.eq((bus.addr - w.offset)[2:]), port.wdata.eq(bus.wdata)]
                    with m.If(bus.we):
                        if w.access == "rw":
                            m.d.sync += port.we.eq(1)
                    with m.Else():   # the data comes back later: no ack yet
                        m.d.sync += [port.re.eq(1), bus.ack.eq(0), busy.eq(1),
                                     wait.eq(self._latency[w.name]), sel.eq(i)]
                cond = m.Elif
            if wins:
                with m.Else():
                    self._decode_registers(m, clear, read_word)
            else:
                self._decode_registers(m, clear, read_word)
        return m

    def _read_mux(self, m):
        """The word a register read at ``bus.addr`` returns (0 for unmapped, misaligned and ``wo`` words).

        A two-level mux indexed by address bits, built once outside the bus state machine: within each
        256-byte page of registers a 64-word mux on ``addr[2:8]``, then a choice between the pages (on the
        board engine's map half the LUTs of one case per word, synthesized alone)."""
        bus = self.bus
        pages = {}
        for reg in self.regmap.registers():
            if reg.access == "wo":
                continue
            value = self._regs[reg.key]
            for half, addr in enumerate(reg.addresses):
                if reg.access == "ro" and reg.width == 64 and half == 1:
                    src = self._shadows[reg.key]
                else:
                    src = value[32 * half:32 * half + 32]
                pages.setdefault(addr >> 8, {})[(addr >> 2) & 63] = src
        word = Signal(32, name="read_word")
        aligned = bus.addr[:2] == 0
        with m.Switch(bus.addr[8:]):
            for page, words in sorted(pages.items()):
                with m.Case(page):
                    n = max(words) + 1
                    table = Cat(*(words.get(i, Const(0, 32)) for i in range(n)))
                    m.d.comb += word.eq(Mux(aligned & (bus.addr[2:8] < n),
                                            table.word_select(bus.addr[2:8], 32), 0))
        return word

    def _decode_registers(self, m, clear, read_word):
        """The register address decoder (a request that hit no window); ``read_word`` is :meth:`_read_mux`."""
        bus = self.bus
        with m.If(~bus.we):
            m.d.sync += bus.rdata.eq(read_word)
        with m.Switch(bus.addr):
            for reg in self.regmap.registers():
                for half, addr in enumerate(reg.addresses):
                    with m.Case(addr):
                        self._word_access(m, reg, half, clear)
            with m.Default():
                with m.If(self.unmapped != 0xFFFF):
                    m.d.sync += self.unmapped.eq(self.unmapped + 1)

    def _word_access(self, m, reg, half, clear):
        """A host access to word ``half`` of ``reg``; a write wins if ``we`` and ``re`` are both high."""
        bus = self.bus
        value = self._regs[reg.key]
        word = value[32 * half:32 * half + 32]
        with m.If(bus.we):
            if reg.access in ("rw", "wo"):
                m.d.sync += [word.eq(bus.wdata), self._strobes[reg.key].eq(1)]
            elif reg.access == "w1c":
                m.d.comb += clear[reg.key][32 * half:32 * half + 32].eq(bus.wdata)
            # ro: writes are ignored
        if reg.access == "ro" and reg.width == 64 and half == 0:
            with m.Else():      # the read returns the low word (see _read_mux) and captures the high one
                m.d.sync += self._shadows[reg.key].eq(value[32:])
