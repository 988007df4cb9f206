"""`syncfabric run`: argument checking, the golden backend and the ALU-RTL backend end to end."""

import json

import pytest

from syncfabric.host.cli import main, parse_size
from syncfabric.host.run import job_spec, run_collective
from syncfabric.sim.perf.calibrate import predict_cycles


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


def test_engine_backends_refuse_what_the_engine_does_not_run(capsys):
    assert main(["run", "--backend", "golden", "--collective", "allgather", "--null-ranks", "1"]) == 2
    assert "--null-ranks" in capsys.readouterr().err
    assert main(["run", "--backend", "golden", "--null-ranks", "7"]) == 2
    assert "not ranks of ring:4" in capsys.readouterr().err
    assert main(["run", "--config", "small", "--topology", "ring:2", "--chunk-bytes", "4K"]) == 2
    assert "exceeds what this engine runs" in capsys.readouterr().err
    assert main(["run", "--pause", "1.5", "--backend", "icarus"]) == 2
    with pytest.raises(ValueError, match="--sram-split 'bytes': expected one of residence, ace"):
        run_collective(sram_split="bytes", backend="verilator")


def test_run_refuses_sizes_and_systems_the_golden_check_cannot_hold(capsys):
    """`--bytes` beyond 256 MiB over all endpoints (16G was a MemoryError traceback) and topologies beyond the
    512 ranks programs address (ring:99999 ran unbounded) end in one error line naming the value and the
    limit, on the command line and in the Python API; the limits themselves are accepted."""
    from syncfabric.host.run import MAX_NPUS, MAX_TOTAL_BYTES

    assert main(["run", "--backend", "golden", "--bytes", "16G", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bytes 17179869184" in err and "256 MiB" in err
    assert main(["run", "--backend", "golden", "--topology", "ring:99999", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ring:99999 has 99999 endpoints" in err and "at most 512" in err
    with pytest.raises(ValueError, match="at most 512 ranks"):
        run_collective("allreduce", "torus:16x8x8", 4096, backend="golden")
    with pytest.raises(ValueError, match="256 MiB"):
        job_spec("allgather", "ring:2", MAX_TOTAL_BYTES // 2 + 64, "fp32", "sum")
    assert job_spec("allgather", "ring:2", MAX_TOTAL_BYTES // 2, "fp32", "sum")["count"] == MAX_TOTAL_BYTES // 16
    assert job_spec("allreduce", f"switch:{MAX_NPUS}", 4096, "fp32", "sum")["npus"] == MAX_NPUS
    assert main(["run", "--backend", "golden", "--collective", "barrier", "--bytes", "16G", "--quiet"]) == 0


def test_op_is_refused_on_collectives_that_do_not_reduce(capsys):
    """A non-default `--op` on all-gather, all-to-all, broadcast or barrier (silently ignored before) is an
    error naming the op and the collectives that reduce; the reducing ones take it."""
    for coll in ("allgather", "alltoall", "broadcast", "barrier"):
        assert main(["run", "--backend", "golden", "--collective", coll, "--op", "max", "--bytes", "4K",
                     "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == f"syncfabric run: error: --op max: {coll} does not reduce; --op applies to allreduce, " \
                      f"reduce_scatter, reduce\n"
    with pytest.raises(ValueError, match="does not reduce"):
        run_collective("broadcast", "ring:2", 4096, "fp32", "min", backend="golden")
    assert main(["run", "--backend", "golden", "--collective", "reduce", "--op", "max", "--bytes", "4K",
                 "--quiet"]) == 0


def test_root_outside_the_topology_is_refused_before_an_engine_backend_builds(capsys, monkeypatch):
    """`--root 9` on ring:4 used to reach the RTL (2048 mismatches): every backend now refuses it while
    checking the job, before anything is built or simulated (the engine runner here fails the test if
    called)."""
    import syncfabric.host.run as run_mod

    def no_engine(*args, **kwargs):
        raise AssertionError("an engine simulation was started")

    monkeypatch.setattr(run_mod, "_run_engine", no_engine)
    for backend in ("verilator", "icarus", "amaranth", "golden"):
        for coll in ("broadcast", "reduce"):
            assert main(["run", "--backend", backend, "--topology", "ring:4", "--collective", coll, "--root", "9",
                         "--threads", "1", "--quiet"]) == 2
            assert capsys.readouterr().err == "syncfabric run: error: --root 9 is not a rank of ring:4 (0..3)\n"


def test_json_output_in_a_missing_directory_is_refused_before_the_run(capsys, tmp_path):
    """`--json missing_dir/out.json` crashed after the run (FileNotFoundError); it is now refused first, as is
    a directory given as the file, and a writable path still gets the result. `bench` and `perf iteration`
    check their --json the same way before they start anything."""
    missing = tmp_path / "missing_dir" / "out.json"
    assert main(["run", "--backend", "golden", "--bytes", "4K", "--quiet", "--json", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"the directory {missing.parent} does not exist" in err
    assert main(["run", "--backend", "golden", "--bytes", "4K", "--quiet", "--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["run", "--backend", "golden", "--bytes", "4K", "--quiet", "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["mismatches"] == 0
    capsys.readouterr()
    for cmd in (["bench", "allreduce", "--quiet"], ["perf", "iteration", "--npus", "16"]):
        assert main([*cmd, "--json", str(missing)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"syncfabric {cmd[0]}")
        assert f"--json {missing}: the directory {missing.parent} does not exist" in err


def test_bound_is_the_busiest_link_at_its_rate():
    from syncfabric.hdl.system.top import link_params
    from syncfabric.host.run import bandwidth_cycles, bound_cycles, run_golden

    spec = job_spec("allreduce", "ring:4", 1 << 16, "fp32", "sum", chunk_bytes=4096)
    golden = run_golden(spec)
    links = link_params("ring:4", 10, None)
    assert bandwidth_cycles(golden, links, 16) == pytest.approx(2 * 3 / 4 * (1 << 16) / 16)
    assert bound_cycles(golden, links, 16) == pytest.approx(2 * 3 / 4 * (1 << 16) / 16 + 10)
    assert bandwidth_cycles(golden, link_params("ring:4", 10, 0.5), 16) == pytest.approx(2 * 3 / 4 * (1 << 16) / 8)
    bidir = run_golden(job_spec("allreduce", "bidir-ring:4", 1 << 16, "fp32", "sum", chunk_bytes=4096))
    assert bandwidth_cycles(bidir, link_params("bidir-ring:4", 10, None), 16) == pytest.approx(3 / 4 * (1 << 16) / 16)


@pytest.mark.cocotb
@pytest.mark.parametrize("backend", ["verilator", "icarus"])
def test_run_drives_the_engine_rtl_and_reports_cycles_and_traffic(backend, tmp_path):
    """`syncfabric run` on the small engine: every byte matches, each NPU's memory is read and written
    exactly once per byte, the cycles are no better than the link-bandwidth bound."""
    out = tmp_path / "r.json"
    rc = main(["run", "--collective", "allreduce", "--topology", "bidir-ring:4", "--bytes", "3K",
               "--dtype", "bf16", "--backend", backend, "--config", "small", "--latency", "4", "--seed", "5",
               "--quiet", "--json", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0 and r["mismatches"] == 0 and r["status"] == ["OK"] * 4
    assert r["mem_read_bytes"] == [3072] * 4 and r["mem_write_bytes"] == [3072] * 4
    assert r["golden_mem_read_bytes"] == r["mem_read_bytes"]
    assert r["desc_read_bytes"] == [64] * 4 and r["cpl_write_bytes"] == [32] * 4
    # every link carries (P-1)/P of its direction's half: 2 * 3/4 * 1536 B = 2304 B = 144 16-byte flits
    assert r["busiest_link_bytes"] == 2304 and r["bound_cycles"] == pytest.approx(144 + 4)
    assert r["cycles"] >= r["bound_cycles"] and 0 < r["link_efficiency"] <= 1
    # the performance model's figures for the same job, beside the RTL's
    m = r["model"]
    assert m["cycles"] == round(predict_cycles("small", "allreduce", "bidir-ring:4", 3072, latency=4,
                                               chunk_bytes=r["chunk_bytes"]))
    assert len(m["phase_busy"]) == len(r["phases"]) and 0 < m["phase_busy"][0] < m["cycles"]


@pytest.mark.cocotb
@pytest.mark.parametrize("backend", ["verilator", "icarus"])
def test_run_with_hdl_npu_memory_matches_golden_through_the_back_door(backend, tmp_path):
    """`syncfabric run --npu-mem hdl`: the NPU memories are HDL RAMs inside the system (with AXI stalls from
    --pause), loaded and read through the back door; every byte matches and each memory is read and written
    exactly once per byte, as with the cocotbext-axi models."""
    out = tmp_path / "r.json"
    rc = main(["run", "--collective", "allreduce", "--topology", "ring:2", "--bytes", "4K", "--backend", backend,
               "--config", "small", "--pause", "0.2", "--npu-mem", "hdl", "--quiet", "--json", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0 and r["mismatches"] == 0 and r["status"] == ["OK"] * 2
    assert r["mem_read_bytes"] == [4096] * 2 and r["mem_write_bytes"] == [4096] * 2


@pytest.mark.cocotb
def test_two_verilator_threads_simulate_the_same_cycles_and_bytes_as_one(tmp_path):
    """`--threads 2` (a multithreaded Verilator model) runs the collective to the same cycle, counters,
    memory traffic and statuses as one thread, every byte checked; only the wall-clock figures differ."""
    runs = {}
    for threads in ("1", "2"):
        out = tmp_path / f"r{threads}.json"
        rc = main(["run", "--collective", "allreduce", "--topology", "ring:2", "--bytes", "4K", "--backend",
                   "verilator", "--config", "small", "--pause", "0.2", "--npu-mem", "hdl", "--threads", threads,
                   "--quiet", "--json", str(out)])
        runs[threads] = json.loads(out.read_text())
        assert rc == 0 and runs[threads]["mismatches"] == 0 and runs[threads]["threads"] == int(threads)
    wall = {"wall_s", "build_s", "sim_cycles_per_s", "npus_x_cycles_per_s", "sim_wall_s", "threads"}
    assert {k: v for k, v in runs["1"].items() if k not in wall} == {k: v for k, v in runs["2"].items()
                                                                     if k not in wall}
    with pytest.raises(SystemExit) as refused:     # argparse's usage error, before anything is built
        main(["run", "--backend", "verilator", "--threads", "0"])
    assert refused.value.code == 2
