"""Combinational CRC-32 update, any whole number of bytes per cycle.

Convention (the one of ``zlib.crc32``, CRC-32/ISO-HDLC): reflected polynomial ``0xEDB88320``, bytes fed least
significant byte of the data word first, each byte least significant bit first. :func:`crc32_next` maps the
*internal register* (not the CRC value): a CRC computation starts with the register at ``CRC32_INIT``
(``0xFFFFFFFF``) and the CRC value is the final register xor ``CRC32_XOROUT`` (``0xFFFFFFFF``). So
``zlib.crc32(data, c) == crc32_next(c ^ 0xFFFFFFFF, data) ^ 0xFFFFFFFF``.

The update is linear over GF(2): each output bit is the parity of a fixed subset of the register and data
bits. The subsets are found once per data width by running the bitwise algorithm symbolically in Python
(:func:`crc32_matrix`, cached) and emitted as ``(bits & mask).xor()``: one AND with a constant (free in
synthesis) and a parity reduction per output bit.
"""

from functools import lru_cache

from amaranth.hdl import Cat, Value

__all__ = ["CRC32_POLY", "CRC32_INIT", "CRC32_XOROUT", "crc32_matrix", "crc32_next"]

#: Reflected CRC-32 polynomial (0x04C11DB7 bit-reversed).
CRC32_POLY = 0xEDB88320
#: Register value at the start of a CRC.
CRC32_INIT = 0xFFFFFFFF
#: Xored into the final register to give the CRC value.
CRC32_XOROUT = 0xFFFFFFFF


@lru_cache(maxsize=None)
def crc32_matrix(nbytes):
    """Tuple of 32 masks over ``Cat(register[32], data[8*nbytes])``: bit ``j`` of the register after feeding
    ``nbytes`` bytes is the parity of the input bits selected by mask ``j``."""
    # state[k] = mask of the input bits whose xor is register bit k; register bits are inputs 0..31.
    state = [1 << k for k in range(32)]
    for byte in range(nbytes):
        for bit in range(8):
            state[bit] ^= 1 << (32 + 8 * byte + bit)
        for _ in range(8):
            low = state[0]
            state = state[1:] + [0]
            for k in range(32):
                if CRC32_POLY >> k & 1:
                    state[k] ^= low
    return tuple(state)


def crc32_next(crc, data):
    """The CRC-32 register after feeding the bytes of ``data`` (a value of a whole number of bytes, least
    significant byte first) to register ``crc`` (32 bits). Combinational; see the module docstring for the
    init/xorout convention. Both operands appear in each of the 32 parity terms: pass signals, not large
    expressions, or the expressions are duplicated 32 times (in the simulator and before synthesis)."""
    crc, data = Value.cast(crc), Value.cast(data)
    if len(crc) != 32 or len(data) % 8:
        raise ValueError(f"crc must be 32 bits and data a whole number of bytes, not {len(crc)}/{len(data)}")
    bits = Cat(crc, data)
    return Cat(*[(bits & mask).xor() for mask in crc32_matrix(len(data) // 8)])
