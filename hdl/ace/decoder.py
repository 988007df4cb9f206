"""The step decoder: one program step of one FSM per cycle, from instruction word to everything its grant needs.

A pipeline behind the pick (the control unit's oldest-first choice of an FSM that has room for a decoded step),
each stage holding another FSM's step; the geometry takes ``BlockGeometry.latency_for(cfg)`` cycles from stage 1
(:attr:`latency` is 1 + that from ``req`` to ``o``):

====== =====================================================================================================
stage  work
====== =====================================================================================================
0      ``req``: the picked FSM's command, chunk, buffer and program counter; the IMEM read is issued
1      the instruction word arrives; the ROUTE read of its peer is issued (communicator from the command table)
       and the block's geometry (``BlockGeometry``, pipelined) starts from the command's entry, the chunk and
       the block
2..    the ROUTE entry arrives; the step's context waits beside the geometry's pipeline
3      ``o``: the decoded step (sizes, memory and SRAM addresses, ``wait``, ``illegal``/``noop``), when the
       geometry comes out
====== =====================================================================================================

The command table is read through one combinational lookup in stages 1 and 3 (``e<k>_cmd`` out, the entry
back in ``e<k>``); in a design where it is a memory those become its read ports. ``probe``/``probe_next`` ask
the buffer state whether the slot of the step entering stage 3 will have a LOAD outstanding in the next cycle
(``BufferState.probe``): stage 3 has the answer in a flip-flop, so the step's ``wait`` (which the FSM's step
register takes) starts there, not at a select among every buffer's mask.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.program import FIELDS, StepOp
from ..common.layouts import LOAD_MASK_BITS
from .cmdtable import cmd_entry_layout
from .geometry import BlockGeometry
from .sram import sram_read_layout
from .units import _w

__all__ = ["StepDecoder", "step_layout", "decode_request_layout", "decoded_layout"]

_F = {name: (lsb, width) for name, lsb, width in FIELDS}


def _field(word, name):
    lsb, width = _F[name]
    return word[lsb:lsb + width]


def step_layout(cfg):
    """A decoded step as the FSMs hold it and the issue arbiter grants it."""
    rl = sram_read_layout(cfg)
    return data.StructLayout({
        "op": unsigned(3), "reduce": 1, "fwd": 1, "port": unsigned(3), "fwd_port": unsigned(3),
        "slot": unsigned(10), "block": unsigned(10), "peer": unsigned(9), "key": unsigned(12),
        "fwd_key": unsigned(12), "nbytes": unsigned(24), "beats": unsigned(16), "addr": unsigned(cfg.addr_width),
        "sram_addr": rl.members["addr"],
        "wait": 1,      # the step's slot is still being loaded
        "put": 1,       # a PUT: runs as a SEND whose message is a deposit
        "illegal": 1,   # the word is not a valid step: it retires with ILLEGAL_INSTRUCTION
        "noop": 1,      # nothing to issue (illegal, or a LOAD/STORE of an empty block): retires at its grant
    })


def decode_request_layout(cfg):
    """What the pick hands the decoder: the FSM, its chunk (command slot, chunk number, buffer) and the pc."""
    return data.StructLayout({"fsm": _w(cfg.n_fsms), "cmd": _w(cfg.n_cmds), "chunk": unsigned(16),
                              "buf": sram_read_layout(cfg).members["buf"], "pc": unsigned(10)})


def decoded_layout(cfg):
    """The decoder's output: the step, its FSM, command and buffer, and the word's low half (the detail of an
    ILLEGAL_INSTRUCTION completion)."""
    return data.StructLayout({"fsm": _w(cfg.n_fsms), "cmd": _w(cfg.n_cmds),
                              "buf": sram_read_layout(cfg).members["buf"], "step": step_layout(cfg),
                              "word_lo": unsigned(32)})


class StepDecoder(wiring.Component):
    """Decodes one step per cycle (:attr:`latency` cycles from ``req`` to ``o``); neither stream can stall.

    Ports
    -----
    req : In(stream(decode_request_layout), always_ready)
    imem_addr : Out(10), imem_data : In(64)
        A synchronous read port of the instruction memory: the word of ``imem_addr`` arrives the next cycle.
    route_addr : Out(16), route_data : In(4)
        Same for the routing table (bit 3: the entry is valid).
    e1_cmd/e1 : Out(cmd), In(cmd_entry_layout)
        The combinational command-table lookup of stage 1 (communicator, geometry, slot size and count: the
        last stage reads none of the entry).
    probe : Out(buf, slot), probe_next : In(1)
        Combinational: whether the slot of the step entering stage 3 has a LOAD outstanding in the next cycle
        (registered there).
    o : Out(stream(decoded_layout), always_ready)
    """

    @staticmethod
    def latency_for(cfg):
        """Cycles from a request to its decoded step: the IMEM read, then the geometry's pipeline."""
        return 1 + BlockGeometry.latency_for(cfg)

    def __init__(self, cfg):
        self.cfg = cfg
        #: Cycles from a request to its decoded step.
        self.latency = self.latency_for(cfg)
        self.nmask = min(cfg.max_slots, LOAD_MASK_BITS)
        entry = cmd_entry_layout(cfg)
        cmd = _w(cfg.n_cmds)
        super().__init__({
            "req": In(stream.Signature(decode_request_layout(cfg), always_ready=True)),
            "imem_addr": Out(10), "imem_data": In(64),
            "route_addr": Out(16), "route_data": In(4),
            "e1_cmd": Out(cmd), "e1": In(entry),
            "probe": Out(data.StructLayout({"buf": sram_read_layout(cfg).members["buf"], "slot": unsigned(10)})),
            "probe_next": In(1),
            "o": Out(stream.Signature(decoded_layout(cfg), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        K = cfg.n_ports
        m.submodules.geo = geo = BlockGeometry(cfg)
        req = self.req.payload
        ctx = data.StructLayout({"v": 1, "fsm": req.shape().members["fsm"], "cmd": req.shape().members["cmd"],
                                 "chunk": unsigned(16), "buf": req.shape().members["buf"]})
        s1, s2, s3 = Signal(ctx), Signal(ctx), Signal(ctx)
        w2, w3 = Signal(64), Signal(64)
        route3 = Signal(4)

        # stage 0 -> 1: the IMEM read
        m.d.comb += self.imem_addr.eq(req.pc)
        m.d.sync += [s1.v.eq(self.req.valid), s1.fsm.eq(req.fsm), s1.cmd.eq(req.cmd), s1.chunk.eq(req.chunk),
                     s1.buf.eq(req.buf)]
        # stage 1: the word; the ROUTE read of its peer
        # and the block's geometry from the word, the chunk and the command's entry (BlockGeometry's pipeline)
        w1 = self.imem_data
        e1 = self.e1
        m.d.comb += [
            self.e1_cmd.eq(s1.cmd),
            self.route_addr.eq(e1.comm * cfg.max_ranks + _field(w1, "peer")),
            geo.geom.eq(e1.geom), geo.count.eq(e1.count), geo.elem_shift.eq(e1.elem_shift),
            geo.chunk.eq(s1.chunk), geo.block.eq(_field(w1, "block")), geo.in_base.eq(e1.src),
            geo.out_base.eq(e1.dst), geo.in_seg.eq(e1.in_seg), geo.out_seg.eq(e1.out_seg),
        ]
        sb2, ns2 = Signal.like(e1.geom.slot_beats), Signal.like(e1.n_slots)
        m.d.sync += [s2.eq(s1), w2.eq(w1), sb2.eq(e1.geom.slot_beats), ns2.eq(e1.n_slots)]
        # stage 2 on: the ROUTE entry arrives; the step's context waits beside the geometry's pipeline, with the
        # slot's SRAM address and range check (from the command's slot size and count, taken at stage 1)
        sa2, bad2 = Signal(self.o.payload.step.sram_addr.shape()), Signal()
        m.d.comb += [sa2.eq(_field(w2, "slot") * sb2), bad2.eq(_field(w2, "slot") >= ns2)]
        prev = (s2, w2, self.route_data, sa2, bad2)
        for i in range(geo.latency - 2):
            nxt = (Signal(ctx, name=f"g{i}_ctx"), Signal(64, name=f"g{i}_word"), Signal(4, name=f"g{i}_route"),
                   Signal.like(sa2, name=f"g{i}_sram_addr"), Signal(name=f"g{i}_bad_slot"))
            m.d.sync += [a.eq(b) for a, b in zip(nxt, prev)]
            prev = nxt
        sa3, bad3 = Signal.like(sa2), Signal()
        m.d.sync += [a.eq(b) for a, b in zip((s3, w3, route3, sa3, bad3), prev)]
        # whether the step's slot has a LOAD outstanding, as it will be when the step is at stage 3
        loading3 = Signal()
        m.d.comb += [self.probe.buf.eq(prev[0].buf), self.probe.slot.eq(_field(prev[1], "slot"))]
        m.d.sync += loading3.eq(self.probe_next)
        # stage 3: the step
        w = w3
        op = _field(w, "op")
        slot = _field(w, "slot")
        is_put = op == StepOp.PUT
        emits = (op == StepOp.SEND) | is_put | ((op == StepOp.RECV) & _field(w, "fwd_en"))
        illegal = Signal()
        out = self.o.payload
        st = out.step
        m.d.comb += [
            illegal.eq(~((op == StepOp.LOAD) | (op == StepOp.SEND) | (op == StepOp.RECV) | (op == StepOp.STORE)
                         | is_put)
                       | (_field(w, "port") >= K) | (_field(w, "fwd_port") >= K) | bad3
                       | (emits & (route3[3] == 0))),
            self.o.valid.eq(s3.v),
            out.fsm.eq(s3.fsm), out.cmd.eq(s3.cmd), out.buf.eq(s3.buf), out.word_lo.eq(w[:32]),
            st.op.eq(Mux(is_put, StepOp.SEND, op)),
            st.put.eq(is_put),
            st.reduce.eq(_field(w, "reduce")),
            st.fwd.eq(_field(w, "fwd_en")),
            st.port.eq(_field(w, "port")),
            st.fwd_port.eq(_field(w, "fwd_port")),
            st.slot.eq(slot),
            st.block.eq(_field(w, "block")),
            st.peer.eq(_field(w, "peer")),
            st.key.eq(_field(w, "key")),
            st.fwd_key.eq(_field(w, "fwd_key")),
            st.nbytes.eq(geo.nbytes),
            st.beats.eq(geo.beats),
            # LOAD reads the block's input range, STORE writes its output range
            st.addr.eq(Mux(op == StepOp.STORE, geo.out_addr, geo.in_addr)),
            st.sram_addr.eq(sa3),
            st.illegal.eq(illegal),
            st.noop.eq(illegal | (((op == StepOp.LOAD) | (op == StepOp.STORE)) & (geo.nbytes == 0))),
            st.wait.eq(~st.noop & (op != StepOp.LOAD) & loading3),
        ]
        return m
