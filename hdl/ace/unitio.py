"""Layouts the execution units (:mod:`.units`) share with their sub-blocks and with the control unit: the
status byte, a unit's ``done`` report and the receive units' forwards. (:mod:`.units` re-exports them.)"""

from amaranth.hdl import unsigned
from amaranth.lib import data

from ..common.layouts import packet_header_layout
from .sram import sram_read_layout

__all__ = ["STATUS_SHAPE", "done_layout", "fwd_msg_layout", "fwd_data_layout"]

STATUS_SHAPE = unsigned(8)


def _w(n):
    return unsigned(max(1, (n - 1).bit_length()))


def done_layout(cfg):
    """A unit's report that a step retired (``buf``/``slot``: the slot a LOAD filled)."""
    return data.StructLayout({"valid": 1, "fsm": _w(cfg.n_fsms), "cmd": _w(cfg.n_cmds), "status": STATUS_SHAPE,
                              "buf": sram_read_layout(cfg).members["buf"], "slot": unsigned(10)})


def fwd_msg_layout():
    """A forwarded message's header and the output port it leaves on."""
    return data.StructLayout({"hdr": packet_header_layout(), "port": unsigned(3)})


def fwd_data_layout(cfg):
    """A forwarded beat: data, the message's last beat, the output port and ``poison`` (with ``last``: the
    message's input failed a check, so its last packet is stomped)."""
    return data.StructLayout({"data": unsigned(8 * cfg.beat_bytes), "last": 1, "port": unsigned(3), "poison": 1})
