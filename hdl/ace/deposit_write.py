"""The deposit unit's write engine: moves one message's payload to NPU memory through the RX DMA.

A job names where the payload comes from (``src``):

* ``LANDING``: the borrowed landing channel (``land``; the job's ``port`` and ``ch``, which the writer shows
  while it holds them): one write command, then ``beats`` beats from the landing buffer to the writer, the
  header popped with the last beat;
* ``SPILL``: a spill record: one write command, one read command of record ``rd_addr``, then the read beats
  straight into the writer (a read error marks the copy bad);
* ``DRAIN``: nothing is written (an empty message, or one that cannot be placed): the landing channel's
  ``beats`` beats are taken and dropped and its header popped.

The writer moves one job's beats at a time but does not wait for a write's acknowledgement (``wr_done``)
before it takes the next job: up to ``MAX_PENDING`` writes may await theirs (``pending``), each with the flags
its status needs, and the acknowledgements come back in the order of the writes (the RX DMA and its mux are in
order). While it moves a job's beats it takes the next job into a one-job slot (``job.ready`` is a function of
registers: the slot empty and room for both writes), and starts it in the cycle after the last beat, so that
back-to-back jobs cost one cycle of write command each and no cycle in between. ``done`` pulses
(combinationally) once per job, in the order of the jobs: in the cycle of a write's acknowledgement, or of a
drain's last beat, which waits until no write is pending so that the order holds. Its status is ``AXI_ERROR``
if the write or a read failed, else ``LINK_CRC`` if the landing channel flagged an error (``ch_err``) when its
header was popped, else ``OK``. ``hold`` is high while the job uses the landing channel (its read side is
borrowed).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from .dma import (DOMAIN_ENGINE, dma_cmd_layout, dma_done_layout, dma_read_data_layout, dma_write_data_layout,
                  domain_shape)
from ..common.layouts import CHANNEL_BITS
from .units import STATUS_SHAPE

__all__ = ["DepositSource", "DepositWriter", "deposit_job_layout", "dma_ports", "MAX_PENDING"]

#: Writes that may await their acknowledgement while the writer moves the next job's beats.
MAX_PENDING = 4


class DepositSource(enum.Enum, shape=2):
    """Where a deposit job's payload comes from."""
    LANDING = 0
    SPILL = 1
    DRAIN = 2


def deposit_job_layout(cfg):
    """A write-engine job: the source, the landing channel (RX ``port`` and ``ch``; ``LANDING`` and ``DRAIN``),
    the write and (``SPILL``) read addresses, the payload bytes and beats, and the write's protection domain
    (the receiving command's, or the engine's for a spill record; a spill record is read in the engine's)."""
    return data.StructLayout({"src": DepositSource, "port": range(max(2, cfg.n_ports)), "ch": CHANNEL_BITS,
                              "wr_addr": unsigned(cfg.addr_width),
                              "rd_addr": unsigned(cfg.addr_width), "length": unsigned(20), "beats": unsigned(16),
                              "wr_domain": domain_shape(cfg)})


def dma_ports(cfg):
    """The deposit unit's DMA ports: read command and data (spill records), write command, data and
    acknowledgement."""
    return {
        "rd_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
        "rd_data": In(stream.Signature(dma_read_data_layout(cfg))),
        "wr_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
        "wr_data": Out(stream.Signature(dma_write_data_layout(cfg))),
        "wr_done": In(stream.Signature(dma_done_layout())),
    }


class DepositWriter(wiring.Component):
    """One job's beats at a time, up to ``MAX_PENDING`` writes awaiting their acknowledgement (see the module
    docstring).

    Ports: ``job`` (ready when the next-job slot is empty and the pending writes leave room for its write besides
    the one moving; taken while the writer is idle, the job starts the cycle after, else in the cycle after the
    current job's last beat); the landing channel's read side (``land``, ``ch_err`` in, ``hdr_pop``, ``err_clear``
    out), ``hold`` and the held channel (``port``, ``ch``: the job's), the next job's channel (``next_valid``,
    ``next_port``, ``next_ch``: taken, not started, its message not popped); the DMA read command and data, write
    command, data and acknowledgement; ``pending`` (a write awaits its acknowledgement); ``done`` (valid, status).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "job": In(stream.Signature(deposit_job_layout(cfg))),
            "land": In(stream.Signature(unsigned(8 * cfg.beat_bytes))),
            "ch_err": In(1),
            "hdr_pop": Out(1),
            "err_clear": Out(1),
            "hold": Out(1),
            "port": Out(range(max(2, cfg.n_ports))),
            "ch": Out(CHANNEL_BITS),
            "next_valid": Out(1),
            "next_port": Out(range(max(2, cfg.n_ports))),
            "next_ch": Out(CHANNEL_BITS),
            **dma_ports(cfg),
            "pending": Out(1),
            "done": Out(data.StructLayout({"valid": 1, "status": STATUS_SHAPE})),
        })

    def elaborate(self, platform):
        m = Module()
        job = Signal(deposit_job_layout(self.cfg))
        count = Signal(16)
        last_beat = Signal(17)           # job.beats - 1, taken with the job: the last beat is a compare, no add
        rd_err = Signal()
        land, wr_data = self.land, self.wr_data
        # per write awaiting its acknowledgement: the landing channel's error flag at the pop, a read error
        flags = data.StructLayout({"crc": 1, "rd_err": 1})
        m.submodules.pend = pend = fifo.SyncFIFO(width=flags.size, depth=MAX_PENDING)
        head = data.View(flags, pend.r_data)
        push = data.View(flags, pend.w_data)
        m.d.comb += [self.port.eq(job.port), self.ch.eq(job.ch), self.pending.eq(pend.r_rdy)]

        # acknowledgements, in the order of the writes (a drain reports only while none is pending)
        m.d.comb += self.wr_done.ready.eq(pend.r_rdy)
        with m.If(self.wr_done.valid & pend.r_rdy):
            m.d.comb += [pend.r_en.eq(1), self.done.valid.eq(1)]
            with m.If(self.wr_done.payload.err | head.rd_err):
                m.d.comb += self.done.status.eq(Status.AXI_ERROR)
            with m.Elif(head.crc):
                m.d.comb += self.done.status.eq(Status.LINK_CRC)

        def pop_header():
            m.d.comb += [self.hdr_pop.eq(1), self.err_clear.eq(self.ch_err)]

        # the next job, taken while the current one moves its beats; ``job.ready`` needs room for its write
        # besides the pending ones and the one moving (pushed before it), so the room stays until it is pushed
        nxt = Signal(deposit_job_layout(self.cfg))
        nxt_valid = Signal()
        moving = Signal()                # a job in hand whose write is not pushed yet (WCMD to its last beat)
        taken = self.job.valid & self.job.ready
        m.d.comb += [self.next_valid.eq(nxt_valid), self.next_port.eq(nxt.port), self.next_ch.eq(nxt.ch)]
        m.d.comb += self.job.ready.eq(~nxt_valid & (pend.level + moving < MAX_PENDING))

        def start(payload):
            """Take ``payload`` as the job in hand (count is 0: it is cleared at every job's end, so that the
            job's valid, which the deposit unit decides late, selects no count)."""
            m.d.sync += [job.eq(payload), rd_err.eq(0), last_beat.eq(payload.beats - 1)]
            with m.If(payload.src == DepositSource.DRAIN):
                m.next = "DRAIN"
            with m.Else():
                m.next = "WCMD"

        ending = Signal()                # the job in hand ends in this cycle

        def finish():
            """The job in hand is over: the next one from the slot, or the one taken in this cycle, else idle
            (no cycle without a job in between: the landing channel stays held)."""
            m.d.comb += ending.eq(1)
            with m.If(nxt_valid):
                m.d.sync += nxt_valid.eq(0)
                start(nxt)
            with m.Elif(taken):
                start(self.job.payload)
            with m.Else():
                m.next = "IDLE"

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(taken):
                    start(self.job.payload)
            with m.State("WCMD"):
                m.d.comb += [self.hold.eq(job.src == DepositSource.LANDING), self.wr_cmd.valid.eq(1),
                             self.wr_cmd.payload.addr.eq(job.wr_addr), self.wr_cmd.payload.length.eq(job.length),
                             self.wr_cmd.payload.domain.eq(job.wr_domain)]
                with m.If(self.wr_cmd.ready):
                    with m.If(job.src == DepositSource.SPILL):
                        m.next = "RCMD"
                    with m.Else():
                        m.next = "WDATA"
            with m.State("WDATA"):       # landing buffer -> writer
                last = count == last_beat
                m.d.comb += [self.hold.eq(1), wr_data.valid.eq(land.valid), wr_data.payload.data.eq(land.payload),
                             wr_data.payload.last.eq(last), land.ready.eq(wr_data.ready)]
                with m.If(land.valid & wr_data.ready):
                    m.d.sync += count.eq(count + 1)
                    with m.If(last):
                        pop_header()
                        m.d.comb += [pend.w_en.eq(1), push.crc.eq(self.ch_err)]
                        m.d.sync += count.eq(0)
                        finish()
            with m.State("RCMD"):
                m.d.comb += [self.rd_cmd.valid.eq(1), self.rd_cmd.payload.addr.eq(job.rd_addr),
                             self.rd_cmd.payload.length.eq(job.length), self.rd_cmd.payload.domain.eq(DOMAIN_ENGINE)]
                with m.If(self.rd_cmd.ready):
                    m.next = "RDATA"
            with m.State("RDATA"):       # spill record -> writer
                rd = self.rd_data
                m.d.comb += [wr_data.valid.eq(rd.valid), wr_data.payload.data.eq(rd.payload.data),
                             wr_data.payload.last.eq(rd.payload.last), rd.ready.eq(wr_data.ready)]
                with m.If(rd.valid & wr_data.ready):
                    with m.If(rd.payload.err):
                        m.d.sync += rd_err.eq(1)
                    with m.If(rd.payload.last):
                        m.d.comb += [pend.w_en.eq(1), push.rd_err.eq(rd_err | rd.payload.err)]
                        finish()
            with m.State("DRAIN"):
                m.d.comb += [self.hold.eq(1), land.ready.eq(count != job.beats)]
                with m.If(land.valid & (count != job.beats)):
                    m.d.sync += count.eq(count + 1)
                with m.If(~pend.r_rdy & ((count == job.beats) | ((count == last_beat) & land.valid))):
                    pop_header()
                    m.d.comb += [self.done.valid.eq(1),
                                 self.done.status.eq(Mux(self.ch_err, Status.LINK_CRC, Status.OK))]
                    m.d.sync += count.eq(0)
                    finish()
        m.d.comb += moving.eq(fsm.ongoing("WCMD") | fsm.ongoing("WDATA") | fsm.ongoing("RCMD") | fsm.ongoing("RDATA"))
        with m.If(taken & ~fsm.ongoing("IDLE") & ~ending):
            m.d.sync += [nxt.eq(self.job.payload), nxt_valid.eq(1)]
        return m
