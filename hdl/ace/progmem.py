"""The control unit's program memories: the instruction memory (IMEM, the golden programs' 64-bit steps) and
the routing table (ROUTE, the first-hop port per communicator and peer rank).

The host writes and reads both through register windows (``csr_*`` ports: IMEM in 32-bit halves, ``imem_we``
one bit per half). The step decoder reads a step word and a route entry per cycle, the load sequencer a step
word per cycle; every read port is synchronous (data the cycle after the address).
"""

from amaranth.hdl import Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["ProgramMemories"]


class ProgramMemories(wiring.Component):
    """IMEM (``cfg.imem_words`` x 64 bits) and ROUTE (``n_comms * max_ranks`` x 4 bits), see the module
    docstring."""

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "imem_we": In(2), "imem_addr": In(10), "imem_wdata": In(64), "imem_rdata": Out(64),
            "route_we": In(1), "route_addr": In(16), "route_wdata": In(4), "route_rdata": Out(4),
            "dec_imem_addr": In(10), "dec_imem_data": Out(64),
            "dec_route_addr": In(16), "dec_route_data": Out(4),
            "seq_imem_addr": In(10), "seq_imem_data": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.imem = imem = Memory(shape=unsigned(64), depth=cfg.imem_words, init=[])
        m.submodules.route = route = Memory(shape=unsigned(4), depth=cfg.n_comms * cfg.max_ranks, init=[])
        iw, rw = imem.write_port(granularity=32), route.write_port()
        m.d.comb += [iw.addr.eq(self.imem_addr), iw.data.eq(self.imem_wdata), iw.en.eq(self.imem_we),
                     rw.addr.eq(self.route_addr), rw.data.eq(self.route_wdata), rw.en.eq(self.route_we)]
        for mem, addr, out in ((imem, self.imem_addr, self.imem_rdata), (imem, self.dec_imem_addr, self.dec_imem_data),
                               (imem, self.seq_imem_addr, self.seq_imem_data),
                               (route, self.route_addr, self.route_rdata),
                               (route, self.dec_route_addr, self.dec_route_data)):
            port = mem.read_port()
            m.d.comb += [port.addr.eq(addr), out.eq(port.data)]
        return m
