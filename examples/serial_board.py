"""Drive a prototype board over its serial port: identify it, then run an all-reduce on its two engines.

    python examples/serial_board.py --port /dev/ttyUSB0 [--baud 115200] [--engine small]
    python examples/serial_board.py --simulate          # no board: the board's RTL on Verilator behind a
                                                        # pseudo-terminal (first build about a minute)

The board is a ``syncfabric build`` bitstream (``BoardSystem``: engines of the ``--engine`` profile joined by an
on-chip link, on-chip NPU memories, the UART bridge). The same host API as on the simulators runs here, with
``backend: serial``.
"""

import argparse
import contextlib

import numpy as np

from syncfabric.hdl.ace.config import PROFILES, AceConfig
from syncfabric.host.serial import SerialBoard
from syncfabric.host.system import System


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", help="the board's serial device, e.g. /dev/ttyUSB0")
    where.add_argument("--simulate", action="store_true", help="simulate the board behind a pseudo-terminal")
    ap.add_argument("--baud", type=int, default=115200, help="the rate the board was built for")
    ap.add_argument("--engine", default="small", choices=PROFILES, help="engine profile the board was built with")
    ap.add_argument("--count", type=int, default=256, help="fp32 elements per NPU")
    args = ap.parse_args(argv)

    with contextlib.ExitStack() as stack:
        timeout, quiet = 2.0, 0.1
        port = args.port
        if args.simulate:
            from syncfabric.tb.board import SimulatedBoard
            sim = stack.enter_context(SimulatedBoard(AceConfig.profile(args.engine), progress=True))
            port, timeout, quiet = sim.path, 60.0, 1.0       # simulated bytes are far slower than a real UART's

        board = SerialBoard(port, args.baud, timeout=timeout)
        print(f"board on {port}: {board.n_endpoints} endpoints, {board.mem_bytes} B of memory each, "
              f"{board.clk_hz / 1e6:g} MHz, {board.baud} baud, bursts of {board.max_words} words; "
              f"up {board.now} cycles")
        board.close()

        conf = {"topology": f"ring:{board.n_endpoints}", "backend": "serial", "engine": {"profile": args.engine},
                "serial": {"port": port, "baud": args.baud, "timeout_s": timeout, "quiet_s": quiet}}
        with System(conf) as system:
            n, count = system.size, args.count
            grads, summed = system.register(4 * count), system.register(4 * count)
            rng = np.random.default_rng(0)
            # integer-valued floats: every summation order gives the same result, so numpy can check it
            data = [rng.integers(-100, 100, count).astype(np.float32) for _ in range(n)]
            for rank in range(n):
                grads.write(rank, data[rank])
            req = system.world.allreduce(grads, summed, count, "fp32", "sum")
            req.wait(timeout_cycles=50_000_000)
            expect = np.sum(data, axis=0)
            for rank in range(n):
                assert np.array_equal(summed.read(rank, "fp32"), expect), f"rank {rank} differs"
            link = system.backend.link
            print(f"all-reduce of {4 * count} B per NPU on the board: {req.cycles} cycles = {req.time_us:.2f} us "
                  f"at {system.config.clock_mhz:g} MHz; every rank holds the sum")
            print(f"serial link: {link.frames} frames, {link.bytes_sent} B sent, {link.bytes_received} B received, "
                  f"{link.errors} transmission errors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
