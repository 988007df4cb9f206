"""Drive a prototype board over its serial port: identify it, then run an all-reduce on its two engines.

    python examples/serial_board.py --port /dev/ttyUSB0 --board ulx3s-85f [--baud 115200]
    python examples/serial_board.py --port /dev/ttyUSB0 --engine small    # a build of another configuration
    python examples/serial_board.py --simulate [--board ulx3s-85f]   # no board: the board's RTL on Verilator
                                                        # behind a pseudo-terminal (first build a minute or more)

The board is a ``syncfabric build`` bitstream (``BoardSystem``: engines joined by on-chip links, on-chip NPU
memories, the UART bridge). ``--board`` takes the engine configuration and topology from that board's definition
(``syncfabric build --list``), exactly as it was built; ``--engine`` names a profile built on ring:2 instead. The
same host API as on the simulators runs here, with ``backend: serial``.
"""

import argparse
import contextlib

import numpy as np

from syncfabric.hdl.ace.config import PROFILES, AceConfig
from syncfabric.host.run import engine_config_for
from syncfabric.host.serial import SerialBoard
from syncfabric.host.system import System


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", help="the board's serial device, e.g. /dev/ttyUSB0")
    where.add_argument("--simulate", action="store_true", help="simulate the board behind a pseudo-terminal")
    ap.add_argument("--baud", type=int, default=115200, help="the rate the board was built for")
    built = ap.add_mutually_exclusive_group()
    built.add_argument("--board", help="the board definition the bitstream was built from (e.g. ulx3s-85f)")
    built.add_argument("--engine", choices=PROFILES,
                       help="engine profile of a ring:2 build (default small, when --board is not given)")
    ap.add_argument("--count", type=int, default=256, help="fp32 elements per NPU")
    args = ap.parse_args(argv)
    if args.board:
        from syncfabric.fpga.boards import board as board_named
        b = board_named(args.board)
        engine, topology, mem_bytes = {"profile": b.config, **b.overrides}, b.topology, b.mem_bytes
    else:
        engine, topology, mem_bytes = {"profile": args.engine or "small"}, "ring:2", 16384
    overrides = {k: v for k, v in engine.items() if k != "profile"}
    cfg = engine_config_for(AceConfig.profile(engine["profile"], **overrides), topology)

    with contextlib.ExitStack() as stack:
        timeout, quiet = 2.0, 0.1
        port = args.port
        if args.simulate:
            from syncfabric.tb.board import SimulatedBoard
            sim = stack.enter_context(SimulatedBoard(cfg, topology=topology, mem_bytes=mem_bytes, progress=True))
            port, timeout, quiet = sim.path, 60.0, 1.0       # simulated bytes are far slower than a real UART's

        board = SerialBoard(port, args.baud, timeout=timeout)
        print(f"board on {port}: {board.n_endpoints} endpoints, {board.mem_bytes} B of memory each, "
              f"{board.clk_hz / 1e6:g} MHz, {board.baud} baud, bursts of {board.max_words} words; "
              f"up {board.now} cycles")
        board.close()

        conf = {"topology": topology, "backend": "serial", "engine": engine,
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
