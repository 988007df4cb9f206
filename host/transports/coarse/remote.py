"""The COARSE system top (:class:`~syncfabric.hdl.coarse.system.CoarseSystem`) on Verilator or Icarus, served
to synchronous host code in this process (:mod:`syncfabric.host.transports.remote`); the simulator side is
:mod:`syncfabric.tb.coarse.test_server`. This is the backend of :class:`syncfabric.host.coarse.rtl.CoarseRtl`.
"""

from ...coarse.rtl import CciBackend
from ..remote import RemoteSimulation, unique_tag

__all__ = ["RemoteCoarse"]


class RemoteCoarse(RemoteSimulation, CciBackend):
    """``params`` (keyword arguments of ``CoarseSystem``) in simulator ``sim``; every link at ``latency``
    cycles, ring links at ``ring_rate`` (num, den) flits per cycle, host links at one flit per cycle; each
    device's DRAM ``mem_bytes``; each emulated GPU keeps ``window`` CCI requests in flight; the DRAM model's AW, W
    and B channels queue ``ram_queue`` items (cocotbext-axi's default, 2, takes single-beat writes at about 0.73
    per cycle); every link stalls in a cycle with probability ``stall`` (random backpressure: the cycle counts
    then vary with ``seed``)."""

    def __init__(self, params, *, sim="verilator", latency=4, ring_rate=(1, 1), mem_bytes=1 << 16, window=32,
                 ram_queue=8, seed=1, stall=0.0, connect_timeout=3600, progress=False):
        from ....hdl.coarse.system import DEVICE_MODULE, system_verilog
        tbp = {"seed": seed, "fixed_latency": int(latency), "ring_rate": list(ring_rate), "mem_bytes": mem_bytes,
               "window": int(window), "ram_queue": int(ram_queue), "stall": float(stall)}
        n, g = params["n_devices"], params.get("n_groups", 1)
        super().__init__(system_verilog, dict(params), toplevel="coarse_system",
                         test_module="syncfabric.tb.coarse.test_server", testcase="serve", tb_params=tbp,
                         build_tag=unique_tag(f"coarse-{n}x{g}"), sim=sim, hier_blocks=(DEVICE_MODULE,),
                         connect_timeout=connect_timeout,
                         progress=progress and f"starting the {sim} model of {n} COARSE devices x {g} groups "
                                               f"(built once per configuration)")

    def describe(self, req):
        return f"{req[0]} on device {req[1]}" if req[0] in ("write", "read", "reg_write", "reg_read", "sum_write", "sum_read", "sum_transact",
                                                  "dram") \
            else str(req[0])
