"""Every script in examples/ runs (so they never rot)."""

import importlib.util
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.cocotb
def test_allreduce_example(capsys):
    assert _load("allreduce").main(["--count", "1000"]) == 0
    assert "every rank holds the sum" in capsys.readouterr().out


@pytest.mark.cocotb
def test_sweep_example(capsys):
    assert _load("sweep").main(["--max-bytes", "1024"]) == 0
    assert "# Out of bounds values : 0 OK" in capsys.readouterr().out


@pytest.mark.cocotb
def test_training_overlap_example(capsys):
    assert _load("training_overlap").main(["--shares", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "exposed" in out and out.count("0.50") == 2


@pytest.mark.cocotb
def test_serial_board_example(capsys):
    assert _load("serial_board").main(["--simulate", "--count", "64"]) == 0
    out = capsys.readouterr().out
    assert "2 endpoints" in out and "every rank holds the sum" in out and "0 transmission errors" in out


@pytest.mark.cocotb
def test_serial_board_example_on_the_ulx3s_build(capsys):
    """The example as for a real ULX3S 85F: the engine configuration (fp32/int32 ALUs), topology (switch:2) and
    memory that board is built with, here simulated behind the pseudo-terminal."""
    assert _load("serial_board").main(["--simulate", "--board", "ulx3s-85f", "--count", "256"]) == 0
    out = capsys.readouterr().out
    assert "2 endpoints, 16384 B of memory each" in out and "every rank holds the sum" in out


@pytest.mark.cocotb
def test_ddp_training_example_through_the_engines_agrees_with_gloo(capsys, tmp_path):
    """DistributedDataParallel on four rank processes over the syncfabric backend and over gloo, and with
    RNA's partial all-reduce as a communication hook (examples/ddp_train.py)."""
    pytest.importorskip("torch")
    trace = tmp_path / "trace.json"
    assert _load("ddp_train").main(["--steps", "3", "--rna-late", "3", "--profile", str(trace),
                                    "--config", str(EXAMPLES / "ring4.yaml")]) == 0
    out = capsys.readouterr().out
    assert "syncfabric vs gloo" in out and "- agree" in out and "same parameters after the syncfabric run: yes" in out
    assert re.search(r"syncfabric-rna .*engines: \d+ allreduce", out)
    # rank 0's profile of the gloo run, replayed by the performance model
    from syncfabric.host.cli import main
    assert main(["perf", "iteration", "--trace", str(trace), "--topology", "ring:4", "--config", "ACE"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"2 step\(s\), measured per step [\d.]+ ms .*: 1 allreduce(, 2 broadcast)?; "
                     r"11,048 B all-reduced", out)
    assert re.search(r"ACE +[\d.]+ +[\d.]+", out)


@pytest.mark.cocotb
def test_rna_training_example_through_the_engines(capsys, tmp_path):
    """RNA's protocol against Horovod's barrier on the ring of small engines (examples/rna_train.py; its
    default torus and the hierarchical mode need a build of their own: the slow test of host/rna.py)."""
    out_json = tmp_path / "rna.json"
    results = _load("rna_train").main(["--config", str(EXAMPLES / "ring4.yaml"), "--modes", "horovod,rna-2",
                                       "--rounds", "12", "--json", str(out_json)])
    out = capsys.readouterr().out
    hvd, rna2 = results
    assert hvd["engine_allreduces"] == hvd["rounds"] and rna2["engine_allreduces"] == rna2["rounds"]
    assert hvd["contributors"] == 4 and rna2["contributors"] < 4 and rna2["expired"] == rna2["rounds"]
    assert re.search(r"every collective byte for byte against the golden executor \(\d+ bytes\)", out)
    assert out_json.exists()
    with pytest.raises(SystemExit):
        _load("rna_train").main(["--config", str(EXAMPLES / "ring4.yaml"), "--modes", "rna-h"])
    assert "needs a torus" in capsys.readouterr().err


@pytest.mark.cocotb
def test_sven_training_example_through_the_engines(capsys):
    """Sven's four-stage pipeline on the ring of small engines (examples/sven_train.py): every all-to-all equal
    to numpy's, every all-reduce within rounding, the final model equal to the same schedule run in numpy."""
    res = _load("sven_train").main(["--iterations", "5"])
    out = capsys.readouterr().out
    assert res["checked"] == {"alltoall": 10, "allreduce": 5} and res["staleness"] == 3
    assert len(res["cycles"]["alltoall"]) == 10 and min(res["cycles"]["allreduce"]) > 0
    assert res["speedup"] > 1 and "agree with the numpy run" in out


def test_every_example_is_tested():
    tested = {"allreduce", "sweep", "training_overlap", "serial_board", "ddp_train", "rna_train", "sven_train"}
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.cocotb
def test_serial_board_example_on_two_boards_joined_by_their_link_ports(capsys):
    """The example as for two ULX3S 85F boards of the ring build joined by a link cable: two simulated boards,
    one rank each, their pin-level link ports wired lane to lane, one terminal each."""
    assert _load("serial_board").main(["--simulate", "--board", "ulx3s-85f-ring", "--count", "256"]) == 0
    out = capsys.readouterr().out
    assert out.count("1 endpoint, 16384 B of memory each") == 2 and "across 2 boards" in out
    assert "every rank holds the sum" in out and out.count("0 words dropped") == 2
    # every flit one board sent the other received
    sent = [int(x) for x in re.findall(r"(\d+) flits out", out)]
    got = [int(x) for x in re.findall(r"flits out, (\d+) in", out)]
    assert len(sent) == 2 and sent[0] > 0 and got == sent[::-1]
