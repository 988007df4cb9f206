"""The ACE engine top: register bank, command processor, control unit, DMA engines and link ports.

Ports (Verilog names in brackets):

``csr``   register bus from the NPU (``csr__addr``, ``csr__wdata``, ``csr__we``, ``csr__re``, ``csr__rdata``,
          ``csr__ack``); the register map is :func:`syncfabric.hdl.ace.regs.ace_regmap` (docs/registers.md).
``irq``   level interrupt: IRQ & irq enables.
``axi``   AXI4 master to the NPU's memory (``axi__*``): descriptors, completions, payload.
``tx<k>`` / ``tx<k>_credit``, ``rx<k>`` / ``rx<k>_credit``   link port ``k``: flits out and credits back,
          flits in and credits out (to a :class:`~syncfabric.hdl.system.link.Link`).
``aborting``   high from the start of an abort (CTRL.abort) until the engine leaves reset: a system holds
          the switch between its engines in reset with it.

Abort (docs/engine.md section 13): CTRL.abort makes the :class:`~syncfabric.hdl.common.axifence.AxiFence`
close the AXI port and then hold every unit but the register bank in reset (windows, programs, routes, rings
and communicators stay configured; commands, chunks, buffers, credits and counters are cleared); the link
ports drop what arrives and send nothing from the start of the abort. The watchdog (WATCHDOG) flags an engine
with work that has moved nothing for that many cycles; the step timeout (STEP_TIMEOUT) makes the engine give
up a command whose steps wait that long and a link that takes no flit. Every AXI burst leaves through the
:class:`~syncfabric.hdl.common.axifirewall.AxiFirewall` (docs/engine.md section 2).
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.axi import AXI4Signature, connect_axi
from ..common.axifence import AxiFence
from ..common.axifirewall import PAGE_BITS, AxiFirewall
from ..common.csr import CsrBank, CsrSignature
from ..common.layouts import COMPLETION_BYTES, DESCRIPTOR_BYTES, MAX_PHASES, credit_layout, flit_layout
from .cmdproc import CommandProcessor
from .control import ControlUnit
from .datapath import Datapath
from .dma import DOMAIN_ENGINE, DmaReader, DmaWriter
from .dmamux import ReadMux, WriteMux
from .regs import N_PARTITIONS, PTAB_ENTRY_WORDS, STALL_CAUSES, ace_regmap
from .watchdog import Watchdog

__all__ = ["AceEngine"]


class AceEngine(wiring.Component):
    """One ACE collectives engine configured by ``cfg`` (:class:`~syncfabric.hdl.ace.config.AceConfig`)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.regmap = ace_regmap(cfg)
        super().__init__(self.signature_of(cfg))

    @classmethod
    def signature_of(cls, cfg):
        """The engine's signature for ``cfg`` (also for port holders of a separately built engine)."""
        fl = flit_layout(cfg.beat_bytes)
        ports = {}
        for k in range(cfg.n_ports):
            ports[f"tx{k}"] = Out(stream.Signature(fl))
            ports[f"tx{k}_credit"] = In(credit_layout())
            ports[f"rx{k}"] = In(stream.Signature(fl))
            ports[f"rx{k}_credit"] = Out(credit_layout())
        return wiring.Signature({
            "csr": Out(cls.csr_signature(cfg)),
            "irq": Out(1),
            "axi": Out(cls.axi_signature(cfg)),
            **ports,
            "aborting": Out(1),
        })

    @staticmethod
    def csr_signature(cfg):
        """The register bus of an engine configured by ``cfg`` (wide enough for its register map)."""
        return CsrSignature(max(16, (ace_regmap(cfg).size - 1).bit_length()))

    @staticmethod
    def axi_signature(cfg):
        """The AXI4 master port to NPU memory of an engine configured by ``cfg``."""
        return AXI4Signature(cfg.addr_width, 8 * cfg.beat_bytes)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        K = cfg.n_ports
        m.submodules.regs = bank = CsrBank(self.regmap, addr_width=self.csr.addr.shape().width)
        wiring.connect(m, wiring.flipped(self.csr), bank.bus)
        # abort: the fence closes the AXI port, then holds every unit below in reset (a flip-flop)
        m.submodules.fence = fence = AxiFence(self.axi_signature(cfg), bursts=cfg.dma_outstanding + 2)
        # every burst leaves through the firewall: inside a memory window, a ring or the spill window, or
        # answered SLVERR without reaching the memory (docs/engine.md section 12)
        m.submodules.firewall = fw = AxiFirewall(self.axi_signature(cfg), cfg.n_windows + 3,
                                                 domains=cfg.n_cmds + 1, bursts=cfg.dma_outstanding + 2)
        wiring.connect(m, fence.axi, fw.core)
        wiring.connect(m, fw.axi, wiring.flipped(self.axi))
        # the reset flop drives every flip-flop of the units (a reset net: nothing else hangs on it); the link
        # ports and the outputs follow the fence's state flop instead, from the start of the abort
        gated = fence.busy
        m.d.comb += [fence.abort.eq(bank.field("CTRL", "abort")), self.aborting.eq(gated)]

        # (fabric) the fence's reset reaches each group of units through a flip-flop of its own, a cycle later:
        # one reset net to the 14,000 flip-flops of the units was the board's worst path (15 ns of routing
        # from the net's driver). Synthesis merges flip-flops of equal input and reset value, so the three
        # copies differ in their initial value or in whether the domain's reset resets them; neither matters,
        # as the domain's reset resets the units itself and the copies are 0 while it is asserted.
        copies = {}
        if cfg.fabric:
            for group, (init, reset_less) in enumerate([(0, False), (0, True), (1, True)]):
                copies[group] = Signal(init=init, reset_less=reset_less, name=f"core_rst{group}")
                m.d.sync += copies[group].eq(fence.core_rst)

        def unit(name, block, group):
            m.submodules[name] = ResetInserter({"sync": copies.get(group, fence.core_rst)})(block)
            return block

        cp = unit("cmdproc", CommandProcessor(cfg), 0)
        cu = unit("control", ControlUnit(cfg), 1)
        dp = unit("datapath", Datapath(cfg), 2)
        rd = unit("dma_rd", DmaReader(cfg), 2)
        wr = unit("dma_wr", DmaWriter(cfg), 2)
        rmux = unit("rd_mux", ReadMux(cfg), 2)
        wmux = unit("wr_mux", WriteMux(cfg), 2)
        dog = unit("watchdog", Watchdog(), 1)
        core_axi = self.axi_signature(cfg).create(path=("core_axi",))
        connect_axi(m, core_axi, read=rd.axi, write=wr.axi)
        wiring.connect(m, core_axi, fence.core)
        # each burst's protection domain, beside its address (the fence passes AR/AW through unregistered)
        m.d.comb += [fw.ar_domain.eq(rd.ar_domain), fw.aw_domain.eq(wr.aw_domain)]

        # DMA sharing: the command processor has priority on both engines
        wiring.connect(m, cp.rd_cmd, rmux.a_cmd)
        wiring.connect(m, rmux.a_data, cp.rd_data)
        wiring.connect(m, dp.rd_cmd, rmux.b_cmd)
        wiring.connect(m, rmux.b_data, dp.rd_data)
        wiring.connect(m, rmux.cmd, rd.cmd)
        wiring.connect(m, rd.data, rmux.data)
        wiring.connect(m, cp.wr_cmd, wmux.a_cmd)
        wiring.connect(m, cp.wr_data, wmux.a_data)
        wiring.connect(m, wmux.a_done, cp.wr_done)
        wiring.connect(m, dp.wr_cmd, wmux.b_cmd)
        wiring.connect(m, dp.wr_data, wmux.b_data)
        wiring.connect(m, wmux.b_done, dp.wr_done)
        wiring.connect(m, wmux.cmd, wr.cmd)
        wiring.connect(m, wmux.data, wr.data)
        wiring.connect(m, wr.done, wmux.done)

        # command processor <-> control unit <-> datapath
        wiring.connect(m, cp.new_cmd, cu.new_cmd)
        wiring.connect(m, cu.cmd_done, cp.cmd_done)
        m.d.comb += cp.slot_busy.eq(cu.slot_busy)
        wiring.connect(m, cu.dp, dp.ctl)
        for k in range(K):
            wiring.connect(m, cu.port[k], dp.port[k])

        # links (the engine's ports keep their tx<k>/rx<k> names: system tops and testbenches use them); during
        # an abort a port sends nothing and drops what arrives, flits and credits alike. Credits in are not
        # gated: the ports' credit counters count them until the units' reset (the abort ends in it) returns
        # the counters to their initial values, so a gate would change nothing but add the fence's state net
        # in front of the counters' adders (once a path of the design-point engine's worst)
        for k in range(K):
            tx, rx = getattr(self, f"tx{k}"), getattr(self, f"rx{k}")
            m.d.comb += [
                tx.payload.eq(dp.tx[k].payload), tx.valid.eq(dp.tx[k].valid & ~gated),
                dp.tx[k].ready.eq(tx.ready & ~gated),
                dp.rx[k].payload.eq(rx.payload), dp.rx[k].valid.eq(rx.valid & ~gated),
                rx.ready.eq(dp.rx[k].ready | gated),
                dp.tx_credit[k].eq(getattr(self, f"tx{k}_credit")),
                getattr(self, f"rx{k}_credit").eq(Mux(gated, 0, dp.rx_credit[k])),
            ]

        # ---- registers -> blocks ---------------------------------------------------------------------------
        enable = bank.field("CTRL", "enable")
        m.d.comb += [
            cp.enable.eq(enable), cu.enable.eq(enable),
            cp.sq_base.eq(bank.reg("SQ_BASE")), cp.sq_size.eq(bank.reg("SQ_SIZE")),
            cp.sq_tail.eq(bank.reg("SQ_TAIL")), bank.reg("SQ_HEAD").eq(cp.sq_head),
            cp.cq_base.eq(bank.reg("CQ_BASE")), cp.cq_size.eq(bank.reg("CQ_SIZE")),
            cp.cq_head.eq(bank.reg("CQ_HEAD")), bank.reg("CQ_TAIL").eq(cp.cq_tail),
            cp.chunk_beats.eq(bank.reg("CHUNK_BEATS")),
            dp.tx_lookahead.eq(bank.reg("TX_LOOKAHEAD")),
            dp.replay_timeout.eq(bank.field("REPLAY_TIMEOUT", "cycles")),
            cu.fsm_limit.eq(bank.reg("FSM_LIMIT")),
            cu.step_timeout.eq(bank.reg("STEP_TIMEOUT")), dp.step_timeout.eq(bank.reg("STEP_TIMEOUT")),
            bank.field("LINK_DOWN", "ports").eq(dp.link_down),
            dp.spill_base.eq(bank.reg("SPILL_BASE")),
            dp.spill_entries.eq(Mux(bank.field("SPILL_ENTRIES", "entries") > cfg.spill_entries, cfg.spill_entries,
                                    bank.field("SPILL_ENTRIES", "entries"))),
        ]
        for i in range(N_PARTITIONS):
            m.d.comb += [cp.part[i].eq(bank.reg("PART", i)), cu.part[i].eq(bank.reg("PART", i))]
        # the memory windows each command's descriptor named (its table entry's), per table slot, taken when
        # the command enters the table: the firewall opens a window only to the commands that named it
        slot_windows = Signal(data.ArrayLayout(cfg.n_windows, cfg.n_cmds))
        with m.If(cp.new_cmd.valid & cp.new_cmd.ready):
            m.d.sync += slot_windows[cp.new_cmd.payload.slot].eq(cp.new_cmd.payload.entry.windows)
        m.d.sync += _firewall_regions(fw, bank, cfg, dp.spill_entries, slot_windows)
        m.d.comb += bank.reg("DMA_REFUSED").eq(fw.refused)
        # a window is locked while a command in the table uses it or a descriptor is being checked against it
        win_lock = Signal(cfg.n_windows)
        m.d.sync += win_lock.eq(cu.win_busy | Mux(cp.checking, (1 << cfg.n_windows) - 1, 0))
        for i in range(cfg.n_windows):
            m.d.comb += [cp.win_base[i].eq(bank.reg("WIN_BASE", i)), cp.win_size[i].eq(bank.reg("WIN_SIZE", i)),
                         cp.win_comms[i].eq(bank.reg("WIN_COMMS", i)[:cfg.n_comms])]
            for name in ("WIN_BASE", "WIN_SIZE", "WIN_COMMS"):
                m.d.comb += bank.lock(name, i).eq(win_lock[i])
        with m.If(bank.refused):
            m.d.sync += bank.reg("WIN_REFUSED").eq(bank.reg("WIN_REFUSED") + 1)
        for c in range(cfg.n_comms):
            m.d.comb += cp.comm_cfg[c].eq(bank.reg("COMM_CFG", c))
        # the watchdog: cycles with work in the engine and no transfer on any of its ports
        moved = ((fence.axi.rvalid & fence.axi.rready) | (fence.axi.wvalid & fence.axi.wready)
                 | (fence.axi.arvalid & fence.axi.arready) | (fence.axi.awvalid & fence.axi.awready))
        for k in range(K):
            tx, rx = getattr(self, f"tx{k}"), getattr(self, f"rx{k}")
            moved = moved | (tx.valid & tx.ready) | (rx.valid & rx.ready)
        m.d.comb += [dog.busy.eq(~cu.idle), dog.moved.eq(moved), dog.limit.eq(bank.reg("WATCHDOG"))]
        irq_bits = Signal(3)
        m.d.comb += [
            irq_bits.eq(Cat(cp.irq_cpl, cp.irq_err, dog.fire)),
            bank.set("IRQ").eq(irq_bits),
            self.irq.eq(bank.field("CTRL", "irq_enable") & (bank.reg("IRQ") != 0)),
        ]
        n_busy = sum(cu.slot_busy[i] for i in range(cfg.n_cmds))
        m.d.comb += [
            bank.field("STATUS", "idle").eq(cu.idle & (cp.sq_head == bank.reg("SQ_TAIL"))),
            bank.field("STATUS", "cmds_active").eq(n_busy),
            bank.field("STATUS", "chunks_active").eq(cu.chunks_active),
            bank.field("STATUS", "sram_conflict").eq(dp.sram_conflict),
            bank.field("STATUS", "aborting").eq(fence.busy),
            bank.field("STATUS", "quiet").eq(fence.quiet),
            bank.field("STATUS", "hung").eq(dog.hung),
        ]

        # windows: the program table (8 words per entry), routing table (1 word per entry), IMEM (2 per word)
        ptab = bank.window("PTAB")
        sel_p = ptab.addr[:3]
        m.d.comb += [
            cp.ptab_addr.eq(ptab.addr >> 3),
            cp.ptab_wdata.eq(ptab.wdata.replicate(PTAB_ENTRY_WORDS)),
            cp.ptab_we.eq(ptab.we << sel_p),
            ptab.rdata.eq(cp.ptab_rdata.word_select(sel_p, 32)),
        ]
        route = bank.window("ROUTE")
        m.d.comb += [
            cu.route_addr.eq(route.addr), cu.route_wdata.eq(route.wdata[:4]), cu.route_we.eq(route.we),
            route.rdata.eq(cu.route_rdata),
        ]
        imem = bank.window("IMEM")
        m.d.comb += [
            cu.imem_addr.eq(imem.addr >> 1),
            cu.imem_wdata.eq(imem.wdata.replicate(2)),
            cu.imem_we.eq(imem.we << imem.addr[0]),
            imem.rdata.eq(cu.imem_rdata.word_select(imem.addr[0], 32)),
        ]

        self._counters(m, bank, cp, cu, dp)
        return m

    def _counters(self, m, bank, cp, cu, dp):
        """The counter registers, read from the units that count."""
        m.d.comb += [
            bank.reg("CYCLES").eq(cp.cycles),
            bank.reg("PAYLOAD_RD_BYTES").eq(dp.payload_rd_bytes),
            bank.reg("PAYLOAD_WR_BYTES").eq(dp.payload_wr_bytes),
            bank.reg("DESC_RD_BYTES").eq(cp.desc_bytes),
            bank.reg("CPL_WR_BYTES").eq(cp.cpl_bytes),
            bank.reg("CMDS_OK").eq(cp.cmds_ok),
            bank.reg("CMDS_ERR").eq(cp.cmds_err),
            bank.reg("ALU_BEATS").eq(dp.alu_beats),
            bank.reg("FSM_BUSY").eq(cu.fsm_busy),
            bank.reg("DEPOSITS").eq(dp.deposits),
            bank.reg("SPILLS").eq(dp.spills),
            bank.reg("SPILL_BYTES").eq(dp.spill_bytes),
            bank.reg("STEPS").eq(cu.steps),
            bank.reg("STEP_GAP").eq(cu.step_gap),
        ]
        for k in range(self.cfg.n_ports):
            m.d.comb += [
                bank.reg("TX_FLITS", k).eq(dp.tx_flits[k]),
                bank.reg("TX_BUSY", k).eq(dp.tx_busy[k]),
                bank.reg("TX_STALL", k).eq(dp.tx_stall[k]),
                bank.reg("RX_FLITS", k).eq(dp.rx_flits[k]),
                bank.reg("RX_CRC_ERRS", k).eq(dp.rx_crc_errs[k]),
                bank.reg("TX_REPLAYS", k).eq(dp.tx_replays[k]),
                bank.reg("TX_RESENT", k).eq(dp.tx_resent[k]),
                bank.reg("RX_NAKS", k).eq(dp.rx_naks[k]),
            ]
        for p in range(MAX_PHASES):
            m.d.comb += [bank.reg("PHASE_FLITS", p).eq(dp.phase_flits[p]),
                         bank.reg("PHASE_BUSY", p).eq(cu.phase_busy[p])]
        for i, name in enumerate(STALL_CAUSES):
            value = cu.stall[i]
            if name == "cpl_ring_full":
                value = cp.cpl_stall
            m.d.comb += bank.reg("STALL", i).eq(value)


def _firewall_regions(fw, bank, cfg, spill_entries, slot_windows):
    """The regions :class:`~syncfabric.hdl.common.axifirewall.AxiFirewall` ``fw`` lets the engine's bursts use,
    from register bank ``bank``, two stages of registers behind it (a register is written over the CSR bus
    cycles before a command can use it; the adds stay off the AXI address path and apart): the memory windows
    (``WIN_SIZE`` 0: disabled), the submission and completion rings and the spill window (``spill_entries``
    records, as the datapath uses it), each as the 4 KiB pages it touches; a region reaching past the address
    space ends at its top. A memory window is open to the domains of the commands whose descriptors named it
    (``slot_windows``, per table slot, a register stage behind the table), the rings and the spill window to
    the engine's own (:data:`~syncfabric.hdl.ace.dma.DOMAIN_ENGINE`). A command's first burst leaves many
    cycles after it enters the table (dispatch, an FSM step, the load queue, the DMA's command slice and burst
    splitter), so its domain is open by then. Returns the statements (``sync``)."""
    aw = cfg.addr_width
    record = cfg.max_message_beats * cfg.beat_bytes
    spans = [(bank.reg("WIN_BASE", i), bank.reg("WIN_SIZE", i)) for i in range(cfg.n_windows)] + [
        (bank.reg("SQ_BASE"), bank.reg("SQ_SIZE") * DESCRIPTOR_BYTES),
        (bank.reg("CQ_BASE"), bank.reg("CQ_SIZE") * COMPLETION_BYTES),
        (bank.reg("SPILL_BASE"), spill_entries * record)]
    page, top = 1 << PAGE_BITS, (1 << (aw - PAGE_BITS + 1)) - 1
    stmts = []
    for i, (r, (base, size)) in enumerate(zip(fw.regions, spans)):
        # stage 1: the region's end, its first page, whether it is on
        end, on = Signal(66, name=f"fw_end{i}"), Signal(name=f"fw_on{i}")
        first = Signal.like(r.first, name=f"fw_first{i}")
        stmts += [end.eq(base + size), first.eq(base >> PAGE_BITS), on.eq((size != 0) & (base >> aw == 0))]
        # stage 2: the page after the end, held at the address space's top
        stop = (end + page - 1) >> PAGE_BITS
        stmts += [r.first.eq(first), r.stop.eq(Mux(stop > top, top, stop)), r.enable.eq(on)]
        if i < cfg.n_windows:       # domain s + 1: the command in table slot s
            stmts.append(r.domains.eq(Cat(Const(0, 1), *(slot_windows[s][i] for s in range(cfg.n_cmds)))))
        else:
            stmts.append(r.domains.eq(1 << DOMAIN_ENGINE))
    return stmts
