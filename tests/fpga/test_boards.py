"""Board tops and the bitstream build (YoWASP tools through Amaranth's platform flow)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncfabric.fpga.boards import BOARDS, board, ecp5_pll_params
from syncfabric.fpga.build import BuildError, build_board, format_build, parse_nextpnr_report

ROOT = Path(__file__).resolve().parents[2]


def test_ecp5_pll_settings_reach_the_target_with_the_vco_in_range():
    for fout in (25e6, 40e6, 50e6, 75e6, 100e6):
        clki, fb, op, f = ecp5_pll_params(25e6, fout)
        assert abs(f - fout) <= 0.01 * fout
        assert 400e6 <= f * op <= 800e6
        assert 25e6 / clki >= 3.125e6
    with pytest.raises(ValueError, match="no ECP5 PLL"):
        ecp5_pll_params(25e6, 2e9)


def test_board_builds_take_the_engine_in_its_fabric_form():
    """A board's engines are elaborated for the FPGA's fabric (``AceConfig.fabric``), its own profile and a
    profile named on the command line alike; the overrides that cut an engine down still apply."""
    for name, brd in BOARDS.items():
        cfg = brd.engine_config()
        assert cfg.fabric == 1, name
        for key, value in brd.overrides.items():
            assert getattr(cfg, key) == (tuple(value) if isinstance(value, (list, tuple)) else value), (name, key)
    assert board("ulx3s-85f").engine_config("small").fabric == 1


def test_unknown_board_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="ulx3s-85f"):
        board("de0-nano")


def test_nextpnr_report_parsing_takes_the_slowest_clock_and_device_totals():
    report = {"utilization": {"TRELLIS_COMB": {"used": 100, "available": 1000},
                              "TRELLIS_FF": {"used": 50, "available": 1000},
                              "DP16KD": {"used": 3, "available": 208}},
              "fmax": {"clk_a": {"achieved": 80.0, "constraint": 25.0},
                       "clk_b": {"achieved": 30.5, "constraint": 25.0}},
              # as nextpnr writes them: "posedge CLK" ends; paths from or to pins are "<async>"
              "critical_paths": [{"from": "<async>", "to": "posedge clk_b",
                                  "path": [{"from": {"cell": "pin"}, "to": {"cell": "u9"}}]},
                                 {"from": "posedge clk_a", "to": "posedge clk_a",
                                  "path": [{"from": {"cell": "a1"}, "to": {"cell": "a2"}}]},
                                 {"from": "posedge clk_b", "to": "posedge clk_b",
                                  "path": [{"from": {"cell": "u1"}, "to": {"cell": "u2"}},
                                           {"from": {"cell": "u2"}, "to": {"cell": "u3"}}]}]}
    res, fmax, path = parse_nextpnr_report(report, "ecp5")
    assert res["LUT"] == (100, 1000) and res["FF"] == (50, 1000) and res["BRAM"] == (3, 208)
    assert res["DSP"] == (0, 0)
    assert fmax == 30.5
    assert path == ("u1", "u3")


@pytest.mark.fpga
@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_board_top_elaborates_on_its_platform(name):
    from amaranth.hdl import Fragment

    brd = BOARDS[name]
    plat = brd.platform_instance()
    Fragment.get(brd.make_top(), plat)         # raises on a missing pin, port or a width mismatch
    assert (brd.reset[0], brd.reset[1]) in plat._requested and ("led", 0) in plat._requested


@pytest.mark.fpga
def test_board_top_with_a_pll_elaborates_for_another_clock():
    from amaranth.hdl import Fragment

    brd = BOARDS["ulx3s-85f-linktest"]
    frag = Fragment.get(brd.make_top(clk_hz=50e6), brd.platform_instance())
    assert frag is not None


@pytest.mark.fpga
def test_pll_top_constrains_only_the_oscillator_pin():
    # a constraint on the PLL output's net named a net synthesis merges away (nextpnr warned and ignored it);
    # nextpnr derives the output's frequency from the oscillator's constraint and the PLL's dividers
    brd = BOARDS["ulx3s-85f-linktest"]
    plan = brd.platform_instance().build(brd.make_top(clk_hz=50e6), name="top", do_build=False)
    freqs = [ln for ln in plan.files["top.lpf"].splitlines() if ln.startswith("FREQUENCY")]
    assert freqs == ['FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;']


@pytest.mark.fpga
def test_link_test_bitstream_builds_and_meets_timing():
    # the small configuration CI builds: the pin-level link port with its generator and checker
    out = ROOT / "build" / "test-fpga" / "linktest"     # not under /tmp: YoWASP cannot open /tmp paths
    res = build_board("ulx3s-85f-linktest", build_dir=out)
    assert Path(res.bitstream).stat().st_size > 100_000
    lut, lut_avail = res.resources["LUT"]
    ff, _ = res.resources["FF"]
    assert 100 < lut < lut_avail and 100 < ff
    assert res.fmax_mhz >= res.target_mhz == 25.0
    text = format_build(res)
    assert "meets timing" in text and "LUT" in text


@pytest.mark.fpga
def test_build_fails_clearly_when_timing_is_missed():
    out = ROOT / "build" / "test-fpga" / "linktest-fast"
    with pytest.raises(BuildError, match="timing not met") as err:
        build_board("ulx3s-85f-linktest", clk_hz=390e6, build_dir=out)
    assert err.value.result.fmax_mhz < 390


def test_build_command_lists_the_boards():
    out = subprocess.run([sys.executable, "-m", "syncfabric.host.cli", "build", "--list"], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "AMARANTH_USE_YOSYS": "builtin"})
    assert out.returncode == 0
    for name in BOARDS:
        assert name in out.stdout


def test_build_refuses_a_json_path_in_a_missing_directory_before_building(tmp_path, capsys, monkeypatch):
    """`build --json missing/x.json` is one error line before anything is built (it failed after the build)."""
    from syncfabric.fpga import build
    from syncfabric.host.cli import main

    monkeypatch.setattr(build, "build_board", lambda *a, **k: pytest.fail("built despite the bad --json"))
    assert main(["build", "--board", "ulx3s-85f-linktest", "--json", str(tmp_path / "missing" / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("syncfabric build: error: --json") and "does not exist" in err


@pytest.mark.slow
@pytest.mark.fpga
def test_two_engine_board_bitstream_fits_the_85f_and_meets_timing(tmp_path):
    out = ROOT / "build" / "test-fpga" / "ulx3s-85f"
    res = build_board("ulx3s-85f", build_dir=out)
    print(format_build(res))
    (out / "result.json").write_text(json.dumps(res.as_dict(), indent=2))
    assert res.meets_timing and res.resources["BRAM"][0] > 0


def test_an_over_full_device_is_read_from_the_nextpnr_log(tmp_path):
    from syncfabric.fpga.build import _over_utilized

    log = tmp_path / "top.tim"
    log.write_text("Info: Device utilisation:\nInfo: \t          TRELLIS_FF:   30073/  83640    35%\n"
                   "Info: \t        TRELLIS_COMB:   86128/  83640   102%\n")
    assert _over_utilized(log) == [("TRELLIS_COMB", 86128, 83640)]
    log.write_text("Info: \t        TRELLIS_COMB:   1000/  83640     1%\n")
    assert _over_utilized(log) == []


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")   # the faked build elaborates nothing
def test_an_abc9_assertion_rebuilds_with_the_classic_abc_and_says_so(tmp_path, monkeypatch):
    """Yosys 0.70's ABC9 asserts inside its re-integration on some tops (the one-engine ring board): the build
    runs again with the classic ABC's LUT mapping and the result carries a note; any other failure stays one."""
    from syncfabric.fpga import build

    report = {"utilization": {"TRELLIS_COMB": {"used": 100, "available": 1000}},
              "fmax": {"clk": {"achieved": 30.0, "constraint": 25.0}}, "critical_paths": []}
    runs = []

    def fake_run(plat, top, out, *a, classic_abc, **kw):
        runs.append(classic_abc)
        if not classic_abc:
            (out / "top.rpt").write_text("2.46.24.7. Executing ABC_OPS_REINTEGRATE pass.\n"
                                         "ERROR: Assert `GetSize(conn.first) == GetSize(conn.second)' failed\n")
            return subprocess.CalledProcessError(1, ["sh", "build_top.sh"])
        (out / "top.report.json").write_text(json.dumps(report))
        (out / "top.bit").write_bytes(b"bit")
        return None

    monkeypatch.setattr(build, "_run_build", fake_run)
    res = build_board("ulx3s-85f-linktest", build_dir=tmp_path)
    assert runs == [False, True] and res.bitstream and res.fmax_mhz == 30.0
    assert len(res.notes) == 1 and "classic ABC" in res.notes[0] and "classic ABC" in format_build(res)

    def other_failure(plat, top, out, *a, classic_abc, **kw):
        runs.append(classic_abc)
        (out / "top.rpt").write_text("2.3. Executing PROC pass.\nERROR: Assert `x' failed\n")
        return subprocess.CalledProcessError(1, ["sh", "build_top.sh"])

    runs.clear()
    monkeypatch.setattr(build, "_run_build", other_failure)
    with pytest.raises(BuildError, match="build failed"):
        build_board("ulx3s-85f-linktest", build_dir=tmp_path)
    assert runs == [False]


def test_the_classic_abc_script_replaces_only_the_lut_mapping():
    from syncfabric.fpga.fpgasynth import abc9_tripped, classic_abc_script

    script = classic_abc_script("top").splitlines()
    assert script[0] == "synth_ecp5 -top top -run :map_luts" and "abc -lut 4" in script
    assert script[-1] == "synth_ecp5 -top top -run map_cells:"
    assert abc9_tripped("2.46.24.5. Executing ABC9.\nERROR: Assert `count_id(wire->name) == 0' failed\n")
    assert not abc9_tripped("2.46.24.5. Executing ABC9.\n2.47. Executing OPT pass.\nERROR: Assert `x' failed\n")
    assert not abc9_tripped("2.46.24.5. Executing ABC9.\nERROR: Module `top' not found\n")


def test_build_stage_follows_the_tools_logs(tmp_path):
    """The progress output of a long build names the step the tools are at, from their logs."""
    from syncfabric.fpga.build import build_stage

    assert build_stage(tmp_path) is None
    (tmp_path / "top.rpt").write_text("2.45. Executing TECHMAP pass (map).\n2.46. Executing ABC9 pass.\n")
    assert build_stage(tmp_path) == "synthesis: ABC9 pass"
    nextpnr = [
        ("Info: Packing IOs..", "placement"),
        ("Info:     at iteration #7, type ALL: wirelen solved = 1, spread = 2, legal = 3; time = 1s",
         "placement: analytic, iteration 7"),
        ("Info:   at iteration #15: temp = 0.000000, timing cost = 7965, wirelen = 549702",
         "placement: refinement, iteration 15"),
        ("Info:     iter=9 wires=1451158 overused=19868 overuse=20096 archfail=NA",
         "routing: router2 pass 9, 19,868 wires overused"),
        ("Info:     118000 |    20993      97006 |  436   564 |    289766|      15.96     254.13|",
         "routing: 289,766 arcs left"),
        ("Info: Program finished normally.", "packing the bitstream"),
    ]
    log = ""
    for line, stage in nextpnr:          # the log grows; the newest recognised line names the stage
        log += line + "\n"
        (tmp_path / "top.tim").write_text(log)
        assert build_stage(tmp_path) == stage, line


@pytest.mark.slow
@pytest.mark.fpga
def test_ring_board_bitstream_fits_the_85f_and_meets_timing():
    out = ROOT / "build" / "test-fpga" / "ulx3s-85f-ring"
    res = build_board("ulx3s-85f-ring", build_dir=out)
    print(format_build(res))
    (out / "result.json").write_text(json.dumps(res.as_dict(), indent=2))
    assert res.meets_timing and res.resources["IO"][0] >= 28 + 2     # the link port's pins and the UART's
