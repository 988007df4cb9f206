"""On-chip RAM with an AXI4 slave port (the NPU memory of a prototype board) and a 32-bit host word port.

:class:`AxiRam` holds ``size_bytes`` in one memory of ``data_width``-bit words with a read port and a write
port with byte enables (one simple dual-port block RAM on an FPGA). AXI reads and writes run independently:

* reads: ``INCR`` and ``FIXED`` bursts of full-width beats (``arsize`` = log2 of the data width in bytes, as
  the engine's DMA issues them), one beat per cycle after a one-cycle fetch, holding ``rdata`` under
  back-pressure; ``WRAP`` bursts are answered as ``INCR``;
* writes: ``wstrb`` selects the bytes written; one ``B`` response per burst, ``OKAY``.

Addresses wrap modulo ``size_bytes`` (a power of two). The ``host`` port (a
:class:`~syncfabric.hdl.common.csr.CsrSignature` served by the RAM, byte addresses, one 32-bit word per
access) is how the host bridge reads and writes the NPU memory; a host access waits for the AXI side of its
direction to be between bursts, then takes one cycle (write) or two (read).
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, AxiBurst, AxiResp
from .csr import CsrSignature

__all__ = ["AxiRam"]


class AxiRam(wiring.Component):
    """``size_bytes`` (a power of two) of RAM behind an AXI4 slave port ``axi`` (``addr_width``,
    ``data_width`` bits, ``id_width``) and a host word port ``host``."""

    def __init__(self, size_bytes, *, data_width=128, addr_width=32, id_width=1):
        if data_width < 32 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two >= 32, got {data_width}")
        beat = data_width // 8
        if size_bytes < beat or size_bytes & (size_bytes - 1):
            raise ValueError(f"size_bytes must be a power of two >= {beat}, got {size_bytes}")
        if size_bytes > 1 << addr_width:
            raise ValueError(f"{size_bytes} bytes do not fit {addr_width} address bits")
        self.size_bytes, self.data_width = size_bytes, data_width
        self.host_addr_width = max(3, (size_bytes - 1).bit_length())
        super().__init__({
            "axi": In(AXI4Signature(addr_width, data_width, id_width)),
            "host": Out(CsrSignature(self.host_addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self.data_width // 8
        lw = beat.bit_length() - 1              # log2 bytes per beat
        depth = self.size_bytes // beat
        ib = max(1, (depth - 1).bit_length())   # beat index bits
        m.submodules.mem = mem = Memory(shape=self.data_width, depth=depth, init=[])
        wp = mem.write_port(granularity=8)
        rp = mem.read_port()
        axi, host = self.axi, self.host

        # host accesses: remembered until the AXI side of their direction is idle
        h_rd, h_wr = Signal(), Signal()
        h_addr, h_data = Signal(self.host_addr_width), Signal(32)
        with m.If(host.re | host.we):
            m.d.sync += [h_addr.eq(host.addr), h_data.eq(host.wdata), h_rd.eq(host.re), h_wr.eq(host.we)]
        h_beat = h_addr[lw:lw + ib] if depth > 1 else 0
        h_lane = h_addr[2:lw]
        h_ack_rd = Signal()
        m.d.sync += h_ack_rd.eq(0)
        m.d.comb += host.ack.eq(0)

        # -- reads ---------------------------------------------------------------------------------------
        r_idx, r_left, r_id, r_incr = Signal(ib), Signal(8), Signal.like(axi.arid), Signal()
        m.d.comb += [axi.rid.eq(r_id), axi.rresp.eq(AxiResp.OKAY), axi.rdata.eq(rp.data)]
        with m.FSM(name="rd"):
            with m.State("IDLE"):
                m.d.comb += rp.en.eq(1)
                with m.If(h_rd):
                    m.d.comb += rp.addr.eq(h_beat)
                    m.d.sync += [h_rd.eq(0), h_ack_rd.eq(1)]
                with m.Else():
                    m.d.comb += axi.arready.eq(1)
                    with m.If(axi.arvalid):
                        idx = axi.araddr[lw:lw + ib] if depth > 1 else 0
                        m.d.comb += rp.addr.eq(idx)
                        m.d.sync += [r_idx.eq(idx), r_left.eq(axi.arlen), r_id.eq(axi.arid),
                                     r_incr.eq(axi.arburst != AxiBurst.FIXED)]
                        m.next = "SEND"
            with m.State("SEND"):
                # rp.data is mem[r_idx]; on a handshake fetch the next beat, otherwise hold
                m.d.comb += [axi.rvalid.eq(1), axi.rlast.eq(r_left == 0)]
                nxt = r_idx + r_incr
                m.d.comb += [rp.addr.eq(nxt), rp.en.eq(axi.rready)]
                with m.If(axi.rready):
                    m.d.sync += [r_idx.eq(nxt), r_left.eq(r_left - 1)]
                    with m.If(r_left == 0):
                        m.next = "IDLE"
        with m.If(h_ack_rd):
            m.d.comb += [host.ack.eq(1), host.rdata.eq(rp.data.word_select(h_lane, 32) if lw > 2 else rp.data)]

        # -- writes --------------------------------------------------------------------------------------
        w_idx, w_id, w_incr = Signal(ib), Signal.like(axi.awid), Signal()
        m.d.comb += [axi.bid.eq(w_id), axi.bresp.eq(AxiResp.OKAY)]
        with m.FSM(name="wr"):
            with m.State("IDLE"):
                with m.If(h_wr):
                    lanes = beat // 4
                    m.d.comb += [wp.addr.eq(h_beat), wp.data.eq(Cat(*[h_data] * lanes)),
                                 wp.en.eq(0xF << (h_lane * 4) if lw > 2 else 0xF), host.ack.eq(1)]
                    m.d.sync += h_wr.eq(0)
                with m.Else():
                    m.d.comb += axi.awready.eq(1)
                    with m.If(axi.awvalid):
                        m.d.sync += [w_idx.eq(axi.awaddr[lw:lw + ib] if depth > 1 else 0), w_id.eq(axi.awid),
                                     w_incr.eq(axi.awburst != AxiBurst.FIXED)]
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [axi.wready.eq(1), wp.addr.eq(w_idx), wp.data.eq(axi.wdata)]
                with m.If(axi.wvalid):
                    m.d.comb += wp.en.eq(axi.wstrb)
                    m.d.sync += w_idx.eq(w_idx + w_incr)
                    with m.If(axi.wlast):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += axi.bvalid.eq(1)
                with m.If(axi.bready):
                    m.next = "IDLE"
        return m
