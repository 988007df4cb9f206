"""The board testbench behind a pseudo-terminal (see :mod:`syncfabric.tb.board`).

The testbench opens a pseudo-terminal pair per UART (``tb_params()["uarts"]``: ``(rx, tx)`` pin names, default the
one ``uart_rx``/``uart_tx``) and writes the terminals' device paths to ``tb_params()["path_file"]``, one per line.
Bytes the host writes there are sent to the board's ``uart_rx`` pin bit by bit (start, 8 data bits LSB first,
stop; ``divisor`` clock cycles per bit, the line level set on the clock's falling edge); bytes the board sends on
``uart_tx`` are sampled in the middle of each bit and written back to the terminal. With ``noise`` > 0 a byte
on its way to the board has one bit flipped with that probability (seeded), to exercise the bridge's CRC.

The host may close and reopen the terminal; the simulation ends when ``stop_file`` appears (or when the process
that started the simulator is gone).
"""

import errno
import os
import random
import tty

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, Timer

from ...hdl.common.uart import uart_bits
from ...host.transports.harness import tb_params

PERIOD_NS = 10


@cocotb.test()
async def serve(dut):
    """Connect the board's UART to a pseudo-terminal until the host is done with it."""
    p = tb_params()
    div = p["divisor"]
    rng = random.Random(p["seed"])
    noise = p.get("noise", 0.0)
    uarts = [(getattr(dut, rx), getattr(dut, tx)) for rx, tx in p.get("uarts", [("uart_rx", "uart_tx")])]
    Clock(dut.clk, PERIOD_NS, unit="ns").start()
    for rx, _ in uarts:
        rx.value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 4)

    masters, paths = [], []
    for _ in uarts:
        master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(master, False)
        paths.append(os.ttyname(slave))
        # the host opens the device by name; our own descriptor of it would hide the host's close
        os.close(slave)
        masters.append(master)
    with open(p["path_file"], "w") as f:
        f.write("".join(path + "\n" for path in paths))
    parent = os.getppid()
    state = {"done": False, "to_board": 0, "to_host": 0, "flipped": 0}

    async def send_bit_times(n):
        await Timer(n * div * PERIOD_NS, unit="ns")

    async def to_board(master, uart_rx):
        idle_polls = 0
        while not state["done"]:
            try:
                data = os.read(master, 4096)
            except BlockingIOError:
                data = None
            except OSError as e:
                if e.errno != errno.EIO:    # EIO: no host has the terminal open (yet, or any more)
                    raise
                data = None
            if not data:
                if os.path.exists(p["stop_file"]) or os.getppid() != parent:
                    state["done"] = True
                    break
                idle_polls += 1
                # poll often while the host is active, rarely when it has gone quiet
                await send_bit_times(10 if idle_polls < 100 else 200)
                continue
            idle_polls = 0
            await FallingEdge(dut.clk)
            for byte in data:
                if noise and rng.random() < noise:
                    byte ^= 1 << rng.randrange(8)
                    state["flipped"] += 1
                for level in uart_bits(byte):
                    uart_rx.value = level
                    await send_bit_times(1)
                state["to_board"] += 1

    async def to_host(master, uart_tx):
        while True:
            await FallingEdge(uart_tx)
            await Timer(div * PERIOD_NS // 2, unit="ns")     # middle of the start bit
            byte = 0
            for i in range(8):
                await send_bit_times(1)
                byte |= int(uart_tx.value) << i
            await send_bit_times(1)
            assert int(uart_tx.value) == 1, "the board sent a byte without a stop bit"
            state["to_host"] += 1
            if noise and rng.random() < noise:
                byte ^= 1 << rng.randrange(8)
                state["flipped"] += 1
            try:
                os.write(master, bytes([byte]))
            except OSError:
                pass                        # the host is gone; to_board() ends the run

    writers = [cocotb.start_soon(to_host(master, tx)) for master, (_, tx) in zip(masters, uarts)]
    readers = [cocotb.start_soon(to_board(master, rx)) for master, (rx, _) in zip(masters, uarts)]
    for reader in readers:
        await reader
    for writer in writers:
        writer.cancel()
    for master in masters:
        os.close(master)
    dut._log.info(f"{len(uarts)} board UART(s) served: {state['to_board']} bytes in, {state['to_host']} bytes "
                  f"out, {state['flipped']} bits flipped")
