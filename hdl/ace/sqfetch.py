"""Submission queue reader: reads the next descriptor of the submission ring from NPU memory with the DMA.

The command processor (:class:`~.cmdproc.CommandProcessor`) asks for a descriptor with ``go`` while it has
nothing in hand and a command table slot is free. If the engine is enabled and the ring holds a descriptor
(``SQ_HEAD != SQ_TAIL``, both taken modulo ``SQ_SIZE``), the reader sends one DMA read of
``DESCRIPTOR_BYTES`` at ``SQ_BASE + index * DESCRIPTOR_BYTES``, collects the beats into ``desc`` and moves
``SQ_HEAD`` on when the last beat arrives.

The ring test and the address are registered (``SQ_SIZE - 1``, the masked indices' comparison, the 64-bit
address add: about 30 logic levels that reached the DMA read mux's arbitration): they are one cycle old, so a
doorbell is seen a cycle later, and after a fetch the reader waits a cycle (``SETTLE``) for them to see the new
``SQ_HEAD``.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import DESCRIPTOR_BYTES, descriptor_layout
from ..common.logic import late
from .dma import DOMAIN_ENGINE
from .units import beat_stream, dma_cmd_layout

__all__ = ["DescriptorFetch"]


class DescriptorFetch(wiring.Component):
    """Reads one descriptor of the submission ring per request (see the module docstring).

    Ports
    -----
    go : In(1)
        The command processor takes a descriptor now. Sampled while the reader is idle: with the engine
        enabled, a non-zero ``sq_size`` and a descriptor in the ring (as the registers were the cycle before),
        ``rd_cmd`` is valid in that cycle.
    enable, sq_base, sq_size, sq_tail : In
        Register values (CTRL.enable, SQ_BASE, SQ_SIZE, SQ_TAIL).
    sq_head : Out(32)
        SQ_HEAD: moves on (modulo ``sq_size``) in the cycle after the descriptor's last beat.
    rd_cmd, rd_data : Out, In
        The DMA read: one command, then beats (``rd_data.ready`` is high while the read is in progress).
    started : Out(1)
        High in the cycle ``rd_cmd`` is accepted.
    fetched : Out(1)
        High in the cycle the last beat is accepted; ``desc``, ``fetch_err`` and ``sq_index`` hold the new
        descriptor from the next cycle until the next ``started``.
    desc, fetch_err, sq_index : Out
        The descriptor, whether any of its beats had an AXI error, and its index in the ring.
    desc_bytes : Out(64)
        Descriptor bytes read so far (a counter register).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "go": In(1),
            "enable": In(1), "sq_base": In(64), "sq_size": In(32), "sq_tail": In(32), "sq_head": Out(32),
            "rd_cmd": Out(stream.Signature(dma_cmd_layout(cfg))),
            "rd_data": In(beat_stream(cfg, err=True)),
            "started": Out(1), "fetched": Out(1),
            "desc": Out(descriptor_layout()), "fetch_err": Out(1), "sq_index": Out(16),
            "desc_bytes": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.cfg.beat_bytes
        sq_head = self.sq_head
        desc_bits = self.desc.as_value()
        n_desc_beats = DESCRIPTOR_BYTES // W if W <= DESCRIPTOR_BYTES else 1
        beat_i = Signal(range(n_desc_beats + 1))
        # registered every cycle from the registers' values (see the module docstring)
        sq_mask, index, pending = Signal(32), Signal(32), Signal()
        addr = Signal(len(self.sq_base))
        m.d.comb += sq_mask.eq(self.sq_size - 1)
        m.d.sync += [
            index.eq(sq_head & sq_mask),
            pending.eq(self.enable & (self.sq_size != 0) & ((sq_head & sq_mask) != (self.sq_tail & sq_mask))),
            addr.eq(self.sq_base + (sq_head & sq_mask) * DESCRIPTOR_BYTES),
        ]

        # descriptor bytes read: a status counter, counted a cycle late (its 64-bit add off the DMA's read data)
        beat = Signal()
        m.d.sync += self.desc_bytes.eq(self.desc_bytes + late(m, Mux(beat, min(W, DESCRIPTOR_BYTES), 0),
                                                              "desc_bytes_late"))
        with m.FSM(name="fetch"):
            with m.State("IDLE"):
                with m.If(self.go & pending):
                    m.d.comb += [
                        self.rd_cmd.valid.eq(1),
                        self.rd_cmd.payload.addr.eq(addr),
                        self.rd_cmd.payload.length.eq(DESCRIPTOR_BYTES),
                        self.rd_cmd.payload.domain.eq(DOMAIN_ENGINE),
                    ]
                    with m.If(self.rd_cmd.ready):
                        m.d.comb += self.started.eq(1)
                        m.d.sync += [beat_i.eq(0), self.fetch_err.eq(0), self.sq_index.eq(index)]
                        m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += self.rd_data.ready.eq(1)
                with m.If(self.rd_data.valid):
                    with m.Switch(beat_i):
                        for b in range(n_desc_beats):
                            with m.Case(b):
                                lo = 8 * W * b
                                hi = min(8 * W * (b + 1), 8 * DESCRIPTOR_BYTES)
                                m.d.sync += desc_bits[lo:hi].eq(self.rd_data.payload.data[:hi - lo])
                    m.d.sync += beat_i.eq(beat_i + 1)
                    m.d.comb += beat.eq(1)
                    with m.If(self.rd_data.payload.err):
                        m.d.sync += self.fetch_err.eq(1)
                    with m.If(self.rd_data.payload.last):
                        m.d.comb += self.fetched.eq(1)
                        m.d.sync += sq_head.eq((sq_head + 1) & sq_mask)
                        m.next = "SETTLE"
            with m.State("SETTLE"):             # the registered ring test sees the new SQ_HEAD next cycle
                m.next = "IDLE"
        return m
