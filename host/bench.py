"""Engine benchmarks behind ``syncfabric bench``: figures printed as tables (and JSON), never asserted here.

``efficiency``  all-reduce on uni- and bidirectional rings: cycles against the link bound, bus bandwidth, the
                NPU memory traffic per endpoint (ACE reads and writes each payload byte once).
``simspeed``    the same job on each simulator with each NPU memory (HDL RAMs, cocotbext-axi models):
                simulated cycles per wall second.
``sweep``       chunk buffers x FSMs on one build (through the PART and FSM_LIMIT registers): where extra SRAM
                and FSMs stop paying (the shape of ACE Fig. 9a).
``faults``      a fault-injection campaign (:mod:`syncfabric.host.faults`): random collectives on links that
                flip bits; completions exact, with an error, silent (must be 0) and hung (must be 0).
``transports``  the host API's backends on the same all-reduces: simulated cycles per wall second and the
                host's own wall time per collective (driver, API and transport: everything outside the
                simulator).

Every run checks every output byte against the golden model; a failing run is reported and makes the command
exit non-zero.
"""

import json
import sys
import time

from ..sim.golden.topology import Torus
from ..sim.golden.topology import parse as parse_topology
from .run import passed, run_collective

__all__ = ["BENCH_LATENCY", "bench_efficiency", "bench_latency", "bench_npu_mem", "bench_simspeed", "bench_sweep",
           "bench_transports", "busbw", "main"]


def busbw(r):
    """Bus bandwidth in bytes per cycle (nccl-tests' definition: algorithm bandwidth x 2(P-1)/P for all-reduce,
    x (P-1)/P for reduce-scatter and all-gather)."""
    p = r["npus"]
    factor = 2 * (p - 1) / p if r["collective"] == "allreduce" else (p - 1) / p
    return r["bytes"] * factor / r["cycles"] if r["cycles"] else 0.0


def _row(r):
    return {
        "topology": r["topology"], "bytes": r["bytes"], "config": r.get("config"), "backend": r["backend"],
        "buffers": r.get("buffers"), "fsms": r.get("fsms"), "cycles": r["cycles"],
        "bound_cycles": r["bound_cycles"], "memory_cycles": r["memory_cycles"],
        "link_efficiency": r["link_efficiency"], "chunk_bytes": r["chunk_bytes"], "rate": r.get("rate"),
        "step_gap_per_step": r.get("step_gap_per_step"),
        "busbw_bytes_per_cycle": round(busbw(r), 3),
        "mem_read_bytes": sorted(set(r["mem_read_bytes"])), "mem_write_bytes": sorted(set(r["mem_write_bytes"])),
        "sim_cycles_per_s": r["sim_cycles_per_s"], "build_s": r.get("build_s"), "wall_s": r["wall_s"],
        "threads": r.get("threads", 1), "passed": passed(r),
    }


def _table(rows, cols):
    head = " | ".join(c for c, _ in cols)
    lines = [head, " | ".join("---" for _ in cols)]
    for row in rows:
        lines.append(" | ".join(fmt(row) for _, fmt in cols))
    return "\n".join(lines)


#: The engine benchmarks' link latency on rings and switches when none is given (a torus keeps its own links).
BENCH_LATENCY = 10


def bench_latency(topology, latency):
    """The link latency an engine benchmark runs ``topology`` with: ``latency`` when given; otherwise
    :data:`BENCH_LATENCY` on rings and switches and ``None`` (the topology's own links) on a torus, whose
    package hierarchy (90-cycle local, 500-cycle inter-package links at 1/8 rate) is the point of running one."""
    if latency is not None:
        return latency
    return None if isinstance(parse_topology(topology), Torus) else BENCH_LATENCY


def bench_npu_mem(backend, npu_mem=None):
    """The NPU memories an engine benchmark runs with: ``npu_mem`` when given, else the HDL RAMs on Verilator
    and Icarus (as ``syncfabric run``; about 3x faster than the cocotbext-axi models) and the simulator's own
    model on Amaranth."""
    return npu_mem or ("hdl" if backend in ("verilator", "icarus") else "cocotb")


def _run(progress, **kw):
    kw["latency"] = bench_latency(kw["topology"], kw.get("latency"))
    t0 = time.monotonic()
    r = run_collective(progress=progress, **kw)
    if progress:
        state = "ok" if passed(r) else "FAILED"
        print(f"  {kw.get('topology')} {kw.get('nbytes')} B on {kw.get('backend')}"
              + (f", {kw['buffers']} buffers" if kw.get("buffers") else "")
              + (f", {kw['fsms']} FSMs" if kw.get("fsms") else "")
              + f": {r['cycles']} cycles, efficiency {r['link_efficiency']:.3f} ({state}, "
              f"{time.monotonic() - t0:.0f} s)", flush=True)
    return r


def bench_efficiency(config="paper", sizes=(1 << 20,), topologies=("ring:8", "bidir-ring:8"), latency=None,
                     backend="verilator", progress=True, rate=None, chunk_bytes=None, threads="auto",
                     npu_mem=None):
    """All-reduce of each size on each topology (``config``: a profile name or an AceConfig; ``latency``:
    :func:`bench_latency`; ``rate``: every link's flits per cycle, default the topology's; ``chunk_bytes``:
    default the largest; ``threads``: Verilator threads; ``npu_mem``: :func:`bench_npu_mem`); returns the
    rows."""
    rows = []
    for topo in topologies:
        for size in sizes:
            rows.append(_row(_run(progress, collective="allreduce", topology=topo, nbytes=size, dtype="fp32",
                                  op="sum", config=config, latency=latency, backend=backend, rate=rate,
                                  chunk_bytes=chunk_bytes, threads=threads,
                                  npu_mem=bench_npu_mem(backend, npu_mem))))
    return rows


def bench_simspeed(config="paper", nbytes=1 << 20, topology="ring:8", latency=None,
                   backends=("verilator", "icarus"), npu_mems=("hdl", "cocotb"), progress=True, partitions=(),
                   threads=("auto",)):
    """The same all-reduce on each backend with each kind of NPU memory (the HDL RAMs inside the design, the
    cocotbext-axi models), then with the HDL RAMs as each number of ``partitions`` (simulator processes,
    :mod:`syncfabric.host.transports.ace.partition`); on Verilator with the first of ``threads`` (simulation threads per
    process), and with the HDL RAMs in one process with each of the others; returns the rows
    (``sim_cycles_per_s``, cycles over wall time from the first doorbell to the last completion, is the
    figure; ``wall_s`` the whole run)."""
    rows = []
    for b in backends:
        verilog = b in ("verilator", "icarus")      # Amaranth's simulator has its own Python memory model
        first = threads[0] if b == "verilator" else 1
        runs = [(mem, None, first) for mem in (npu_mems if verilog else ("cocotb",))]
        runs += [("hdl", None, t) for t in threads[1:] if b == "verilator"]
        runs += [("hdl", p, first) for p in partitions if verilog]
        for mem, parts, t in runs:
            row = _row(_run(progress, collective="allreduce", topology=topology, nbytes=nbytes, dtype="fp32",
                            op="sum", config=config, latency=latency, backend=b, npu_mem=mem, partitions=parts,
                            threads=t))
            rows.append({**row, "npu_mem": mem if verilog else "Python model", "partitions": parts or 1})
    return rows


def bench_sweep(config="paper", nbytes=1 << 20, topology="ring:8", latency=None, buffers=(4, 8, 16, 32),
                fsms=(1, 2, 4, 8, 16), backend="verilator", progress=True, rate=None, chunk_bytes=None,
                threads="auto", npu_mem=None):
    """All-reduce with each (buffers, FSMs) pair the configuration has (the other options as
    :func:`bench_efficiency`); returns the rows."""
    from ..hdl.ace.config import AceConfig

    cfg = config if isinstance(config, AceConfig) else AceConfig.profile(config)
    rows = []
    for b in buffers:
        for f in fsms:
            if b > cfg.n_buffers or f > cfg.n_fsms:
                continue
            rows.append(_row(_run(progress, collective="allreduce", topology=topology, nbytes=nbytes,
                                  dtype="fp32", op="sum", config=config, latency=latency, backend=backend,
                                  buffers=b, fsms=f, rate=rate, chunk_bytes=chunk_bytes, threads=threads,
                                  npu_mem=bench_npu_mem(backend, npu_mem))))
    return rows


COLUMNS = [
    ("topology", lambda r: r["topology"]),
    ("bytes/NPU", lambda r: str(r["bytes"])),
    ("chunk", lambda r: str(r["chunk_bytes"])),
    ("backend", lambda r: r["backend"]),
    ("buffers", lambda r: str(r["buffers"])),
    ("FSMs", lambda r: str(r["fsms"])),
    ("cycles", lambda r: str(r["cycles"])),
    ("bound", lambda r: f"{r['bound_cycles']:.0f}"),
    ("memory", lambda r: str(r["memory_cycles"])),
    ("efficiency", lambda r: f"{r['link_efficiency']:.3f}"),
    ("busbw B/cycle", lambda r: f"{r['busbw_bytes_per_cycle']:.2f}"),
    ("mem read/write B per NPU", lambda r: f"{r['mem_read_bytes']}/{r['mem_write_bytes']}"),
    ("sim cycles/s", lambda r: f"{r['sim_cycles_per_s']:.0f}"),
    ("check", lambda r: "ok" if r["passed"] else "FAILED"),
]

#: ``simspeed``'s table: the simulator, the NPU memory, the collective and the rates.
SIMSPEED_COLUMNS = [
    ("topology", lambda r: r["topology"]),
    ("bytes/NPU", lambda r: str(r["bytes"])),
    ("backend", lambda r: r["backend"]),
    ("NPU memory", lambda r: r["npu_mem"]),
    ("processes", lambda r: str(r.get("partitions", 1))),
    ("threads per process", lambda r: str(r.get("threads", 1))),
    ("cycles", lambda r: str(r["cycles"])),
    ("sim cycles/s (doorbell to completion)", lambda r: f"{r['sim_cycles_per_s']:.0f}"),
    ("build s", lambda r: f"{r['build_s']:.0f}" if r.get("build_s") is not None else "-"),
    ("run wall s", lambda r: f"{r['wall_s']:.1f}"),
    ("check", lambda r: "ok" if r["passed"] else "FAILED"),
]


def bench_transports(backends=("amaranth", "verilator", "icarus"), topology="ring:2", nbytes=4096, repeats=5,
                     config="small", latency=10, progress=True):
    """The same ``repeats`` all-reduces of ``nbytes`` per NPU through the host API on each backend. Per
    backend: ``cycles_per_s`` (simulated cycles over the wall time spent in the simulator),
    ``host_ms_per_collective`` (wall time outside the simulator per collective: the API, the driver's
    register and memory traffic, the transport), the collective's ``cycles`` (the same on every backend) and
    the start-up time (elaboration or build, bring-up)."""
    import numpy as np

    from .system import System

    rows = []
    for backend in backends:
        t0 = time.monotonic()
        with System({"topology": topology, "engine": {"profile": config}, "links": {"latency": latency}},
                    backend=backend, progress=progress) as system:
            start_s = time.monotonic() - t0
            count = nbytes // 4
            a, b = system.register(nbytes), system.register(nbytes)
            for r in range(system.size):
                a.write(r, np.arange(count, dtype=np.float32))
            system.world.allreduce(a, b, count).wait()          # load the program outside the measurement
            sim0, cyc0, w0 = system.backend.sim_seconds, system.now, time.monotonic()
            cycles = [system.world.allreduce(a, b, count).wait().cycles for _ in range(repeats)]
            wall = time.monotonic() - w0
            sim_s = system.backend.sim_seconds - sim0
            sim_cycles = system.now - cyc0
        rows.append({"backend": backend, "topology": topology, "bytes": nbytes, "repeats": repeats,
                     "cycles": cycles[-1], "sim_cycles": sim_cycles, "cycles_per_s": round(sim_cycles / sim_s, 1),
                     "host_ms_per_collective": round(1e3 * (wall - sim_s) / repeats, 2),
                     "wall_s_per_collective": round(wall / repeats, 3), "startup_s": round(start_s, 1),
                     "passed": len(set(cycles)) == 1})
        if progress:
            print(f"  {backend}: {rows[-1]['cycles_per_s']:.0f} cycles/s, host {rows[-1]['host_ms_per_collective']}"
                  f" ms per collective", flush=True)
    return rows


TRANSPORT_COLUMNS = [
    ("backend", lambda r: r["backend"]),
    ("all-reduce", lambda r: f"{r['bytes']} B on {r['topology']}"),
    ("cycles", lambda r: str(r["cycles"])),
    ("simulated cycles/s", lambda r: f"{r['cycles_per_s']:,.0f}"),
    ("host ms per collective", lambda r: f"{r['host_ms_per_collective']:.2f}"),
    ("wall s per collective", lambda r: f"{r['wall_s_per_collective']:.3f}"),
    ("start-up s", lambda r: f"{r['startup_s']:.1f}"),
]


def _one_threads(args):
    threads = args.threads or ["auto"]
    if len(threads) > 1:
        raise ValueError(f"bench {args.bench} takes one --threads (simspeed takes several)")
    return threads[0]


def main(args):
    """Run the benchmark ``args.bench`` with the parsed command line options; print a table."""
    sizes = args.bytes or [1 << 20]
    if args.bench in ("transports", "faults") and args.latency is None:
        args.latency = BENCH_LATENCY
    links = (f"link latency {args.latency} cycles" if args.latency is not None else
             f"link latency {BENCH_LATENCY} cycles on rings and switches, a torus's own links")
    print(f"syncfabric bench {args.bench}: engine configuration {args.config}, {links}", flush=True)
    if args.bench == "efficiency":
        rows = bench_efficiency(args.config, sizes, args.topology or ["ring:8", "bidir-ring:8"], args.latency,
                                args.backend or "verilator", rate=args.rate, chunk_bytes=args.chunk_bytes,
                                threads=_one_threads(args), npu_mem=args.npu_mem)
    elif args.bench == "transports":
        rows = bench_transports([args.backend] if args.backend else ["amaranth", "verilator", "icarus"],
                                (args.topology or ["ring:2"])[0], sizes[0] if args.bytes else 4096,
                                config=args.config, latency=args.latency)
        print(_table(rows, TRANSPORT_COLUMNS))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)
        return 0 if all(r["passed"] for r in rows) else 1
    elif args.bench == "faults":
        from .faults import fault_campaign, parse_faults, report

        from .cli import engine_config_of

        config = engine_config_of(args)
        summary = fault_campaign(args.collectives, (args.topology or ["ring:4"])[0], parse_faults(args.fault),
                                 config, args.backend or "verilator", max_bytes=(args.bytes or [4096])[0],
                                 seed=args.seed, latency=args.latency)
        print(report(summary))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=2)
        return 0 if summary["silent"] == 0 and summary["hung"] == 0 else 1
    elif args.bench == "simspeed":
        rows = bench_simspeed(args.config, sizes[0], (args.topology or ["ring:8"])[0], args.latency,
                              [args.backend] if args.backend else ["verilator", "icarus"],
                              partitions=args.partitions or (), threads=args.threads or ["auto"])
        print(_table(rows, SIMSPEED_COLUMNS))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)
        return 0 if all(r["passed"] for r in rows) else 1
    else:
        rows = bench_sweep(args.config, sizes[0], (args.topology or ["ring:8"])[0], args.latency,
                           args.buffers or [4, 8, 16, 32], args.fsms or [1, 2, 4, 8, 16],
                           args.backend or "verilator", rate=args.rate, chunk_bytes=args.chunk_bytes,
                           threads=_one_threads(args), npu_mem=args.npu_mem)
    print(_table(rows, COLUMNS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    from .cli import main as cli_main

    sys.exit(cli_main(["bench", *sys.argv[1:]]))
