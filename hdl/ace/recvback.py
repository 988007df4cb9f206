"""The receive unit's back end: :class:`RecvWriteBack` writes a RECV's results into its slot, forwards them,
and reports the step done once its status has come from the front end."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import packet_header_layout
from .sram import sram_read_layout, sram_write_layout
from .unitio import STATUS_SHAPE, _w, done_layout, fwd_data_layout, fwd_msg_layout

__all__ = ["RecvWriteBack", "writeback_job_layout"]


def writeback_job_layout(cfg):
    """A RECV as the back end needs it: where its ``beats`` results go (``buf``, ``sram_addr``), where they come
    from (``reduce``: the ALU, else the bypass queue; ``fill``: nowhere, the message was drained), whether and
    where they are forwarded (``fwd``, ``fwd_port``, ``fwd_hdr``) and whom to report (``fsm``, ``cmd``)."""
    rl = sram_read_layout(cfg)
    return data.StructLayout({"fsm": _w(cfg.n_fsms), "cmd": _w(cfg.n_cmds), "buf": rl.members["buf"],
                              "sram_addr": rl.members["addr"], "beats": unsigned(16), "reduce": 1, "fwd": 1,
                              "fwd_port": unsigned(3), "fill": 1, "fwd_hdr": packet_header_layout()})


class RecvWriteBack(wiring.Component):
    """Write-back and forward sequencing of :class:`~.units.RecvUnit`.

    Ports
    -----
    job : In(stream.Signature(writeback_job_layout(cfg)))
        Taken when there is room for two jobs and two forward headers; a job with ``fwd`` queues its forward
        header (``fwd_msg``) at once.
    status : In(stream.Signature(STATUS_SHAPE, always_ready=True))
        The status of the oldest job whose front end has finished (one per job, never ahead of its job).
    reduced, copied : In(stream.Signature(unsigned(8 * beat_bytes)))
        The results of reducing and of passing-through jobs; a ``fill`` job takes none and forwards zeros.
    wr : Out(sram_write_layout(cfg))
        One result per cycle into the job's slot (not for ``fill``). Built for an FPGA's fabric
        (``cfg.fabric``) the request leaves from a register, a cycle after its result is taken (the choice of
        source and the beat count stay off the SRAM banks' write ports); ``done`` still follows the job's last
        write: it is registered from a ``finish`` that comes a cycle after the last result at the earliest, so
        the last write is in its bank before ``done`` is seen and a read after it finds it.
    fwd_msg : Out(stream.Signature(fwd_msg_layout())), fwd_data : Out(stream.Signature(fwd_data_layout(cfg)))
        The forward; a result is taken only when the forward (if any) takes it. The last forwarded beat
        waits for the job's status and carries ``poison`` when it is not OK and the forward's header does not
        already say ``poison`` (its receiver then reports ``PROTOCOL``, not a stomped packet's ``LINK_CRC``).
    done : Out(done_layout(cfg))
        Registered: the job whose results are all written and whose status is in.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        W = 8 * cfg.beat_bytes
        super().__init__({
            "job": In(stream.Signature(writeback_job_layout(cfg))),
            "status": In(stream.Signature(STATUS_SHAPE, always_ready=True)),
            "reduced": In(stream.Signature(unsigned(W))),
            "copied": In(stream.Signature(unsigned(W))),
            "wr": Out(sram_write_layout(cfg)),
            "fwd_msg": Out(stream.Signature(fwd_msg_layout())),
            "fwd_data": Out(stream.Signature(fwd_data_layout(cfg))),
            "done": Out(done_layout(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        W = 8 * cfg.beat_bytes
        jl = writeback_job_layout(cfg)
        # the back end's copy of a job, with the index of its last beat computed as it is queued (so that the
        # last beat is an equality compare of two registers on the result-taking path, not an add)
        # (and whether the forward's header already says poison: then the tail need not)
        be_l = data.StructLayout({**{k: v for k, v in jl.members.items() if k != "fwd_hdr"},
                                  "last_beat": unsigned(16), "hdr_poison": 1})
        m.submodules.beq = beq = fifo.SyncFIFOBuffered(width=be_l.size, depth=2)
        # statq is written without a w_rdy check (it holds a subset of beq's jobs, so never more than 2): it must
        # be a plain SyncFIFO, whose w_rdy is exactly level < depth. A SyncFIFOBuffered of depth 2 refuses a
        # write in the cycle after a write into it while empty (the entry is still moving to its output
        # register), which lost the status of an empty message right behind a full one and hung its chunk.
        m.submodules.statq = statq = fifo.SyncFIFO(width=STATUS_SHAPE.width, depth=2)
        m.submodules.fwdq = fwdq = fifo.SyncFIFOBuffered(width=fwd_msg_layout().size, depth=2)

        job = self.job.payload
        take = self.job.valid & self.job.ready
        be_in = Signal(be_l)
        fwd_in = Signal(fwd_msg_layout())
        m.d.comb += [
            self.job.ready.eq(beq.w_rdy & fwdq.w_rdy),
            *[be_in[k].eq(job[k]) for k in jl.members if k != "fwd_hdr"],
            be_in.last_beat.eq(job.beats - 1), be_in.hdr_poison.eq(job.fwd_hdr.poison),
            beq.w_en.eq(take), beq.w_data.eq(be_in),
            fwd_in.hdr.eq(job.fwd_hdr), fwd_in.port.eq(job.fwd_port),
            fwdq.w_en.eq(take & job.fwd), fwdq.w_data.eq(fwd_in),
            statq.w_en.eq(self.status.valid), statq.w_data.eq(self.status.payload),
        ]

        be = data.View(be_l, beq.r_data)
        wr = Signal(sram_write_layout(cfg))
        if cfg.fabric:
            m.d.sync += self.wr.eq(wr)
        else:
            m.d.comb += self.wr.eq(wr)
        wcount = Signal(16)
        res_valid = Signal()
        res_data = Signal(W)
        res_take = Signal()
        with m.If(be.fill):
            m.d.comb += res_valid.eq(1)
        with m.Elif(be.reduce):
            m.d.comb += [res_valid.eq(self.reduced.valid), res_data.eq(self.reduced.payload),
                         self.reduced.ready.eq(res_take)]
        with m.Else():
            m.d.comb += [res_valid.eq(self.copied.valid), res_data.eq(self.copied.payload),
                         self.copied.ready.eq(res_take)]
        pending = beq.r_rdy & (wcount != be.beats)
        # a forward's last beat waits for the job's status (the front end reports it when it takes the last
        # landing beat, so it is there by the time that beat's result is): a job whose input failed a check
        # (a CRC error seen only at the end of a packet already forwarded cut-through) stomps the forward's
        # last packet, so the error reaches every rank downstream instead of wrong data completing OK there
        last = Signal()
        held = Signal()
        m.d.comb += [last.eq(wcount == be.last_beat), held.eq(be.fwd & last & ~statq.r_rdy)]
        m.d.comb += [
            res_take.eq(pending & res_valid & ~held & (~be.fwd | self.fwd_data.ready)),
            self.fwd_data.valid.eq(pending & res_valid & be.fwd & ~held),
            self.fwd_data.payload.data.eq(Mux(be.fill, 0, res_data)),
            self.fwd_data.payload.last.eq(last),
            self.fwd_data.payload.poison.eq(last & (statq.r_data != 0) & ~be.hdr_poison),
            self.fwd_data.payload.port.eq(be.fwd_port),
            wr.en.eq(res_take & ~be.fill),
            wr.buf.eq(be.buf),
            wr.addr.eq(be.sram_addr + wcount),
            wr.data.eq(res_data),
            self.fwd_msg.valid.eq(fwdq.r_rdy),
            self.fwd_msg.payload.eq(fwdq.r_data),
            fwdq.r_en.eq(self.fwd_msg.ready),
        ]
        with m.If(res_take):
            m.d.sync += wcount.eq(wcount + 1)
        # the job is done once its results are written and the front end has reported its status
        finish = beq.r_rdy & (wcount == be.beats) & statq.r_rdy
        m.d.comb += [beq.r_en.eq(finish), statq.r_en.eq(finish)]
        with m.If(finish):
            m.d.sync += wcount.eq(0)
        m.d.sync += [
            self.done.valid.eq(finish),
            self.done.fsm.eq(be.fsm),
            self.done.cmd.eq(be.cmd),
            self.done.status.eq(statq.r_data),
        ]
        return m
