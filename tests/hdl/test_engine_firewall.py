"""The AXI firewall on the engine (Amaranth's simulator, through the host API): an engine whose block geometry
is broken so that every STORE address leaves the address space's lower half (a fault the command's checks at
acceptance cannot see) completes AXI_ERROR on every rank instead of writing memory no window allows; the
firewall counts the refused bursts (DMA_REFUSED) and the output buffers keep their contents."""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib.wiring import In

from syncfabric.hdl.ace import decoder
from syncfabric.hdl.ace.geometry import BlockGeometry
from syncfabric.host.system import CollectiveError, System


class _StoresAstray(BlockGeometry):
    """:class:`BlockGeometry` with the top address bit set on every output address (``out_addr``)."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.real = real = BlockGeometry(self.cfg)
        for name, member in self.signature.members.items():
            ours, theirs = getattr(self, name), getattr(real, name)
            if member.flow == In:
                m.d.comb += theirs.eq(ours)
            elif name == "out_addr":
                m.d.comb += ours.eq(theirs | (1 << (self.cfg.addr_width - 1)))
            else:
                m.d.comb += ours.eq(theirs)
        return m


def test_a_faulty_store_address_is_refused_and_the_command_fails_axi_error(monkeypatch):
    monkeypatch.setattr(decoder, "BlockGeometry", _StoresAstray)     # the STOREs' addresses come from here
    with System({"topology": "ring:2", "links": {"latency": 4}}, backend="amaranth") as s:
        a, b = s.register(1024), s.register(1024)
        x = np.arange(256, dtype=np.float32)
        for r in range(2):
            a.write(r, x + r)
            b.write(r, np.full(256, 7.0, np.float32))
        with pytest.raises(CollectiveError) as err:
            s.world.allreduce(a, b, 256).wait(timeout_cycles=200_000)
        assert {st for st, _ in err.value.failures.values()} == {"AXI_ERROR"} and len(err.value.failures) == 2
        for r, drv in enumerate(s.drivers):
            assert drv.read("DMA_REFUSED") > 0
            assert np.array_equal(b.read(r, "fp32", 256), np.full(256, 7.0, np.float32)), f"rank {r} written"
