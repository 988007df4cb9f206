"""A back door into a simulated memory: read and write a Verilog memory array from cocotb in zero simulated time.

The RAM of :class:`syncfabric.hdl.common.axiram.AxiRam` is the unpacked array ``mem`` of its module
(``reg [W-1:0] mem [D-1:0];`` in the Verilog Amaranth emits): word ``i`` holds bytes ``[i*W/8, (i+1)*W/8)``,
byte 0 in bits 7:0, as on the AXI data bus. cocotb reaches it as an array handle (``dut.mem`` when the RAM is
the top level, ``dut.<instance>.mem`` inside a design), element by element over VPI, on Icarus and on
Verilator (there the array must be public: :func:`syncfabric.host.transports.harness.run_cocotb` makes the top level's
variables public, ``public=`` names more).

:class:`MemoryBackdoor` offers ``read(addr, n)`` and ``write(addr, data)`` over byte addresses (any alignment;
partial words are read, modified and written back), so it can stand where a cocotbext-axi ``AxiRam`` stood as
the ``mem=`` of :class:`~syncfabric.host.transports.cocotb.CocotbTransport`. Writes take effect at once
(:class:`cocotb.handle.Immediate`), so a read right after a write sees it. Use it between collectives, not
while the design accesses the memory in the same time step.

Each word reached this way costs a simulator handle that cocotb keeps for the rest of the run (about 2 KB
on Verilator, inferred from a torus:4x4x4 partition of 32 NPUs that grew from 3.3 to 10.5-10.9 GB between
1 and 4 MiB buffers, docs/results.md). The RAM of system builds
(:class:`~syncfabric.hdl.common.axiram.RamArray`) also has a bulk back door: :meth:`MemoryBackdoor.load` and
:meth:`MemoryBackdoor.dump` (coroutines) move the whole words of a buffer through a file, ``$readmemh`` /
``$writememh`` started by a strobe in the RAM (two time steps, no clock edge), and only the partial words at
its ends word by word. :class:`~syncfabric.host.transports.cocotb.CocotbTransport` uses them for its
``write_mem`` / ``read_mem``.
"""

import os
import tempfile

import numpy as np
from cocotb.handle import Immediate
from cocotb.triggers import Timer
from cocotb.utils import get_sim_time

from ...hdl.common.axiram import BD_FILE_BYTES

__all__ = ["MemoryBackdoor", "BULK_MIN_WORDS"]

#: Whole words from which :meth:`MemoryBackdoor.load` / :meth:`MemoryBackdoor.dump` go through a file.
BULK_MIN_WORDS = 16


class MemoryBackdoor:
    """Byte-addressed access to the memory array ``handle`` (a cocotb array handle of ``depth`` words of
    ``width`` bits; both read from the handle when not given). ``bulk``: the handle of the
    :class:`~syncfabric.hdl.common.axiram.RamArray` instance holding the array (its ``bd_*`` variables), for
    :meth:`load` and :meth:`dump` through files."""

    #: Writes go to simulator objects (not allowed in cocotb's read-only phase; :class:`CocotbTransport`
    #: steps out of it first).
    vpi_writes = True

    def __init__(self, handle, *, width=None, depth=None, bulk=None):
        self.handle = handle
        self.bulk = bulk
        self.depth = depth if depth is not None else len(handle)
        self.width = width if width is not None else len(handle[0])
        if self.width % 8:
            raise ValueError(f"{handle._path}: words of {self.width} bits are not whole bytes")
        self.word_bytes = self.width // 8
        self.size = self.depth * self.word_bytes

    def _check(self, addr, length):
        if addr < 0 or length < 0 or addr + length > self.size:
            raise IndexError(f"access {addr:#x}+{length} outside {self.handle._path} ({self.size:#x} bytes)")

    def read_word(self, index):
        """Word ``index`` as an unsigned integer (X and Z bits read as 0)."""
        value = self.handle[index].value
        try:
            return value.to_unsigned()
        except ValueError:
            return int(str(value).replace("x", "0").replace("X", "0").replace("z", "0").replace("Z", "0"), 2)

    def write_word(self, index, value):
        """Set word ``index`` to ``value`` at once."""
        self.handle[index].value = Immediate(value)

    def read(self, addr, length):
        """``length`` bytes at byte address ``addr``."""
        self._check(addr, length)
        wb = self.word_bytes
        first, last = addr // wb, (addr + length - 1) // wb
        out = bytearray()
        for i in range(first, last + 1) if length else ():
            out += self.read_word(i).to_bytes(wb, "little")
        start = addr - first * wb
        return bytes(out[start:start + length])

    def write(self, addr, data):
        """Store ``data`` (bytes-like) at byte address ``addr``; words only partly covered keep their other
        bytes."""
        data = bytes(data)
        self._check(addr, len(data))
        if not data:
            return
        wb = self.word_bytes
        first, last = addr // wb, (addr + len(data) - 1) // wb
        head = addr - first * wb
        for i in range(first, last + 1):
            lo = max(0, i * wb - addr)                  # slice of data for word i
            hi = min(len(data), (i + 1) * wb - addr)
            if hi - lo == wb:
                word = data[lo:hi]
            else:                                       # partial word: read, modify, write
                word = bytearray(self.read_word(i).to_bytes(wb, "little"))
                off = head if i == first else 0
                word[off:off + hi - lo] = data[lo:hi]
            self.write_word(i, int.from_bytes(word, "little"))

    def fill(self, value=0):
        """Set every word to ``value`` (an integer)."""
        for i in range(self.depth):
            self.write_word(i, value)

    def _span(self, addr, length):
        """``(first, last)`` whole words inside ``[addr, addr + length)`` worth a file, or None."""
        wb = self.word_bytes
        first, last = -(-addr // wb), (addr + length) // wb - 1
        return (first, last) if self.bulk is not None and last - first + 1 >= BULK_MIN_WORDS else None

    async def _strobe(self, path, first, last, dump):
        name = path.encode()
        if len(name) > BD_FILE_BYTES:
            raise ValueError(f"back-door file path longer than {BD_FILE_BYTES} bytes: {path}")
        b = self.bulk
        if get_sim_time("step") == 0:
            # the RAM's initial block (its zero fill, the strobe's first value) runs in the first time step
            await Timer(1, unit="step")
        b.bd_file.value = Immediate(int.from_bytes(name, "big"))
        b.bd_lo.value = Immediate(first)
        b.bd_hi.value = Immediate(last)
        b.bd_dump.value = Immediate(int(dump))
        b.bd_strobe.value = Immediate(1)
        await Timer(1, unit="step")
        b.bd_strobe.value = Immediate(0)
        await Timer(1, unit="step")

    @staticmethod
    def _file():
        """A new empty file for one load or dump (the caller removes it)."""
        fd, path = tempfile.mkstemp(prefix="sf-backdoor-", suffix=".hex")
        os.close(fd)
        return path

    async def load(self, addr, data):
        """:meth:`write`, with the whole words through ``$readmemh`` (module docstring): two time steps."""
        data = bytes(data)
        self._check(addr, len(data))
        span = self._span(addr, len(data))
        if span is None:
            self.write(addr, data)
            return
        first, last = span
        wb = self.word_bytes
        lo, hi = first * wb - addr, (last + 1) * wb - addr
        words = np.frombuffer(data[lo:hi], np.uint8).reshape(-1, wb)[:, ::-1]
        text = words.tobytes().hex()
        path = self._file()
        try:
            with open(path, "w") as f:
                f.write("\n".join(text[i:i + 2 * wb] for i in range(0, len(text), 2 * wb)))
                f.write("\n")
            await self._strobe(path, first, last, False)
        finally:
            os.unlink(path)
        self.write(addr, data[:lo])
        self.write(addr + hi, data[hi:])

    async def dump(self, addr, length):
        """:meth:`read`, with the whole words through ``$writememh`` (module docstring): two time steps."""
        self._check(addr, length)
        span = self._span(addr, length)
        if span is None:
            return self.read(addr, length)
        first, last = span
        wb = self.word_bytes
        lo, hi = first * wb - addr, (last + 1) * wb - addr
        path = self._file()
        try:
            await self._strobe(path, first, last, True)
            with open(path) as f:
                words = [w for line in f for w in line.split("//")[0].split() if not w.startswith("@")]
        finally:
            os.unlink(path)
        if len(words) != last - first + 1:
            raise RuntimeError(f"{self.handle._path}: $writememh gave {len(words)} words of {last - first + 1}")
        digits = "".join(w.rjust(2 * wb, "0") for w in words).replace("x", "0").replace("X", "0") \
            .replace("z", "0").replace("Z", "0")
        body = np.frombuffer(bytes.fromhex(digits), np.uint8).reshape(-1, wb)[:, ::-1].tobytes()
        return self.read(addr, lo) + body + self.read(addr + hi, length - hi)
