"""CCI transaction layer: a credit-controlled link for flits and the target that serves host requests on a
memory device (DRAM reads/writes through AXI, sync-core control registers).

Flit and opcode formats are in :mod:`syncfabric.hdl.coarse.layouts`.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.axi import AXI4Signature, AxiBurst
from ..common.refuse import Checked
from ..system.link import RATE_DEN_MAX, DelayLine, pace
from .layouts import ADDR_BITS, CciOpcode, Region, cci_flit_layout, cci_pending_layout, core_register_map

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
        credits = Signal(range(self.credits + 1), init=self.credits)
        credit_back = Signal()
        # the link model's token bucket, held back also while the receiver's buffer has no room
        fire = pace(m, self.tx, self.rate_num, self.rate_den, self.stall | (credits == 0))
        m.d.sync += credits.eq(credits - fire + credit_back)

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


class CciTarget(Checked, wiring.Component):
    """Serves host requests arriving on a memory device's CCI port, up to ``depth`` outstanding, answered in
    request order.

    ``MEM_WR``/``MEM_RD`` below :data:`CORE_SPACE` become single-beat AXI writes/reads of DRAM answered by
    ``CMP``/``MEM_DATA`` with the request's tag; in the control region of a sync core they write or read that
    core's registers (:func:`~.layouts.core_register_map`: ``rw`` registers latched, the ``wo`` START a strobe
    whose read returns the status, ``ro`` registers read back; value in data bits 0-31). Other sync-core regions
    answer a read with zero data and a write with ``CMP`` without effect (RecvBuf is written by the ring, not the
    host). A response opcode arriving as a request below :data:`CORE_SPACE` is dropped.

    Pipeline: an *issue* register holds one request until its AXI address handshake is done (write data go
    to a FIFO of ``depth`` beats that feeds W) or its register access happened, then records it in the in-order
    *response queue* (``depth`` entries of :func:`~.layouts.cci_pending_layout`); read data wait in a FIFO of
    ``depth`` beats, write responses in a counter, so the target takes R and B whenever they are valid. A request
    issues only when the queue has room and without a hazard: a DRAM read waits until no write is in flight on
    AXI, a write until no read is (AXI orders neither against the other), a register access until neither is (so
    a ``START`` follows the pushes before it). With ``depth`` 1 the target serves one request at a time.

    Ports (one request accepted and one response sent per cycle at most):

    * ``i_req`` (In stream of flits): ready combinationally from the issue register's handshake.
    * ``o_rsp`` (Out stream of flits): valid from registered state only (queue head, read FIFO, B counter).
    * ``axi`` (AXI4 master): single-beat INCR bursts, ``rready``/``bready`` always high.
    * per core ``c{k}_*`` register values (``base``, ``stride``, ``chunks``, ``rank``, ``ranks``, ``mode``
      outputs, ``start`` a one-cycle pulse) and read-backs (``status``, ``cycles``, ``stalls``, ``alu_beats``
      inputs)."""

    @classmethod
    def check(cls, beat_bytes=16, n_cores=1, depth=8):
        exact_log2(beat_bytes)
        if depth < 1:
            raise ValueError(f"a CCI target needs a response queue of at least 1 entry, not {depth}")

    def __init__(self, beat_bytes=16, n_cores=1, depth=8):
        self.beat_bytes, self.n_cores, self.depth = beat_bytes, n_cores, depth
        flit = cci_flit_layout(beat_bytes)
        members = {
            "i_req": In(stream.Signature(flit)),
            "o_rsp": Out(stream.Signature(flit)),
            "axi": Out(AXI4Signature(ADDR_BITS, 8 * beat_bytes)),
        }
        self._writable, self._strobes, self._read_only = self._register_ports(beat_bytes)
        for k in range(n_cores):
            for _, name in self._writable:
                members[f"c{k}_{name}"] = Out(32)
            for _, name in self._strobes:
                members[f"c{k}_{name}"] = Out(1)
            for _, name in self._read_only:
                members[f"c{k}_{name}"] = In(32)
        super().__init__(members)

    #: Port read back by a read of a ``wo`` register (instead of 0): reading START returns the core's status.
    _STROBE_READS = {"START": "status"}

    @classmethod
    def _register_ports(cls, beat_bytes):
        """From the sync core's register map (addresses as register indices ``offset / beat_bytes``):
        ``(index, port)`` of the ``rw`` registers (a 32-bit output each, ``base`` ... ``mode``), of the ``wo``
        strobes (a one-cycle pulse, ``start``) and of what reads return for the others (32-bit inputs: the
        ``ro`` registers and the status a read of ``START`` returns)."""
        regs = core_register_map(beat_bytes).registers()
        if any(r.access not in ("rw", "wo", "ro") for r in regs):
            raise ValueError("the CCI target serves rw, wo and ro sync-core registers only")
        index = {r.name: r.offset // beat_bytes for r in regs}
        writable = [(index[r.name], r.name.lower()) for r in regs if r.access == "rw"]
        strobes = [(index[r.name], r.name.lower()) for r in regs if r.access == "wo"]
        read_only = [(index[r.name], cls._STROBE_READS[r.name] if r.access == "wo" else r.name.lower())
                     for r in regs if r.access in ("wo", "ro")]
        return writable, strobes, read_only

    def _registers(self, m, req, access, value):
        """Register file access of request ``req`` in the cycle ``access`` is high; ``value``: what a read gives."""
        bb_bits = exact_log2(self.beat_bytes)
        core, region, reg = req.addr[24:31], req.addr[20:24], req.addr[bb_bits:20]
        with m.If(access & (region == Region.CTRL)):
            for k in range(self.n_cores):
                with m.If(core == k):
                    with m.If(req.opcode == CciOpcode.MEM_WR):
                        for code, name in self._writable:
                            with m.If(reg == code):
                                m.d.sync += getattr(self, f"c{k}_{name}").eq(req.data[:32])
                        for code, name in self._strobes:
                            with m.If(reg == code):
                                m.d.comb += getattr(self, f"c{k}_{name}").eq(1)
                    with m.Else():
                        with m.Switch(reg):
                            for code, name in (*self._writable, *self._read_only):
                                with m.Case(code):
                                    m.d.comb += value.eq(getattr(self, f"c{k}_{name}"))

    def elaborate(self, platform):
        m = Module()
        bb_bits = exact_log2(self.beat_bytes)
        axi = self.axi
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(width=cci_pending_layout().size, depth=self.depth)
        m.submodules.rdata = rdata = fifo.SyncFIFOBuffered(width=8 * self.beat_bytes, depth=self.depth)
        m.submodules.wdata = wdata = fifo.SyncFIFOBuffered(width=8 * self.beat_bytes, depth=self.depth)
        rd_out = Signal(range(self.depth + 1))      # reads issued on AR, data not yet back
        wr_out = Signal(range(self.depth + 1))      # writes issued on AW, B not yet back
        b_ready = Signal(range(self.depth + 1))     # write responses received, not yet answered

        # ---- issue ----
        req = Signal.like(self.i_req.payload)
        full = Signal()                             # the issue register holds a request
        is_reg = req.addr[31]
        is_rd = ~is_reg & (req.opcode == CciOpcode.MEM_RD)
        is_wr = ~is_reg & (req.opcode == CciOpcode.MEM_WR)
        room = pending.w_stream.ready
        can_rd = full & is_rd & room & (wr_out == 0)
        can_wr = full & is_wr & room & wdata.w_stream.ready & (rd_out == 0)
        can_reg = full & is_reg & room & (rd_out == 0) & (wr_out == 0)
        done = Signal()
        value = Signal(32)
        m.d.comb += [
            axi.arlen.eq(0), axi.arsize.eq(bb_bits), axi.arburst.eq(AxiBurst.INCR),
            axi.awlen.eq(0), axi.awsize.eq(bb_bits), axi.awburst.eq(AxiBurst.INCR),
            axi.wstrb.eq(-1), axi.wlast.eq(1), axi.rready.eq(1), axi.bready.eq(1),
            axi.araddr.eq(req.addr), axi.awaddr.eq(req.addr),
            axi.arvalid.eq(can_rd), axi.awvalid.eq(can_wr),
            done.eq(can_reg | (can_rd & axi.arready) | (can_wr & axi.awready) | (full & ~is_reg & ~is_rd & ~is_wr)),
            # write data follow their address through a FIFO (a slave may take W only after AW)
            wdata.w_stream.valid.eq(can_wr & axi.awready), wdata.w_stream.payload.eq(req.data),
            axi.wvalid.eq(wdata.r_stream.valid), axi.wdata.eq(wdata.r_stream.payload),
            wdata.r_stream.ready.eq(axi.wready),
            self.i_req.ready.eq(~full | done),
        ]
        self._registers(m, req, can_reg, value)
        entry = Signal(cci_pending_layout())
        m.d.comb += [
            entry.opcode.eq(req.opcode), entry.tag.eq(req.tag), entry.addr.eq(req.addr), entry.dram.eq(~is_reg),
            entry.value.eq(value),
            pending.w_stream.valid.eq(done & (is_reg | is_rd | is_wr)),
            pending.w_stream.payload.eq(entry),
        ]
        with m.If(self.i_req.valid & self.i_req.ready):
            m.d.sync += [req.eq(self.i_req.payload), full.eq(1)]
        with m.Elif(done):
            m.d.sync += full.eq(0)
        m.d.sync += [
            rd_out.eq(rd_out + (axi.arvalid & axi.arready) - axi.rvalid),
            wr_out.eq(wr_out + (can_wr & done) - axi.bvalid),
        ]

        # ---- respond, in request order ----
        head = Signal(cci_pending_layout())
        m.d.comb += [head.eq(pending.r_stream.payload), rdata.w_stream.valid.eq(axi.rvalid),
                     rdata.w_stream.payload.eq(axi.rdata)]
        is_read = head.opcode == CciOpcode.MEM_RD
        answer = pending.r_stream.valid & (~head.dram | Mux(is_read, rdata.r_stream.valid, b_ready != 0))
        fire = answer & self.o_rsp.ready
        m.d.comb += [
            self.o_rsp.valid.eq(answer),
            self.o_rsp.payload.opcode.eq(Mux(is_read, CciOpcode.MEM_DATA, CciOpcode.CMP)),
            self.o_rsp.payload.tag.eq(head.tag),
            self.o_rsp.payload.addr.eq(head.addr),
            self.o_rsp.payload.data.eq(Mux(head.dram, Mux(is_read, rdata.r_stream.payload, 0), head.value)),
            pending.r_stream.ready.eq(fire),
            rdata.r_stream.ready.eq(fire & head.dram & is_read),
        ]
        m.d.sync += b_ready.eq(b_ready + axi.bvalid - (fire & head.dram & ~is_read))
        return m
