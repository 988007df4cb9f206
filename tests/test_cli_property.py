"""The command line's contract over its argument space (hypothesis): every command line ends with exit status 0,
or with status 2 and a one-line error, never a traceback.

Precisely, for status 2 stderr is either exactly one line ``syncfabric <command>: error: <message>`` (the
commands' own checks), or argparse's usage error: ``usage:`` lines followed by one last line
``syncfabric ...: error: <message>``. Nothing escapes ``main`` but argparse's SystemExit.

No argument here may start a simulation: ``run`` draws only the golden backend, and ``bench COLLECTIVE`` runs
with the host API's System replaced by a stub that stops the command where a simulator would start (a
command line that gets there passed every check, and counts as accepted).
"""

import contextlib
import io
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncfabric.host.cli import main

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
_ERROR_LINE = re.compile(r"syncfabric( [\w-]+)*: error: \S.*")


class _WouldSimulate(Exception):
    """Raised by the stub System: the command line passed every check and would now start a simulator."""


def _call(argv):
    """(status, stdout, stderr) of ``syncfabric argv``; status None when it reached the stub System."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:          # argparse: --help is 0, a usage error 2
            status = exc.code
        except _WouldSimulate:
            status = None
    return status, out.getvalue(), err.getvalue()


def _check(argv, status, err):
    """The contract of the module docstring for one command line."""
    assert "Traceback" not in err, (argv, err)
    if status in (0, None):
        return
    assert status == 2, (argv, status, err)
    lines = err.splitlines()
    assert lines and _ERROR_LINE.fullmatch(lines[-1]), (argv, err)
    if len(lines) > 1:                     # argparse's usage error: the usage text, then the error line
        assert lines[0].startswith("usage: syncfabric"), (argv, err)
        assert all(not _ERROR_LINE.match(line) for line in lines[:-1]), (argv, err)
    else:
        assert err.endswith("\n") and err.count("\n") == 1, (argv, err)


def _opt(name, values):
    """``[name, value]`` a third of the time, else nothing (the default)."""
    return st.tuples(st.integers(0, 2), values).map(lambda t: [name, str(t[1])] if t[0] == 1 else [])


def _draw_options(draw, options, junk):
    """The options, each maybe; one time in eight also one of ``junk`` (values argparse's types refuse)."""
    argv = []
    for part in options:
        argv += draw(part)
    if draw(st.integers(0, 7)) == 1:
        argv += draw(st.sampled_from(junk))
    return argv


_INTS = st.integers(-3, 12)
_FLOATS = st.sampled_from(["0.5", "0.25", "1", "0", "-1", "1.5", "nan", "inf", "1e9"])
_SIZES = st.sampled_from(["4K", "64", "1K", "24K", "64KiB", "13", "0", "16G", "1T"])
_TOPOLOGIES = st.sampled_from(["ring:2", "ring:3", "bidir-ring:4", "torus:2x2x2", "torus:2x2", "switch:3", "switch:4",
                               "ring:0", "ring:1", "ring:99999", "torus:16x8x8", "mesh:4", "ring:x", ""])
_PATHS = st.sampled_from(["{tmp}/out.json", "{tmp}/missing/out.json", "{tmp}"])
_RUN_PATHS = st.sampled_from(["{tmp}/out.json", "-", "{tmp}/missing/out.json", "{tmp}"])     # run: '-' is stdout
_JUNK = [["--bytes", "4Q"], ["--bytes", "-1"], ["--seed", "x"], ["--root", "1.5"], ["--pause", "x"],
         ["--dtype", "int8"], ["--op", "prod"], ["--collective", "gather"], ["--npu-mem", "ram"],
         ["--threads", "0"], ["--engine", "nope=1"], ["--engine", "n_fsms=x"], ["--null-ranks", "a"],
         ["--partitions", "x"], ["--nope"]]


@st.composite
def _run_argv(draw):
    argv = [draw(st.sampled_from(["run", "demo"])), "--backend", "golden", "--quiet"]
    return argv + _draw_options(draw, (
        _opt("--collective", st.sampled_from(["allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast",
                                              "reduce", "barrier"])),
        _opt("--topology", _TOPOLOGIES),
        _opt("--bytes", _SIZES),
        _opt("--dtype", st.sampled_from(["fp32", "FP16", "bf16", "int32"])),
        _opt("--op", st.sampled_from(["sum", "max", "MIN"])),
        _opt("--root", _INTS),
        _opt("--null-ranks", st.sampled_from(["", "1", "0,2", "7"])),
        _opt("--chunk-bytes", st.sampled_from(["4K", "64", "64K", "100", "0", "auto", "max", "most"])),
        _opt("--seed", _INTS),
        _opt("--pause", _FLOATS),
        _opt("--algorithm", st.sampled_from(["ring", "direct", "nope"])),
        _opt("--threads", st.sampled_from(["auto", "1", "2"])),
        _opt("--engine", st.sampled_from(["n_fsms=4", "n_fsms=0"])),
        _opt("--json", _RUN_PATHS),
    ), _JUNK + [["--npu-mem", "hdl"], ["--partitions", "2"]])


@st.composite
def _bench_argv(draw):
    argv = ["bench", draw(st.sampled_from(["allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast",
                                           "reduce"])), "--quiet"]
    return argv + _draw_options(draw, (
        _opt("-b", _SIZES), _opt("-e", _SIZES), _opt("-f", _INTS), _opt("-n", _INTS), _opt("-w", _INTS),
        _opt("-r", _INTS), _opt("-d", st.sampled_from(["fp32", "int32"])), _opt("-o", st.sampled_from(["sum", "max"])),
        _opt("--topology", _TOPOLOGIES), _opt("--backend", st.sampled_from(["amaranth", "verilator", "icarus"])),
        _opt("--clock-mhz", _FLOATS), _opt("--latency", _INTS), _opt("--json", _PATHS),
        _opt("--system", st.sampled_from(["{tmp}/ring2.yaml", "{tmp}/binary.yaml", "{tmp}/missing.yaml", "{tmp}"])),
    ), [["-n", "x"], ["-b", "4Q"], ["-d", "int8"], ["-o", "prod"], ["--backend", "golden"], ["gather"]])


@st.composite
def _model_argv(draw):
    """perf and coarse subcommands that compute in a blink (no Dask sweeps, no RTL)."""
    which = draw(st.sampled_from(["rna", "sven", "iteration", "byteps", "coarse-profile", "coarse-byteps", "fig6",
                                  "fig9b", "fig12"]))
    if which == "sven":
        # always small scaling sizes: the default sweep up to 128 GPUs takes about 3 s
        argv = ["perf", "sven", "--out", "{tmp}/perf", "--quiet", "--scaling-npus", str(draw(st.integers(-2, 8)))] \
            + draw(_opt("--npus", _INTS)) + draw(_opt("--iterations", _INTS)) \
            + draw(_opt("--link-gbps", _FLOATS)) + draw(_opt("--seed", _INTS))
    elif which == "fig6":
        # one size and a few SMs: the defaults (2 sizes x 2 budgets x 12 SMs) take about 1.5 s
        argv = ["perf", "fig6", "--out", "{tmp}/perf", "--quiet", "--npus", "16"] \
            + draw(_opt("--max-sms", st.sampled_from(["0", "-1", "3", "x"]))) + draw(_opt("--mem-gbps", _FLOATS)) \
            + draw(_opt("--bytes", st.sampled_from(["1M", "13", "0", "-4", "x"])))
        if "--max-sms" not in argv:
            argv += ["--max-sms", "3"]
    elif which == "fig9b":
        argv = ["perf", "fig9b", "--out", "{tmp}/perf", "--quiet", "--npus", "16"] \
            + draw(_opt("--workload", st.sampled_from(["dlrm", "nope", "{tmp}/binary.yaml"]))) \
            + draw(_opt("--compute-efficiency", _FLOATS))
        if "--workload" not in argv:
            argv += ["--workload", "dlrm"]
    elif which == "fig12":
        argv = ["perf", "fig12", "--out", "{tmp}/perf", "--quiet"] \
            + draw(_opt("--npus", st.sampled_from(["16", "0", "17"]))) + draw(_opt("--side-sms", _INTS)) \
            + draw(_opt("--side-gbps", _FLOATS)) + draw(_opt("--compute-efficiency", _FLOATS))
        if "--npus" not in argv:
            argv += ["--npus", "16"]
    elif which == "rna":
        argv = ["perf", "rna", "--out", "{tmp}/perf", "--quiet"] + draw(_opt("--ranks", _INTS)) \
            + draw(_opt("--seed", _INTS))
    elif which == "iteration":
        argv = ["perf", "iteration"] + draw(_opt("--npus", st.sampled_from(["16", "0", "-4", "17"]))) \
            + draw(_opt("--compute-efficiency", _FLOATS)) + draw(_opt("--batch", _INTS)) \
            + draw(_opt("--compute", st.sampled_from(["paper", "roofline"]))) \
            + draw(_opt("--workload", st.sampled_from(["gnmt", "nope", "{tmp}/binary.yaml"]))) \
            + draw(_opt("--json", _PATHS))
        if "--npus" not in argv:
            argv += ["--npus", "16"]
    elif which == "byteps":
        # always small: the defaults (32 machines, k up to 40) take about 2 s
        argv = ["perf", "byteps", "--out", "{tmp}/perf", "--quiet", "--n", str(draw(st.integers(-2, 8))),
                "--kmax", str(draw(st.integers(-2, 8)))]
    elif which == "coarse-profile":
        argv = ["coarse", "profile"] + draw(_opt("--devices", _INTS)) + draw(_opt("--client", _INTS)) \
            + draw(_opt("--profile", st.sampled_from(["all", "v100", "p100"])))
    else:
        argv = ["coarse", "byteps"] + draw(_opt("--n", _INTS)) + draw(_opt("--k", _INTS)) \
            + draw(_opt("--model-bytes", _FLOATS)) + draw(_opt("--bandwidth", _FLOATS))
    if draw(st.integers(0, 7)) == 1:
        argv += draw(st.sampled_from([["--nope"], ["--seed", "x"], ["--compute", "magic"], ["--profile", "x"]]))
    return argv


@pytest.fixture
def tmp(tmp_path):
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00\x01binary")
    (tmp_path / "ring2.yaml").write_text("topology: ring:2\n")
    return str(tmp_path)


def _resolve(argv, tmp):
    return [a.replace("{tmp}", tmp) for a in argv]


@SETTINGS
@given(argv=_run_argv())
def test_run_on_the_golden_backend_exits_0_or_with_one_error_line(tmp, argv):
    """`syncfabric run`/`demo --backend golden` over collectives, topologies (also empty, unbounded and
    unknown ones), sizes, types, ops, roots, null ranks, chunks, output paths and the engine-only options."""
    argv = _resolve(argv, tmp)
    status, _, err = _call(argv)
    _check(argv, status, err)


@SETTINGS
@given(argv=_bench_argv())
def test_bench_checks_its_arguments_before_a_simulator_starts(tmp, argv, monkeypatch):
    """`syncfabric bench COLLECTIVE` over sizes, factors, run counts, roots, types, systems and output paths:
    an error line, or the point where the (stubbed) system would start simulating."""
    import syncfabric.host.system as system_mod

    def stub(*args, **kwargs):
        raise _WouldSimulate

    monkeypatch.setattr(system_mod, "System", stub)
    argv = _resolve(argv, tmp)
    status, out, err = _call(argv)
    _check(argv, status, err)
    assert status != 0, (argv, out)        # a sweep that printed a table without simulating would be a bug


@SETTINGS
@given(argv=_model_argv())
def test_perf_and_coarse_models_exit_0_or_with_one_error_line(tmp, argv):
    """`perf rna`, `perf sven`, `perf iteration`, `perf byteps`, `perf fig6`/`fig9b`/`fig12`, `coarse profile`
    and `coarse byteps` over their numeric parameters (zero, negative, NaN, infinite), clients, workloads and
    output paths."""
    argv = _resolve(argv, tmp)
    status, _, err = _call(argv)
    _check(argv, status, err)
