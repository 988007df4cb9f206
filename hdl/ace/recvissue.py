"""The receive unit's reduction issue: :class:`RecvIssue` reads a RECV's operand from its slot and feeds the
landing beats, with the operand, into the reduction ALU, or past it into a bypass queue, or drops them."""

from amaranth.hdl import Module, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..alu import ReductionAlu
from ..common.layouts import DTYPE_SHAPE, OP_SHAPE
from ..common.skid import SkidBuffer
from .sram import BankStreamer, sram_read_layout

__all__ = ["RecvIssue", "operand_layout", "issue_mode_layout"]


def operand_layout(cfg):
    """A run of ``beats`` slot beats from ``addr`` of buffer ``buf``: the operand of a reduction."""
    rl = sram_read_layout(cfg)
    return data.StructLayout({"buf": rl.members["buf"], "addr": rl.members["addr"], "beats": unsigned(16)})


def issue_mode_layout():
    """What to do with the landing beats now: nothing unless ``run``; drop them (``drain``), reduce them with
    the operand (``reduce``, element type ``dtype``, operation ``op``) or pass them through."""
    return data.StructLayout({"run": 1, "drain": 1, "reduce": 1, "dtype": DTYPE_SHAPE, "op": OP_SHAPE})


class RecvIssue(wiring.Component):
    """Operand read and reduction issue of :class:`~.units.RecvUnit`.

    Ports
    -----
    operand : In(stream.Signature(operand_layout(cfg)))
        Starts the read of an operand run; ready as soon as every read of the previous run is issued, so a
        queued job's operand can be read ahead. ``rd``/``rdata`` go to the SRAM read client.
    mode : In(issue_mode_layout())
        Combinational, per cycle: where ``land`` goes.
    land : In(stream.Signature(unsigned(8 * beat_bytes)))
        Landing beats. Reduced: taken together with an operand beat when the ALU takes them; passed
        through: taken when the bypass queue has room; drained: taken while ``run``.
    reduced, copied : Out(stream.Signature(unsigned(8 * beat_bytes)))
        The ALU's results, in order (the ALU's ``latency`` cycles behind; a ready-only register slice
        between the ALU and ``reduced`` keeps ``reduced.ready``, which depends on where the beats go, off the
        ALU's pipeline enable, a net that reaches every ALU flip-flop), and the passed-through beats (a 4-beat
        queue, one cycle behind).
    alu_beats : Out(64)
        Beats the ALU has taken.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        W = 8 * cfg.beat_bytes
        super().__init__({
            "operand": In(stream.Signature(operand_layout(cfg))),
            "rd": Out(sram_read_layout(cfg)),
            "rdata": In(unsigned(W)),
            "mode": In(issue_mode_layout()),
            "land": In(stream.Signature(unsigned(W))),
            "reduced": Out(stream.Signature(unsigned(W))),
            "copied": Out(stream.Signature(unsigned(W))),
            "alu_beats": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.alu = alu = ReductionAlu(cfg.lanes, dtypes=cfg.dtypes, fabric=cfg.fabric)
        m.submodules.streamer = st = BankStreamer(cfg)
        m.submodules.bypass = bypass = fifo.SyncFIFOBuffered(width=8 * cfg.beat_bytes, depth=4)
        m.submodules.alu_out = alu_out = SkidBuffer(unsigned(8 * cfg.beat_bytes), forward=False)
        op, mode, land = self.operand, self.mode, self.land
        m.d.comb += [
            st.start.eq(op.valid & st.ready),
            op.ready.eq(st.ready),
            st.buf.eq(op.payload.buf), st.addr.eq(op.payload.addr), st.beats.eq(op.payload.beats),
            self.rd.eq(st.rd), st.rdata.eq(self.rdata),
        ]
        # landing beats -> the ALU (with the operand) or the bypass queue; drained beats are dropped. The ALU's
        # operands are wired straight (only its valid depends on the mode): no mode mux in front of its first
        # stage's exponent compare.
        m.d.comb += [
            alu.i.payload.a.eq(land.payload),
            alu.i.payload.b.eq(st.o.payload.data),
            alu.i.payload.dtype.eq(mode.dtype),
            alu.i.payload.op.eq(mode.op),
        ]
        with m.If(mode.drain):
            m.d.comb += land.ready.eq(mode.run)
        with m.Elif(mode.reduce):
            m.d.comb += [
                alu.i.valid.eq(mode.run & land.valid & st.o.valid),
                land.ready.eq(mode.run & st.o.valid & alu.i.ready),
                st.o.ready.eq(mode.run & land.valid & alu.i.ready),
            ]
        with m.Else():
            m.d.comb += [
                bypass.w_en.eq(mode.run & land.valid),
                bypass.w_data.eq(land.payload),
                land.ready.eq(mode.run & bypass.w_rdy),
            ]
        with m.If(alu.i.valid & alu.i.ready):
            m.d.sync += self.alu_beats.eq(self.alu_beats + 1)
        m.d.comb += [
            alu_out.i.valid.eq(alu.o.valid), alu_out.i.payload.eq(alu.o.payload.data),
            alu.o.ready.eq(alu_out.i.ready),
            self.copied.valid.eq(bypass.r_rdy), self.copied.payload.eq(bypass.r_data),
            bypass.r_en.eq(self.copied.ready),
        ]
        wiring.connect(m, alu_out.o, wiring.flipped(self.reduced))
        return m
