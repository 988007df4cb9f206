"""DMA engines of the ACE: :class:`DmaReader` streams byte ranges of NPU memory in over AXI4, :class:`DmaWriter`
streams beats out to byte ranges.

Both take commands ``{addr, length}`` for ANY byte address and ``length`` >= 1 bytes, and move
``ceil(length / W)`` stream beats per command (``W = cfg.beat_bytes``), aligned to the START OF THE RANGE: byte 0
of beat 0 is the byte at ``addr``. AXI is beat-aligned, so each engine has a barrel shifter that combines two
consecutive AXI beats into one stream beat (reader) or one stream beat into two AXI beats (writer).

AXI use: one ID (0), INCR bursts of full beats (``AxSIZE = log2(W)``), at most ``cfg.dma_max_burst`` beats,
never crossing a 4 KiB boundary (an AXI rule), up to ``cfg.dma_outstanding`` bursts in flight per engine.
Responses other than OKAY are reported per command (``err``).

Timing (checked in tests/hdl/test_dma.py): both engines move one beat per cycle in steady state and take a new
command every cycle; the reader loses one cycle per command whose ``addr`` is not beat-aligned (it must hold the
first AXI beat before it can emit a stream beat), the writer one per command that touches one more AXI beat than
it has stream beats. Commands, the bursts cut from them and the writer's data go through register slices
(``SkidBuffer``, hdl/common/skid.py: no path from a producer reaches the burst splitter or the W realigner, and
the burst length's clamps stay out of the address channel's admission check); the reader's beats leave through a
ready-only one (the consumer's ready stops there, no cycle added). Latencies in cycles between handshakes, with
an always-ready slave and consumer: command -> AR/AW 4; reader R -> ``data`` 3 (4 for an unaligned command's
first beat), so command -> first beat 8; the writer takes two ``data`` beats ahead of its command, and its last
``data`` beat -> ``done`` is 4 + the slave's B latency.

``length`` = 0 is not a valid command (the engines would stream garbage).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..common.axi import AXI4ReadSignature, AXI4WriteSignature, AxiBurst
from ..common.logic import late
from ..common.skid import SkidBuffer
from .config import AceConfig

__all__ = ["LENGTH_BITS", "COUNTER_BITS", "DOMAIN_ENGINE", "domain_shape", "dma_cmd_layout", "dma_read_data_layout",
           "dma_write_data_layout",
           "dma_done_layout", "DmaReader", "DmaWriter"]

#: Width of a command's ``length`` field (bytes; up to 16 MiB - 1 per command).
LENGTH_BITS = 24
#: Counter width of the statistics outputs.
COUNTER_BITS = 32
#: AxCACHE = normal non-cacheable bufferable: lets an interconnect merge or buffer the DMA's traffic.
_AXCACHE = 0b0011
#: AXI bursts must not cross 4 KiB boundaries.
_PAGE_BITS = 12


#: The protection domain of the engine's own accesses (descriptor fetch, completions, the spill window);
#: domain ``s + 1`` is the command in table slot ``s``.
DOMAIN_ENGINE = 0


def domain_shape(cfg: AceConfig):
    """Shape of a DMA command's protection domain: :data:`DOMAIN_ENGINE` or 1 + a command table slot."""
    return unsigned(cfg.n_cmds.bit_length())


def dma_cmd_layout(cfg: AceConfig):
    """A DMA command: ``length`` (>= 1) bytes from byte address ``addr``, on behalf of ``domain``
    (:data:`DOMAIN_ENGINE`, or 1 + the table slot of the command it moves data for), which every burst of the
    command carries to the engine's AXI firewall (``ar_domain``/``aw_domain``)."""
    return data.StructLayout({"addr": unsigned(cfg.addr_width), "length": unsigned(LENGTH_BITS),
                              "domain": domain_shape(cfg)})


def dma_read_data_layout(cfg: AceConfig):
    """A beat out of :class:`DmaReader`: ``last`` on a command's last beat, ``err`` on it if any read failed."""
    return data.StructLayout({"data": unsigned(8 * cfg.beat_bytes), "last": 1, "err": 1})


def dma_write_data_layout(cfg: AceConfig):
    """A beat into :class:`DmaWriter` (``last`` is informational: the writer counts beats by ``length``)."""
    return data.StructLayout({"data": unsigned(8 * cfg.beat_bytes), "last": 1})


def dma_done_layout():
    """A write command's completion: ``err`` if any of its write responses was not OKAY."""
    return data.StructLayout({"err": 1})


def _check_cfg(cfg):
    if cfg.beat_bytes > (1 << _PAGE_BITS):
        raise ValueError("beat_bytes must be <= 4096 (a burst may not cross a 4 KiB page)")


def _beats_bits(cfg):
    """Width of beat counts of one command: ceil((W - 1 + 2**LENGTH_BITS - 1) / W) fits."""
    return LENGTH_BITS - exact_log2(cfg.beat_bytes) + 1


class _BurstSplitter(wiring.Component):
    """Cuts the AXI beats that ``length`` bytes from ``addr`` touch into bursts of at most ``dma_max_burst``
    beats that do not cross a 4 KiB page. The beat count is computed here, next to the counter it loads (one
    module, so that synthesis sees the whole path from the command slice's flip-flops). ``burst`` leaves
    through a register slice: the burst length's page and size clamps and the owner's admission check (buffer
    space, queues) would otherwise be one cycle; a new run is taken in the cycle the previous run's last burst
    enters the slice."""

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "run": In(stream.Signature(dma_cmd_layout(cfg))),
            "burst": Out(stream.Signature(data.StructLayout({
                "addr": unsigned(cfg.addr_width), "len": unsigned(8), "last": 1, "domain": domain_shape(cfg)}))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        lw = exact_log2(cfg.beat_bytes)
        addr = Signal(cfg.addr_width)
        left = Signal(_beats_bits(cfg))
        domain = Signal(domain_shape(cfg))          # the run's: every burst of it carries it

        # Beats to the end of the page; a power of two page over a power of two beat: never 0.
        page_beats = 1 << (_PAGE_BITS - lw)
        # the burst clamp min(to_page, dma_max_burst) in a register beside the address it belongs to, computed
        # with the address for the state it takes next, so that a burst's length starts at flip-flops
        limit = Signal(range(max(cfg.dma_max_burst, page_beats) + 1))

        def clamp(beat_in_page):
            rest = page_beats - beat_in_page
            return Mux(rest < cfg.dma_max_burst, rest, cfg.dma_max_burst)
        n = Signal(range(max(cfg.dma_max_burst, 1) + 1))
        m.d.comb += n.eq(Mux(left < limit, left, limit))

        m.submodules.out = out = SkidBuffer(self.burst.payload.shape())
        wiring.connect(m, out.o, wiring.flipped(self.burst))
        burst = out.i
        # n == left, decided from the clamps, not from their minimum (the run hand-over waits on it)
        last, idle = Signal(), Signal()
        m.d.comb += [
            burst.valid.eq(~idle),
            burst.payload.addr.eq(addr),
            burst.payload.len.eq(n - 1),
            burst.payload.last.eq(last),
            burst.payload.domain.eq(domain),
            self.run.ready.eq(idle | (burst.ready & last)),
        ]
        if not cfg.fabric:
            m.d.comb += [last.eq(left <= limit), idle.eq(left == 0)]
        # the next burst's address: a burst that is not the run's last ends at its page's end or after
        # dma_max_burst beats, both made from flip-flops, and the page clamp (a compare against a constant)
        # picks one; after a run's last burst the address is not used
        at_page = Signal()
        if cfg.dma_max_burst > page_beats:
            m.d.comb += at_page.eq(1)
        else:                                                           # to_page < dma_max_burst
            m.d.comb += at_page.eq(addr[lw:_PAGE_BITS] > page_beats - cfg.dma_max_burst)
        next_page = Cat(Const(0, _PAGE_BITS), addr[_PAGE_BITS:] + 1)
        step_beat = (addr[lw:_PAGE_BITS] + cfg.dma_max_burst)[:_PAGE_BITS - lw]    # in the next page: wraps
        with m.If(burst.valid & burst.ready):
            m.d.sync += [
                addr.eq(Mux(at_page, next_page, addr + (cfg.dma_max_burst << lw))),
                limit.eq(clamp(Mux(at_page, 0, step_beat))),
                # a run's last burst takes what is left, any other one the clamp: the flag picks, the
                # count does not wait for n's compare (n == limit when not last)
                left.eq(Mux(last, 0, left - limit)),
            ]
        run = self.run.payload
        run_addr = Cat(Const(0, lw), run.addr[lw:])
        run_left = (run.addr[:lw] + run.length + (cfg.beat_bytes - 1))[lw:]
        with m.If(self.run.valid & self.run.ready):
            m.d.sync += [addr.eq(run_addr), left.eq(run_left), domain.eq(run.domain),
                         limit.eq(clamp(run.addr[lw:_PAGE_BITS]))]
        if cfg.fabric:
            # (an FPGA's LUTs) the last-burst and idle flags in flip-flops, each computed for the state the
            # registers take next, for a run taken now and for a burst taken now side by side (the handshakes
            # only pick one): the clamps' carry chains end at these flip-flops instead of running on through
            # the run hand-over into the command slice
            last_r, idle_r = Signal(), Signal(init=1)
            m.d.comb += [last.eq(last_r), idle.eq(idle_r)]

            mb = cfg.dma_max_burst
            to_page = Signal(range(page_beats + 1))
            m.d.comb += to_page.eq(page_beats - addr[lw:_PAGE_BITS])
            run_last = (run_left <= mb) & (run_left <= page_beats - run.addr[lw:_PAGE_BITS])
            # after a burst that is not the run's last (after the last one the flag is not used): one that
            # reached its page's end (to_page <= mb) leaves left - to_page beats and a whole page, the next
            # is last when left <= to_page + min(mb, page); one of mb beats leaves left - mb and to_page - mb,
            # last when left <= min(2 mb, to_page). Both against the registers, without the subtractions.
            ends_page = Signal()
            m.d.comb += ends_page.eq(addr[lw:_PAGE_BITS] >= page_beats - mb if mb <= page_beats else 1)
            burst_last = Mux(ends_page, left <= (page_beats + min(mb, page_beats)) - addr[lw:_PAGE_BITS],
                             (left <= 2 * mb) & (left <= to_page))
            with m.If(self.run.valid & self.run.ready):
                m.d.sync += [last_r.eq(run_last), idle_r.eq(run_left == 0)]
            with m.Elif(burst.valid & burst.ready):
                m.d.sync += [last_r.eq(burst_last), idle_r.eq(last_r)]
        return m


def _meta_layout(cfg):
    """What the realigners need of a command: byte offset of ``addr`` in its beat, stream beats, whether the
    range touches one AXI beat more than it has stream beats, and ``(length - 1) % W`` (bytes of the last
    stream beat - 1); the writer also needs ``(addr + length - 1) % W`` (last byte lane of the last AXI beat)."""
    lw = exact_log2(cfg.beat_bytes)
    return data.StructLayout({"off": unsigned(lw), "beats": unsigned(_beats_bits(cfg)), "extra": 1,
                              "tail": unsigned(lw), "end": unsigned(lw)})


def _split_command(m, cfg, cmd_in, splitter, meta_fifo):
    """Accept ``cmd_in`` through a register slice (the command's producers - descriptor fetch, load and store
    units, the deposit unit - and their arbiter stay out of the splitter's cycle) into the burst splitter and the
    realigner's command FIFO, each taking it when it can (a flag per side remembers which has it), so that the
    FIFO's write does not wait on the splitter's last-burst decision. The FIFO may hold a command's entry
    before the splitter starts its bursts: its data comes back after them. Returns the slice (a command held in
    it counts as busy)."""
    lw = exact_log2(cfg.beat_bytes)
    w = cfg.beat_bytes
    m.submodules.cmd_slice = cmd_slice = SkidBuffer(dma_cmd_layout(cfg))
    wiring.connect(m, wiring.flipped(cmd_in), cmd_slice.i)
    cmd = cmd_slice.o
    c = cmd.payload
    off = c.addr[:lw]
    axi_beats = (off + c.length + (w - 1))[lw:]
    stream_beats = (c.length + (w - 1))[lw:]
    meta = _meta_layout(cfg)(meta_fifo.w_data)
    meta_done, run_done = Signal(name="meta_done"), Signal(name="run_done")   # this command's side taken
    meta_ok = meta_done | meta_fifo.w_rdy
    run_ok = run_done | splitter.run.ready
    with m.If(cmd.valid & ~(meta_ok & run_ok)):
        m.d.sync += [meta_done.eq(meta_ok), run_done.eq(run_ok)]
    with m.Else():
        m.d.sync += [meta_done.eq(0), run_done.eq(0)]
    m.d.comb += [
        splitter.run.payload.addr.eq(c.addr),
        splitter.run.payload.length.eq(c.length),
        splitter.run.payload.domain.eq(c.domain),
        splitter.run.valid.eq(cmd.valid & ~run_done),
        meta_fifo.w_en.eq(cmd.valid & ~meta_done),
        cmd.ready.eq(meta_ok & run_ok),
        meta.off.eq(off),
        meta.beats.eq(stream_beats),
        meta.extra.eq(axi_beats != stream_beats),
        meta.tail.eq((c.length - 1)[:lw]),
        meta.end.eq((off + c.length - 1)[:lw]),
    ]
    return cmd_slice


def _byte_mask(w, keep):
    """Bit mask of a beat keeping byte lanes ``j`` with ``keep(j)`` true."""
    return Cat(*(keep(j).replicate(8) for j in range(w)))


def _counter_members():
    return {"beats": Out(COUNTER_BITS), "bytes": Out(COUNTER_BITS), "bursts": Out(COUNTER_BITS),
            "busy": Out(COUNTER_BITS)}


def _drive_address(m, axi, ch, take, burst, size, domain):
    """Drive AXI address channel ``ch`` (``"ar"`` or ``"aw"``) from a register: loaded with ``burst``'s
    ``addr`` and ``len`` (and ``domain``, the burst's protection domain beside the channel) when ``take``,
    emptied when the memory accepts it; ID 0, INCR bursts of ``2**size``-byte beats, normal non-bufferable
    access. The caller takes a burst only while ``~valid | ready`` (the register is free)."""
    def port(name):
        return getattr(axi, ch + name)
    with m.If(take):
        m.d.sync += [port("valid").eq(1), port("addr").eq(burst.addr), port("len").eq(burst.len),
                     domain.eq(burst.domain)]
    with m.Elif(port("ready")):
        m.d.sync += port("valid").eq(0)
    m.d.comb += [port("id").eq(0), port("size").eq(size), port("burst").eq(AxiBurst.INCR), port("lock").eq(0),
                 port("cache").eq(_AXCACHE), port("prot").eq(0)]


class DmaReader(wiring.Component):
    """Reads byte ranges over AXI4 and streams them realigned to the range start.

    Ports
    -----
    cmd : In(stream.Signature(dma_cmd_layout(cfg)))
        Read ``length`` >= 1 bytes from byte address ``addr`` (any alignment). Accepted while earlier commands
        are still streaming (up to ``dma_outstanding + 2`` commands queued for the realigner).
    data : Out(stream.Signature(dma_read_data_layout(cfg)))
        ``ceil(length / W)`` beats per command, in command order; byte 0 of the first beat is the byte at
        ``addr``, bytes beyond ``length`` in the last beat are zero; ``last`` marks the last beat of a command,
        ``err`` (on that beat only) says some RRESP of the command was not OKAY. Registered (the realigner's output
        register; ``ready`` goes into a ready-only register slice).
    axi : Out(AXI4ReadSignature(cfg.addr_width, 8 * W))
        AR/R master. ARID 0, INCR, ARSIZE log2(W), ARLEN < dma_max_burst, no 4 KiB crossing. An AR is issued only
        once buffer space for its whole burst is reserved (``dma_outstanding * dma_max_burst`` beats), so
        RREADY is constantly high; at most ``dma_outstanding`` bursts are in flight.
    ar_domain : Out(domain_shape(cfg))
        The protection domain of the command the AR burst on ``axi`` belongs to (valid with ``arvalid``).
    beats, bytes, bursts, busy : Out(32)
        Stream beats and payload bytes delivered, AR bursts issued, cycles with a command in progress.
    """

    def __init__(self, cfg: AceConfig):
        _check_cfg(cfg)
        self.cfg = cfg
        w = cfg.beat_bytes
        super().__init__({
            "cmd": In(stream.Signature(dma_cmd_layout(cfg))),
            "data": Out(stream.Signature(dma_read_data_layout(cfg))),
            "axi": Out(AXI4ReadSignature(cfg.addr_width, 8 * w)),
            "ar_domain": Out(domain_shape(cfg)),
            **_counter_members(),
        })

    @property
    def buffer_beats(self):
        """Beats of the R buffer (the credit pool bursts are reserved from)."""
        return self.cfg.dma_outstanding * self.cfg.dma_max_burst

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        w = cfg.beat_bytes
        lw = exact_log2(w)
        dw = 8 * w
        axi = self.axi
        depth = self.buffer_beats
        meta_layout = _meta_layout(cfg)

        m.submodules.split = split = _BurstSplitter(cfg)
        # Small control queues read combinationally (LUT RAM); the beat buffer has a registered read (block RAM).
        m.submodules.meta = meta_fifo = SyncFIFO(width=meta_layout.size, depth=cfg.dma_outstanding + 2)
        m.submodules.rbuf = rbuf = SyncFIFOBuffered(width=dw + 1, depth=depth)
        cmd_slice = _split_command(m, cfg, self.cmd, split, meta_fifo)

        # -- AR: issue a burst once its beats are reserved in rbuf and fewer than dma_outstanding are in flight.
        reserved = Signal(range(depth + 1))     # beats reserved by issued bursts and not yet popped from rbuf
        in_flight = Signal(range(cfg.dma_outstanding + 1))
        burst_beats = split.burst.payload.len + 1
        pop = Signal()
        ar_free = ~axi.arvalid | axi.arready
        m.d.comb += split.burst.ready.eq(ar_free & (reserved + burst_beats <= depth) &
                                         (in_flight < cfg.dma_outstanding))
        take_burst = split.burst.valid & split.burst.ready
        _drive_address(m, axi, "ar", take_burst, split.burst.payload, lw, self.ar_domain)
        m.d.sync += reserved.eq(reserved + Mux(take_burst, burst_beats, 0) - pop)
        r_last = axi.rvalid & axi.rready & axi.rlast
        m.d.sync += in_flight.eq(in_flight + take_burst - r_last)

        # -- R: every beat has a reserved slot in rbuf, so RREADY never needs to drop.
        m.d.comb += [
            axi.rready.eq(1),
            rbuf.w_en.eq(axi.rvalid),
            rbuf.w_data.eq(Cat(axi.rdata, axi.rresp != 0)),
        ]

        # -- Realigner: stream beat k = AXI beats k and k+1 of the command shifted down by `off` bytes.
        head = rbuf.r_data[:dw]
        head_err = rbuf.r_data[dw]
        nxt = meta_layout(meta_fifo.r_data)
        act = Signal()
        loaded = Signal()       # the first AXI beat is in `prev` (always true when off == 0)
        off = Signal(lw)
        left = Signal(_beats_bits(cfg))
        extra = Signal()
        tail = Signal(lw)
        prev = Signal(dw)
        err_acc = Signal()
        out_bytes = Signal(range(w + 1))   # payload bytes of the beat on `data` (for the byte counter)

        # the realigned beats (already from the output register) leave through a ready-only slice: the
        # consumer's ready (which may depend on where the beat goes, e.g. an SRAM bank's arbitration) does not
        # reach the realigner and the meta queue, and no cycle is added
        m.submodules.data_slice = data_slice = SkidBuffer(dma_read_data_layout(cfg), forward=False)
        wiring.connect(m, data_slice.o, wiring.flipped(self.data))
        dout = data_slice.i
        adv = ~dout.valid | dout.ready
        # left == 1 and off == 0 are kept in flip-flops beside the registers they test: the compares sat
        # between the output register's ready and the rbuf pop on the design point's critical path
        is_last = Signal()
        off_zero = Signal()
        # The last stream beat needs an AXI beat of its own only if the range spills into one more AXI beat.
        need = off_zero | ~is_last | extra
        emit = Signal()
        # Plain expressions rather than an m.If chain: Icarus does not evaluate a comb process whose inputs
        # never change after time 0, which would leave `pop` (and so the credit count) X.
        m.d.comb += [
            emit.eq(act & loaded & adv & (~need | rbuf.r_rdy)),
            # Loading the first AXI beat into `prev` does not need the output register.
            pop.eq(act & rbuf.r_rdy & (~loaded | (adv & need))),
        ]
        finish = emit & is_last
        take_meta = (~act | finish) & meta_fifo.r_rdy
        m.d.comb += [rbuf.r_en.eq(pop), meta_fifo.r_en.eq(take_meta)]

        cur = Mux(need, head, 0)
        shifted = Cat(prev, cur).bit_select(Cat(Const(0, 3), off), dw)
        word = Mux(off_zero, cur, shifted)
        mask = _byte_mask(w, lambda j: Mux(is_last, j <= tail, 1))
        err = err_acc | (need & head_err)
        with m.If(adv):
            m.d.sync += dout.valid.eq(emit)
        with m.If(emit):
            m.d.sync += [
                dout.payload.data.eq(word & mask),
                dout.payload.last.eq(is_last),
                dout.payload.err.eq(is_last & err),
                out_bytes.eq(Mux(is_last, tail + 1, w)),
                prev.eq(cur),
                err_acc.eq(err),
                left.eq(left - 1),
                is_last.eq(left == 2),
            ]
        with m.If(act & ~loaded & pop):
            m.d.sync += [prev.eq(head), err_acc.eq(head_err), loaded.eq(1)]
        with m.If(finish):
            m.d.sync += act.eq(0)
        with m.If(take_meta):
            m.d.sync += [
                act.eq(1),
                loaded.eq(nxt.off == 0),
                off.eq(nxt.off),
                off_zero.eq(nxt.off == 0),
                left.eq(nxt.beats),
                is_last.eq(nxt.beats == 1),
                extra.eq(nxt.extra),
                tail.eq(nxt.tail),
                err_acc.eq(0),
            ]

        # -- Statistics.
        busy = (cmd_slice.o.valid | split.burst.valid | axi.arvalid | (in_flight != 0) | (meta_fifo.level != 0) | act
                | self.data.valid)
        with m.If(dout.valid & dout.ready):
            m.d.sync += [self.beats.eq(self.beats + 1), self.bytes.eq(self.bytes + out_bytes)]
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += self.bursts.eq(self.bursts + 1)
        with m.If(late(m, busy, name="busy_q")):          # counted a cycle late: the add starts at a flip-flop
            m.d.sync += self.busy.eq(self.busy + 1)
        return m


class DmaWriter(wiring.Component):
    """Writes streamed beats to byte ranges over AXI4, realigning them with byte strobes.

    Ports
    -----
    cmd : In(stream.Signature(dma_cmd_layout(cfg)))
        Write ``length`` >= 1 bytes at byte address ``addr`` (any alignment). Several commands may be in flight.
    data : In(stream.Signature(dma_write_data_layout(cfg)))
        ``ceil(length / W)`` beats per command, aligned to the range start (byte 0 of beat 0 goes to ``addr``);
        bytes beyond ``length`` in the last beat are ignored (strobed off). ``last`` is not used.
    done : Out(stream.Signature(dma_done_layout()))
        One entry per command, in command order, once every B response of the command has arrived; ``err`` if
        any BRESP was not OKAY. Registered.
    axi : Out(AXI4WriteSignature(cfg.addr_width, 8 * W))
        AW/W/B master. AWID 0, INCR, AWSIZE log2(W), AWLEN < dma_max_burst, no 4 KiB crossing; AW runs ahead of
        W by up to ``dma_outstanding`` bursts, at most ``dma_outstanding`` bursts await their B response.
        WSTRB covers exactly the bytes of [addr, addr + length).
    aw_domain : Out(domain_shape(cfg))
        The protection domain of the command the AW burst on ``axi`` belongs to (valid with ``awvalid``).
    beats, bytes, bursts, busy : Out(32)
        Stream beats and payload bytes taken, AW bursts issued, cycles with a command in progress.
    """

    def __init__(self, cfg: AceConfig):
        _check_cfg(cfg)
        self.cfg = cfg
        w = cfg.beat_bytes
        super().__init__({
            "cmd": In(stream.Signature(dma_cmd_layout(cfg))),
            "data": In(stream.Signature(dma_write_data_layout(cfg))),
            "done": Out(stream.Signature(dma_done_layout())),
            "axi": Out(AXI4WriteSignature(cfg.addr_width, 8 * w)),
            "aw_domain": Out(domain_shape(cfg)),
            **_counter_members(),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        w = cfg.beat_bytes
        lw = exact_log2(w)
        dw = 8 * w
        axi = self.axi
        meta_layout = _meta_layout(cfg)
        n_out = cfg.dma_outstanding

        m.submodules.split = split = _BurstSplitter(cfg)
        m.submodules.meta = meta_fifo = SyncFIFO(width=meta_layout.size, depth=n_out + 2)
        # Lengths of generated bursts, for WLAST; and "last burst of its command" flags awaiting a B response.
        m.submodules.wlen = wlen = SyncFIFO(width=8, depth=n_out)
        m.submodules.bq = bq = SyncFIFO(width=1, depth=n_out)
        cmd_slice = _split_command(m, cfg, self.cmd, split, meta_fifo)
        # the data stream enters through a register slice too: its valid decides the W beat, the command's end
        # and the next command's meta read in one cycle
        m.submodules.data_slice = data_slice = SkidBuffer(dma_write_data_layout(cfg))
        wiring.connect(m, wiring.flipped(self.data), data_slice.i)
        din = data_slice.o

        # -- AW: a burst goes as soon as the AW register is free and both queues have room; W need not wait.
        aw_free = ~axi.awvalid | axi.awready
        m.d.comb += split.burst.ready.eq(aw_free & wlen.w_rdy & bq.w_rdy)
        take_burst = split.burst.valid & split.burst.ready
        m.d.comb += [
            wlen.w_en.eq(take_burst),
            wlen.w_data.eq(split.burst.payload.len),
            bq.w_en.eq(take_burst),
            bq.w_data.eq(split.burst.payload.last),
        ]
        _drive_address(m, axi, "aw", take_burst, split.burst.payload, lw, self.aw_domain)

        # -- W realigner: AXI beat j = stream beats j-1 and j shifted up by `off` bytes (zero outside the range).
        nxt = meta_layout(meta_fifo.r_data)
        act = Signal()
        first = Signal()        # the next AXI beat is the command's first
        off = Signal(lw)
        left = Signal(_beats_bits(cfg))     # stream beats still to take
        extra = Signal()
        tail = Signal(lw)
        end = Signal(lw)
        # (fabric) a data register of neither reset nor clear: the first AXI beat of a command takes only the
        # bytes from `off` on (its strobes), so what `prev` holds then is never written; clearing its flip-flops
        # as a command starts put them on the end of the command-end path (a set/reset net to every one)
        prev = Signal(dw, reset_less=bool(cfg.fabric))
        burst_left = Signal(9)              # beats left in the current burst; 0: next burst's length from wlen

        # the W register; in the fabric form a skid register behind it (``forward=False``: no cycle added) takes
        # a beat the memory did not take, so the realigner advances on flip-flops instead of on ``wready``,
        # which comes through the fence and the firewall's queue (the board's worst path ran from the
        # firewall's W queue through `adv`, the command's end and the meta queue's read into `prev`)
        if cfg.fabric:
            w_layout = data.StructLayout({"data": unsigned(dw), "strb": unsigned(w), "last": 1})
            m.submodules.w_slice = w_slice = SkidBuffer(w_layout, forward=False)
            wvalid, wdata, wstrb, wlast = (Signal(name="w_valid"), Signal(dw, name="w_data"),
                                           Signal(w, name="w_strb"), Signal(name="w_last"))
            wready = w_slice.i.ready
            m.d.comb += [
                w_slice.i.valid.eq(wvalid), w_slice.i.payload.data.eq(wdata), w_slice.i.payload.strb.eq(wstrb),
                w_slice.i.payload.last.eq(wlast),
                axi.wvalid.eq(w_slice.o.valid), axi.wdata.eq(w_slice.o.payload.data),
                axi.wstrb.eq(w_slice.o.payload.strb), axi.wlast.eq(w_slice.o.payload.last),
                w_slice.o.ready.eq(axi.wready),
            ]
        else:
            wvalid, wdata, wstrb, wlast, wready = axi.wvalid, axi.wdata, axi.wstrb, axi.wlast, axi.wready
        adv = ~wvalid | wready
        need = left != 0
        burst_ok = (burst_left != 0) | wlen.r_rdy
        last_axi = (left == 0) | ((left == 1) & ~extra)
        go = act & adv & burst_ok
        emit = go & (~need | din.valid)
        finish = emit & last_axi
        take_meta = (~act | finish) & meta_fifo.r_rdy
        blen = Mux(burst_left != 0, burst_left, wlen.r_data + 1)
        m.d.comb += [
            # ready does not depend on valid: a stream beat is taken whenever the next AXI beat needs one.
            din.ready.eq(go & need),
            wlen.r_en.eq(emit & (burst_left == 0)),
            meta_fifo.r_en.eq(take_meta),
        ]

        cur = Mux(need, din.payload.data, 0)
        shift = Signal(lw + 1)
        m.d.comb += shift.eq(w - off)
        word = Cat(prev, cur).bit_select(Cat(Const(0, 3), shift), dw)
        strb = Cat(*((~first | (j >= off)) & (~last_axi | (j <= end)) for j in range(w)))
        with m.If(adv):
            m.d.sync += wvalid.eq(emit)
        with m.If(emit):
            m.d.sync += [
                wdata.eq(word),
                wstrb.eq(strb),
                wlast.eq(blen == 1),
                burst_left.eq(blen - 1),
                prev.eq(cur),
                first.eq(0),
                left.eq(left - need),
            ]
        with m.If(finish):
            m.d.sync += act.eq(0)
        with m.If(take_meta):
            m.d.sync += [
                act.eq(1),
                first.eq(1),
                off.eq(nxt.off),
                left.eq(nxt.beats),
                extra.eq(nxt.extra),
                tail.eq(nxt.tail),
                end.eq(nxt.end),
            ]
            if not cfg.fabric:
                m.d.sync += prev.eq(0)

        # -- B: one response per burst, in order (single ID); a command is done with its last burst's response.
        b_err = Signal()
        b_take = axi.bvalid & axi.bready
        m.d.comb += [
            axi.bready.eq(bq.r_rdy & (~self.done.valid | self.done.ready)),
            bq.r_en.eq(b_take),
        ]
        err = b_err | (axi.bresp != 0)
        with m.If(self.done.ready):
            m.d.sync += self.done.valid.eq(0)
        with m.If(b_take):
            m.d.sync += b_err.eq(err)
            with m.If(bq.r_data[0]):
                m.d.sync += [self.done.valid.eq(1), self.done.payload.err.eq(err), b_err.eq(0)]

        # -- Statistics.
        took = din.valid & din.ready
        busy = (cmd_slice.o.valid | split.burst.valid | axi.awvalid | (meta_fifo.level != 0) | act | axi.wvalid
                | (bq.level != 0) | self.done.valid)
        if cfg.fabric:
            busy = busy | wvalid            # (a beat in the W register behind the skid register)
        with m.If(took):
            m.d.sync += [self.beats.eq(self.beats + 1),
                         self.bytes.eq(self.bytes + Mux(left == 1, tail + 1, w))]
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += self.bursts.eq(self.bursts + 1)
        with m.If(late(m, busy, name="busy_q")):          # counted a cycle late: the add starts at a flip-flop
            m.d.sync += self.busy.eq(self.busy + 1)
        return m
