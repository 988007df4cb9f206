"""One of the engine's programmable FSMs: it takes a chunk from its queue and runs the chunk's program, phase by
phase, a step at a time (docs/engine.md section 4).

Per chunk the FSM walks its command's phases. Entering a phase it loads the phase's step range (phase 0 after
the LOADs the load sequencer issues); in RUN it asks the shared decoder for each step in turn (``fetch``) and
holds two decoded steps: ``step``, offered to the issue arbiter, and ``nstep``, decoded behind it. SEND and
RECV steps stay in flight until their unit reports them done; up to two may be in flight on one unit (same op,
port and forward port) when they use different slots, and a STORE may issue behind steps that do not write its
slot. LOADs, STOREs and no-op steps retire at their grant. When every step of a phase is decoded and retired,
the FSM waits for its chunk to move to the next phase's partition (``move``), and after the last phase for the
terminal partition, then takes the next chunk.

A decoded step may wait for its slot's LOAD (``wait``); the FSM clears the wait itself when a LOAD of its
buffer's slot ends (``filled``: the load unit's completion or the sequencer skipping an empty block), and sets
it for a step decoded while its own LOAD of that slot goes to the load unit (``own_load``: the cycle after its
grant, when the FSM's next step cannot be granted; the buffer's loading mask shows it from the cycle after).

The FSM learns of a grant a cycle late, from the issue stage's register (``granted``: the step it offered last
cycle was granted and its job goes out now). It keeps the granted step in ``step`` through that cycle, so the
job builder reads the step and the chunk's context from the FSM's own registers, and takes its next step at the
end of it. In that cycle the FSM offers nothing (it could not be granted twice in a row
anyway: its next step may need the landing header or credits the job is taking), and what it tells the rest
of the engine - decode requests, phase end, ``gap`` - is computed as if the step had left at the grant, so
that a grant is decided by the arbiter and ends at the issue stage's register, not in every FSM's step
registers.

A step offered for STEP_TIMEOUT cycles without a grant (a message that never comes, credits a dead link never
returns) is given up: the chunk's status becomes TIMEOUT and the rest of its command's steps retire unissued
(docs/engine.md section 13).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ...sim.golden.program import StepOp
from ...sim.golden.types import Status
from .arbiter import SEQ_BITS
from .bufstate import mask_slot_bits
from .cmdtable import fsm_view_layout
from .decoder import step_layout
from .sram import sram_read_layout
from .units import STATUS_SHAPE, _w

__all__ = ["FsmState", "ChunkFsm", "chunk_layout", "fsm_context_layout", "load_err_layout"]


class FsmState(enum.Enum, shape=2):
    """An FSM's state: no chunk; loading a phase's bounds or moving to the next phase's partition; decoding
    and issuing the phase's steps; waiting for the terminal partition after the last step."""
    IDLE = 0
    ADVANCE = 1
    RUN = 2
    HANDOFF = 3


def chunk_layout(cfg):
    """A chunk handed to an FSM: its command's table slot, chunk number, buffer, dispatch order (``seq``,
    wrapping: arbiters favour the oldest chunk) and whether it is its command's final chunk (``final``: its
    messages say so in their header, so a RECV tells a rank whose command has another chunk count)."""
    return data.StructLayout({"cmd": _w(cfg.n_cmds), "chunk": unsigned(16),
                              "buf": sram_read_layout(cfg).members["buf"], "seq": unsigned(SEQ_BITS),
                              "final": 1})


def load_err_layout(cfg):
    """A LOAD that ended with an error status, and the chunk buffer it was filling."""
    return data.StructLayout({"valid": 1, "buf": sram_read_layout(cfg).members["buf"], "status": STATUS_SHAPE})


def fsm_context_layout(cfg):
    """What an FSM holds of its chunk: the chunk, the program phase it is in and its first error."""
    return data.StructLayout({**chunk_layout(cfg).members, "phase": unsigned(3), "status": STATUS_SHAPE})


class ChunkFsm(wiring.Component):
    """One FSM (see the module docstring).

    Ports: ``chunk`` (from its chunk queue), ``view_addr``/``view`` (a read port of the command table's view memory:
    the FSM addresses its next chunk's command, the row comes back a cycle later and stays while the FSM holds the
    chunk), ``fetch``/``picked``/``pc`` (a decode request and the decoder taking it), ``wb`` (a decoded step coming
    back), ``offer`` (the current step for the issue arbiter: ``ready`` if no hazard stops it, ``behind`` if a step
    is in flight), ``granted`` (the step offered last cycle was granted), ``own_load`` (this FSM's LOAD of ``slot``
    goes to the load unit now), ``filled`` (LOADs that ended this cycle, any buffer), ``load_err`` (a LOAD into
    ``buf`` ended with an error: its data, and every message the chunk sends from now on, is bad), ``unit_done`` (a
    unit retired one of this FSM's SEND/RECV), ``at_end``/``move`` (the phase is done and more follow / the chunk
    moved on), ``state``, ``ctx``, ``gap`` (the FSM had nothing to offer: a cycle of the STEP_GAP counter),
    ``timeout`` (STEP_TIMEOUT), ``give_up`` (another chunk of this chunk's command gave a step up) and
    ``expired`` (this FSM gives its current step up now).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        sl = step_layout(cfg)
        ev = data.StructLayout({"valid": 1, "buf": sram_read_layout(cfg).members["buf"], "slot": unsigned(10)})
        super().__init__({
            "chunk": In(stream.Signature(chunk_layout(cfg))),
            "view_addr": Out(_w(cfg.n_cmds)), "view": In(fsm_view_layout(cfg)),
            "fetch": Out(1), "picked": In(1), "pc": Out(11),
            "wb": In(data.StructLayout({"valid": 1, "step": sl})),
            "offer": Out(data.StructLayout({"ready": 1, "behind": 1, "step": sl})),
            "granted": In(1),
            "own_load": In(data.StructLayout({"valid": 1, "slot": unsigned(10)})),
            "filled": In(data.ArrayLayout(ev, 2)),
            "load_err": In(load_err_layout(cfg)),
            "unit_done": In(data.StructLayout({"valid": 1, "status": STATUS_SHAPE})),
            "at_end": Out(1), "move": In(1), "phase_wait": In(1),
            "state": Out(FsmState), "ctx": Out(fsm_context_layout(cfg)), "gap": Out(1),
            "timeout": In(32), "give_up": In(1), "expired": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IDLE, ADVANCE, RUN, HANDOFF = FsmState.IDLE, FsmState.ADVANCE, FsmState.RUN, FsmState.HANDOFF
        sl = step_layout(self.cfg)
        st, ctx, e = self.state, self.ctx, self.view
        # pc: the next step to decode; stop: the end of the current phase's steps; enter: the phase's bounds
        # are still to be loaded (in ADVANCE); in_dec: a decode is on its way back
        pc, stop, enter, in_dec = Signal(11), Signal(11), Signal(), Signal()
        # the step pipeline: `step` waits for its grant, `nstep` was decoded behind it; n_exec SEND/RECV steps
        # are in flight (all on one unit, so they retire in order; entry 0 is the older): their unit and slots
        step, nstep = Signal(sl), Signal(sl)
        cur_v, nstep_v = Signal(), Signal()
        n_exec = Signal(range(3))
        ex_op, ex_port, ex_fwd = Signal(3), Signal(3), Signal(4)
        ex_slot = [Signal(10, name=f"ex{i}_slot") for i in range(2)]
        ex_wr = [Signal(name=f"ex{i}_writes") for i in range(2)]
        # a grant registered by the issue stage: `step` leaves at the end of this cycle. The pipeline's state as
        # if it had left at the grant (as the rest of the engine must see it): the next step is current, and
        # a SEND/RECV is in flight
        s = step
        granted = self.granted
        posted = (s.op == StepOp.LOAD) | (s.op == StepOp.STORE) | s.noop
        issue_exec = granted & ~posted          # a SEND or RECV: in flight until its unit reports done
        # the step timeout (STEP_TIMEOUT, ``timeout``; 0 = off): a step offered for ``timeout`` cycles without a
        # grant is given up. The FSM first withdraws its offer for a cycle (``expiring``): a grant of the last
        # cycle's offer arrives then and wins; otherwise the step retires unissued (``expire``) and the chunk's
        # status becomes TIMEOUT. From then on (``skip``: this chunk gave a step up, or another chunk of its
        # command did, ``give_up``) every step of the chunk retires unissued as soon as it is current, so the
        # command ends in a few cycles per step instead of a timeout per step. Steps already issued are not
        # affected: they end when their unit finishes them.
        left = Signal(32)
        expiring, gave_up = Signal(), Signal()
        skip = gave_up | self.give_up
        expire = (st == FsmState.RUN) & cur_v & ~granted & (expiring | skip)
        leave = granted | expire                # the current step leaves the FSM at the end of this cycle
        eff_cur_v, eff_nstep_v = Mux(leave, nstep_v, cur_v), nstep_v & ~leave
        eff_idle = (n_exec == 0) & ~issue_exec                  # nothing in flight
        # more = (pc != stop), kept in a flip-flop where pc and stop move (a pick, a phase's bounds), so the
        # decode request starts from flip-flops instead of an 11-bit compare ahead of the decoder's pick
        more = Signal()
        m.d.comb += [self.pc.eq(pc), self.fetch.eq((st == RUN) & ~in_dec & ~eff_nstep_v & more)]
        # pc + 1 from a flip-flop a cycle behind pc (the pick arrives late: it only selects). It is stale only
        # in the cycle after pc moved, when no pick can come (a pick sets in_dec; entering a phase is ADVANCE)
        pc1 = Signal(11)
        m.d.sync += pc1.eq(pc + 1)
        with m.If(self.picked):
            m.d.sync += [pc.eq(pc1), more.eq(pc1 != stop)]
        m.d.sync += in_dec.eq((in_dec | self.picked) & ~self.wb.valid)

        # the issue conditions: nothing in flight; a SEND/RECV also behind one SEND/RECV in flight on the same
        # unit that touches another slot (two SENDs may read the same one); a STORE behind steps that do not
        # write its slot; a no-op at any time. The compares with the steps in flight come from flip-flops
        # (``same``, ``same_unit``: see below)
        same = [Signal(init=1, name=f"same_slot{i}") for i in range(2)]
        same_unit = Signal(init=1)
        overlap_ok = (((s.op == StepOp.SEND) | (s.op == StepOp.RECV)) & same_unit
                      & ((s.op == StepOp.SEND) | ~same[0]))
        store_ok = ((s.op == StepOp.STORE) & ~((n_exec != 0) & ex_wr[0] & same[0])
                    & ~((n_exec == 2) & ex_wr[1] & same[1]))
        issue_ok = (n_exec == 0) | ((n_exec == 1) & overlap_ok) | store_ok | s.noop
        m.d.comb += [self.offer.step.eq(step), self.offer.behind.eq(n_exec != 0),
                     self.offer.ready.eq((st == RUN) & cur_v & ~granted & ~s.wait & issue_ok & ~expiring & ~skip),
                     self.expired.eq(expire)]
        # the timeout's down-counter runs while the step is offered, and is reloaded whenever it is not
        with m.If(~self.offer.ready):
            m.d.sync += left.eq(self.timeout)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        m.d.sync += expiring.eq(self.offer.ready & (left == 1))
        with m.If(expire):
            m.d.sync += gave_up.eq(1)
            with m.If(ctx.status == 0):
                m.d.sync += ctx.status.eq(Status.TIMEOUT)

        def settle(x):
            """Step ``x`` with its ``wait`` brought up to date: cleared when its slot's LOAD ends this cycle, set by
            this FSM's LOAD of its slot going out now (which wins: a LOAD ending now is an earlier one)."""
            out = Signal(sl)
            own = self.own_load.valid & (self.own_load.slot == x.slot) & ~x.noop & (x.op != StepOp.LOAD)
            filled = Cat(*[f.valid & (f.buf == ctx.buf) & (f.slot == x.slot) for f in self.filled]).any()
            m.d.comb += [out.eq(x), out.wait.eq((x.wait & ~filled) | own)]
            return out

        cur_s, nxt_s, wb_s = settle(step), settle(nstep), settle(self.wb.step)
        done = self.unit_done.valid
        m.d.sync += n_exec.eq(n_exec + issue_exec - done)
        with m.If(done):            # the older entry retired
            m.d.sync += [ex_slot[0].eq(ex_slot[1]), ex_wr[0].eq(ex_wr[1])]
            with m.If(self.unit_done.status != 0):
                m.d.sync += ctx.status.eq(self.unit_done.status)
        with m.If(issue_exec):
            m.d.sync += [ex_op.eq(s.op), ex_port.eq(s.port), ex_fwd.eq(Cat(s.fwd_port, s.fwd))]
            with m.If(n_exec - done == 0):
                m.d.sync += [ex_slot[0].eq(s.slot), ex_wr[0].eq(s.op == StepOp.RECV)]
            with m.Else():
                m.d.sync += [ex_slot[1].eq(s.slot), ex_wr[1].eq(s.op == StepOp.RECV)]
        # the step registers: the granted step makes room for the next decoded one
        m.d.sync += [step.eq(cur_s), nstep.eq(nxt_s)]
        refill = ~cur_v | leave
        # same[i] = (step.slot == ex_slot[i]) and same_unit = (the step's op, port and forward == the in-flight
        # steps') kept in flip-flops, so that the offer's hazard checks start from registers: the next cycle's
        # step (this one, nstep or the decoded one) against the next cycle's in-flight entries (these, shifted
        # by a retirement, or the issuing step, which is the current one), every pair compared in parallel
        # and selected by the same conditions as the registers. The slot compares use the slot bits a step
        # that is not a no-op can have (``mask_slot_bits``).
        pick_n, pick_w = refill & nstep_v, refill & ~nstep_v & self.wb.valid

        def next_eq(of, kept, issued):
            """Whether the next cycle's step will have ``of(step)`` equal to an in-flight value that will be
            ``kept`` (a value of this cycle) or the issuing step's when ``issued``."""
            eq = {k: Mux(issued, 1 if k == "step" else of(c) == of(s), of(c) == kept)
                  for k, c in (("step", s), ("nstep", nstep), ("wb", self.wb.step))}
            return Mux(pick_n, eq["nstep"], Mux(pick_w, eq["wb"], eq["step"]))

        sb = mask_slot_bits(self.cfg)
        lower = issue_exec & (n_exec - done == 0)         # the issuing step becomes in-flight entry 0
        kept = [Mux(done, ex_slot[1], ex_slot[0]), ex_slot[1]]     # the entries if not written now
        for i, issued in enumerate((lower, issue_exec & ~lower)):
            m.d.sync += same[i].eq(next_eq(lambda x: x.slot[:sb], kept[i][:sb], issued))
        m.d.sync += same_unit.eq(next_eq(lambda x: Cat(x.op, x.port, x.fwd_port, x.fwd),
                                         Cat(ex_op, ex_port, ex_fwd), issue_exec))
        with m.If(refill):
            with m.If(nstep_v):
                m.d.sync += [step.eq(nxt_s), cur_v.eq(1), nstep_v.eq(0)]
            with m.Elif(self.wb.valid):
                m.d.sync += [step.eq(wb_s), cur_v.eq(1)]
            with m.Else():
                m.d.sync += cur_v.eq(0)
        with m.Elif(self.wb.valid):
            m.d.sync += [nstep.eq(wb_s), nstep_v.eq(1)]
        with m.If(self.wb.valid & self.wb.step.illegal):
            m.d.sync += ctx.status.eq(Status.ILLEGAL_INSTRUCTION)
        # a LOAD of this chunk's buffer failed (the sequencer's or the FSM's own): the chunk is poisoned, so its
        # SENDs and forwards go out with ``poison`` and the ranks that receive them report the error
        with m.If(self.load_err.valid & (self.load_err.buf == ctx.buf) & (st != IDLE)):
            m.d.sync += ctx.status.eq(self.load_err.status)

        # phases: the view of the chunk's command (addressed in IDLE, read from ADVANCE on)
        m.d.comb += self.view_addr.eq(Mux(st == IDLE, self.chunk.payload.cmd, ctx.cmd))
        bounds = e.phases[ctx.phase]
        # the phase is the command's last: decided with the phase's bounds (entering it) and kept in a
        # flip-flop, so that ``at_end`` - the partition manager's move requests - starts from registers
        last_phase = Signal()
        phase_done = ~more & ~in_dec & ~eff_cur_v & ~eff_nstep_v & eff_idle   # decoded and retired
        # in ADVANCE past the bounds' load, pc == stop from a flip-flop (pc does not move in ADVANCE): set
        # from the bounds as they are loaded, and on leaving RUN (which needs pc == stop)
        at_stop = Signal()
        m.d.comb += [
            self.at_end.eq((st == ADVANCE) & ~enter & at_stop & ~last_phase),
            self.gap.eq(((st == RUN) & ~eff_cur_v & eff_idle) | ((st == ADVANCE) & ~self.phase_wait)),
        ]
        with m.Switch(st):
            with m.Case(IDLE):
                m.d.comb += self.chunk.ready.eq(1)
                with m.If(self.chunk.valid):
                    # the bounds of phase 0 are loaded in ADVANCE (from the view, read by c.cmd now)
                    c = self.chunk.payload
                    m.d.sync += [ctx.cmd.eq(c.cmd), ctx.chunk.eq(c.chunk), ctx.buf.eq(c.buf), ctx.seq.eq(c.seq),
                                 ctx.final.eq(c.final), ctx.phase.eq(0), ctx.status.eq(0), enter.eq(1), st.eq(ADVANCE),
                                 gave_up.eq(0)]
            with m.Case(ADVANCE):
                with m.If(enter):
                    # entering the phase: load its bounds (phase 0 after the LOADs the sequencer issued)
                    m.d.sync += [pc.eq(bounds.first), stop.eq(bounds.stop), enter.eq(0),
                                 at_stop.eq(bounds.first == bounds.stop), more.eq(bounds.first != bounds.stop),
                                 last_phase.eq(ctx.phase + 1 >= e.n_phases)]
                with m.Elif(at_stop):
                    with m.If(last_phase):
                        m.d.sync += st.eq(HANDOFF)
                    with m.Elif(self.move):             # moved to the next phase's partition
                        m.d.sync += [ctx.phase.eq(ctx.phase + 1), enter.eq(1)]
                with m.Else():
                    m.d.sync += st.eq(RUN)
            with m.Case(RUN):
                with m.If(phase_done):
                    m.d.sync += [st.eq(ADVANCE), at_stop.eq(1)]
            with m.Case(HANDOFF):
                with m.If(self.move):
                    m.d.sync += st.eq(IDLE)
        return m
