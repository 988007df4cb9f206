"""The command table's layouts: what the control unit keeps per command in flight, and a finished command.

The command processor fills a :func:`cmd_entry_layout` entry when it accepts a descriptor; the dispatcher, the
step decoder, the load sequencer and the deposit unit read it by table slot until the command completes with a
:func:`cmd_done_layout` report.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data

from ..common.layouts import COUNT_BITS, DTYPE_SHAPE, LOAD_MASK_BITS, MAX_PHASES, OP_SHAPE
from .geometry import geometry_layout
from .units import STATUS_SHAPE, _w

__all__ = ["cmd_entry_layout", "cmd_done_layout"]


def cmd_entry_layout(cfg):
    """What the control unit keeps per command in flight (filled in by the command processor)."""
    return data.StructLayout({
        "dtype": DTYPE_SHAPE,
        "op": OP_SHAPE,
        "tag": unsigned(16),
        "comm": unsigned(4),
        "rank": unsigned(9),
        "count": unsigned(32),
        "elem_shift": unsigned(2),
        "src": unsigned(cfg.addr_width),
        "dst": unsigned(cfg.addr_width),
        "in_seg": 1,
        "out_seg": 1,
        "geom": geometry_layout(cfg),
        "n_phases": unsigned(3),
        "phase_start": data.ArrayLayout(unsigned(10), MAX_PHASES),
        "phase_len": data.ArrayLayout(unsigned(11), MAX_PHASES),
        "load_end": unsigned(11),
        "load_mask": unsigned(LOAD_MASK_BITS),
        "n_slots": unsigned(11),
        "null": 1,          # null contribution: LOADs fill zeros, the count lane starts at 0
        "arrivals": unsigned(24),   # deposits (PUT messages) the command receives before it completes
    })


def cmd_done_layout(cfg):
    """A finished command: its table slot, first error (status, detail) and the count lane of its output
    (the smallest count its STOREs carried; 0 if it stored nothing)."""
    return data.StructLayout({"slot": _w(cfg.n_cmds), "status": STATUS_SHAPE, "detail": unsigned(32),
                              "contributors": unsigned(COUNT_BITS)})
