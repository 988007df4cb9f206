"""The serial transport: the host driver on a prototype board, through the board's UART bridge.

A board (:class:`~syncfabric.hdl.system.board.BoardSystem`, built by ``syncfabric build``) answers the frames of
:mod:`syncfabric.hdl.common.bridge` on its UART. :class:`SerialBoard` opens the serial device, checks that a
syncfabric board answers (its ID and VERSION registers) and reads what it was built with (endpoints, memory,
clock, baud, burst size); :attr:`SerialBoard.transports` then holds one
:class:`SerialTransport` per endpoint, and the same driver code as on the simulators runs on them
(:class:`~syncfabric.host.driver.SyncAceDriver`, or the host API with ``backend: serial``).

Cycle counts come from the board's 64-bit cycle counter, so request timeouts and measurements are in board clock
cycles as on the simulators. Reads are retried after a transmission error (a CRC mismatch or a lost response);
writes are not (a doorbell must not ring twice): a failed write raises :class:`SerialError`.

Boards joined by their pin-level link ports (one rank of a ring each) are one system: :class:`SerialBoards` opens
every board's device and lists their endpoints in order, so rank ``r`` is the ``r``-th endpoint over all boards.

On POSIX systems the device is opened with ``termios`` (no extra package); any object with ``read(n)``,
``write(data)`` and ``close()`` (a pyserial ``Serial``, a socket wrapper) can be passed instead as ``port``.
"""

import os
import time

from ..hdl.common.bridge import (
    DEFAULT_MAX_WORDS, BridgeProtocolError, Op, Status, SYNC_RESP, decode_response, encode_request,
    response_length)
from ..hdl.system.board import (
    BOARD_ID, BOARD_VERSION, SPACE_BOARD, SPACE_CSR, SPACE_MEM, board_address, board_regmap)
from .transport import Transport, TransportError

__all__ = ["SerialError", "SerialPort", "BoardLink", "SerialBoard", "SerialBoards", "SerialTransport"]

_BOARD = board_regmap()


class SerialError(TransportError):
    """The board did not answer, answered with an error status, or is not a syncfabric board."""


class _StatusError(SerialError):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class SerialPort:
    """A serial device (``/dev/ttyUSB0``, a pseudo-terminal) in raw mode at ``baud``, with a read timeout of
    ``timeout`` seconds per call."""

    _BAUDS = (9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000, 576000, 921600, 1000000, 1152000,
              1500000, 2000000, 2500000, 3000000, 3500000, 4000000)

    def __init__(self, path, baud=115200, timeout=2.0):
        import termios
        import tty
        self.path, self.baud, self.timeout = path, baud, timeout
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as e:
            raise SerialError(f"cannot open {path}: {e.strerror}") from None
        try:
            tty.setraw(self.fd)
            attrs = termios.tcgetattr(self.fd)
            speed = getattr(termios, f"B{baud}", None) if baud in self._BAUDS else None
            if speed is None:
                raise SerialError(f"{baud} baud is not a standard rate ({', '.join(map(str, self._BAUDS))})")
            attrs[4] = attrs[5] = speed
            attrs[2] |= termios.CLOCAL | termios.CREAD
            termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
            termios.tcflush(self.fd, termios.TCIOFLUSH)
        except termios.error as e:
            os.close(self.fd)
            raise SerialError(f"{path} is not a serial device: {e}") from None
        except SerialError:
            os.close(self.fd)
            raise

    def write(self, data):
        """Send all of ``data``."""
        import select
        view = memoryview(bytes(data))
        while view:
            select.select([], [self.fd], [], self.timeout)
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                continue
            view = view[n:]

    def read(self, n):
        """Up to ``n`` bytes: what arrives before the timeout (possibly nothing)."""
        import select
        out = bytearray()
        deadline = time.monotonic() + self.timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                break
            try:
                chunk = os.read(self.fd, n - len(out))
            except BlockingIOError:
                continue
            except OSError as e:        # the other end of a pseudo-terminal went away
                raise SerialError(f"{self.path}: {e.strerror}") from None
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def flush_input(self):
        """Drop bytes received but not read."""
        import termios
        termios.tcflush(self.fd, termios.TCIFLUSH)

    def close(self):
        """Close the device (idempotent)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class BoardLink:
    """Framed reads and writes of 32-bit words over ``port`` (a :class:`SerialPort` or any object with
    ``read(n)``/``write(data)``); ``max_words``: the board's largest burst; ``retries``: attempts of a read
    after a transmission error."""

    def __init__(self, port, *, max_words=DEFAULT_MAX_WORDS, retries=3, quiet_s=0.1):
        self.port, self.max_words, self.retries, self.quiet_s = port, max_words, retries, quiet_s
        self.frames = 0             # request frames sent
        self.bytes_sent = 0
        self.bytes_received = 0
        self.errors = 0             # transmission errors seen (retried or raised)

    def _transact(self, op, addr, count, words=()):
        req = encode_request(op, addr, count, words, max_words=self.max_words)
        self.port.write(req)
        self.frames += 1
        self.bytes_sent += len(req)
        head = self.port.read(2)
        if len(head) < 2 or head[0] != SYNC_RESP:
            raise BridgeProtocolError(f"no response from the board ({len(head)} bytes: {head.hex()})")
        n = response_length(op, count, head[1]) if head[1] in set(Status) else 3
        rest = self.port.read(n - 2)
        frame = head + rest
        self.bytes_received += len(frame)
        status, data = decode_response(frame, op, count)
        if status != Status.OK:
            raise _StatusError(status, f"the board answered {status.name} to a {Op(op).name} of {count} words at "
                              f"{addr:#010x}")
        return data

    def _resync(self):
        """After an error: drop whatever the board is still sending until the line has been quiet for
        ``quiet_s`` (longer than the bridge's frame timeout, so a half-received request is abandoned too)."""
        timeout = getattr(self.port, "timeout", None)
        if timeout is not None:
            self.port.timeout = self.quiet_s
        try:
            while self.port.read(4096):
                pass
        finally:
            if timeout is not None:
                self.port.timeout = timeout

    def read(self, addr, count):
        """``count`` words at ``addr`` (split into bursts of at most ``max_words``)."""
        out = []
        while count:
            n = min(count, self.max_words)
            for attempt in range(self.retries + 1):
                try:
                    out += self._transact(Op.READ, addr, n)
                    break
                except (BridgeProtocolError, SerialError) as e:
                    self.errors += 1
                    # a CRC status or a garbled/lost response is a transmission error: try again
                    if attempt == self.retries or getattr(e, "status", Status.CRC) != Status.CRC:
                        raise SerialError(f"read of {n} words at {addr:#010x} failed: {e}") from None
                    self._resync()
            addr += 4 * n
            count -= n
        return out

    def write(self, addr, words):
        """Write ``words`` (32-bit values) from ``addr`` on."""
        words = list(words)
        for i in range(0, len(words), self.max_words):
            part = words[i:i + self.max_words]
            try:
                self._transact(Op.WRITE, addr + 4 * i, len(part), part)
            except (BridgeProtocolError, SerialError) as e:
                self.errors += 1
                self._resync()
                raise SerialError(f"write of {len(part)} words at {addr + 4 * i:#010x} failed: {e}") from None


class SerialBoard:
    """A board on serial device ``port`` (a path, or an open port object) at ``baud``. ``timeout``: seconds to
    wait for each response; ``quiet_s``: after a transmission error, how long the line must stay silent before
    the next request (raise both for a simulated board, whose bytes take far longer than a real one's)."""

    def __init__(self, port, baud=115200, *, timeout=2.0, retries=3, quiet_s=0.1):
        self.port = SerialPort(port, baud, timeout) if isinstance(port, (str, os.PathLike)) else port
        probe = BoardLink(self.port, max_words=1, retries=retries, quiet_s=quiet_s)
        try:
            ident = probe.read(board_address(SPACE_BOARD, _BOARD.addr("ID")), 1)[0]
            if ident != BOARD_ID:
                raise SerialError(f"{port} answered, but its ID register reads {ident:#010x}, not a syncfabric "
                                  f"board ({BOARD_ID:#010x})")
            info = probe.read(board_address(SPACE_BOARD, _BOARD.addr("VERSION")), 6)
        except Exception:
            self.close()
            raise
        version, self.n_endpoints, self.mem_bytes, self.clk_hz, self.baud, self.max_words = info
        if version != BOARD_VERSION:
            self.close()
            raise SerialError(f"board register block version {version}, this host knows {BOARD_VERSION}")
        self.link = BoardLink(self.port, max_words=self.max_words, retries=retries, quiet_s=quiet_s)
        self.transports = [SerialTransport(self, i) for i in range(self.n_endpoints)]

    def board_reg(self, name):
        """The board register ``name`` (a 64-bit register is read low word first)."""
        reg = _BOARD.register(name)
        words = self.link.read(board_address(SPACE_BOARD, reg.offset), reg.width // 32)
        return sum(w << (32 * i) for i, w in enumerate(words))

    @property
    def now(self):
        """Board clock cycles since reset."""
        return self.board_reg("CYCLES")

    def idle(self, cycles):
        """Let at least ``cycles`` board cycles pass."""
        end = self.now + int(cycles)
        while self.now < end:
            time.sleep(min(0.01, max(0.0, (end - self.now) / self.clk_hz)))

    def set_npu_share(self, rank, share):
        """Not available: the board has no NPU traffic generator on its memory port."""
        raise SerialError("a board has no NPU compute emulation (set_npu_share/compute need a simulator backend)")

    def set_link_stall(self, link, stalled):
        """Not available: a board's links are wires (stall_link needs a simulator backend)."""
        raise SerialError("a board's links cannot be stalled from the host (stall_link needs a simulator backend)")

    def set_link_faults(self, link, *probs):
        """Not available: a board's links are wires (set_link_faults needs a simulator backend)."""
        raise SerialError("a board's links have no fault injection (set_link_faults needs a simulator backend)")

    def close(self):
        """Close the serial port (idempotent)."""
        if self.port is not None:
            self.port.close()
            self.port = None


class SerialBoards:
    """Boards on the serial devices ``ports`` (paths or open port objects), joined by their link ports into one
    system: :attr:`transports` holds every board's endpoints, the first board's first. The boards must be
    builds of the same board (the same memory and clock); cycle counts (:attr:`now`) are the first board's,
    since each board counts its own clock. Other arguments as :class:`SerialBoard`."""

    def __init__(self, ports, baud=115200, **kw):
        self.boards = []
        try:
            for port in ports:
                self.boards.append(SerialBoard(port, baud, **kw))
            first = self.boards[0]
            for port, b in zip(ports, self.boards):
                if (b.mem_bytes, b.clk_hz) != (first.mem_bytes, first.clk_hz):
                    raise SerialError(f"{port} has {b.mem_bytes} B of memory per endpoint at {b.clk_hz} Hz, "
                                      f"{ports[0]} {first.mem_bytes} B at {first.clk_hz} Hz: boards of one system "
                                      f"load the same build")
        except Exception:
            self.close()
            raise
        self.n_endpoints = sum(b.n_endpoints for b in self.boards)
        self.mem_bytes, self.clk_hz, self.baud = first.mem_bytes, first.clk_hz, first.baud
        self.transports = [t for b in self.boards for t in b.transports]

    @property
    def now(self):
        """The first board's clock cycles since reset."""
        return self.boards[0].now

    def idle(self, cycles):
        """Let at least ``cycles`` cycles of the first board pass."""
        self.boards[0].idle(cycles)

    def set_npu_share(self, rank, share):
        """Not available (see :meth:`SerialBoard.set_npu_share`)."""
        self.boards[0].set_npu_share(rank, share)

    def set_link_stall(self, link, stalled):
        """Not available (see :meth:`SerialBoard.set_link_stall`)."""
        self.boards[0].set_link_stall(link, stalled)

    def set_link_faults(self, link, *probs):
        """Not available (see :meth:`SerialBoard.set_link_faults`)."""
        self.boards[0].set_link_faults(link, *probs)

    def link_counters(self):
        """Per board ``{"flits_out", "flits_in", "dropped"}`` of its link port (``dropped``: words received
        outside a frame, a cable or clock fault, or a neighbour configured while this board ran)."""
        return [{"flits_out": b.board_reg("LINK_FLITS_OUT"), "flits_in": b.board_reg("LINK_FLITS_IN"),
                 "dropped": b.board_reg("LINK_DROPPED")} for b in self.boards]

    def close(self):
        """Close every board's port (idempotent)."""
        for b in self.boards:
            b.close()


class SerialTransport(Transport):
    """The :class:`~syncfabric.host.transport.Transport` of endpoint ``endpoint`` of ``board``."""

    def __init__(self, board, endpoint):
        self.board, self.endpoint = board, endpoint

    def _mem(self, addr, n):
        if addr < 0 or addr + n > self.board.mem_bytes:
            raise TransportError(f"bytes {addr:#x}..{addr + n:#x} are outside endpoint {self.endpoint}'s "
                                 f"{self.board.mem_bytes} bytes of memory")
        return board_address(SPACE_MEM, addr, self.endpoint)

    def read_reg(self, addr):
        return self.board.link.read(board_address(SPACE_CSR, addr, self.endpoint), 1)[0]

    def write_reg(self, addr, value):
        if not 0 <= value < 1 << 32:
            raise ValueError(f"{value!r} is not a 32-bit value")
        self.board.link.write(board_address(SPACE_CSR, addr, self.endpoint), [value])

    def read_mem(self, addr, n):
        if n == 0:
            return b""
        first, end = addr & ~3, -(-(addr + n) // 4) * 4
        words = self.board.link.read(self._mem(first, end - first), (end - first) // 4)
        raw = b"".join(w.to_bytes(4, "little") for w in words)
        return raw[addr - first:addr - first + n]

    def write_mem(self, addr, data):
        data = bytes(data)
        if not data:
            return
        first, end = addr & ~3, -(-(addr + len(data)) // 4) * 4
        self._mem(first, end - first)
        if first != addr or end != addr + len(data):     # partial words at the edges: read-modify-write
            raw = bytearray(self.read_mem(first, end - first))
            raw[addr - first:addr - first + len(data)] = data
            data = bytes(raw)
        words = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
        self.board.link.write(self._mem(first, end - first), words)

    def wait_irq(self, timeout_cycles=None):
        bit = 1 << self.endpoint
        start = self.board.now if timeout_cycles is not None else 0
        while True:
            if self.board.board_reg("IRQ") & bit:
                return True
            if timeout_cycles is not None and self.board.now - start >= timeout_cycles:
                return False

    def cycles(self):
        return self.board.now

    def close(self):
        self.board.close()

    def __repr__(self):
        return f"SerialTransport(endpoint {self.endpoint})"
