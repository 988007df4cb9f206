"""The AXI firewall on the engine (Amaranth's simulator, through the host API): an engine whose block geometry
is broken so that every STORE address leaves the address space's lower half, or lands in another registered
buffer's window (faults the command's checks at acceptance cannot see), completes AXI_ERROR on every rank
instead of writing memory no window allows, or a window its descriptor did not name; the firewall counts the
refused bursts (DMA_REFUSED) and the buffers keep their contents."""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib.wiring import In

from syncfabric.hdl.ace import decoder
from syncfabric.hdl.ace.geometry import BlockGeometry
from syncfabric.host.system import CollectiveError, System


class _StoresAstray(BlockGeometry):
    """:class:`BlockGeometry` with the top address bit set on every output address (``out_addr``)."""

    def astray(self, out_addr):
        return out_addr | (1 << (self.cfg.addr_width - 1))

    def elaborate(self, platform):
        m = Module()
        m.submodules.real = real = BlockGeometry(self.cfg)
        for name, member in self.signature.members.items():
            ours, theirs = getattr(self, name), getattr(real, name)
            if member.flow == In:
                m.d.comb += theirs.eq(ours)
            elif name == "out_addr":
                m.d.comb += ours.eq(self.astray(theirs))
            else:
                m.d.comb += ours.eq(theirs)
        return m


class _StoresOnePageLower(_StoresAstray):
    """Every output address 4 KiB lower: in the buffer registered before the output buffer."""

    def astray(self, out_addr):
        return out_addr - 4096


def _allreduce_is_refused(s, a, b, keep):
    """All-reduce 256 fp32 from ``a`` into ``b`` on both ranks of ``s`` (``a`` holds ``x + rank``): both ranks
    complete AXI_ERROR, both firewalls count refused bursts, and every buffer of ``keep`` (``{buffer: value}``,
    filled with ``value`` first) keeps its contents."""
    x = np.arange(256, dtype=np.float32)
    for r in range(2):
        a.write(r, x + r)
        for buf, v in keep.items():
            buf.write(r, np.full(256, v, np.float32))
    with pytest.raises(CollectiveError) as err:
        s.world.allreduce(a, b, 256).wait(timeout_cycles=200_000)
    assert {st for st, _ in err.value.failures.values()} == {"AXI_ERROR"} and len(err.value.failures) == 2
    for r, drv in enumerate(s.drivers):
        assert drv.read("DMA_REFUSED") > 0
        for buf, v in keep.items():
            assert np.array_equal(buf.read(r, "fp32", 256), np.full(256, v, np.float32)), \
                f"rank {r}: the buffer at {buf.addr:#x} was written"


def test_a_faulty_store_address_is_refused_and_the_command_fails_axi_error(monkeypatch):
    monkeypatch.setattr(decoder, "BlockGeometry", _StoresAstray)     # the STOREs' addresses come from here
    with System({"topology": "ring:2", "links": {"latency": 4}}, backend="amaranth") as s:
        a, b = s.register(1024), s.register(1024)
        _allreduce_is_refused(s, a, b, {b: 7.0})


def test_a_store_into_another_buffers_window_is_refused_and_that_buffer_keeps_its_contents(monkeypatch):
    """The STOREs land one page lower, in buffer ``c``: registered, its window enabled, but not named by the
    collective's descriptor (its buffers are ``a`` and ``b``). The page check alone would let them through;
    the window is open only to the commands that named it, so the bursts are refused."""
    monkeypatch.setattr(decoder, "BlockGeometry", _StoresOnePageLower)
    with System({"topology": "ring:2", "links": {"latency": 4}}, backend="amaranth") as s:
        a, c, b = s.register(4096), s.register(4096), s.register(4096)     # c is the page below b
        assert c.addr + 4096 == b.addr
        _allreduce_is_refused(s, a, b, {b: 7.0, c: 5.0})
