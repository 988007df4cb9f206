"""A COARSE memory device: one DRAM port (AXI4), one CCI port to its GPU, two ring ports (left and right
neighbour devices) and ``n_groups`` sync cores (core ``g`` belongs to group ``g``).

Even groups send their ring traffic to the right neighbour and receive from the left one; odd groups the
reverse, so two groups keep both directions of every ring link busy. Flits arriving on a ring port are routed
to a core by the core index in their address; cores sending on the same port share it flit by flit
(round-robin). The cores, the CCI target and nothing else share the DRAM port through :class:`AxiArbiter`.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.utils import ceil_log2
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.axi import AXI4Signature
from .cci import CciTarget
from .layouts import ADDR_BITS, cci_flit_layout, core_mode_layout, core_register_map
from .sync_core import SyncCore

__all__ = ["AxiArbiter", "MemoryDevice"]

_AR = ("arid", "araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot")
_AW = ("awid", "awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot")


class AxiArbiter(wiring.Component):
    """``n`` AXI4 masters (``m0``..) onto one port (``axi``, ID width ``ceil(log2 n)``: the ID is the master).

    Reads: every cycle one master's AR goes (round-robin), so bursts of several masters are in flight at once;
    R beats return to the master their RID names. Writes: AWs pass one per cycle; the master whose AW passed
    holds the write grant until every W burst it owes has passed (AXI4 does not interleave write data), and
    takes further AWs meanwhile only while no other master waits; then the grant rotates; B returns by BID.
    Masters must accept R and B whenever they are valid (``rready``/``bready`` high), as the sync cores and the CCI
    target do."""

    def __init__(self, n, beat_bytes=16):
        self.n = n
        self.id_width = max(1, ceil_log2(n))
        sig = AXI4Signature(ADDR_BITS, 8 * beat_bytes)
        super().__init__({"axi": Out(AXI4Signature(ADDR_BITS, 8 * beat_bytes, self.id_width)),
                          **{f"m{k}": In(sig) for k in range(n)}})

    def _round_robin(self, m, name, requests):
        """Index of the first requester after ``last`` (comb) and whether any requests; ``last`` register."""
        last = Signal(range(self.n), name=f"{name}_last")
        pick = Signal(range(self.n), name=f"{name}_pick")
        any_req = Signal(name=f"{name}_any")
        for off in reversed(range(1, self.n + 1)):
            for k in range(self.n):
                with m.If((last == k) & requests[(k + off) % self.n]):
                    m.d.comb += [pick.eq((k + off) % self.n), any_req.eq(1)]
        return last, pick, any_req

    def elaborate(self, platform):
        m = Module()
        ports = [getattr(self, f"m{k}") for k in range(self.n)]
        out = self.axi
        # ---- reads ----
        last, pick, any_ar = self._round_robin(m, "ar", [p.arvalid for p in ports])
        for k, p in enumerate(ports):
            with m.If(pick == k):
                m.d.comb += [getattr(out, f).eq(getattr(p, f)) for f in _AR if f != "arid"]
                m.d.comb += [out.arid.eq(k), p.arready.eq(out.arready & any_ar)]
            m.d.comb += [p.rdata.eq(out.rdata), p.rresp.eq(out.rresp), p.rlast.eq(out.rlast), p.rid.eq(0),
                         p.rvalid.eq(out.rvalid & (out.rid == k))]
            with m.If(out.rid == k):
                m.d.comb += out.rready.eq(p.rready)
        m.d.comb += out.arvalid.eq(any_ar)
        with m.If(out.arvalid & out.arready):
            m.d.sync += last.eq(pick)
        # ---- writes ----
        # ``grant`` owes ``owed`` W bursts (AWs passed, WLAST not yet); W comes from it alone, so the grant moves
        # only when nothing is owed. While others wait it takes no new AW, so the W owed drain and the grant
        # rotates; with no one else waiting its AWs keep passing, one per cycle, ahead of their data.
        wlast_, wpick, any_aw = self._round_robin(m, "aw", [p.awvalid for p in ports])
        grant = Signal(range(self.n))
        owed = Signal(8)
        locked = owed != 0
        others = Signal()
        for k, p in enumerate(ports):
            with m.If((grant != k) & p.awvalid):
                m.d.comb += others.eq(1)
        # an AW offered and not taken stays offered, unchanged (AXI), whoever else starts to wait
        hold, held = Signal(), Signal(range(self.n))
        sel = Mux(hold, held, Mux(locked, grant, wpick))
        allow = hold | ~locked | (~others & (owed != 255))
        aw_fire = out.awvalid & out.awready
        w_last = out.wvalid & out.wready & out.wlast
        for k, p in enumerate(ports):
            with m.If(sel == k):
                m.d.comb += [getattr(out, f).eq(getattr(p, f)) for f in _AW if f != "awid"]
                m.d.comb += [out.awid.eq(k), out.awvalid.eq(p.awvalid & allow), p.awready.eq(out.awready & allow)]
            with m.If(locked & (grant == k)):
                m.d.comb += [out.wdata.eq(p.wdata), out.wstrb.eq(p.wstrb), out.wlast.eq(p.wlast),
                             out.wvalid.eq(p.wvalid), p.wready.eq(out.wready)]
            m.d.comb += [p.bresp.eq(out.bresp), p.bid.eq(0), p.bvalid.eq(out.bvalid & (out.bid == k))]
            with m.If(out.bid == k):
                m.d.comb += out.bready.eq(p.bready)
        m.d.sync += [owed.eq(owed + aw_fire - w_last), hold.eq(out.awvalid & ~out.awready), held.eq(sel)]
        with m.If(aw_fire):
            m.d.sync += [grant.eq(sel), wlast_.eq(sel)]
        return m


class MemoryDevice(wiring.Component):
    """A memory device (see the module docstring). Ports: ``axi`` (DRAM), ``i_host``/``o_host`` (CCI requests
    in, responses out), ``i_left``/``o_left``/``i_right``/``o_right`` (ring flits). ``cci_depth``: host requests
    the CCI target keeps outstanding (:class:`CciTarget`)."""

    def __init__(self, n_groups=2, beat_bytes=16, entry_beats=16, max_ranks=8, cci_depth=8):
        if n_groups < 1:
            raise ValueError("a device needs at least one sync core")
        self.n_groups, self.beat_bytes, self.entry_beats, self.max_ranks = \
            n_groups, beat_bytes, entry_beats, max_ranks
        self.cci_depth = cci_depth
        super().__init__(self.signature_of(beat_bytes, n_groups))

    @staticmethod
    def signature_of(beat_bytes, n_groups):
        """The device's signature (a system top instantiating the separately converted device needs only it);
        the DRAM port's ID names the master (CCI target or a sync core)."""
        flit = stream.Signature(cci_flit_layout(beat_bytes))
        return wiring.Signature({
            "axi": Out(AXI4Signature(ADDR_BITS, 8 * beat_bytes, max(1, ceil_log2(n_groups + 1)))),
            "i_host": In(flit), "o_host": Out(flit),
            "i_left": In(flit), "o_left": Out(flit),
            "i_right": In(flit), "o_right": Out(flit),
        })

    def elaborate(self, platform):
        m = Module()
        G = self.n_groups
        cores = [SyncCore(self.beat_bytes, self.entry_beats, self.max_ranks, index=g) for g in range(G)]
        for g, c in enumerate(cores):
            m.submodules[f"core{g}"] = c
        m.submodules.target = target = CciTarget(self.beat_bytes, G, self.cci_depth)
        m.submodules.arbiter = arb = AxiArbiter(G + 1, self.beat_bytes)
        wiring.connect(m, wiring.flipped(self.axi), arb.axi)
        wiring.connect(m, target.axi, arb.m0)
        for g, c in enumerate(cores):
            wiring.connect(m, c.axi, getattr(arb, f"m{g + 1}"))
        wiring.connect(m, wiring.flipped(self.i_host), target.i_req)
        wiring.connect(m, target.o_rsp, wiring.flipped(self.o_host))
        mode = [data.View(core_mode_layout(), getattr(target, f"c{g}_mode")[:core_mode_layout().size])
                for g in range(len(cores))]
        status_fields = sorted(core_register_map(self.beat_bytes).register("START").fields, key=lambda f: f.lsb)
        assert [(f.lsb, f.width) for f in status_fields] == [(i, 1) for i in range(len(status_fields))], \
            "the status bits a read of START returns are one bit each from bit 0"
        for g, c in enumerate(cores):
            status = {"BUSY": c.busy, "DONE": c.done, "ERROR": c.err}   # the START fields of the register map
            m.d.comb += [
                c.base.eq(getattr(target, f"c{g}_base")), c.stride.eq(getattr(target, f"c{g}_stride")),
                c.chunks.eq(getattr(target, f"c{g}_chunks")), c.rank.eq(getattr(target, f"c{g}_rank")),
                c.ranks.eq(getattr(target, f"c{g}_ranks")), c.dtype.eq(mode[g].dtype), c.op.eq(mode[g].op),
                c.start.eq(getattr(target, f"c{g}_start")),
                getattr(target, f"c{g}_status").eq(Cat(*(status[f.name] for f in status_fields))),
                getattr(target, f"c{g}_cycles").eq(c.cycles),
                getattr(target, f"c{g}_stalls").eq(c.stalls),
                getattr(target, f"c{g}_alu_beats").eq(c.alu_beats),
            ]
        # ring inputs: even groups listen left, odd groups right; route by the core index in the address
        for port, parity in ((self.i_left, 0), (self.i_right, 1)):
            m.d.comb += port.ready.eq(1)
            for g in range(parity, G, 2):
                m.d.comb += [cores[g].i_ring.payload.eq(port.payload),
                             cores[g].i_ring.valid.eq(port.valid & (port.payload.addr[24:31] == g))]
        # ring outputs: round-robin per flit among the cores of one direction
        for port, parity in ((self.o_right, 0), (self.o_left, 1)):
            group = [cores[g] for g in range(parity, G, 2)]
            if not group:
                m.d.comb += port.valid.eq(0)
                continue
            last = Signal(range(len(group)), name=f"rr_{parity}")
            pick = Signal(range(len(group)), name=f"pick_{parity}")
            any_valid = Signal(name=f"any_{parity}")
            for off in reversed(range(1, len(group) + 1)):
                for k in range(len(group)):
                    with m.If((last == k) & group[(k + off) % len(group)].o_ring.valid):
                        m.d.comb += [pick.eq((k + off) % len(group)), any_valid.eq(1)]
            for k, c in enumerate(group):
                with m.If(pick == k):
                    m.d.comb += [port.payload.eq(c.o_ring.payload), c.o_ring.ready.eq(port.ready & any_valid)]
            m.d.comb += port.valid.eq(any_valid)
            with m.If(port.valid & port.ready):
                m.d.sync += last.eq(pick)
        return m
