"""A UART (8 data bits, no parity, one stop bit, least significant bit first) as byte streams.

``divisor`` is the number of clock cycles per bit (``clk_hz // baud``, at least 4). :class:`UartRx`
synchronises its pin through two flip-flops, finds the start bit's falling edge, samples each bit in its
middle and checks the stop bit; a byte with a bad stop bit is dropped and counted in ``framing_errors``
(sticky pulse ``o_error``). The UART cannot hold a sender back: a byte the consumer does not take before the
next one completes is lost (``overrun`` pulses). :class:`UartTx` sends each byte of its input stream.
:func:`uart_bits` is the reference: the line levels of a byte, bit by bit.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UartRx", "UartTx", "uart_bits", "uart_divisor"]


def uart_bits(byte):
    """Line levels of ``byte`` on the wire: start (0), 8 data bits LSB first, stop (1)."""
    if not 0 <= byte < 256:
        raise ValueError(f"a UART byte is 0..255, got {byte!r}")
    return [0] + [(byte >> i) & 1 for i in range(8)] + [1]


def uart_divisor(clk_hz, baud):
    """Clock cycles per bit for ``baud`` at ``clk_hz``; raises ``ValueError`` if the rate is off by more than
    2 % (a receiver samples mid-bit, so the error may accumulate to less than half a bit over 10 bits)."""
    if clk_hz <= 0 or baud <= 0:
        raise ValueError(f"clock and baud rate must be positive, got {clk_hz} Hz and {baud} baud")
    div = round(clk_hz / baud)
    if div < 4:
        raise ValueError(f"{baud} baud needs at least 4 clock cycles per bit; {clk_hz} Hz gives {clk_hz / baud:.2f}")
    if abs(clk_hz / div - baud) / baud > 0.02:
        raise ValueError(f"{baud} baud is {abs(clk_hz / div - baud) / baud:.1%} off at {clk_hz} Hz "
                         f"(divisor {div}); pick a rate within 2 %")
    return div


class UartRx(wiring.Component):
    """Receives bytes on ``rx`` (the pin, idle high) and presents each on ``o_stream`` (8-bit payload).

    ``framing_errors`` counts bytes dropped for a bad stop bit, ``overrun`` pulses when a byte is lost because
    ``o_stream`` was still full."""

    def __init__(self, divisor):
        if not isinstance(divisor, int) or divisor < 4:
            raise ValueError(f"divisor must be an integer >= 4, got {divisor!r}")
        self.divisor = divisor
        super().__init__({
            "rx": In(1, init=1),
            "o_stream": Out(stream.Signature(8)),
            "framing_errors": Out(16),
            "overrun": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        div = self.divisor
        pin = Signal(init=1)
        m.submodules.sync_rx = FFSynchronizer(self.rx, pin, init=1)
        timer = Signal(range(div * 3 // 2 + 1))
        bit = Signal(range(9))
        shreg = Signal(8)

        m.d.sync += self.overrun.eq(0)
        with m.If(self.o_stream.ready):
            m.d.sync += self.o_stream.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~pin):
                    # first sample in the middle of bit 0: one and a half bits after the edge
                    m.d.sync += [timer.eq(div + div // 2 - 1), bit.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [shreg.eq((pin << 7) | (shreg >> 1)), bit.eq(bit + 1), timer.eq(div - 1)]
                    with m.If(bit == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    with m.If(pin):
                        with m.If(self.o_stream.valid & ~self.o_stream.ready):
                            m.d.sync += self.overrun.eq(1)
                        with m.Else():
                            m.d.sync += [self.o_stream.payload.eq(shreg), self.o_stream.valid.eq(1)]
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += self.framing_errors.eq(self.framing_errors + 1)
                        m.next = "BREAK"
            with m.State("BREAK"):
                # a line held low (a break, or a bad stop bit): wait for it to go idle before the next start
                with m.If(pin):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """Sends each byte of ``i_stream`` on ``tx`` (idle high); ``busy`` is high while a byte is on the wire."""

    def __init__(self, divisor):
        if not isinstance(divisor, int) or divisor < 4:
            raise ValueError(f"divisor must be an integer >= 4, got {divisor!r}")
        self.divisor = divisor
        super().__init__({
            "i_stream": In(stream.Signature(8)),
            "tx": Out(1, init=1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        div = self.divisor
        timer = Signal(range(div))
        bits = Signal(10, init=0x3FF)       # stop, data[7:0], start: shifted out from bit 0
        left = Signal(range(11))
        m.d.comb += [self.tx.eq(bits[0]), self.busy.eq(left != 0)]
        m.d.comb += self.i_stream.ready.eq(left == 0)
        with m.If(self.i_stream.valid & self.i_stream.ready):
            m.d.sync += [bits.eq((1 << 9) | (self.i_stream.payload << 1)), left.eq(10), timer.eq(div - 1)]
        with m.Elif(left != 0):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Else():
                m.d.sync += [bits.eq((1 << 9) | (bits >> 1)), left.eq(left - 1), timer.eq(div - 1)]
        return m
