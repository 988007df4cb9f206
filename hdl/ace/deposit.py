"""The deposit unit: receives the PUT messages of the asynchronous all-to-all (Sven).

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

The unit looks at one message at a time, but a deposit's write need not be acknowledged before the next
message is looked at: while the writer moves one message's beats the unit scans for the next and looks up its
block, and the writes of up to ``MAX_PENDING`` deposits may await their acknowledgements, each deposit's
arrival counted at its acknowledgement (in order, from a queue of what each arrival reports). Spills and
copies from the spill window run alone (no deposit in flight), so that a record is never read before its
write is acknowledged nor picked twice. The unit borrows an RX port's read side from the port's RECV unit
(``req``/``own``: the control unit hands it over when the RECV unit is idle and grants no RECV on the port
meanwhile) for the duration of one message's beats, and lets go of it for at least a cycle between two
messages, so that a waiting RECV gets the port. Messages on the port the writer holds are handed to it while
it moves the one before (it keeps a next job), so the port is not let go between them, up to ``MAX_CHAIN``
messages in a row; then the unit lets go of it for a cycle as after any other message.

Blocks: :class:`LandingScan` (one landing channel per cycle: is its head a complete PUT message, is the
channel full, which command has its tag), :class:`SpillTable` (the spilled headers, their scan and the free-entry
pick), :class:`DepositWriter` (one message's DMA writes at a time, from the landing buffer or a spill record,
or its drain; the acknowledgements of earlier writes still to come) and :class:`DepositCounters` (``arrived``
and the counters). ``DepositUnit`` itself sequences them: scan, geometry lookup and range and length check,
port hand-over, write, then the arrival (at the acknowledgement) or the spill entry.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...sim.golden.types import Status
from ..common.layouts import CHANNEL_BITS, packet_header_layout
from .deposit_count import DepositCounters, counter_ports
from .deposit_scan import LandingScan, landing_ports
from .deposit_write import MAX_PENDING, DepositSource, DepositWriter, dma_ports
from .dma import DOMAIN_ENGINE
from .geometry import BlockGeometry
from .spill_table import SpillTable, spill_entry_layout
from .units import STATUS_SHAPE, _w

__all__ = ["DepositUnit", "spill_entry_layout", "MAX_CHAIN"]

#: Messages the deposit unit moves in a row on a port it keeps (each handed to the writer while it moves the one
#: before); then it lets go of the port for a cycle, so that a RECV waiting for the port waits at most that long.
MAX_CHAIN = 4


class DepositUnit(wiring.Component):
    """Writes PUT messages to their command's output, staging and spilling those that come early.

    Ports: per RX port ``k`` the landing heads, header-valid bits, fill levels and error bits; ``req``/``own``
    and the borrowed read side (``sel``, ``land``, ``hdr_pop``, ``err_clear``); the command table's tags and
    which commands take deposits (``cmd_live``); the block geometry lookup (``geo_*``, answered
    ``BlockGeometry.latency_for(cfg)`` cycles later); the spill window (``spill_base``, ``spill_entries``); DMA read and
    write requests; ``arrived`` (one pulse per deposit written, with its command and status); counters.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        K, n, NC = cfg.n_ports, cfg.n_channels, cfg.n_cmds
        super().__init__({
            **landing_ports(cfg),
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
            "geo_block": Out(12),
            "geo_addr": In(cfg.addr_width),
            "geo_nbytes": In(24),
            "geo_in_range": In(1),
            "spill_base": In(cfg.addr_width),
            "spill_entries": In(8),
            **dma_ports(cfg),
            **counter_ports(cfg),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        K, W = cfg.n_ports, cfg.beat_bytes
        rec_shift = exact_log2(cfg.max_message_beats * W)
        m.submodules.scan = scan = LandingScan(cfg)
        m.submodules.spill = spill = SpillTable(cfg)
        m.submodules.writer = wr = DepositWriter(cfg)
        m.submodules.counters = cnt = DepositCounters(cfg)
        m.d.comb += [
            scan.heads.eq(self.heads), scan.hdr_valid.eq(self.hdr_valid), scan.levels.eq(self.levels),
            scan.hdr_levels.eq(self.hdr_levels), scan.cmd_tag.eq(self.cmd_tag), scan.cmd_live.eq(self.cmd_live),
            spill.cmd_tag.eq(self.cmd_tag), spill.cmd_live.eq(self.cmd_live),
            spill.spill_entries.eq(self.spill_entries),
            self.hdr_pop.eq(wr.hdr_pop), self.err_clear.eq(wr.err_clear),
            self.arrived.eq(cnt.arrived), self.deposits.eq(cnt.deposits), self.deposit_bytes.eq(cnt.deposit_bytes),
            self.spills.eq(cnt.spills), self.spill_bytes.eq(cnt.spill_bytes),
        ]
        wiring.connect(m, wiring.flipped(self.land), wr.land)
        wiring.connect(m, wr.rd_cmd, wiring.flipped(self.rd_cmd))
        wiring.connect(m, wiring.flipped(self.rd_data), wr.rd_data)
        wiring.connect(m, wr.wr_cmd, wiring.flipped(self.wr_cmd))
        wiring.connect(m, wr.wr_data, wiring.flipped(self.wr_data))
        wiring.connect(m, wiring.flipped(self.wr_done), wr.wr_done)

        # ---- the message or spill entry in hand -------------------------------------------------------------
        op_hdr = Signal(packet_header_layout())
        op_port = Signal(range(max(2, K)))
        op_ch = Signal(CHANNEL_BITS)
        op_cmd = Signal(_w(cfg.n_cmds))
        op_e = Signal(range(max(1, cfg.spill_entries)))
        op_beats = Signal(16)
        op_addr = Signal(cfg.addr_width)
        op_status = Signal(STATUS_SHAPE)
        op_src = Signal(DepositSource)   # where the writer takes the beats from (a drain: nowhere), from CHECK
        op_spill = Signal()              # this message goes to the spill window
        # the deposits handed to the writer whose arrival is not counted yet, in order: what each one reports
        # at its acknowledgement (its status so far, and its bytes: 0 for a drain)
        arrival = data.StructLayout({"cmd": _w(cfg.n_cmds), "status": STATUS_SHAPE, "bytes": unsigned(20)})
        m.submodules.inflight = inflight = fifo.SyncFIFO(width=arrival.size, depth=MAX_PENDING)
        head, push = data.View(arrival, inflight.r_data), data.View(arrival, inflight.w_data)
        quiet = ~inflight.r_rdy          # no deposit in flight (spills and copies run alone)
        # the geometry's answer (from the control unit's lookup) and the cycles to wait for it: in the fabric
        # form it is registered here first, a cycle later, so that the range and length checks and the
        # writer's job enable start at flip-flops of this unit instead of behind a route from the control unit
        geo_addr, geo_nbytes, geo_in_range = self.geo_addr, self.geo_nbytes, self.geo_in_range
        geo_latency = BlockGeometry.latency_for(cfg)
        if cfg.fabric:
            geo_addr, geo_nbytes, geo_in_range = (Signal.like(self.geo_addr, name="geo_addr_r"),
                                                  Signal.like(self.geo_nbytes, name="geo_nbytes_r"),
                                                  Signal(name="geo_in_range_r"))
            m.d.sync += [geo_addr.eq(self.geo_addr), geo_nbytes.eq(self.geo_nbytes),
                         geo_in_range.eq(self.geo_in_range)]
            geo_latency += 1
        geo_wait = Signal(range(max(2, geo_latency)))     # cycles until the geometry is valid
        m.d.comb += [self.geo_cmd.eq(op_cmd), self.geo_chunk.eq(op_hdr.chunk), self.geo_block.eq(op_hdr.key),
                     self.sel.eq(wr.ch)]
        with m.Switch(wr.port):          # the channel the writer holds (the unit may look at the next message)
            for k in range(K):
                with m.Case(k):
                    m.d.comb += wr.ch_err.eq(self.errs[k].bit_select(wr.ch, 1))
        job = wr.job.payload
        # the write's protection domain: the command's (its output buffer), the engine's (a spill record)
        m.d.comb += [job.wr_domain.eq(Mux(op_spill, DOMAIN_ENGINE, op_cmd + 1)),
                     job.port.eq(op_port), job.ch.eq(op_ch),
                     job.wr_addr.eq(op_addr), job.rd_addr.eq(self.spill_base + (op_e << rec_shift)),
                     job.length.eq(op_hdr.length), job.beats.eq(op_beats),
                     spill.fill.e.eq(op_e), spill.clear.e.eq(op_e), spill.fill.entry.bad.eq(op_status),
                     cnt.arrive.cmd.eq(op_cmd), cnt.spill.bytes.eq(op_hdr.length),
                     push.cmd.eq(op_cmd), push.status.eq(op_status),
                     push.bytes.eq(Mux(op_src == DepositSource.DRAIN, 0, op_hdr.length))]
        for f in ("tag", "chunk", "key", "length"):
            m.d.comb += spill.fill.entry[f].eq(op_hdr[f])
        # the port request leaves from a flip-flop (it blocks RECV grants in the issue arbiter, and ``own``
        # follows from it, a cycle later again): the writer's port while it holds it, else the port of the
        # message handed over next, not in the cycle after the writer let go (a waiting RECV gets its chance)
        req, own_req, held = Signal(K), Signal(K), Signal()
        m.d.sync += [self.req.eq(req), held.eq(wr.hold)]
        m.d.comb += req.eq(Mux(wr.hold, 1 << wr.port, Mux(held, 0, own_req)))
        # messages handed to the writer since it took the port (a next one is handed over only below MAX_CHAIN)
        chain = Signal(range(MAX_CHAIN + 1))
        with m.If(wr.job.valid & wr.job.ready):
            m.d.sync += chain.eq(Mux(wr.hold, chain + 1, 1))
        with m.Elif(~wr.hold):
            m.d.sync += chain.eq(0)

        # a deposit's arrival is counted at its acknowledgement (a drain's at its last beat)
        with m.If(wr.done.valid & inflight.r_rdy):
            m.d.comb += [inflight.r_en.eq(1), cnt.arrive.valid.eq(1), cnt.arrive.cmd.eq(head.cmd),
                         cnt.arrive.status.eq(Mux(wr.done.status != Status.OK, wr.done.status, head.status)),
                         cnt.arrive.bytes.eq(head.bytes)]
        # the scan's view of a channel is a cycle old: not the channel the writer holds, nor the one of the job
        # it keeps next, nor any in the cycle after a header pop (the popped message may still look complete)
        popped = Signal()
        m.d.sync += popped.eq(wr.hdr_pop)
        stale = (popped | (wr.hold & (scan.port == wr.port) & (scan.ch == wr.ch))
                 | (wr.next_valid & (scan.port == wr.next_port) & (scan.ch == wr.next_ch)))

        with m.FSM():
            with m.State("SCAN"):
                m.d.comb += self.idle.eq(quiet)
                cur = spill.cur
                with m.If(spill.ready):
                    with m.If(quiet):         # (no deposit is taken meanwhile)
                        m.d.sync += [op_e.eq(spill.cur_e), op_cmd.eq(spill.cmd), op_spill.eq(0),
                                     op_hdr.tag.eq(cur.tag), op_hdr.chunk.eq(cur.chunk),
                                     op_hdr.key.eq(cur.key), op_hdr.length.eq(cur.length),
                                     op_status.eq(cur.bad), op_beats.eq((cur.length + W - 1) >> exact_log2(W)),
                                     geo_wait.eq(geo_latency - 1)]
                        m.next = "COPY_GEO"
                with m.Elif(scan.complete & ~stale & (scan.hit | (scan.full & spill.free & quiet))):
                    m.d.sync += [op_hdr.eq(scan.head), op_port.eq(scan.port), op_ch.eq(scan.ch),
                                 op_cmd.eq(scan.cmd), op_spill.eq(~scan.hit), op_e.eq(spill.free_e),
                                 op_beats.eq(scan.beats), op_status.eq(Mux(scan.head.poison, Status.PROTOCOL, 0)),
                                 geo_wait.eq(geo_latency - 1)]
                    m.next = "GEO"

            # -- a landed message: to the output (posted) or to a spill record --------------------------------
            with m.State("GEO"):         # geometry inputs are op_*; the result is valid geo_latency cycles later
                m.d.sync += geo_wait.eq(geo_wait - 1)
                with m.If(geo_wait == 0):
                    m.next = "CHECK"
            with m.State("CHECK"):
                # a block outside the command's chunks and blocks would be written outside its output buffer
                bad = ~op_spill & ((geo_nbytes != op_hdr.length) | ~geo_in_range)
                m.d.sync += [op_addr.eq(Mux(op_spill, self.spill_base + (op_e << rec_shift), geo_addr)),
                             op_src.eq(Mux((op_hdr.length == 0) | bad, DepositSource.DRAIN,
                                           DepositSource.LANDING))]
                with m.If(bad):
                    m.d.sync += op_status.eq(Status.PROTOCOL)
                m.next = "OWN"
            with m.State("OWN"):         # borrow the RX port's read side, then hand the message to the writer
                # taken once the port has been asked for in this cycle and the one before, and ``own`` answers
                # it: it is then held from the request on (not an ``own`` still left from the writer's job)
                m.d.comb += [own_req.eq(1 << op_port), job.src.eq(op_src),
                             wr.job.valid.eq((req & self.req & self.own).bit_select(op_port, 1)
                                             & (op_spill | inflight.w_rdy) & (chain != MAX_CHAIN))]
                with m.If(wr.job.valid & wr.job.ready):
                    with m.If(op_spill):
                        m.next = "WRITE"
                    with m.Else():       # its arrival is counted at its acknowledgement: look at the next one
                        m.d.comb += inflight.w_en.eq(1)
                        m.next = "SCAN"
            with m.State("WRITE"):       # a spill: its write acknowledged, then its entry filled
                with m.If(wr.done.valid):
                    with m.If(wr.done.status != Status.OK):
                        m.d.sync += op_status.eq(wr.done.status)
                    m.next = "FINISH"
            with m.State("FINISH"):
                m.d.comb += [spill.fill.valid.eq(1), cnt.spill.valid.eq(1)]
                m.next = "SCAN"

            # -- a spilled message whose command is posted: window -> output -----------------------------------
            with m.State("COPY_GEO"):
                m.d.sync += geo_wait.eq(geo_wait - 1)
                with m.If(geo_wait == 0):
                    m.next = "COPY_CHECK"
            with m.State("COPY_CHECK"):
                bad = (geo_nbytes != op_hdr.length) | ~geo_in_range
                with m.If(bad):
                    m.d.sync += op_status.eq(Status.PROTOCOL)
                with m.If(bad | (op_hdr.length == 0)):
                    m.next = "COPY_END"
                with m.Else():
                    m.d.comb += [wr.job.valid.eq(1), job.src.eq(DepositSource.SPILL), job.wr_addr.eq(geo_addr)]
                    with m.If(wr.job.ready):
                        m.next = "COPY"
            with m.State("COPY"):
                with m.If(wr.done.valid):
                    with m.If(wr.done.status != Status.OK):
                        m.d.sync += op_status.eq(wr.done.status)
                    m.next = "COPY_END"
            with m.State("COPY_END"):
                m.d.comb += [cnt.arrive.valid.eq(1), cnt.arrive.status.eq(op_status), spill.clear.valid.eq(1),
                             cnt.arrive.bytes.eq(Mux(op_status != Status.PROTOCOL, op_hdr.length, 0))]
                m.next = "SCAN"
        return m
