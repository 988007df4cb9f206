"""Static timing of a synthesized 45 nm netlist (Debian's OpenSTA), named in the design's own signals.

:func:`sta_timing` loads a flattened Nangate netlist written by :func:`~syncfabric.fpga.asic.synthesize`
(with ``clock_mhz``: delay-driven ABC with buffering and gate sizing) with one clock on ``clk``. Inputs arrive and
outputs are required at the clock edge (``set_input_delay``/``set_output_delay`` 0): a unit alone is timed as
if its ports were registers, the engine's own ports are registered or driven by registers. It returns:

- the worst negative slack, the total negative slack, how many endpoints fail and by more than one period;
- the minimum period (clock period minus the worst slack) and Fmax;
- the critical path: start and end points by the register (its ``Q`` net: the Amaranth signal name, module path
  included) or port they are, its logic levels (combinational cells, buffers counted apart), delay;
- with ``group_of`` (module path -> group name, for example the report's component of a path), the worst path
  ending in each group, with the same detail.

Names: Yosys keeps the hierarchical names of registers' output wires when it flattens (``decoder.geo.out_addr``);
an anonymous Amaranth signal shows as ``module.$signal$N``. OpenSTA's register instance names are Yosys'
generated ones, so the netlist is read to map each flip-flop to its ``Q`` net.
"""

import re
from pathlib import Path

from .asic import _run as _run_tool
from .tools import ToolError, find_tool

__all__ = ["BLOCKS", "sta_timing", "parse_path", "parse_endpoints", "register_outputs", "signal_module"]


def _run(sta, work, script, log):
    """Run a Tcl ``script`` in OpenSTA in ``work`` (the tool runner of :mod:`.asic`); an ``Error:`` line fails too
    (OpenSTA goes on after a failed command)."""
    (work / f"{log}.tcl").write_text(script)
    out = _run_tool([sta, "-no_splash", "-exit", f"{log}.tcl"], work, f"{log}.log", "OpenSTA (timing)")
    text = (work / f"{log}.log").read_text()
    if "Error:" in text:
        tail = "\n".join(line for line in text.splitlines() if "Error:" in line)
        raise ToolError(f"OpenSTA (timing) failed, log {work / (log + '.log')}\n{tail}")
    return out


def _name(text):
    """A netlist identifier as OpenSTA prints it: no escape, bit selects joined (``\\a.b [3]`` -> ``a.b[3]``)."""
    text = text.strip()
    if text.startswith("\\"):
        text = text[1:]
    return re.sub(r"\s+\[", "[", text).strip()


def register_outputs(netlist):
    """``{flip-flop instance as OpenSTA prints it: Q net as a signal name}`` of a Yosys-written netlist of
    Nangate cells (OpenSTA doubles the backslashes inside names, ``$flatten\\decoder.$auto$ff...``)."""
    out = {}
    text = Path(netlist).read_text()
    for m in re.finditer(r"^\s*S?DFF\w*\s+(\S+)\s*\((.*?)\);", text, re.M | re.S):
        q = re.search(r"\.Q\(([^()]*)\)", m.group(2))
        if q:
            out[_name(m.group(1)).replace("\\", "\\\\")] = _name(q.group(1)).replace("\\", "")
    return out


def signal_module(signal):
    """The module path of a signal name (``decoder.geo.out_addr[31]`` -> ``decoder.geo``; a port -> ``""``)."""
    keep = []
    for p in signal.split(".")[:-1]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p):
            break
        keep.append(p)
    return ".".join(keep)


_POINT = re.compile(r"^(Startpoint|Endpoint): (\S+) \((.*)\)$")
_ROW = re.compile(r"^\s*(-?[\d.]+)\s+(-?[\d.]+)\s+[\^v]\s+(\S+)\s+\((\w+)\)\s*$")
_OUT_PINS = ("Z", "ZN", "Q", "QN", "CO", "S")


def parse_path(text, q_of=None):
    """One path of ``report_checks -format full``: ``{"start", "end", "start_kind", "end_kind", "arrival_ns",
    "required_ns", "slack_ns", "levels", "buffers", "cells"}``; start and end are signal names (a register's
    ``Q`` net through ``q_of``, else the instance or port)."""
    q_of = q_of or {}
    p = {"cells": []}
    rows = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("Startpoint:", "Endpoint:")) and "(" not in line and i + 1 < len(lines):
            line = f"{line.strip()} {lines[i + 1].strip()}"       # a long name puts the kind on the next line
        m = _POINT.match(line.strip())
        if m:
            key = m.group(1).lower()[:5] if m.group(1) == "Startpoint" else "end"
            inst = m.group(2)
            p[key] = q_of.get(inst, inst)
            p[f"{key}_kind"] = m.group(3)
            continue
        m = re.match(r"^\s*(-?[\d.]+)\s+data arrival time", line)
        if m and "arrival_ns" not in p:         # the second mention is the slack sum's, negated
            p["arrival_ns"] = float(m.group(1))
        m = re.match(r"^\s*(-?[\d.]+)\s+data required time", line)
        if m:
            p["required_ns"] = float(m.group(1))
        m = re.match(r"^\s*(-?[\d.]+)\s+slack", line)
        if m:
            p["slack_ns"] = float(m.group(1))
        if "arrival_ns" not in p:
            m = _ROW.match(line)
            if m:
                rows.append((m.group(3), m.group(4)))
    for pin, cell in rows:
        pin_name = pin.rsplit("/", 1)[-1]
        if pin_name in _OUT_PINS and not re.match(r"S?DFF", cell):
            p["cells"].append(cell)
    p["levels"] = len(p["cells"])
    p["buffers"] = sum(1 for c in p["cells"] if c.startswith(("BUF", "CLKBUF")))
    if "start" not in p or "slack_ns" not in p:
        raise ValueError("not a report_checks path")
    return p


def parse_endpoints(text, q_of=None):
    """``[(endpoint signal, slack ns)]`` of ``report_checks -format end``."""
    q_of = q_of or {}
    out = []
    for line in text.splitlines():
        # "inst/D (DFF_X1) required actual slack" or "port (output) required actual slack"
        m = re.match(r"^(\S+?)(?:/\w+)?\s+\((\w+)\)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)", line.strip())
        if m:
            inst = m.group(1)
            out.append((q_of.get(inst, inst), float(m.group(5))))
    return out


#: Engine blocks ``syncfabric report --block`` synthesizes and times alone
#: (:func:`~syncfabric.fpga.report.time_block`): name -> (module of ``syncfabric.hdl.ace``, class). The
#: ``control`` component is otherwise timed only inside the whole engine's synthesis, much longer at the design
#: point than its blocks alone (the control unit: about 5 minutes).
BLOCKS = {"control-unit": ("control", "ControlUnit"), "cmdproc": ("cmdproc", "CommandProcessor"),
          "datapath": ("datapath", "Datapath")}


def _header(liberty, netlist, top, period_ns):
    return f"""read_liberty {Path(liberty).resolve()}
read_verilog {Path(netlist).resolve()}
link_design {top}
create_clock -name clk -period {period_ns:.6f} [get_ports clk]
set_input_delay 0 -clock clk [delete_from_list [all_inputs] [get_ports clk]]
set_output_delay 0 -clock clk [all_outputs]
"""


def sta_timing(netlist, top, liberty, workdir, *, clock_mhz, group_of=None):
    """Timing of ``netlist`` (top ``top``) against a ``clock_mhz`` clock (see the module's docstring)."""
    sta = find_tool("sta", "install Debian's OpenSTA: apt-get install opensta (make test does)")
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    period = 1e3 / clock_mhz
    q_of = register_outputs(netlist)
    head = _header(liberty, netlist, top, period)
    # every endpoint's worst slack, and the critical path in full
    _run(sta, work, head + "report_checks -path_delay max -group_count 10000000 -endpoint_count 1 -format end "
                           "-digits 4 > endpoints.txt\nreport_checks -path_delay max -digits 4 > critical.txt\n",
         "sta_timing")
    ends = parse_endpoints((work / "endpoints.txt").read_text(), q_of)
    if not ends:
        raise ToolError(f"OpenSTA reported no timing endpoint in {netlist} (no register and no port on a clock?)")
    crit = parse_path((work / "critical.txt").read_text(), q_of)
    wns = min(s for _, s in ends)
    out = {"clock_mhz": clock_mhz, "period_ns": round(period, 4), "wns_ns": round(min(wns, 0.0), 4),
           "tns_ns": round(sum(s for _, s in ends if s < 0), 3), "endpoints": len(ends),
           "failing": sum(1 for _, s in ends if s < 0), "failing_by_period": sum(1 for _, s in ends if s < -period),
           "min_period_ns": round(period - wns, 4), "fmax_mhz": round(1e3 / (period - wns), 1),
           "meets": wns >= 0, "critical": crit}
    if group_of is not None:
        worst = {}
        for sig, s in ends:
            g = group_of(signal_module(sig))
            if g not in worst or s < worst[g][1]:
                worst[g] = (sig, s)
        # the full path to each group's worst endpoint (by its instance pin or port)
        inst_of = {q: i for i, q in q_of.items()}
        tcl = head
        order = sorted(worst)
        for i, g in enumerate(order):
            sig = worst[g][0]
            to = f"[get_pins {{{inst_of[sig]}/D}}]" if sig in inst_of else f"[get_ports {{{sig}}}]"
            tcl += f"report_checks -path_delay max -digits 4 -to {to} > group{i}.txt\n"
        _run(sta, work, tcl, "sta_groups")
        out["groups"] = {}
        for i, g in enumerate(order):
            path = parse_path((work / f"group{i}.txt").read_text(), q_of)
            slack = path["slack_ns"]
            out["groups"][g] = {"slack_ns": slack, "min_period_ns": round(period - slack, 4),
                                "fmax_mhz": round(1e3 / (period - slack), 1), "meets": slack >= 0,
                                "failing": sum(1 for sig, s in ends if s < 0 and group_of(signal_module(sig)) == g),
                                "critical": path}
    return out
