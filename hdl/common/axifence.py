"""An AXI4 fence: lets an engine be reset in the middle of its work without breaking the AXI protocol.

An engine that is aborted (reset while it runs) may have read bursts whose data has not all come back, write
bursts whose address went out but whose data beats did not, and write responses still to come. Resetting it
there would leave the memory waiting for write beats forever and hand the engine's next reads stray data.
:class:`AxiFence` sits between the engine's AXI master port and the memory and tracks what the memory is owed
and what it still owes:

* ``RUN``: everything passes through; the fence counts read bursts in flight, write responses in flight and
  the lengths of the write bursts it has presented (W beats pass only for a presented burst).
* ``CLOSING`` (``abort`` went high): an address the memory has already seen stays presented until it is
  accepted (AXI forbids taking a VALID back); no new read or write burst is presented. Once no address and no
  write beat is waiting for its READY, the fence asserts ``core_rst`` (a flip-flop) from the next cycle on.
* ``HELD``: the engine is held in reset; the fence accepts and drops every read beat and write response and
  completes each presented write burst itself with beats whose strobes are all zero (the memory keeps its
  contents). ``quiet`` rises when nothing is owed either way; when ``abort`` is low by then, the fence goes
  back to ``RUN`` and releases ``core_rst`` in the same step.

So the memory sees a well-formed AXI conversation from start to end however the abort falls, and the engine
leaves reset with an empty AXI port. The fence adds no cycle to any transfer: valids and readies pass
through with one AND gate each.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, pass_through

__all__ = ["AxiFence"]


class AxiFence(wiring.Component):
    """Fence between ``core`` (the engine's AXI4 master port, connected flipped) and ``axi`` (towards the
    memory), both of :class:`~syncfabric.hdl.common.axi.AXI4Signature` ``sig``; ``bursts`` bounds the write bursts presented and not
    yet completed (the engine's own limit is lower, so the fence never holds it back).

    Ports: ``abort`` (in, level: abort requested), ``core_rst`` (out, registered: hold the engine in reset),
    ``quiet`` (out, registered: the engine is held and the memory owes and is owed nothing), ``busy`` (out:
    not ``RUN``, i.e. ``core_rst`` or about to be)."""

    def __init__(self, sig, *, bursts=8):
        if not isinstance(sig, AXI4Signature):
            raise TypeError(f"expected an AXI4Signature, not {sig!r}")
        self.bursts = bursts
        super().__init__({
            "core": In(sig),
            "axi": Out(sig),
            "abort": In(1),
            "core_rst": Out(1),
            "quiet": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c, s = self.core, self.axi
        m.submodules.lens = lens = SyncFIFO(width=8, depth=self.bursts)

        # payloads and the signals nobody gates pass straight through
        pass_through(m, c, s, except_for={"arvalid", "arready", "rvalid", "rready", "awvalid", "awready", "wvalid",
                                           "wready", "wdata", "wstrb", "wlast", "bvalid", "bready"})

        run = Signal(init=1)            # RUN (else CLOSING or HELD)
        held = Signal()                 # HELD: the engine is in reset (= core_rst)
        ar_pend = Signal()              # an AR was presented and not yet accepted
        aw_pend = Signal()
        m.d.comb += [self.core_rst.eq(held), self.busy.eq(~run)]

        # -- addresses: new ones only while running, presented ones until accepted --------------------------
        ar_ok = ~held & (ar_pend | run)
        aw_ok = ~held & (aw_pend | (run & lens.w_rdy))
        m.d.comb += [
            s.arvalid.eq(c.arvalid & ar_ok), c.arready.eq(s.arready & ar_ok),
            s.awvalid.eq(c.awvalid & aw_ok), c.awready.eq(s.awready & aw_ok),
        ]
        m.d.sync += [ar_pend.eq(s.arvalid & ~s.arready), aw_pend.eq(s.awvalid & ~s.awready)]

        # -- write bursts presented: their lengths, beats sent of the oldest -------------------------------
        w_cnt = Signal(8)
        head_last = w_cnt == lens.r_data
        m.d.comb += [lens.w_en.eq(s.awvalid & ~aw_pend), lens.w_data.eq(c.awlen)]
        with m.If(held):
            # the engine is in reset: finish every presented burst with empty beats
            m.d.comb += [s.wvalid.eq(lens.r_rdy), s.wdata.eq(0), s.wstrb.eq(0), s.wlast.eq(head_last),
                         c.wready.eq(0)]
        with m.Else():
            m.d.comb += [s.wvalid.eq(c.wvalid & lens.r_rdy), s.wdata.eq(c.wdata), s.wstrb.eq(c.wstrb),
                         s.wlast.eq(c.wlast),
                         c.wready.eq(s.wready & lens.r_rdy)]
        w_take = s.wvalid & s.wready
        m.d.comb += lens.r_en.eq(w_take & head_last)
        with m.If(w_take):
            m.d.sync += w_cnt.eq(Mux(head_last, 0, w_cnt + 1))

        # -- responses owed by the memory ------------------------------------------------------------------
        r_out = Signal(8)
        b_out = Signal(8)
        m.d.comb += [
            c.rvalid.eq(s.rvalid & ~held), s.rready.eq(c.rready | held),
            c.bvalid.eq(s.bvalid & ~held), s.bready.eq(c.bready | held),
        ]
        ar_take = s.arvalid & s.arready
        r_done = s.rvalid & s.rready & s.rlast
        m.d.sync += r_out.eq(r_out + ar_take - r_done)
        aw_take = s.awvalid & s.awready
        b_done = s.bvalid & s.bready
        m.d.sync += b_out.eq(b_out + aw_take - b_done)

        # -- the abort sequence -----------------------------------------------------------------------------
        waiting = (s.arvalid & ~s.arready) | (s.awvalid & ~s.awready) | (s.wvalid & ~s.wready)
        nothing_owed = (r_out == 0) & (b_out == 0) & ~lens.r_rdy
        with m.If(run):
            with m.If(self.abort):
                m.d.sync += run.eq(0)
        with m.Elif(~held):
            with m.If(~waiting):
                m.d.sync += held.eq(1)
        with m.Else():
            with m.If(self.quiet & ~self.abort):
                m.d.sync += [held.eq(0), run.eq(1)]
        m.d.sync += self.quiet.eq(held & nothing_owed & ~(w_take | ar_take | aw_take | r_done | b_done))
        return m
