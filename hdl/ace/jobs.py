"""The issue stage's second half: the granted step becomes a unit job, in the cycle after its grant (the issue
stage's register, :mod:`.issuestage`, names the FSM; the step, its chunk's context and command fields come from
the granted FSM's registers, which still hold them).

- SEND on port ``k``: a send job with the message header (this rank, the FSM's virtual channel, the chunk's tag,
  chunk, phase and ``final``, the step's key and length, the slot's count, the command's op and dtype); the port's
  credits for the whole message are reserved and its TX mux learns the message's place in the port's order.
- RECV on port ``k``: a receive job with the header it expects (tag, chunk, phase, key, length, ``final``: the
  receiving unit checks them) and, for a forward, the forwarded header (the
  forward key, the new count) plus the forward port's reservation and order entry.
- LOAD: a load job (zeros for a null contribution); when no FSM LOAD is granted, the load sequencer's next
  LOAD goes instead (``seq_take``).
- STORE: a store job; every STORE, an empty one (a no-op) too, folds its slot's count into its command's
  contributors (``fold``).

The count lane (docs/programs.md): a SEND carries its slot's count; a RECV's result counts the message's
contributions (``msg_count``, from the landing channel's head) plus the slot's when it reduces, and that is the
count its slot gets (``recv``) and its forward carries.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.program import StepOp
from ..common.layouts import CHANNEL_BITS, COUNT_BITS, DTYPE_SHAPE, OP_SHAPE, packet_header_layout
from .decoder import step_layout
from .fsm import fsm_context_layout
from .issue import channel_of, take_layout
from .link import reserve_layout
from .units import _w, job_layouts

__all__ = ["JobBuilder"]


class JobBuilder(wiring.Component):
    """Unit jobs for the step granted this cycle (see the module docstring).

    Inputs: ``grant`` (valid, FSM, landing channel), what the granted step takes (``take``: its unit, order queue
    and reservation port, as the issue stage registered it), the granted FSM's ``step`` and ``ctx``, the fields of
    its command it needs (``rank``, ``tag``, ``dtype``, ``op``, ``null``), the granted slot's count
    (``slot_count``), the count of the message a RECV takes (``msg_count``), the two added (``sum_count``,
    a reducing RECV's count, added by the issue stage before its register) and the load sequencer's LOAD
    (``seq_load``: taken when the load unit takes a job and no FSM LOAD goes; ``seq_zero``). Outputs: the job
    streams (valid in the cycle after a grant, which the issue arbiter gives only when the unit will take the job
    then), reservations and order entries, and the events other blocks follow (``fsm_load``, ``recv``, ``fold``).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        K, jl = cfg.n_ports, job_layouts(cfg)
        buf = jl["load"].members["buf"]
        order = data.StructLayout({"valid": 1, "src": range(1 + K), "empty": 1})
        super().__init__({
            "grant": In(data.StructLayout({"valid": 1, "fsm": _w(cfg.n_fsms), "ch": unsigned(CHANNEL_BITS)})),
            "take": In(take_layout(cfg)),
            "step": In(step_layout(cfg)), "ctx": In(fsm_context_layout(cfg)),
            "rank": In(9), "tag": In(16), "dtype": In(DTYPE_SHAPE), "op": In(OP_SHAPE), "null": In(1),
            "slot_count": In(COUNT_BITS), "msg_count": In(COUNT_BITS), "sum_count": In(COUNT_BITS),
            "seq_load": In(stream.Signature(jl["load"])), "seq_zero": In(1),
            "send_job": Out(stream.Signature(jl["send"])).array(K),
            "recv_job": Out(stream.Signature(jl["recv"])).array(K),
            "reserve": Out(data.ArrayLayout(reserve_layout(cfg), K)), "order": Out(data.ArrayLayout(order, K)),
            "load_job": Out(stream.Signature(jl["load"])), "store_job": Out(stream.Signature(jl["store"])),
            "fsm_load": Out(1),
            "recv": Out(data.StructLayout({"valid": 1, "fsm": _w(cfg.n_fsms), "slot": unsigned(10),
                                           "count": unsigned(COUNT_BITS)})),
            "fold": Out(data.StructLayout({"valid": 1, "cmd": _w(cfg.n_cmds), "count": unsigned(COUNT_BITS)})),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        g, c, gr, tk = self.step, self.ctx, self.grant, self.take
        # which unit takes the job, from flip-flops (a no-op step takes a grant but no unit)
        recv, load, store = tk.recv.any(), tk.load, tk.store

        # headers: the one a SEND or forward sends, the one a RECV expects; the count lane
        new_count = Signal(COUNT_BITS)
        out, exp = Signal(packet_header_layout()), Signal(packet_header_layout())
        m.d.comb += [
            new_count.eq(Mux(g.reduce, self.sum_count, self.msg_count)),
            out.dst.eq(g.peer), out.src.eq(self.rank), out.vc.eq(gr.fsm), out.tag.eq(self.tag),
            out.chunk.eq(c.chunk), out.phase.eq(c.phase), out.length.eq(g.nbytes),
            out.key.eq(Mux(g.op == StepOp.SEND, g.key, g.fwd_key)), out.put.eq((g.op == StepOp.SEND) & g.put),
            out.count.eq(Mux(g.op == StepOp.SEND, self.slot_count, new_count)),
            out.op.eq(self.op), out.dtype.eq(self.dtype), out.final.eq(c.final),
            # a chunk with a failed step sends and forwards poisoned: its data may derive from the bad input
            out.poison.eq(c.status != 0),
            exp.tag.eq(self.tag), exp.chunk.eq(c.chunk), exp.phase.eq(c.phase), exp.key.eq(g.key),
            exp.length.eq(g.nbytes), exp.final.eq(c.final),
        ]
        common = [("fsm", gr.fsm), ("cmd", c.cmd), ("buf", c.buf), ("sram_addr", g.sram_addr), ("beats", g.beats)]
        memory = [("addr", g.addr), ("nbytes", g.nbytes), ("slot", g.slot)]

        def job(port, valid, fields):
            return [port.valid.eq(valid)] + [getattr(port.payload, name).eq(v) for name, v in fields]

        for k in range(cfg.n_ports):
            m.d.comb += job(self.send_job[k], tk.send[k], common + [("hdr", out)])
            m.d.comb += job(self.recv_job[k], tk.recv[k], common + [
                ("reduce", g.reduce), ("dtype", self.dtype), ("op", self.op), ("fwd", g.fwd),
                ("fwd_port", g.fwd_port), ("ch", gr.ch), ("exp", exp), ("fwd_hdr", out)])
            # a whole message's credits are reserved at the grant, and the port's TX mux learns its place
            m.d.comb += [
                self.reserve[k].valid.eq(tk.order[k]), self.reserve[k].vc.eq(channel_of(cfg, gr.fsm, g.peer)),
                self.reserve[k].beats.eq(g.beats),
                self.order[k].valid.eq(tk.order[k]), self.order[k].src.eq(Mux(tk.send[k], 0, 1 + g.port)),
                self.order[k].empty.eq(g.beats == 0),
            ]
        m.d.comb += job(self.store_job, store, common + memory)
        # the load unit takes a granted FSM LOAD, else the sequencer's
        m.d.comb += [self.fsm_load.eq(load), self.seq_load.ready.eq(self.load_job.ready & ~load)]
        with m.If(load):
            m.d.comb += job(self.load_job, 1, common + memory + [("zero", self.null)])
        with m.Else():
            m.d.comb += [self.load_job.valid.eq(self.seq_load.valid), self.load_job.payload.eq(self.seq_load.payload),
                         self.load_job.payload.zero.eq(self.seq_zero)]
        m.d.comb += [
            self.recv.valid.eq(recv), self.recv.fsm.eq(gr.fsm), self.recv.slot.eq(g.slot),
            self.recv.count.eq(new_count),
            # every STORE folds its slot's count, an empty one (a no-op) too
            self.fold.valid.eq(gr.valid & ~g.illegal & (g.op == StepOp.STORE)), self.fold.cmd.eq(c.cmd),
            self.fold.count.eq(self.slot_count),
        ]
        return m
