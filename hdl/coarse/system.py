"""System top of COARSE: ``n`` memory devices in a CCI ring, each with a CCI path to its GPU (the GPUs are
emulated by the testbench or the host) and its DRAM port.

Every path is a :class:`~syncfabric.hdl.coarse.cci.CciLink` whose latency, rate and stall are top-level
inputs, so one build serves every link profile (local vs remote bandwidth, slow ring links, random
backpressure). Link names: ``h{d}_req`` (GPU d -> device d), ``h{d}_rsp`` (device d -> GPU d), ``r{d}_cw``
(device d -> d+1, clockwise: even groups), ``r{d}_ccw`` (device d+1 -> d: odd groups). Top-level ports:
``d{d}_axi`` (DRAM), ``gpu{d}_req`` (In flits), ``gpu{d}_rsp`` (Out flits), and per link ``<link>_latency``,
``<link>_rate_num``, ``<link>_rate_den``, ``<link>_stall``, ``<link>_flits``.

With ``sum_parts`` > 0 the system also holds BytePS's summation service
(:class:`~syncfabric.hdl.coarse.summation.SummationService`, ``registers=True``) as a CCI endpoint of its own:
GPU ``d`` is its worker ``d``, over the links ``s{d}_req`` (GPU d -> service) and ``s{d}_rsp`` (back), ports
``gpu{d}_sreq`` (In flits) and ``gpu{d}_srsp`` (Out flits). Its mode is in its control registers.
"""

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..common.axi import AXI4Signature
from ..system.link import RATE_DEN_MAX
from .cci import CciLink
from .device import MemoryDevice
from .layouts import ADDR_BITS, cci_flit_layout
from .summation import SummationService

__all__ = ["CoarseSystem", "link_names", "system_verilog", "DEVICE_MODULE"]

#: Verilog module name of the separately converted memory device.
DEVICE_MODULE = "coarse_device"


def link_names(n_devices, summation=False):
    """Names of every link of a system of ``n_devices`` (with ``summation``: the summation service's too)."""
    out = []
    for d in range(n_devices):
        out += [f"h{d}_req", f"h{d}_rsp", f"r{d}_cw", f"r{d}_ccw"]
    if summation:
        for d in range(n_devices):
            out += [f"s{d}_req", f"s{d}_rsp"]
    return out


def _ports(component):
    ports = []
    for path, member, value in component.signature.flatten(component):
        ports.append(("i" if member.flow == In else "o", "__".join(str(p) for p in path), Value.cast(value)))
    return ports


class CoarseSystem(wiring.Component):
    """``n_devices`` :class:`MemoryDevice` (``n_groups`` sync cores each) joined in a bidirectional ring.

    ``inline=False`` instantiates the separately converted module :data:`DEVICE_MODULE` (Verilog simulators
    compile the device once; :func:`system_verilog` emits both), ``inline=True`` makes the devices
    submodules (Amaranth's simulator). ``credits`` (default ``2 x latency + 8``) is every link's receive buffer:
    a link set to a latency longer than about ``(credits - 8) / 2`` is limited by credits, not by its rate.
    ``cci_depth``: host requests each device's CCI target keeps outstanding. ``sum_parts`` (0: none) parts of
    ``sum_part_beats`` beats in the summation service (see the module docstring)."""

    def __init__(self, n_devices=4, n_groups=1, beat_bytes=16, entry_beats=16, max_ranks=None, latency=4,
                 credits=None, max_latency=64, inline=True, cci_depth=8, sum_parts=0, sum_part_beats=4):
        if n_devices < 2:
            raise ValueError("a COARSE ring needs at least 2 devices")
        if sum_parts < 0 or (sum_parts and (sum_part_beats < 1 or sum_part_beats & (sum_part_beats - 1))):
            raise ValueError(f"the summation service needs sum_parts >= 0 and a power-of-two sum_part_beats, not "
                             f"{sum_parts} parts of {sum_part_beats} beats")
        self.sum_parts, self.sum_part_beats = sum_parts, sum_part_beats
        self.n_devices, self.n_groups, self.beat_bytes, self.entry_beats = n_devices, n_groups, beat_bytes, \
            entry_beats
        self.max_ranks = max_ranks or n_devices
        # enough credits to cover a flit's round trip at the reset latency (flit + credit latency, FIFO cycles)
        credits = 2 * latency + 8 if credits is None else credits
        self.latency, self.credits, self.max_latency = latency, credits, max_latency
        self.inline = inline
        self.cci_depth = cci_depth
        flit = stream.Signature(cci_flit_layout(beat_bytes))
        members = {}
        for d in range(n_devices):
            members[f"d{d}_axi"] = Out(AXI4Signature(ADDR_BITS, 8 * beat_bytes, max(1, ceil_log2(n_groups + 1))))
            members[f"gpu{d}_req"] = In(flit)
            members[f"gpu{d}_rsp"] = Out(flit)
            if sum_parts:
                members[f"gpu{d}_sreq"] = In(flit)
                members[f"gpu{d}_srsp"] = Out(flit)
        for name in link_names(n_devices, bool(sum_parts)):
            members[f"{name}_latency"] = In(range(1, max_latency + 1), init=latency)
            members[f"{name}_rate_num"] = In(range(1, RATE_DEN_MAX + 1), init=1)
            members[f"{name}_rate_den"] = In(range(1, RATE_DEN_MAX + 1), init=1)
            members[f"{name}_stall"] = In(1)
            members[f"{name}_flits"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.n_devices
        args = (self.n_groups, self.beat_bytes, self.entry_beats, self.max_ranks, self.cci_depth)
        devs = []
        for d in range(n):
            if self.inline:
                dev = m.submodules[f"dev{d}"] = MemoryDevice(*args)
            else:
                dev = MemoryDevice.signature_of(self.beat_bytes, self.n_groups).create(path=(f"dev{d}",))
                m.submodules[f"dev{d}"] = Instance(
                    DEVICE_MODULE, ("i", "clk", ClockSignal("sync")), ("i", "rst", ResetSignal("sync")),
                    *_ports(dev))
            devs.append(dev)
        links = {}
        for name in link_names(n, bool(self.sum_parts)):
            link = links[name] = CciLink(self.beat_bytes, self.latency, credits=self.credits,
                                         max_latency=self.max_latency)
            m.submodules[f"link_{name}"] = link
            m.d.comb += [link.latency.eq(getattr(self, f"{name}_latency")),
                         link.rate_num.eq(getattr(self, f"{name}_rate_num")),
                         link.rate_den.eq(getattr(self, f"{name}_rate_den")),
                         link.stall.eq(getattr(self, f"{name}_stall")),
                         getattr(self, f"{name}_flits").eq(link.flits)]
        for d, dev in enumerate(devs):
            wiring.connect(m, wiring.flipped(getattr(self, f"d{d}_axi")), dev.axi)
            wiring.connect(m, wiring.flipped(getattr(self, f"gpu{d}_req")), links[f"h{d}_req"].tx)
            wiring.connect(m, links[f"h{d}_req"].rx, dev.i_host)
            wiring.connect(m, dev.o_host, links[f"h{d}_rsp"].tx)
            wiring.connect(m, links[f"h{d}_rsp"].rx, wiring.flipped(getattr(self, f"gpu{d}_rsp")))
            nxt = devs[(d + 1) % n]
            wiring.connect(m, dev.o_right, links[f"r{d}_cw"].tx)
            wiring.connect(m, links[f"r{d}_cw"].rx, nxt.i_left)
            wiring.connect(m, nxt.o_left, links[f"r{d}_ccw"].tx)
            wiring.connect(m, links[f"r{d}_ccw"].rx, dev.i_right)
        if self.sum_parts:
            svc = m.submodules.summation = SummationService(n, self.beat_bytes, self.sum_part_beats, self.sum_parts,
                                                            registers=True)
            for d in range(n):
                wiring.connect(m, wiring.flipped(getattr(self, f"gpu{d}_sreq")), links[f"s{d}_req"].tx)
                wiring.connect(m, links[f"s{d}_req"].rx, getattr(svc, f"w{d}_req"))
                wiring.connect(m, getattr(svc, f"w{d}_rsp"), links[f"s{d}_rsp"].tx)
                wiring.connect(m, links[f"s{d}_rsp"].rx, wiring.flipped(getattr(self, f"gpu{d}_srsp")))
        return m


def system_verilog(**params):
    """Verilog of ``CoarseSystem(**params, inline=False)`` (module ``coarse_system``) and of one memory device."""
    from amaranth.back import verilog
    system = CoarseSystem(**params, inline=False)
    top = verilog.convert(system, name="coarse_system", emit_src=False)
    dev = MemoryDevice(system.n_groups, system.beat_bytes, system.entry_beats, system.max_ranks, system.cci_depth)
    return top + "\n" + verilog.convert(dev, name=DEVICE_MODULE, emit_src=False)
