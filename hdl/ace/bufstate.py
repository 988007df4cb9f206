"""Per chunk buffer: which slots still wait for their LOAD, and the STOREs not yet acknowledged. (The slots'
count lanes live with the FSM holding the chunk: :mod:`.slotcount`.)

- **Loading.** When a chunk is dispatched into a buffer, the slots of its program's load mask are pending (the
  load sequencer loads them later); a LOAD an FSM issues sets its slot; the load unit finishing it (or the
  sequencer skipping an empty block) clears it. A step waits only for its own slot, so a chunk starts sending
  as soon as its first block is in. The step decoder asks (``probe``) whether one slot of one buffer will
  still be loading in the next cycle: the registered masks selected by the probe, this cycle's events folded
  in at the last gates.
- **Stores pending.** STOREs posted into the buffer and not yet acknowledged: a chunk is done, and its buffer
  free again, only when none is left.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import LOAD_MASK_BITS
from .sram import sram_read_layout
from .units import StoreUnit

__all__ = ["BufferState", "BufferPool", "n_mask_slots", "mask_slot_bits"]


def n_mask_slots(cfg):
    """Slots tracked per buffer (programs have at most this many, checked at validation)."""
    return min(cfg.max_slots, LOAD_MASK_BITS)


def mask_slot_bits(cfg):
    """The low bits of a step's 10-bit slot that a tracked slot can have: a step that is not a no-op names a
    slot below :func:`n_mask_slots`, so compares and decodes of its slot need no more."""
    return max(1, (n_mask_slots(cfg) - 1).bit_length())


class BufferState(wiring.Component):
    """Loading masks and pending STOREs of every chunk buffer (see the module docstring).

    Event inputs are one-cycle ``valid`` pulses; several may come in one cycle. ``new`` (a chunk dispatched into
    ``buf``) wins over every other event on that buffer in its cycle.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        NB, NM = cfg.n_buffers, n_mask_slots(cfg)
        buf = sram_read_layout(cfg).members["buf"]
        slot = unsigned(10)
        ev = data.StructLayout({"valid": 1, "buf": buf, "slot": slot})
        super().__init__({
            "new": In(data.StructLayout({"valid": 1, "buf": buf, "load_mask": unsigned(NM)})),
            "load_issue": In(ev), "load_done": In(ev), "skip": In(ev),
            "store_issue": In(data.StructLayout({"valid": 1, "buf": buf})),
            "store_done": In(data.StructLayout({"valid": 1, "buf": buf})),
            "loading": Out(data.ArrayLayout(unsigned(NM), NB)),
            "probe": In(data.StructLayout({"buf": buf, "slot": slot})), "probe_next": Out(1),
            "buf_loading": Out(NB),
            "stores_pending": Out(NB),
        })

    def elaborate(self, platform):
        m = Module()
        NB, NM = self.cfg.n_buffers, n_mask_slots(self.cfg)
        SBITS = mask_slot_bits(self.cfg)
        spend = [Signal(range(StoreUnit.QUEUE + StoreUnit.IN_FLIGHT + 2), name=f"buf{b}_stores")
                 for b in range(NB)]

        def bit(ev, b):
            """The one-hot slot bit of event ``ev`` if it concerns buffer ``b``."""
            return Mux(ev.valid & (ev.buf == b), 1 << ev.slot[:SBITS], 0)

        new = self.new
        skip_slot = Signal(NM)
        m.d.comb += skip_slot.eq(1 << self.skip.slot[:SBITS])
        for b in range(NB):
            is_new = new.valid & (new.buf == b)
            # the slots kept loading: the load sequencer's skip (its decision arrives late) selects between the
            # two outcomes at the end, rather than entering the slot mask ahead of the OR over the slots
            kept_nd = self.loading[b] & ~bit(self.load_done, b)
            kept_sk = kept_nd & ~skip_slot
            skipped = self.skip.valid & (self.skip.buf == b)
            kept = Mux(skipped, kept_sk, kept_nd)
            issued = self.load_issue.valid & (self.load_issue.buf == b) & ~is_new
            m.d.sync += self.loading[b].eq(Mux(is_new, new.load_mask, kept | bit(self.load_issue, b)))
            # buf_loading (= loading[b] != 0 in every cycle) from two flip-flops of its own: it decides the FSMs'
            # hand-offs and with them the partition manager's moves, which should start at registers; the
            # slots still loading apart from a LOAD issued now, and whether one is (the load sequencer's
            # issue decision reaches a flip-flop through one compare, not through the slot decode and OR)
            still, fresh = Signal(name=f"buf{b}_still_loading"), Signal(name=f"buf{b}_load_issued")
            any_kept = Mux(skipped, kept_sk.any(), kept_nd.any())
            m.d.sync += [still.eq(Mux(is_new, new.load_mask.any(), any_kept)), fresh.eq(issued)]
            m.d.comb += self.buf_loading[b].eq(still | fresh)
            inc = self.store_issue.valid & (self.store_issue.buf == b)
            dec = self.store_done.valid & (self.store_done.buf == b)
            m.d.sync += spend[b].eq(spend[b] + inc - dec)
        m.d.comb += [
            self.stores_pending.eq(Cat(*[s != 0 for s in spend])),
        ]

        # the probe: slot `slot` of buffer `buf` in the next cycle's masks. The registered masks are selected by
        # the probe alone; this cycle's events (which come late: the load sequencer's decision, the units'
        # completions) only enter the last gates, each by a compare of its buffer and slot with the probe's
        pb, ps = self.probe.buf, self.probe.slot[:SBITS]

        def hit(ev):
            return ev.valid & (ev.buf == pb) & (ev.slot[:SBITS] == ps)
        held = Signal()
        m.d.comb += held.eq(self.loading[pb].bit_select(ps, 1))
        is_new = new.valid & (new.buf == pb)
        m.d.comb += self.probe_next.eq((ps < NM) & Mux(is_new, new.load_mask.bit_select(ps, 1),
                                                       (held & ~hit(self.load_done) & ~hit(self.skip))
                                                       | hit(self.load_issue)))
        return m


class BufferPool(wiring.Component):
    """The free chunk buffers: every buffer after reset, then each one freed (``free``: a chunk is done). The
    dispatcher takes them from ``take`` in order; at most ``n_buffers`` are ever free, so a free is never
    refused."""

    def __init__(self, cfg):
        self.cfg = cfg
        buf = sram_read_layout(cfg).members["buf"]
        super().__init__({"free": In(data.StructLayout({"valid": 1, "buf": buf})), "take": Out(stream.Signature(buf))})

    def elaborate(self, platform):
        m = Module()
        NB = self.cfg.n_buffers
        m.submodules.fifo = q = fifo.SyncFIFOBuffered(width=len(self.take.payload), depth=NB)
        init = Signal(range(NB + 1))
        with m.If(init < NB):                   # after reset: every buffer, one per cycle
            m.d.comb += [q.w_en.eq(1), q.w_data.eq(init)]
            m.d.sync += init.eq(init + 1)
        with m.Elif(self.free.valid):
            m.d.comb += [q.w_en.eq(1), q.w_data.eq(self.free.buf)]
        m.d.comb += [self.take.valid.eq(q.r_rdy & (init == NB)), self.take.payload.eq(q.r_data),
                     q.r_en.eq(self.take.ready & self.take.valid)]
        return m
