"""ASIC-style area and power on the Nangate 45 nm open cell library (Debian's Yosys and OpenSTA).

:func:`synthesize` maps a design (RTLIL from Amaranth) onto the library module by module, so every module of
the hierarchy gets its own cell area. Memories of at least :data:`MACRO_MIN_BITS` bits and
:data:`MACRO_MIN_DEPTH` rows are not built from cells: they become SRAM macros (a blackbox ``sf_sram``) whose
area and energy come from :class:`SramModel`; smaller ones (FIFOs, register files) are flip-flops as a
synthesis tool would make them. The design is then flattened (instance names keep their hierarchical path),
the macros' read data become inputs, and the netlist goes to OpenSTA.

:func:`power` loads the netlist in OpenSTA with a clock, sets the switching activity of the inputs and of
every register output (per module, from a simulation: :mod:`~syncfabric.fpga.activity`) and returns each
instance's internal, switching and leakage power, summed by module path. The clock net's own power and the
clock tree are not modelled (OpenSTA's 2019 snapshot in Debian has no clock-tree synthesis).
"""

import json
import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .tools import ToolError, find_tool

__all__ = ["SramModel", "synthesize", "power", "MACRO_MIN_BITS", "MACRO_MIN_DEPTH", "liberty_areas", "rtlil_memories",
           "buffer_fanout", "FANOUT_LIMIT"]

#: Delay-driven mapping: every net is driven as by this cell and loaded by this many fF (about four gate inputs)
ABC_DRIVER, ABC_LOAD_FF = "BUF_X2", 5.0
#: ABC's delay-oriented standard-cell mapper (``map -D``) with buffering and gate sizing. Yosys' default script
#: for ``-D`` (``&nf``) left the adders' carry chains rippling: 2.42 ns on the paper engine's block geometry
#: against 1.23 ns with this one, and 3.83 against 2.55 ns on the board control unit (+5 % cells). ``topo``
#: orders the mapped network for ``buffer``, which otherwise stops on a dangling node of the control unit.
ABC_DELAY_SCRIPT = "strash;dch;map,-D,{D};topo;buffer;upsize,-D,{D};dnsize,-D,{D};stime,-p"
#: ABC maps for this fraction of the clock period, as synthesis is constrained tighter than the clock a timing
#: flow signs off at: ABC's delays see no slews, so it took 32-bit counters and adders of 47-49 cells as
#: meeting 1 ns where OpenSTA times them at 1.2 ns. On the small engine: 4,824 of 49,936 endpoints failing 1 GHz
#: at the full period, 2,805 at 0.75 of it (the intra-module paths gone; worst slack equal, on a path across
#: modules), for 2.5 % more cells.
ABC_PERIOD_FRACTION = 0.75

#: Memories of at least this many bits (and :data:`MACRO_MIN_DEPTH` rows) are SRAM macros.
MACRO_MIN_BITS = 2048
MACRO_MIN_DEPTH = 16


@dataclass(frozen=True)
class SramModel:
    """Area and energy of an SRAM macro at 45 nm.

    Area: ``cell_um2`` per bit (the 0.346 um^2 6T cell of Intel's 45 nm process, Mistry et al., IEDM 2007)
    divided by ``array_efficiency`` (cells over macro area; 0.7 is typical of compiled SRAMs of tens of KiB).
    Energy of one access: ``e64_pj`` for a 64-bit access to an 8 KiB array (10 pJ, Horowitz, "Computing's
    energy problem", ISSCC 2014, 45 nm: 8 KiB 10 pJ, 32 KiB 20 pJ, 1 MiB 100 pJ), scaled by the square root
    of the array size (which fits those three points within 15 %) and linearly by the access width. Leakage
    is not modelled (no stated source for it).
    """

    cell_um2: float = 0.346
    array_efficiency: float = 0.7
    e64_pj: float = 10.0
    ref_bytes: int = 8192

    def area_um2(self, bits):
        """Macro area of ``bits`` bits."""
        return bits * self.cell_um2 / self.array_efficiency

    def access_pj(self, total_bits, width):
        """Energy of one ``width``-bit access to a ``total_bits`` array."""
        return self.e64_pj * math.sqrt(total_bits / 8 / self.ref_bytes) * width / 64

    def as_dict(self):
        return {"cell_um2": self.cell_um2, "array_efficiency": self.array_efficiency, "e64_pj_8KiB": self.e64_pj,
                "sources": "cell: Intel 45 nm 6T (Mistry et al., IEDM 2007); energy: Horowitz, ISSCC 2014 "
                           "(8 KiB 10 pJ, 32 KiB 20 pJ, 1 MiB 100 pJ per 64-bit access), sqrt-of-size fit; "
                           "leakage not modelled"}


_SRAM_BB = """(* blackbox *)
module sf_sram (RD_CLK, RD_EN, RD_ADDR, RD_DATA, WR_CLK, WR_EN, WR_ADDR, WR_DATA);
  parameter SIZE = 1; parameter ABITS = 1; parameter WIDTH = 1; parameter RD_PORTS = 1; parameter WR_PORTS = 1;
  input [RD_PORTS-1:0] RD_CLK, RD_EN;
  input [RD_PORTS*ABITS-1:0] RD_ADDR;
  output [RD_PORTS*WIDTH-1:0] RD_DATA;
  input [WR_PORTS-1:0] WR_CLK;
  input [WR_PORTS*WIDTH-1:0] WR_EN;
  input [WR_PORTS*ABITS-1:0] WR_ADDR;
  input [WR_PORTS*WIDTH-1:0] WR_DATA;
endmodule
"""

_MEM_PARAMS = ("MEMID", "SIZE", "OFFSET", "ABITS", "WIDTH", "INIT", "RD_PORTS", "RD_CLK_ENABLE", "RD_CLK_POLARITY",
               "RD_TRANSPARENCY_MASK", "RD_COLLISION_X_MASK", "RD_WIDE_CONTINUATION", "RD_CE_OVER_SRST",
               "RD_ARST_VALUE", "RD_SRST_VALUE", "RD_INIT_VALUE", "WR_PORTS", "WR_CLK_ENABLE", "WR_CLK_POLARITY",
               "WR_PRIORITY_MASK", "WR_WIDE_CONTINUATION")


def _sram_map():
    params = "\n".join(f'  parameter {p} = {chr(34) * 2 if p == "MEMID" else 0};' for p in _MEM_PARAMS)
    return f"""(* techmap_celltype = "$mem_v2" *)
module _sf_mem_v2 (RD_CLK, RD_EN, RD_ARST, RD_SRST, RD_ADDR, RD_DATA, WR_CLK, WR_EN, WR_ADDR, WR_DATA);
{params}
  input [RD_PORTS-1:0] RD_CLK, RD_EN, RD_ARST, RD_SRST;
  input [RD_PORTS*ABITS-1:0] RD_ADDR;
  output [RD_PORTS*WIDTH-1:0] RD_DATA;
  input [WR_PORTS-1:0] WR_CLK;
  input [WR_PORTS*WIDTH-1:0] WR_EN;
  input [WR_PORTS*ABITS-1:0] WR_ADDR;
  input [WR_PORTS*WIDTH-1:0] WR_DATA;
  wire _TECHMAP_FAIL_ = SIZE * WIDTH < {MACRO_MIN_BITS} || SIZE < {MACRO_MIN_DEPTH};
  sf_sram #(.SIZE(SIZE), .ABITS(ABITS), .WIDTH(WIDTH), .RD_PORTS(RD_PORTS), .WR_PORTS(WR_PORTS))
    _TECHMAP_REPLACE_ (.RD_CLK(RD_CLK), .RD_EN(RD_EN), .RD_ADDR(RD_ADDR), .RD_DATA(RD_DATA),
                       .WR_CLK(WR_CLK), .WR_EN(WR_EN), .WR_ADDR(WR_ADDR), .WR_DATA(WR_DATA));
endmodule
"""


def _run(cmd, cwd, log, what):
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    Path(cwd, log).write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-8:])
        how = f"crashed (signal {-res.returncode})" if res.returncode < 0 else f"failed (exit {res.returncode})"
        raise ToolError(f"{what} {how}, log {Path(cwd, log)}\n{tail}")
    return res.stdout


def _unescape(name):
    return name[1:] if name.startswith("\\") else name


def synthesize(il_path, top, liberty, workdir, *, clock_mhz=None):
    """Synthesize RTLIL ``il_path`` (top module ``top``) onto ``liberty`` in ``workdir``.

    With ``clock_mhz``, synthesis is delay-driven as a timing flow's would be: ABC maps for
    :data:`ABC_PERIOD_FRACTION` of that clock period (``abc -D``) and, with a driving cell and a load on every
    net (``-constr``), buffers high-fanout nets and sizes gates (``buffer; upsize; dnsize``), and after
    flattening :func:`buffer_fanout` buffers the nets that cross modules to more than :data:`FANOUT_LIMIT`
    pins; :func:`~syncfabric.fpga.timing.sta_timing` times the result. Without it, ABC maps for area and
    leaves fanout unbuffered (a netlist no timing flow would accept).

    Returns ``{"modules": {path: {"area": um^2 of the module's own cells, "cells": n, "seq": flip-flops}},
    "macros": [{"path", "name", "bits", "width", "depth", "rd_ports", "wr_ports"}], "netlist": file}`` where
    ``path`` is the module's place below ``top`` (``""`` for ``top``, ``"datapath.sram"``...), and ``"fanout"``:
    :func:`buffer_fanout`'s result (``None`` without ``clock_mhz``); its buffers are in their modules' area."""
    yosys = find_tool("yosys", "install Debian's yosys: apt-get install yosys (make test does)")
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    (work / "sf_sram_bb.v").write_text(_SRAM_BB)
    (work / "sram_map.v").write_text(_sram_map())
    lib = Path(liberty).resolve()
    abc = f"abc -liberty {lib}"
    if clock_mhz:
        (work / "abc.constr").write_text(f"set_driving_cell {ABC_DRIVER}\nset_load {ABC_LOAD_FF}\n")
        d = f"{ABC_PERIOD_FRACTION * 1e6 / clock_mhz:.0f}"
        abc = f"abc -D {d} -constr abc.constr -liberty {lib} -script +{ABC_DELAY_SCRIPT.format(D=d)}"
    # The ports stay buses (no ``splitnets -ports``): Yosys 0.23's write_verilog lists a module's ports by
    # scanning every wire once per port, so a flattened design point (1.4 M cells, tens of thousands of port
    # bits with the SRAM macros' read data exposed) did not finish writing in 35 minutes. Nets that join a port
    # to a wire of another name get a BUF_X1 from insbuf (port buffers, as a placer's flow would insert).
    script = f"""
read_verilog -lib sf_sram_bb.v
read_rtlil {Path(il_path).resolve()}
hierarchy -top {top}
proc
opt_clean
memory -nomap
techmap -map sram_map.v t:$mem_v2
synth -top {top}
dfflibmap -liberty {lib}
{abc}
opt_clean -purge
tee -q -o stat.json stat -json -liberty {lib}
flatten
select -set srout t:sf_sram %co:+[RD_DATA] w:* %i
delete t:sf_sram
expose -input @srout
hilomap -hicell LOGIC1_X1 Z -locell LOGIC0_X1 Z
setundef -zero
opt_clean -purge
insbuf -buf BUF_X1 A Z
write_verilog -noattr -noexpr -nohex -nodec -norename netlist.v
"""
    (work / "asic.ys").write_text(script)
    _run([yosys, "-q", "-l", "yosys.log", "asic.ys"], work, "yosys.out", "yosys (ASIC synthesis)")
    text = (work / "stat.json").read_text()
    # Yosys 0.23 writes the "modules" object correctly but garbles the hierarchy summary after it: read the
    # modules only, and price their cells from the liberty (0.23 gives no per-module area in JSON)
    start = text.index("{", text.index('"modules"'))
    stat_modules, _ = json.JSONDecoder().raw_decode(text[start:])
    areas = liberty_areas(lib)
    modules = {}
    for name, mod in stat_modules.items():
        path = _rel(_unescape(name), top)
        if path is None:
            continue
        types = {t: int(n) for t, n in mod.get("num_cells_by_type", {}).items() if t in areas}
        seq = sum(n for t, n in types.items() if re.match(r"^(DFF|SDFF|DLH|DLL)", t))
        modules[path] = {"area": sum(areas[t] * n for t, n in types.items()), "cells": sum(types.values()),
                         "seq": seq}
    fanout = None
    if clock_mhz:
        fanout = buffer_fanout(work / "netlist.v", lib)
        for path, area in fanout["area"].items():
            mod = modules.setdefault(path, {"area": 0.0, "cells": 0, "seq": 0})
            mod["area"] += area
            mod["cells"] += round(area / liberty_areas(lib)[FANOUT_BUFFER])
        fanout["sized"] = size_drivers(work / "netlist.v", lib)
        for path, area in fanout["sized"]["area"].items():
            modules.setdefault(path, {"area": 0.0, "cells": 0, "seq": 0})["area"] += area
    macros = [dict(m, path=_rel(m["module"], top)) for m in rtlil_memories(il_path)
              if m["bits"] >= MACRO_MIN_BITS and m["depth"] >= MACRO_MIN_DEPTH and _rel(m["module"], top) is not None]
    return {"modules": modules, "macros": macros, "netlist": str(work / "netlist.v"), "fanout": fanout}


#: After flattening, a net that leaves its module can drive more pins than the ABC run of any one module saw:
#: the abort's reset flip-flop drove 146 pins in 40 modules (0.86 ns from clock to Q on a DFF_X1, 31,000
#: endpoints failing 1 GHz for it). A placer's repair step would buffer such a net; :func:`buffer_fanout` does.
FANOUT_LIMIT, FANOUT_BUFFER = 16, "BUF_X4"

_INST = re.compile(r"^\s*([A-Za-z_]\w*)\s+(\\\S+ |[A-Za-z_$][\w$]*)\s*\($")
_PIN = re.compile(r"^(\s*)\.(\w+)\((.*)\)(,?)\s*$")


def liberty_outputs(liberty):
    """``{cell: {output pin names}}`` of a liberty file."""
    outs, cell, pin = {}, None, None
    for line in Path(liberty).read_text().splitlines():
        m = re.match(r"\s*cell\s*\(\s*\"?(\w+)\"?\s*\)", line)
        if m:
            cell, pin = m.group(1), None
            outs.setdefault(cell, set())
            continue
        m = re.match(r"\s*pin\s*\(\s*\"?(\w+)\"?\s*\)", line)
        if m:
            pin = m.group(1)
            continue
        if cell and pin and re.match(r"\s*direction\s*:\s*output", line):
            outs[cell].add(pin)
    return outs


def _net_base(net):
    """A readable stem for the nets of ``net``'s buffer tree (``\\a.b [3]`` -> ``a.b[3]``)."""
    return net.lstrip("\\").replace(" ", "")


def buffer_fanout(netlist, liberty, *, limit=FANOUT_LIMIT, buf=FANOUT_BUFFER):
    """Rewrite the flattened ``netlist`` so that no cell output drives more than ``limit`` cell inputs: each
    larger net gets a tree of ``buf`` cells (sinks grouped by instance name, so one buffer serves one
    module's pins where it can), as a placer's fanout repair would. Nets without a driving cell (the
    design's inputs, the clock) are left to the timing constraints.

    Returns ``{"nets": nets buffered, "buffers": cells added, "area": {module path: um^2 added}}``; each
    buffer belongs to its driver's module."""
    outs = liberty_outputs(liberty)
    if buf not in outs:
        raise ValueError(f"{buf} is not a cell of {liberty}")
    buf_area = liberty_areas(liberty)[buf]
    lines = Path(netlist).read_text().splitlines()
    sinks, driver = {}, {}
    cell = inst = None
    first_inst = end = None
    for i, line in enumerate(lines):
        m = _INST.match(line)
        if m and m.group(1) in outs:
            cell, inst = m.group(1), m.group(2)
            if first_inst is None:
                first_inst = i
            continue
        if cell is None:
            if line.strip() == "endmodule":
                end = i
            continue
        m = _PIN.match(line)
        if m:
            net = m.group(3).strip()
            if m.group(2) in outs[cell]:
                driver[net] = inst
            elif net:
                sinks.setdefault(net, []).append((inst, i))
        elif line.strip() == ");":
            cell = inst = None
    decls, cells = [], []
    added = {}
    n_nets = 0
    for net, pins in sinks.items():
        if len(pins) <= limit or net not in driver:
            continue
        n_nets += 1
        path = _inst_path(driver[net])
        base, level = _net_base(net), 0
        # sinks: ("line", index) of the netlist or ("buf", index) of ``cells``
        todo = [("line", i) for _, i in sorted(pins)]
        while len(todo) > limit:
            nxt = []
            for g in range(0, len(todo), limit):
                new = f"\\{base}$fo{n_nets}_{level}_{g // limit} "        # (the net's number keeps names apart)
                decls.append(f"  wire {new};")
                for kind, k in todo[g:g + limit]:
                    if kind == "line":
                        indent, pin, _, comma = _PIN.match(lines[k]).groups()
                        lines[k] = f"{indent}.{pin}({new}){comma}"
                    else:
                        cells[k][1] = new
                prefix = f"$flatten\\{path}." if path else ""
                cells.append([f"\\{prefix}$fanout${n_nets}_{level}_{g // limit} ", None, new])
                nxt.append(("buf", len(cells) - 1))
                added[path] = added.get(path, 0.0) + buf_area
            todo, level = nxt, level + 1
        for kind, k in todo:
            if kind == "buf":
                cells[k][1] = net + " "     # an escaped identifier ends at white space
    text = [f"  {buf} {name} (\n    .A({a}),\n    .Z({z})\n  );" for name, a, z in cells]
    if cells:
        if first_inst is None or end is None:
            raise ValueError(f"{netlist}: no cell instance or no endmodule")
        lines = lines[:first_inst] + decls + lines[first_inst:end] + text + lines[end:]
        Path(netlist).write_text("\n".join(lines) + "\n")
    return {"nets": n_nets, "buffers": len(cells), "area": added}


#: Drive strength a cell needs for its fan-out (cell inputs on its output net): (more than N sinks, strength).
SIZE_RULES = ((8, 4), (4, 2))
_DRIVE = re.compile(r"^(\w+)_X(\d+)$")


def size_drivers(netlist, liberty, *, rules=SIZE_RULES):
    """Upsize, in the flattened ``netlist``, every cell whose output drives more cell inputs than its drive
    strength suits (``rules``: a cell of more than N sinks gets at least strength X, the smallest of the
    liberty's variants ``NAME_Xk`` that is at least X, or the largest). ABC sizes gates per module against one
    load; after flattening and :func:`buffer_fanout`, this is the sizing step of a placer's timing repair.

    Returns ``{"cells": cells resized, "area": {module path: um^2 added}}``."""
    outs = liberty_outputs(liberty)
    areas = liberty_areas(liberty)
    variants = {}
    for name in outs:
        m = _DRIVE.match(name)
        if m:
            variants.setdefault(m.group(1), []).append(int(m.group(2)))
    lines = Path(netlist).read_text().splitlines()
    inst_line, out_net, loads = {}, {}, {}
    cell = inst = None
    for i, line in enumerate(lines):
        m = _INST.match(line)
        if m and m.group(1) in outs:
            cell, inst = m.group(1), m.group(2)
            inst_line[inst] = (i, cell)
            continue
        if cell is None:
            continue
        m = _PIN.match(line)
        if m:
            net = m.group(3).strip()
            if m.group(2) in outs[cell]:
                out_net.setdefault(inst, []).append(net)
            elif net:
                loads[net] = loads.get(net, 0) + 1
        elif line.strip() == ");":
            cell = inst = None
    added, n = {}, 0
    for inst, nets in out_net.items():
        i, cell = inst_line[inst]
        m = _DRIVE.match(cell)
        if not m or m.group(1) not in variants:
            continue
        sinks = max(loads.get(net, 0) for net in nets)
        want = next((x for limit, x in rules if sinks > limit), 0)
        have = sorted(variants[m.group(1)])
        if int(m.group(2)) >= want:
            continue
        new = f"{m.group(1)}_X{next((x for x in have if x >= want), have[-1])}"
        if new == cell:
            continue
        lines[i] = lines[i].replace(cell, new, 1)
        path = _inst_path(inst)
        added[path] = added.get(path, 0.0) + areas[new] - areas[cell]
        n += 1
    if n:
        Path(netlist).write_text("\n".join(lines) + "\n")
    return {"cells": n, "area": added}


def rtlil_memories(il_path):
    """Every memory of an RTLIL file: ``{"module", "name", "width", "depth", "bits", "rd_ports", "wr_ports"}``."""
    mems, module = {}, None
    for line in Path(il_path).read_text().splitlines():
        t = line.split()
        if not t:
            continue
        if t[0] == "module":
            module = _unescape(t[1])
        elif t[0] == "memory":
            kv = dict(zip(t[1:-1:2], t[2:-1:2]))
            w, d = int(kv.get("width", 1)), int(kv.get("size", 0))
            mems[(module, _unescape(t[-1]))] = {"module": module, "name": _unescape(t[-1]), "width": w, "depth": d,
                                                 "bits": w * d, "rd_ports": 0, "wr_ports": 0}
        elif t[0] == "cell" and t[1] in ("$memrd_v2", "$memrd", "$memwr_v2", "$memwr"):
            cur = ("rd_ports" if "rd" in t[1] else "wr_ports")
        elif t[0] == "parameter" and t[1] == "\\MEMID" and module is not None:
            name = t[2].strip('"').replace("\\\\", "\\").lstrip("\\")
            key = (module, name)
            if key in mems and "cur" in locals():
                mems[key][cur] += 1
    return list(mems.values())


def _int(v):
    """A Yosys JSON parameter (an int or a binary string) as an int."""
    if isinstance(v, int):
        return v
    return int(v, 2) if re.fullmatch(r"[01]+", v) else int(v)


def _int_or_str(v):
    if isinstance(v, str) and re.fullmatch(r"[01]+", v) and len(v) % 8 == 0:
        b = int(v, 2).to_bytes(len(v) // 8, "big")
        try:
            return b.decode().rstrip("\0")
        except UnicodeDecodeError:
            return v
    return str(v)


def _rel(name, top):
    if name == top:
        return ""
    if name.startswith(top + "."):
        return name[len(top) + 1:]
    return None


_AREAS = {}


def liberty_areas(liberty):
    """``{cell: area}`` of a liberty file."""
    key = str(liberty)
    if key in _AREAS:
        return _AREAS[key]
    areas, cell = {}, None
    for line in Path(liberty).read_text().splitlines():
        m = re.match(r"\s*cell\s*\(\s*\"?([\w]+)\"?\s*\)", line)
        if m:
            cell = m.group(1)
        m = re.match(r"\s*area\s*:\s*([\d.]+)", line)
        if m and cell and cell not in areas:
            areas[cell] = float(m.group(1))
    _AREAS[key] = areas
    return areas


def power(netlist, top, liberty, workdir, *, clock_mhz, input_activity, register_activity, global_activity=None):
    """Power of the flattened ``netlist`` in OpenSTA at ``clock_mhz``: inputs toggle at ``input_activity``
    (transitions per cycle), the outputs of the flip-flops of module path ``p`` at ``register_activity(p)``.
    Returns ``{path: (internal W, switching W, leakage W)}`` summed over the instances of each module path,
    the design total under ``"*"`` and, under ``"#nonfinite"``, how many instance figures OpenSTA gave as NaN
    or Inf (counted as 0).

    OpenSTA propagates the activity through the logic, except with ``global_activity``: then every other net
    toggles at that rate (``set_power_activity -global``). Debian's 2019 OpenSTA crashes in its propagation
    on some large netlists; the global rate is the fallback for those."""
    sta = find_tool("sta", "install Debian's OpenSTA: apt-get install opensta (make test does)")
    work = Path(workdir)
    period_ns = 1e3 / clock_mhz
    # register outputs toggle at their module's activity: a Tcl dict path -> activity, the path of an instance
    # being its dotted name up to the first generated segment (as _inst_path computes it)
    paths = sorted({_inst_path(inst) for inst in _register_instances(netlist)})
    act = " ".join(f"{{{p}}} {register_activity(p):.6f}" for p in paths)
    script = f"""
read_liberty {Path(liberty).resolve()}
read_verilog {Path(netlist).resolve()}
link_design {top}
create_clock -name clk -period {period_ns:.6f} [get_ports clk]
set_power_activity -input -activity {input_activity:.6f} -duty 0.5
{"" if global_activity is None else f"set_power_activity -global -activity {global_activity:.6f} -duty 0.5"}
set corner [sta::cmd_corner]
report_power > /dev/null
set act [dict create {act}]
proc inst_path {{name}} {{
    if {{[string first {{$flatten}} $name] == 0}} {{ set name [string range $name 8 end] }}
    set keep {{}}
    foreach p [lrange [split $name .] 0 end-1] {{
        set p [string trimleft $p \\]
        if {{![regexp {{^[A-Za-z_][A-Za-z0-9_]*$}} $p]}} break
        lappend keep $p
    }}
    return [join $keep .]
}}
set cells [get_cells *]
foreach inst $cells {{
    set ref [get_property $inst ref_name]
    if {{[string match DFF* $ref] || [string match SDFF* $ref]}} {{
        set path [inst_path [get_full_name $inst]]
        if {{[dict exists $act $path]}} {{
            set a [dict get $act $path]
            foreach pin [get_pins -of_objects $inst] {{
                if {{[get_property $pin direction] == "output"}} {{ sta::set_power_pin_activity $pin $a 0.5 }}
            }}
        }}
    }}
}}
set out [open inst_power.txt w]
foreach inst $cells {{
    set p [sta::instance_power $inst $corner]
    puts $out "[get_full_name $inst] [lindex $p 0] [lindex $p 1] [lindex $p 2]"
}}
close $out
"""
    (work / "power.tcl").write_text(script)
    _run([sta, "-no_splash", "-exit", "power.tcl"], work, "sta.log", "OpenSTA (power)")
    out = {}
    total = [0.0, 0.0, 0.0]
    nonfinite = 0
    for line in (work / "inst_power.txt").read_text().splitlines():
        parts = line.rsplit(" ", 3)
        if len(parts) != 4:
            continue
        path = _inst_path(parts[0])
        acc = out.setdefault(path, [0.0, 0.0, 0.0])
        for i in range(3):
            v = float(parts[1 + i])
            if not math.isfinite(v):
                # OpenSTA's propagation gives NaN/Inf on gates fed by the top bits of 64-bit counters (a
                # toggle rate of about 2^-60 per cycle): their power is nil, counted as 0
                nonfinite += 1
                v = 0.0
            acc[i] += v
            total[i] += v
    out["*"] = total
    res = {k: tuple(v) for k, v in out.items()}
    res["#nonfinite"] = nonfinite
    return res


def _inst_path(inst):
    """The module path of a flattened instance name (``datapath.sram.$abc$...`` -> ``datapath.sram``)."""
    keep = []
    name = inst.lstrip("\\")
    if name.startswith("$flatten"):
        name = name[len("$flatten"):]
    for p in name.split(".")[:-1]:
        p = p.lstrip("\\")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p):
            break
        keep.append(p)
    return ".".join(keep)


def _register_instances(netlist):
    """Instance names of every flip-flop in a Yosys-written netlist of Nangate cells."""
    pat = re.compile(r"^\s*(?:DFF\w*|SDFF\w*)\s+(\S+)\s*\(")
    out = []
    for line in Path(netlist).read_text().splitlines():
        m = pat.match(line)
        if m:
            out.append(m.group(1).lstrip("\\"))
    return out
