"""The ACE system on Verilator or Icarus, driven by synchronous host code in this process.

:class:`RemoteSystem` starts the cocotb server testbench (:mod:`syncfabric.host.transports.ace.cocotb_server`) in a
background thread - the simulator runs as a child process, as every cocotb run here does - and waits for it to
connect back over a local socket. :attr:`RemoteSystem.transports` then holds one synchronous
:class:`RemoteTransport` per endpoint: each call is one request to the server, performed in simulated time.

This is the backend of :class:`syncfabric.host.system.System` with ``backend: verilator`` or ``icarus``.
The first use of a topology and engine configuration builds its Verilator model (minutes; cached by content
afterwards).
"""

from ...transport import Transport
from ..remote import RemoteSimulation, unique_tag

__all__ = ["RemoteSystem", "RemoteTransport"]


class RemoteSystem(RemoteSimulation):
    """All endpoints of ``topology`` (engines of ``cfg``, ``mem_bytes`` of memory each) in simulator ``sim``
    (``"verilator"`` or ``"icarus"``). ``connect_timeout``: seconds to wait for the simulator to build and
    connect; ``progress``: print what is happening while it builds."""

    def __init__(self, cfg, topology, *, latency=None, rate=None, mem_bytes=1 << 20, seed=1, sim="verilator",
                 connect_timeout=3600, progress=False):
        import dataclasses

        from ....hdl.common.axiram import RAM_ARRAY_MODULE
        from ....hdl.system.top import ENGINE_MODULE, MAX_LATENCY, link_params
        from ....sim.golden.topology import parse as parse_topology
        from . import ace_system_verilog

        lats = [ln[4] for ln in link_params(topology, latency, rate)]
        params = {"cfg": dataclasses.asdict(cfg), "topology": topology,
                  "max_latency": max([MAX_LATENCY] + lats) if max(lats, default=0) > MAX_LATENCY else None,
                  # each endpoint's memory is an HDL RAM in the system, reached through its back door
                  "npu_mem": {"size_bytes": 1 << max(0, mem_bytes - 1).bit_length()}}
        tbp = {"jobs": [], "seed": seed, "latency": latency, "rate": None if rate is None else str(rate),
               "mem_bytes": mem_bytes}
        super().__init__(ace_system_verilog, params, toplevel="ace_system",
                         test_module="syncfabric.host.transports.ace.cocotb_server", testcase="serve", tb_params=tbp,
                         build_tag=unique_tag(f"api-{topology.replace(':', '_')}"), sim=sim,
                         hier_blocks=(ENGINE_MODULE,), public=((RAM_ARRAY_MODULE, "mem"),),
                         connect_timeout=connect_timeout,
                         progress=progress and f"starting the {sim} model of {topology} (built once per "
                                               f"configuration)")
        self.n = parse_topology(topology).n_endpoints
        self.transports = [RemoteTransport(self, i) for i in range(self.n)]

    def describe(self, req):
        return f"{req[0]} on rank {req[1] if len(req) > 1 else 0}"

    def call(self, op, rank=0, *args):
        """One request to the server; returns its value or raises :class:`TransportError`."""
        return super().call(op, rank, *args)

    def idle(self, cycles):
        """Let ``cycles`` clock cycles pass with no host activity."""
        if cycles > 0:
            self.call("idle", 0, int(cycles))

    def set_npu_share(self, rank, share):
        """The share of endpoint ``rank``'s memory port its NPU's compute takes from now on (0..1)."""
        self.call("npu_share", rank, float(share))

    def set_link_stall(self, link, stalled):
        """Hold on-chip link ``link`` (its ``link<l>`` pins) stalled (no flit moves on it), or release it."""
        self.call("link_stall", int(link), bool(stalled))

    def set_link_faults(self, link, *probs):
        """Link ``link``'s random faults: its ``<kind>_prob`` inputs in ``LINK_FAULTS`` order (in 1/65536, see
        :func:`syncfabric.hdl.system.link.fault_threshold`)."""
        self.call("link_faults", int(link), *map(int, probs))

    @property
    def now(self):
        """Clock cycles simulated so far."""
        return int(self.call("cycles"))


class RemoteTransport(Transport):
    """The synchronous transport of endpoint ``rank`` of a :class:`RemoteSystem`."""

    def __init__(self, system, rank):
        self.system, self.rank = system, rank

    def read_reg(self, addr):
        return self.system.call("read_reg", self.rank, addr)

    def write_reg(self, addr, value):
        self.system.call("write_reg", self.rank, addr, value)

    def read_mem(self, addr, n):
        return bytes(self.system.call("read_mem", self.rank, addr, n))

    def write_mem(self, addr, data):
        self.system.call("write_mem", self.rank, addr, bytes(data))

    def wait_irq(self, timeout_cycles=None):
        return self.system.call("wait_irq", self.rank, timeout_cycles)

    def cycles(self):
        return self.system.now

    def close(self):
        self.system.close()

    def __repr__(self):
        return f"RemoteTransport({self.system.sim}, rank {self.rank})"
