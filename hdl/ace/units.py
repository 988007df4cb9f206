"""The engine's execution units: each carries out one kind of program step for the FSMs.

``LoadUnit``   LOAD: TX DMA reads a block from NPU memory into a slot (posted: several in flight).
``SendUnit``   SEND: a slot -> one message on an output port (one per port).
``RecvUnit``   RECV: a message from an input port's landing buffer -> slot, reduced with the slot by the ALU if
               the step says so, and forwarded on another port in the same pass (one per port).
``StoreUnit``  STORE: RX DMA, a slot -> NPU memory (posted: several in flight; reports each write response).

Units take a job from a stream (``job``: every parameter the step needs, computed by the control unit's
decoder; the unit's ``job.ready`` says it has room) and report ``done`` with the FSM number and a
:class:`~syncfabric.sim.golden.types.Status`.
"""

from amaranth.hdl import Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.program import FIELDS, StepOp
from ...sim.golden.types import Status
from ..common.layouts import CHANNEL_BITS, DTYPE_SHAPE, OP_SHAPE, packet_header_layout
from ..common.logic import late, one_hot, one_hot_mux
from ..common.skid import SkidBuffer
from .dma import dma_cmd_layout
from .geometry import BlockGeometry
from .link import tx_beat_layout
from .recvback import RecvWriteBack
from .recvissue import RecvIssue
from .sram import BankStreamer, sram_read_layout, sram_write_layout
from .unitio import STATUS_SHAPE, _w, done_layout, fwd_data_layout, fwd_msg_layout

__all__ = ["job_layouts", "LoadUnit", "LoadSequencer", "SendUnit", "RecvUnit", "TxMux", "StoreUnit", "beat_stream", "dma_cmd_layout",
           "fwd_msg_layout", "fwd_data_layout"]


def beat_stream(cfg, last=True, err=False):
    fields = {"data": unsigned(8 * cfg.beat_bytes)}
    if last:
        fields["last"] = 1
    if err:
        fields["err"] = 1
    return stream.Signature(data.StructLayout(fields))


def job_layouts(cfg):
    """Job layouts of the units (the payloads of their ``job`` streams), keyed by unit name."""
    rl = sram_read_layout(cfg)
    common = {
        "fsm": _w(cfg.n_fsms),
        "cmd": _w(cfg.n_cmds),
        "buf": rl.members["buf"],
        "sram_addr": rl.members["addr"],
        "beats": unsigned(16),
    }
    return {
        # zero: a null contribution's LOAD, which fills the slot with zeros and reads no memory
        "load": data.StructLayout({**common, "addr": unsigned(cfg.addr_width), "nbytes": unsigned(24),
                                   "slot": unsigned(10), "zero": 1}),
        "store": data.StructLayout({**common, "addr": unsigned(cfg.addr_width), "nbytes": unsigned(24),
                                    "slot": unsigned(10)}),
        "send": data.StructLayout({**common, "hdr": packet_header_layout()}),
        "recv": data.StructLayout({
            **common,
            "reduce": 1, "dtype": DTYPE_SHAPE, "op": OP_SHAPE,
            "fwd": 1, "fwd_port": unsigned(3),
            "ch": unsigned(CHANNEL_BITS),        # the landing channel the message is in
            "exp": packet_header_layout(),      # the header the step waits for (tag, chunk, phase, key, length, final)
            "fwd_hdr": packet_header_layout(),  # the header of the forwarded message
        }),
    }


class LoadUnit(wiring.Component):
    """TX DMA: LOAD jobs -> DMA read commands; read beats -> the job's slot. Jobs queue up (``job``) so
    an FSM can post its LOADs back to back and the DMA keeps several reads in flight. ``room2``: the queue has
    room for two jobs (an FSM's LOAD granted now goes out next cycle, after a load sequencer's LOAD may have
    taken one place). ``done`` pulses the cycle after a job's last beat is written.

    Beats reach the SRAM through a register slice (:class:`~..common.skid.SkidBuffer`), which carries each
    beat's write and, with the job's last beat, its ``done`` report: the bank's arbitration (``wr_free``: no
    RECV writes the bank) holds the slice only, not the in-flight queue and the DMA's read data behind it."""

    QUEUE = 4

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "job": In(stream.Signature(job_layouts(cfg)["load"])), "room2": Out(1),
            "rd_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "rd_data": In(beat_stream(cfg, err=True)),
            "wr": Out(sram_write_layout(cfg)),
            "wr_free": In(1, init=1),       # no RECV writes the bank this cycle (ChunkSram.wr_free)
            "done": Out(done_layout(cfg)),
            "bytes": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        jl = job_layouts(cfg)["load"]
        m.submodules.jobs = jobs = fifo.SyncFIFOBuffered(width=jl.size, depth=self.QUEUE)
        m.submodules.inflight = inflight = fifo.SyncFIFOBuffered(width=jl.size, depth=self.QUEUE)
        m.d.comb += [
            self.job.ready.eq(jobs.w_rdy), self.room2.eq(jobs.level <= self.QUEUE - 2),
            jobs.w_en.eq(self.job.valid),
            jobs.w_data.eq(self.job.payload.as_value()),
        ]
        head = data.View(jl, jobs.r_data)
        # a zero job issues no read: it goes straight to the in-flight queue and, at its head, writes zeros
        take = jobs.r_rdy & inflight.w_rdy & (head.zero | self.rd_cmd.ready)
        m.d.comb += [
            self.rd_cmd.valid.eq(jobs.r_rdy & inflight.w_rdy & ~head.zero),
            self.rd_cmd.payload.addr.eq(head.addr),
            self.rd_cmd.payload.length.eq(head.nbytes),
            self.rd_cmd.payload.domain.eq(head.cmd + 1),        # the firewall's domain of the job's command
            jobs.r_en.eq(take),
            inflight.w_en.eq(take),
            inflight.w_data.eq(jobs.r_data),
        ]
        cur = data.View(jl, inflight.r_data)
        # the write slice: a beat's SRAM write and, on a job's last beat, the job's done report
        dl = done_layout(cfg)
        wl = data.StructLayout({"buf": dl.members["buf"], "addr": sram_write_layout(cfg).members["addr"],
                                "data": unsigned(8 * cfg.beat_bytes), "last": 1,
                                **{k: dl.members[k] for k in ("fsm", "cmd", "slot", "status")}})
        m.submodules.wslice = ws = SkidBuffer(wl)
        count = Signal(16)
        beat = Signal()             # a beat of the head job enters the write slice this cycle
        last = Signal()
        # a zero job's last beat: count + 1 >= beats, from flip-flops (it pops the in-flight queue):
        # ``first`` (count == 0) and ``near`` (count + 1 >= beats, decided when count stepped)
        first, near = Signal(init=1), Signal()
        w = ws.i.payload
        m.d.comb += [
            self.rd_data.ready.eq(inflight.r_rdy & ~cur.zero & ws.i.ready),
            beat.eq(Mux(cur.zero, inflight.r_rdy & ws.i.ready, self.rd_data.valid & self.rd_data.ready)),
            last.eq(Mux(cur.zero, Mux(first, cur.beats <= 1, near), self.rd_data.payload.last)),
            ws.i.valid.eq(beat),
            w.buf.eq(cur.buf), w.addr.eq(cur.sram_addr + count),
            w.data.eq(Mux(cur.zero, 0, self.rd_data.payload.data)), w.last.eq(last),
            w.fsm.eq(cur.fsm), w.cmd.eq(cur.cmd), w.slot.eq(cur.slot),
            w.status.eq(Mux(cur.zero, 0, self.rd_data.payload.err * Status.AXI_ERROR)),
        ]
        with m.If(beat):
            m.d.sync += [count.eq(count + 1), first.eq(0), near.eq(count + 2 >= cur.beats)]
            with m.If(last):
                m.d.sync += [count.eq(0), first.eq(1)]
                m.d.comb += inflight.r_en.eq(1)
        # bytes read into the slice, counted a cycle late
        m.d.sync += self.bytes.eq(self.bytes + late(m, Mux(beat & last & ~cur.zero, cur.nbytes, 0), "bytes_late"))
        # the write, when no RECV writes the bank (another slot of the chunk); done the cycle after the last
        o = ws.o.payload
        written = ws.o.valid & self.wr_free
        m.d.comb += [
            ws.o.ready.eq(self.wr_free),
            self.wr.en.eq(written), self.wr.buf.eq(o.buf), self.wr.addr.eq(o.addr), self.wr.data.eq(o.data),
        ]
        m.d.sync += self.done.valid.eq(written & o.last)
        with m.If(written & o.last):
            m.d.sync += [self.done.fsm.eq(o.fsm), self.done.cmd.eq(o.cmd), self.done.slot.eq(o.slot),
                         self.done.buf.eq(o.buf), self.done.status.eq(o.status)]
        return m


class SendUnit(wiring.Component):
    """SEND: streams ``beats`` beats of a slot to the output port after the message header.

    Pipelined: a job is taken whenever ``job.ready`` (every SRAM read of the previous job has been issued), so
    the beats of consecutive messages follow each other without a gap; headers wait in a small queue for the
    port. ``done`` pulses the cycle after the job's last SRAM read is issued: the SEND has retired (the slot
    may be rewritten) although its beats may still be on their way to the link. An empty message (``beats``
    = 0) retires the cycle after it is taken. While the port's link is down (``down``, :mod:`.txwatch`: its
    flits are dropped) every job retires with TIMEOUT.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "down": In(1),
            "job": In(stream.Signature(job_layouts(cfg)["send"])),
            "msg": Out(stream.Signature(packet_header_layout())),
            "data": Out(beat_stream(cfg)),
            "rd": Out(sram_read_layout(cfg)),
            "rdata": In(unsigned(8 * cfg.beat_bytes)),
            "done": Out(done_layout(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.streamer = st = BankStreamer(cfg)
        hl = packet_header_layout()
        m.submodules.hdrs = hdrs = fifo.SyncFIFOBuffered(width=hl.size, depth=2)
        job = self.job.payload
        cur_fsm = Signal.like(job.fsm)
        cur_cmd = Signal.like(job.cmd)
        take = self.job.valid & self.job.ready
        m.d.comb += [
            self.job.ready.eq(st.ready & hdrs.w_rdy),
            st.start.eq(take & (job.beats != 0)),
            st.buf.eq(job.buf),
            st.addr.eq(job.sram_addr),
            st.beats.eq(job.beats),
            self.rd.eq(st.rd),
            st.rdata.eq(self.rdata),
            hdrs.w_en.eq(take),
            hdrs.w_data.eq(job.hdr),
            self.msg.valid.eq(hdrs.r_rdy),
            self.msg.payload.eq(hdrs.r_data),
            hdrs.r_en.eq(self.msg.ready),
            self.data.valid.eq(st.o.valid),
            self.data.payload.data.eq(st.o.payload.data),
            self.data.payload.last.eq(st.o.payload.last),
            st.o.ready.eq(self.data.ready),
        ]
        with m.If(take):
            m.d.sync += [cur_fsm.eq(job.fsm), cur_cmd.eq(job.cmd)]
        # done: registered, from the last read of a job or at once for an empty job
        m.d.sync += [
            self.done.valid.eq(st.issued_last | (take & (job.beats == 0))),
            self.done.fsm.eq(Mux(take, job.fsm, cur_fsm)),
            self.done.cmd.eq(Mux(take, job.cmd, cur_cmd)),
            self.done.status.eq(Mux(self.down, Status.TIMEOUT, 0)),
        ]
        return m


class RecvUnit(wiring.Component):
    """RECV: takes the awaited message of the job's landing channel (``ch``: its FSM's virtual channel, through a
    switch the one of the message's source) from an input port's landing buffer,
    reduces it with the slot (``reduce``) on the unit's ALU, writes the slot and forwards the result (``fwd``).

    Pipelined in two halves so that consecutive messages stream back to back: the front end reads the landing
    buffer (and the slot's operand) of one job while the back end writes and forwards the results of the
    previous one; a third job may wait in a one-entry queue (``job.ready``). The unit keeps the job queue, the
    header check and the landing-buffer release (header pop, status) itself; :class:`~.recvissue.RecvIssue`
    reads the operand and feeds the ALU or the bypass queue, :class:`~.recvback.RecvWriteBack` writes and
    forwards the results and reports ``done``. Two jobs of one FSM may be in the
    unit at once (the control unit overlaps an FSM's consecutive RECVs on a port), but never on the same slot,
    so the two halves never touch the same SRAM rows. ``unpopped`` flags the channels whose head header
    belongs to a job the unit holds. On a point-to-point port the next RECV of that channel is granted
    against the header behind it (``nexts``): the job waits in the queue with its operand read ahead and
    takes over the landing stream the cycle the current job takes its last beat, so one FSM's consecutive
    messages stream back to back. The queued job's header is the head of its channel, or the one behind it
    while the front end's job on the same channel holds the head.

    The job's header must match the step (tag, chunk, phase, key, length); if it does
    not, the message is drained, the forward (already owed to the next rank, whose credits are reserved)
    carries zeros with ``poison`` set, the slot is not written and the step ends with PROTOCOL, or with
    MISMATCH when only the length differs: the message is the awaited one (tag, chunk, phase and key match) from
    a rank whose command has another element count. A message whose ``final`` differs from the step's (the
    chunk is its command's last on one rank and not on the other: the ranks' chunk counts differ), a
    non-empty message whose ``dtype`` differs from the command's (or, on a step that reduces, whose ``op``
    does) also comes from a rank whose command disagrees: it is processed normally but forwarded poisoned, and
    the step ends with MISMATCH. A poisoned input is processed normally but forwarded poisoned and reported
    (PROTOCOL); a CRC error on the channel is reported as LINK_CRC. The header is popped (its credit returned)
    when the message's last beat is taken.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        hl = packet_header_layout()
        W = 8 * cfg.beat_bytes
        super().__init__({
            "job": In(stream.Signature(job_layouts(cfg)["recv"])),
            # landing buffer of the input port
            "sel": Out(CHANNEL_BITS),
            "heads": In(data.ArrayLayout(hl, cfg.n_channels)),
            "nexts": In(data.ArrayLayout(hl, cfg.n_channels)),
            "hdr_pop": Out(1),
            "land": In(stream.Signature(unsigned(W))),
            "vc_err": In(cfg.n_channels),
            "err_clear": Out(1),
            # SRAM
            "rd": Out(sram_read_layout(cfg)),
            "rdata": In(unsigned(W)),
            "wr": Out(sram_write_layout(cfg)),
            # forward
            "fwd_msg": Out(stream.Signature(fwd_msg_layout())),
            "fwd_data": Out(stream.Signature(fwd_data_layout(cfg))),
            "done": Out(done_layout(cfg)),
            "alu_beats": Out(64),
            "idle": Out(1),             # no job queued or reading the landing buffer
            "unpopped": Out(cfg.n_channels),    # channels whose head header is a held job's (not yet popped)
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        jl = job_layouts(cfg)["recv"]
        beat_shift = (cfg.beat_bytes - 1).bit_length()
        m.submodules.issue = iss = RecvIssue(cfg)       # operand read, ALU / bypass
        m.submodules.back = wb = RecvWriteBack(cfg)     # slot write, forward, done
        wiring.connect(m, wiring.flipped(self.land), iss.land)
        wiring.connect(m, iss.reduced, wb.reduced)
        wiring.connect(m, iss.copied, wb.copied)
        wiring.connect(m, wb.fwd_msg, wiring.flipped(self.fwd_msg))
        wiring.connect(m, wb.fwd_data, wiring.flipped(self.fwd_data))
        m.d.comb += [self.rd.eq(iss.rd), iss.rdata.eq(self.rdata), self.wr.eq(wb.wr), self.done.eq(wb.done),
                     self.alu_beats.eq(iss.alu_beats)]

        # ---- one-entry job queue ----------------------------------------------------------------------
        nxt = Signal(jl)
        nxt_v = Signal()
        nxt_started = Signal()           # the queued job's operand read has already been started
        job_take = self.job.valid & self.job.ready
        # the landing channel of the queued job and of the front end's, one-hot in flip-flops (``unpopped``
        # goes to the issue arbiter's header match, where a decode of the 14-bit channel would sit in front)
        nxt_oh, fe_oh = Signal(cfg.n_channels), Signal(cfg.n_channels)
        m.d.comb += self.job.ready.eq(~nxt_v)
        with m.If(job_take):
            m.d.sync += [nxt.eq(self.job.payload), nxt_v.eq(1), nxt_started.eq(0),
                         nxt_oh.eq(one_hot(self.job.payload.ch, cfg.n_channels))]

        # ---- front end ----------------------------------------------------------------------------------
        fe = Signal(jl)
        fe_v = Signal()
        drain = Signal()                 # the header did not match: discard the message
        # landing beats still to take (the step's, or the arriving message's when draining): a down-counter,
        # with ``left == 0`` and ``left == 1`` kept in flip-flops beside it, so that the job's end and the
        # issue stage's run flag (which decide the landing buffer's read and the slot's write) start at
        # registers instead of behind a 16-bit zero test (at the design point that test, the RX port's ready
        # and the landing buffer's read pointers were a 1.2 ns path)
        left = Signal(16)
        left_0, left_1 = Signal(init=1), Signal()
        fe_status = Signal(STATUS_SHAPE)
        land_take = self.land.valid & self.land.ready
        fe_end = Signal()                # the front end finishes its job this cycle
        m.d.comb += [
            self.idle.eq(~fe_v & ~nxt_v),
            self.sel.eq(fe.ch),
            fe_end.eq(fe_v & (left_0 | (left_1 & land_take))),
        ]
        vc_err = Signal()
        m.d.comb += vc_err.eq(self.vc_err.bit_select(fe.ch, 1))
        m.d.comb += self.unpopped.eq(Mux(nxt_v, nxt_oh, 0) | Mux(fe_v, fe_oh, 0))

        # the next job's header check: against the head of its channel, or the header behind it while the
        # front end's job on the same channel still holds the head (granted only when its header is there).
        # That header does not change while the job waits (the pop that ends the front end's job makes the
        # header behind the head), so the check runs from the queue's registers into registers (``chk``),
        # valid from the job's second cycle in the queue: the hand-over below only reads its outcome.
        # (selected by the jobs' one-hot channel registers, an AND-OR: a decode of the channel number and a mux
        # tree over the design point's 52 channels were the unit's worst path)
        head = Signal(packet_header_layout())
        pick = [Value.cast(Mux(fe_v & fe_oh[c], self.nexts[c], self.heads[c])) for c in range(cfg.n_channels)]
        m.d.comb += head.eq(one_hot_mux([(nxt_oh[c], pick[c]) for c in range(cfg.n_channels)]))
        # ``order``: the message is not the one the step waits for (another tag, chunk, phase or key: the ranks'
        # messages are out of order, PROTOCOL). ``mismatch``: it cannot be processed (out of order, or another
        # length): drained. ``disagree``: the sender's command disagrees with this one - on the element count
        # (another length, or another ``final``: the same chunk is the last of one rank's command and not of the
        # other's), on the element type, or on the operator where the step reduces (type and operator only on a
        # message with elements: an empty one, e.g. a barrier's, has none to disagree on). A disagreeing message
        # that is not drained is processed; the step ends with MISMATCH (``order`` wins: PROTOCOL) and its
        # forward is poisoned.
        chk_l = data.StructLayout({"order": 1, "mismatch": 1, "disagree": 1, "poison": 1, "drain_beats": 16})
        chk, chk_valid = Signal(chk_l), Signal()
        load = Signal()
        order = ((head.tag != nxt.exp.tag) | (head.chunk != nxt.exp.chunk) | (head.phase != nxt.exp.phase)
                 | (head.key != nxt.exp.key))
        length = head.length != nxt.exp.length
        m.d.sync += [
            chk.order.eq(order),
            chk.mismatch.eq(order | length),
            chk.disagree.eq(length | (head.final != nxt.exp.final)
                            | ((nxt.beats != 0) & ((head.dtype != nxt.dtype) | (nxt.reduce & (head.op != nxt.op))))),
            chk.poison.eq(head.poison),
            chk.drain_beats.eq((head.length + cfg.beat_bytes - 1) >> beat_shift),
            chk_valid.eq(nxt_v & ~load),
        ]
        mismatch = chk.mismatch
        needs_operand = ~mismatch & nxt.reduce & (nxt.beats != 0)
        prestart = Signal()
        m.d.comb += [
            # the operand of the queued job is read ahead, as soon as the current job's reads are issued
            iss.operand.valid.eq(nxt_v & chk_valid & ~nxt_started & needs_operand),
            iss.operand.payload.buf.eq(nxt.buf), iss.operand.payload.addr.eq(nxt.sram_addr),
            iss.operand.payload.beats.eq(nxt.beats),
            prestart.eq(iss.operand.valid & iss.operand.ready),
            # the job moves on to the front end (and is queued at the back end) when its operand is started
            wb.job.valid.eq(nxt_v & chk_valid & (~fe_v | fe_end)
                            & (nxt_started | ~needs_operand | iss.operand.ready)),
            load.eq(wb.job.valid & wb.job.ready),
        ]
        with m.If(prestart & ~load):
            m.d.sync += nxt_started.eq(1)
        with m.If(load):
            m.d.sync += [
                fe.eq(nxt), fe_oh.eq(nxt_oh), fe_v.eq(1), nxt_v.eq(job_take), drain.eq(mismatch),
                left.eq(Mux(mismatch, chk.drain_beats, nxt.beats)),
                left_0.eq(Mux(mismatch, chk.drain_beats == 0, nxt.beats == 0)),
                left_1.eq(Mux(mismatch, chk.drain_beats == 1, nxt.beats == 1)),
                fe_status.eq(Mux(chk.order, Status.PROTOCOL,
                                 Mux(chk.disagree, Status.MISMATCH, Mux(chk.poison, Status.PROTOCOL, 0)))),
            ]
        with m.Elif(fe_end):
            m.d.sync += fe_v.eq(0)
        wj = wb.job.payload
        m.d.comb += [
            *[wj[k].eq(nxt[k]) for k in ("fsm", "cmd", "buf", "sram_addr", "beats", "reduce", "fwd", "fwd_port")],
            wj.fill.eq(mismatch),
            wj.fwd_hdr.eq(nxt.fwd_hdr),
            wj.fwd_hdr.poison.eq(nxt.fwd_hdr.poison | mismatch | chk.disagree | chk.poison),
            # landing beats: dropped when draining, else reduced with the operand or passed through
            iss.mode.run.eq(fe_v & ~left_0), iss.mode.drain.eq(drain), iss.mode.reduce.eq(fe.reduce),
            iss.mode.dtype.eq(fe.dtype), iss.mode.op.eq(fe.op),
        ]
        with m.If(land_take & ~load):     # a load in the job's last-beat cycle restarts the count
            m.d.sync += [left.eq(left - 1), left_0.eq(left_1), left_1.eq(left == 2)]
        # end of the front end's job: pop its header, report errors of its channel
        m.d.comb += [
            self.hdr_pop.eq(fe_end),
            self.err_clear.eq(fe_end & vc_err),
            wb.status.valid.eq(fe_end),
            wb.status.payload.eq(Mux(vc_err, Status.LINK_CRC, fe_status)),
        ]
        return m


class TxMux(wiring.Component):
    """The messages of one output port from its send unit (source 0) and the forwards of the receive units
    (source ``1 + j``), in the order the control unit granted them.

    ``order`` takes one entry per granted message (``src``, ``empty``: a header-only message); headers go to
    the port in that order and, independently, the data beats of the non-empty messages (switching source
    after a beat with ``last``), which lets the next message's header be taken while the previous message's
    last beats are still flowing, as :class:`~syncfabric.hdl.ace.link.TxPort` expects. A receive unit's
    forwards carry their port: the mux takes only those addressed to it.
    """

    DEPTH = 4

    def __init__(self, cfg, port, n_recv):
        self.cfg, self.port, self.n_recv = cfg, port, n_recv
        n_src = 1 + n_recv
        super().__init__({
            "order": In(stream.Signature(data.StructLayout({"src": range(n_src), "empty": 1}))),
            "send_msg": In(stream.Signature(packet_header_layout())),
            "send_data": In(beat_stream(cfg)),
            "fwd_msg": In(data.ArrayLayout(fwd_msg_layout(), n_recv)),
            "fwd_msg_valid": In(n_recv),
            "fwd_msg_ready": Out(n_recv),
            "fwd_data": In(data.ArrayLayout(fwd_data_layout(cfg), n_recv)),
            "fwd_data_valid": In(n_recv),
            "fwd_data_ready": Out(n_recv),
            "msg": Out(stream.Signature(packet_header_layout())),
            "data": Out(stream.Signature(tx_beat_layout(cfg.beat_bytes))),
        })

    def elaborate(self, platform):
        m = Module()
        n_src = 1 + self.n_recv
        sw = max(1, (n_src - 1).bit_length())
        m.submodules.horder = horder = fifo.SyncFIFOBuffered(width=sw, depth=self.DEPTH)
        m.submodules.dorder = dorder = fifo.SyncFIFOBuffered(width=sw, depth=self.DEPTH)
        m.d.comb += [
            self.order.ready.eq(horder.w_rdy & dorder.w_rdy),
            horder.w_en.eq(self.order.valid & self.order.ready),
            horder.w_data.eq(self.order.payload.src),
            dorder.w_en.eq(self.order.valid & self.order.ready & ~self.order.payload.empty),
            dorder.w_data.eq(self.order.payload.src),
        ]
        hs, ds = horder.r_data, dorder.r_data
        with m.If(horder.r_rdy):
            with m.If(hs == 0):
                m.d.comb += [self.msg.valid.eq(self.send_msg.valid), self.msg.payload.eq(self.send_msg.payload),
                             self.send_msg.ready.eq(self.msg.ready)]
            for j in range(self.n_recv):
                with m.Elif(hs == 1 + j):
                    mine = self.fwd_msg_valid[j] & (self.fwd_msg[j].port == self.port)
                    m.d.comb += [self.msg.valid.eq(mine), self.msg.payload.eq(self.fwd_msg[j].hdr),
                                 self.fwd_msg_ready[j].eq(mine & self.msg.ready)]
        m.d.comb += horder.r_en.eq(self.msg.valid & self.msg.ready)
        last = Signal()
        with m.If(dorder.r_rdy):
            with m.If(ds == 0):
                m.d.comb += [self.data.valid.eq(self.send_data.valid),
                             self.data.payload.data.eq(self.send_data.payload.data),
                             last.eq(self.send_data.payload.last), self.send_data.ready.eq(self.data.ready)]
            for j in range(self.n_recv):
                with m.Elif(ds == 1 + j):
                    mine = self.fwd_data_valid[j] & (self.fwd_data[j].port == self.port)
                    m.d.comb += [self.data.valid.eq(mine), self.data.payload.data.eq(self.fwd_data[j].data),
                                 self.data.payload.poison.eq(self.fwd_data[j].poison),
                                 last.eq(self.fwd_data[j].last), self.fwd_data_ready[j].eq(mine & self.data.ready)]
        m.d.comb += dorder.r_en.eq(self.data.valid & self.data.ready & last)
        return m


class LoadSequencer(wiring.Component):
    """The TX DMA's prefetcher: for every dispatched chunk, in dispatch order, issues the LOADs at the head of
    its program's first phase (instructions ``first`` to ``end``) as soon as the chunk has its buffer, so that
    a chunk's data is in SRAM before (or while) its FSM gets to it - ACE loads a chunk when SRAM space allows,
    not when an FSM is free. ``issue`` is the load job it offers; the control unit takes it (``issue.ready``) in
    a cycle in which no FSM issues a LOAD of its own.

    Per LOAD it needs the block's geometry: it names the command on ``geo_cmd`` and the control unit answers on
    ``geo_*`` :attr:`geo_latency` cycles later (a pipelined ``BlockGeometry``). An instruction that is not a
    LOAD is reported on ``error`` (ILLEGAL_INSTRUCTION) and skipped; zero-byte blocks are skipped. A skip
    (``skip``: the slot is ready without a LOAD) goes out in the cycle of the decision, or, in a wide engine
    (``cfg.control_stages``, whose skip reaches every buffer's loading flags), from flip-flops a cycle later."""

    def __init__(self, cfg):
        self.cfg = cfg
        #: Cycles from the geometry inputs (the word in hand) to its outputs: the ``BlockGeometry`` pipeline.
        self.geo_latency = BlockGeometry.latency_for(cfg)
        rl = sram_read_layout(cfg)
        super().__init__({
            "entry": In(stream.Signature(data.StructLayout({
                "cmd": _w(cfg.n_cmds), "chunk": unsigned(16), "buf": rl.members["buf"],
                "first": unsigned(11), "end": unsigned(11)}))),
            "imem_addr": Out(10),
            "imem_data": In(64),
            "geo_cmd": Out(_w(cfg.n_cmds)),
            "geo_chunk": Out(16),
            "geo_block": Out(11),
            "geo_nbytes": In(24),
            "geo_empty": In(1),
            "geo_beats": In(16),
            "geo_addr": In(cfg.addr_width),
            "slot_beats": In(16),
            "issue": Out(stream.Signature(job_layouts(cfg)["load"])),
            "error": Out(data.StructLayout({"valid": 1, "cmd": _w(cfg.n_cmds)})),
            "skip": Out(data.StructLayout({"valid": 1, "buf": rl.members["buf"], "slot": unsigned(10)})),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cur = Signal.like(self.entry.payload)
        pc = Signal(11)
        word = Signal(64)
        geo_wait = Signal(range(max(2, self.geo_latency)))
        sram_addr = Signal.like(self.issue.payload.sram_addr)   # the slot's place: multiplied while geometry runs
        slot_beats = Signal.like(self.slot_beats)   # the command's, registered: the lookup is in the control unit
        fields = {name: (lsb, width) for name, lsb, width in FIELDS}
        skip = self.skip
        if self.cfg.control_stages:
            skip = Signal.like(self.skip, name="skip_now")
            m.d.sync += self.skip.eq(skip)

        def field(name):
            lsb, width = fields[name]
            return word[lsb:lsb + width]

        m.d.comb += [
            self.imem_addr.eq(pc),
            self.geo_cmd.eq(cur.cmd),
            self.geo_chunk.eq(cur.chunk),
            self.geo_block.eq(field("block")),
            self.issue.payload.cmd.eq(cur.cmd),
            self.issue.payload.buf.eq(cur.buf),
            self.issue.payload.slot.eq(field("slot")),
            self.issue.payload.sram_addr.eq(sram_addr),
            self.issue.payload.beats.eq(self.geo_beats),
            self.issue.payload.addr.eq(self.geo_addr),
            self.issue.payload.nbytes.eq(self.geo_nbytes),
        ]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.entry.valid):
                    m.d.comb += self.entry.ready.eq(1)
                    m.d.sync += [cur.eq(self.entry.payload), pc.eq(self.entry.payload.first)]
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += self.busy.eq(1)
                with m.If(pc >= cur.end):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "WORD"
            with m.State("WORD"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [word.eq(self.imem_data), geo_wait.eq(self.geo_latency - 1),
                             slot_beats.eq(self.slot_beats)]
                m.next = "GEO"
            with m.State("GEO"):         # the block's geometry is geo_latency cycles away
                m.d.comb += self.busy.eq(1)
                m.d.sync += [geo_wait.eq(geo_wait - 1), sram_addr.eq(field("slot") * slot_beats)]
                with m.If(geo_wait == 0):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += self.busy.eq(1)
                with m.If(field("op") != StepOp.LOAD):
                    # reported, and its slot released as if loaded, so that no step waits for it forever
                    m.d.comb += [self.error.valid.eq(1), self.error.cmd.eq(cur.cmd),
                                 skip.valid.eq(1), skip.buf.eq(cur.buf), skip.slot.eq(field("slot"))]
                    m.d.sync += pc.eq(pc + 1)
                    m.next = "FETCH"
                with m.Elif(self.geo_empty):            # an empty block: nothing to load, the slot is ready
                    m.d.comb += [skip.valid.eq(1), skip.buf.eq(cur.buf), skip.slot.eq(field("slot"))]
                    m.d.sync += pc.eq(pc + 1)
                    m.next = "FETCH"
                with m.Else():
                    m.d.comb += self.issue.valid.eq(1)
                    with m.If(self.issue.ready):
                        m.d.sync += pc.eq(pc + 1)
                        m.next = "FETCH"
        return m


class StoreUnit(wiring.Component):
    """RX DMA: STORE jobs -> DMA writes of a slot's beats to the block's output range in NPU memory.

    The FSMs post STOREs as they meet them (each right after the last write of its slot, so a block goes back
    to memory as soon as it is final, while the rest of the chunk is still on the links); jobs queue up
    (``job``) and their writes stream back to back. A job is reported ``done`` (with its buffer and an
    AXI_ERROR status on an error response) when its write response arrives, so the control unit knows when
    every result of a chunk is in memory and its buffer can be reused. Zero-byte STOREs never reach the unit.
    """

    QUEUE = 4
    #: STOREs issued to the DMA writer and not yet acknowledged.
    IN_FLIGHT = 8

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "job": In(stream.Signature(job_layouts(cfg)["store"])),
            "wr_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "wr_data": Out(beat_stream(cfg)),
            "wr_done": In(stream.Signature(data.StructLayout({"err": 1}))),
            "rd": Out(sram_read_layout(cfg)),
            "rd_free": In(1, init=1),       # no SEND or RECV reads the bank this cycle (ChunkSram.rd_free)
            "rdata": In(unsigned(8 * cfg.beat_bytes)),
            "done": Out(done_layout(cfg)),
            "bytes": Out(64),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        jl = job_layouts(cfg)["store"]
        m.submodules.streamer = st = BankStreamer(cfg)
        m.submodules.jobs = jobs = fifo.SyncFIFOBuffered(width=jl.size, depth=self.QUEUE)
        # plain SyncFIFO: its w_rdy is exactly level < depth, and a write issues only when it is set
        m.submodules.inflight = inflight = fifo.SyncFIFO(width=jl.size, depth=self.IN_FLIGHT)
        head = data.View(jl, jobs.r_data)
        issue = Signal()
        m.d.comb += [
            self.job.ready.eq(jobs.w_rdy),
            jobs.w_en.eq(self.job.valid),
            jobs.w_data.eq(self.job.payload.as_value()),
            # a write command goes out with its data run queued in the streamer right behind the previous one
            self.wr_cmd.valid.eq(jobs.r_rdy & st.ready & inflight.w_rdy),
            self.wr_cmd.payload.addr.eq(head.addr),
            self.wr_cmd.payload.length.eq(head.nbytes),
            self.wr_cmd.payload.domain.eq(head.cmd + 1),        # the firewall's domain of the job's command
            issue.eq(self.wr_cmd.valid & self.wr_cmd.ready),
            jobs.r_en.eq(issue),
            inflight.w_en.eq(issue),
            inflight.w_data.eq(jobs.r_data),
            st.start.eq(issue),
            st.buf.eq(head.buf),
            st.addr.eq(head.sram_addr),
            st.beats.eq(head.beats),
            self.rd.eq(st.rd),
            st.gate.eq(self.rd_free),
            st.rdata.eq(self.rdata),
            self.wr_data.valid.eq(st.o.valid),
            self.wr_data.payload.data.eq(st.o.payload.data),
            self.wr_data.payload.last.eq(st.o.payload.last),
            st.o.ready.eq(self.wr_data.ready),
            self.busy.eq(jobs.r_rdy | inflight.r_rdy | st.busy),
        ]
        with m.If(issue):
            m.d.sync += self.bytes.eq(self.bytes + head.nbytes)
        # write responses come back in command order
        cur = data.View(jl, inflight.r_data)
        m.d.comb += [self.wr_done.ready.eq(inflight.r_rdy), inflight.r_en.eq(self.wr_done.valid)]
        m.d.comb += [
            self.done.valid.eq(self.wr_done.valid & inflight.r_rdy),
            self.done.fsm.eq(cur.fsm),
            self.done.cmd.eq(cur.cmd),
            self.done.buf.eq(cur.buf),
            self.done.slot.eq(cur.slot),
            self.done.status.eq(Mux(self.wr_done.payload.err, Status.AXI_ERROR, Status.OK)),
        ]
        return m
