"""CCI transaction layer: a credit-controlled link for flits and the target that serves host requests on a
memory device (DRAM reads/writes through AXI, sync-core control registers).

Flit and opcode formats are in :mod:`syncfabric.hdl.coarse.layouts`.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.axi import AXI4Signature, AxiBurst
from ..system.link import RATE_DEN_MAX, DelayLine
from .layouts import ADDR_BITS, CORE_SPACE, CciOpcode, CoreReg, Region, cci_flit_layout

__all__ = ["CciLink", "CciTarget"]


class CciLink(wiring.Component):
    """One direction of a CCI path: ``latency`` cycles, ``rate_num/rate_den`` flits per cycle, credit-based flow
    control into a receive buffer of ``credits`` flits (credits come back ``latency`` cycles after the receiver
    takes a flit), and ``stall`` (random backpressure from a testbench).

    Ports: ``tx`` (In stream of flits), ``rx`` (Out stream, backpressure honoured), ``latency``, ``rate_num``,
    ``rate_den``, ``stall`` (inputs, set before traffic), ``flits`` / ``busy`` (Out counters: flits sent, cycles
    with a flit waiting to be sent)."""

    def __init__(self, beat_bytes=16, latency=4, rate=(1, 1), credits=8, max_latency=64):
        num, den = rate
        if not 0 < num <= den <= RATE_DEN_MAX:
            raise ValueError(f"rate must be num/den with 0 < num <= den <= {RATE_DEN_MAX}, not {num}/{den}")
        if not 1 <= latency <= max_latency:
            raise ValueError(f"latency must be in 1..{max_latency}, not {latency}")
        if credits < 1:
            raise ValueError("a link needs at least one credit")
        self.beat_bytes, self.credits, self.max_latency = beat_bytes, credits, max_latency
        flit = cci_flit_layout(beat_bytes)
        super().__init__({
            "tx": In(stream.Signature(flit)),
            "rx": Out(stream.Signature(flit)),
            "latency": In(range(1, max_latency + 1), init=latency),
            "rate_num": In(range(1, RATE_DEN_MAX + 1), init=num),
            "rate_den": In(range(1, RATE_DEN_MAX + 1), init=den),
            "stall": In(1),
            "flits": Out(32),
            "busy": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        num, den = self.rate_num, self.rate_den
        cap = Signal(range(2 * RATE_DEN_MAX))
        tokens = Signal(range(2 * RATE_DEN_MAX + 1))
        started = Signal()
        credits = Signal(range(self.credits + 1), init=self.credits)
        credit_back = Signal()
        fire = self.tx.valid & self.tx.ready
        m.d.comb += [
            cap.eq(den + num - 1),
            self.tx.ready.eq(started & (tokens >= den) & (credits != 0) & ~self.stall),
        ]
        after = tokens - Mux(fire, den, 0) + num
        m.d.sync += [tokens.eq(Mux(~started | (after > cap), cap, after)), started.eq(1),
                     credits.eq(credits - fire + credit_back)]

        width = len(self.tx.payload.as_value())
        m.submodules.line = line = DelayLine(unsigned(1 + width), 1, self.max_latency)
        m.submodules.buf = buf = fifo.SyncFIFOBuffered(width=width, depth=self.credits)
        m.submodules.credit_line = credit_line = DelayLine(unsigned(1), 1, self.max_latency)
        m.d.comb += [
            line.latency.eq(self.latency),
            line.i.eq(Cat(fire, self.tx.payload.as_value())),
            buf.w_en.eq(line.o[0]),             # a credit guarantees the space
            buf.w_data.eq(line.o[1:]),
            self.rx.valid.eq(buf.r_rdy),
            self.rx.payload.eq(buf.r_data),
            buf.r_en.eq(self.rx.ready),
            credit_line.latency.eq(self.latency),
            credit_line.i.eq(self.rx.valid & self.rx.ready),
            credit_back.eq(credit_line.o),
        ]
        m.d.sync += [self.flits.eq(self.flits + fire), self.busy.eq(self.busy + self.tx.valid)]
        return m


class CciTarget(wiring.Component):
    """Serves host requests arriving on a memory device's CCI port, one at a time, in order.

    ``MEM_WR``/``MEM_RD`` below :data:`CORE_SPACE` become single-beat AXI writes/reads of DRAM answered by
    ``CMP``/``MEM_DATA`` with the request's tag; in the control region of a sync core they write or read that
    core's registers (:class:`CoreReg`, value in data bits 0-31). Other sync-core regions answer a read with
    zero data and a write with ``CMP`` without effect (RecvBuf is written by the ring, not the host).

    Ports: ``i_req``, ``o_rsp`` (flit streams), ``axi`` (AXI4 master), and per core ``c{k}_*`` register values
    (``base``, ``stride``, ``chunks``, ``rank``, ``ranks``, ``mode`` outputs, ``start`` a one-cycle pulse) and
    read-backs (``status``, ``cycles``, ``stalls``, ``alu_beats`` inputs)."""

    def __init__(self, beat_bytes=16, n_cores=1):
        exact_log2(beat_bytes)
        self.beat_bytes, self.n_cores = beat_bytes, n_cores
        flit = cci_flit_layout(beat_bytes)
        members = {
            "i_req": In(stream.Signature(flit)),
            "o_rsp": Out(stream.Signature(flit)),
            "axi": Out(AXI4Signature(ADDR_BITS, 8 * beat_bytes)),
        }
        for k in range(n_cores):
            for name in ("base", "stride", "chunks", "rank", "ranks", "mode"):
                members[f"c{k}_{name}"] = Out(32)
            members[f"c{k}_start"] = Out(1)
            for name in ("status", "cycles", "stalls", "alu_beats"):
                members[f"c{k}_{name}"] = In(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bb_bits = exact_log2(self.beat_bytes)
        req = Signal.like(self.i_req.payload)
        rsp_data = Signal(8 * self.beat_bytes)
        axi = self.axi
        m.d.comb += [
            axi.arlen.eq(0), axi.arsize.eq(bb_bits), axi.arburst.eq(AxiBurst.INCR),
            axi.awlen.eq(0), axi.awsize.eq(bb_bits), axi.awburst.eq(AxiBurst.INCR),
            axi.wstrb.eq(-1), axi.wlast.eq(1), axi.rready.eq(1), axi.bready.eq(1),
            axi.araddr.eq(req.addr), axi.awaddr.eq(req.addr), axi.wdata.eq(req.data),
            self.o_rsp.payload.tag.eq(req.tag),
            self.o_rsp.payload.addr.eq(req.addr),
            self.o_rsp.payload.data.eq(rsp_data),
            self.o_rsp.payload.opcode.eq(Mux(req.opcode == CciOpcode.MEM_RD, CciOpcode.MEM_DATA, CciOpcode.CMP)),
        ]
        core = req.addr[24:31]
        region = req.addr[20:24]
        reg = req.addr[bb_bits:20]
        value = req.data[:32]
        regs = {}
        for k in range(self.n_cores):
            for name in ("base", "stride", "chunks", "rank", "ranks", "mode"):
                regs[(k, name)] = getattr(self, f"c{k}_{name}")
        names = {CoreReg.BASE: "base", CoreReg.STRIDE: "stride", CoreReg.CHUNKS: "chunks", CoreReg.RANK: "rank",
                 CoreReg.RANKS: "ranks", CoreReg.MODE: "mode"}
        aw_done, w_done = Signal(), Signal()

        with m.FSM(name="target"):
            with m.State("IDLE"):
                m.d.comb += self.i_req.ready.eq(1)
                with m.If(self.i_req.valid):
                    m.d.sync += [req.eq(self.i_req.payload), aw_done.eq(0), w_done.eq(0), rsp_data.eq(0)]
                    with m.If(self.i_req.payload.addr & CORE_SPACE):
                        m.next = "REG"
                    with m.Elif(self.i_req.payload.opcode == CciOpcode.MEM_WR):
                        m.next = "WRITE"
                    with m.Elif(self.i_req.payload.opcode == CciOpcode.MEM_RD):
                        m.next = "READ"
                    # responses arriving as requests are dropped
            with m.State("REG"):
                with m.If(region == Region.CTRL):
                    for k in range(self.n_cores):
                        with m.If(core == k):
                            with m.If(req.opcode == CciOpcode.MEM_WR):
                                for code, name in names.items():
                                    with m.If(reg == code):
                                        m.d.sync += regs[(k, name)].eq(value)
                                with m.If(reg == CoreReg.START):
                                    m.d.comb += getattr(self, f"c{k}_start").eq(1)
                            with m.Else():
                                with m.Switch(reg):
                                    for code, name in names.items():
                                        with m.Case(code):
                                            m.d.sync += rsp_data.eq(regs[(k, name)])
                                    for code, name in ((CoreReg.START, "status"), (CoreReg.CYCLES, "cycles"),
                                                       (CoreReg.STALLS, "stalls"),
                                                       (CoreReg.ALU_BEATS, "alu_beats")):
                                        with m.Case(code):
                                            m.d.sync += rsp_data.eq(getattr(self, f"c{k}_{name}"))
                m.next = "RESPOND"
            with m.State("WRITE"):
                m.d.comb += [axi.awvalid.eq(~aw_done), axi.wvalid.eq(~w_done)]
                with m.If(axi.awready):
                    m.d.sync += aw_done.eq(1)
                with m.If(axi.wready):
                    m.d.sync += w_done.eq(1)
                with m.If(axi.bvalid):
                    m.next = "RESPOND"
            with m.State("READ"):
                m.d.comb += axi.arvalid.eq(~aw_done)
                with m.If(axi.arready):
                    m.d.sync += aw_done.eq(1)
                with m.If(axi.rvalid):
                    m.d.sync += rsp_data.eq(axi.rdata)
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += self.o_rsp.valid.eq(1)
                with m.If(self.o_rsp.ready):
                    m.next = "IDLE"
        return m
