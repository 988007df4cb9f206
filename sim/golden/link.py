"""Golden model of the link layer: packetisation of a message and the packet CRC.

A message of ``length`` payload bytes travels as packets of up to ``packet_bytes`` payload bytes (an empty
message as one header-only packet). Each packet's CRC-32 covers its header bits as ``HEADER_CRC_BYTES``
little-endian bytes, then its payload zero-padded to whole beats (the flits as they are on the wire).

Pure Python: the header bit pattern comes from the caller (``hdl.common.layouts.pack`` of
``packet_header_layout()``), so this module does not need Amaranth.
"""

import zlib

from ...hdl.common.layouts import HEADER_CRC_BYTES

__all__ = ["HEADER_CRC_BYTES", "STOMP", "crc32", "packet_crc", "packets", "payload_beats"]


#: A sender that learns, while a message is already on the wire, that its payload derives from bad data (a
#: forward whose input failed its CRC) stomps the packet: its CRC goes out xor ``STOMP`` (inverted), so the
#: receiver rejects it like a corrupted packet and reports the error instead of using the data. The receiver
#: tells a stomped packet (CRC exactly inverted, which a link fault produces with probability 2**-32) from a
#: corrupted one, so that only the latter counts as a CRC error of its link.
STOMP = 0xFFFFFFFF


def crc32(data, crc=0):
    """CRC-32/ISO-HDLC (reflected, polynomial 0x04C11DB7, init and final xor 0xFFFFFFFF) of ``data``,
    continuing from the CRC value ``crc``: exactly ``zlib.crc32``."""
    return zlib.crc32(bytes(data), crc) & 0xFFFFFFFF


def payload_beats(payload, beat_bytes):
    """``payload`` as a list of little-endian beat integers, the last beat zero-padded."""
    payload = bytes(payload)
    return [int.from_bytes(payload[i:i + beat_bytes], "little") for i in range(0, len(payload), beat_bytes)]


def packet_crc(header_bits, payload, beat_bytes, header_bytes=HEADER_CRC_BYTES, stomped=False, seq=0):
    """The CRC a packet carries on its last flit: CRC-32 of ``header_bits`` as ``header_bytes`` little-endian
    bytes followed by ``payload`` (this packet's payload bytes) zero-padded to a multiple of ``beat_bytes``,
    started from the CRC value ``seq`` (the packet's link sequence number: the CRC register starts at
    ``0xFFFFFFFF ^ seq``, so a corrupted sequence number fails the check; 0 on links without retransmission
    gives the plain CRC-32); xor :data:`STOMP` when the sender ``stomped`` it."""
    payload = bytes(payload)
    padded = payload + bytes(-len(payload) % beat_bytes)
    crc = crc32(int(header_bits).to_bytes(header_bytes, "little") + padded, seq)
    return crc ^ STOMP if stomped else crc


def packets(length, packet_bytes):
    """``[(offset, nbytes), ...]`` of the packets of a message of ``length`` bytes; an empty message is one
    header-only packet ``[(0, 0)]``."""
    if length == 0:
        return [(0, 0)]
    return [(off, min(packet_bytes, length - off)) for off in range(0, length, packet_bytes)]
