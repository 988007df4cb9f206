"""An AXI4 firewall: every burst an engine issues is checked against the memory regions it may use, and one
that leaves them never reaches the memory.

The engine checks a descriptor's buffers against the registered memory windows when it accepts the command,
and every address its DMA then uses is derived from those buffers (docs/engine.md section 2). The firewall
checks each access again where it leaves the engine, so that no fault in that derivation (a geometry bug, a
corrupted command entry) and no register the host sets wrongly can reach memory outside the regions:

* regions are whole 4 KiB pages (``regions[i]``: pages ``[first, stop)``; the engine gives its memory windows,
  its submission and completion rings and its spill window, each widened to the pages it touches), as an
  IOMMU's are. An AXI burst never crosses a 4 KiB boundary, so a burst lies in a region exactly when its
  first byte's page does: the check is two compares of page numbers per region, no add;
* every burst carries a **protection domain** beside its address channel (``ar_domain``/``aw_domain``: the
  engine's, or the command's the burst moves data for), and a region admits only the domains its mask
  ``domains`` sets: a command's bursts reach the memory windows its own descriptor named, not another
  command's, and the engine's own accesses (descriptors, completions, spill records) reach only their rings
  and the spill window. The mask is one bit per domain, picked by the burst's domain beside the page
  compares;
* a **refused** read burst is answered by the firewall: ``len + 1`` beats of zeros with ``SLVERR`` (the DMA
  reports ``AXI_ERROR`` for its command); a refused write burst's beats are taken and dropped and the firewall
  answers ``SLVERR``. The memory never sees either. ``refused`` counts them.

Responses keep AXI's order: the engine uses one ID, so the memory answers in burst order, and the firewall
queues each burst's kind (passed or refused, and its length) in issue order and answers a refused burst when
it reaches the head. A passed burst takes no cycle of the firewall: its address reaches the memory in the
cycle it is presented. The engine's ``ready`` does not depend on the check (a refused address is taken when
the memory's ``ready`` is high anyway, or in the cycle after it was first presented), so the compare ends at
the memory's ``valid`` and at flip-flops, never back in the DMA.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, AxiResp, pass_through

__all__ = ["AxiFirewall", "PAGE_BITS", "region_layout"]


#: log2 of the firewall's page: the 4 KiB no AXI burst crosses.
PAGE_BITS = 12


def region_layout(addr_width, domains=1):
    """A memory region of whole pages ``[first, stop)`` (page numbers: byte address >> :data:`PAGE_BITS`)
    open to the protection domains whose bits ``domains`` sets (of ``domains`` domains); ``enable`` low: the
    region allows nothing."""
    pw = addr_width - PAGE_BITS
    return data.StructLayout({"first": unsigned(pw), "stop": unsigned(pw + 1), "enable": 1,
                              "domains": unsigned(domains)})


class AxiFirewall(wiring.Component):
    """Firewall between ``core`` (the engine's AXI4 master port, connected flipped) and ``axi`` (towards the
    memory), both of :class:`~syncfabric.hdl.common.axi.AXI4Signature` ``sig``, with ``n_regions`` regions
    and ``domains`` protection domains. ``bursts`` bounds the bursts in flight per direction (the engine's own
    limit is lower). Every burst must carry the same ID (the engine's DMA uses ID 0).

    Ports: ``regions`` (in: :func:`region_layout` each), ``ar_domain``/``aw_domain`` (in: the domain of the
    burst on ``core``'s AR/AW channel, valid with its ``valid``), ``refused`` (out: bursts refused,
    wrapping)."""

    def __init__(self, sig, n_regions, *, domains=1, bursts=8):
        if not isinstance(sig, AXI4Signature):
            raise TypeError(f"expected an AXI4Signature, not {sig!r}")
        if domains < 1:
            raise ValueError(f"a firewall needs at least one protection domain, not {domains}")
        self.sig, self.n_regions, self.domains, self.bursts = sig, n_regions, domains, bursts
        super().__init__({
            "core": In(sig),
            "axi": Out(sig),
            "regions": In(data.ArrayLayout(region_layout(sig.addr_width, domains), n_regions)),
            "ar_domain": In(range(domains)),
            "aw_domain": In(range(domains)),
            "refused": Out(32),
        })

    def _inside(self, m, addr, domain, name):
        """A signal: the page of byte address ``addr`` (so the whole burst starting there) is in an enabled
        region open to ``domain``."""
        page = addr[PAGE_BITS:]
        ok = Signal(name=f"{name}_ok")
        m.d.comb += ok.eq(Cat(*[r.enable & r.domains.bit_select(domain, 1) & (page >= r.first) & (page < r.stop)
                                for r in self.regions]).any())
        return ok

    def elaborate(self, platform):
        m = Module()
        c, s = self.core, self.axi
        pass_through(m, c, s, except_for={"arvalid", "arready", "rvalid", "rready", "rdata", "rresp", "rlast", "rid",
                                           "awvalid", "awready", "wvalid", "wready", "bvalid", "bready", "bresp",
                                           "bid"})
        refusals = []

        # -- reads: each burst's kind (refused, len) in issue order; a refused one answered at the head ------
        m.submodules.rq = rq = SyncFIFO(width=9, depth=self.bursts)
        ar_ok = self._inside(m, c.araddr, self.ar_domain, "ar")
        ar_refuse = Signal()        # a refused address was presented last cycle and not taken: take it now
        m.d.comb += [
            s.arvalid.eq(c.arvalid & ar_ok & rq.w_rdy),
            c.arready.eq(rq.w_rdy & (s.arready | ar_refuse)),
            rq.w_en.eq(c.arvalid & c.arready), rq.w_data.eq(Cat(c.arlen, ~ar_ok)),
        ]
        m.d.sync += ar_refuse.eq(c.arvalid & ~ar_ok & ~c.arready)
        refusals.append(c.arvalid & c.arready & ~ar_ok)
        r_refused, r_len = rq.r_data[8], rq.r_data[:8]
        r_cnt = Signal(8)
        r_last = Signal()
        with m.If(rq.r_rdy & r_refused):
            m.d.comb += [c.rvalid.eq(1), c.rdata.eq(0), c.rresp.eq(AxiResp.SLVERR), c.rid.eq(0),
                         c.rlast.eq(r_cnt == r_len), s.rready.eq(0), r_last.eq(c.rready & (r_cnt == r_len))]
            with m.If(c.rready):
                m.d.sync += r_cnt.eq(Mux(r_cnt == r_len, 0, r_cnt + 1))
        with m.Else():
            m.d.comb += [c.rvalid.eq(s.rvalid & rq.r_rdy), c.rdata.eq(s.rdata), c.rresp.eq(s.rresp),
                         c.rid.eq(s.rid), c.rlast.eq(s.rlast), s.rready.eq(c.rready & rq.r_rdy),
                         r_last.eq(s.rvalid & s.rready & s.rlast)]
        m.d.comb += rq.r_en.eq(r_last)

        # -- writes: the kind of each burst in issue order for its W beats, then for its response -----------
        m.submodules.wq = wq = SyncFIFO(width=1, depth=self.bursts)
        m.submodules.bq = bq = SyncFIFO(width=1, depth=self.bursts)
        # A passed burst's kind is queued when its address is first presented to the memory, not when it is
        # taken: its W beats may go before (a memory may wait for them before it takes the address)
        aw_ok = self._inside(m, c.awaddr, self.aw_domain, "aw")
        aw_pend = Signal()          # the memory saw this address last cycle and has not taken it
        aw_refuse = Signal()        # a refused address was presented last cycle and not taken: take it now
        room = wq.w_rdy | aw_pend
        m.d.comb += [
            s.awvalid.eq(c.awvalid & aw_ok & room),
            c.awready.eq((s.awready & room) | (aw_refuse & wq.w_rdy)),
            wq.w_en.eq((s.awvalid & ~aw_pend) | (c.awvalid & c.awready & ~aw_ok)), wq.w_data.eq(~aw_ok),
        ]
        m.d.sync += [aw_pend.eq(s.awvalid & ~s.awready), aw_refuse.eq(c.awvalid & ~aw_ok & ~c.awready)]
        refusals.append(c.awvalid & c.awready & ~aw_ok)
        w_refused = wq.r_data[0]
        # W beats: to the memory for a passed burst at the head, dropped for a refused one
        m.d.comb += [
            s.wvalid.eq(c.wvalid & wq.r_rdy & ~w_refused & bq.w_rdy),
            c.wready.eq(wq.r_rdy & bq.w_rdy & (w_refused | s.wready)),
        ]
        w_end = c.wvalid & c.wready & c.wlast
        m.d.comb += [wq.r_en.eq(w_end), bq.w_en.eq(w_end), bq.w_data.eq(w_refused)]
        # a burst's response after its last beat: the memory's, or SLVERR for a refused one
        with m.If(bq.r_rdy & bq.r_data[0]):
            m.d.comb += [c.bvalid.eq(1), c.bresp.eq(AxiResp.SLVERR), c.bid.eq(0), s.bready.eq(0),
                         bq.r_en.eq(c.bready)]
        with m.Else():
            m.d.comb += [c.bvalid.eq(s.bvalid & bq.r_rdy), c.bresp.eq(s.bresp), c.bid.eq(s.bid),
                         s.bready.eq(c.bready & bq.r_rdy), bq.r_en.eq(s.bvalid & s.bready)]

        m.d.sync += self.refused.eq(self.refused + refusals[0] + refusals[1])
        return m
