"""The deposit unit: receives the PUT messages of the asynchronous all-to-all (Sven) without any FSM.

A PUT message (header bit ``put``) is not awaited by a RECV. When its whole payload has landed, the unit looks
up the command with the message's ``tag`` in the command table:

* **posted**: it writes the payload straight from the landing buffer to the command's output range of block
  ``key`` of chunk ``chunk`` (the block geometry of a STORE) and counts one arrival for the command;
* **not posted yet**: the message stays in the landing buffer (the SRAM staging area) until the channel is
  *full* (it cannot take another message of the largest size, or its header FIFO is full: the sender would
  wait). Then the unit *spills* it: it writes the payload to a free record of the spill window in NPU memory
  (``SPILL_BASE``, ``SPILL_ENTRIES`` records of ``max_message_beats`` beats) and keeps its header in the spill
  table, which frees the landing space and returns the sender's credits. When the command is posted, every
  spilled message of its tag is copied from the window to its output block (DMA read into DMA write) and
  counted.

Nothing is ever dropped: when the spill table is full (or ``SPILL_ENTRIES`` is 0) the message waits in the
landing buffer, and so does its sender, until the receiver posts. A command with deposits completes when its
own chunks are done and ``arrivals`` deposits have been written (docs/engine.md section 12).

The unit handles one message at a time. It borrows an RX port's read side from the port's RECV unit
(``req``/``own``: the control unit hands it over when the RECV unit is idle and grants no RECV on the port
meanwhile) for the duration of one message.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...sim.golden.types import Status
from ..common.layouts import CHANNEL_BITS, packet_header_layout
from .dma import dma_cmd_layout, dma_done_layout, dma_read_data_layout, dma_write_data_layout
from .units import STATUS_SHAPE, _w

__all__ = ["DepositUnit", "spill_entry_layout"]


def spill_entry_layout():
    """A spilled message: its header fields that name where it goes, and whether its payload is suspect."""
    return data.StructLayout({"tag": unsigned(16), "chunk": unsigned(16), "key": unsigned(12),
                              "length": unsigned(20), "bad": STATUS_SHAPE})


class DepositUnit(wiring.Component):
    """Writes PUT messages to their command's output, staging and spilling those that come early.

    Ports: per RX port ``k`` the landing heads, header-valid bits, fill levels and error bits; ``req``/``own``
    and the borrowed read side (``sel``, ``land``, ``hdr_pop``, ``err_clear``); the command table's tags and
    which commands take deposits (``cmd_live``); the block geometry lookup (``geo_*``, latency 1); the spill
    window (``spill_base``, ``spill_entries``); DMA read and write requests; ``arrived`` (one pulse per deposit
    written, with its command and status); counters.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        K, n, NC = cfg.n_ports, cfg.n_channels, cfg.n_cmds
        hl = packet_header_layout()
        lvl = unsigned(exact_log2(cfg.landing_beats) + 1)
        hlvl = unsigned(exact_log2(cfg.landing_headers) + 1)
        super().__init__({
            "heads": In(data.ArrayLayout(data.ArrayLayout(hl, n), K)),
            "hdr_valid": In(data.ArrayLayout(unsigned(n), K)),
            "levels": In(data.ArrayLayout(data.ArrayLayout(lvl, n), K)),
            "hdr_levels": In(data.ArrayLayout(data.ArrayLayout(hlvl, n), K)),
            "errs": In(data.ArrayLayout(unsigned(n), K)),
            "req": Out(K),
            "own": In(K),
            "sel": Out(CHANNEL_BITS),
            "land": In(stream.Signature(unsigned(8 * cfg.beat_bytes))),
            "hdr_pop": Out(1),
            "err_clear": Out(1),
            "cmd_tag": In(data.ArrayLayout(unsigned(16), NC)),
            "cmd_live": In(NC),
            "geo_cmd": Out(_w(NC)),
            "geo_chunk": Out(16),
            "geo_block": Out(10),
            "geo_addr": In(cfg.addr_width),
            "geo_nbytes": In(24),
            "spill_base": In(cfg.addr_width),
            "spill_entries": In(8),
            "rd_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "rd_data": In(stream.Signature(dma_read_data_layout(cfg))),
            "wr_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "wr_data": Out(stream.Signature(dma_write_data_layout(cfg))),
            "wr_done": In(stream.Signature(dma_done_layout())),
            "arrived": Out(data.StructLayout({"valid": 1, "cmd": _w(NC), "status": STATUS_SHAPE})),
            "deposits": Out(32),
            "deposit_bytes": Out(64),
            "spills": Out(32),
            "spill_bytes": Out(64),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        K, n, NC, E = cfg.n_ports, cfg.n_channels, cfg.n_cmds, cfg.spill_entries
        W = cfg.beat_bytes
        beat_shift = exact_log2(W)
        rec_shift = exact_log2(cfg.max_message_beats * W)
        mmb, lb, nh = cfg.max_message_beats, cfg.landing_beats, cfg.landing_headers

        # ---- spill table ------------------------------------------------------------------------------------
        el = spill_entry_layout()
        ent = Signal(data.ArrayLayout(el, max(1, E)))
        ent_v = Signal(max(1, E))

        def lookup(tag, name):
            """(hit, command index) of the lowest live command with ``tag``."""
            hit, idx = Signal(name=f"{name}_hit"), Signal(_w(NC), name=f"{name}_cmd")
            for i in reversed(range(NC)):
                with m.If(self.cmd_live[i] & (self.cmd_tag[i] == tag)):
                    m.d.comb += [hit.eq(1), idx.eq(i)]
            return hit, idx

        # ---- scan: one landing channel and one spill entry per cycle, round robin ---------------------------
        cptr = Signal(range(K * n))
        eptr = Signal(range(max(1, E)))
        c_port = Signal(range(max(2, K)))
        c_ch = Signal(CHANNEL_BITS)
        m.d.comb += [c_port.eq(cptr // n if K > 1 else 0), c_ch.eq(cptr % n)]
        head = Signal(packet_header_layout())
        head_v = Signal()
        level = Signal(exact_log2(lb) + 1)
        hlevel = Signal(exact_log2(nh) + 1)
        with m.Switch(cptr):
            for k in range(K):
                for c in range(n):
                    with m.Case(k * n + c):
                        m.d.comb += [head.eq(self.heads[k][c]), head_v.eq(self.hdr_valid[k][c]),
                                     level.eq(self.levels[k][c]), hlevel.eq(self.hdr_levels[k][c])]
        head_beats = (head.length + W - 1) >> beat_shift
        complete = head_v & head.put & (level >= head_beats)
        h_hit, h_cmd = lookup(head.tag, "head")
        full = ((lb - level) < mmb) | (hlevel >= nh)
        free_e = Signal(range(max(1, E)))
        free_any = Signal()
        for e in reversed(range(E)):
            with m.If(~ent_v[e] & (e < self.spill_entries)):
                m.d.comb += [free_any.eq(1), free_e.eq(e)]
        cur_e = Signal(el)
        m.d.comb += cur_e.eq(ent[eptr])
        e_hit, e_cmd = lookup(cur_e.tag, "entry")
        copy_ok = ent_v.bit_select(eptr, 1) & e_hit if E else 0

        # ---- the message or entry in hand -------------------------------------------------------------------
        op_hdr = Signal(packet_header_layout())
        op_port = Signal(range(max(2, K)))
        op_ch = Signal(CHANNEL_BITS)
        op_cmd = Signal(_w(NC))
        op_e = Signal(range(max(1, E)))
        op_beats = Signal(16)
        op_addr = Signal(cfg.addr_width)
        op_status = Signal(STATUS_SHAPE)
        op_drain = Signal()              # do not write (length mismatch): take the beats and drop them
        op_spill = Signal()              # this message goes to the spill window
        count = Signal(16)
        rd_err = Signal()

        m.d.comb += [self.geo_cmd.eq(op_cmd), self.geo_chunk.eq(op_hdr.chunk), self.geo_block.eq(op_hdr.key),
                     self.sel.eq(op_ch)]
        own_k = Signal()
        m.d.comb += own_k.eq(self.own.bit_select(op_port, 1))
        ch_err = Signal()
        with m.Switch(op_port):
            for k in range(K):
                with m.Case(k):
                    m.d.comb += ch_err.eq(self.errs[k].bit_select(op_ch, 1))

        arrive = Signal()
        arrive_status = Signal(STATUS_SHAPE)
        m.d.sync += [self.arrived.valid.eq(arrive), self.arrived.cmd.eq(op_cmd),
                     self.arrived.status.eq(arrive_status)]

        with m.FSM():
            with m.State("SCAN"):
                m.d.comb += self.idle.eq(1)
                with m.If(copy_ok):
                    m.d.sync += [op_e.eq(eptr), op_cmd.eq(e_cmd), op_spill.eq(0),
                                 op_hdr.tag.eq(cur_e.tag), op_hdr.chunk.eq(cur_e.chunk),
                                 op_hdr.key.eq(cur_e.key), op_hdr.length.eq(cur_e.length),
                                 op_status.eq(cur_e.bad), op_beats.eq((cur_e.length + W - 1) >> beat_shift)]
                    m.next = "COPY_GEO"
                with m.Elif(complete & (h_hit | (full & free_any))):
                    m.d.sync += [op_hdr.eq(head), op_port.eq(c_port), op_ch.eq(c_ch), op_cmd.eq(h_cmd),
                                 op_spill.eq(~h_hit), op_e.eq(free_e), op_beats.eq(head_beats),
                                 op_status.eq(Mux(head.poison, Status.PROTOCOL, 0))]
                    m.next = "GEO"
                with m.Else():
                    m.d.sync += cptr.eq(Mux(cptr == K * n - 1, 0, cptr + 1))
                    if E > 1:
                        m.d.sync += eptr.eq(Mux(eptr == E - 1, 0, eptr + 1))

            # -- a landed message: to the output (posted) or to a spill record --------------------------------
            with m.State("GEO"):         # geometry inputs are op_*; the result is valid next cycle
                m.next = "CHECK"
            with m.State("CHECK"):
                bad_len = ~op_spill & (self.geo_nbytes != op_hdr.length)
                m.d.sync += [
                    op_addr.eq(Mux(op_spill, self.spill_base + (op_e << rec_shift), self.geo_addr)),
                    op_drain.eq(bad_len),
                    count.eq(0),
                ]
                with m.If(bad_len):
                    m.d.sync += op_status.eq(Status.PROTOCOL)
                m.next = "OWN"
            with m.State("OWN"):
                m.d.comb += self.req.eq(1 << op_port)
                with m.If(own_k):
                    with m.If((op_hdr.length == 0) | op_drain):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "WCMD"
            with m.State("WCMD"):
                m.d.comb += [self.req.eq(1 << op_port), self.wr_cmd.valid.eq(1),
                             self.wr_cmd.payload.addr.eq(op_addr), self.wr_cmd.payload.length.eq(op_hdr.length)]
                with m.If(self.wr_cmd.ready):
                    m.next = "WDATA"
            with m.State("WDATA"):
                last = count + 1 == op_beats
                m.d.comb += [
                    self.req.eq(1 << op_port),
                    self.wr_data.valid.eq(self.land.valid),
                    self.wr_data.payload.data.eq(self.land.payload),
                    self.wr_data.payload.last.eq(last),
                    self.land.ready.eq(self.wr_data.ready),
                ]
                with m.If(self.land.valid & self.wr_data.ready):
                    m.d.sync += count.eq(count + 1)
                    with m.If(last):
                        m.d.comb += [self.hdr_pop.eq(1), self.err_clear.eq(ch_err)]
                        with m.If(ch_err):
                            m.d.sync += op_status.eq(Status.LINK_CRC)
                        m.next = "WDONE"
            with m.State("DRAIN"):       # an empty message, or one that cannot be placed: take its beats
                m.d.comb += [self.req.eq(1 << op_port), self.land.ready.eq(count != op_beats)]
                with m.If(self.land.valid & (count != op_beats)):
                    m.d.sync += count.eq(count + 1)
                with m.If((count == op_beats) | ((count + 1 == op_beats) & self.land.valid)):
                    m.d.comb += [self.hdr_pop.eq(1), self.err_clear.eq(ch_err)]
                    with m.If(ch_err):
                        m.d.sync += op_status.eq(Status.LINK_CRC)
                    m.next = "FINISH"
            with m.State("WDONE"):
                m.d.comb += self.wr_done.ready.eq(1)
                with m.If(self.wr_done.valid):
                    with m.If(self.wr_done.payload.err):
                        m.d.sync += op_status.eq(Status.AXI_ERROR)
                    m.next = "FINISH"
            with m.State("FINISH"):
                with m.If(op_spill):
                    if E:
                        with m.Switch(op_e):
                            for e in range(E):
                                with m.Case(e):
                                    m.d.sync += [ent[e].tag.eq(op_hdr.tag), ent[e].chunk.eq(op_hdr.chunk),
                                                 ent[e].key.eq(op_hdr.key), ent[e].length.eq(op_hdr.length),
                                                 ent[e].bad.eq(op_status), ent_v[e].eq(1)]
                    m.d.sync += [self.spills.eq(self.spills + 1),
                                 self.spill_bytes.eq(self.spill_bytes + op_hdr.length)]
                with m.Else():
                    m.d.comb += [arrive.eq(1), arrive_status.eq(op_status)]
                    m.d.sync += self.deposits.eq(self.deposits + 1)
                    with m.If(~op_drain):
                        m.d.sync += self.deposit_bytes.eq(self.deposit_bytes + op_hdr.length)
                m.next = "SCAN"

            # -- a spilled message whose command is posted: window -> output -----------------------------------
            with m.State("COPY_GEO"):
                m.next = "COPY_CHECK"
            with m.State("COPY_CHECK"):
                bad_len = self.geo_nbytes != op_hdr.length
                m.d.sync += [op_addr.eq(self.geo_addr), count.eq(0), rd_err.eq(0)]
                with m.If(bad_len):
                    m.d.sync += op_status.eq(Status.PROTOCOL)
                with m.If(bad_len | (op_hdr.length == 0)):
                    m.next = "COPY_END"
                with m.Else():
                    m.next = "COPY_WCMD"
            with m.State("COPY_WCMD"):
                m.d.comb += [self.wr_cmd.valid.eq(1), self.wr_cmd.payload.addr.eq(op_addr),
                             self.wr_cmd.payload.length.eq(op_hdr.length)]
                with m.If(self.wr_cmd.ready):
                    m.next = "COPY_RCMD"
            with m.State("COPY_RCMD"):
                m.d.comb += [self.rd_cmd.valid.eq(1),
                             self.rd_cmd.payload.addr.eq(self.spill_base + (op_e << rec_shift)),
                             self.rd_cmd.payload.length.eq(op_hdr.length)]
                with m.If(self.rd_cmd.ready):
                    m.next = "COPY_DATA"
            with m.State("COPY_DATA"):
                m.d.comb += [
                    self.wr_data.valid.eq(self.rd_data.valid),
                    self.wr_data.payload.data.eq(self.rd_data.payload.data),
                    self.wr_data.payload.last.eq(self.rd_data.payload.last),
                    self.rd_data.ready.eq(self.wr_data.ready),
                ]
                with m.If(self.rd_data.valid & self.wr_data.ready):
                    with m.If(self.rd_data.payload.err):
                        m.d.sync += rd_err.eq(1)
                    with m.If(self.rd_data.payload.last):
                        m.next = "COPY_WDONE"
            with m.State("COPY_WDONE"):
                m.d.comb += self.wr_done.ready.eq(1)
                with m.If(self.wr_done.valid):
                    with m.If(self.wr_done.payload.err | rd_err):
                        m.d.sync += op_status.eq(Status.AXI_ERROR)
                    m.next = "COPY_END"
            with m.State("COPY_END"):
                m.d.comb += [arrive.eq(1), arrive_status.eq(op_status)]
                m.d.sync += [self.deposits.eq(self.deposits + 1), ent_v.bit_select(op_e, 1).eq(0)]
                with m.If(op_status != Status.PROTOCOL):
                    m.d.sync += self.deposit_bytes.eq(self.deposit_bytes + op_hdr.length)
                m.next = "SCAN"
        return m
