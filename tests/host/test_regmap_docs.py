"""The register map DSL (checks, lookup, fields, Markdown), the ACE map's layout against its specification
for the default and the small configuration, and ``docs/registers.md`` being the generated text."""

from pathlib import Path

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.regs import (ACE_ID, COUNTERS, IMEM_BASE, PORT_COUNTERS, PTAB_BASE, ROUTE_BASE,
                                     STALL_CAUSES, ace_regmap, imem_addr, ptab_addr, registers_markdown,
                                     route_index)
from syncfabric.hdl.common.regmap import Field, Register, RegisterArray, RegisterMap, RegisterMapError, Window

DOCS = Path(__file__).resolve().parents[2] / "docs" / "registers.md"


# ---- the DSL ----------------------------------------------------------------------------------------------------

def small_map():
    return RegisterMap("t", [
        Register("A", 0x0, "rw", fields=(Field("lo", 0, 4), Field("hi", 28, 4, "top nibble"))),
        Register("B", 0x8, "ro", 64),
        RegisterArray("CH", 0x10, 2, 0x10, (Register("X", 0, "rw"), Register("Y", 8, "w1c", 64))),
        Window("MEM", 0x40, 8),
    ], size=0x100)


def test_lookup_by_name_index_and_address():
    rm = small_map()
    assert rm.addr("A") == 0 and rm.addr("CH_Y", 1) == 0x28 and rm.addr("MEM", 3) == 0x4C
    assert rm.register("CH_X", 1).offset == 0x20 and rm.count("CH_X") == 2 and rm.count("A") is None
    assert rm.at(0x2C) == (rm.register("CH_Y", 1), 1)
    assert rm.at(0x5C) == (rm.window("MEM"), 7)
    assert rm.at(0x04) is None and rm.at(0x41) is None and rm.at(0x60) is None
    assert [getattr(x, "label", x.name) for x in rm] == ["A", "B", "CH_X[0]", "CH_Y[0]", "CH_X[1]", "CH_Y[1]",
                                                          "MEM"]
    assert "CH_X" in rm and "MEM" in rm and "NOPE" not in rm
    with pytest.raises(RegisterMapError, match="give an index"):
        rm.addr("CH_X")
    with pytest.raises(RegisterMapError, match="index 2 out of range for CH_X"):
        rm.addr("CH_X", 2)
    with pytest.raises(RegisterMapError, match="A is not an array"):
        rm.addr("A", 0)
    with pytest.raises(RegisterMapError, match="outside window MEM"):
        rm.addr("MEM", 8)


def test_fields_encode_and_decode():
    rm = small_map()
    v = rm.encode("A", lo=5, hi=0xA)
    assert v == 0xA0000005 and rm.decode("A", v) == {"lo": 5, "hi": 0xA}
    assert rm.register("A").encode(v, lo=0) == 0xA0000000
    with pytest.raises(RegisterMapError, match="lo=16 does not fit in 4 bits"):
        rm.encode("A", lo=16)
    with pytest.raises(RegisterMapError, match="has no field 'mid'"):
        rm.encode("A", mid=1)


@pytest.mark.parametrize("items, size, message", [
    ([Register("A", 0, "rw"), Register("B", 0, "rw")], 0x10, "register B .* overlaps register A"),
    ([Register("A", 0, "rw", 64), Window("W", 4, 2)], 0x10, "window W .* overlaps register A"),
    ([Register("A", 2, "rw")], 0x10, "not 4-byte aligned"),
    ([Register("A", 4, "rw", 64)], 0x10, "not 8-byte aligned"),
    ([Window("W", 8, 4)], 0x10, r"window W \[0x8, 0x18\) does not fit the 0x10-byte map"),
    ([Register("A", 0, "rw"), Register("A", 4, "rw")], 0x10, "register A defined twice"),
    ([RegisterArray("P", 0, 2, 4, (Register("P", 0, "rw"),), prefix=""), Register("P", 8, "rw")], 0x10,
     "P is both a register and a register array"),
], ids=["overlap", "window-overlap", "misaligned", "misaligned-64", "too-big", "duplicate", "array-and-register"])
def test_bad_maps_are_refused_with_the_reason(items, size, message):
    with pytest.raises(RegisterMapError, match=message):
        RegisterMap("bad", items, size)


def test_bad_registers_are_refused_with_the_reason():
    with pytest.raises(RegisterMapError, match="overlaps another field"):
        Register("A", 0, "rw", fields=(Field("a", 0, 4), Field("b", 3, 2)))
    with pytest.raises(RegisterMapError, match=r"field a \[32\] exceeds 32 bits"):
        Register("A", 0, "rw", fields=(Field("a", 32),))
    with pytest.raises(RegisterMapError, match="access 'rx'"):
        Register("A", 0, "rx")
    with pytest.raises(RegisterMapError, match="init 0x100000000 does not fit"):
        Register("A", 0, "rw", init=1 << 32)
    with pytest.raises(RegisterMapError, match="stride 0x4 is smaller than one element"):
        RegisterArray("W", 0, 2, 4, (Register("B", 0, "rw", 64),))
    with pytest.raises(RegisterMapError, match="init for unknown element"):
        RegisterArray("W", 0, 2, 4, (Register("B", 0, "rw"),), inits={("B", 2): 1})


def test_markdown_lists_every_register_window_and_field():
    md = small_map().markdown()
    assert "| 0x0000 | `A` | rw | 0x0 | `lo` [3:0]<br>`hi` [31:28] |" in md
    assert "| 0x0018 + 0x10*i, i < 2 | `CH_Y[i]` | w1c (64-bit) |" in md
    assert "| 0x0040..0x005f | `MEM` | rw window | - | 8 words |" in md
    assert "| 31:28 | `hi` | top nibble |" in md


# ---- the ACE map ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [AceConfig(), AceConfig.small()], ids=["default", "small"])
def test_ace_map_matches_its_specification(cfg):
    rm = ace_regmap(cfg)
    fixed = {"ID": 0x000, "VERSION": 0x004, "CFG0": 0x008, "CFG1": 0x00C, "CFG2": 0x010, "IMEM_WORDS": 0x014,
             "CFG3": 0x018,
             "CTRL": 0x020, "STATUS": 0x024, "IRQ": 0x028, "SQ_BASE": 0x030, "SQ_SIZE": 0x038, "SQ_TAIL": 0x03C,
             "SQ_HEAD": 0x040, "CQ_BASE": 0x050, "CQ_SIZE": 0x058, "CQ_TAIL": 0x05C, "CQ_HEAD": 0x060,
             "CHUNK_BEATS": 0x070, "CYCLES": 0x400, "PAYLOAD_RD_BYTES": 0x408, "PAYLOAD_WR_BYTES": 0x410,
             "DESC_RD_BYTES": 0x418, "CPL_WR_BYTES": 0x420, "CMDS_OK": 0x428, "CMDS_ERR": 0x42C,
             "ALU_BEATS": 0x430, "FSM_BUSY": 0x438}
    assert {name: rm.addr(name) for name in fixed} == fixed
    widths = {name: rm.register(name).width for name in fixed}
    assert [n for n, w in widths.items() if w == 64] == ["SQ_BASE", "CQ_BASE", "CYCLES", "PAYLOAD_RD_BYTES",
                                                         "PAYLOAD_WR_BYTES", "DESC_RD_BYTES", "CPL_WR_BYTES",
                                                         "ALU_BEATS", "FSM_BUSY"]
    assert [rm.addr("PART", i) for i in range(5)] == [0x80, 0x84, 0x88, 0x8C, 0x90]
    for i in range(cfg.n_windows):
        assert (rm.addr("WIN_BASE", i), rm.addr("WIN_SIZE", i)) == (0x100 + 0x10 * i, 0x108 + 0x10 * i)
    for c in range(cfg.n_comms):
        assert (rm.addr("COMM_CFG", c), rm.addr("COMM_DIMS", c)) == (0x200 + 0x10 * c, 0x204 + 0x10 * c)
    for p in range(cfg.n_ports):
        assert [rm.addr(n, p) for n in PORT_COUNTERS] == [0x500 + 0x20 * p + 4 * k for k in range(8)]
    assert [rm.addr("STALL", i) for i in range(len(STALL_CAUSES))] == [0x600 + 4 * i for i in range(8)]
    assert STALL_CAUSES[0] == "port_busy" and STALL_CAUSES[7] == "cpl_ring_full"
    assert (rm.window("PTAB").offset, rm.window("PTAB").words) == (0x1000, 8 * cfg.n_programs)
    assert (rm.window("ROUTE").offset, rm.window("ROUTE").words) == (0x4000, cfg.n_comms * cfg.max_ranks)
    assert (rm.window("IMEM").offset, rm.window("IMEM").words) == (0x8000, 2 * cfg.imem_words)
    assert (PTAB_BASE, ROUTE_BASE, IMEM_BASE) == (0x1000, 0x4000, 0x8000)
    assert {n: rm.register(n).access for n in ("CTRL", "STATUS", "IRQ", "SQ_TAIL", "SQ_HEAD", "CQ_TAIL",
                                               "CQ_HEAD")} == \
        {"CTRL": "rw", "STATUS": "ro", "IRQ": "w1c", "SQ_TAIL": "rw", "SQ_HEAD": "ro", "CQ_TAIL": "ro",
         "CQ_HEAD": "rw"}
    assert all(rm.register(n).access == "ro" for n in COUNTERS)
    assert rm.register("ID").init == ACE_ID == int.from_bytes(b"ACE1", "big")
    assert rm.register("CHUNK_BEATS").init == cfg.chunk_beats
    cfg0 = rm.decode("CFG0", rm.register("CFG0").init)
    assert cfg0 == {"beat_log2": cfg.beat_bytes.bit_length() - 1, "n_ports": cfg.n_ports, "n_fsms": cfg.n_fsms,
                    "n_buffers": cfg.n_buffers, "n_cmds": cfg.n_cmds, "n_comms": cfg.n_comms}
    assert rm.decode("CFG1", rm.register("CFG1").init) == {"chunk_beats": cfg.chunk_beats,
                                                           "landing_beats": cfg.landing_beats}
    assert rm.decode("CFG2", rm.register("CFG2").init) == {
        "landing_headers": cfg.landing_headers, "n_windows": cfg.n_windows, "n_programs": cfg.n_programs,
        "max_ranks": cfg.max_ranks}
    assert rm.decode("CFG3", rm.register("CFG3").init) == {"dtypes": 0b1111, "replay_log2": 0}
    assert rm.decode("CFG3", ace_regmap(cfg.replace(replay_flits=256)).register("CFG3").init)["replay_log2"] == 8
    assert ace_regmap(cfg.replace(dtypes=("int32", "fp32"))).register("CFG3").init == 0b1001
    parts = [rm.register("PART", i).init for i in range(5)]
    assert sum(parts) == cfg.n_buffers and parts[1:4] == [0, 0, 0]
    assert imem_addr(cfg, 3, 1) == 0x8000 + 8 * 3 + 4 and ptab_addr(cfg, 2, 5) == 0x1000 + 32 * 2 + 4 * 5
    assert route_index(cfg, 1, 3) == cfg.max_ranks + 3


@pytest.mark.parametrize("change, message", [
    (dict(n_buffers=256), "n_buffers=256 does not fit CFG0.n_buffers"),
    (dict(imem_words=4097), r"window IMEM \[0x8000, 0x10008\) does not fit the 0x10000-byte map"),
    (dict(n_programs=256), "n_programs=256 does not fit CFG2.n_programs"),
    (dict(max_ranks=512, n_comms=9), r"window IMEM \[0x8000, 0xa000\) overlaps window ROUTE \[0x4000, 0x8800\)"),
    (dict(n_windows=17), "n_windows=17 does not fit CFG2.n_windows"),
], ids=["buffers", "imem", "ptab", "route", "windows"])
def test_ace_map_refuses_configurations_that_do_not_fit(change, message):
    with pytest.raises(RegisterMapError, match=message):
        ace_regmap(AceConfig(**change))


# ---- docs/registers.md ------------------------------------------------------------------------------------------

def test_registers_md_is_the_generated_text():
    assert DOCS.read_text() == registers_markdown(), \
        "docs/registers.md is stale: run `python -m syncfabric.hdl.ace.regs > docs/registers.md`"


def test_registers_md_documents_every_register_and_window():
    text = DOCS.read_text()
    rm = ace_regmap(AceConfig())
    for reg in rm.registers():
        assert f"`{reg.name}`" in text or f"`{reg.name}[i]`" in text, reg.label
    for w in rm.windows():
        assert f"`{w.name}`" in text
