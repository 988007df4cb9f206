"""The simulation harness: conversion cache, both simulators, parameters, failure reporting."""

from pathlib import Path

import pytest

from syncfabric.host.transports.harness import icarus_fixup, run_cocotb, simulators, verilog_for
from syncfabric.tb.smoke import Counter

SIMS = ["verilator", "icarus"]


@pytest.mark.cocotb
@pytest.mark.parametrize("sim", SIMS)
def test_harness_runs_testbench_with_params(sim):
    assert sim in simulators(), f"{sim} is not installed: run `make setup`"
    summary = run_cocotb(Counter, {"width": 4}, toplevel="counter", test_module="syncfabric.tb.smoke",
                         sim=sim, tb_params={"cycles": 21}, testcase="counts_enabled_cycles")
    assert summary["tests"] == 1


@pytest.mark.cocotb
def test_verilator_build_is_shared_by_every_run_of_a_design():
    """Two runs of one design in different run directories use one Verilator build: the second one finds
    it built and leaves the simulator executable untouched."""
    kw = dict(toplevel="counter", test_module="syncfabric.tb.smoke", sim="verilator",
              tb_params={"cycles": 9}, testcase="counts_enabled_cycles")
    a = run_cocotb(Counter, {"width": 6}, build_tag="harness-shared-a", **kw)
    exe = Path(a["build_dir"]) / "counter"
    stamp = exe.stat().st_mtime_ns
    b = run_cocotb(Counter, {"width": 6}, build_tag="harness-shared-b", **kw)
    assert a["build_dir"] == b["build_dir"] and a["run_dir"] != b["run_dir"]
    assert exe.stat().st_mtime_ns == stamp


@pytest.mark.cocotb
def test_harness_reports_failing_cocotb_test():
    with pytest.raises(AssertionError, match="1 of 2 cocotb tests failed"):
        run_cocotb(Counter, {"width": 4}, toplevel="counter", test_module="syncfabric.tb.smoke",
                   sim="icarus", tb_params={"cycles": 3, "expect_failure": True})


def test_verilog_cache_reuses_conversion(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path))
    calls = []

    def factory(width):
        calls.append(width)
        return Counter(width)

    a = verilog_for(factory, {"width": 5}, "counter")
    b = verilog_for(factory, {"width": 5}, "counter")
    c = verilog_for(factory, {"width": 6}, "counter")
    assert a == b and a != c and calls == [5, 6]
    assert "module counter" in a.read_text()


def test_unknown_simulator_is_rejected():
    with pytest.raises(ValueError, match="not supported"):
        run_cocotb(Counter, {}, toplevel="counter", test_module="syncfabric.tb.smoke", sim="questa")


def test_icarus_fixup_runs_every_combinational_block_at_time_zero():
    """Yosys's three kinds of combinational block as Icarus sees them: one with its dummy read (the kick
    register gets an event at #0), one that assigns a constant (an initial assignment), and a one-statement
    block driving part of a vector (a struct port driven field by field): it gets an ``initial #0`` copy, so
    the field is right even when its source never changes (the deposit unit's command index staying 0 left
    ``arrived.cmd`` X and hung the asynchronous all-to-all on Icarus). Multi-statement blocks are left alone."""
    text = (
        "  reg \\$auto$verilog_backend.cc:2355:dump_module$1  = 0;\n"
        "  always @* begin\n    if (\\$auto$verilog_backend.cc:2355:dump_module$1 ) begin end\n"
        "    a = b;\n  end\n"
        "  always @*\n    k[1:0] = 2'h3;\n"
        "  always @*\n    fill[3:1] = op_e;\n"
        "  always @*\n    arrive[2:1] = geo_cmd;\n"
    )
    out = icarus_fixup(text)
    assert "initial #0 \\$auto$verilog_backend.cc:2355:dump_module$1 = 1'b1;" in out
    assert "initial\n    k[1:0] = 2'h3;" in out
    for stmt in ("fill[3:1] = op_e;", "arrive[2:1] = geo_cmd;"):
        assert f"always @*\n    {stmt}\n  initial #0 {stmt}\n" in out
    assert out.count("initial #0") == 3 and "initial #0 a = b;" not in out


@pytest.mark.cocotb
def test_an_interrupted_verilator_build_leaves_nothing_behind(tmp_path, monkeypatch):
    """A Verilator build killed half way (here: interrupted after it wrote part of its objects and a partial
    executable) leaves no objects, executable or done-marker in the build directory, so the next run builds
    afresh and passes instead of tripping over the remains."""
    import subprocess
    from syncfabric.host.transports import harness

    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path))
    real_run = subprocess.run

    def killed(cmd, **kw):
        obj, exe = Path(cmd[cmd.index("-Mdir") + 1]), Path(cmd[cmd.index("-o") + 1])
        obj.mkdir()
        (obj / "Vtop.mk").write_text("half written\n")
        exe.write_bytes(b"\x7fELF partial")
        raise KeyboardInterrupt

    kw = dict(toplevel="counter", test_module="syncfabric.tb.smoke", sim="verilator",
              tb_params={"cycles": 5}, testcase="counts_enabled_cycles", build_tag="harness-interrupted")
    monkeypatch.setattr(harness.subprocess, "run", killed)
    with pytest.raises(KeyboardInterrupt):
        run_cocotb(Counter, {"width": 5}, **kw)
    [build_dir] = [d for d in (tmp_path / "verilator").iterdir() if d.is_dir()]
    assert not any((build_dir / name).exists() for name in ("built", "obj", "counter"))
    monkeypatch.setattr(harness.subprocess, "run", real_run)
    assert run_cocotb(Counter, {"width": 5}, **kw)["tests"] == 1
    assert (build_dir / "built").exists() and not (build_dir / "building").exists()


@pytest.mark.cocotb
def test_a_build_in_use_is_not_pruned_and_a_pruned_build_is_made_again(tmp_path, monkeypatch):
    """With room for no builds, pruning still leaves a build alone while a run holds it (its shared lock, kept
    in a file beside the build directory), removes it once released, and the next run builds it afresh. The
    lock file outlives the directory: the removed-and-remade directory keeps one lock, so two processes cannot
    both think they hold it alone (a race that let one pytest worker delete another's build in progress)."""
    from syncfabric.host.transports import harness

    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path))
    monkeypatch.setenv("SYNCFABRIC_VERILATOR_KEEP", "0")
    verilog = verilog_for(Counter, {"width": 7}, "counter")
    build_dir, lock = harness._verilator_build(verilog, "counter", False, ())
    root = build_dir.parent
    with lock:
        harness._prune_verilator_builds(root)
        assert (build_dir / "built").exists() and (build_dir / "counter").exists()
    harness._prune_verilator_builds(root)
    assert not build_dir.exists() and harness._lock_file(build_dir).exists()
    summary = run_cocotb(Counter, {"width": 7}, toplevel="counter", test_module="syncfabric.tb.smoke",
                         sim="verilator", tb_params={"cycles": 5}, testcase="counts_enabled_cycles",
                         build_tag="harness-pruned")
    assert summary["build_dir"] == str(build_dir) and summary["tests"] == 1


def test_builds_too_large_for_half_the_memory_run_one_at_a_time(tmp_path, monkeypatch):
    """A build whose Verilog may need more than half the machine's memory holds a machine-wide lock while it
    builds: a second one waits (its build log says for what) until the first is over; a small build takes no
    lock."""
    import io
    import threading
    import time
    from syncfabric.host.transports import harness

    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path))
    monkeypatch.setattr(harness, "_machine_memory", lambda: 2 * 200 * 1000)    # half: 1,000 bytes of Verilog
    assert harness._large_build_slot(1000).file is None
    order, log = [], io.StringIO()

    def second():
        with harness._large_build_slot(1001, log):
            order.append("second")

    with harness._large_build_slot(1001):
        t = threading.Thread(target=second)
        t.start()
        for _ in range(500):
            if log.getvalue():
                break
            time.sleep(0.01)
        assert "waiting for another large Verilator build" in log.getvalue()
        order.append("first")
    t.join(30)
    assert order == ["first", "second"]


def test_a_build_removed_or_remade_since_the_listing_is_left_alone(tmp_path):
    """Every run prunes, so two processes can list the same stale build: the one that gets its lock second
    finds it gone (CI once failed on the FileNotFoundError) or made again by a run in between (fresh, kept).
    Only a build still as listed is removed, its ``built`` marker first."""
    from syncfabric.host.transports import harness

    old, fresh = tmp_path / "top-old", tmp_path / "top-fresh"
    for d in (old, fresh):
        d.mkdir()
        (d / "built").write_text("flags")
        (d / "top").write_text("model")
    listed_old = (old / "built").stat().st_mtime
    listed_fresh = (fresh / "built").stat().st_mtime - 5      # remade since it was listed
    assert not harness._remove_build(tmp_path / "top-gone", listed_old)
    assert not harness._remove_build(fresh, listed_fresh) and (fresh / "top").exists()
    with harness._locked(old):                 # in use
        assert not harness._remove_build(old, listed_old) and (old / "built").exists()
    assert harness._remove_build(old, listed_old) and not old.exists()
    assert not harness._remove_build(old, listed_old)       # the second pruner


def test_verilator_threads_resolve_from_the_argument_the_environment_and_the_cores(monkeypatch):
    """An explicit count is taken as given; "auto" is $SYNCFABRIC_VERILATOR_THREADS when set, else the
    process's cores less the load average, divided among the processes sharing them, at least 1 and at most
    AUTO_THREADS_MAX;
    anything else is refused with the value in the message."""
    from syncfabric.host.transports import harness

    monkeypatch.delenv(harness.THREADS_ENV, raising=False)
    monkeypatch.setattr(harness.os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    monkeypatch.setattr(harness.os, "getloadavg", lambda: (0.3, 0.2, 0.1), raising=False)
    assert harness.verilator_threads(3) == 3 and harness.verilator_threads("2") == 2
    assert harness.verilator_threads("auto") == harness.AUTO_THREADS_MAX == 4
    assert harness.verilator_threads(None, share=2) == 3 and harness.verilator_threads("auto", share=8) == 1
    # other work on 3.6 of the 6 cores leaves 2; more load than cores leaves 1
    monkeypatch.setattr(harness.os, "getloadavg", lambda: (3.6, 2.0, 1.0), raising=False)
    assert harness.verilator_threads("auto") == 2 and harness.verilator_threads("auto", share=2) == 1
    monkeypatch.setattr(harness.os, "getloadavg", lambda: (9.0, 9.0, 9.0), raising=False)
    assert harness.verilator_threads("auto") == 1
    monkeypatch.setenv(harness.THREADS_ENV, "1")
    assert harness.verilator_threads("auto", share=1) == 1 and harness.verilator_threads(2) == 2
    for bad in (0, -1, 1.5, True, "x", "2.0", ""):
        with pytest.raises(ValueError, match="whole number"):
            harness.verilator_threads(bad)
    monkeypatch.setenv(harness.THREADS_ENV, "many")
    with pytest.raises(ValueError, match="SYNCFABRIC_VERILATOR_THREADS='many'"):
        harness.verilator_threads("auto")


@pytest.mark.cocotb
def test_a_multithreaded_verilator_model_is_a_build_of_its_own():
    """threads=2 builds the design with ``--threads 2`` in a directory of its own (the single-threaded build
    stays as it is) and runs the same test to the same result; Icarus ignores the count."""
    kw = dict(toplevel="counter", test_module="syncfabric.tb.smoke", tb_params={"cycles": 13},
              testcase="counts_enabled_cycles")
    one = run_cocotb(Counter, {"width": 7}, sim="verilator", build_tag="harness-threads-1", **kw)
    two = run_cocotb(Counter, {"width": 7}, sim="verilator", build_tag="harness-threads-2", threads=2, **kw)
    assert (one["threads"], two["threads"]) == (1, 2) and one["build_dir"] != two["build_dir"]
    assert "--threads 2" in (Path(two["build_dir"]) / "built").read_text()
    assert "--threads" not in (Path(one["build_dir"]) / "built").read_text()
    assert run_cocotb(Counter, {"width": 7}, sim="icarus", threads=2, **kw)["threads"] == 1


def test_a_design_is_split_into_its_blocks_modules_and_the_rest():
    """A block is its module and every ``\\block.*`` submodule, with the attribute lines before each; the
    rest keeps the other modules (a module whose name only starts like the block's stays there); a block
    the text does not hold is refused."""
    from syncfabric.host.transports.verilator_blocks import split_blocks

    text = ("/* header */\n\n(* top = 1 *)\nmodule top(a);\n  eng u (.a(a));\nendmodule\n\n"
            "(* generator = \"Amaranth\" *)\nmodule eng(a);\n  \\eng.sub s ();\nendmodule\n\n"
            "module \\eng.sub (b);\nendmodule\n\nmodule engine2(c);\nendmodule\n")
    rest, blocks = split_blocks(text, ("eng",))
    assert blocks["eng"] == ("\n(* generator = \"Amaranth\" *)\nmodule eng(a);\n  \\eng.sub s ();\nendmodule\n"
                             "\nmodule \\eng.sub (b);\nendmodule\n")
    assert rest == "/* header */\n\n(* top = 1 *)\nmodule top(a);\n  eng u (.a(a));\nendmodule\n" \
                   "\nmodule engine2(c);\nendmodule\n"
    assert rest + blocks["eng"] != text and sorted(rest + blocks["eng"]) == sorted(text)
    with pytest.raises(ValueError, match="'missing' is not a module"):
        split_blocks(text, ("missing",))


def test_a_block_key_names_the_verilator_version_not_its_path(tmp_path, monkeypatch):
    """Two clones' Verilators of one version give a block the same key (the cache is shared across clones);
    another version, text or flag gives another key; the default cache is the user's, ``build`` the build
    root's."""
    from syncfabric.host.transports.verilator_blocks import block_cache, block_key

    def tool(name, version):
        path = tmp_path / name / "verilator"
        path.parent.mkdir()
        path.write_text(f"#!/bin/sh\necho 'Verilator {version} 2025-01-01'\n")
        path.chmod(0o755)
        return str(path)

    args = ["-Wno-fatal", "--hierarchical"]
    one, two, other = tool("clone1", "5.036"), tool("clone2", "5.036"), tool("clone3", "5.040")
    key = block_key("eng", "module eng; endmodule", "cfg", args, "OPT_FAST=-O1", one)
    assert block_key("eng", "module eng; endmodule", "cfg", args, "OPT_FAST=-O1", two) == key
    assert block_key("eng", "module eng; endmodule", "cfg", args, "OPT_FAST=-O1", other) != key
    assert block_key("eng", "module eng; endmodule ", "cfg", args, "OPT_FAST=-O1", one) != key
    assert block_key("eng", "module eng; endmodule", "cfg", args, "OPT_FAST=-O2", one) != key
    monkeypatch.delenv("SYNCFABRIC_BLOCK_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert block_cache() == tmp_path / "cache" / "syncfabric" / "verilator-blocks"
    monkeypatch.setenv("SYNCFABRIC_BLOCK_CACHE", "build")
    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path / "b"))
    assert block_cache() == tmp_path / "b" / "verilator" / "blocks"


@pytest.mark.cocotb
def test_a_hierarchical_block_is_built_once_for_every_design_that_holds_it(tmp_path, monkeypatch):
    """Two designs that differ only outside their block ``counter`` build the block once (one directory in the
    block cache, one Verilation in its log) and both run right; another build root (a second clone) links the
    same block instead of building it again; a block of other content is a build of its own; Verilator's own
    ``--hierarchical`` flow (``SYNCFABRIC_SHARED_BLOCKS=0``) runs the same test to the same result without the
    block cache."""
    from syncfabric.tb.smoke import counter_top_verilog

    blocks = tmp_path / "blocks"
    monkeypatch.setenv("SYNCFABRIC_BLOCK_CACHE", str(blocks))
    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path / "clone1"))
    kw = dict(toplevel="counter_top", test_module="syncfabric.tb.smoke", sim="verilator",
              tb_params={"cycles": 11}, testcase="counts_enabled_cycles", hier_blocks=("counter",))
    a = run_cocotb(counter_top_verilog, {"width": 6, "spare": 2}, build_tag="blocks-a", **kw)
    b = run_cocotb(counter_top_verilog, {"width": 6, "spare": 3}, build_tag="blocks-b", **kw)
    assert a["tests"] == b["tests"] == 1 and a["build_dir"] != b["build_dir"]
    [block] = [d for d in blocks.iterdir() if d.is_dir()]
    assert (block / "built").exists() and (block / "obj" / "libcounter.a").exists()
    lib = (block / "obj" / "libcounter.a").stat()
    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path / "clone2"))
    e = run_cocotb(counter_top_verilog, {"width": 6, "spare": 2}, build_tag="blocks-e", **kw)
    assert e["tests"] == 1 and str(tmp_path / "clone2") in e["build_dir"]
    again = (block / "obj" / "libcounter.a").stat()       # not built again: the same library file
    assert [d for d in blocks.iterdir() if d.is_dir()] == [block]
    assert (again.st_ino, again.st_mtime_ns) == (lib.st_ino, lib.st_mtime_ns)
    for build in (a, b, e):
        log = (Path(build["build_dir"]) / "build.log").read_text()
        assert f"block counter: {block}" in log
        assert "module counter(" not in (Path(build["build_dir"]) / "counter_top.top.v").read_text()
    c = run_cocotb(counter_top_verilog, {"width": 5, "spare": 2}, build_tag="blocks-c", **kw)
    assert c["tests"] == 1 and len([d for d in blocks.iterdir() if d.is_dir()]) == 2
    monkeypatch.setenv("SYNCFABRIC_BLOCK_CACHE", "build")
    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path / "local"))
    f = run_cocotb(counter_top_verilog, {"width": 6, "spare": 2}, build_tag="blocks-f", **kw)
    assert f["tests"] == 1 and f"block counter: {tmp_path / 'local' / 'verilator' / 'blocks'}" in \
        (Path(f["build_dir"]) / "build.log").read_text()
    monkeypatch.setenv("SYNCFABRIC_SHARED_BLOCKS", "0")
    monkeypatch.setenv("SYNCFABRIC_BUILD", str(tmp_path / "plain"))
    d = run_cocotb(counter_top_verilog, {"width": 6, "spare": 2}, build_tag="blocks-d", **kw)
    assert d["tests"] == 1 and not (tmp_path / "plain" / "verilator" / "blocks").exists()
    assert (Path(d["build_dir"]) / "obj" / "Vcounter").is_dir()


@pytest.mark.cocotb
def test_a_log_file_in_a_directory_not_made_yet_is_written(tmp_path):
    """The simulator's output goes to ``log_file`` even when its directory does not exist yet (a partitioned
    run's logs sit beside the one-process run's, whose run directory may never have been made)."""
    log = tmp_path / "not" / "made" / "sim-p0.log"
    summary = run_cocotb(Counter, {"width": 4}, toplevel="counter", test_module="syncfabric.tb.smoke",
                         sim="icarus", tb_params={"cycles": 6}, testcase="counts_enabled_cycles", log_file=log)
    assert summary["tests"] == 1 and "counts_enabled_cycles" in log.read_text()


def test_an_assertion_without_a_message_is_reported_with_where_it_failed(monkeypatch):
    """A design check that asserts without a message (Amaranth's own, deep in a conversion) is reported by
    the system runner with the frames where it failed, not as an empty error."""
    from syncfabric.hdl.ace.config import AceConfig
    from syncfabric.host.transports import harness
    from syncfabric.host.transports.ace import run_system

    def converting_fails(*args, **kwargs):
        raise AssertionError()          # what a bare ``assert`` outside the test modules raises

    monkeypatch.setattr(harness, "run_cocotb", converting_fails)
    out = run_system(AceConfig.profile("small"), "ring:2", [], npu_mem=None, check=False)
    assert out["error"].startswith("AssertionError at") and "converting_fails" in out["error"], out["error"]
    with pytest.raises(AssertionError):
        run_system(AceConfig.profile("small"), "ring:2", [], npu_mem=None)
