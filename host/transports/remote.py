"""A simulated design served to synchronous host code in this process: the plumbing the ACE and COARSE
remote systems share.

Host side, :class:`RemoteSimulation` starts a cocotb testbench
(:func:`~syncfabric.host.transports.harness.run_cocotb`) in a background thread - the simulator runs as a child
process, as every cocotb run here does - and waits for it to connect back over a local socket;
:meth:`RemoteSimulation.call` is then one request, performed by the testbench in simulated time. Simulator side,
:func:`serve` is the testbench's loop: it connects to the address in its ``tb_params``, hands each request to a
handler coroutine and sends back its value.

Protocol: pickled tuples over a ``multiprocessing.connection`` socket, ``(op, *args)`` in, ``("ok", value,
seconds)`` or ``("err", message, seconds)`` out (``seconds``: wall time the request spent in the simulator);
``("close",)`` ends the simulation. While the testbench waits for a request the simulator is blocked, so
simulated time passes only inside requests.
"""

import itertools
import secrets
import shutil
import threading
import time
from multiprocessing.connection import Client, Listener

from ..transport import TransportError

__all__ = ["RemoteSimulation", "serve"]

_instances = itertools.count()


def unique_tag(prefix):
    """A build tag no other remote simulation of this process uses (each needs its own run directory)."""
    import os
    return f"{prefix}-{os.getpid()}-{next(_instances)}"


class RemoteSimulation:
    """The cocotb testcase ``testcase`` of ``test_module`` on ``factory(**params)`` (module ``toplevel``) in
    simulator ``sim``, serving requests. ``tb_params`` reach the testbench with the connection's address and
    key added; ``hier_blocks``/``public`` as :func:`~syncfabric.host.transports.harness.run_cocotb`.
    ``connect_timeout``: seconds to wait for the build and the connection; ``progress``: a line to print before the
    build."""

    def __init__(self, factory, params, *, toplevel, test_module, testcase, tb_params, build_tag, sim="verilator",
                 hier_blocks=(), public=(), connect_timeout=3600, progress=None):
        from .harness import run_cocotb, run_dir_for

        self.sim = sim
        key = secrets.token_bytes(16)
        self._listener = Listener(("127.0.0.1", 0), authkey=key)
        self.build_tag = build_tag
        self.run_dir = run_dir_for(build_tag, sim)
        self.log_file = self.run_dir.parent / f"{build_tag}-{sim}.log"
        tbp = {**tb_params, "address": list(self._listener.address), "authkey": key.hex()}
        self._error = None
        self._conn = None
        self._closed = False
        self.sim_seconds = 0.0      # wall time the server spent in the simulator, as it reports

        def simulate():
            try:
                run_cocotb(factory, params, toplevel=toplevel, test_module=test_module, sim=sim, testcase=testcase,
                           tb_params=tbp, build_tag=build_tag, hier_blocks=tuple(hier_blocks),
                           log_file=self.log_file, public=tuple(public))
            except BaseException as e:          # handed to the host thread
                self._error = e

        def accept():
            try:
                self._conn = self._listener.accept()
            except OSError:
                pass

        if progress:
            print(f"{progress} (simulator output in {self.log_file})", flush=True)
        self._thread = threading.Thread(target=simulate, name=f"{sim}-{toplevel}", daemon=True)
        self._thread.start()
        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        t0 = time.monotonic()
        while self._conn is None:
            if not self._thread.is_alive():
                self._listener.close()
                raise TransportError(f"the {sim} simulation ended before it connected: {self._error} (see "
                                     f"{self.log_file})")
            if time.monotonic() - t0 > connect_timeout:
                self._listener.close()
                raise TransportError(f"the {sim} simulation did not connect within {connect_timeout} s")
            acceptor.join(0.2)

    def describe(self, req):
        """How an error message names request ``req`` (subclasses name ranks or devices)."""
        return str(req[0])

    def call(self, *req):
        """One request ``(op, *args)``; returns its value or raises :class:`TransportError`."""
        if self._closed:
            raise TransportError("the simulation is closed")
        try:
            self._conn.send(tuple(req))
            status, value, sim_s = self._conn.recv()
        except (EOFError, OSError) as e:
            self._closed = True
            raise TransportError(f"the {self.sim} simulation went away ({e}; see {self.log_file})") from None
        self.sim_seconds += sim_s
        if status != "ok":
            raise TransportError(f"{self.describe(req)}: {value}")
        return value

    @property
    def closed(self):
        """Whether :meth:`close` ran (or the simulation went away)."""
        return self._closed

    def close(self):
        """End the simulation and, if it ran cleanly, remove its run directory and log (the build stays cached)."""
        if self._closed:
            return
        try:
            self.call("close")
        except TransportError:
            pass
        self._closed = True
        self._conn.close()
        self._listener.close()
        self._thread.join(60)
        if self._error is None:
            shutil.rmtree(self.run_dir.parent, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


async def serve(p, handle):
    """The testbench side: connect to ``p["address"]`` (``p``: the ``tb_params``) and answer requests with
    ``await handle(op, *args)`` until the host sends ``close`` or goes away. An exception from ``handle`` is
    reported to the host (which raises it) and the server keeps serving."""
    conn = Client(tuple(p["address"]), authkey=bytes.fromhex(p["authkey"]))
    try:
        while True:
            try:
                req = conn.recv()
            except EOFError:            # the host went away: end the simulation
                return
            t0 = time.perf_counter()
            if req[0] == "close":
                conn.send(("ok", None, 0.0))
                return
            try:
                value = await handle(*req)
                conn.send(("ok", value, time.perf_counter() - t0))
            except Exception as e:
                conn.send(("err", f"{type(e).__name__}: {e}", time.perf_counter() - t0))
    finally:
        conn.close()
