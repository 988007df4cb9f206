"""``syncfabric bench COLLECTIVE``: nccl-tests output that parses as nccl-tests output, with #wrong 0 and
nccl-tests' size, count and bus-bandwidth conventions."""

import json

import pytest

from syncfabric.host.cli import main
from syncfabric.host.nccl_bench import bus_factor, parse_table


def _bench(capsys, tmp_path, *args):
    out = tmp_path / "bench.json"
    status = main(["bench", *args, "--quiet", "--json", str(out)])
    text = capsys.readouterr().out
    return status, text, json.loads(out.read_text())


def _check(rows, collective, n, sizes):
    assert [r["size"] for r in rows] == sizes
    for r in rows:
        for place in ("out", "in"):
            p = r[place]
            if p["time"] is None:
                assert collective == "alltoall" and place == "in"
                continue
            assert p["wrong"] == 0 and p["time"] > 0
            # time and algbw are printed with 2 decimals: a time of 0.23 us stands for 0.225..0.235
            lo = r["size"] / (p["time"] + 0.005) / 1e3
            hi = r["size"] / max(p["time"] - 0.005, 1e-9) / 1e3
            assert lo - 0.006 <= p["algbw"] <= hi + 0.006, (r["size"], p)
            assert p["busbw"] == pytest.approx(p["algbw"] * bus_factor(collective, n), rel=0.02, abs=0.011)


def test_bus_factors():
    assert bus_factor("allreduce", 4) == 1.5 and bus_factor("allgather", 4) == 0.75
    assert bus_factor("alltoall", 8) == 0.875 and bus_factor("broadcast", 8) == 1.0


def test_allreduce_sweep_on_the_amaranth_backend(capsys, tmp_path):
    status, text, js = _bench(capsys, tmp_path, "allreduce", "-b", "64", "-e", "256", "-f", "4",
                              "--topology", "ring:2", "--latency", "4")
    assert status == 0
    assert text.startswith("# nThread 1 nGpus 2 minBytes 64 maxBytes 256 step: 4(factor)")
    assert "# Out of bounds values : 0 OK" in text
    rows = parse_table(text)
    _check(rows, "allreduce", 2, [64, 256])
    assert [r["count"] for r in rows] == [16, 64] and rows[0]["type"] == "float" and rows[0]["root"] == -1
    assert js["rows"][1]["out"]["cycles"] == pytest.approx(rows[1]["out"]["time"] * 1000, abs=5)


@pytest.mark.cocotb
@pytest.mark.parametrize("collective, extra", [("allgather", ["-d", "fp16"]), ("alltoall", ["-d", "int32"]),
                                               ("reduce", ["-r", "1", "-o", "max"])])
def test_sweeps_on_verilator(capsys, tmp_path, collective, extra):
    status, text, _ = _bench(capsys, tmp_path, collective, "-b", "32", "-e", "2K", "-f", "8", "--topology", "ring:4",
                             "--latency", "4", "--backend", "verilator", *extra)
    assert status == 0, text
    rows = parse_table(text)
    _check(rows, collective, 4, [32, 256, 2048])
    if collective == "allgather":       # size is the whole output, count the elements per rank
        assert [r["count"] for r in rows] == [4, 32, 256] and rows[0]["type"] == "half"
        assert rows[0]["redop"] == "none"
    if collective == "reduce":
        assert rows[0]["root"] == 1 and rows[0]["redop"] == "max"


def test_bad_run_counts_and_roots_are_refused_before_a_simulator_starts(capsys, monkeypatch):
    """`-n -1`, `-n 0` and `-w -3` (a ZeroDivisionError after the whole sweep before) and a root outside the
    topology end in one error line naming the option and what it needs, before any system is built (the
    System here fails the test if opened); the library's bench() refuses the same counts."""
    import syncfabric.host.system as system_mod
    from syncfabric.host.nccl_bench import bench

    def no_system(*args, **kwargs):
        raise AssertionError("a system was started")

    monkeypatch.setattr(system_mod, "System", no_system)
    for args, msg in ((["-n", "-1"], "iters (-n) -1: need at least 1 timed run per size"),
                      (["-w", "-3", "-n", "0"], "iters (-n) 0: need at least 1"),
                      (["-w", "-3"], "warmup (-w) -3: need 0 or more untimed runs"),
                      (["--topology", "ring:4", "-r", "9"], "-r 9 is not a rank of ring:4 (0..3)")):
        assert main(["bench", "broadcast", *args, "--quiet"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("syncfabric bench: error: ") and msg in err
    with pytest.raises(ValueError, match="iters"):
        bench(None, "allreduce", iters=0)
    with pytest.raises(ValueError, match="warmup"):
        bench(None, "allreduce", warmup=-1)


def test_bad_sweeps_are_refused(capsys):
    assert main(["bench", "allreduce", "-b", "64", "-e", "32", "--topology", "ring:2", "--quiet"]) == 2
    assert "-b (64) <= -e (32)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="13 columns"):
        parse_table("  8  2  float\n")
