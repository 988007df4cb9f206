"""`syncfabric run`: argument checking, the golden backend and the ALU-RTL backend end to end."""

import json

import pytest

from syncfabric.host.cli import main, parse_size
from syncfabric.host.run import run_collective


def test_parse_size_units_and_errors():
    assert parse_size("4096") == 4096 and parse_size("64K") == 65536 and parse_size("1MiB") == 1 << 20
    with pytest.raises(Exception, match="not a size"):
        parse_size("12Q")


@pytest.mark.parametrize("collective,topology,dtype,op", [
    ("allreduce", "ring:8", "fp32", "sum"),
    ("allreduce", "torus:4x2x2", "int32", "max"),
    ("reduce_scatter", "bidir-ring:4", "bf16", "min"),
    ("allgather", "ring:3", "fp16", "sum"),
    ("alltoall", "torus:2x2x2", "int32", "sum"),
    ("broadcast", "ring:5", "fp32", "sum"),
    ("reduce", "switch:4", "int32", "sum"),
])
def test_golden_backend_matches_numpy_reference(collective, topology, dtype, op):
    r = run_collective(collective, topology, 24 * 1024, dtype, op, backend="golden", root=1, chunk_bytes=4096)
    assert r["mismatches"] == 0 and r["checked_against"] == "numpy reference"


def test_allreduce_reads_and_writes_each_byte_once_and_sends_2p_minus_1_over_p():
    r = run_collective("allreduce", "ring:8", 1 << 20, "fp32", "sum", backend="golden")
    assert r["mem_read_bytes"] == [1 << 20] * 8 and r["mem_write_bytes"] == [1 << 20] * 8
    assert r["bytes_sent_per_byte_read"] == pytest.approx(2 * 7 / 8)


def test_cli_rejects_bad_input_with_clear_errors(capsys):
    assert main(["run", "--backend", "golden", "--bytes", "13"]) == 2
    assert "multiple of 4" in capsys.readouterr().err
    assert main(["run", "--backend", "golden", "--topology", "mesh:4"]) == 2
    assert "mesh" in capsys.readouterr().err
    assert main(["run", "--backend", "golden", "--collective", "broadcast", "--root", "9"]) == 2
    assert "--root 9" in capsys.readouterr().err


@pytest.mark.cocotb
@pytest.mark.parametrize("backend,lanes", [("verilator", 16), ("icarus", 2)])
def test_rtl_backend_reduces_on_the_alu_and_matches_golden(backend, lanes, tmp_path):
    out = tmp_path / "r.json"
    rc = main(["run", "--collective", "allreduce", "--topology", "bidir-ring:4", "--bytes", "3K",
               "--dtype", "bf16", "--backend", backend, "--lanes", str(lanes), "--seed", "5", "--quiet",
               "--json", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0 and r["mismatches"] == 0
    # Every rank reduces (P-1)/P of its payload, all of it on the ALU (beats are padded, hence >=).
    assert r["alu_beats"] >= 4 * 3 * 3072 // 4 // (4 * lanes)
    assert r["sim_cycles"] >= r["alu_beats"]
