"""A prototype board in simulation: :class:`~syncfabric.hdl.system.board.BoardSystem` on Verilator or Icarus,
its UART connected to a pseudo-terminal, so the host's serial transport talks to it exactly as to a board on
``/dev/ttyUSB0``.

:class:`SimulatedBoard` starts the cocotb testbench :mod:`syncfabric.tb.board.test_pty` in a background thread
(the simulator runs as a child process); the testbench opens a pseudo-terminal, drives the board's ``uart_rx``
pin bit by bit with the bytes the host writes to it and sends back the bytes it decodes from ``uart_tx``.
:attr:`SimulatedBoard.path` is the terminal's device, for :class:`~syncfabric.host.serial.SerialBoard` or the
host API (``backend: serial``, ``serial: {port: PATH}``); the host may close and reopen it. The simulation ends
when :meth:`SimulatedBoard.close` is called.

``boards=N`` simulates N boards of a ring instead (:class:`BoardRing`): each the same build, one rank of
``ring:N``, with its link port wired lane to lane to the next board's, as link cables join real boards. Each
board's UART has its own terminal (:attr:`SimulatedBoard.paths`, rank order).
"""

import dataclasses
import itertools
import os
import shutil
import tempfile
import threading
import time

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...hdl.ace.config import AceConfig
from ...hdl.system.board import BoardSystem
from ...hdl.system.top import ENGINE_MODULE, engine_verilog, link_verilog

__all__ = ["board_verilog", "BoardRing", "SimulatedBoard", "SIM_CLK_HZ", "SIM_DIVISOR"]

#: The simulated board's clock (a 10 ns period) and its UART's cycles per bit.
SIM_CLK_HZ = 100_000_000
SIM_DIVISOR = 4

_instances = itertools.count()


class BoardRing(wiring.Component):
    """``n`` boards, each a :class:`BoardSystem` holding rank 0 of ``ring:n`` with a link port (the same
    build on every board), board ``b`` standing for rank ``b``: its ``flit_out``/``credit_in`` lanes joined to
    board ``b+1``'s ``flit_in``/``credit_out``. Ports ``uart_rx<b>``, ``uart_tx<b>``. ``link_port``: the
    :class:`~syncfabric.hdl.system.pinlink.PinLink` options; other arguments as :class:`BoardSystem`."""

    def __init__(self, cfg, n, link_port=None, **kw):
        self.boards = [BoardSystem(cfg, topology=f"ring:{n}", ranks=(0,), link_port=link_port or {}, **kw)
                       for _ in range(n)]
        super().__init__({name: member for b in range(n) for name, member in
                          ((f"uart_rx{b}", In(1, init=1)), (f"uart_tx{b}", Out(1, init=1)))})

    def elaborate(self, platform):
        m = Module()
        n = len(self.boards)
        for b, board in enumerate(self.boards):
            m.submodules[f"board{b}"] = board
            m.d.comb += [board.uart_rx.eq(getattr(self, f"uart_rx{b}")),
                         getattr(self, f"uart_tx{b}").eq(board.uart_tx)]
        for b, board in enumerate(self.boards):     # the cable to the next board: flits out, credits back
            nxt = self.boards[(b + 1) % n]
            wiring.connect(m, board.flit_out, nxt.flit_in)
            wiring.connect(m, nxt.credit_out, board.credit_in)
        return m


def board_verilog(cfg, topology="ring:2", mem_bytes=16384, clk_hz=SIM_CLK_HZ, baud=SIM_CLK_HZ // SIM_DIVISOR,
                  link_latency=4, max_words=64, boards=1, link_port=None):
    """Verilog of a :class:`BoardSystem` (module ``board``; with ``boards`` > 1 a :class:`BoardRing` of that
    many) followed by its link and engine modules."""
    from amaranth.back import verilog
    cfg = AceConfig(**cfg) if isinstance(cfg, dict) else cfg
    kw = dict(mem_bytes=mem_bytes, clk_hz=clk_hz, baud=baud, link_latency=link_latency, max_words=max_words,
              inline=False)
    if boards > 1:
        board = BoardRing(cfg, boards, link_port=link_port, **kw)
    else:
        board = BoardSystem(cfg, topology=topology, **kw)
    top = verilog.convert(board, name="board", emit_src=False)
    return top + "\n" + link_verilog(cfg.beat_bytes, link_latency) + "\n" + engine_verilog(cfg)


class SimulatedBoard:
    """A board with engines of ``cfg`` on ``topology`` and ``mem_bytes`` of memory per endpoint, simulated by
    ``sim`` (``"verilator"`` or ``"icarus"``) behind a pseudo-terminal; ``boards=N``: a :class:`BoardRing` of
    N boards instead (``topology`` is then ``ring:N``; ``link_port``: the link ports' options), one terminal
    each. ``start_timeout``: seconds to wait for the simulator to build and open the terminal. ``noise``:
    probability that the testbench flips a bit of a byte on its way to the board (transmission errors the
    bridge must reject). Use as a context manager or call :meth:`close`, which ends the simulation."""

    def __init__(self, cfg, *, topology="ring:2", mem_bytes=16384, sim="verilator", seed=1, noise=0.0,
                 start_timeout=3600, progress=False, boards=1, link_port=None):
        from ...host.transports.harness import run_cocotb, run_dir_for
        self.sim = sim
        self.cfg = cfg
        if boards > 1:
            topology = f"ring:{boards}"
        params = {"cfg": dataclasses.asdict(cfg), "topology": topology, "mem_bytes": mem_bytes}
        if boards > 1:
            params.update(boards=boards, link_port=link_port or {})
        uarts = ([("uart_rx", "uart_tx")] if boards == 1 else
                 [(f"uart_rx{b}", f"uart_tx{b}") for b in range(boards)])
        self.build_tag = f"board-{topology.replace(':', '_')}-{os.getpid()}-{next(_instances)}"
        self.run_dir = run_dir_for(self.build_tag, sim)
        self.log_file = self.run_dir.parent / f"{self.build_tag}-{sim}.log"
        self._tmp = tempfile.mkdtemp(prefix="syncfabric-board-")
        path_file = os.path.join(self._tmp, "pty")
        self._stop_file = os.path.join(self._tmp, "stop")
        tbp = {"path_file": path_file, "stop_file": self._stop_file, "divisor": SIM_DIVISOR, "seed": seed,
               "noise": noise, "uarts": uarts}
        self._error = None
        self.result = None

        def simulate():
            try:
                self.result = run_cocotb(board_verilog, params, toplevel="board",
                                         test_module="syncfabric.tb.board.test_pty", sim=sim, testcase="serve",
                                         tb_params=tbp, build_tag=self.build_tag, hier_blocks=(ENGINE_MODULE,),
                                         log_file=self.log_file)
            except BaseException as e:      # handed to the host thread
                self._error = e

        if progress:
            what = f"a ring of {boards} boards" if boards > 1 else f"a {topology} board"
            print(f"starting the {sim} model of {what} (built once per configuration; simulator "
                  f"output in {self.log_file})", flush=True)
        self._thread = threading.Thread(target=simulate, name=f"board-{sim}", daemon=True)
        self._thread.start()
        t0 = time.monotonic()
        while not os.path.exists(path_file) or open(path_file).read().count("\n") < len(uarts):
            if not self._thread.is_alive():
                raise RuntimeError(f"the {sim} board simulation ended before it opened its terminal: "
                                   f"{self._error} (see {self.log_file})")
            if time.monotonic() - t0 > start_timeout:
                raise RuntimeError(f"the {sim} board simulation did not start within {start_timeout} s")
            time.sleep(0.1)
        #: The terminals of the boards' UARTs (rank order); :attr:`path` is the first.
        self.paths = open(path_file).read().split()
        self.path = self.paths[0]

    def close(self, timeout=120):
        """End the simulation, wait for it (``timeout`` seconds) and clean up. Raises the simulation's error,
        if it had one."""
        with open(self._stop_file, "w"):     # ends a simulation whose host never came
            pass
        self._thread.join(timeout)
        shutil.rmtree(self._tmp, ignore_errors=True)
        if self._error is not None:
            raise RuntimeError(f"the board simulation failed: {self._error} (see {self.log_file})")
        if not self._thread.is_alive():
            shutil.rmtree(self.run_dir.parent, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
