"""Drive prototype boards over their serial ports: identify them, then run an all-reduce on their engines.

    python examples/serial_board.py --port /dev/ttyUSB0 --board ulx3s-85f [--baud 115200]
    python examples/serial_board.py --port /dev/ttyUSB0 --engine small    # a build of another configuration
    python examples/serial_board.py --port /dev/ttyUSB0 --port /dev/ttyUSB1 --board ulx3s-85f-ring
                                                        # two boards joined by a link cable, one rank each
    python examples/serial_board.py --simulate [--board ulx3s-85f]   # no board: the board's RTL on Verilator
                                                        # behind a pseudo-terminal (first build a minute or more)

The board is a ``syncfabric build`` bitstream (``BoardSystem``: engines joined by on-chip links, on-chip NPU
memories, the UART bridge). ``--board`` takes the engine configuration and topology from that board's definition
(``syncfabric build --list``), exactly as it was built; ``--engine`` names a profile built on ring:2 instead. A
board that holds one rank of a ring (``ulx3s-85f-ring``) needs a ``--port`` per board, rank 0's first, in ring
order (``--simulate`` joins that many simulated boards by their link ports). The same host API as on the
simulators runs here, with ``backend: serial``.
"""

import argparse
import contextlib

import numpy as np

from syncfabric.hdl.ace.config import PROFILES, AceConfig
from syncfabric.host.run import engine_config_for
from syncfabric.host.serial import SerialBoard
from syncfabric.host.system import System
from syncfabric.sim.golden.topology import parse as parse_topology


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", action="append",
                       help="the board's serial device, e.g. /dev/ttyUSB0 (once per board of a ring of boards)")
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
        n_boards = 1 if b.ranks is None else parse_topology(topology).n_endpoints // len(b.ranks)
    else:
        engine, topology, mem_bytes, n_boards = {"profile": args.engine or "small"}, "ring:2", 16384, 1
    if args.port and len(args.port) != n_boards:
        ap.error(f"{topology} on {args.board or 'this build'} takes {n_boards} board(s): give --port "
                 f"{n_boards} time(s), got {len(args.port)}")
    overrides = {k: v for k, v in engine.items() if k != "profile"}
    cfg = engine_config_for(AceConfig.profile(engine["profile"], **overrides), topology)

    with contextlib.ExitStack() as stack:
        timeout, quiet = 2.0, 0.1
        ports = args.port
        if args.simulate:
            from syncfabric.tb.board import SimulatedBoard
            sim = stack.enter_context(SimulatedBoard(cfg, topology=topology, mem_bytes=mem_bytes, progress=True,
                                                     boards=n_boards))
            ports, timeout, quiet = sim.paths, 60.0, 1.0     # simulated bytes are far slower than a real UART's

        for port in ports:
            board = SerialBoard(port, args.baud, timeout=timeout)
            print(f"board on {port}: {board.n_endpoints} endpoint{'s' * (board.n_endpoints != 1)}, "
                  f"{board.mem_bytes} B of memory each, "
                  f"{board.clk_hz / 1e6:g} MHz, {board.baud} baud, bursts of {board.max_words} words; "
                  f"up {board.now} cycles")
            board.close()

        conf = {"topology": topology, "backend": "serial", "engine": engine,
                "serial": {"port": ports[0] if n_boards == 1 else ports, "baud": args.baud, "timeout_s": timeout,
                           "quiet_s": quiet}}
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
            boards = system.backend.boards if n_boards > 1 else [system.backend]
            where = f"across {n_boards} boards" if n_boards > 1 else "on the board"
            print(f"all-reduce of {4 * count} B per NPU {where}: {req.cycles} cycles = {req.time_us:.2f} us "
                  f"at {system.config.clock_mhz:g} MHz; every rank holds the sum")
            for port, board in zip(ports, boards):
                link = board.link
                print(f"serial link {port}: {link.frames} frames, {link.bytes_sent} B sent, {link.bytes_received} "
                      f"B received, {link.errors} transmission errors")
            if n_boards > 1:
                for port, c in zip(ports, system.backend.link_counters()):
                    print(f"link port of the board on {port}: {c['flits_out']} flits out, {c['flits_in']} in, "
                          f"{c['dropped']} words dropped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
