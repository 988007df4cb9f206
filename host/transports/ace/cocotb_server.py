"""The ACE system as a server for the host API: the same system testbench (clock, reset, the NPU memories, the
links) with no jobs of its own. It connects back to the host process at
``tb_params()["address"]`` and performs its requests one at a time - register accesses and interrupt waits
through each endpoint's :class:`~syncfabric.host.transports.cocotb.CocotbTransport`, memory accesses on the memory
models, idle time - until the host says ``close``.

While it waits for the next request the simulator is blocked, so simulated time passes only while the host
waits on the engines (as with the Amaranth backend). The host side is
:class:`syncfabric.host.transports.ace.remote.RemoteSystem`; the protocol is
:mod:`syncfabric.host.transports.remote`'s with requests
``(op, rank, *args)``.
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, NextTimeStep

from ....hdl.system.link import LINK_FAULTS
from .. import remote
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

    async def handle(op, rank=0, *args):
        if op == "idle":
            await ClockCycles(dut.clk, max(1, int(args[0])))
        elif op == "npu_share":
            await _set_npu_share(tb, rank, args[0])
        elif op == "link_stall":         # hold (or release) the stall pin of on-chip link ``rank``
            await NextTimeStep()        # out of the read-only phase a request may arrive in
            getattr(dut, f"link{int(rank)}_stall").value = int(bool(args[0]))
        elif op == "link_faults":        # random flips / stalls of on-chip link ``rank``
            await NextTimeStep()
            for kind, value in zip(LINK_FAULTS, args):
                getattr(dut, f"link{int(rank)}_{kind}_prob").value = int(value)
        elif op == "cycles":
            return await ports[0].cycles() - t0
        elif op in TRANSPORT_OPS:
            return await getattr(ports[rank], op)(*args)
        else:
            raise ValueError(f"unknown request {op!r}")
        return None

    await remote.serve(p, handle)
