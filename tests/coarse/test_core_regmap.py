"""The sync core's control registers as a :class:`~syncfabric.hdl.common.regmap.RegisterMap`
(:func:`~syncfabric.hdl.coarse.layouts.core_register_map`): the addresses the registers had as ``CoreReg``
indices (register i at byte i x beat_bytes of region CTRL), the access types, the fields of MODE and of the
status, and the map's error for a bad register name."""

import pytest

from syncfabric.hdl.coarse.layouts import Region, core_addr, core_mode, core_mode_layout, core_register_map
from syncfabric.hdl.common.regmap import RegisterMapError
from syncfabric.sim.golden.types import DType, ReduceOp

#: The register indices before the map (the ``CoreReg`` IntEnum it replaced).
OLD_INDEX = {"BASE": 0, "STRIDE": 1, "CHUNKS": 2, "RANK": 3, "RANKS": 4, "MODE": 5, "START": 6, "CYCLES": 7,
             "STALLS": 8, "ALU_BEATS": 9}


@pytest.mark.parametrize("beat_bytes", [4, 8, 16, 64])
def test_addresses_are_the_old_ones(beat_bytes):
    rm = core_register_map(beat_bytes)
    assert {r.name: r.offset for r in rm.registers()} == {n: i * beat_bytes for n, i in OLD_INDEX.items()}
    assert {r.name: r.width for r in rm.registers()} == dict.fromkeys(OLD_INDEX, 32)
    assert core_addr(1, Region.CTRL, rm.addr("START")) == (1 << 31) | (1 << 24) | (3 << 20) | 6 * beat_bytes


def test_access_types_and_fields():
    rm = core_register_map(16)
    assert {r.name: r.access for r in rm.registers()} == {
        **dict.fromkeys(("BASE", "STRIDE", "CHUNKS", "RANK", "RANKS", "MODE"), "rw"), "START": "wo",
        **dict.fromkeys(("CYCLES", "STALLS", "ALU_BEATS"), "ro")}
    assert all(r.doc for r in rm.registers())
    assert [(f.name, f.lsb, f.width) for f in rm.register("MODE").fields] == \
        [(name, f.offset, f.width) for name, f in core_mode_layout()]
    assert rm.decode("MODE", core_mode(DType.BF16, ReduceOp.MAX)) == {"dtype": DType.BF16, "op": ReduceOp.MAX}
    assert [(f.name, f.mask) for f in rm.register("START").fields] == [("BUSY", 1), ("DONE", 2), ("ERROR", 4)]


def test_a_bad_register_name_raises_the_maps_error():
    with pytest.raises(RegisterMapError, match="no register 'SPEED'"):
        core_register_map(8).addr("SPEED")
    with pytest.raises(RegisterMapError, match="has no field 'READY'"):
        core_register_map(8).encode("START", READY=1)
    with pytest.raises(RegisterMapError, match="power-of-two beat of at least 4 bytes"):
        core_register_map(2)


def test_the_host_driver_names_registers_through_the_map():
    from syncfabric.host.coarse.rtl import CoarseRtl
    rtl = CoarseRtl(2, 1, 8, 4, backend=object())
    assert rtl._reg("start") == "START" and rtl._reg("MODE") == "MODE"
    with pytest.raises(RegisterMapError, match="no sync-core register 'SPEED'"):
        rtl._reg("SPEED")
    with pytest.raises(RegisterMapError, match="no sync-core register 6"):
        rtl._reg(6)
