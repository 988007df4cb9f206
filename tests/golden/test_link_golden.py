"""The link golden model: CRC-32 against its published check value and zlib, packet CRC and packetisation."""

import random
import zlib

import pytest

from syncfabric.hdl.common import layouts
from syncfabric.sim.golden.link import HEADER_CRC_BYTES, crc32, packet_crc, packets, payload_beats


def test_the_header_fits_the_bytes_its_crc_covers():
    assert layouts.packet_header_layout().size <= 8 * HEADER_CRC_BYTES


def test_crc32_check_value_and_continuation():
    assert crc32(b"123456789") == 0xCBF43926          # CRC-32/ISO-HDLC check value
    assert crc32(b"") == 0
    rng = random.Random(1)
    for _ in range(20):
        a, b = rng.randbytes(rng.randrange(40)), rng.randbytes(rng.randrange(40))
        assert crc32(b, crc32(a)) == crc32(a + b) == zlib.crc32(a + b)


def test_packets_cover_message_in_order():
    assert packets(0, 64) == [(0, 0)]
    assert packets(1, 64) == [(0, 1)]
    assert packets(64, 64) == [(0, 64)]
    assert packets(65, 64) == [(0, 64), (64, 1)]
    assert packets(200, 64) == [(0, 64), (64, 64), (128, 64), (192, 8)]


def test_packet_crc_pads_payload_to_beats():
    hdr = 0x1234_5678_9ABC
    head = hdr.to_bytes(16, "little")
    assert packet_crc(hdr, b"", 16) == zlib.crc32(head)
    assert packet_crc(hdr, b"\x01\x02\x03", 16) == zlib.crc32(head + b"\x01\x02\x03" + bytes(13))
    assert packet_crc(hdr, bytes(range(32)), 16) == zlib.crc32(head + bytes(range(32)))
    # Padding matters: a shorter beat gives a different CRC than the unpadded bytes would.
    assert packet_crc(hdr, b"\x01", 16) != zlib.crc32(head + b"\x01")
    # A worked example: header fields packed by the shared layout.
    bits = layouts.pack(layouts.packet_header_layout(),
                        {"dst": 1, "src": 2, "vc": 3, "tag": 4, "length": 5, "last": 1})
    assert packet_crc(bits, b"hello", 8) == zlib.crc32(bits.to_bytes(16, "little") + b"hello\0\0\0")


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 48])
def test_payload_beats_little_endian(n):
    payload = bytes(range(1, n + 1))
    beats = payload_beats(payload, 16)
    assert len(beats) == -(-n // 16)
    assert b"".join(b.to_bytes(16, "little") for b in beats)[:n] == payload
