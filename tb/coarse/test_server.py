"""The COARSE system top as a server for the host: the system testbench of :mod:`.test_system` (clock, reset,
an ``AxiRam`` per device's DRAM, an emulated GPU CCI port per device, link latencies and rates) with no runs of
its own. It connects back to the host process (:func:`syncfabric.host.transports.remote.serve`) and performs its
requests; the host side is :class:`syncfabric.host.transports.coarse.remote.RemoteCoarse`.

Requests (``(op, *args)``):

=========================================  ==================================================================
``("write", d, addr, data)``               GPU ``d`` writes ``data`` (whole beats) at device address ``addr``
                                           (``MEM_WR`` requests, ``window`` in flight); returns None
``("read", d, addr, n)``                   GPU ``d`` reads ``n`` bytes (whole beats); returns the bytes
``("reg_write", d, core, reg, value)``     a sync-core register write through CCI (``reg``: a register name of
                                           :func:`~syncfabric.hdl.coarse.layouts.core_register_map`)
``("reg_read", d, core, reg)``             a sync-core register read through CCI; returns the value
``("sum_write", d, addr, data)``           GPU ``d`` writes on its path to the summation service (pushes,
                                           control registers: whole beats at service address ``addr``)
``("sum_read", d, addr, n)``               GPU ``d`` reads ``n`` bytes on that path (pulls, registers)
``("sum_transact", d, [(opcode, addr,      GPU ``d`` sends these requests on that path, ``window`` in flight
data), ...])``                             (one stream, no wait between them); returns the response data
``("batch", [req, ...])``                  the requests above at once: each GPU runs its own in order, the
                                           GPUs concurrently; returns ``[value, ...]`` in request order
``("dram", d, addr, n)``                   device ``d``'s DRAM by back door (no simulated time)
``("cycles",)``                            clock cycles since the server started
``("links",)``                             flits sent so far per link (``{name: flits}``)
``("idle", n)``                            let ``n`` cycles pass
=========================================  ==================================================================
"""

import cocotb
from cocotb.triggers import ClockCycles, SimTimeoutError, with_timeout

from ...hdl.coarse.layouts import CciOpcode
from ...host.transports import remote
from ...host.transports.harness import tb_params
from .test_system import CLOCK_NS, SystemTB

#: Cycles a GPU's requests to the summation service may take (a synchronous pull waits for the other workers'
#: pushes; one that never comes would otherwise hang the simulation).
SUM_TIMEOUT_CYCLES = 200_000

#: Requests a GPU performs on its CCI port (the ones a ``batch`` may hold).
GPU_OPS = ("write", "read", "reg_write", "reg_read", "sum_write", "sum_read", "sum_transact")


async def _gpu_op(tb, op, d, *args):
    if not 0 <= d < tb.n:
        raise ValueError(f"no device {d} (the system has {tb.n})")
    gpu = tb.gpus[d]
    if op.startswith("sum_"):
        if not tb.summation:
            raise ValueError("the system has no summation service (sum_parts = 0)")
        gpu, op = tb.sum_gpus[d], op[4:]
    if op == "transact":
        try:
            return await with_timeout(gpu.transact([(CciOpcode(o), a, v) for o, a, v in args[0]]),
                                      SUM_TIMEOUT_CYCLES * CLOCK_NS, "ns")
        except SimTimeoutError:
            raise RuntimeError(f"GPU {d}: the summation service did not answer within {SUM_TIMEOUT_CYCLES} "
                               f"cycles") from None
    if op == "write":
        return await gpu.write(*args)
    if op == "read":
        return await gpu.read(*args)
    if op == "reg_write":
        return await gpu.reg_write(*args)
    return await gpu.reg_read(*args)


async def _batch(tb, reqs):
    per_gpu = {}
    for k, req in enumerate(reqs):
        if req[0] not in GPU_OPS:
            raise ValueError(f"a batch holds {', '.join(GPU_OPS)} requests, not {req[0]!r}")
        per_gpu.setdefault(req[1], []).append(k)
    out = [None] * len(reqs)

    async def one_gpu(ks):
        for k in ks:
            out[k] = await _gpu_op(tb, *reqs[k])

    tasks = [cocotb.start_soon(one_gpu(ks)) for ks in per_gpu.values()]
    for t in tasks:
        await t
    return out


@cocotb.test()
async def serve(dut):
    """Serve the host's requests until it closes the connection."""
    p = tb_params()
    tb = SystemTB(dut)
    for gpu in tb.gpus + tb.sum_gpus:
        gpu.window = int(p.get("window", gpu.window))
    if p.get("ram_queue"):          # cocotbext-axi's 2-item channel queues take ~0.73 single-beat writes per cycle
        for ram in tb.rams:
            for ch in (ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel):
                ch.queue_occupancy_limit = int(p["ram_queue"])
    await tb.start()
    t0 = tb.cycles()

    async def handle(op, *args):
        if op in GPU_OPS:
            return await _gpu_op(tb, op, *args)
        if op == "batch":
            return await _batch(tb, args[0])
        if op == "dram":
            d, addr, n = args
            return bytes(tb.rams[d].read(addr, n))
        if op == "cycles":
            return tb.cycles() - t0
        if op == "links":
            return tb._flits()
        if op == "idle":
            await ClockCycles(dut.clk, max(1, int(args[0])))
            return None
        raise ValueError(f"unknown request {op!r}")

    await remote.serve(p, handle)
