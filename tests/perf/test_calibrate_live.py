"""The performance model against the engine RTL measured now (``syncfabric perf calibrate --measure``), not
against cycle counts typed in from the docs: the small ring's row runs on Verilator in the default suite."""

import json

import pytest

from syncfabric.host.cli import main
from syncfabric.host.run import measure_point
from syncfabric.sim.perf.calibrate import RTL_POINTS, calibrate

SMALL_RING = next(p for p in RTL_POINTS if p.config == "small" and p.topology == "ring:4")

#: How far the model may be from the small engine's 4-rank ring: issue 28's 5 % per row. The model errs by -0.9 %
#: on this row since it charges each message a cycle on its port (-5.8 % before, -9.0 % before a chunk's STORE
#: followed its receives: docs/results.md).
SMALL_RING_TOLERANCE = 0.05


@pytest.mark.cocotb
def test_model_and_the_rtl_measured_now_agree_on_the_small_ring():
    [row], mae = calibrate([SMALL_RING], measure=measure_point)
    assert not row.get("failed"), row["failed"]
    assert row["measured"] and mae == pytest.approx(abs(row["error"]))
    # the recorded figure is the RTL's own: a change of the engine's cycles must re-record it (RTL_POINTS)
    assert row["rtl_cycles"] == SMALL_RING.cycles, row
    assert abs(row["error"]) <= SMALL_RING_TOLERANCE, row


def _fake_run(cycles, status="OK"):
    def run_collective(**kw):
        return {"cycles": cycles, "mismatches": 0 if status == "OK" else 7, "status": [status] * 4,
                "wall_s": 1.5, "sram_conflicts": 0, "guard_bytes_touched": 0}
    return run_collective


def test_calibrate_measure_prints_each_row_and_writes_the_measured_cycles(monkeypatch, tmp_path, capsys):
    """--measure runs each selected row's job (here a stand-in for the RTL run) and reports it against the
    recorded figure and the model, row by row as it goes."""
    import syncfabric.host.run as run

    seen = []
    monkeypatch.setattr(run, "run_collective", lambda **kw: seen.append(kw) or _fake_run(2000)(**kw))
    assert main(["perf", "calibrate", "--measure", "--config", "small", "--out", str(tmp_path)]) == 0
    small = [p for p in RTL_POINTS if p.config == "small"]
    assert len(seen) == len(small) and all(kw["npu_mem"] == "hdl" and kw["backend"] == "verilator" for kw in seen)
    assert seen[0]["topology"] == small[0].topology and seen[0]["nbytes"] == small[0].nbytes
    out = capsys.readouterr().out
    assert f"[1/{len(small)}] syncfabric run --config small" in out and "2,000 cycles" in out
    rows = json.loads((tmp_path / "calibrate.json").read_text())
    assert rows["meta"]["measured"] is True
    assert all(r["rtl_cycles"] == 2000 and r["recorded_cycles"] == p.cycles for r, p in zip(rows["rows"], small))


def test_a_failed_run_is_reported_and_the_other_rows_still_run(monkeypatch, tmp_path, capsys):
    """A run that fails (a byte wrong, a status not OK) makes the command exit 1 naming it, after every other
    row has run and the outputs are written with the failed row marked: hours of measurements are not lost."""
    import syncfabric.host.run as run

    small = [p for p in RTL_POINTS if p.config == "small"]
    bad = small[1]
    monkeypatch.setattr(run, "run_collective", lambda **kw: _fake_run(
        2000, status="PROTOCOL" if kw["topology"] == bad.topology and kw["nbytes"] == bad.nbytes
        and kw["collective"] == bad.collective and kw["chunk_bytes"] == (bad.chunk_bytes or "max")
        and kw["latency"] == bad.latency else "OK")(**kw))
    assert main(["perf", "calibrate", "--measure", "--config", "small", "--out", str(tmp_path), "--quiet"]) == 1
    cap = capsys.readouterr()
    assert "the RTL run failed" in cap.err and bad.run_command in cap.err and "FAILED" in cap.out
    assert f"{len(small) - 1} of {len(small)} rows ran" in cap.out
    out = json.loads((tmp_path / "calibrate.json").read_text())
    assert out["meta"]["failed"] == 1 and len(out["rows"]) == len(small)
    assert [bool(r.get("failed")) for r in out["rows"]] == [p is bad for p in small]
    assert all(r["rtl_cycles"] == 2000 for r in out["rows"] if not r.get("failed"))

    monkeypatch.setattr(run, "run_collective", _fake_run(2000, status="PROTOCOL"))
    assert main(["perf", "calibrate", "--measure", "--config", "small", "--out", str(tmp_path), "--quiet"]) == 1
    assert json.loads((tmp_path / "calibrate.json").read_text())["meta"]["mean_abs_error"] is None


def test_each_row_is_a_run_command_with_its_job():
    for p in RTL_POINTS:
        kw = p.run_kwargs()
        assert p.run_command.startswith(f"syncfabric run --config {p.config} --collective {p.collective}")
        assert (kw["topology"], kw["nbytes"]) == (p.topology, p.nbytes)
        assert ("--latency" in p.run_command) == (p.latency is not None)
        assert ("--partitions" in p.run_command) == (kw["partitions"] is not None)


def test_calibrate_topology_selects_rows_and_an_unknown_one_is_refused(monkeypatch, tmp_path, capsys):
    """--topology keeps the rows on the topologies given (with --config, the rows on both); a topology without
    a row is an error that lists the table's topologies, not an empty table."""
    import syncfabric.host.run as run

    seen = []
    monkeypatch.setattr(run, "run_collective", lambda **kw: seen.append(kw) or _fake_run(2000)(**kw))
    args = ["perf", "calibrate", "--measure", "--config", "paper", "--topology", "ring:8", "--topology",
            "bidir-ring:4", "--out", str(tmp_path), "--quiet"]
    assert main(args) == 0
    want = [p for p in RTL_POINTS if p.config == "paper" and p.topology in ("ring:8", "bidir-ring:4")]
    assert len(want) >= 3 and [kw["topology"] for kw in seen] == [p.topology for p in want]
    assert main(["perf", "calibrate", "--config", "small", "--topology", "torus:4x4x4", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no row on torus:4x4x4" in err and "ring:8" in err
