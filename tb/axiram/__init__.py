"""cocotb test of :class:`~syncfabric.hdl.common.axiram.AxiRam` as the top level (ports ``clk``, ``rst``,
``axi__*``, ``host__*``; the memory array ``mem``) and its back door, :class:`~syncfabric.tb.backdoor.MemoryBackdoor`.
"""

from ...hdl.common.axiram import AxiRam

__all__ = ["axiram_test_top"]


def axiram_test_top(size_bytes=1 << 16, **options):
    """An :class:`AxiRam` of ``size_bytes`` with the given constructor ``options`` (JSON-friendly: error
    ranges as lists)."""
    if "error_ranges" in options:
        options["error_ranges"] = [tuple(r) for r in options["error_ranges"]]
    return AxiRam(size_bytes, **options)
