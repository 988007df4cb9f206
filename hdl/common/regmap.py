"""A register map described once in plain Python: the RTL register bank, the host driver and the docs read it.

The map is a list of items on a 32-bit word bus (byte addresses, little-endian words):

* :class:`Register`: one register of 32 or 64 bits with named :class:`Field` s. A 64-bit register takes two
  consecutive words, the low half at ``offset`` and the high half at ``offset + 4``.
* :class:`RegisterArray`: ``count`` copies of a group of registers, ``stride`` bytes apart; copy ``i`` of
  member ``BASE`` of array ``WIN`` is the register ``("WIN_BASE", i)``.
* :class:`Window`: a word-addressed memory region (e.g. an instruction memory) the engine backs with a memory.

Access types of a register:

``rw``   the host writes and reads back the value; the engine sees the value and a one-cycle write strobe.
``ro``   the engine drives the value; host writes are ignored.
``wo``   write-only: the engine sees the value and a strobe (e.g. a doorbell); host reads return 0.
``w1c``  the engine sets bits; the host reads them and writes 1 to a bit to clear it.

:class:`RegisterMap` checks that every item is aligned, inside the map and overlaps no other, resolves names
to addresses, encodes and decodes fields and renders the Markdown register table of the docs
(:meth:`RegisterMap.markdown`). This module imports nothing from Amaranth so that host-only code can use it.
"""

from dataclasses import dataclass, replace

__all__ = ["ACCESS_TYPES", "Field", "Register", "RegisterArray", "Window", "RegisterMap", "RegisterMapError"]

#: The access types a :class:`Register` may have, with their meaning (used in the generated docs).
ACCESS_TYPES = {
    "rw": "read/write; the engine sees the value and a one-cycle write strobe",
    "ro": "read-only; driven by the engine, host writes are ignored",
    "wo": "write-only strobe (e.g. a doorbell); reads return 0",
    "w1c": "the engine sets bits; the host writes 1 to a bit to clear it",
}


class RegisterMapError(ValueError):
    """A register map (or a value for one of its fields) is inconsistent."""


def _check_uint(what, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RegisterMapError(f"{what} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True)
class Field:
    """Bits ``[lsb, lsb + width)`` of a register, called ``name``."""

    name: str
    lsb: int
    width: int = 1
    doc: str = ""

    def __post_init__(self):
        if not self.name or not self.name.isidentifier():
            raise RegisterMapError(f"field name {self.name!r} is not an identifier")
        _check_uint(f"field {self.name} lsb", self.lsb)
        _check_uint(f"field {self.name} width", self.width)
        if self.width == 0:
            raise RegisterMapError(f"field {self.name} has width 0")

    @property
    def msb(self):
        """Index of the field's most significant bit."""
        return self.lsb + self.width - 1

    @property
    def mask(self):
        """The field's bits in place (``((1 << width) - 1) << lsb``)."""
        return ((1 << self.width) - 1) << self.lsb

    @property
    def bits(self):
        """The bit range as written in the docs: ``"7:4"`` or ``"3"``."""
        return f"{self.msb}:{self.lsb}" if self.width > 1 else f"{self.lsb}"

    def extract(self, value):
        """The field's value in the register value ``value``."""
        return (int(value) >> self.lsb) & ((1 << self.width) - 1)

    def insert(self, value, field_value):
        """``value`` with this field replaced by ``field_value`` (which must fit the field)."""
        field_value = int(field_value)
        if not 0 <= field_value < (1 << self.width):
            raise RegisterMapError(f"field {self.name}={field_value} does not fit in {self.width} bits")
        return (int(value) & ~self.mask) | (field_value << self.lsb)


@dataclass(frozen=True)
class Register:
    """A 32- or 64-bit register at byte ``offset`` (absolute, or relative to its :class:`RegisterArray`).

    ``index`` is set on the registers a :class:`RegisterArray` expands to (and only there); ``init`` is the
    reset value (for ``ro`` registers: the value read while the engine does not drive it, e.g. an ID).
    """

    name: str
    offset: int
    access: str
    width: int = 32
    fields: tuple = ()
    doc: str = ""
    init: int = 0
    index: int = None

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        if not self.name or not self.name.isidentifier():
            raise RegisterMapError(f"register name {self.name!r} is not an identifier")
        _check_uint(f"register {self.name} offset", self.offset)
        if self.access not in ACCESS_TYPES:
            raise RegisterMapError(f"register {self.name}: access {self.access!r} is not one of "
                                   f"{', '.join(ACCESS_TYPES)}")
        if self.width not in (32, 64):
            raise RegisterMapError(f"register {self.name}: width must be 32 or 64, got {self.width!r}")
        _check_uint(f"register {self.name} init", self.init)
        if self.init >> self.width:
            raise RegisterMapError(f"register {self.name}: init {self.init:#x} does not fit {self.width} bits")
        names, used = set(), 0
        for f in self.fields:
            if not isinstance(f, Field):
                raise RegisterMapError(f"register {self.name}: {f!r} is not a Field")
            if f.name in names:
                raise RegisterMapError(f"register {self.name}: field {f.name} defined twice")
            if f.msb >= self.width:
                raise RegisterMapError(f"register {self.name}: field {f.name} [{f.bits}] exceeds "
                                       f"{self.width} bits")
            if used & f.mask:
                raise RegisterMapError(f"register {self.name}: field {f.name} [{f.bits}] overlaps another field")
            names.add(f.name)
            used |= f.mask

    @property
    def key(self):
        """``(name, index)``: how the map, the bank and the driver look the register up."""
        return (self.name, self.index)

    @property
    def label(self):
        """``NAME`` or ``NAME[index]`` (for messages and docs)."""
        return self.name if self.index is None else f"{self.name}[{self.index}]"

    @property
    def words(self):
        """Number of 32-bit words the register takes (1 or 2)."""
        return self.width // 32

    @property
    def size(self):
        """Bytes the register takes."""
        return 4 * self.words

    @property
    def addresses(self):
        """Byte address of each word, low word first."""
        return tuple(self.offset + 4 * w for w in range(self.words))

    def field(self, name):
        """The :class:`Field` called ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise RegisterMapError(f"register {self.name} has no field {name!r} (fields: "
                               f"{', '.join(f.name for f in self.fields) or 'none'})")

    def encode(self, value=0, **fields):
        """``value`` (default 0) with the named fields replaced; each value must fit its field."""
        value = int(value)
        for name, v in fields.items():
            value = self.field(name).insert(value, v)
        if value >> self.width:
            raise RegisterMapError(f"value {value:#x} does not fit register {self.name} ({self.width} bits)")
        return value

    def decode(self, value):
        """``{field: value}`` of every field of the register value ``value``."""
        return {f.name: f.extract(value) for f in self.fields}

    def placed(self, base, name, index):
        """A copy at absolute ``base + offset`` named ``name`` with ``index`` (used by arrays)."""
        return replace(self, offset=base + self.offset, name=name, index=index)


@dataclass(frozen=True)
class RegisterArray:
    """``count`` copies of ``registers`` (offsets relative to each copy), copy ``i`` at ``offset + i*stride``.

    The registers of copy ``i`` are named ``prefix + member.name`` with index ``i``; ``prefix`` defaults to
    ``name + "_"`` (array ``WIN`` with member ``BASE`` gives ``("WIN_BASE", i)``). Give ``prefix=""`` to keep
    the members' own names (e.g. an array of one register ``PART`` gives ``("PART", i)``). ``inits`` maps
    ``(member name, index)`` to a reset value that differs from the member's ``init``.
    """

    name: str
    offset: int
    count: int
    stride: int
    registers: tuple
    doc: str = ""
    prefix: str = None
    inits: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "registers", tuple(self.registers))
        inits = self.inits.items() if isinstance(self.inits, dict) else self.inits
        object.__setattr__(self, "inits", tuple(sorted((tuple(k), v) for k, v in inits)))
        members = {r.name for r in self.registers}
        for (member, index), _ in self.inits:
            if member not in members or not 0 <= index < self.count:
                raise RegisterMapError(f"array {self.name}: init for unknown element {member}[{index}]")
        if self.prefix is None:
            object.__setattr__(self, "prefix", self.name + "_")
        _check_uint(f"array {self.name} offset", self.offset)
        _check_uint(f"array {self.name} count", self.count)
        _check_uint(f"array {self.name} stride", self.stride)
        if self.count < 1:
            raise RegisterMapError(f"array {self.name} needs at least one element")
        if not self.registers:
            raise RegisterMapError(f"array {self.name} has no registers")
        for r in self.registers:
            if not isinstance(r, Register):
                raise RegisterMapError(f"array {self.name}: {r!r} is not a Register")
        span = max(r.offset + r.size for r in self.registers)
        if self.count > 1 and self.stride < span:
            raise RegisterMapError(f"array {self.name}: stride {self.stride:#x} is smaller than one element "
                                   f"({span:#x} bytes)")

    def member_name(self, register):
        """Name of the expanded registers of member ``register``."""
        return self.prefix + register.name

    def expand(self):
        """The array's registers with absolute offsets, in address order."""
        inits = dict(self.inits)
        out = []
        for i in range(self.count):
            for r in self.registers:
                reg = r.placed(self.offset + i * self.stride, self.member_name(r), i)
                if (r.name, i) in inits:
                    reg = replace(reg, init=inits[(r.name, i)])   # __post_init__ checks it fits
                out.append(reg)
        return tuple(out)


@dataclass(frozen=True)
class Window:
    """``words`` 32-bit words of memory at byte ``offset``; word ``i`` is at ``offset + 4*i``.

    ``access`` is ``"rw"`` or ``"ro"`` (host writes to a read-only window are ignored).
    """

    name: str
    offset: int
    words: int
    access: str = "rw"
    doc: str = ""

    def __post_init__(self):
        if not self.name or not self.name.isidentifier():
            raise RegisterMapError(f"window name {self.name!r} is not an identifier")
        _check_uint(f"window {self.name} offset", self.offset)
        _check_uint(f"window {self.name} words", self.words)
        if self.words < 1:
            raise RegisterMapError(f"window {self.name} needs at least one word")
        if self.access not in ("rw", "ro"):
            raise RegisterMapError(f"window {self.name}: access must be 'rw' or 'ro', got {self.access!r}")

    @property
    def size(self):
        """Bytes the window takes."""
        return 4 * self.words

    @property
    def end(self):
        """First byte address after the window."""
        return self.offset + self.size

    def addr(self, word):
        """Byte address of word ``word``."""
        if not 0 <= word < self.words:
            raise RegisterMapError(f"word {word} is outside window {self.name} ({self.words} words)")
        return self.offset + 4 * word

    def contains(self, addr):
        """Whether byte address ``addr`` falls in the window."""
        return self.offset <= addr < self.end


class RegisterMap:
    """The register map ``name``: ``items`` (:class:`Register`, :class:`RegisterArray`, :class:`Window`) in a
    space of ``size`` bytes. Raises :class:`RegisterMapError` listing every problem: duplicate names,
    misaligned items (words on 4 bytes, 64-bit registers on 8), items beyond ``size``, overlaps.

    Iterating yields the expanded registers and the windows in address order.
    """

    def __init__(self, name, items, size, doc=""):
        self.name = name
        self.items = tuple(items)
        self.size = size
        self.doc = doc
        regs, wins, errors = [], [], []
        for item in self.items:
            if isinstance(item, Register):
                if item.index is not None:
                    errors.append(f"register {item.label}: only arrays create indexed registers")
                regs.append(item)
            elif isinstance(item, RegisterArray):
                regs.extend(item.expand())
            elif isinstance(item, Window):
                wins.append(item)
            else:
                errors.append(f"{item!r} is not a Register, RegisterArray or Window")
        self._regs = {}
        self._counts = {}
        for r in regs:
            if r.key in self._regs:
                errors.append(f"register {r.label} defined twice")
            self._regs[r.key] = r
            if r.index is not None:
                self._counts[r.name] = max(self._counts.get(r.name, 0), r.index + 1)
        self._wins = {}
        for w in wins:
            if w.name in self._wins or (w.name, None) in self._regs or w.name in self._counts:
                errors.append(f"window {w.name}: name already used")
            self._wins[w.name] = w
        for array_name in self._counts:
            if (array_name, None) in self._regs:
                errors.append(f"{array_name} is both a register and a register array")
        spans = []   # (start, end, label)
        for r in regs:
            align = 8 if r.width == 64 else 4
            if r.offset % align:
                errors.append(f"register {r.label} at {r.offset:#x} is not {align}-byte aligned")
            spans.append((r.offset, r.offset + r.size, f"register {r.label}"))
        for w in wins:
            if w.offset % 4:
                errors.append(f"window {w.name} at {w.offset:#x} is not word aligned")
            spans.append((w.offset, w.end, f"window {w.name}"))
        spans.sort()
        for start, end, label in spans:
            if end > size:
                errors.append(f"{label} [{start:#x}, {end:#x}) does not fit the {size:#x}-byte map")
        for (s0, e0, l0), (s1, e1, l1) in zip(spans, spans[1:]):
            if s1 < e0:
                errors.append(f"{l1} [{s1:#x}, {e1:#x}) overlaps {l0} [{s0:#x}, {e0:#x})")
        if errors:
            raise RegisterMapError(f"register map {self.name!r}: " + "; ".join(errors))
        self._by_word = {}
        for r in regs:
            for half, a in enumerate(r.addresses):
                self._by_word[a] = (r, half)
        self._order = sorted([*self._regs.values(), *self._wins.values()], key=lambda x: x.offset)

    # -- lookup -------------------------------------------------------------------------------------------
    def __iter__(self):
        return iter(self._order)

    def __contains__(self, name):
        return (name, None) in self._regs or name in self._counts or name in self._wins

    def registers(self):
        """Every register (arrays expanded) in address order."""
        return tuple(x for x in self._order if isinstance(x, Register))

    def windows(self):
        """Every window in address order."""
        return tuple(x for x in self._order if isinstance(x, Window))

    def count(self, name):
        """Number of indices of the array register ``name`` (None for a plain register)."""
        if name in self._counts:
            return self._counts[name]
        self.register(name)
        return None

    def register(self, name, index=None):
        """The :class:`Register` ``name`` (``index`` for array registers)."""
        try:
            return self._regs[(name, index)]
        except KeyError:
            pass
        if name in self._counts:
            if index is None:
                raise RegisterMapError(f"{self.name}: {name} is an array of {self._counts[name]}; give an index")
            raise RegisterMapError(f"{self.name}: index {index!r} out of range for {name} "
                                   f"(0..{self._counts[name] - 1})")
        if (name, None) in self._regs:
            raise RegisterMapError(f"{self.name}: {name} is not an array; do not give an index")
        raise RegisterMapError(f"{self.name} has no register {name!r}")

    def window(self, name):
        """The :class:`Window` ``name``."""
        try:
            return self._wins[name]
        except KeyError:
            raise RegisterMapError(f"{self.name} has no window {name!r}") from None

    def addr(self, name, index=None):
        """Byte address of register ``name`` (its low word; ``index`` for arrays) or of word ``index`` of
        window ``name`` (word 0 when ``index`` is None)."""
        if name in self._wins:
            return self._wins[name].addr(0 if index is None else index)
        return self.register(name, index).offset

    def at(self, addr):
        """What byte address ``addr`` hits: ``(register, half)`` (half 0 = low word), ``(window, word)``, or
        None for an unmapped or misaligned address."""
        if addr in self._by_word:
            return self._by_word[addr]
        if addr % 4 == 0:
            for w in self._wins.values():
                if w.contains(addr):
                    return w, (addr - w.offset) // 4
        return None

    # -- fields -------------------------------------------------------------------------------------------
    def encode(self, name, index=None, value=0, **fields):
        """Register value of ``name`` with the given fields set (see :meth:`Register.encode`)."""
        return self.register(name, index).encode(value, **fields)

    def decode(self, name, value, index=None):
        """``{field: value}`` of a value of register ``name``."""
        return self.register(name, index).decode(value)

    # -- docs ---------------------------------------------------------------------------------------------
    def markdown(self, title=None):
        """A Markdown description: the register table (address, name, access, reset, fields, description),
        one row per register, array member and window, then the fields of every register that has any."""
        head = title if title is not None else f"Register map: {self.name}"
        lines = [f"# {head}", ""]
        if self.doc:
            lines += [self.doc, ""]
        lines += [f"Byte addresses on a 32-bit word bus, {self.size:#x} bytes in all. A 64-bit register takes two "
                  "words, the low half at its address and the high half 4 bytes above. Array registers are "
                  "written `NAME[i]`. Access types:", ""]
        lines += [f"* `{a}`: {d}" for a, d in ACCESS_TYPES.items()]
        lines += ["", "| address | name | access | reset | fields | description |",
                  "|---|---|---|---|---|---|"]
        rows = []
        for item in self.items:
            if isinstance(item, Register):
                rows.append((item.offset, f"{item.offset:#06x}", item.name, item, f"{item.init:#x}"))
            elif isinstance(item, RegisterArray):
                inits = dict(item.inits)
                for r in item.registers:
                    addr = f"{item.offset + r.offset:#06x} + {item.stride:#x}*i, i < {item.count}"
                    special = [(i, v) for (name, i), v in sorted(inits.items()) if name == r.name]
                    reset = "<br>".join([f"{v:#x} (i={i})" for i, v in special]
                                        + ([f"{r.init:#x} (others)"] if special else [f"{r.init:#x}"]))
                    rows.append((item.offset + r.offset, addr, f"{item.member_name(r)}[i]", r, reset))
            else:
                rows.append((item.offset, f"{item.offset:#06x}..{item.end - 1:#06x}", item.name, item, "-"))
        rows.sort(key=lambda row: row[0])
        for _, addr, name, item, reset in rows:
            if isinstance(item, Window):
                lines.append(f"| {addr} | `{name}` | {item.access} window | - | {item.words} words | "
                             f"{_cell(item.doc)} |")
                continue
            width = "" if item.width == 32 else f" ({item.width}-bit)"
            fields = "<br>".join(f"`{f.name}` [{f.bits}]" for f in item.fields) or "-"
            lines.append(f"| {addr} | `{name}` | {item.access}{width} | {reset} | {fields} | "
                         f"{_cell(item.doc)} |")
        detailed = [(name, item) for _, _, name, item, _ in rows
                    if isinstance(item, Register) and any(f.doc for f in item.fields)]
        if detailed:
            lines += ["", "## Fields"]
            for name, item in detailed:
                lines += ["", f"### `{name}`", "", "| bits | field | description |", "|---|---|---|"]
                lines += [f"| {f.bits} | `{f.name}` | {_cell(f.doc)} |" for f in item.fields]
        return "\n".join(lines) + "\n"


def _cell(text):
    """``text`` made safe for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")
