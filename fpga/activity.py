"""Switching activity of a real collective, for the power figures.

:func:`collective_activity` runs a ring all-reduce on two engines in Amaranth's simulator (the same system and
driver flow as ``syncfabric run --backend amaranth``, every byte checked against the golden model), writes a
VCD, and :func:`vcd_toggles` counts every signal's bit toggles. The result gives, per module of endpoint 0's
engine (a dotted path below the engine, ``""`` for the engine's own signals), the toggle density: bit toggles
per bit per clock cycle, the quantity OpenSTA calls activity. It also counts the chunk SRAM's reads and writes
per cycle (its clients' ``en`` bits), which drive the SRAM power model.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Activity", "vcd_toggles", "collective_activity"]


@dataclass
class Activity:
    """Toggle counts of one simulation: ``scopes[path] = (bit toggles, bits)``, ``cycles`` simulated,
    ``sram_reads``/``sram_writes`` chunk-SRAM accesses (beats) and what ran (``job``)."""

    cycles: int
    scopes: dict = field(default_factory=dict)
    ports: tuple = (0, 0)
    sram_reads: int = 0
    sram_writes: int = 0
    job: str = ""
    passed: bool = False

    def density(self, paths):
        """Mean toggle density over the scopes ``paths`` (an iterable of module paths)."""
        t = b = 0
        for p in paths:
            if p in self.scopes:
                t += self.scopes[p][0]
                b += self.scopes[p][1]
        return t / (b * self.cycles) if b and self.cycles else 0.0

    @property
    def input_density(self):
        """Mean toggle density of the engine's ports (the inputs of the power analysis)."""
        t, b = self.ports
        return t / (b * self.cycles) if b and self.cycles else 0.0

    def as_dict(self):
        return {"cycles": self.cycles, "job": self.job, "passed": self.passed,
                "input_density": self.input_density, "sram_reads_per_cycle": self.sram_reads / max(1, self.cycles),
                "sram_writes_per_cycle": self.sram_writes / max(1, self.cycles)}


_SKIP = re.compile(r"^(clk|rst)$")


def vcd_toggles(path, root, period_s):
    """Parse the VCD at ``path``; return an :class:`Activity` of the scope ``root`` (a dotted path such as
    ``top.ep0``): toggles per sub-scope, its ports' toggles (the variables directly in ``root``), and the
    chunk SRAM's accesses (``en`` fields of the ``datapath.sram`` scope's ``rd``/``wr`` clients)."""
    ids = {}            # id -> list of (scope, name, width)
    scope = []
    last = {}
    counts = {}         # (scope, name) -> toggles
    widths = {}
    en_ids = {}         # id -> ("rd"|"wr", bit positions of en)
    t_end = 0
    unit_s = 1e-12
    units = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15}
    with open(path) as f:
        for line in f:
            if line.startswith("$enddefinitions"):
                break
            parts = line.split()
            if parts and parts[0] == "$timescale":
                m = re.match(r"\$timescale\s+(\d+)\s*(\w+)", line)
                unit_s = int(m.group(1)) * units[m.group(2)]
            if not parts:
                continue
            if parts[0] == "$scope":
                scope.append(parts[2])
            elif parts[0] == "$upscope":
                scope.pop()
            elif parts[0] == "$var":
                width, ident, name = int(parts[2]), parts[3], parts[4].lstrip("\\")
                sc = ".".join(scope)
                ids.setdefault(ident, []).append((sc, name, width))
                widths[(sc, name)] = width
        period_ps = round(period_s / unit_s)     # the period in VCD time units
        sram_scope = f"{root}.datapath.sram"
        for ident, uses in ids.items():
            for sc, name, width in uses:
                if sc == sram_scope and (m := re.fullmatch(r"(rd|wr)\[(\d+)\]\.en", name)):
                    en_ids[ident] = m.group(1)
        accesses = {"rd": 0, "wr": 0}
        en_state = {}
        t_now = 0
        for line in f:
            c = line[0] if line else ""
            if c == "#":
                t_new = int(line[1:])
                if en_state and t_new > t_now:
                    # en bits held over [t_now, t_new): count the rising clock edges in between
                    n = (t_new // period_ps) - (t_now // period_ps)
                    for ident, kind in en_ids.items():
                        if en_state.get(ident):
                            accesses[kind] += n
                t_now = t_new
                t_end = t_now
                continue
            if c == "b":
                val, ident = line[1:].split()
                v = int(val.replace("x", "0").replace("z", "0"), 2)
            elif c in "01xz":
                ident = line[1:].strip()
                v = 1 if c == "1" else 0
            else:
                continue
            old = last.get(ident)
            if old is not None:
                diff = bin(old ^ v).count("1")
                if diff:
                    for sc, name, _ in ids.get(ident, ()):
                        counts[(sc, name)] = counts.get((sc, name), 0) + diff
            last[ident] = v
            if ident in en_ids:
                en_state[ident] = v
    cycles = max(1, t_end // period_ps)
    act = Activity(cycles=cycles)
    prefix = root + "."
    port_t = port_b = 0
    for (sc, name), width in widths.items():
        if _SKIP.match(name) or "." in name or "[" in name:
            continue        # clock, reset, and the fields of structures (views of a signal counted whole)
        if sc == root:
            port_t += counts.get((sc, name), 0)
            port_b += width
        elif sc.startswith(prefix):
            rel = sc[len(prefix):]
            t, b = act.scopes.get(rel, (0, 0))
            act.scopes[rel] = (t + counts.get((sc, name), 0), b + width)
    act.ports = (port_t, port_b)
    act.sram_reads, act.sram_writes = accesses["rd"], accesses["wr"]
    return act


def collective_activity(cfg, out_dir, *, nbytes=2048, topology="ring:2", latency=4, seed=1):
    """Run an fp32 all-reduce of ``nbytes`` per endpoint on ``topology`` with engines ``cfg`` in Amaranth's
    simulator, VCD into ``out_dir``, and return the :class:`Activity` of endpoint 0's engine."""
    from ..host.job import CollectiveJob, engine_config_for_job
    from ..host.run import engine_config_for, job_spec
    from ..host.transports.ace.amaranth_sim import run_system_amaranth

    spec = job_spec("allreduce", topology, nbytes, "fp32", "sum", seed=seed)
    run_cfg = engine_config_for_job(engine_config_for(cfg, topology), spec)
    if run_cfg != cfg:
        raise ValueError(f"the activity run needs a different engine ({run_cfg}) than the one reported ({cfg}); "
                         f"report a configuration that runs {topology} as it is")
    job = CollectiveJob(spec, cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vcd = out / "activity.vcd"
    results = run_system_amaranth(cfg, topology, lambda r: [job], latency=latency, seed=seed, vcd=str(vcd))
    act = vcd_toggles(vcd, "bench.top.ep0", period_s=1e-8)
    act.job = f"allreduce fp32 sum, {nbytes} B per endpoint, {topology}, link latency {latency}"
    act.passed = all(r.completions[0]["status_name"] == "OK" and not r.mismatches[0] for r in results)
    vcd.unlink()
    return act
