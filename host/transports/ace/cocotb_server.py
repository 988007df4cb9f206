"""The ACE system as a server for the host API: the same system testbench (clock, reset, the NPU memories, the
links) with no jobs of its own. It connects back to the host process at
``tb_params()["address"]`` and performs its requests one at a time - register accesses and interrupt waits
through each endpoint's :class:`~syncfabric.host.transports.cocotb.CocotbTransport`, memory accesses on the memory
models, idle time - until the host says ``close``.

While it waits for the next request the simulator is blocked, so simulated time passes only while the host
waits on the engines (as with the Amaranth backend). The host side is
:class:`syncfabric.host.transports.ace.remote.RemoteSystem`; the protocol is pickled tuples over a
``multiprocessing.connection`` socket: ``(op, rank, *args)`` in, ``("ok", value, seconds)`` or ``("err", message,
seconds)`` out, ``seconds`` being the wall time the request spent in the simulator.
"""

import random
import time
from multiprocessing.connection import Client

import cocotb
from cocotb.triggers import ClockCycles, NextTimeStep

from ....hdl.system.link import LINK_FAULTS
from ..harness import tb_params
from .cocotb_system import SystemTB

#: Requests the server performs on an endpoint's transport.
TRANSPORT_OPS = ("read_reg", "write_reg", "read_mem", "write_mem", "wait_irq")


async def _set_npu_share(tb, rank, share):
    """The NPU's compute takes ``share`` of endpoint ``rank``'s memory port: every AXI channel of its
    ``AxiRam`` pauses in a cycle with that probability (seeded per endpoint and channel): the HDL RAM's stall
    inputs, or a cocotbext-axi RAM's pause generators."""
    if tb.hdl_mem:
        await NextTimeStep()        # a request may arrive in the read-only phase, where inputs cannot be set
        tb.set_stall(rank, share)
        return
    ram = tb.rams[rank]
    channels = (ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                ram.read_if.ar_channel, ram.read_if.r_channel)
    for k, ch in enumerate(channels):
        if share <= 0:
            ch.set_pause_generator(None)
            ch.pause = False            # the killed generator may have left the channel paused
        else:
            rng = random.Random(tb.seed * 7919 + rank * 16 + k)
            ch.set_pause_generator(iter(lambda: rng.random() < share, None))


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
            t0 = time.perf_counter()
            try:
                if op == "close":
                    conn.send(("ok", None, 0.0))
                    return
                if op == "idle":
                    await ClockCycles(dut.clk, max(1, int(req[2])))
                    value = None
                elif op == "npu_share":
                    await _set_npu_share(tb, req[1], req[2])
                    value = None
                elif op == "link_stall":         # hold (or release) the stall pin of on-chip link req[1]
                    await NextTimeStep()        # out of the read-only phase a request may arrive in
                    getattr(dut, f"link{int(req[1])}_stall").value = int(bool(req[2]))
                    value = None
                elif op == "link_faults":        # random flips / stalls of on-chip link req[1]
                    await NextTimeStep()
                    for kind, value in zip(LINK_FAULTS, req[2:]):
                        getattr(dut, f"link{int(req[1])}_{kind}_prob").value = int(value)
                    value = None
                elif op == "cycles":
                    value = await ports[0].cycles() - t0
                elif op in TRANSPORT_OPS:
                    value = await getattr(ports[req[1]], op)(*req[2:])
                else:
                    raise ValueError(f"unknown request {op!r}")
                conn.send(("ok", value, time.perf_counter() - t0))
            except Exception as e:      # reported to the host, which raises it; the server keeps serving
                conn.send(("err", f"{type(e).__name__}: {e}", time.perf_counter() - t0))
    finally:
        conn.close()
