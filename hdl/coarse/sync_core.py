"""The COARSE sync core: a near-memory core that synchronizes chunks of device DRAM with the cores of the same
group on the other memory devices, over CCI writes into their RecvBufs.

Per chunk (``ranks`` entries of ``entry_beats`` beats, one entry per device), three stages that run
concurrently on consecutive chunks (LocalBuf and SendBuf hold two chunks each, by chunk parity)::

    LOAD       AXI read bursts (one per entry) DRAM -> LocalBuf[k % 2], once the ring finished chunk k-2
    RING       2(ranks-1) steps, once chunk k is loaded and SendBuf[k % 2] was written back. Sender: step s
               sends one entry (LocalBuf entry ``rank`` for s = 0, else the SendBuf entry the receiver produced
               in step s-1, cut-through: beat b goes as soon as beat b of step s-1 is in SendBuf) as MEM_WR
               flits to the next core's RecvBuf slot (chunk parity, s). Receiver: reads RecvBuf slot
               (parity, s) beat by beat as the beats arrive, with the LocalBuf entry (reduce-scatter steps:
               RecvBuf (+) LocalBuf through the ALU) or alone (all-gather steps: a copy, delayed as long as the
               ALU) into SendBuf.
    WRITEBACK  AXI write bursts SendBuf[k % 2] -> DRAM (AXI reads and writes are independent channels)

Chunk k is at ``base + k * stride``. ``done`` rises when every write of every chunk was answered.

The entry order and the reduction order are those of :func:`syncfabric.sim.golden.coarse.sync_chunk`: both the
sender's and the receiver's entry index start at ``rank`` / ``rank - 1`` and decrease by one (mod ``ranks``)
every step. RecvBuf has two sets of slots (chunk parity): a core cannot start chunk k+2 before its successor
finished chunk k (the successor's final entry passes through it), so a slot is never written before it was read. RecvBuf
always accepts (``i_ring.ready`` is 1), so ring traffic never backs up into the links: no deadlock between
groups or with host traffic.

Throughput: the ALU takes one beat per cycle (it is never the bottleneck: links carry at most one flit per
cycle). A step's beats stream as the previous step's results appear, so a step costs about
``max(entry_beats / link rate, hop)`` cycles, ``hop`` being a beat's way around one core (link latency, RecvBuf
write, read, ALU latency, SendBuf write, read: link latency + about 9 cycles); entries of at least
``hop x rate`` beats keep the links busy.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..alu import ReductionAlu
from ..common.axi import AXI4Signature, AxiBurst
from ..common.layouts import DTYPE_SHAPE, OP_SHAPE
from ..common.refuse import Checked
from .layouts import ADDR_BITS, CciOpcode, Region, cci_flit_layout, core_addr

__all__ = ["SyncCore"]


class SyncCore(Checked, wiring.Component):
    """One sync core (see the module docstring).

    Parameters: ``beat_bytes`` (AXI and flit data width, a power of two >= 4; the ALU has ``beat_bytes/4``
    lanes), ``entry_beats`` (beats per entry, a power of two), ``max_ranks`` (largest ring), ``index`` (the
    core's index in its device; the same index on every device of the group, used in RecvBuf addresses).

    Ports: ``axi`` (AXI4 master to device DRAM), ``o_ring`` (MEM_WR flits to the next core), ``i_ring``
    (MEM_WR flits into RecvBuf; always ready), control inputs ``base``, ``stride``, ``chunks``, ``rank``,
    ``ranks``, ``dtype``, ``op`` (held while busy) and ``start`` (one-cycle pulse), outputs ``busy``, ``done``
    (set at the end of a run, cleared by ``start``), counters ``cycles``, ``stalls``, ``alu_beats``,
    ``err`` (an AXI error response or a bad ``ranks`` was seen in the last run).
    """

    @classmethod
    def check(cls, beat_bytes=16, entry_beats=16, max_ranks=8, index=0):
        exact_log2(beat_bytes)
        exact_log2(entry_beats)
        if beat_bytes < 4:
            raise ValueError(f"beat_bytes must be at least 4, not {beat_bytes}")
        if entry_beats > 256:
            raise ValueError("an entry is one AXI burst: at most 256 beats")
        if not 2 <= max_ranks <= 64:
            raise ValueError(f"max_ranks must be in 2..64, not {max_ranks}")

    def __init__(self, beat_bytes=16, entry_beats=16, max_ranks=8, index=0):
        self.beat_bytes, self.entry_beats, self.max_ranks, self.index = beat_bytes, entry_beats, max_ranks, index
        self.max_steps = 2 * (max_ranks - 1)
        flit = cci_flit_layout(beat_bytes)
        super().__init__({
            "axi": Out(AXI4Signature(ADDR_BITS, 8 * beat_bytes)),
            "o_ring": Out(stream.Signature(flit)),
            "i_ring": In(stream.Signature(flit)),
            "base": In(ADDR_BITS),
            "stride": In(ADDR_BITS),
            "chunks": In(32),
            "rank": In(range(max_ranks)),
            "ranks": In(range(max_ranks + 1)),
            "dtype": In(DTYPE_SHAPE),
            "op": In(OP_SHAPE),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "err": Out(1),
            "cycles": Out(32),
            "stalls": Out(32),
            "alu_beats": Out(32),
        })

    def recv_offset(self, parity, step, beat):
        """Byte offset in RecvBuf of ``beat`` of the slot of (chunk ``parity``, ring ``step``)."""
        return ((parity * self.max_steps + step) * self.entry_beats + beat) * self.beat_bytes

    def elaborate(self, platform):
        m = Module()
        bb, eb, R = self.beat_bytes, self.entry_beats, self.max_ranks
        eb_bits, bb_bits = exact_log2(eb), exact_log2(bb)
        width = 8 * bb
        buf_depth = 2 * R * eb          # two chunks
        slots = 2 * self.max_steps
        entry_bits = max(1, ceil_log2(R))

        m.submodules.local = local = Memory(shape=width, depth=buf_depth, init=[])
        m.submodules.send = send = Memory(shape=width, depth=buf_depth, init=[])
        m.submodules.recv = recv = Memory(shape=width, depth=slots * eb, init=[])
        local_w = local.write_port()
        local_tx = local.read_port()        # sender, step 0
        local_rx = local.read_port()        # receiver, reduce-scatter steps
        send_w = send.write_port()
        send_tx = send.read_port()          # sender, steps >= 1
        send_wb = send.read_port()          # write-back
        recv_w = recv.write_port()
        recv_r = recv.read_port()

        def buf_index(beat, entry, parity):
            return Cat(beat, entry[:entry_bits], parity)

        ranks = Signal(range(R + 1))
        n_steps = Signal(range(self.max_steps + 1))
        chunks = Signal(32)
        running = Signal()
        m.d.comb += [n_steps.eq((ranks - 1) << 1), self.busy.eq(running)]
        entry_beats_total = Signal(range(R * eb + 1))
        m.d.comb += entry_beats_total.eq(ranks << eb_bits)

        # ---- RecvBuf: remote writes, a count of arrived beats per slot (one writer per slot, in order) ----------
        arrived = [Signal(range(eb + 1), name=f"arrived_{k}") for k in range(slots)]
        clr_slot = Signal(range(slots + 1))
        clr = Signal()
        m.d.comb += self.i_ring.ready.eq(1)
        in_beat = self.i_ring.payload.addr[bb_bits:bb_bits + eb_bits]
        in_slot = self.i_ring.payload.addr[bb_bits + eb_bits:bb_bits + eb_bits + ceil_log2(slots + 1)]
        in_fire = self.i_ring.valid & (self.i_ring.payload.opcode == CciOpcode.MEM_WR)
        m.d.comb += [
            recv_w.addr.eq(Cat(in_beat, in_slot)),
            recv_w.data.eq(self.i_ring.payload.data),
            recv_w.en.eq(in_fire),
        ]
        for k, count in enumerate(arrived):
            with m.If(clr & (clr_slot == k)):
                m.d.sync += count.eq(0)
            with m.Elif(in_fire & (in_slot == k)):
                m.d.sync += count.eq(count + 1)

        # ---- start / done -------------------------------------------------------------------------------------
        loaded = Signal(32)         # chunks fully in LocalBuf
        ringed = Signal(32)         # chunks through the ring
        drained = Signal(32)        # chunks whose W beats all left SendBuf
        outstanding = Signal(range(2 * R + 2))  # write bursts sent and not answered
        ld_addr = Signal(ADDR_BITS)
        wb_addr = Signal(ADDR_BITS)
        ar_entry = Signal(range(R + 1))
        r_count = Signal(range(R * eb + 1))
        aw_entry = Signal(range(R + 1))
        wb_issue = Signal(range(R * eb + 1))
        with m.If(self.start & ~running):
            m.d.sync += [ranks.eq(self.ranks), chunks.eq(self.chunks), ld_addr.eq(self.base),
                         wb_addr.eq(self.base), loaded.eq(0), ringed.eq(0), drained.eq(0), outstanding.eq(0),
                         ar_entry.eq(0), r_count.eq(0), aw_entry.eq(0), wb_issue.eq(0),
                         self.done.eq(0), self.err.eq(0), self.cycles.eq(0), self.stalls.eq(0),
                         self.alu_beats.eq(0)]
            with m.If((self.ranks < 2) | (self.ranks > R) | (self.rank >= self.ranks)):
                m.d.sync += [self.done.eq(1), self.err.eq(1)]
            with m.Elif(self.chunks == 0):
                m.d.sync += self.done.eq(1)
            with m.Else():
                m.d.sync += running.eq(1)
        with m.If(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If((drained == chunks) & (outstanding == 0)):
                m.d.sync += [running.eq(0), self.done.eq(1)]

        axi = self.axi
        m.d.comb += [
            axi.arlen.eq(eb - 1), axi.arsize.eq(bb_bits), axi.arburst.eq(AxiBurst.INCR),
            axi.awlen.eq(eb - 1), axi.awsize.eq(bb_bits), axi.awburst.eq(AxiBurst.INCR),
            axi.wstrb.eq(Const(-1, bb)), axi.rready.eq(1), axi.bready.eq(1),
        ]

        # ---- loader: chunk `loaded` into LocalBuf[loaded % 2] once the ring is done with chunk loaded-2 --------
        ld_go = running & (loaded < chunks) & (loaded <= ringed + 1)
        m.d.comb += [axi.arvalid.eq(ld_go & (ar_entry < ranks)),
                     axi.araddr.eq(ld_addr + (ar_entry << (eb_bits + bb_bits)))]
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += ar_entry.eq(ar_entry + 1)
        m.d.comb += [local_w.addr.eq(Cat(r_count[:eb_bits + entry_bits], loaded[0])), local_w.data.eq(axi.rdata),
                     local_w.en.eq(axi.rvalid)]
        with m.If(axi.rvalid):
            m.d.sync += r_count.eq(r_count + 1)
            with m.If(axi.rresp[1]):
                m.d.sync += self.err.eq(1)
            with m.If(r_count == entry_beats_total - 1):
                m.d.sync += [loaded.eq(loaded + 1), ld_addr.eq(ld_addr + self.stride), ar_entry.eq(0),
                             r_count.eq(0)]

        # ---- ring: chunk `ringed`, once loaded and its SendBuf half was drained (chunk ringed-2) -------------
        tx_step = Signal(range(self.max_steps + 1))
        tx_beat = Signal(eb_bits)
        tx_entry = Signal(range(R))
        rx_step = Signal(range(self.max_steps + 1))
        rx_beat = Signal(eb_bits)
        rx_entry = Signal(range(R))
        rx_done = Signal(range(self.max_steps + 1))
        rx_beats = Signal(range(self.max_steps * eb + 1))     # SendBuf beats written this chunk
        in_ring = Signal()
        parity = Signal()
        m.d.comb += parity.eq(ringed[0])

        def dec(value):
            return Mux(value == 0, ranks - 1, value - 1)

        with m.If(~in_ring):
            with m.If(running & (ringed < chunks) & (loaded > ringed) & (drained + 1 >= ringed)):
                m.d.sync += [in_ring.eq(1), tx_step.eq(0), tx_beat.eq(0), tx_entry.eq(self.rank),
                             rx_step.eq(0), rx_beat.eq(0), rx_entry.eq(dec(self.rank)), rx_done.eq(0),
                             rx_beats.eq(0)]
        with m.Elif((tx_step == n_steps) & ~self.o_ring.valid & (rx_done == n_steps)):
            m.d.sync += [in_ring.eq(0), ringed.eq(ringed + 1)]

        # sender: one read ahead of the o_ring register (the read ports hold their data while stalled)
        o = self.o_ring
        tx_pend = Signal()
        tx_src_local = Signal()
        tx_out_step = Signal(range(self.max_steps))
        tx_out_beat = Signal(eb_bits)
        tx_adv = ~o.valid | o.ready
        # cut-through: beat b of step s may go once beat b of step s-1 is in SendBuf
        tx_need = Signal(range(self.max_steps * eb + 1))
        m.d.comb += tx_need.eq(Cat(tx_beat, tx_step - 1))
        tx_can = in_ring & (tx_step < n_steps) & ((tx_step == 0) | (rx_beats > tx_need))
        with m.If(tx_adv):
            m.d.sync += tx_pend.eq(tx_can)
            with m.If(tx_can):
                m.d.sync += [tx_src_local.eq(tx_step == 0), tx_out_step.eq(tx_step), tx_out_beat.eq(tx_beat),
                             tx_beat.eq(tx_beat + 1)]
                with m.If(tx_beat == eb - 1):
                    m.d.sync += [tx_step.eq(tx_step + 1), tx_entry.eq(dec(tx_entry))]
        slot_offset = Signal(20)
        m.d.comb += slot_offset.eq(
            Cat(Const(0, bb_bits), tx_out_beat, (parity * self.max_steps + tx_out_step)[:ceil_log2(slots + 1)]))
        m.d.comb += [
            local_tx.addr.eq(buf_index(tx_beat, tx_entry, parity)),
            local_tx.en.eq(tx_adv),
            send_tx.addr.eq(buf_index(tx_beat, tx_entry, parity)),
            send_tx.en.eq(tx_adv),
            o.valid.eq(tx_pend),
            o.payload.opcode.eq(CciOpcode.MEM_WR),
            o.payload.addr.eq(core_addr(self.index, Region.RECV) | slot_offset),
            o.payload.data.eq(Mux(tx_src_local, local_tx.data, send_tx.data)),
        ]

        # receiver: RecvBuf (+) LocalBuf -> ALU -> SendBuf (or a copy in all-gather steps)
        slot_bits = ceil_log2(slots + 1)
        rx_slot = Signal(slot_bits)
        m.d.comb += rx_slot.eq(parity * self.max_steps + rx_step)
        rx_copy = rx_step >= ranks - 1
        # cut-through here too: beat b of a slot is read as soon as it arrived
        rx_can = in_ring & (rx_step < n_steps) & (Array(arrived)[rx_slot] > rx_beat)
        m.d.comb += [recv_r.addr.eq(Cat(rx_beat, rx_slot)), local_rx.addr.eq(buf_index(rx_beat, rx_entry, parity))]
        with m.If(in_ring & (rx_step < n_steps) & ~rx_can):
            m.d.sync += self.stalls.eq(self.stalls + 1)
        with m.If(rx_can):
            m.d.sync += rx_beat.eq(rx_beat + 1)
            with m.If(rx_beat == eb - 1):
                m.d.comb += [clr.eq(1), clr_slot.eq(rx_slot)]
                m.d.sync += [rx_step.eq(rx_step + 1), rx_entry.eq(dec(rx_entry))]

        idx_bits = eb_bits + entry_bits + 1
        m.submodules.alu = alu = ReductionAlu(lanes=bb // 4, tag_width=2 + idx_bits)
        issued = Signal()
        issued_copy = Signal()
        issued_last = Signal()
        issued_idx = Signal(idx_bits)
        m.d.sync += [issued.eq(rx_can), issued_copy.eq(rx_copy), issued_last.eq(rx_beat == eb - 1),
                     issued_idx.eq(buf_index(rx_beat, rx_entry, parity))]
        m.d.comb += [
            alu.i.valid.eq(issued),
            alu.i.payload.a.eq(recv_r.data),
            alu.i.payload.b.eq(local_rx.data),
            alu.i.payload.dtype.eq(self.dtype),
            alu.i.payload.op.eq(self.op),
            alu.i.payload.tag.eq(Cat(issued_copy, issued_last, issued_idx)),
            alu.o.ready.eq(1),
        ]
        with m.If(issued & ~issued_copy):
            m.d.sync += self.alu_beats.eq(self.alu_beats + 1)
        # the copied entry follows the ALU's pipeline (it always advances: o.ready is 1)
        copy_data = recv_r.data
        for k in range(ReductionAlu.latency):
            reg = Signal(width, name=f"copy_d{k + 1}")
            m.d.sync += reg.eq(copy_data)
            copy_data = reg
        tag = alu.o.payload.tag
        out_copy, out_last, out_idx = tag[0], tag[1], tag[2:]
        m.d.comb += [
            send_w.addr.eq(out_idx),
            send_w.data.eq(Mux(out_copy, copy_data, alu.o.payload.data)),
            send_w.en.eq(alu.o.valid),
        ]
        with m.If(alu.o.valid):
            m.d.sync += rx_beats.eq(rx_beats + 1)
        with m.If(alu.o.valid & out_last):
            m.d.sync += rx_done.eq(rx_done + 1)

        # ---- write-back: chunk `drained` from SendBuf[drained % 2] once the ring finished it ------------------
        wb_go = running & (drained < ringed)
        m.d.comb += [axi.awvalid.eq(wb_go & (aw_entry < ranks)),
                     axi.awaddr.eq(wb_addr + (aw_entry << (eb_bits + bb_bits)))]
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += aw_entry.eq(aw_entry + 1)
        wb_pend = Signal()
        wb_last = Signal()
        wb_adv = ~axi.wvalid | axi.wready
        wb_can = wb_go & (wb_issue < entry_beats_total)
        with m.If(wb_adv):
            m.d.sync += wb_pend.eq(wb_can)
            with m.If(wb_can):
                m.d.sync += [wb_issue.eq(wb_issue + 1), wb_last.eq(wb_issue[:eb_bits] == eb - 1)]
        m.d.comb += [axi.wvalid.eq(wb_pend), axi.wdata.eq(send_wb.data), axi.wlast.eq(wb_last),
                     send_wb.addr.eq(Cat(wb_issue[:eb_bits + entry_bits], drained[0])), send_wb.en.eq(wb_adv)]
        # the chunk's last beat left and every AW went: its SendBuf half is free
        with m.If(wb_go & (wb_issue == entry_beats_total) & ~axi.wvalid & (aw_entry == ranks)):
            m.d.sync += [drained.eq(drained + 1), wb_addr.eq(wb_addr + self.stride), aw_entry.eq(0),
                         wb_issue.eq(0)]
        aw_fire = axi.awvalid & axi.awready
        m.d.sync += outstanding.eq(outstanding + aw_fire - axi.bvalid)
        with m.If(axi.bvalid & axi.bresp[1]):
            m.d.sync += self.err.eq(1)
        return m
