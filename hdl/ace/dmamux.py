"""Sharing of the engine's two DMA engines between their requesters.

The TX DMA (reader) serves the command processor (descriptor fetches) and the load unit; the RX DMA (writer)
serves the store unit and the completion writer. Commands are granted whole, with priority to the command
processor (rare, short); a FIFO remembers which requester each command belongs to, so the in-order data beats
and completions of the DMA engine are steered back to it.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .dma import dma_cmd_layout, dma_done_layout, dma_read_data_layout, dma_write_data_layout

__all__ = ["ReadMux", "WriteMux"]


class ReadMux(wiring.Component):
    """Two requesters (``a`` has priority, ``b``) -> one DMA reader (``cmd``/``data`` towards it)."""

    def __init__(self, cfg, depth=8):
        self.depth = depth
        cl, dl = dma_cmd_layout(cfg), dma_read_data_layout(cfg)
        super().__init__({
            "a_cmd": In(stream.Signature(cl)), "a_data": Out(stream.Signature(dl)),
            "b_cmd": In(stream.Signature(cl)), "b_data": Out(stream.Signature(dl)),
            "cmd": Out(stream.Signature(cl)), "data": In(stream.Signature(dl)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.route = route = fifo.SyncFIFOBuffered(width=1, depth=self.depth)
        use_a = Signal()
        m.d.comb += use_a.eq(self.a_cmd.valid)
        # ``a``'s ready does not wait for its own valid (``a`` has priority, so it is taken whenever the reader
        # and the route queue have room): ``a``'s late valid, the command processor's request, then does not
        # go through the payload mux's select and back (once a path of the design-point engine's worst)
        m.d.comb += self.a_cmd.ready.eq(self.cmd.ready & route.w_rdy)
        with m.If(use_a):
            m.d.comb += [self.cmd.valid.eq(route.w_rdy), self.cmd.payload.eq(self.a_cmd.payload)]
        with m.Else():
            m.d.comb += [self.cmd.valid.eq(self.b_cmd.valid & route.w_rdy), self.cmd.payload.eq(self.b_cmd.payload),
                         self.b_cmd.ready.eq(self.cmd.ready & route.w_rdy)]
        m.d.comb += [route.w_en.eq(self.cmd.valid & self.cmd.ready), route.w_data.eq(~use_a)]
        to_b = route.r_data[0]
        m.d.comb += [
            self.a_data.payload.eq(self.data.payload), self.b_data.payload.eq(self.data.payload),
            self.a_data.valid.eq(self.data.valid & route.r_rdy & ~to_b),
            self.b_data.valid.eq(self.data.valid & route.r_rdy & to_b),
            self.data.ready.eq(route.r_rdy & (to_b & self.b_data.ready | ~to_b & self.a_data.ready)),
            route.r_en.eq(self.data.valid & self.data.ready & self.data.payload.last),
        ]
        return m


class WriteMux(wiring.Component):
    """Two requesters (``a`` has priority, ``b``) -> one DMA writer (``cmd``/``data`` to it, ``done`` back)."""

    def __init__(self, cfg, depth=8):
        self.depth = depth
        cl, dl, rl = dma_cmd_layout(cfg), dma_write_data_layout(cfg), dma_done_layout()
        super().__init__({
            "a_cmd": In(stream.Signature(cl)), "a_data": In(stream.Signature(dl)),
            "a_done": Out(stream.Signature(rl)),
            "b_cmd": In(stream.Signature(cl)), "b_data": In(stream.Signature(dl)),
            "b_done": Out(stream.Signature(rl)),
            "cmd": Out(stream.Signature(cl)), "data": Out(stream.Signature(dl)),
            "done": In(stream.Signature(rl)),
        })
        self.cfg = cfg

    def elaborate(self, platform):
        m = Module()
        # which requester's data the writer takes next, and whose completion comes back next
        m.submodules.droute = dr = fifo.SyncFIFOBuffered(width=1, depth=self.depth)
        m.submodules.croute = cr = fifo.SyncFIFOBuffered(width=1, depth=self.depth)
        use_a = Signal()
        room = dr.w_rdy & cr.w_rdy
        m.d.comb += use_a.eq(self.a_cmd.valid)
        with m.If(use_a):
            m.d.comb += [self.cmd.valid.eq(room), self.cmd.payload.eq(self.a_cmd.payload),
                         self.a_cmd.ready.eq(self.cmd.ready & room)]
        with m.Else():
            m.d.comb += [self.cmd.valid.eq(self.b_cmd.valid & room), self.cmd.payload.eq(self.b_cmd.payload),
                         self.b_cmd.ready.eq(self.cmd.ready & room)]
        issue = self.cmd.valid & self.cmd.ready
        m.d.comb += [dr.w_en.eq(issue), dr.w_data.eq(~use_a), cr.w_en.eq(issue), cr.w_data.eq(~use_a)]
        # data: the requesters mark their command's last beat
        d_b = dr.r_data[0]
        with m.If(dr.r_rdy):
            with m.If(d_b):
                m.d.comb += [self.data.valid.eq(self.b_data.valid), self.data.payload.eq(self.b_data.payload),
                             self.b_data.ready.eq(self.data.ready)]
            with m.Else():
                m.d.comb += [self.data.valid.eq(self.a_data.valid), self.data.payload.eq(self.a_data.payload),
                             self.a_data.ready.eq(self.data.ready)]
        m.d.comb += dr.r_en.eq(self.data.valid & self.data.ready & self.data.payload.last)
        c_b = cr.r_data[0]
        m.d.comb += [
            self.a_done.payload.eq(self.done.payload), self.b_done.payload.eq(self.done.payload),
            self.a_done.valid.eq(self.done.valid & cr.r_rdy & ~c_b),
            self.b_done.valid.eq(self.done.valid & cr.r_rdy & c_b),
            self.done.ready.eq(cr.r_rdy & (c_b & self.b_done.ready | ~c_b & self.a_done.ready)),
            cr.r_en.eq(self.done.valid & self.done.ready),
        ]
        return m
