"""The deposit unit's write engine: moves one message's payload to NPU memory through the RX DMA.

A job names where the payload comes from (``src``):

* ``LANDING``: the borrowed landing channel (``land``): one write command, then ``beats`` beats from the
  landing buffer to the writer, the header popped with the last beat;
* ``SPILL``: a spill record: one write command, one read command of record ``rd_addr``, then the read beats
  straight into the writer (a read error marks the copy bad);
* ``DRAIN``: nothing is written (an empty message, or one that cannot be placed): the landing channel's
  ``beats`` beats are taken and dropped and its header popped.

A write is complete when the writer acknowledges it (``wr_done``). ``done`` pulses (combinationally, in the
cycle of the acknowledgement, or of the last drained beat) with the status the move adds: ``AXI_ERROR`` if the
write or a read failed, else ``LINK_CRC`` if the landing channel flagged an error (``ch_err``) when its header
was popped, else ``OK``. ``hold`` is high while the job uses the landing channel (its read side is borrowed).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Status
from .dma import (DOMAIN_ENGINE, dma_cmd_layout, dma_done_layout, dma_read_data_layout, dma_write_data_layout,
                  domain_shape)
from .units import STATUS_SHAPE

__all__ = ["DepositSource", "DepositWriter", "deposit_job_layout", "dma_ports"]


class DepositSource(enum.Enum, shape=2):
    """Where a deposit job's payload comes from."""
    LANDING = 0
    SPILL = 1
    DRAIN = 2


def deposit_job_layout(cfg):
    """A write-engine job: the source, the write and (``SPILL``) read addresses, the payload bytes and beats,
    and the write's protection domain (the receiving command's, or the engine's for a spill record; a spill
    record is read in the engine's)."""
    return data.StructLayout({"src": DepositSource, "wr_addr": unsigned(cfg.addr_width),
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
    """One deposit job at a time, from start to its write acknowledgement (see the module docstring).

    Ports: ``job`` (ready only when idle; the job starts the cycle after it is taken); the landing channel's
    read side (``land``, ``ch_err`` in, ``hdr_pop``, ``err_clear`` out) and ``hold``; the DMA read command and
    data, write command, data and acknowledgement; ``done`` (valid, status).
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
            **dma_ports(cfg),
            "done": Out(data.StructLayout({"valid": 1, "status": STATUS_SHAPE})),
        })

    def elaborate(self, platform):
        m = Module()
        job = Signal(deposit_job_layout(self.cfg))
        count = Signal(16)
        last_beat = Signal(17)           # job.beats - 1, taken with the job: the last beat is a compare, no add
        crc = Signal()                   # the landing channel flagged an error when the header was popped
        rd_err = Signal()
        land, wr_data = self.land, self.wr_data

        def pop_header():
            m.d.comb += [self.hdr_pop.eq(1), self.err_clear.eq(self.ch_err)]
            m.d.sync += crc.eq(self.ch_err)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.job.ready.eq(1)
                with m.If(self.job.valid):
                    # (count is 0 here: it is cleared on the way back to IDLE, so that the job's valid, which
                    # the deposit unit decides late, selects no count)
                    m.d.sync += [job.eq(self.job.payload), crc.eq(0), rd_err.eq(0),
                                 last_beat.eq(self.job.payload.beats - 1)]
                    with m.If(self.job.payload.src == DepositSource.DRAIN):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "WCMD"
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
                        m.next = "WDONE"
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
                        m.next = "WDONE"
            with m.State("DRAIN"):
                m.d.comb += [self.hold.eq(1), land.ready.eq(count != job.beats)]
                with m.If(land.valid & (count != job.beats)):
                    m.d.sync += count.eq(count + 1)
                with m.If((count == job.beats) | ((count == last_beat) & land.valid)):
                    pop_header()
                    m.d.comb += [self.done.valid.eq(1),
                                 self.done.status.eq(Mux(self.ch_err, Status.LINK_CRC, Status.OK))]
                    m.d.sync += count.eq(0)
                    m.next = "IDLE"
            with m.State("WDONE"):
                m.d.comb += self.wr_done.ready.eq(1)
                with m.If(self.wr_done.valid):
                    m.d.comb += self.done.valid.eq(1)
                    with m.If(self.wr_done.payload.err | rd_err):
                        m.d.comb += self.done.status.eq(Status.AXI_ERROR)
                    with m.Elif(crc):
                        m.d.comb += self.done.status.eq(Status.LINK_CRC)
                    m.d.sync += count.eq(0)
                    m.next = "IDLE"
        return m
