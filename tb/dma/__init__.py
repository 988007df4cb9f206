"""Test top of the DMA engines: a :class:`~syncfabric.hdl.ace.dma.DmaReader` and a
:class:`~syncfabric.hdl.ace.dma.DmaWriter` sharing one AXI4 master port, as the engine's top level will.

Verilog ports: ``rd_cmd__*``, ``rd_data__*``, ``wr_cmd__*``, ``wr_data__*``, ``wr_done__*`` (streams: ``valid``,
``ready``, flat ``payload``; pack with :func:`~syncfabric.hdl.common.layouts.pack` and the layouts of
:mod:`syncfabric.hdl.ace.dma`) and ``axi__awaddr`` ... ``axi__rready`` (``AxiBus.from_prefix(dut, "axi_")``).
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from ...hdl.ace.config import AceConfig
from ...hdl.ace.dma import DmaReader, DmaWriter
from ...hdl.common.axi import AXI4Signature, connect_axi

__all__ = ["DmaTestTop", "dma_test_top"]


class DmaTestTop(wiring.Component):
    """Reader and writer on one AXI port; their stream ports are brought out under ``rd_`` / ``wr_`` names."""

    def __init__(self, cfg: AceConfig):
        self.cfg = cfg
        self._reader = DmaReader(cfg)
        self._writer = DmaWriter(cfg)
        r, w = self._reader.signature.members, self._writer.signature.members
        super().__init__({
            "rd_cmd": r["cmd"], "rd_data": r["data"],
            "wr_cmd": w["cmd"], "wr_data": w["data"], "wr_done": w["done"],
            "axi": Out(AXI4Signature(cfg.addr_width, 8 * cfg.beat_bytes)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = self._reader
        m.submodules.writer = writer = self._writer
        wiring.connect(m, wiring.flipped(self.rd_cmd), reader.cmd)
        wiring.connect(m, reader.data, wiring.flipped(self.rd_data))
        wiring.connect(m, wiring.flipped(self.wr_cmd), writer.cmd)
        wiring.connect(m, wiring.flipped(self.wr_data), writer.data)
        wiring.connect(m, writer.done, wiring.flipped(self.wr_done))
        connect_axi(m, self.axi, read=reader.axi, write=writer.axi)
        return m


def dma_test_top(**overrides):
    """Factory for :func:`syncfabric.host.transports.harness.run_cocotb`: :class:`DmaTestTop` of
    ``AceConfig.small(**overrides)``."""
    return DmaTestTop(AceConfig.small(**overrides))
