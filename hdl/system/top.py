"""System top: N ACE endpoints wired by link models in the topology's pattern.

The engines are instances of one separately generated Verilog module (``ace_engine``), so a simulator compiles
the engine once however many endpoints the system has; :func:`system_verilog` returns both modules in one
text. Each endpoint's CSR bus, interrupt and AXI master are top-level ports named ``ep<i>_csr__*``,
``ep<i>_irq`` and ``ep<i>_axi__*`` (the testbench attaches one AXI RAM per endpoint: the NPU's memory).
With ``npu_mem`` (the arguments of an :class:`~syncfabric.hdl.common.axiram.AxiRam`, ``size_bytes`` among
them) the system holds that RAM per endpoint instead (instance ``mem<i>`` of the separately converted module
:data:`NPU_MEM_MODULE`, its words in the array ``array.mem``: a :class:`~syncfabric.hdl.common.axiram.RamArray`,
so that conversion does not grow with the memory) and has no ``ep<i>_axi`` ports: a testbench reaches the memories
through their back door (:mod:`syncfabric.host.transports.backdoor`), with no Python on the clock edges. Every
endpoint's RAM is the same module; its ``lfsr_seed`` input, a constant per endpoint, makes their stalls differ, and the
top-level inputs ``mem<i>_stall_ready``/``mem<i>_stall_valid`` (0..256, in 1/256) set each RAM's stall
probabilities, so one build serves any stall setting.
Every directed link of the topology is a :class:`~syncfabric.hdl.system.link.Link` with its latency, rate and
credit loop. Latency and rate are top-level inputs (``link<l>_latency``, ``link<l>_rate_num``,
``link<l>_rate_den``, reset values from :func:`link_params`), so the Verilog of a system depends on the engine
configuration and the topology only and one simulator build serves every latency (up to ``max_latency``) and
rate; :func:`link_port_values` lists the values a testbench drives. ``link<l>_inject`` flips a bit of the flit
crossing link ``l`` (fault injection) and ``link<l>_stall`` holds that link's ready low for a cycle (random
backpressure); ``link<l>_flip_prob`` and ``link<l>_stall_prob`` do the same at random inside the model, with
a probability per flit / per cycle (:func:`~syncfabric.hdl.system.link.fault_threshold`), and
``link<l>_drop_prob``/``link<l>_dup_prob`` lose or duplicate flits (per flit), each link drawing from its own
LFSRs (:data:`~syncfabric.hdl.system.link.LINK_FAULTS`). :attr:`AceSystem.links` lists the links in port order (:func:`system_links`).

A switch (``switch:N``) is a :class:`~syncfabric.hdl.system.switch.Switch` in the top: link ``i`` (``i < N``)
carries endpoint ``i``'s port 0 up to switch input ``i``, link ``N + j`` switch output ``j`` down to endpoint
``j``'s port 0; ``switch_overflow`` is the switch's sticky drop flag. The engines need ``rx_sources`` >= N
(per-source landing channels and credits: :func:`syncfabric.host.run.engine_config_for`).

A system may hold only some ranks of a point-to-point topology (``ranks``: one board of several). Links between
two of its ranks are on-chip as above; a link that crosses to a rank outside is a set of top-level ports of the
engine port it leaves or enters (:attr:`AceSystem.external`): ``ep<r>_tx<p>`` (the flits out) with
``ep<r>_tx<p>_credit`` (the credits coming back), or ``ep<r>_rx<p>`` (the flits in) with ``ep<r>_rx<p>_credit``
(the credits going back). A board top carries them to its neighbour (the pin-level link port,
:mod:`syncfabric.hdl.system.pinlink`).
"""

from fractions import Fraction

from amaranth.hdl import (Cat, ClockDomain, ClockSignal, Elaboratable, Instance, Module, ResetInserter, ResetSignal,
                          Signal, Value)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.topology import parse as parse_topology
from ..ace.engine import AceEngine
from ..common.axiram import RAM_ARRAY_VERILOG, AxiRam
from ..common.layouts import credit_layout, flit_layout
from ..common.refuse import Checked
from .cut import LinkReceiver, LinkSender
from .link import LINK_FAULTS, RATE_DEN_MAX, DelayLine, Link, fault_threshold
from .switch import Switch, queue_bound, round_trip_queue

__all__ = ["AceSystem", "ENGINE_MODULE", "LINK_MODULE", "NPU_MEM_MODULE", "MAX_LATENCY", "system_verilog",
           "engine_verilog", "link_verilog", "npu_mem_ram", "npu_mem_verilog", "link_params",
           "system_links", "split_links", "SWITCH", "link_port_values", "ExternalPort"]

#: Verilog module name of the engine in system builds.
ENGINE_MODULE = "ace_engine"
#: Verilog module name of the link model in system builds (one module for all links of a system).
LINK_MODULE = "ace_link"

#: Verilog module name of the NPU memory in system builds with ``npu_mem`` (one module for all endpoints).
NPU_MEM_MODULE = "ace_npu_mem"


def npu_mem_ram(cfg, npu_mem, storage="memory"):
    """The :class:`AxiRam` an endpoint of configuration ``cfg`` gets for ``npu_mem`` (a dict of its arguments,
    ``size_bytes`` among them); ``storage``: ``"verilog"`` for the separately converted module (its words in
    a :class:`~syncfabric.hdl.common.axiram.RamArray`), ``"memory"`` inline in an Amaranth simulation."""
    options = dict(npu_mem)
    if "error_ranges" in options:
        options["error_ranges"] = [tuple(r) for r in options["error_ranges"]]
    return AxiRam(options.pop("size_bytes"), data_width=8 * cfg.beat_bytes, addr_width=cfg.addr_width,
                  seed_port=True, stall_port=True, storage=storage, **options)


#: Default of the largest link latency a system build accepts (cycles; ACE Table V's inter-package links
#: take 500).
MAX_LATENCY = 512


def link_params(topology, latency=None, rate=None):
    """``[(src, src_port, dst, dst_port, latency, (num, den))]`` for every directed link of ``topology``;
    ``latency``/``rate`` override the topology's attributes for every link when given."""
    topo = parse_topology(topology)
    out = []
    for ln in topo.links():
        lat = ln.attr.latency if latency is None else int(latency)
        r = Fraction(ln.attr.rate if rate is None else rate).limit_denominator(RATE_DEN_MAX)
        if not 0 < r <= 1:
            raise ValueError(f"link rate must be in (0, 1], got {float(r)}")
        if lat < 1:
            raise ValueError(f"link latency must be at least 1 cycle, got {lat}")
        out.append((ln.src_rank, ln.src_port, ln.dst_rank, ln.dst_port, lat, (r.numerator, r.denominator)))
    return out


#: The switch's place in :func:`system_links` rows (instead of a rank).
SWITCH = -1


def system_links(topology, latency=None, rate=None):
    """The physical links of the system top of ``topology``, in its ``link<l>`` port order, as
    :func:`link_params` rows. Point-to-point topologies: :func:`link_params`. A switch of N endpoints: the N
    up-links ``(i, 0, SWITCH, i, ...)`` then the N down-links ``(SWITCH, j, j, 0, ...)``, each with the
    switch's link attributes (``latency``/``rate`` override them)."""
    topo = parse_topology(topology)
    if not topo.routed:
        return link_params(topo, latency, rate)
    row = link_params(topo, latency, rate)[0]
    lat, r = row[4], row[5]
    n = topo.n_endpoints
    return [(i, 0, SWITCH, i, lat, r) for i in range(n)] + [(SWITCH, j, j, 0, lat, r) for j in range(n)]


def link_port_values(links, **faults):
    """``{port name: value}`` of the latency, rate and random-fault inputs of an :class:`AceSystem` for
    ``links`` (as :func:`link_params` returns them): what a testbench drives before it releases reset.
    ``faults``: per kind of :data:`~syncfabric.hdl.system.link.LINK_FAULTS` (``flip``, ``stall``, ``drop``,
    ``dup``) every link's probability (per flit; per cycle for ``stall``), or a list of them, one per link."""
    n = len(links)
    unknown = set(faults) - set(LINK_FAULTS)
    if unknown:
        raise ValueError(f"unknown link faults {sorted(unknown)}: expected {', '.join(LINK_FAULTS)}")
    probs = {}
    for kind in LINK_FAULTS:
        v = faults.get(kind) or 0.0
        probs[kind] = list(v) if isinstance(v, (list, tuple)) else [v] * n
        if len(probs[kind]) != n:
            raise ValueError(f"per-link fault probabilities need one value for each of the {n} links")
    out = {}
    for li, (_, _, _, _, lat, (num, den)) in enumerate(links):
        out.update({f"link{li}_latency": lat, f"link{li}_rate_num": num, f"link{li}_rate_den": den})
        out.update({f"link{li}_{kind}_prob": fault_threshold(float(probs[kind][li])) for kind in LINK_FAULTS})
    return out


def split_links(topology, ranks, latency=None, rate=None):
    """The links of a system holding ``ranks`` of ``topology``: ``(on_chip, external, external_links)``, the
    :func:`system_links` rows whose two ends are here (all of a switch's), the :class:`ExternalPort` of each
    link with one end here, and that link's row (both in :func:`system_links` order)."""
    topo = parse_topology(topology)
    local = set(ranks)
    on_chip, external, external_links = [], [], []
    for row in system_links(topo, latency, rate):
        s, sp, d, dp = row[:4]
        if topo.routed or (s in local and d in local):
            on_chip.append(row)
        elif (s in local) != (d in local):
            external.append(ExternalPort(s, sp, "tx", d) if s in local else ExternalPort(d, dp, "rx", s))
            external_links.append(row)
    return on_chip, external, external_links


class ExternalPort(tuple):
    """One engine port side that leaves a partial system: ``(rank, port, direction, peer)``, ``direction``
    ``"tx"`` (flits out to ``peer``) or ``"rx"`` (flits in from ``peer``); :attr:`name` is the port's prefix
    (``ep<rank>_tx<port>``)."""

    __slots__ = ()

    def __new__(cls, rank, port, direction, peer):
        return super().__new__(cls, (rank, port, direction, peer))

    rank = property(lambda self: self[0])
    port = property(lambda self: self[1])
    direction = property(lambda self: self[2])
    peer = property(lambda self: self[3])

    @property
    def name(self):
        return f"ep{self.rank}_{self.direction}{self.port}"


def _engine_ports(engine):
    """(direction, verilog name, value) of every port of ``engine``'s signature (an engine or a link)."""
    ports = []
    for path, member, value in engine.signature.flatten(engine):
        name = "__".join(str(p) for p in path)
        ports.append(("i" if member.flow == In else "o", name, Value.cast(value)))
    return ports


class AceSystem(Checked, wiring.Component):
    """``topology`` (a spec such as ``"ring:8"`` or a Topology) of engines configured by ``cfg``.

    ``latency``/``rate`` give the reset values of every link's latency and rate inputs (default: the
    topology's); ``max_latency`` (default :data:`MAX_LATENCY`, or the largest latency if that is more) sizes
    the links' delay lines. ``inline=False`` (for Verilog simulators) instantiates the separately converted
    module :data:`ENGINE_MODULE`; ``inline=True`` makes the engines submodules, for Amaranth's simulator.

    ``ranks`` (default all): the ranks this system holds, of a point-to-point topology; links to the others
    are the ports in :attr:`external`, and :attr:`links` lists the on-chip links only.

    ``cut=True`` (a partition of a simulation, :mod:`syncfabric.hdl.system.cut`): each link that leaves the
    system is the local half of a cut link instead of a set of ports, submodule ``cut<k>`` for
    ``external[k]`` (a :class:`~syncfabric.hdl.system.cut.LinkSender` for a ``tx`` port, a
    :class:`~syncfabric.hdl.system.cut.LinkReceiver` for ``rx``), with the inputs ``cut<k>_latency`` (both
    halves: the link's latency, also its credit latency), ``cut<k>_rate_num``, ``cut<k>_rate_den``,
    ``cut<k>_stall`` and ``cut<k>_inject`` (senders), and the outputs ``cut<k>_sent`` (the half's
    :attr:`~syncfabric.hdl.system.cut.LinkSender.sent`) and ``cut_now`` (the rings' row of this cycle, the
    same in every half). Every partition of a topology sizes its rings alike
    (``max_latency`` covers all of the topology's links), so a ring row is the same cycle on both sides.

    ``npu_mem`` (default None: ``ep<i>_axi`` ports): a dict of :class:`AxiRam` arguments; every endpoint gets
    such a RAM on its AXI port (module docstring).

    On a switch, each virtual output queue is what the engines' credits bound it to
    (:func:`~.switch.queue_bound`) or a round trip of the links (:func:`~.switch.round_trip_queue` of
    ``max_latency``), whichever is smaller; in the second case the switch holds an up-link's transmitter while
    one of its input's queues is nearly full, the hold
    reaching the transmitter a link latency later (a :class:`~.link.DelayLine` per up-link).
    ``switch_queue`` sets the queues' depth instead (with the round trip's margin; tests use it to make the
    hold work). ``switch_hold_cycles`` counts the cycles in which the switch holds any link."""

    @classmethod
    def check(cls, cfg, topology, latency=None, rate=None, inline=False, max_latency=None, ranks=None,
              cut=False, npu_mem=None, switch_queue=None):
        topology = parse_topology(topology)
        n = topology.n_endpoints
        got = tuple(range(n)) if ranks is None else tuple(ranks)
        if not got or len(set(got)) != len(got) or not all(isinstance(r, int) and 0 <= r < n for r in got):
            raise ValueError(f"ranks must be distinct ranks of {topology.spec} (0..{n - 1}), got {ranks!r}")
        if topology.routed and len(got) != n:
            raise ValueError(f"a system holds all ranks of a switch ({topology.spec}), not {got}")
        if topology.routed and cfg.rx_sources < topology.n_endpoints:
            raise ValueError(f"{topology.spec} needs engines with rx_sources >= {topology.n_endpoints} "
                             f"(per-source landing channels), the configuration has {cfg.rx_sources}")
        if topology.n_ports > cfg.n_ports:
            raise ValueError(f"{topology.spec} needs {topology.n_ports} link ports per engine, the "
                             f"engine configuration has {cfg.n_ports}")
        system_links(topology, latency, rate)           # refuses bad latencies and rates
        split_links(topology, got, latency, rate)
        if switch_queue is not None:
            if not topology.routed:
                raise ValueError(f"switch_queue applies to a switch, not {topology.spec}")
            lats = [ln[4] for ln in system_links(topology, latency, rate)]
            margin = round_trip_queue(max([MAX_LATENCY if max_latency is None else max_latency] + lats))[1]
            if switch_queue <= margin:
                raise ValueError(f"switch_queue must be more than the links' round trip ({margin} flits), "
                                 f"not {switch_queue}")

    def __init__(self, cfg, topology, latency=None, rate=None, inline=False, max_latency=None, ranks=None,
                 cut=False, npu_mem=None, switch_queue=None):
        self.cfg = cfg
        self.switch_queue = switch_queue
        self.inline = inline
        self.npu_mem = None if npu_mem is None else dict(npu_mem)
        self.topology = parse_topology(topology)
        n = self.topology.n_endpoints
        self.ranks = tuple(range(n)) if ranks is None else tuple(ranks)
        self.cut = bool(cut)
        rows = system_links(self.topology, latency, rate)
        #: :attr:`links`: the on-chip links (:func:`system_links` rows whose two ends are here), in ``link<l>``
        #: port order; :attr:`external`: the engine ports whose link leaves the system (:class:`ExternalPort`),
        #: in :func:`system_links` order; :attr:`external_links`: the row of each of :attr:`external`.
        self.links, self.external, self.external_links = split_links(self.topology, self.ranks, latency, rate)
        self.max_latency = max([MAX_LATENCY if max_latency is None else max_latency]
                               + [ln[4] for ln in (rows if cut else self.links)])
        #: With ``cut``: the local half of each external link (``cut<k>``), in :attr:`external` order.
        self.cut_halves = [(LinkSender if x.direction == "tx" else LinkReceiver)(cfg.beat_bytes, self.max_latency)
                           for x in self.external] if cut else []
        members = {}
        for i in self.ranks:
            members[f"ep{i}_csr"] = Out(AceEngine.csr_signature(cfg))
            members[f"ep{i}_irq"] = Out(1)
            if self.npu_mem is None:
                members[f"ep{i}_axi"] = Out(AceEngine.axi_signature(cfg))
            else:   # the RAM's stall thresholds (AxiRam.stall_ready, stall_valid)
                members[f"mem{i}_stall_ready"] = In(9)
                members[f"mem{i}_stall_valid"] = In(9)
        flit = stream.Signature(flit_layout(cfg.beat_bytes))
        for k, (x, row) in enumerate(zip(self.external, self.external_links)):
            if cut:
                lat, (num, den) = row[4], row[5]
                members[f"cut{k}_latency"] = In(range(1, self.max_latency + 1), init=lat)
                members[f"cut{k}_sent"] = Out(self.cut_halves[k].depth)
                if x.direction == "tx":
                    members[f"cut{k}_rate_num"] = In(range(1, RATE_DEN_MAX + 1), init=num)
                    members[f"cut{k}_rate_den"] = In(range(1, RATE_DEN_MAX + 1), init=den)
                    members[f"cut{k}_stall"] = In(1)
                    members[f"cut{k}_inject"] = In(1)
                continue
            members[x.name] = Out(flit) if x.direction == "tx" else In(flit)
            members[f"{x.name}_credit"] = In(credit_layout()) if x.direction == "tx" else Out(credit_layout())
        for li, (_, _, _, _, lat, (num, den)) in enumerate(self.links):
            members[f"link{li}_inject"] = In(1)
            members[f"link{li}_stall"] = In(1)
            for kind in LINK_FAULTS:
                members[f"link{li}_{kind}_prob"] = In(16)
            members[f"link{li}_latency"] = In(range(1, self.max_latency + 1), init=lat)
            members[f"link{li}_rate_num"] = In(range(1, RATE_DEN_MAX + 1), init=num)
            members[f"link{li}_rate_den"] = In(range(1, RATE_DEN_MAX + 1), init=den)
        if self.topology.routed:
            members["switch_overflow"] = Out(1)
            members["switch_hold_cycles"] = Out(32)
        if self.cut_halves:
            members["cut_now"] = Out(range(self.cut_halves[0].depth))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n = self.topology.n_endpoints
        engines = {}
        for i in self.ranks:
            # inline: the engine itself; otherwise an interface with its ports for the Instance below
            eng = AceEngine(cfg) if self.inline else AceEngine.signature_of(cfg).create(path=(f"ep{i}",))
            engines[i] = eng
            wiring.connect(m, wiring.flipped(getattr(self, f"ep{i}_csr")), eng.csr)
            if self.npu_mem is None:
                wiring.connect(m, eng.axi, wiring.flipped(getattr(self, f"ep{i}_axi")))
            else:
                self._npu_mem(m, i, eng)
            m.d.comb += getattr(self, f"ep{i}_irq").eq(eng.irq)
            if self.inline:
                m.submodules[f"ep{i}"] = eng
            else:
                m.submodules[f"ep{i}"] = Instance(
                    ENGINE_MODULE, ("i", "clk", ClockSignal("sync")), ("i", "rst", ResetSignal("sync")),
                    *_engine_ports(eng))
        for k, x in enumerate(self.external):
            if self.cut:
                _cut_half(m, self, k, x, engines[x.rank])
                continue
            eng, ext = engines[x.rank], getattr(self, x.name)
            if x.direction == "tx":
                wiring.connect(m, getattr(eng, f"tx{x.port}"), wiring.flipped(ext))
                m.d.comb += getattr(eng, f"tx{x.port}_credit").eq(getattr(self, f"{x.name}_credit"))
            else:
                wiring.connect(m, wiring.flipped(ext), getattr(eng, f"rx{x.port}"))
                m.d.comb += getattr(self, f"{x.name}_credit").eq(getattr(eng, f"rx{x.port}_credit"))
        switch = None
        if self.topology.routed:
            switch = Switch(cfg.beat_bytes, n, cfg.n_fsms, cfg.landing_beats, cfg.landing_headers,
                            *self._switch_queue())
            # an abort holds the engines in reset; the switch between them drops what it holds with them
            aborting = Signal()
            m.d.sync += aborting.eq(Cat(engines[i].aborting for i in self.ranks).any())
            m.submodules.switch = ResetInserter({"sync": aborting})(switch)
            m.d.comb += [self.switch_overflow.eq(switch.overflow), self.switch_hold_cycles.eq(switch.hold_cycles)]
        for li, (s, sp, d, dp, lat, rate) in enumerate(self.links):
            held = 0
            if self.inline:
                link = Link(cfg.beat_bytes, lat, rate=rate, max_latency=self.max_latency)
                m.submodules[f"link{li}"] = link
            else:
                # every link is an instance of one separately converted module (LINK_MODULE): the delay
                # lines' memories are emitted once, not once per link
                link = Link.signature_of(cfg.beat_bytes, self.max_latency).create(path=(f"link{li}",))
                m.submodules[f"link{li}"] = Instance(
                    LINK_MODULE, ("i", "clk", ClockSignal("sync")), ("i", "rst", ResetSignal("sync")),
                    *_engine_ports(link))
            if switch is None:
                src, dst = engines[s], engines[d]
                wiring.connect(m, link.tx, getattr(src, f"tx{sp}"))
                wiring.connect(m, getattr(dst, f"rx{dp}"), link.rx)
                m.d.comb += [
                    link.credit_in.eq(getattr(dst, f"rx{dp}_credit")),
                    getattr(src, f"tx{sp}_credit").eq(link.credit_out),
                ]
            elif d == SWITCH:       # up-link: endpoint s -> switch input dp; credits come from the switch
                wiring.connect(m, link.tx, getattr(engines[s], f"tx{sp}"))
                m.d.comb += [
                    getattr(switch, f"inp{dp}").valid.eq(link.rx.valid),
                    getattr(switch, f"inp{dp}").payload.eq(link.rx.payload),
                    link.rx.ready.eq(getattr(switch, f"inp{dp}").ready),
                    getattr(engines[s], f"tx{sp}_credit").eq(getattr(switch, f"credit_out{s}")),
                ]
                if switch.hold_margin is not None:
                    # the switch's hold reaches the transmitter a link latency later
                    m.submodules[f"hold{li}"] = hold = DelayLine(1, 1, self.max_latency)
                    m.d.comb += [hold.i.eq(getattr(switch, f"hold{dp}")),
                                 hold.latency.eq(getattr(self, f"link{li}_latency"))]
                    held = hold.o
            else:                   # down-link: switch output sp -> endpoint d; its credits back to the switch
                wiring.connect(m, link.tx, getattr(switch, f"out{sp}"))
                wiring.connect(m, getattr(engines[d], f"rx{dp}"), link.rx)
                m.d.comb += [
                    link.credit_in.eq(getattr(engines[d], f"rx{dp}_credit")),
                    getattr(switch, f"credit_in{sp}").eq(link.credit_out),
                ]
            m.d.comb += [
                link.inject.eq(getattr(self, f"link{li}_inject")),
                link.stall.eq(getattr(self, f"link{li}_stall") | held),
                *[getattr(link, f"{kind}_prob").eq(getattr(self, f"link{li}_{kind}_prob")) for kind in LINK_FAULTS],
                link.salt.eq(0x9E37 * (li + 1) & 0xFFFF),
                link.latency.eq(getattr(self, f"link{li}_latency")),
                link.credit_latency.eq(getattr(self, f"link{li}_latency")),
                link.rate_num.eq(getattr(self, f"link{li}_rate_num")),
                link.rate_den.eq(getattr(self, f"link{li}_rate_den")),
            ]
        return m

    def _switch_queue(self):
        """``(queue_depth, hold_margin)`` of the switch (class docstring): ``(None, None)`` for queues of
        :func:`~.switch.queue_bound`."""
        cfg = self.cfg
        bound = queue_bound(cfg.n_fsms, cfg.landing_beats, cfg.landing_headers)
        depth, margin = round_trip_queue(self.max_latency)
        if self.switch_queue is not None:
            return self.switch_queue, margin
        return (None, None) if bound <= depth else (depth, margin)

    def _npu_mem(self, m, rank, eng):
        """Endpoint ``rank``'s RAM on its engine's AXI port (its host port idle)."""
        size = self.npu_mem["size_bytes"]
        if self.inline:
            ram = npu_mem_ram(self.cfg, self.npu_mem)
            m.submodules[f"mem{rank}"] = ram
        else:
            sig = AxiRam.signature_of(size, data_width=8 * self.cfg.beat_bytes, addr_width=self.cfg.addr_width,
                                      seed_port=True, stall_port=True)
            ram = sig.create(path=(f"mem{rank}",))
            m.submodules[f"mem{rank}"] = Instance(
                NPU_MEM_MODULE, ("i", "clk", ClockSignal("sync")), ("i", "rst", ResetSignal("sync")),
                *_engine_ports(ram))
        wiring.connect(m, eng.axi, ram.axi)
        # each endpoint's stall and jitter LFSRs run their own sequence
        m.d.comb += [ram.host.we.eq(0), ram.host.re.eq(0), ram.lfsr_seed.eq((0x9E37 * (rank + 1)) & 0xFFFF),
                     ram.stall_ready.eq(getattr(self, f"mem{rank}_stall_ready")),
                     ram.stall_valid.eq(getattr(self, f"mem{rank}_stall_valid"))]


def npu_mem_verilog(cfg, npu_mem):
    """Verilog text of the NPU memory of ``npu_mem`` as module :data:`NPU_MEM_MODULE`, followed by its
    array's module (:data:`~syncfabric.hdl.common.axiram.RAM_ARRAY_VERILOG`: the words, zeroed by one loop;
    the text's size and conversion time do not depend on the memory's size)."""
    from amaranth.back import verilog
    return (verilog.convert(npu_mem_ram(cfg, npu_mem, storage="verilog"), name=NPU_MEM_MODULE, emit_src=False)
            + "\n" + RAM_ARRAY_VERILOG)


def _cut_half(m, system, k, x, eng):
    """The local half of cut link ``k`` (external port ``x`` of engine ``eng``) as submodule ``cut<k>``."""
    def top(name):
        return getattr(system, f"cut{k}_{name}")

    half = system.cut_halves[k]
    if x.direction == "tx":
        wiring.connect(m, half.tx, getattr(eng, f"tx{x.port}"))
        m.d.comb += [getattr(eng, f"tx{x.port}_credit").eq(half.credit_out),
                     half.credit_latency.eq(top("latency")), half.rate_num.eq(top("rate_num")),
                     half.rate_den.eq(top("rate_den")), half.stall.eq(top("stall")), half.inject.eq(top("inject"))]
    else:
        wiring.connect(m, getattr(eng, f"rx{x.port}"), half.rx)
        m.d.comb += [half.credit_in.eq(getattr(eng, f"rx{x.port}_credit")), half.latency.eq(top("latency"))]
    m.d.comb += top("sent").eq(half.sent)
    if k == 0:
        m.d.comb += system.cut_now.eq(half.now)
    m.submodules[f"cut{k}"] = half


class ResetStage(Elaboratable):
    """``design`` (a component using the ``sync`` domain) as the top of a separately converted module whose
    ``rst`` input is registered once before it reaches the design: the reset net that fans out to every
    flip-flop starts at a flop (a reset pipeline stage, a timing path of its own), and no logic of the module
    depends combinationally on the ``rst`` pin. The latter is what a simulator cares about: Verilator
    re-evaluates every piece of logic fed by a module input each time it evaluates the module's inputs (several
    times per clock edge for a hierarchical block), and a synchronous reset feeds the next-state logic of every
    register. The module leaves reset one cycle after ``rst`` falls.

    Convert with :meth:`verilog`; the ports are ``clk``, ``rst`` and those of ``design``'s signature."""

    def __init__(self, design):
        self.design = design
        self.domain = ClockDomain("sync")
        self.rst = Signal(name="rst_pin")

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.domain
        # reset-less (it drives the domain's reset) and high from power-up: the design starts in reset
        rst_q = Signal(init=1, reset_less=True)
        m.d.sync += rst_q.eq(self.rst)
        m.d.comb += self.domain.rst.eq(rst_q)
        m.submodules.design = self.design
        return m

    def verilog(self, name):
        """Verilog text of the module ``name``."""
        from amaranth.back import verilog
        ports = {"clk": (self.domain.clk, None), "rst": (self.rst, None)}
        for path, _, value in self.design.signature.flatten(self.design):
            ports["__".join(map(str, path))] = (Value.cast(value), None)
        return verilog.convert(self, name=name, emit_src=False, ports=ports)


def engine_verilog(cfg):
    """Verilog text of one engine as module :data:`ENGINE_MODULE`, its reset registered once inside
    (:class:`ResetStage`)."""
    return ResetStage(AceEngine(cfg)).verilog(ENGINE_MODULE)


def link_verilog(beat_bytes, max_latency):
    """Verilog text of the link model as module :data:`LINK_MODULE` (its latency and rate are inputs)."""
    from amaranth.back import verilog
    return verilog.convert(Link(beat_bytes, 1, max_latency=max_latency), name=LINK_MODULE, emit_src=False)


def system_verilog(cfg, topology, engine_text=None, max_latency=None, npu_mem=None):
    """Verilog of the system top (module ``ace_system``) followed by the link and engine modules (and the NPU
    memory's, with ``npu_mem``). Link latencies and rates are its inputs (:func:`link_port_values`)."""
    from amaranth.back import verilog
    system = AceSystem(cfg, topology, max_latency=max_latency, npu_mem=npu_mem)
    top = verilog.convert(system, name="ace_system", emit_src=False)
    return (top + "\n" + link_verilog(cfg.beat_bytes, system.max_latency) + "\n"
            + (engine_text if engine_text is not None else engine_verilog(cfg))
            + ("" if npu_mem is None else "\n" + npu_mem_verilog(cfg, npu_mem)))
