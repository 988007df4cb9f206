"""The CRC-32 update (``hdl/common/crc.py``) against zlib."""

import random
import zlib

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from syncfabric.hdl.common.crc import CRC32_INIT, CRC32_XOROUT, crc32_matrix, crc32_next

from sim_helpers import seed_for

# ---- CRC ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [1, 8, 16, 64, 128])
def test_crc32_next_matches_zlib(nbytes):
    seed = seed_for(nbytes)
    rng = random.Random(seed)
    crc, data = Signal(32), Signal(8 * nbytes)
    out = Signal(32)
    m = Module()
    m.d.comb += out.eq(crc32_next(crc, data))
    vectors = [(CRC32_INIT, 0), (0, 0), (CRC32_INIT, (1 << 8 * nbytes) - 1)]
    vectors += [(rng.getrandbits(32), rng.getrandbits(8 * nbytes)) for _ in range(30)]

    async def tb(ctx):
        for reg, word in vectors:
            ctx.set(crc, reg)
            ctx.set(data, word)
            want = zlib.crc32(word.to_bytes(nbytes, "little"), reg ^ CRC32_XOROUT) ^ CRC32_XOROUT
            assert ctx.get(out) == want, f"crc {reg:#x} data {word:#x}"

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()


def test_crc32_chained_words_equal_one_wide_word():
    # Header word then two flits, as the ports compute a packet CRC: same as zlib over the bytes.
    rng = random.Random(seed_for(7))
    raw = rng.randbytes(48)
    reg = CRC32_INIT
    for lo, hi in ((0, 16), (16, 32), (32, 48)):
        word = int.from_bytes(raw[lo:hi], "little")
        bits = reg | word << 32
        reg = sum((bin(bits & mask).count("1") & 1) << j for j, mask in enumerate(crc32_matrix(hi - lo)))
    assert reg ^ CRC32_XOROUT == zlib.crc32(raw)


def test_crc32_next_rejects_bad_widths():
    with pytest.raises(ValueError):
        crc32_next(Signal(31), Signal(8))
    with pytest.raises(ValueError):
        crc32_next(Signal(32), Signal(12))
