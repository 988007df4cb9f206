"""BytePS summation service on a memory device: ``n_workers`` CCI ports; each worker pushes its contribution of a
part (``MEM_WR`` beats) and pulls the part's sum (``MEM_RD``). Two modes (``mode``, :class:`SummationMode`),
each exactly as :class:`syncfabric.sim.golden.byteps.SummationService`:

* ``SYNC``: a pull is answered only once all ``n_workers`` contributions arrived. The sum is taken in worker
  order, ``((c0 (+) c1) (+) c2) ...``, by the reduction ALU.
* ``ASYNC`` (the paper's asynchronous training, section 5: workers push *delta parameters*, the service keeps
  the latest parameters ``w`` and adds every delta at once): a push of a beat is applied at once,
  ``w = w (+) dw`` (the first push of a beat since it was last summed in sync mode copies: ``w = dw``, the
  paper's initial ``w0``); a pull returns the beat's current ``w`` (zero if not pushed since then) without
  waiting for any other worker. Pushes and pulls take effect in the order the service accepts them: a request
  to a beat whose push is still in the ALU waits at its port's head (read after write), so every answer is the
  golden model's for the acceptance order, each beat behaving as one golden part (the sum is element-wise;
  the beats of two workers' pushes of a part may interleave).

Address map (bytes): ``PUSH | ((part * n_workers + worker) * part_beats + beat) * beat_bytes`` for a
contribution (the worker field names the contributor), ``PULL | (part * part_beats + beat) * beat_bytes``
for a result beat; with ``registers=True``, ``SUM_CTRL + offset`` for the control registers of
:func:`~syncfabric.hdl.coarse.layouts.summation_register_map` (any port; they replace the ``mode``, ``dtype``
and ``op`` inputs, so a host reaches everything over its CCI path). A part is reusable (the next round) once
every worker pulled every beat of it (each worker pulls each beat once); a worker's pull of the next round
waits until then.

Each port serves its requests in order; a pull of an incomplete part waits at its port's head without
blocking the other ports (a worker pulls only after pushing, so the missing contributions come from other
ports: no deadlock). One request is served per cycle (round-robin among ports whose head can be served); a
port takes its next request in the cycle its response leaves (asynchronous mode: a cycle later, see below).
Summation runs pass by pass (worker 1, 2, ... against the running sum), streaming the part's beats through
the ALU, one part at a time.

Asynchronous pipeline: accept (read ``w`` of the beat) -> X (``w`` and ``dw`` into the ALU) -> ALU (latency
``L``) -> write ``w``. ``L + 1`` accepted pushes are in flight at most; a scoreboard of their beat addresses
(:class:`PushScoreboard`: a shift register, ``L`` comparators per port, a registered answer) holds back a
request to one of those beats. The result memory keeps one flag bit per beat: set by an asynchronous write,
cleared by a synchronous sum.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..alu import ReductionAlu
from ..common.layouts import DTYPE_SHAPE, OP_SHAPE
from ..common.refuse import Checked
from .layouts import (SUM_PULL, SUM_PUSH, CciOpcode, cci_flit_layout, sum_pull_addr, sum_push_addr,
                      summation_mode_layout, summation_register_map)

__all__ = ["SummationService", "SummationMode", "PushScoreboard", "PUSH", "PULL"]

#: Address bases of the two regions (bit 30 selects; bit 31 is the control registers').
PUSH = SUM_PUSH
PULL = SUM_PULL


class SummationMode(enum.Enum, shape=1):
    """Training mode of the summation service (BytePS section 5)."""
    SYNC = 0        #: a pull waits for every worker's contribution of the round
    ASYNC = 1       #: a push is added to the stored parameters at once; a pull returns them at once


class PushScoreboard(Checked, wiring.Component):
    """Which requests name the beat of a push still in flight: a push is in flight for ``depth`` cycles after
    the cycle it is accepted in. The answer is registered (it comes from flip-flops, off the arbiter's path) and
    is about the request a port held in the previous cycle: a stream's payload holds until it is accepted.

    Ports: ``push`` (stream of beat addresses, always ready: the push accepted this cycle), ``probe``
    (``probes`` beat addresses, the ports' requests), ``same`` (``probes`` bits: the push accepted this cycle
    names ``probe[k]``'s beat; the caller compares the ports' addresses in parallel with its arbitration),
    ``hit`` (``probes`` bits, registered: the beat ``probe[k]`` named in the previous cycle is in flight now).
    ``depth - 1`` address registers and comparators per probe."""

    @classmethod
    def check(cls, depth, addr_width, probes):
        if depth < 1 or probes < 1:
            raise ValueError("a scoreboard needs a depth and a probe")

    def __init__(self, depth, addr_width, probes):
        self.depth = depth
        super().__init__({"push": In(stream.Signature(addr_width, always_ready=True)),
                          "probe": In(addr_width).array(probes), "same": In(probes), "hit": Out(probes)})

    def elaborate(self, platform):
        m = Module()
        # pushes accepted 1 .. depth - 1 cycles ago: next cycle they are 2 .. depth cycles old, still in flight
        valid = [Signal(name=f"valid_{j}") for j in range(self.depth - 1)]
        addr = [Signal(len(self.push.payload), name=f"addr_{j}") for j in range(self.depth - 1)]
        if valid:
            m.d.sync += [valid[0].eq(self.push.valid), addr[0].eq(self.push.payload)]
            m.d.sync += [valid[j].eq(valid[j - 1]) for j in range(1, self.depth - 1)]
            m.d.sync += [addr[j].eq(addr[j - 1]) for j in range(1, self.depth - 1)]
        for k, probe in enumerate(self.probe):
            m.d.sync += self.hit[k].eq(Cat(self.same[k], *(v & (a == probe) for v, a in zip(valid, addr))).any())
        return m


class SummationService(Checked, wiring.Component):
    """See the module docstring. Ports ``w{k}_req`` (In CCI flits) and ``w{k}_rsp`` (Out), ``mode``
    (:class:`SummationMode`), ``dtype``/``op`` (inputs, all three held while requests are in flight; switching
    to ``ASYNC`` keeps the parameters of beats last written asynchronously), ``parts_summed`` (Out counter of
    parts summed in sync mode), ``pushes_applied`` (Out counter of asynchronous pushes) and ``bad_requests`` (Out
    counter of malformed requests: a push outside the parts or naming another port's worker, a pull outside
    the parts, a read in the push region or a write in the pull region; each is answered at once, a read with
    zero data, and changes nothing).

    ``registers=True``: no ``mode``/``dtype``/``op`` inputs; the MODE register of
    :func:`~syncfabric.hdl.coarse.layouts.summation_register_map` holds them (reset: synchronous), written
    through any port, and the counters are readable there too (a write to a read-only register is ignored; an
    access to no register is a malformed request)."""

    @classmethod
    def check(cls, n_workers=4, beat_bytes=8, part_beats=4, n_parts=4, registers=False):
        exact_log2(part_beats)
        exact_log2(beat_bytes)
        if n_workers < 2 or n_parts < 1:
            raise ValueError("a summation service needs at least 2 workers and 1 part")

    def __init__(self, n_workers=4, beat_bytes=8, part_beats=4, n_parts=4, registers=False):
        self.n, self.bb, self.pb, self.n_parts = n_workers, beat_bytes, part_beats, n_parts
        self.registers = registers
        flit = stream.Signature(cci_flit_layout(beat_bytes))
        members = {} if registers else {"mode": In(SummationMode), "dtype": In(DTYPE_SHAPE), "op": In(OP_SHAPE)}
        members.update({"parts_summed": Out(32), "pushes_applied": Out(32), "bad_requests": Out(32)})
        for k in range(n_workers):
            members[f"w{k}_req"] = In(flit)
            members[f"w{k}_rsp"] = Out(flit)
        super().__init__(members)

    def push_addr(self, part, worker, beat):
        """Byte address of a contribution beat."""
        return sum_push_addr(self.n, self.pb, self.bb, part, worker, beat)

    def pull_addr(self, part, beat):
        """Byte address of a result beat."""
        return sum_pull_addr(self.pb, self.bb, part, beat)

    def elaborate(self, platform):
        m = Module()
        n, pb, P = self.n, self.pb, self.n_parts
        bb_bits, pb_bits = exact_log2(self.bb), exact_log2(pb)
        width = 8 * self.bb
        m.submodules.contrib = contrib = Memory(shape=width, depth=P * n * pb, init=[])
        # the top bit of a result word is the async flag (see the module docstring)
        m.submodules.result = result = Memory(shape=width + 1, depth=P * pb, init=[])
        c_w = contrib.write_port()
        c_r = contrib.read_port()
        r_w = result.write_port()
        r_acc = result.read_port()          # running sum for the ALU
        r_pull = result.read_port()         # answers
        arrived = [Signal(range(2 * n * pb + 1), name=f"arrived_{p}") for p in range(P)]
        complete = Signal(P)
        pulled = [Signal(range(n * pb + 1), name=f"pulled_{p}") for p in range(P)]
        if self.registers:
            mode_reg = Signal(summation_mode_layout())
            asy, dtype, op = mode_reg.asynchronous, mode_reg.dtype, mode_reg.op
        else:
            asy, dtype, op = self.mode == SummationMode.ASYNC, self.dtype, self.op
        aw = max(1, ceil_log2(P * pb))
        # the ALU's tag: where the result goes and, for an async first push, the beat to store instead of a sum
        tag_layout = data.StructLayout({"addr": aw, "copy": 1, "asy": 1, "data": width})
        m.submodules.alu = alu = ReductionAlu(lanes=self.bb // 4, tag_width=tag_layout.size)
        L = alu.latency

        def part_of(index, name):
            """Part of a push-region beat index, ``index // (n * part_beats)`` by comparison (n need not be a
            power of two); 0 outside the parts (such a push is malformed)."""
            part = Signal(range(P + 1), name=name)
            for p in range(P):
                with m.If((index >= p * n * pb) & (index < (p + 1) * n * pb)):
                    m.d.comb += part.eq(p)
            return part

        def beat_addr(flit, name):
            """Result-memory address (``part * part_beats + beat``) a push or a pull names. Only the index bits a
            good request can use are decoded (short paths into the arbiter): a malformed request may alias a
            beat, which at most delays its answer."""
            index = flit.addr[bb_bits:bb_bits + max(1, ceil_log2(P * n * pb))]
            addr = Signal(aw, name=name)
            m.d.comb += addr.eq(Mux(flit.addr[30], index, Cat(index[:pb_bits], part_of(index, f"{name}_part"))))
            return addr

        # ---- request arbitration: a port's head is servable if a push, or a pull of a complete part ----------
        reqs = [getattr(self, f"w{k}_req") for k in range(n)]
        rsps = [getattr(self, f"w{k}_rsp") for k in range(n)]
        pulling = [r.payload.addr[30] & ~r.payload.addr[31] for r in reqs]
        pull_part = [r.payload.addr[bb_bits + pb_bits:30] for r in reqs]
        # beats of the current round each worker pulled per part: a worker that pulled all of a part waits
        # (its next pull is of the next round) until every worker pulled it and the part is summed again
        taken = [[Signal(range(pb + 1), name=f"taken_{p}_{k}") for k in range(n)] for p in range(P)]
        psel = [pull_part[k][:max(1, ceil_log2(P))] for k in range(n)]
        # a malformed request (see ``bad_requests``) is answered at once, so only good pulls wait
        good_pull = [pulling[k] & (r.payload.opcode == CciOpcode.MEM_RD) & (pull_part[k] < P)
                     for k, r in enumerate(reqs)]
        sync_ok = [~good_pull[k] | (complete.bit_select(psel[k], 1)
                                    & (Array(taken[p][k] for p in range(P))[psel[k]] < pb))
                   for k in range(n)]
        # async: the scoreboard knows the beats of the pushes accepted in the last L + 1 cycles (each written
        # L + 1 cycles after acceptance: the ALU never stalls); a request to one of them waits. Its answer is
        # registered, about the request a port held last cycle: a request new this cycle waits one cycle (a
        # port's response register costs that cycle anyway)
        m.submodules.scoreboard = sb = PushScoreboard(L + 1, aw, n)
        waddr = [beat_addr(r.payload, f"waddr_{k}") for k, r in enumerate(reqs)]
        held_req = Signal(n)
        m.d.sync += held_req.eq(Cat(r.valid & ~r.ready for r in reqs))
        m.d.comb += [sb.probe[k].eq(waddr[k]) for k in range(n)]
        servable = [r.valid & Mux(asy, held_req[k] & ~sb.hit[k], sync_ok[k]) for k, r in enumerate(reqs)]
        # a response register per port (the answer is sent while the next request may be taken elsewhere); a
        # port takes its next request in the cycle its response leaves (``ready`` of the response link: from its
        # registers), so a port serves a request per cycle in sync mode
        last = Signal(range(n))
        pick = Signal(range(n))
        any_req = Signal()
        busy_rsp = Signal(n)
        rsp_free = [~busy_rsp[k] | rsps[k].ready for k in range(n)]
        for off in reversed(range(1, n + 1)):
            for k in range(n):
                idx = (k + off) % n
                with m.If((last == k) & servable[idx] & rsp_free[idx]):
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
        part_of_push = part_of(push_index, "part_of_push")
        head_waddr = Array(waddr)[pick]
        # a push must name an existing part and the worker of the port it came in on
        slot = push_index >> pb_bits
        is_push = (fire & ~head.addr[31] & ~head.addr[30] & (head.opcode == CciOpcode.MEM_WR) & (slot < P * n)
                   & (slot == part_of_push * n + pick))
        is_pull = (fire & ~head.addr[31] & head.addr[30] & (head.opcode == CciOpcode.MEM_RD)
                   & (pull_part_of_head < P))
        # control registers (registers=True): one per beat address from SUM_CTRL
        regmap = summation_register_map(self.bb)
        reg_names = [r.name for r in regmap.registers()]
        reg_bits = max(1, ceil_log2(len(reg_names)))
        reg_index = head.addr[bb_bits:bb_bits + reg_bits]
        is_reg = Signal()
        if self.registers:
            assert [regmap.addr(name) for name in reg_names] == [i * self.bb for i in range(len(reg_names))]
            m.d.comb += is_reg.eq(fire & head.addr[31] & (head.addr[bb_bits + reg_bits:31] == 0)
                                  & (reg_index < len(reg_names)) & (head.addr[:bb_bits] == 0))
            counters = {"MODE": mode_reg.as_value(), "PARTS_SUMMED": self.parts_summed,
                        "PUSHES_APPLIED": self.pushes_applied, "BAD_REQUESTS": self.bad_requests}
            reg_value = Array(counters[name] for name in reg_names)[reg_index]
            with m.If(is_reg & (head.opcode == CciOpcode.MEM_WR) & (reg_index == reg_names.index("MODE"))):
                m.d.sync += mode_reg.eq(head.data[:len(mode_reg.as_value())])
        else:
            reg_value = 0
        is_reg_read = is_reg & (head.opcode == CciOpcode.MEM_RD)
        with m.If(fire & ~is_push & ~is_pull & ~is_reg):
            m.d.sync += self.bad_requests.eq(self.bad_requests + 1)
        sync_push, sync_pull, async_push = is_push & ~asy, is_pull & ~asy, is_push & asy
        m.d.comb += [c_w.addr.eq(push_index), c_w.data.eq(head.data), c_w.en.eq(sync_push),
                     r_pull.addr.eq(head.addr[bb_bits:30])]
        m.d.comb += [sb.push.valid.eq(async_push), sb.push.payload.eq(head_waddr)]
        for k in range(n):
            same = Array(waddr[j] == waddr[k] for j in range(n))
            m.d.comb += sb.same[k].eq(async_push & same[pick])
        # an async pull of a beat never written asynchronously reads zero
        pull_word = Mux(asy & ~r_pull.data[width], 0, r_pull.data[:width])
        rsp_tag = [Signal(8, name=f"rsp_tag_{k}") for k in range(n)]
        rsp_data_from_mem = Signal(n)
        rsp_data_from_reg = Signal(n)
        rsp_op = [Signal(2, name=f"rsp_op_{k}") for k in range(n)]
        for k in range(n):
            with m.If(rsps[k].valid & rsps[k].ready):
                m.d.sync += busy_rsp[k].eq(0)
            with m.If(fire & (pick == k)):          # after the clear: a response leaving as the next is taken
                m.d.sync += [busy_rsp[k].eq(1), rsp_tag[k].eq(head.tag),
                             rsp_op[k].eq(Mux(head.opcode == CciOpcode.MEM_RD, CciOpcode.MEM_DATA, CciOpcode.CMP)),
                             rsp_data_from_mem[k].eq(is_pull), rsp_data_from_reg[k].eq(is_reg_read)]
            held = Signal(width, name=f"rsp_data_{k}")
            first = Signal(name=f"rsp_first_{k}")
            m.d.sync += first.eq(fire & (pick == k))
            with m.If(first & rsp_data_from_mem[k]):
                m.d.sync += held.eq(pull_word)          # a pull: the result memory answers a cycle later
            with m.If(fire & (pick == k) & is_reg_read):
                m.d.sync += held.eq(reg_value)          # a register: its value as the request is taken (after
                #                                         the line above: the pull it replaces is leaving now)
            word = Mux(first & rsp_data_from_mem[k], pull_word, held)
            m.d.comb += [rsps[k].valid.eq(busy_rsp[k]), rsps[k].payload.tag.eq(rsp_tag[k]),
                         rsps[k].payload.opcode.eq(rsp_op[k]),
                         rsps[k].payload.data.eq(Mux(rsp_data_from_mem[k] | rsp_data_from_reg[k], word, 0))]

        # ---- summation: one part at a time, pass w = 1..n-1, beats streamed through the ALU -----------------
        s_part = Signal(range(P))
        s_pass = Signal(range(n + 1))
        s_beat = Signal(pb_bits + 1)
        s_wait = Signal(range(L + 4))
        c_r0 = contrib.read_port()          # worker 0's beat, the first operand of pass 1
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
                with m.If(s_wait == L + 2):
                    with m.If(s_pass == n - 1):
                        m.d.comb += done_part.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [s_pass.eq(s_pass + 1), s_beat.eq(0)]
                        m.next = "PASS"
        beat = s_beat[:pb_bits]
        # r_acc reads the running sum (sync) or the stored w of the beat an async push names, as it is accepted
        m.d.comb += [c_r.addr.eq(((s_part * n + s_pass) << pb_bits) | beat),
                     c_r0.addr.eq(((s_part * n) << pb_bits) | beat),
                     r_acc.addr.eq(Mux(asy, head_waddr, (s_part << pb_bits) | beat))]
        issued = Signal()
        issued_first = Signal()
        issued_beat = Signal(pb_bits)
        m.d.sync += [issued.eq(in_pass), issued_first.eq(s_pass == 1), issued_beat.eq(beat)]
        # stage X of an async push: w arrived from r_acc, dw from the request
        x_valid = Signal()
        x_addr = Signal(aw)
        x_data = Signal(width)
        m.d.sync += [x_valid.eq(async_push), x_addr.eq(head_waddr), x_data.eq(head.data)]
        acc = r_acc.data[:width]
        i_tag = Signal(tag_layout)
        o_tag = data.View(tag_layout, alu.o.payload.tag)
        m.d.comb += [
            i_tag.addr.eq(Mux(x_valid, x_addr, (s_part << pb_bits) | issued_beat)),
            i_tag.copy.eq(x_valid & ~r_acc.data[width]),
            i_tag.asy.eq(x_valid),
            i_tag.data.eq(x_data),
            alu.i.valid.eq(issued | x_valid),
            alu.i.payload.a.eq(Mux(x_valid, acc, Mux(issued_first, c_r0.data, acc))),
            alu.i.payload.b.eq(Mux(x_valid, x_data, c_r.data)),
            alu.i.payload.dtype.eq(dtype),
            alu.i.payload.op.eq(op),
            alu.i.payload.tag.eq(i_tag),
            alu.o.ready.eq(1),
            r_w.addr.eq(o_tag.addr),
            r_w.data.eq(Cat(Mux(o_tag.copy, o_tag.data, alu.o.payload.data), o_tag.asy)),
            r_w.en.eq(alu.o.valid),
        ]
        with m.If(alu.o.valid & o_tag.asy):
            m.d.sync += self.pushes_applied.eq(self.pushes_applied + 1)

        # ---- part state: contributions counted, complete after the last pass, reusable after the last pull ----
        for p in range(P):
            push_here = sync_push & (part_of_push == p)
            last_pull = sync_pull & (pull_part_of_head == p) & (pulled[p] == n * pb - 1)
            with m.If(sync_pull & (pull_part_of_head == p)):
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
