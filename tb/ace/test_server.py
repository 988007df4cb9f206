"""The ACE system as a server for the host API: the same system testbench (clock, reset, one cocotbext-axi
``AxiRam`` per endpoint, the links) with no jobs of its own. It connects back to the host process at
``tb_params()["address"]`` and performs its requests one at a time - register accesses and interrupt waits
through each endpoint's :class:`~syncfabric.tb.transport.CocotbTransport`, memory accesses on the memory
models, idle time - until the host says ``close``.

While it waits for the next request the simulator is blocked, so simulated time passes only while the host
waits on the engines (as with the Amaranth backend). The host side is
:class:`syncfabric.tb.ace.remote.RemoteSystem`; the protocol is pickled tuples over a
``multiprocessing.connection`` socket: ``(op, rank, *args)`` in, ``("ok", value)`` or ``("err", message)`` out.
"""

from multiprocessing.connection import Client

import cocotb
from cocotb.triggers import ClockCycles

from ..harness import tb_params
from .test_system import SystemTB

#: Requests the server performs on an endpoint's transport.
TRANSPORT_OPS = ("read_reg", "write_reg", "read_mem", "write_mem", "wait_irq")


@cocotb.test()
async def serve(dut):
    """Serve the host's requests until it closes the connection."""
    p = tb_params()
    tb = SystemTB(dut, p)
    await tb.start()
    ports = [drv.transport for drv in tb.drivers]
    t0 = await ports[0].cycles()
    conn = Client(tuple(p["address"]), authkey=bytes.fromhex(p["authkey"]))
    try:
        while True:
            try:
                req = conn.recv()
            except EOFError:            # the host went away: end the simulation
                return
            op = req[0]
            try:
                if op == "close":
                    conn.send(("ok", None))
                    return
                if op == "idle":
                    await ClockCycles(dut.clk, max(1, int(req[2])))
                    value = None
                elif op == "cycles":
                    value = await ports[0].cycles() - t0
                elif op in TRANSPORT_OPS:
                    value = await getattr(ports[req[1]], op)(*req[2:])
                else:
                    raise ValueError(f"unknown request {op!r}")
                conn.send(("ok", value))
            except Exception as e:      # reported to the host, which raises it; the server keeps serving
                conn.send(("err", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()
