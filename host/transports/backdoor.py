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
"""

from cocotb.handle import Immediate

__all__ = ["MemoryBackdoor"]


class MemoryBackdoor:
    """Byte-addressed access to the memory array ``handle`` (a cocotb array handle of ``depth`` words of
    ``width`` bits; both read from the handle when not given)."""

    #: Writes go to simulator objects (not allowed in cocotb's read-only phase; :class:`CocotbTransport`
    #: steps out of it first).
    vpi_writes = True

    def __init__(self, handle, *, width=None, depth=None):
        self.handle = handle
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
