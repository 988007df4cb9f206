"""The issue arbiter: which FSM's ready step is granted this cycle, and why the others wait.

A step is granted when every resource it needs is free (docs/engine.md section 4):

- LOAD / STORE: the load / store unit takes a job;
- SEND on port ``k``: the send unit takes a job, the port's TX mux takes an order entry, the port's queue of
  granted flits is within ``TX_LOOKAHEAD`` (``tx_room``; waived for a step queued behind its own FSM's
  message on the same unit, ``behind``), and the message's channel has a whole message of beat credits and a
  header credit;
- RECV on port ``k``: the receive unit takes a job and the deposit unit does not want the port; the awaited
  header is the next one of a landing channel no job the unit holds has taken (``hit``). On a point-to-point
  port that is the FSM's own channel: its head if the unit holds no job of the channel, its second header
  (``hdr_two``) if the unit holds one (``unpopped``: the job's header is the head until the job ends), so an
  FSM's next RECV waits in the unit, its operand read ahead, while the current message still streams
  (``cand.second``: the header matched is the second; ``cand.count``: the count lane of the header matched,
  which the job builder uses a cycle later, when the unit may have popped the head before it). Through a switch it is
  the first source's channel whose head matches the step's tag, chunk, phase and key and is not held. A
  forward also needs its output port as a SEND does;
- a no-op step (illegal, or an empty LOAD/STORE): nothing.

Of the FSMs whose step can go, the one whose chunk was dispatched first wins (:class:`~.arbiter.OldestPick` on the
FSM bank's age matrix).
The per-FSM wait causes feed the STALL counters. An FSM in ``hold`` is not granted (the issue stage is sending
its previous step's job: :mod:`.issuestage`); its wait is not counted as a stall. The units and order queues
that job takes (``held``) are busy for every step that needs them: a step's request is masked by them last,
after its checks (the stage selects the job's needs after its register, so they arrive later than the units'
own status), and the wait causes count them as the port or DMA unit busy.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...sim.golden.program import StepOp
from ..common.layouts import CHANNEL_BITS, COUNT_BITS, packet_header_layout
from ..common.logic import one_hot_mux
from .arbiter import OldestPick, age_layout
from .decoder import step_layout
from .units import _w

__all__ = ["IssueArbiter", "fsm_request_layout", "port_status_layout", "header_match_layout", "MATCH_FIELDS",
           "take_layout", "candidate_layout", "channel_of"]


def channel_of(cfg, f, peer):
    """The landing channel of FSM ``f``'s message from/to rank ``peer``: the FSM number on point-to-point
    ports, plus ``n_fsms`` times the peer through a switch (``rx_sources`` > 1)."""
    fbits, sbits = exact_log2(cfg.n_fsms), exact_log2(cfg.rx_sources)
    fv = Const(f, fbits) if isinstance(f, int) else f[:fbits]
    return Cat(fv, peer[:sbits]) if cfg.rx_sources > 1 else fv


def fsm_request_layout(cfg):
    """What the arbiter sees of one FSM: its current step and whether the FSM would issue it (``ready``: the
    step is decoded, its slot loaded, and no hazard with the steps it has in flight), whether it has a step in
    flight (``behind``) and the chunk's identity for header matching."""
    return data.StructLayout({"ready": 1, "behind": 1, "step": step_layout(cfg),
                              "tag": unsigned(16), "chunk": unsigned(16), "phase": unsigned(3)})


def port_status_layout(cfg):
    """What the arbiter sees of one link port and its units."""
    n = cfg.n_channels
    return data.StructLayout({
        "send_ready": 1, "recv_ready": 1, "dep_req": 1, "order_ready": 1, "tx_room": 1,
        "beat_credits": data.ArrayLayout(unsigned(cfg.landing_beats.bit_length()), n),
        "hdr_credits": data.ArrayLayout(unsigned(cfg.landing_headers.bit_length()), n),
        "hdr_valid": unsigned(n), "hdr_two": unsigned(n), "unpopped": unsigned(n),
        "heads": data.ArrayLayout(header_match_layout(), n), "next_counts": data.ArrayLayout(unsigned(COUNT_BITS), n),
    })


#: The widest value Amaranth's netlist holds (bits).
MAX_VALUE_BITS = 1 << 16


#: The fields of a landing channel's head the arbiter compares with an FSM's awaited message (and its count
#: lane): the rest of the 128-bit header stays in the datapath, so the port status of an engine with many
#: channels (16 FSMs x 16 sources on a 16-port switch: 256) is about a third as wide.
MATCH_FIELDS = ("tag", "chunk", "phase", "key", "count")


def header_match_layout():
    """What the arbiter sees of a landing channel's head: :data:`MATCH_FIELDS` of the packet header."""
    members = packet_header_layout().members
    return data.StructLayout({name: members[name] for name in MATCH_FIELDS})


def take_layout(cfg):
    """What a granted step's job takes as it goes out: its port's send or receive unit, the TX mux order queue
    of the port its message leaves on (a SEND's, a forward's), the load or the store unit (one-hot per port)."""
    K = cfg.n_ports
    return data.StructLayout({"send": K, "recv": K, "order": K, "load": 1, "store": 1})


def candidate_layout():
    """What a RECV of one FSM would take if granted now: the landing channel, whether the header matched is the
    one behind the head, and that header's count lane."""
    return data.StructLayout({"ch": unsigned(CHANNEL_BITS), "second": 1, "count": unsigned(COUNT_BITS)})


class IssueArbiter(wiring.Component):
    """Grants one step per cycle (``grant``: the FSM, ``grant_oh``: one-hot) and reports per FSM why a ready
    step waits (``cause_port``/``cause_cred``/``cause_land``/``cause_dma``). Per FSM, apart from the grant, it
    says what the step would take (``takes``: unit, order queue, load or store; ``cand``: for a RECV the
    landing channel, second header and count lane): the issue stage registers them for every FSM and selects
    the granted FSM's after its register, so the pick ends at the one-hot's flip-flops."""

    def __init__(self, cfg):
        self.cfg = cfg
        F = cfg.n_fsms
        width = port_status_layout(cfg).size
        if width > MAX_VALUE_BITS:
            raise ValueError(f"{cfg.n_channels} landing channels per port ({F} FSMs x {cfg.rx_sources} sources) "
                             f"make the issue arbiter's port status {width} bits wide, more than one Amaranth "
                             f"value holds ({MAX_VALUE_BITS}): use fewer FSMs or fewer sources (switch ports)")
        super().__init__({
            "fsm": In(data.ArrayLayout(fsm_request_layout(cfg), F)),
            "port": In(data.ArrayLayout(port_status_layout(cfg), cfg.n_ports)),
            "load_ready": In(1), "store_ready": In(1), "hold": In(F), "held": In(take_layout(cfg)),
            "age": In(age_layout(F)),
            "grant": Out(data.StructLayout({"valid": 1, "fsm": _w(F)})), "grant_oh": Out(F),
            "takes": Out(data.ArrayLayout(take_layout(cfg), F)), "cand": Out(data.ArrayLayout(candidate_layout(), F)),
            "cause_port": Out(F), "cause_cred": Out(F), "cause_land": Out(F), "cause_dma": Out(F),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, K, S = cfg.n_fsms, cfg.n_ports, cfg.rx_sources
        ports = self.port
        # per port and FSM: the awaited header heads a channel (and which)
        hit = [Signal(F, name=f"rx{k}_hit") for k in range(K)]
        hit_ch = [[Signal(CHANNEL_BITS, name=f"rx{k}_fsm{f}_ch") for f in range(F)] for k in range(K)]
        hit_count = [[Signal(COUNT_BITS, name=f"rx{k}_fsm{f}_count") for f in range(F)] for k in range(K)]
        second = [Signal(F, name=f"rx{k}_second") for k in range(K)]
        for f, r in enumerate(self.fsm):
            for k, p in enumerate(ports):
                if S == 1:
                    m.d.comb += [second[k][f].eq(p.unpopped[f] & p.hdr_two[f]),
                                 hit[k][f].eq((p.hdr_valid[f] & ~p.unpopped[f]) | second[k][f]),
                                 hit_ch[k][f].eq(f),
                                 hit_count[k][f].eq(Mux(p.unpopped[f], p.next_counts[f], p.heads[f].count))]
                    continue
                for src in reversed(range(S)):          # the first source whose head is the awaited message
                    c = f + F * src
                    h = p.heads[c]
                    with m.If(p.hdr_valid[c] & ~p.unpopped[c] & (h.tag == r.tag) & (h.chunk == r.chunk)
                              & (h.phase == r.phase) & (h.key == r.step.key)):
                        m.d.comb += [hit[k][f].eq(1), hit_ch[k][f].eq(c), hit_count[k][f].eq(h.count)]

        can = Signal(F)
        takes = self.takes
        for f, r in enumerate(self.fsm):
            s = r.step
            real_op = [~s.noop & (s.op == op) for op in (StepOp.SEND, StepOp.RECV, StepOp.LOAD, StepOp.STORE)]
            m.d.comb += [takes[f].load.eq(real_op[2]), takes[f].store.eq(real_op[3])]
            m.d.comb += [t for k in range(K) for t in (
                takes[f].send[k].eq(real_op[0] & (s.port == k)), takes[f].recv[k].eq(real_op[1] & (s.port == k)),
                takes[f].order[k].eq((real_op[0] & (s.port == k)) | (real_op[1] & s.fwd & (s.fwd_port == k))))]
            ch = channel_of(cfg, f, s.peer)      # the credits of this step's message (same index on every port)
            cred_at = [(p.beat_credits[ch] >= s.beats) & (p.hdr_credits[ch] >= 1) for p in ports]
            tx_ok = [p.send_ready & p.order_ready & (p.tx_room | r.behind) for p in ports]
            cred_ok, port_free, land_ok = (Signal(name=f"fsm{f}_{n}") for n in ("cred_ok", "port_free", "land_ok"))
            with m.Switch(s.op):
                with m.Case(StepOp.LOAD):
                    m.d.comb += [port_free.eq(1), cred_ok.eq(1), land_ok.eq(self.load_ready)]
                with m.Case(StepOp.STORE):
                    m.d.comb += [port_free.eq(1), cred_ok.eq(1), land_ok.eq(self.store_ready)]
                with m.Case(StepOp.SEND):
                    for k in range(K):
                        with m.If(s.port == k):
                            m.d.comb += [port_free.eq(tx_ok[k]), cred_ok.eq(cred_at[k]), land_ok.eq(1)]
                with m.Case(StepOp.RECV):
                    for k, p in enumerate(ports):
                        with m.If(s.port == k):
                            rx_ok = p.recv_ready & ~p.dep_req
                            m.d.comb += land_ok.eq(hit[k][f])
                            with m.If(s.fwd):
                                for j, q in enumerate(ports):
                                    with m.If(s.fwd_port == j):
                                        m.d.comb += [port_free.eq(rx_ok & q.order_ready & (q.tx_room | r.behind)),
                                                     cred_ok.eq(cred_at[j])]
                            with m.Else():
                                m.d.comb += [port_free.eq(rx_ok), cred_ok.eq(1)]
            # what the issue stage's registered job takes as it goes out (``held``) blocks a step that needs it:
            # applied to the request last, so the stage's select of that job (after its register) runs beside the
            # checks, not ahead of them; the wait causes see the units as taken, as the rules state them
            t, h = takes[f], self.held
            blk_port = Cat(*[(t.send[k] & h.send[k]) | (t.recv[k] & h.recv[k]) | (t.order[k] & h.order[k])
                             for k in range(K)]).any()
            blk_dma = (t.load & h.load) | (t.store & h.store)
            free_m, land_m = port_free & ~blk_port, land_ok & ~blk_dma
            offered = r.ready & ~self.hold[f]
            real = offered & ~s.noop
            m.d.comb += [
                can[f].eq(offered & (s.noop | (port_free & cred_ok & land_ok)) & ~blk_port & ~blk_dma),
                self.cause_port[f].eq(real & ~free_m),
                self.cause_cred[f].eq(real & free_m & ~cred_ok),
                self.cause_land[f].eq(real & free_m & cred_ok & ~land_m & (s.op == StepOp.RECV)),
                self.cause_dma[f].eq(real & ~land_m & ((s.op == StepOp.LOAD) | (s.op == StepOp.STORE))),
            ]

        m.submodules.oldest = arb = OldestPick(F)
        m.d.comb += [arb.req.eq(can), arb.older.eq(self.age),
                     self.grant.valid.eq(arb.valid), self.grant.fsm.eq(arb.sel), self.grant_oh.eq(arb.onehot)]
        # each FSM's RECV candidate: the landing channel and the count lane of the header its step's port offers
        for f, r in enumerate(self.fsm):
            on = [r.step.port == k for k in range(K)]
            c = self.cand[f]
            m.d.comb += [c.ch.eq(one_hot_mux([(on[k], hit_ch[k][f]) for k in range(K)])),
                         c.second.eq(one_hot_mux([(on[k], second[k][f]) for k in range(K)])),
                         c.count.eq(one_hot_mux([(on[k], hit_count[k][f]) for k in range(K)]))]
        return m
