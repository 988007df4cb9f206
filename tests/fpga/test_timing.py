"""Static timing at 45 nm: a deliberately long path fails the clock and is named by its registers, a short one
meets it, a net that fans out across modules is buffered after flattening, and the report's parsers read
OpenSTA's paths."""

import re

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from syncfabric.fpga.asic import FANOUT_LIMIT, liberty_areas, liberty_outputs, size_drivers, synthesize
from syncfabric.fpga.timing import parse_endpoints, parse_path, signal_module, sta_timing
from syncfabric.fpga.tools import find_tool, nangate45_liberty


class _Chain(wiring.Component):
    """Registered inputs, ``depth`` chained 32-bit multiply-adds (or one XOR), a registered result."""

    def __init__(self, depth):
        self.depth = depth
        super().__init__({"a": In(32), "b": In(32), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        ra, rb, acc = Signal(32, name="ra"), Signal(32, name="rb"), Signal(32, name="acc")
        m.d.sync += [ra.eq(self.a), rb.eq(self.b)]
        v = ra ^ rb
        for _ in range(self.depth):
            v = (v * rb + ra)[:32]
        m.d.sync += acc.eq(v)
        m.d.comb += self.y.eq(acc)
        return m


class _Lane(wiring.Component):
    """``n`` flip-flops that toggle their own bit when ``en`` is high."""

    def __init__(self, n):
        self.n = n
        super().__init__({"en": In(1), "y": Out(n)})

    def elaborate(self, platform):
        m = Module()
        q = Signal(self.n, name="q")
        with m.If(self.en):
            m.d.sync += q.eq(~q)
        m.d.comb += self.y.eq(q)
        return m


class _Fanout(wiring.Component):
    """One register (``go``) enabling ``lanes`` submodules of ``width`` flip-flops each: a net that crosses
    modules, as an engine-wide reset or stall does."""

    def __init__(self, lanes=12, width=16):
        self.lanes, self.width = lanes, width
        super().__init__({"a": In(1), "y": Out(lanes * width)})

    def elaborate(self, platform):
        m = Module()
        go = Signal(name="go")
        m.d.sync += go.eq(self.a)
        for i in range(self.lanes):
            m.submodules[f"lane{i}"] = lane = _Lane(self.width)
            m.d.comb += [lane.en.eq(go), self.y[i * self.width:(i + 1) * self.width].eq(lane.y)]
        return m


def _tools():
    try:
        find_tool("yosys", "")
        find_tool("sta", "")
    except Exception as exc:             # noqa: BLE001 - the report needs both; CI installs them
        pytest.skip(str(exc))
    return nangate45_liberty()


def _timed(tmp_path, depth, clock_mhz=1000):
    lib = _tools()
    il = tmp_path / "chain.il"
    il.write_text(rtlil.convert(_Chain(depth), name="chain"))
    syn = synthesize(il, "chain", lib, tmp_path / "asic", clock_mhz=clock_mhz)
    return sta_timing(syn["netlist"], "chain", lib, tmp_path / "sta", clock_mhz=clock_mhz,
                      group_of=lambda path: "top" if path == "" else path)


def _fanouts(netlist, liberty):
    """``{net: (driving instance, [(instance, pin) of each load])}`` of a flattened Yosys netlist."""
    outs = liberty_outputs(liberty)
    nets, cell, inst = {}, None, None
    for line in netlist.read_text().splitlines():
        m = re.match(r"^\s*(\w+)\s+(\\\S+ |[\w$]+)\s*\($", line)
        if m and m.group(1) in outs:
            cell, inst = m.group(1), m.group(2).strip()
            continue
        m = re.match(r"^\s*\.(\w+)\((.*)\),?\s*$", line)
        if m and cell:
            drv, loads = nets.setdefault(m.group(2).strip(), [None, []])
            if m.group(1) in outs[cell]:
                nets[m.group(2).strip()][0] = (cell, inst)
            else:
                loads.append((cell, inst, m.group(1)))
    return nets


def test_a_net_fanning_out_across_modules_is_buffered_as_a_tree(tmp_path):
    """192 flip-flops in 12 modules: each module's ABC run saw its own share, so only the flattened netlist shows the net;
    after the repair every cell drives at most FANOUT_LIMIT pins and each load still hangs off ``go``."""
    lib = _tools()
    il = tmp_path / "fanout.il"
    il.write_text(rtlil.convert(_Fanout(), name="fanout"))
    syn = synthesize(il, "fanout", lib, tmp_path / "asic", clock_mhz=1000)
    assert syn["fanout"]["nets"] >= 1 and syn["fanout"]["buffers"] >= 2
    assert syn["modules"][""]["area"] >= sum(syn["fanout"]["area"].values()) > 0
    nets = _fanouts(tmp_path / "asic" / "netlist.v", lib)
    driven = {n: loads for n, (drv, loads) in nets.items() if drv is not None}
    assert max(len(loads) for loads in driven.values()) <= FANOUT_LIMIT
    # from go's flip-flop, through buffers only, to the lanes' cells: every lane's 16 flip-flops' logic
    by_out = {n: drv for n, (drv, _) in nets.items() if drv is not None}
    go = next(n for n, (drv, _) in nets.items() if drv and drv[0].startswith("DFF") and "go" in n)
    seen, frontier = set(), [go]
    while frontier:
        net = frontier.pop()
        for cell, inst, pin in nets[net][1]:
            if cell.startswith("BUF") and "$fanout$" in inst:
                frontier += [n for n, drv in by_out.items() if drv == (cell, inst)]
            else:
                seen.add(inst.lstrip("\\").removeprefix("$flatten").lstrip("\\").split(".")[0])
    assert {f"lane{i}" for i in range(12)} <= seen
    t = sta_timing(syn["netlist"], "fanout", lib, tmp_path / "sta", clock_mhz=1000)
    assert t["meets"]


def _cell(kind, name, pins):
    body = ",\n".join(f"    .{p}({n})" for p, n in pins)
    return f"  {kind} {name} (\n{body}\n  );"


def test_drivers_are_sized_for_their_fanout(tmp_path):
    """A NAND2_X1 driving 10 inputs becomes X4, an INV_X1 driving 5 becomes X2, a DFF_X1 driving 5 becomes X2 (its
    largest); a buffer driving 2 and a full adder (one strength only) keep theirs; the area added is the
    liberty's difference, booked to the driver's module."""
    lib = _tools()
    cells = [_cell("DFF_X1", "\\$flatten\\u.q ", [("D", "a"), ("CK", "clk"), ("Q", "q"), ("QN", "")]),
             _cell("NAND2_X1", "\\$flatten\\u.n ", [("A1", "q"), ("A2", "a"), ("ZN", "n")]),
             _cell("INV_X1", "i", [("A", "q"), ("ZN", "m")]),
             _cell("BUF_X1", "b", [("A", "m"), ("Z", "y[0]")]),
             _cell("FA_X1", "f", [("A", "q"), ("B", "m"), ("CI", "m"), ("S", "y[1]"), ("CO", "y[2]")])]
    cells += [_cell("INV_X1", f"l{k}", [("A", "n"), ("ZN", f"z[{k}]")]) for k in range(10)]
    cells += [_cell("XOR2_X1", f"x{k}", [("A", "q"), ("B", "m"), ("Z", f"w[{k}]")]) for k in range(2)]
    net = tmp_path / "n.v"
    net.write_text("module t(a, clk, y, z, w);\n  input a, clk;\n  output [2:0] y;\n  output [9:0] z;\n"
                   "  output [1:0] w;\n  wire q, n, m;\n" + "\n".join(cells) + "\nendmodule\n")
    r = size_drivers(net, lib)
    text = net.read_text()
    areas = liberty_areas(lib)
    assert r["cells"] == 3
    assert "NAND2_X4 \\$flatten\\u.n " in text and "DFF_X2 \\$flatten\\u.q " in text and "INV_X2 i " in text
    assert "BUF_X1 b " in text and "FA_X1 f " in text
    assert r["area"] == {"u": pytest.approx(areas["NAND2_X4"] - areas["NAND2_X1"] + areas["DFF_X2"]
                                            - areas["DFF_X1"]),
                         "": pytest.approx(areas["INV_X2"] - areas["INV_X1"])}
    assert size_drivers(net, lib)["cells"] == 0         # sized once: a second pass changes nothing


def test_a_long_path_fails_the_clock_and_is_named_by_its_registers(tmp_path):
    t = _timed(tmp_path, depth=2)
    assert not t["meets"] and t["wns_ns"] < -0.5 and t["failing"] > 0 and t["tns_ns"] < t["wns_ns"]
    crit = t["critical"]
    # a register driving a port directly takes the port's name (Yosys keeps the public name)
    assert crit["start"].split("[")[0] in ("ra", "rb") and crit["end"].split("[")[0] in ("acc", "y")
    assert crit["levels"] > 30 and crit["slack_ns"] == pytest.approx(t["wns_ns"])
    assert t["min_period_ns"] == pytest.approx(t["period_ns"] - t["wns_ns"])
    assert t["fmax_mhz"] == pytest.approx(1e3 / t["min_period_ns"], rel=1e-3)
    # 32 flops of acc, 64 of ra and rb, and the 32 output ports y (driven straight by acc)
    assert t["endpoints"] == 128
    assert t["groups"]["top"]["critical"]["end"] == crit["end"]


def test_a_short_path_meets_the_clock(tmp_path):
    t = _timed(tmp_path, depth=0)
    assert t["meets"] and t["wns_ns"] == 0 and t["failing"] == 0 and t["fmax_mhz"] > 1000
    assert t["critical"]["levels"] <= 5       # the XOR and the buffers of the flops' fanout


def test_report_checks_paths_and_endpoints_are_parsed():
    text = r"""Startpoint: $flatten\\decoder.$auto$ff.cc:266:slice$44960
            (rising edge-triggered flip-flop clocked by clk)
Endpoint: out_port[3] (output port clocked by clk)
Path Group: clk
Path Type: max

    Delay      Time   Description
-------------------------------------------------------------
   0.0000    0.0000   clock clk (rise edge)
   0.0000    0.0000 ^ $flatten\\decoder.$auto$ff.cc:266:slice$44960/CK (DFF_X1)
   0.0917    0.0917 ^ $flatten\\decoder.$auto$ff.cc:266:slice$44960/Q (DFF_X1)
   0.0549    0.1465 ^ $flatten\\cmdtable.$abc$1$x$2/Z (BUF_X1)
   0.0751    0.2216 v $flatten\\cmdtable.$abc$1$x$3/ZN (NAND2_X1)
   0.0000    0.2216 v out_port[3] (out)
             0.2216   data arrival time

   1.0000    1.0000   clock clk (rise edge)
             1.0000   data required time
-------------------------------------------------------------
             1.0000   data required time
            -0.2216   data arrival time
-------------------------------------------------------------
             0.7784   slack (MET)
"""
    q_of = {r"$flatten\\decoder.$auto$ff.cc:266:slice$44960": "decoder.geo.in_addr[31]"}
    p = parse_path(text, q_of)
    assert p["start"] == "decoder.geo.in_addr[31]" and p["end"] == "out_port[3]"
    assert p["start_kind"].startswith("rising edge") and p["end_kind"] == "output port clocked by clk"
    assert (p["arrival_ns"], p["required_ns"], p["slack_ns"]) == (0.2216, 1.0, 0.7784)
    assert p["levels"] == 2 and p["buffers"] == 1 and p["cells"] == ["BUF_X1", "NAND2_X1"]
    ends = parse_endpoints(r"""
$flatten\\decoder.$auto$ff.cc:266:slice$44960/D (DFF_X1)    0.9634    3.7932   -2.8298 (VIOLATED)
y[0] (output)    1.0000    0.1000    0.9000
""", q_of)
    assert ends == [("decoder.geo.in_addr[31]", -2.8298), ("y[0]", 0.9)]
    assert signal_module("decoder.geo.in_addr[31]") == "decoder.geo"
    assert signal_module("decoder.$signal$8[2]") == "decoder" and signal_module("y[0]") == ""


@pytest.mark.fpga
def test_ecp5_place_and_route_out_of_context_gives_a_slower_fmax_for_the_longer_path(tmp_path):
    from syncfabric.fpga.fpgasynth import ecp5_fmax, synthesize_ecp5

    fmax = {}
    for depth in (0, 2):
        il = tmp_path / f"chain{depth}.il"
        il.write_text(rtlil.convert(_Chain(depth), name="chain"))
        work = tmp_path / f"fpga{depth}"
        counts = synthesize_ecp5(il, "chain", work)
        assert counts["FF"] >= 96
        f = ecp5_fmax(work, target_mhz=100)
        assert f["fmax_mhz"] and f["device"].startswith("LFE5U-85K") and f["target_mhz"] == 100
        assert f["meets"] == (f["fmax_mhz"] >= 100)
        fmax[depth] = f
    # two chained 32-bit multiply-adds (DSP blocks and carry chains) against one XOR between registers
    assert fmax[2]["fmax_mhz"] < fmax[0]["fmax_mhz"] / 2 and not fmax[2]["meets"] and fmax[0]["meets"]
    assert {p.split("[")[0] for p in fmax[2]["critical_path"]} <= {"ra", "rb", "acc", "y"}


@pytest.mark.fpga
def test_ecp5_place_and_route_stopped_at_its_time_limit_says_it_did_not_route(tmp_path):
    from syncfabric.fpga.fpgasynth import ecp5_fmax, synthesize_ecp5

    il = tmp_path / "chain.il"
    il.write_text(rtlil.convert(_Chain(2), name="chain"))
    synthesize_ecp5(il, "chain", tmp_path)
    f = ecp5_fmax(tmp_path, time_limit_s=0.2)      # the tool does not even start in 0.2 s
    assert not f["routed"] and not f["meets"] and f["fmax_mhz"] is None and f["critical_path"] is None
