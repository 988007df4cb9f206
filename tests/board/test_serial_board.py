"""The serial transport end to end: the host API and the raw transport on a simulated prototype board
(:class:`~syncfabric.hdl.system.board.BoardSystem` on Verilator, its UART behind a pseudo-terminal).

Every byte crosses the UART pins bit by bit, the bridge's CRC and decoder, the engine's registers and the
on-chip AXI RAMs the engines' DMA uses."""

import numpy as np
import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.system.board import BOARD_ID
from syncfabric.host.serial import SerialBoard, SerialError
from syncfabric.host.system import System
from syncfabric.host.run import random_inputs
from syncfabric.sim.golden.algorithms import default_algorithm, generate
from syncfabric.sim.golden.chunking import buffer_counts
from syncfabric.sim.golden.executor import execute
from syncfabric.sim.golden.types import DType, ReduceOp, dtype_bytes
from syncfabric.tb.board import SimulatedBoard

pytestmark = pytest.mark.cocotb

CFG = AceConfig.profile("small")
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce")


def _check_collective(sys, coll, count, dtype, op, rng, cfg=CFG, root=0):
    """Post ``coll`` through the API and compare every rank's output with the golden executor, byte for byte."""
    comm = sys.world
    n = comm.size
    eb = dtype_bytes(DType.parse(dtype))
    inputs = random_inputs(coll, count, n, dtype, root, rng)
    n_in = max(buffer_counts(coll, count, n, r, root)[0] for r in range(n))
    n_out = max(buffer_counts(coll, count, n, r, root)[1] for r in range(n))
    send, recv = sys.register(n_in * eb), sys.register(n_out * eb)
    try:
        for r in range(n):
            if inputs[r] is not None:       # a rooted collective's other ranks send nothing
                send.write(r, inputs[r])
        args = ({"op": op} if coll in REDUCING else {}) | ({"root": root} if coll in ROOTED else {})
        req = getattr(comm, coll)(send, recv, count, dtype, **args)
        req.wait(timeout_cycles=10_000_000)
        progs = generate(coll, default_algorithm(coll, comm.topology), comm.topology, root=root)
        gold = execute(progs, comm.topology, inputs, DType.parse(dtype), ReduceOp.parse(op), count,
                       req.chunk_bytes, cfg.packet_bytes, cfg.beat_bytes)
        for r in range(n):
            want = gold.outputs[r].tobytes()
            assert recv.read(r, count=len(want)).tobytes() == want, f"{coll} rank {r}"
        return req
    finally:
        sys.deregister(send)
        sys.deregister(recv)


def test_host_api_runs_collectives_on_a_board_over_serial():
    seed = 3
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    with SimulatedBoard(CFG) as board:
        conf = {"topology": "ring:2", "backend": "serial", "serial": {"port": board.path, "timeout_s": 120}}
        with System(conf) as sys:
            assert sys.config.memory_bytes == 16384 and sys.config.clock_mhz == 100.0
            req = _check_collective(sys, "allreduce", 384, "fp32", "sum", rng)
            assert 0 < req.cycles < 100_000
            _check_collective(sys, "reduce_scatter", 256, "bf16", "max", rng)
            with pytest.raises(SerialError, match="no NPU compute emulation"):
                sys.set_npu_share(0.5)
        # a configuration that does not match the board is refused
        bad = dict(conf, memory={"bytes": "64K"})
        with pytest.raises(Exception, match="memory.bytes: the board has 16384"):
            System(bad)


def test_serial_transport_survives_line_noise_without_corrupting_memory():
    seed = 7
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    with SimulatedBoard(CFG, noise=0.002, seed=seed) as sim:
        board = None
        for _ in range(5):              # the probe itself may meet noise
            try:
                board = SerialBoard(sim.path, timeout=10, quiet_s=1, retries=6)
                break
            except SerialError:
                continue
        assert board is not None
        try:
            tr = board.transports[1]
            assert board.board_reg("ID") == BOARD_ID
            image = bytes(4096)
            failed = 0
            for k in range(12):
                addr = int(rng.integers(0, 2048))
                data = bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8))
                try:
                    tr.write_mem(addr, data)
                    ok = True
                except SerialError:
                    failed += 1
                    ok = False
                back = None
                for _ in range(5):
                    try:
                        back = tr.read_mem(addr, len(data))
                        break
                    except SerialError:
                        continue
                assert back is not None, f"the link did not recover after write {k}"
                old = image[addr:addr + len(data)]
                if ok:
                    assert back == data, f"write {k}"
                else:   # a refused write left nothing behind; a write whose answer was lost is complete
                    assert back in (data, old), f"write {k} left a corrupted region"
                image = image[:addr] + back + image[addr + len(back):]
            stats = board.link
            print(f"{stats.frames} frames, {stats.errors} transmission errors, {failed} writes refused, "
                  f"bridge errors {board.board_reg('BRIDGE_ERRORS')}")
            assert stats.errors > 0, "the noise did not reach the link (the test would prove nothing)"
        finally:
            board.close()


def test_two_boards_joined_by_their_link_ports_run_collectives_over_serial():
    """The ``ulx3s-85f-ring`` build on two simulated boards, one rank each, their pin-level link ports wired
    lane to lane (as a cable joins two boards), each board on its own terminal: every collective's output is
    the golden executor's byte for byte, and every flit one board sent the other received, none dropped."""
    from syncfabric.fpga.boards import board as board_named
    from syncfabric.host.run import engine_config_for
    seed = 11
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    brd = board_named("ulx3s-85f-ring")
    cfg = engine_config_for(brd.engine_config(), brd.topology)
    engine = {"profile": brd.config, **brd.overrides}
    with SimulatedBoard(cfg, boards=2, mem_bytes=brd.mem_bytes) as sim:
        conf = {"topology": brd.topology, "backend": "serial", "engine": engine,
                "serial": {"port": sim.paths, "timeout_s": 120}}
        with System(conf) as sys:
            assert sys.size == 2 and [b.n_endpoints for b in sys.backend.boards] == [1, 1]
            for coll, count, dtype, op, root in (("allreduce", 300, "fp32", "sum", 0),
                                                 ("reduce_scatter", 128, "int32", "max", 0),
                                                 ("allgather", 96, "fp32", "sum", 0),
                                                 ("alltoall", 64, "int32", "sum", 0),
                                                 ("broadcast", 100, "fp32", "sum", 1),
                                                 ("reduce", 80, "int32", "min", 1)):
                _check_collective(sys, coll, count, dtype, op, rng, cfg=cfg, root=root)
            sys.world.barrier().wait(timeout_cycles=1_000_000)
            links = sys.backend.link_counters()
            print(links)
            assert all(c["dropped"] == 0 for c in links)
            assert links[0]["flits_out"] > 0 and links[1]["flits_out"] > 0
            assert links[0]["flits_in"] == links[1]["flits_out"] and links[1]["flits_in"] == links[0]["flits_out"]
        # one board of the ring alone is not the ring's system
        with pytest.raises(Exception, match="holds one rank: list every board's device"):
            System(dict(conf, serial={"port": sim.paths[0], "timeout_s": 120}))


def test_three_boards_in_a_ring_forward_across_the_middle_board():
    """The same bitstream on three boards (``ring:3``: each board's link port goes to the next board, its
    credits come back from it): an all-reduce, and an all-to-all whose slices for the rank two hops away are
    forwarded through the middle board's engine, byte for byte; every board's flits arrive at the next."""
    from syncfabric.fpga.boards import board as board_named
    from syncfabric.host.run import engine_config_for
    seed = 12
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    brd = board_named("ulx3s-85f-ring")
    cfg = engine_config_for(brd.engine_config(), "ring:3")
    with SimulatedBoard(cfg, boards=3, mem_bytes=brd.mem_bytes) as sim:
        conf = {"topology": "ring:3", "backend": "serial", "engine": {"profile": brd.config, **brd.overrides},
                "serial": {"port": sim.paths, "timeout_s": 120}}
        with System(conf) as sys:
            _check_collective(sys, "allreduce", 300, "fp32", "sum", rng, cfg=cfg)
            _check_collective(sys, "alltoall", 40, "int32", "sum", rng, cfg=cfg)
            links = sys.backend.link_counters()
            print(links)
            assert all(c["dropped"] == 0 and c["flits_out"] > 0 for c in links)
            assert [c["flits_in"] for c in links] == [links[(b - 1) % 3]["flits_out"] for b in range(3)]
