"""The engine's SRAM: chunk buffers in banks, and the beat streamer that reads a slot out of a buffer.

Every chunk buffer is split into two banks by beat address (even and odd beats), each with one read and one
write port, one beat wide, behind a crossbar (each client names the buffer and beat it works on), so LOADs,
SENDs, RECVs and STOREs of different chunks proceed in the same cycle. A chunk runs one FSM step at a time, so
its SENDs and RECVs never meet on its buffer; the units that work beside the FSM do: the load unit filling the
chunk's other slots while a RECV writes one, and the store unit draining a final slot while a SEND reads
another. Clients have fixed priorities; those two are the lowest-priority writer and reader and wait
(``wr_free``/``rd_free``) while a higher one uses their bank. Two streams into one buffer then fall into
step on alternate banks, so both keep one beat per cycle.
"""
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..common.logic import at_least_two

__all__ = ["sram_read_layout", "sram_write_layout", "ChunkSram", "BankStreamer"]


def sram_read_layout(cfg):
    """A read client's request in one cycle: read beat ``addr`` of buffer ``buf`` (data one cycle later)."""
    return data.StructLayout({
        "en": 1,
        "buf": unsigned(max(1, (cfg.n_buffers - 1).bit_length())),
        "addr": unsigned(max(1, (cfg.buffer_beats - 1).bit_length())),
    })


def sram_write_layout(cfg):
    """A write client's request in one cycle: write ``data`` to beat ``addr`` of buffer ``buf``."""
    return data.StructLayout({
        "en": 1,
        "buf": unsigned(max(1, (cfg.n_buffers - 1).bit_length())),
        "addr": unsigned(max(1, (cfg.buffer_beats - 1).bit_length())),
        "data": unsigned(8 * cfg.beat_bytes),
    })


class ChunkSram(wiring.Component):
    """``cfg.n_buffers`` chunk buffers of ``cfg.buffer_beats`` beats, each split into :attr:`SUB_BANKS` banks
    by beat address, with a crossbar for ``n_readers`` read clients and ``n_writers`` write clients. Read data
    appears on ``rdata[i]`` one cycle after the request.

    Lower-numbered clients have priority: ``rd_free[i]`` / ``wr_free[i]`` is high when no lower-numbered client
    of the same kind names the bank client ``i`` names in this cycle (whether or not ``i`` requests), so a client that
    can wait requests only when free. If two clients of one kind name one bank in one cycle anyway, the
    lower-numbered one wins and ``conflict`` is raised in the next cycle (the engine makes it a sticky STATUS bit: it must never
    be seen)."""

    def __init__(self, cfg, n_readers, n_writers):
        self.cfg = cfg
        self.n_readers = n_readers
        self.n_writers = n_writers
        super().__init__({
            "rd": In(data.ArrayLayout(sram_read_layout(cfg), n_readers)),
            "rdata": Out(data.ArrayLayout(unsigned(8 * cfg.beat_bytes), n_readers)),
            "wr": In(data.ArrayLayout(sram_write_layout(cfg), n_writers)),
            "rd_free": Out(n_readers),
            "wr_free": Out(n_writers),
            "conflict": Out(1),
        })

    #: Banks per chunk buffer, interleaved by beat address: two units streaming into (or out of) the same
    #: buffer at one beat per cycle fall into step on alternate banks after at most one cycle of waiting.
    SUB_BANKS = 2

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        width = 8 * cfg.beat_bytes
        nsub = self.SUB_BANKS
        sb = (nsub - 1).bit_length()
        depth = -(-cfg.buffer_beats // nsub)
        conflicts = []
        rdata = []

        def bank_of(req):
            return Cat(req.addr[:sb], req.buf)       # (buffer, sub-bank): the bank a request names

        for b in range(cfg.n_buffers):
            for sub in range(nsub):
                bank = b * nsub + sub
                # `ram_style`: FPGA synthesis puts the bank in block RAM even when it is shallow (Yosys chose
                # LUT RAM and a read mux per 16 words for the board engine's 36-word banks)
                mem = Memory(shape=unsigned(width), depth=depth, init=[], attrs={"ram_style": "block"})
                m.submodules[f"bank{b}_{sub}"] = mem
                rp = mem.read_port()
                wp = mem.write_port()
                rdata.append(rp.data)
                # Priority muxes: highest index first so the lowest-numbered client wins.
                hits = []
                for i in reversed(range(self.n_readers)):
                    req = self.rd[i]
                    hit = req.en & (bank_of(req) == bank)
                    hits.append(hit)
                    with m.If(hit):
                        m.d.comb += rp.addr.eq(req.addr >> sb)
                if len(hits) > 1:
                    conflicts.append(at_least_two(hits))
                whits = []
                for i in reversed(range(self.n_writers)):
                    req = self.wr[i]
                    hit = req.en & (bank_of(req) == bank)
                    whits.append(hit)
                    with m.If(hit):
                        m.d.comb += [wp.en.eq(1), wp.addr.eq(req.addr >> sb), wp.data.eq(req.data)]
                if len(whits) > 1:
                    conflicts.append(at_least_two(whits))
        # Read data: each client takes the bank it named in the previous cycle.
        for i in range(self.n_readers):
            sel = Signal(len(bank_of(self.rd[i])), name=f"rsel{i}")
            m.d.sync += sel.eq(bank_of(self.rd[i]))
            with m.Switch(sel):
                for bank in range(cfg.n_buffers * nsub):
                    with m.Case(bank):
                        m.d.comb += self.rdata[i].eq(rdata[bank])
        if conflicts:
            # a cycle late: each bank's conflict registered, then their OR (a diagnostic, off the grant paths)
            banks = Signal(len(conflicts))
            m.d.sync += banks.eq(Cat(*conflicts))
            m.d.comb += self.conflict.eq(banks.any())
        for reqs, free in ((self.rd, self.rd_free), (self.wr, self.wr_free)):
            for i in range(len(free)):
                taken = [reqs[j].en & (bank_of(reqs[j]) == bank_of(reqs[i])) for j in range(i)]
                m.d.comb += free[i].eq(~Cat(*taken).any() if taken else 1)
        return m


class BankStreamer(wiring.Component):
    """Reads runs of consecutive beats of a buffer as a stream with backpressure, one run after another.

    ``start`` (a one-cycle pulse with ``buf``, ``addr``, ``beats`` > 0) queues a run; it may come only while
    ``ready`` is high, which is as soon as every read of the previous run has been issued, so runs follow each
    other without a gap. ``issued_last`` pulses in the cycle the last read of a run is issued (the slot may be
    overwritten from the next cycle on). ``o`` carries the beats in order, ``last`` on each run's last beat;
    ``busy`` is high while any beat is still to be handed over. Reads are issued ahead into a small FIFO so the
    stream runs at one beat per cycle despite the SRAM's read latency. ``rd``/``rdata`` connect to one read
    client of :class:`ChunkSram`; a read issues only while ``gate`` is high (the client's ``rd_free``, for a
    client that must give way; tied high otherwise).
    """

    DEPTH = 4

    def __init__(self, cfg):
        self.cfg = cfg
        rl = sram_read_layout(cfg)
        super().__init__({
            "start": In(1),
            "buf": In(rl.members["buf"]),
            "addr": In(rl.members["addr"]),
            "beats": In(16),
            "ready": Out(1),
            "issued_last": Out(1),
            "busy": Out(1),
            "gate": In(1, init=1),
            "rd": Out(rl),
            "rdata": In(unsigned(8 * cfg.beat_bytes)),
            "o": Out(stream.Signature(data.StructLayout({"data": unsigned(8 * cfg.beat_bytes), "last": 1}))),
        })

    def elaborate(self, platform):
        m = Module()
        W = 8 * self.cfg.beat_bytes
        m.submodules.q = q = fifo.SyncFIFOBuffered(width=W + 1, depth=self.DEPTH)
        buf = Signal.like(self.buf)
        addr = Signal.like(self.addr)
        to_issue = Signal(16)       # reads of the current run not yet issued
        to_deliver = Signal(17)     # beats of all queued runs not yet handed over
        inflight = Signal(range(self.DEPTH + 2))
        issue = Signal()
        landed = Signal()
        last_issue = Signal()
        idle = Signal(init=1)       # to_issue == 0, in a flip-flop: ``ready`` feeds the issue arbiter's grant
        m.d.comb += [
            # A read may issue only if its beat will find room in the FIFO.
            issue.eq((to_issue != 0) & (q.level + inflight < self.DEPTH) & self.gate),
            self.rd.en.eq(issue),
            self.rd.buf.eq(buf),
            self.rd.addr.eq(addr),
            self.ready.eq(idle),
            self.issued_last.eq(issue & (to_issue == 1)),
            self.busy.eq(to_deliver != 0),
        ]
        m.d.sync += [landed.eq(issue), last_issue.eq(issue & (to_issue == 1))]
        took = self.o.valid & self.o.ready
        m.d.comb += [
            q.w_en.eq(landed),
            q.w_data.eq(self.rdata | (last_issue.as_unsigned() << W)),
            self.o.valid.eq(q.r_rdy),
            self.o.payload.data.eq(q.r_data[:W]),
            self.o.payload.last.eq(q.r_data[W]),
            q.r_en.eq(self.o.ready),
        ]
        # the beats left to deliver: the sums with and without a new run are made from registers and the run's
        # length; the start (the owner's decision) and the hand-over (the consumer's ready) only pick one
        queued = Signal.like(to_deliver)
        m.d.comb += queued.eq(to_deliver + self.beats)
        m.d.sync += [
            inflight.eq(inflight + issue - landed),
            to_deliver.eq(Mux(self.start, Mux(took, queued - 1, queued), Mux(took, to_deliver - 1, to_deliver))),
        ]
        with m.If(issue):
            m.d.sync += [to_issue.eq(to_issue - 1), addr.eq(addr + 1)]
        with m.If(issue & (to_issue == 1)):
            m.d.sync += idle.eq(1)
        with m.If(self.start):
            m.d.sync += [buf.eq(self.buf), addr.eq(self.addr), to_issue.eq(self.beats), idle.eq(self.beats == 0)]
        return m
