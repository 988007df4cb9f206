"""BytePS summation service on a memory device: ``n_workers`` CCI ports; each worker pushes its contribution of a
part (``MEM_WR`` beats) and pulls the part's sum (``MEM_RD``), which is answered only once all ``n_workers``
contributions arrived. The sum is taken in worker order, ``((c0 (+) c1) (+) c2) ...``, by the reduction ALU,
exactly as :class:`syncfabric.sim.golden.byteps.SummationService`.

Address map (bytes): ``PUSH | ((part * n_workers + worker) * part_beats + beat) * beat_bytes`` for a
contribution (the worker field names the contributor), ``PULL | (part * part_beats + beat) * beat_bytes``
for a result beat. A part is reusable (the next round) once every worker pulled every beat of it
(each worker pulls each beat once); a worker's pull of the next round waits until then.

Each port serves its requests in order; a pull of an incomplete part waits at its port's head without
blocking the other ports (a worker pulls only after pushing, so the missing contributions come from other
ports: no deadlock). One request is served per cycle (round-robin among ports whose head can be served).
Summation runs pass by pass (worker 1, 2, ... against the running sum), streaming the part's beats through
the ALU, one part at a time.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..alu import ReductionAlu
from ..common.layouts import DTYPE_SHAPE, OP_SHAPE
from .layouts import CciOpcode, cci_flit_layout

__all__ = ["SummationService", "PUSH", "PULL"]

#: Address bases of the two regions (bit 30 selects).
PUSH = 0
PULL = 1 << 30


class SummationService(wiring.Component):
    """See the module docstring. Ports ``w{k}_req`` (In CCI flits) and ``w{k}_rsp`` (Out), ``dtype``/``op``
    (inputs, held while parts are in flight), ``parts_summed`` (Out counter) and ``bad_requests`` (Out
    counter of malformed requests: a push outside the parts or naming another port's worker, a pull outside
    the parts, a read in the push region or a write in the pull region; each is answered at once, a read with
    zero data, and changes nothing)."""

    def __init__(self, n_workers=4, beat_bytes=8, part_beats=4, n_parts=4):
        exact_log2(part_beats)
        exact_log2(beat_bytes)
        if n_workers < 2 or n_parts < 1:
            raise ValueError("a summation service needs at least 2 workers and 1 part")
        self.n, self.bb, self.pb, self.n_parts = n_workers, beat_bytes, part_beats, n_parts
        flit = stream.Signature(cci_flit_layout(beat_bytes))
        members = {"dtype": In(DTYPE_SHAPE), "op": In(OP_SHAPE), "parts_summed": Out(32),
                   "bad_requests": Out(32)}
        for k in range(n_workers):
            members[f"w{k}_req"] = In(flit)
            members[f"w{k}_rsp"] = Out(flit)
        super().__init__(members)

    def push_addr(self, part, worker, beat):
        """Byte address of a contribution beat."""
        return PUSH | ((part * self.n + worker) * self.pb + beat) * self.bb

    def pull_addr(self, part, beat):
        """Byte address of a result beat."""
        return PULL | (part * self.pb + beat) * self.bb

    def elaborate(self, platform):
        m = Module()
        n, pb, P = self.n, self.pb, self.n_parts
        bb_bits, pb_bits = exact_log2(self.bb), exact_log2(pb)
        width = 8 * self.bb
        m.submodules.contrib = contrib = Memory(shape=width, depth=P * n * pb, init=[])
        m.submodules.result = result = Memory(shape=width, depth=P * pb, init=[])
        c_w = contrib.write_port()
        c_r = contrib.read_port()
        r_w = result.write_port()
        r_acc = result.read_port()          # running sum for the ALU
        r_pull = result.read_port()         # answers
        arrived = [Signal(range(2 * n * pb + 1), name=f"arrived_{p}") for p in range(P)]
        complete = Signal(P)
        pulled = [Signal(range(n * pb + 1), name=f"pulled_{p}") for p in range(P)]

        # ---- request arbitration: a port's head is servable if a push, or a pull of a complete part ----------
        reqs = [getattr(self, f"w{k}_req") for k in range(n)]
        rsps = [getattr(self, f"w{k}_rsp") for k in range(n)]
        pulling = [r.payload.addr[30] for r in reqs]
        pull_part = [r.payload.addr[bb_bits + pb_bits:30] for r in reqs]
        # beats of the current round each worker pulled per part: a worker that pulled all of a part waits
        # (its next pull is of the next round) until every worker pulled it and the part is summed again
        taken = [[Signal(range(pb + 1), name=f"taken_{p}_{k}") for k in range(n)] for p in range(P)]
        psel = [pull_part[k][:max(1, ceil_log2(P))] for k in range(n)]
        # a malformed request (see ``bad_requests``) is answered at once, so only good pulls wait
        good_pull = [pulling[k] & (r.payload.opcode == CciOpcode.MEM_RD) & (pull_part[k] < P)
                     for k, r in enumerate(reqs)]
        servable = [r.valid & (~good_pull[k] | (complete.bit_select(psel[k], 1)
                                                & (Array(taken[p][k] for p in range(P))[psel[k]] < pb)))
                    for k, r in enumerate(reqs)]
        # a response register per port (the answer is sent while the next request may be taken elsewhere)
        last = Signal(range(n))
        pick = Signal(range(n))
        any_req = Signal()
        busy_rsp = Signal(n)
        for off in reversed(range(1, n + 1)):
            for k in range(n):
                idx = (k + off) % n
                with m.If((last == k) & servable[idx] & ~busy_rsp[idx]):
                    m.d.comb += [pick.eq(idx), any_req.eq(1)]
        head = Array(r.payload for r in reqs)[pick]
        fire = Signal()
        m.d.comb += fire.eq(any_req)
        for k, r in enumerate(reqs):
            m.d.comb += r.ready.eq(fire & (pick == k))
        with m.If(fire):
            m.d.sync += last.eq(pick)

        # push: store, count, answer CMP; pull: read the result, answer MEM_DATA next cycle
        push_index = head.addr[bb_bits:30]
        pull_part_of_head = head.addr[bb_bits + pb_bits:30]
        # part of a push = index // (n * part_beats), by comparison (n need not be a power of two)
        part_of_push = Signal(range(P + 1))
        for p in range(P):
            with m.If((push_index >= p * n * pb) & (push_index < (p + 1) * n * pb)):
                m.d.comb += part_of_push.eq(p)
        # a push must name an existing part and the worker of the port it came in on
        slot = push_index >> pb_bits
        is_push = (fire & ~head.addr[30] & (head.opcode == CciOpcode.MEM_WR) & (slot < P * n)
                   & (slot == part_of_push * n + pick))
        is_pull = fire & head.addr[30] & (head.opcode == CciOpcode.MEM_RD) & (pull_part_of_head < P)
        with m.If(fire & ~is_push & ~is_pull):
            m.d.sync += self.bad_requests.eq(self.bad_requests + 1)
        m.d.comb += [c_w.addr.eq(push_index), c_w.data.eq(head.data), c_w.en.eq(is_push),
                     r_pull.addr.eq(head.addr[bb_bits:30])]
        rsp_tag = [Signal(8, name=f"rsp_tag_{k}") for k in range(n)]
        rsp_data_from_mem = Signal(n)
        rsp_op = [Signal(2, name=f"rsp_op_{k}") for k in range(n)]
        for k in range(n):
            with m.If(fire & (pick == k)):
                m.d.sync += [busy_rsp[k].eq(1), rsp_tag[k].eq(head.tag),
                             rsp_op[k].eq(Mux(head.opcode == CciOpcode.MEM_RD, CciOpcode.MEM_DATA, CciOpcode.CMP)),
                             rsp_data_from_mem[k].eq(is_pull)]
            held = Signal(width, name=f"rsp_data_{k}")
            first = Signal(name=f"rsp_first_{k}")
            m.d.sync += first.eq(fire & (pick == k))
            with m.If(first):
                m.d.sync += held.eq(r_pull.data)
            data = Mux(first, r_pull.data, held)
            m.d.comb += [rsps[k].valid.eq(busy_rsp[k]), rsps[k].payload.tag.eq(rsp_tag[k]),
                         rsps[k].payload.opcode.eq(rsp_op[k]),
                         rsps[k].payload.data.eq(Mux(rsp_data_from_mem[k], data, 0))]
            with m.If(rsps[k].valid & rsps[k].ready):
                m.d.sync += busy_rsp[k].eq(0)

        # ---- summation: one part at a time, pass w = 1..n-1, beats streamed through the ALU -----------------
        s_part = Signal(range(P))
        s_pass = Signal(range(n + 1))
        s_beat = Signal(pb_bits + 1)
        s_wait = Signal(range(ReductionAlu.latency + 4))
        c_r0 = contrib.read_port()          # worker 0's beat, the first operand of pass 1
        m.submodules.alu = alu = ReductionAlu(lanes=self.bb // 4, tag_width=pb_bits)
        in_pass = Signal()
        done_part = Signal()
        ready = [~complete[p] & (arrived[p] == n * pb) for p in range(P)]
        with m.FSM(name="sum"):
            with m.State("IDLE"):
                for p in reversed(range(P)):
                    with m.If(ready[p]):
                        m.d.sync += [s_part.eq(p), s_pass.eq(1), s_beat.eq(0)]
                with m.If(Cat(*ready).any()):
                    m.next = "PASS"
            with m.State("PASS"):
                m.d.comb += in_pass.eq(s_beat < pb)
                with m.If(s_beat < pb):
                    m.d.sync += s_beat.eq(s_beat + 1)
                with m.Else():
                    m.d.sync += s_wait.eq(0)
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += s_wait.eq(s_wait + 1)
                with m.If(s_wait == ReductionAlu.latency + 2):
                    with m.If(s_pass == n - 1):
                        m.d.comb += done_part.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [s_pass.eq(s_pass + 1), s_beat.eq(0)]
                        m.next = "PASS"
        beat = s_beat[:pb_bits]
        m.d.comb += [c_r.addr.eq(((s_part * n + s_pass) << pb_bits) | beat),
                     c_r0.addr.eq(((s_part * n) << pb_bits) | beat),
                     r_acc.addr.eq((s_part << pb_bits) | beat)]
        issued = Signal()
        issued_first = Signal()
        issued_beat = Signal(pb_bits)
        m.d.sync += [issued.eq(in_pass), issued_first.eq(s_pass == 1), issued_beat.eq(beat)]
        m.d.comb += [
            alu.i.valid.eq(issued),
            alu.i.payload.a.eq(Mux(issued_first, c_r0.data, r_acc.data)),
            alu.i.payload.b.eq(c_r.data),
            alu.i.payload.dtype.eq(self.dtype),
            alu.i.payload.op.eq(self.op),
            alu.i.payload.tag.eq(issued_beat),
            alu.o.ready.eq(1),
            r_w.addr.eq((s_part << pb_bits) | alu.o.payload.tag),
            r_w.data.eq(alu.o.payload.data),
            r_w.en.eq(alu.o.valid),
        ]

        # ---- part state: contributions counted, complete after the last pass, reusable after the last pull ----
        for p in range(P):
            push_here = is_push & (part_of_push == p)
            last_pull = is_pull & (pull_part_of_head == p) & (pulled[p] == n * pb - 1)
            with m.If(is_pull & (pull_part_of_head == p)):
                m.d.sync += pulled[p].eq(Mux(last_pull, 0, pulled[p] + 1))
                for k in range(n):
                    with m.If(pick == k):
                        m.d.sync += taken[p][k].eq(taken[p][k] + 1)
            with m.If(last_pull):
                m.d.sync += [taken[p][k].eq(0) for k in range(n)]
            # a worker may push the next round before the others pulled this one: keep its count
            m.d.sync += arrived[p].eq(arrived[p] + push_here - Mux(last_pull, n * pb, 0))
            with m.If(done_part & (s_part == p)):
                m.d.sync += complete[p].eq(1)
            with m.If(last_pull):
                m.d.sync += complete[p].eq(0)
        with m.If(done_part):
            m.d.sync += self.parts_summed.eq(self.parts_summed + 1)
        return m
