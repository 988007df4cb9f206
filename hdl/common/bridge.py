"""The host bridge: framed register and memory accesses over a byte stream (a UART on a prototype board).

The frame format is defined here once; the RTL (:class:`UartBridge`), the host's serial transport
(:mod:`syncfabric.host.serial`) and ``docs/board.md`` use these definitions.

Request (host to board), all multi-byte fields little-endian::

    SYNC_REQ (0xA5) | op (1) | addr (4) | count-1 (1) | data (4 x count, WRITE only) | crc8 (1)

Response (board to host)::

    SYNC_RESP (0x5A) | status (1) | data (4 x count, READ with status OK only) | crc8 (1)

``op`` is :attr:`Op.READ` or :attr:`Op.WRITE`; ``count`` 32-bit words (1..``max_words``) at byte addresses
``addr``, ``addr + 4``, ... (``addr`` word aligned: its two low bits are ignored). ``crc8`` is :func:`crc8` over
every byte after the sync byte. The bridge checks the CRC and the count before it touches the bus, so a
corrupted request has no effect: it answers :attr:`Status.CRC` or :attr:`Status.LENGTH` and nothing else.
Bytes outside a frame are ignored until the next sync byte (the bridge resynchronises by itself), and a frame
that stops arriving for ``timeout_cycles`` is abandoned. One request at a time: the host sends the next
request after the response (the bridge does not take bytes while it executes or answers).

Bus side: :class:`UartBridge` is the master of a :class:`~syncfabric.hdl.common.csr.CsrSignature` bus with
32-bit addresses: one access per word, each waiting for ``ack``.
"""

import enum

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .csr import CsrSignature

__all__ = ["SYNC_REQ", "SYNC_RESP", "Op", "Status", "CRC8_POLY", "crc8", "encode_request", "response_length",
           "decode_response", "BridgeProtocolError", "UartBridge", "DEFAULT_MAX_WORDS"]

SYNC_REQ = 0xA5
SYNC_RESP = 0x5A
#: CRC-8 polynomial x^8 + x^2 + x + 1 (initial value 0, no reflection, no final XOR).
CRC8_POLY = 0x07
#: Largest burst (words) of the default bridge.
DEFAULT_MAX_WORDS = 64


class Op(enum.IntEnum):
    """Request opcodes."""
    READ = 0x01
    WRITE = 0x02


class Status(enum.IntEnum):
    """Response status codes."""
    OK = 0x00
    CRC = 0x01          # the request's CRC did not match: nothing was done
    LENGTH = 0x02       # count larger than the bridge's max_words: nothing was done


class BridgeProtocolError(ValueError):
    """A request cannot be encoded, or a response is malformed."""


def _crc8_byte(crc, byte):
    crc ^= byte
    for _ in range(8):
        crc = ((crc << 1) ^ CRC8_POLY) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def crc8(data, crc=0):
    """CRC-8 (polynomial :data:`CRC8_POLY`, MSB first) of ``data``, continuing from ``crc``."""
    for b in bytes(data):
        crc = _crc8_byte(crc, b)
    return crc


def encode_request(op, addr, count=1, words=(), max_words=DEFAULT_MAX_WORDS):
    """The bytes of one request frame; ``words`` are the 32-bit values of a WRITE (``count`` = their number)."""
    op = Op(op)
    words = list(words)
    if op is Op.WRITE:
        count = len(words)
    elif words:
        raise BridgeProtocolError("a READ request carries no data")
    if not 1 <= count <= max_words:
        raise BridgeProtocolError(f"a request moves 1..{max_words} words, not {count}")
    if addr % 4 or not 0 <= addr < 1 << 32 or addr + 4 * count > 1 << 32:
        raise BridgeProtocolError(f"address {addr:#x} (+{4 * count} bytes) is not word aligned in the 32-bit space")
    body = bytes([op]) + addr.to_bytes(4, "little") + bytes([count - 1])
    for w in words:
        if not 0 <= w < 1 << 32:
            raise BridgeProtocolError(f"{w!r} is not a 32-bit word")
        body += w.to_bytes(4, "little")
    return bytes([SYNC_REQ]) + body + bytes([crc8(body)])


def response_length(op, count, status=Status.OK):
    """Bytes of the response to a request (sync, status, data, crc)."""
    return 3 + (4 * count if Op(op) is Op.READ and status == Status.OK else 0)


def decode_response(frame, op, count):
    """``(status, words)`` of a complete response ``frame`` to a request (``op``, ``count``); raises
    :class:`BridgeProtocolError` if the frame is malformed or its CRC does not match."""
    frame = bytes(frame)
    if len(frame) < 3 or frame[0] != SYNC_RESP:
        raise BridgeProtocolError(f"not a response frame: {frame[:8].hex()}")
    try:
        status = Status(frame[1])
    except ValueError:
        raise BridgeProtocolError(f"unknown status {frame[1]:#04x}") from None
    if len(frame) != response_length(op, count, status):
        raise BridgeProtocolError(f"response of {len(frame)} bytes, expected {response_length(op, count, status)}")
    if crc8(frame[1:-1]) != frame[-1]:
        raise BridgeProtocolError("response CRC mismatch")
    data = frame[2:-1]
    return status, [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def _crc8_next(crc, byte):
    """The RTL form of :func:`_crc8_byte`: an expression of the next CRC."""
    c = crc ^ byte
    for _ in range(8):
        c = ((c << 1)[:8] ^ Mux(c[7], CRC8_POLY, 0))[:8]
    return c


class UartBridge(wiring.Component):
    """Executes request frames from ``i_rx`` (bytes) on ``bus`` and answers on ``o_tx`` (bytes).

    ``max_words``: largest burst (the size of the bridge's word buffer, which holds a WRITE's data until its
    CRC is checked and a READ's data until it is sent). ``timeout_cycles``: a frame whose next byte takes
    longer than this is abandoned. ``errors`` counts requests answered with an error status; ``active`` is
    high while a frame is being received, executed or answered (an LED)."""

    def __init__(self, *, max_words=DEFAULT_MAX_WORDS, timeout_cycles=1 << 20):
        if not isinstance(max_words, int) or not 1 <= max_words <= 256:
            raise ValueError(f"max_words must be in 1..256, got {max_words!r}")
        if not isinstance(timeout_cycles, int) or timeout_cycles < 16:
            raise ValueError(f"timeout_cycles must be an integer >= 16, got {timeout_cycles!r}")
        self.max_words = max_words
        self.timeout_cycles = timeout_cycles
        super().__init__({
            "i_rx": In(stream.Signature(8)),
            "o_tx": Out(stream.Signature(8)),
            "bus": In(CsrSignature(32)),
            "errors": Out(16),
            "active": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        mw = self.max_words
        m.submodules.buf = buf = Memory(shape=32, depth=mw, init=[])
        wr = buf.write_port()
        rd = buf.read_port(transparent_for=(wr,))

        op = Signal(2)
        addr = Signal(32)
        count = Signal(8)           # count - 1, as received
        crc = Signal(8)
        word = Signal(32)
        widx = Signal(9)                # word index in the buffer (a frame may announce more than max_words)
        bidx = Signal(2)                # byte index in the word
        status = Signal(8)
        timer = Signal(range(self.timeout_cycles + 1))

        rx, tx, bus = self.i_rx, self.o_tx, self.bus
        byte = rx.payload
        got = rx.valid & rx.ready
        sent = tx.valid & tx.ready
        nxt_crc = _crc8_next(crc, byte)

        m.d.comb += [bus.addr.eq(addr & ~3), bus.wdata.eq(rd.data), wr.addr.eq(widx), rd.addr.eq(widx)]

        receiving = Signal()
        # abandon a frame whose bytes stop coming
        with m.If(receiving & ~got):
            m.d.sync += timer.eq(timer + 1)
        with m.Else():
            m.d.sync += timer.eq(0)

        def receive():          # in a state taking the bytes of a frame: give up when they stop coming
            m.d.comb += [rx.ready.eq(1), receiving.eq(1)]
            with m.If(timer == self.timeout_cycles):
                m.next = "SYNC"

        with m.FSM() as fsm:
            with m.State("SYNC"):
                m.d.comb += rx.ready.eq(1)
                with m.If(got & (byte == SYNC_REQ)):
                    m.d.sync += crc.eq(0)
                    m.next = "OP"
            with m.State("OP"):
                receive()
                with m.If(got):
                    m.d.sync += [op.eq(byte[:2]), crc.eq(nxt_crc), bidx.eq(0)]
                    with m.If((byte == Op.READ) | (byte == Op.WRITE)):
                        m.next = "ADDR"
                    with m.Elif(byte == SYNC_REQ):
                        m.d.sync += crc.eq(0)           # a sync byte restarts the frame
                    with m.Else():
                        m.next = "SYNC"
            with m.State("ADDR"):
                receive()
                with m.If(got):
                    m.d.sync += [addr.eq((byte << 24) | (addr >> 8)), crc.eq(nxt_crc), bidx.eq(bidx + 1)]
                    with m.If(bidx == 3):
                        m.next = "COUNT"
            with m.State("COUNT"):
                receive()
                with m.If(got):
                    m.d.sync += [count.eq(byte), crc.eq(nxt_crc), widx.eq(0), bidx.eq(0)]
                    with m.If(op == Op.WRITE):
                        m.next = "DATA"
                    with m.Else():
                        m.next = "CRC"
            with m.State("DATA"):
                receive()
                with m.If(got):
                    m.d.sync += [word.eq((byte << 24) | (word >> 8)), crc.eq(nxt_crc), bidx.eq(bidx + 1)]
                    with m.If(bidx == 3):
                        # words beyond max_words are received (to keep the framing) but not stored
                        m.d.comb += [wr.data.eq((byte << 24) | (word >> 8)), wr.en.eq(widx < mw)]
                        m.d.sync += widx.eq(widx + 1)
                        with m.If(widx == count):
                            m.next = "CRC"
            with m.State("CRC"):
                receive()
                with m.If(got):
                    m.d.sync += widx.eq(0)
                    with m.If(byte != crc):
                        m.d.sync += [status.eq(Status.CRC), self.errors.eq(self.errors + 1)]
                        m.next = "RESP_SYNC"
                    with m.Elif(count >= mw):
                        m.d.sync += [status.eq(Status.LENGTH), self.errors.eq(self.errors + 1)]
                        m.next = "RESP_SYNC"
                    with m.Else():
                        m.d.sync += status.eq(Status.OK)
                        m.next = "NEXT"
            with m.State("ACCESS"):
                # rd.data holds buf[widx] (read in the cycle before): the word a WRITE sends
                with m.If(op == Op.WRITE):
                    m.d.comb += bus.we.eq(1)
                with m.Else():
                    m.d.comb += bus.re.eq(1)
                m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(bus.ack):
                    m.d.comb += [wr.data.eq(bus.rdata), wr.en.eq(op == Op.READ)]
                    m.d.sync += [addr.eq(addr + 4), widx.eq(widx + 1)]
                    with m.If(widx == count):
                        m.next = "RESP_SYNC"
                    with m.Else():
                        m.next = "NEXT"
            with m.State("NEXT"):
                # one cycle for the read port to present the word at widx
                m.next = "ACCESS"
            with m.State("RESP_SYNC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(SYNC_RESP)]
                with m.If(sent):
                    m.d.sync += [crc.eq(0), widx.eq(0)]
                    m.next = "RESP_STATUS"
            with m.State("RESP_STATUS"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(status)]
                with m.If(sent):
                    m.d.sync += crc.eq(_crc8_next(crc, status))
                    with m.If((op == Op.READ) & (status == Status.OK)):
                        m.next = "RESP_LOAD"
                    with m.Else():
                        m.next = "RESP_CRC"
            with m.State("RESP_LOAD"):
                m.d.sync += [word.eq(rd.data), bidx.eq(0)]
                m.next = "RESP_DATA"
            with m.State("RESP_DATA"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(word[:8])]
                with m.If(sent):
                    m.d.sync += [word.eq(word >> 8), bidx.eq(bidx + 1), crc.eq(_crc8_next(crc, word[:8]))]
                    with m.If(bidx == 3):
                        m.d.sync += widx.eq(widx + 1)
                        with m.If(widx == count):
                            m.next = "RESP_CRC"
                        with m.Else():
                            m.next = "RESP_WAIT"
            with m.State("RESP_WAIT"):
                m.next = "RESP_LOAD"        # rd.addr moved to the next word: its data comes a cycle later
            with m.State("RESP_CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(crc)]
                with m.If(sent):
                    m.next = "SYNC"
        m.d.comb += self.active.eq(~fsm.ongoing("SYNC"))
        return m
