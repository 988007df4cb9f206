"""cocotb test of :class:`~syncfabric.hdl.common.axiram.AxiRam` as the top level (ports ``clk``, ``rst``,
``axi__*``, ``host__*``; the memory array ``mem``, or ``array.mem`` with ``storage="verilog"``) and its back door,
:class:`~syncfabric.host.transports.backdoor.MemoryBackdoor`.
"""

from ...hdl.common.axiram import RAM_ARRAY_VERILOG, AxiRam

__all__ = ["axiram_test_top"]


def axiram_test_top(size_bytes=1 << 16, **options):
    """An :class:`AxiRam` of ``size_bytes`` with the given constructor ``options`` (JSON-friendly: error
    ranges as lists)."""
    if "error_ranges" in options:
        options["error_ranges"] = [tuple(r) for r in options["error_ranges"]]
    ram = AxiRam(size_bytes, **options)
    if ram.storage == "memory":
        return ram
    from amaranth.back import verilog        # the RamArray's module goes with the design's Verilog
    return verilog.convert(ram, name="axiram_top", emit_src=False) + "\n" + RAM_ARRAY_VERILOG
