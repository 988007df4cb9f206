"""Program table: which loaded program runs a collective on a communicator, and its lookup.

The driver writes :func:`~..common.layouts.program_entry_layout` entries through the PTAB register window
(``PTAB_ENTRY_WORDS`` 32-bit words per entry). For each descriptor the command processor scans the table from entry 0
and takes the first valid entry with the descriptor's communicator and collective, its algorithm (any, when the
descriptor's algorithm is 0) and, for the rooted collectives (broadcast, reduce), its root. Two cycles per
entry scanned: the memory read, then the compare.
"""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...sim.golden.types import Collective
from ..common.layouts import program_entry_layout
from .regs import PTAB_ENTRY_WORDS

__all__ = ["ProgramTable"]


class ProgramTable(wiring.Component):
    """The program table memory, its register window and the scan (see the module docstring).

    Ports
    -----
    ptab_we, ptab_addr, ptab_wdata, ptab_rdata : In, In, In, Out
        The register window: per-word write enables, the entry, the words; ``ptab_rdata`` is entry
        ``ptab_addr`` one cycle later.
    start : In(1)
        Scan for the key (``comm``, ``collective``, ``algorithm``, ``root``), which must hold until ``done``.
        Only while no scan is in progress.
    done : Out(1)
        High in the scan's last cycle: ``2 * k`` cycles after ``start`` when ``k`` entries were read (the
        first hit or, with none, every entry).
    found, prog : Out
        From the cycle after ``done`` until the next ``start`` (``found``) / ``done`` with a hit (``prog``):
        whether an entry matched, and the entry.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "ptab_we": In(PTAB_ENTRY_WORDS),
            "ptab_addr": In(range(max(2, cfg.n_programs))),
            "ptab_wdata": In(32 * PTAB_ENTRY_WORDS),
            "ptab_rdata": Out(32 * PTAB_ENTRY_WORDS),
            "start": In(1),
            "comm": In(8), "collective": In(8), "algorithm": In(8), "root": In(16),
            "done": Out(1),
            "found": Out(1),
            "prog": Out(program_entry_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        pe_l = program_entry_layout()
        ptab = Memory(shape=unsigned(32 * PTAB_ENTRY_WORDS), depth=max(2, cfg.n_programs), init=[])
        m.submodules.ptab = ptab
        pw = ptab.write_port(granularity=32)
        pr_csr = ptab.read_port()
        pr = ptab.read_port()
        m.d.comb += [pw.addr.eq(self.ptab_addr), pw.data.eq(self.ptab_wdata), pw.en.eq(self.ptab_we),
                     pr_csr.addr.eq(self.ptab_addr), self.ptab_rdata.eq(pr_csr.data)]

        pidx = Signal(range(max(2, cfg.n_programs) + 1))
        coll = self.collective
        with m.FSM(name="scan"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [pidx.eq(0), self.found.eq(0)]
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += pr.addr.eq(pidx)         # entry pidx, data next cycle
                m.next = "COMPARE"
            with m.State("COMPARE"):
                pe = data.View(pe_l, pr.data[:pe_l.size])
                # broadcast and reduce programs are per root: the entry must have the descriptor's
                rooted = (coll == Collective.BROADCAST) | (coll == Collective.REDUCE)
                hit = pe.valid & (pe.comm == self.comm) & (pe.collective == coll) & \
                    ((self.algorithm == 0) | (pe.algorithm == self.algorithm)) & (~rooted | (pe.root == self.root))
                with m.If(hit):
                    m.d.sync += [self.prog.eq(pr.data[:pe_l.size]), self.found.eq(1)]
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
                with m.Elif(pidx + 1 >= cfg.n_programs):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += pidx.eq(pidx + 1)
                    m.next = "READ"
        return m
