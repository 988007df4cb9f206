"""The reproductions behind ``syncfabric perf``: each returns its rows and writes ``NAME.csv``, ``NAME.json``
and ``NAME.svg`` into an output folder (``docs/perf.md`` lists them with the papers' numbers)."""

import csv
import json
import math
import os
import time

import numpy as np

from ..golden import byteps as bp
from . import byteps_pipeline as bpp
from ..golden import coarse as co
from ..golden import rna as rna_model
from .collective import collective_time
from .sweep import run_sweep
from .svg import bar_chart, line_chart
from .system import CONFIGS, Endpoint, SystemParams, endpoint, paper_compute, torus_for
from .training import simulate
from .workload import load_workload

__all__ = ["fig5", "fig6", "fig9a", "fig9b", "fig10", "fig11", "fig12", "pass_utilization", "byteps",
           "byteps_pipeline", "coarse", "rna", "bench", "write_outputs",
           "FIG11_SIZES"]

MB = 1 << 20
GB = 1e9
FIG11_SIZES = (16, 32, 64, 128)


def write_outputs(out_dir, name, rows, meta=None):
    """Write ``rows`` (a list of flat dicts) as ``name.csv`` and, with ``meta``, ``name.json``."""
    os.makedirs(out_dir, exist_ok=True)
    if rows:
        keys = list(rows[0])
        for r in rows[1:]:
            keys += [k for k in r if k not in keys]
        with open(os.path.join(out_dir, name + ".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, keys)
            w.writeheader()
            w.writerows(rows)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump({"meta": meta or {}, "rows": rows}, f, indent=1)
    return os.path.join(out_dir, name + ".svg")


# ---- Fig. 5: network bandwidth driven vs memory bandwidth -------------------------------------------------

def _fig5_point(args):
    npus, kind, mem, nbytes = args
    if kind == "Ideal":
        ep = CONFIGS["Ideal"]
    elif kind == "ACE":
        ep = CONFIGS["ACE"].replace(comm_mem_bw=mem * GB)
    else:
        ep = Endpoint("Baseline", "npu", comm_mem_bw=mem * GB, comm_sms=80)
    r = collective_time("allreduce", nbytes, torus_for(npus), ep)
    return {"npus": npus, "config": kind, "mem_bw_GBps": mem, "time_us": r.time * 1e6,
            "network_bw_GBps": r.network_bw / GB}


def fig5(out_dir, sizes=(16, 64), mem_bws=(32, 64, 96, 128, 192, 256, 350, 450, 600, 900), nbytes=64 * MB,
         scheduler="processes", progress=True):
    """ACE Fig. 5: network bandwidth one NPU drives in a 64 MB all-reduce against the memory bandwidth given
    to communication, baseline vs ACE (Ideal for reference); and the bandwidth each needs for 90% of Ideal."""
    pts = [(n, k, m, nbytes) for n in sizes for k in ("Baseline", "ACE") for m in mem_bws]
    pts += [(n, "Ideal", 0, nbytes) for n in sizes]
    rows, backend = run_sweep(_fig5_point, pts, scheduler=scheduler, progress=progress, label="fig5")
    need = {}
    for n in sizes:
        ideal = next(r["network_bw_GBps"] for r in rows if r["npus"] == n and r["config"] == "Ideal")
        for k in ("Baseline", "ACE"):
            ok = [r["mem_bw_GBps"] for r in rows if r["npus"] == n and r["config"] == k
                  and r["network_bw_GBps"] >= 0.9 * ideal]
            need[f"{k}@{n}"] = min(ok) if ok else None
    # Section VI-A: NPU memory read per byte sent, from the programs (baseline 1.5 on a ring, ACE 1/2.25 on 4x4x4).
    from .profile import profile
    reads = {}
    for n in sizes:
        prof = profile("allreduce", torus_for(n))
        reads[n] = {"baseline": prof.npu_read_per_sent, "ACE": 1 / prof.sent_per_read}
    svg = write_outputs(out_dir, "fig5", rows, {"bytes": nbytes, "mem_for_90pct_ideal_GBps": need,
                                                "read_per_sent": reads, "backend": backend})
    series = {f"{k} {n} NPUs": [(r["mem_bw_GBps"], r["network_bw_GBps"]) for r in rows
                                if r["npus"] == n and r["config"] == k] for n in sizes for k in ("Baseline", "ACE")}
    line_chart(svg, "Fig. 5: 64 MB all-reduce", "memory BW for communication (GB/s)", "network BW (GB/s)",
               series)
    return rows, need, reads


# ---- Fig. 6: network bandwidth driven vs SMs given to communication ----------------------------------------

def fig6(out_dir, sizes=(16, 64), sms=tuple(range(1, 13)), budgets=(450, 900), nbytes=64 * MB):
    """ACE Fig. 6: network bandwidth a baseline NPU drives in a 64 MB all-reduce against the SMs that run it.
    Each SM moves ``system.sm_bw`` (64 B/cycle at 1245 MHz = 80 GB/s) of memory traffic, so ``k`` SMs reach
    ``min(k x 80 GB/s, budget)`` of memory bandwidth, the budget being what the NPU gives to communication
    (450 GB/s: BaselineCommOpt's; 900 GB/s: all of it). Rows carry the fraction of Ideal; the meta, per size
    and budget, the fewest SMs reaching 90% of Ideal and the fewest saturating the budget's bandwidth."""
    if nbytes < 1:
        raise ValueError(f"all-reduce bytes must be at least 1, got {nbytes}")
    if not sms or min(sms) < 1:
        raise ValueError(f"SM counts must be at least 1, got {sorted(sms)}")
    if not budgets or not all(math.isfinite(b) and b > 0 for b in budgets):
        raise ValueError(f"memory budgets must be positive, got {sorted(budgets)}")
    system = SystemParams()
    rows, summary = [], {}
    for n in sizes:
        ideal = collective_time("allreduce", nbytes, torus_for(n), CONFIGS["Ideal"], system).network_bw / GB
        for b in budgets:
            sel = []
            for k in sorted(set(sms)):
                ep = Endpoint("Baseline", "npu", comm_mem_bw=b * GB, comm_sms=k)
                bw = collective_time("allreduce", nbytes, torus_for(n), ep, system).network_bw / GB
                sel.append({"npus": n, "mem_budget_GBps": b, "sms": k,
                            "sm_mem_bw_GBps": min(k * system.sm_bw, b * GB) / GB,
                            "network_bw_GBps": bw, "of_ideal": bw / ideal})
            top = sel[-1]["network_bw_GBps"]
            summary[f"{n}@{b}"] = {
                "ideal_GBps": ideal,
                "sms_for_90pct_ideal": next((r["sms"] for r in sel if r["of_ideal"] >= 0.9), None),
                "sms_to_saturate": next(r["sms"] for r in sel if r["network_bw_GBps"] >= 0.999 * top)}
            rows += sel
    svg = write_outputs(out_dir, "fig6", rows, {"bytes": nbytes, "sm_bw_GBps": system.sm_bw / GB,
                                                "summary": summary,
                                                "paper": "6 SMs are enough to reach the 450 GB/s memory BW"})
    series = {f"{n} NPUs, {b} GB/s": [(r["sms"], r["network_bw_GBps"]) for r in rows
                                     if r["npus"] == n and r["mem_budget_GBps"] == b]
              for n in sizes for b in budgets}
    line_chart(svg, "Fig. 6: 64 MB all-reduce, baseline", "SMs for communication", "network BW (GB/s)", series)
    return rows, summary


# ---- Fig. 9a: SRAM x FSMs ---------------------------------------------------------------------------------

def _fig9_point(args):
    sram_mb, fsms, npus, nbytes = args
    ep = CONFIGS["ACE"].replace(sram_bytes=int(sram_mb * MB), n_fsms=fsms)
    r = collective_time("allreduce", nbytes, torus_for(npus), ep)
    return {"sram_MB": sram_mb, "fsms": fsms, "time_us": r.time * 1e6, "network_bw_GBps": r.network_bw / GB}


def fig9a(out_dir, srams=(0.5, 1, 2, 4, 8), fsms=(4, 8, 12, 16, 20), npus=128, nbytes=64 * MB,
          scheduler=None, progress=True):
    """ACE Fig. 9a: ACE's all-reduce bandwidth over SRAM size x FSM count (normalized to the best point)."""
    pts = [(s, f, npus, nbytes) for s in srams for f in fsms]
    rows, backend = run_sweep(_fig9_point, pts, scheduler=scheduler, progress=progress, label="fig9a")
    best = max(r["network_bw_GBps"] for r in rows)
    for r in rows:
        r["normalized"] = r["network_bw_GBps"] / best
    svg = write_outputs(out_dir, "fig9a", rows, {"npus": npus, "bytes": nbytes, "backend": backend})
    series = {f"{s} MB": [(r["fsms"], r["normalized"]) for r in rows if r["sram_MB"] == s] for s in srams}
    line_chart(svg, f"Fig. 9a: ACE SRAM x FSMs ({npus} NPUs, all-reduce)", "FSMs", "performance (normalized)",
               series)
    return rows, backend


# ---- Fig. 9b: ACE utilization per pass --------------------------------------------------------------------

def _busy(intervals, lo, hi):
    """Length of the union of ``intervals`` (``(start, end)``) inside ``[lo, hi]``."""
    busy, edge = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, edge), min(b, hi)
        if b > a:
            busy += b - a
            edge = b
    return busy


def pass_utilization(res, iteration):
    """ACE's utilization in each pass of ``iteration`` of a :func:`~.training.simulate` result: the share of
    the pass's window during which the network runs a collective the pass issued. The window opens when the
    pass starts on the compute stream and closes when the later of the pass and its last collective ends, so
    the engine's idle time counts both while it waits for the compute between collectives and while the
    pass computes with nothing issued (a pass without collectives: 0). ``from_first``: the same share of the
    window opening at the pass's first collective instead (the compute before it not counted). Returns
    ``{pass: row}``."""
    out = {}
    for it, ps, start, end in res.passes:
        if it != iteration:
            continue
        mine = [iv for iv in res.history if iv.iteration == iteration and iv.phase == ps]
        stop = max([end] + [iv.end for iv in mine])
        busy = _busy([(iv.start, iv.end) for iv in mine], start, stop)
        first = min([iv.issued for iv in mine], default=stop)
        out[ps] = {"pass": ps, "collectives": len(mine), "window_us": (stop - start) * 1e6,
                   "busy_us": busy * 1e6, "utilization": busy / (stop - start) if stop > start else 0.0,
                   "from_first": busy / (stop - first) if stop > first else 0.0}
    return out


#: ACE Fig. 9b's back-propagation utilizations (section VI-B); forward is near zero, DLRM's low.
PAPER_FIG9B_BWD = {"resnet50": 0.964, "gnmt": 0.913, "dlrm": 0.883}


def fig9b(out_dir, workloads=("resnet50", "gnmt", "dlrm"), npus=128, compute="paper", compute_efficiency=1.0,
          iterations=3):
    """ACE Fig. 9b: ACE's average utilization in the forward and back-propagation passes
    (:func:`pass_utilization`) of the iteration before the last of ``iterations`` (its all-reduces finish
    during the last one's forward pass; the last one's own are never waited for)."""
    if iterations < 3:
        raise ValueError(f"fig9b needs at least 3 iterations (the measured one has a next), got {iterations}")
    topo = torus_for(npus)
    system = SystemParams(compute_efficiency=compute_efficiency)
    rows = []
    for w in workloads:
        wl = load_workload(w)
        res = simulate(wl, topo, CONFIGS["ACE"], system, iterations=iterations,
                       compute_s=_compute_s(compute, wl.name, "ACE"))
        for r in pass_utilization(res, iterations - 2).values():
            rows.append({"workload": wl.name, **r, "paper": PAPER_FIG9B_BWD.get(wl.name) if r["pass"] == "bwd"
                         else None})
    svg = write_outputs(out_dir, "fig9b", rows, {"npus": npus, "compute": compute,
                                                 "compute_efficiency": compute_efficiency,
                                                 "paper_bwd": PAPER_FIG9B_BWD})
    groups = [(w, [(r["pass"], [r["utilization"]]) for r in rows if r["workload"] == w])
              for w in dict.fromkeys(r["workload"] for r in rows)]
    bar_chart(svg, f"Fig. 9b: ACE utilization per pass ({npus} NPUs)", "utilization", groups, ["utilization"])
    return rows


# ---- Hierarchical decompositions: ACE's and ASTRA-sim's, algorithm for algorithm ---------------------------

def algorithms(out_dir, topology="torus:4x4x4", nbytes=64 * MB, configs=("ACE", "Ideal"),
               decompositions=None, directions=(("bidir",) * 3,), progress=True):
    """One all-reduce on a torus in each way of :data:`.profile.TORUS_ALLREDUCES` (the decompositions, and
    ``rotated``: the engine's ``hierarchical-rotated`` program, skipped where it does not run) and each
    per-dimension link direction set, for each endpoint configuration: the phases, bytes sent per byte an
    engine reads, the bandwidth bound of the busiest port and the model's time (``of_bound``: bound / time)."""
    from ..golden.algorithms import supported_algorithms
    from ..golden.topology import Torus, parse
    from .collective import collective_time
    from .profile import TORUS_ALLREDUCES, profile, torus_algorithm
    from .system import endpoint

    topo = parse(topology)
    if not isinstance(topo, Torus):
        raise ValueError(f"--topology {topology}: decompositions are a torus's (got {type(topo).__name__})")
    rows = []
    for dirs in directions:
        for dec in decompositions or TORUS_ALLREDUCES:
            if dec == "rotated":        # the engine's rotated program: bidirectional rings, V and H > 1 only
                if tuple(dirs) != ("bidir",) * 3 or \
                        "hierarchical-rotated" not in supported_algorithms("allreduce", topo):
                    continue
                algo = "hierarchical-rotated"
            else:
                algo = torus_algorithm(dec, dirs)
            prof = profile("allreduce", topo, algo)
            for name in configs:
                r = collective_time("allreduce", nbytes, topo, endpoint(name), algorithm=algo)
                rows.append({"decomposition": dec, "directions": ",".join(dirs), "config": endpoint(name).name,
                             "phases": " ".join(p.name for p in prof.phases),
                             "sent_per_read": round(prof.sent_per_read, 4),
                             "bound_us": r.bound * 1e6, "time_us": r.time * 1e6,
                             "of_bound": r.bound / r.time if r.time else 0.0,
                             "algbw_GBps": nbytes / r.time / 1e9 if r.time else 0.0})
                if progress:
                    print(f"  {algo} {rows[-1]['config']}: {r.time * 1e6:.1f} us", flush=True)
    write_outputs(out_dir, "algorithms", rows, {"topology": topo.spec, "bytes": nbytes})
    return rows


# ---- Fig. 10: utilization timelines ----------------------------------------------------------------------

def _utilization(res, system, topo, bins):
    from ..golden.topology import parse
    t = parse(topo)
    cap = sum(t.link_attr(0, p).rate * system.link_bw for p in range(t.n_ports) if t.has_tx(0, p))
    start = min(iv.start for iv in res.timeline)
    end = start + res.time
    edges = np.linspace(start, end, bins + 1)
    comp, net = np.zeros(bins), np.zeros(bins)
    for iv in res.timeline:
        if iv.kind in ("fwd", "wg", "ig"):
            _spread(comp, edges, iv.start, iv.end, 1.0)
    for iv in res.network:
        if iv.end > iv.start:
            _spread(net, edges, iv.start, iv.end, iv.sent / (iv.end - iv.start) / cap)
    return edges, comp, net


def _spread(acc, edges, a, b, level):
    w = edges[1] - edges[0]
    for i in range(len(acc)):
        lo, hi = max(a, edges[i]), min(b, edges[i + 1])
        if hi > lo:
            acc[i] += level * (hi - lo) / w


def fig10(out_dir, workload="resnet50", npus=128, bins=100, progress=True, compute_efficiency=1.0, compute="paper"):
    """ACE Fig. 10: compute and network utilization over one steady-state iteration, per configuration.
    ``compute``: ``"paper"`` uses the paper-derived compute per iteration where there is one
    (:data:`~.system.PAPER_COMPUTE_S`), ``"roofline"`` the roofline."""
    wl = load_workload(workload)
    system = SystemParams(compute_efficiency=compute_efficiency)
    topo = torus_for(npus)
    rows, series = [], {}
    for name in ("BaselineCommOpt", "BaselineCompOpt", "ACE", "Ideal"):
        res = simulate(wl, topo, CONFIGS[name], system, compute_s=_compute_s(compute, wl.name, name))
        edges, comp, net = _utilization(res, system, topo, bins)
        t0 = edges[0]
        for i in range(bins):
            rows.append({"config": name, "t_ms": (edges[i] - t0) * 1e3, "compute_util": comp[i],
                         "network_util": net[i]})
        series[f"{name} compute"] = [((edges[i] - t0) * 1e3, comp[i]) for i in range(bins)]
        series[f"{name} network"] = [((edges[i] - t0) * 1e3, net[i]) for i in range(bins)]
    svg = write_outputs(out_dir, f"fig10_{wl.name}", rows, {"workload": wl.name, "npus": npus,
                                                            "compute_efficiency": compute_efficiency,
                                                            "compute": compute})
    line_chart(svg, f"Fig. 10: {wl.name}, {npus} NPUs", "time in iteration (ms)", "utilization", series, step=True)
    return rows


# ---- Fig. 11: iteration time across sizes ------------------------------------------------------------------

def _compute_s(compute, wl_name, cfg):
    if compute not in ("paper", "roofline"):
        raise ValueError(f"compute must be paper or roofline, not {compute!r}")
    return paper_compute(wl_name, cfg) if compute == "paper" else None


def _fig11_point(args):
    wl_name, npus, cfg, eff, compute = args
    r = simulate(load_workload(wl_name), torus_for(npus), endpoint(cfg), SystemParams(compute_efficiency=eff),
                 compute_s=_compute_s(compute, wl_name, cfg))
    return {"workload": wl_name, "npus": npus, "config": cfg, "iteration_ms": r.time * 1e3,
            "compute_ms": r.compute * 1e3, "exposed_ms": r.exposed * 1e3}


def fig11(out_dir, workloads=("resnet50", "gnmt", "dlrm"), sizes=FIG11_SIZES, scheduler=None, progress=True,
          compute_efficiency=1.0, compute="paper"):
    """ACE Fig. 11: iteration time (compute + exposed communication) per workload, size and configuration,
    the share of Ideal each reaches and ACE's speedup over the best baseline. ``compute_efficiency`` scales
    the NPU's peak in the roofline; ``compute`` as in :func:`fig10` (see docs/perf.md)."""
    _compute_s(compute, "", "")
    pts = [(w, n, c, compute_efficiency, compute) for w in workloads for n in sizes for c in CONFIGS]
    rows, backend = run_sweep(_fig11_point, pts, scheduler=scheduler, progress=progress, label="fig11")
    summary = {}
    for w in workloads:
        sp, sp_o = [], []
        for n in sizes:
            pick = {r["config"]: r for r in rows if r["workload"] == w and r["npus"] == n}
            ideal = pick["Ideal"]["iteration_ms"]
            for r in pick.values():
                r["of_ideal"] = ideal / r["iteration_ms"]
            best = min(pick[c]["iteration_ms"] for c in CONFIGS if c.startswith("Baseline"))
            pick["ACE"]["speedup_over_best_baseline"] = best / pick["ACE"]["iteration_ms"]
            sp.append(best / pick["ACE"]["iteration_ms"])
            sp_o.append(min(pick[c]["iteration_ms"] for c in ("BaselineCommOpt", "BaselineCompOpt"))
                        / pick["ACE"]["iteration_ms"])
        summary[w] = {"mean_speedup": float(np.mean(sp)), "max_speedup": float(np.max(sp)),
                      "mean_speedup_over_overlapping": float(np.mean(sp_o)),
                      "max_speedup_over_overlapping": float(np.max(sp_o))}
    for c in CONFIGS:
        summary[f"of_ideal_{c}"] = float(np.mean([r["of_ideal"] for r in rows if r["config"] == c]))
    name = "fig11" if compute_efficiency == 1.0 else f"fig11_eff{compute_efficiency:g}"
    if compute != "paper":
        name += "_" + compute
    svg = write_outputs(out_dir, name, rows, {"summary": summary, "backend": backend,
                                              "compute_efficiency": compute_efficiency, "compute": compute})
    groups = [(f"{w} {n}", [(c, [r["compute_ms"], r["exposed_ms"]]) for r in rows
                            for c in [r["config"]] if r["workload"] == w and r["npus"] == n])
              for w in workloads for n in sizes]
    bar_chart(svg, "Fig. 11: iteration time", "ms", groups, ["compute", "exposed communication"])
    return rows, summary


# ---- Fig. 12: DLRM's embeddings off the critical path ----------------------------------------------------

def fig12(out_dir, sizes=(16, 32, 64, 128), configs=("BaselineCompOpt", "ACE"), side_sms=1, side_gbps=80,
          compute_efficiency=1.0, workload="dlrm"):
    """ACE Fig. 12: DLRM's iteration with its embedding lookup and update on a side stream of ``side_sms`` SMs
    and ``side_gbps`` of memory bandwidth (the next iteration's lookup, whose all-to-all is issued as soon as
    it finishes, and the previous iteration's update; :func:`~.training.simulate`'s ``embedding_side``),
    against the default loop, per configuration and size."""
    wl = load_workload(workload)
    if not any(l.alltoall_bytes for l in wl.layers):
        raise ValueError(f"workload {wl.name} has no model-parallel embedding to take off the critical path")
    system = SystemParams(compute_efficiency=compute_efficiency)
    rows = []
    for n in sizes:
        for c in configs:
            base = simulate(wl, torus_for(n), endpoint(c), system)
            opt = simulate(wl, torus_for(n), endpoint(c), system, embedding_side=(side_sms, side_gbps * GB))
            rows.append({"npus": n, "config": endpoint(c).name,
                         "default_ms": base.time * 1e3, "default_compute_ms": base.compute * 1e3,
                         "default_exposed_ms": base.exposed * 1e3, "overlap_ms": opt.time * 1e3,
                         "overlap_compute_ms": opt.compute * 1e3, "overlap_exposed_ms": opt.exposed * 1e3,
                         "speedup": base.time / opt.time})
    svg = write_outputs(out_dir, "fig12", rows, {"workload": wl.name, "side_sms": side_sms,
                                                 "side_GBps": side_gbps, "compute_efficiency": compute_efficiency,
                                                 "paper": {"BaselineCompOpt": 1.05, "ACE": 1.2}})
    groups = [(f"{r['config']} {r['npus']}", [("default", [r["default_compute_ms"], r["default_exposed_ms"]]),
                                             ("overlap", [r["overlap_compute_ms"], r["overlap_exposed_ms"]])])
              for r in rows]
    bar_chart(svg, f"Fig. 12: {wl.name}, embeddings off the critical path", "ms", groups,
              ["compute", "exposed communication"])
    return rows


# ---- BytePS -----------------------------------------------------------------------------------------------

def byteps_traffic_time(n, k, M, B, part_bytes=4 * MB):
    """Time of one BytePS iteration from a simulation of the summation-service traffic: the model is cut into
    parts, each placed on a service by the bucket map; every GPU machine pushes every part to its service and
    pulls the sum back; a machine's time is the larger of the bytes it receives and sends at ``B``."""
    parts = bp.split_parts([M], part_bytes) if part_bytes < M else bp.split_parts([M], max(1, M // bp.bucket_count(n, k)))
    place = bp.place_parts(len(parts), n, k)
    kk = bp.effective_cpu(n, k)
    rx = {("gpu", j): 0.0 for j in range(n)}
    rx.update({("cpu", j): 0.0 for j in range(kk)})
    tx = dict(rx)
    for (_, _, length), srv in zip(parts, place):
        for g in range(n):
            if srv == ("gpu", g):
                continue                          # its own contribution stays local
            tx[("gpu", g)] += length              # push
            rx[srv] += length
            tx[srv] += length                     # the sum goes back
            rx[("gpu", g)] += length
    return max(max(rx[m], tx[m]) for m in rx) / B


def byteps(out_dir, n=32, ks=range(0, 41, 2), M=1 << 30, B=100e9 / 8):
    """BytePS Fig. 12's shape: communication time against CPU machines ``k`` for ``n`` GPU machines, from the
    formula (Eq. 6) and from the summation-service traffic; and the intra-machine PCIe strategies."""
    if not len(ks):
        raise ValueError("BytePS: no CPU machine count k to sweep (the largest k must be at least 0)")
    if n < 2:       # one machine communicates nothing: every speedup would be 0/0
        raise ValueError(f"BytePS: n={n} GPU machines; the figures need at least 2")
    rows = []
    for k in ks:
        model = bp.byteps_time(n, k, M, B)
        simt = byteps_traffic_time(n, k, M, B, part_bytes=max(1, M // (4 * bp.bucket_count(n, k))))
        rows.append({"n": n, "k": k, "model_s": model, "traffic_s": simt, "allreduce_s": bp.allreduce_time(n, M, B),
                     "ps_s": bp.ps_time(n, k, M, B) if k else None,
                     "speedup_over_allreduce": bp.allreduce_time(n, M, B) / model})
    kbest = min(rows, key=lambda r: r["model_s"])["k"]
    # Intra-machine: p switches, m GPUs each; CPU-assisted aggregation vs ring all-reduce.
    pcie = []
    for m, rho in ((4, 1.0), (4, 0.5), (4, 2.0), (2, 1.0), (8, 1.0)):
        b = 13.1e9
        xs = np.linspace(0, 1, 101)
        b_sc = b / rho                            # rho = b_NS / b_SC
        brute = xs[int(np.argmin([bp.pcie_time(x, m, M, b, b_sc) for x in xs]))]
        ar = 2 * (2 * m - 1) * M / (2 * m * 80e9 / 8)
        pcie.append({"m": m, "rho": rho, "x_opt": bp.optimal_x(m, rho), "x_brute": float(brute),
                     "J_ca_s": bp.pcie_time(0, m, M, b, b_sc),
                     "J_opt_s": bp.pcie_time(bp.optimal_x(m, rho), m, M, b, b_sc), "J_allreduce_s": ar})
    svg = write_outputs(out_dir, "byteps", rows, {"best_k": kbest, "pcie": pcie, "M": M, "B": B})
    line_chart(svg, f"BytePS: n={n} GPU machines, {M / 2**30:g} GiB", "CPU machines k", "time (s)",
               {"model (Eq. 6)": [(r["k"], r["model_s"]) for r in rows],
                "traffic simulation": [(r["k"], r["traffic_s"]) for r in rows],
                "all-reduce": [(r["k"], r["allreduce_s"]) for r in rows]})
    return rows, pcie


def byteps_pipeline(out_dir, n=32, B=100e9 / 8, gpu_flops=15.7e12 * 0.5, part_bytes=4 * MB):
    """BytePS's priority pipeline (:mod:`.byteps_pipeline`) on the paper's models we have shapes for, at the
    paper's scalability setting (``n`` machines of 8 GPUs, one NIC of ``B`` each; k = 0 and k = n CPU
    machines): iteration time with partitioning + priority, with partitioning in FIFO order, with whole tensors
    in FIFO order and with communication after the backward pass; ring all-reduce (whole tensors, FIFO: one
    collective per tensor) and the non-colocated PS with k = n (whole tensors, FIFO) as the baselines."""
    if n < 2:
        raise ValueError(f"BytePS: n={n} GPU machines; the figures need at least 2")
    if not (gpu_flops > 0 and B > 0):
        raise ValueError("BytePS pipeline: GPU FLOP/s and bandwidth must be positive")
    rows = []
    c_ar = bpp.per_byte_time("allreduce", n, 0, B)
    for model, layers in bpp.paper_models(gpu_flops).items():
        ar = bpp.iteration(layers, c_ar, None, "fifo", stages=1).time
        ps = bpp.iteration(layers, bpp.per_byte_time("ps", n, n, B), None, "fifo").time
        for k in (0, n):
            c = bpp.per_byte_time("byteps", n, k, B)
            t = {name: bpp.iteration(layers, c, pb, pol, after_backward=after).time
                 for name, pb, pol, after in (("priority", part_bytes, "priority", False),
                                              ("fifo_parts", part_bytes, "fifo", False),
                                              ("fifo_tensors", None, "fifo", False),
                                              ("after_backward", None, "fifo", True))}
            compute = sum(ly.fwd_s + ly.bwd_s for ly in layers)
            rows.append({"model": model, "n": n, "k": k, "grad_MB": sum(ly.grad_bytes for ly in layers) / MB,
                         "compute_ms": compute * 1e3, "comm_ms": sum(ly.grad_bytes for ly in layers) * c * 1e3,
                         **{f"{name}_ms": v * 1e3 for name, v in t.items()},
                         "allreduce_ms": ar * 1e3, "ps_ms": ps * 1e3,
                         "priority_gain": t["fifo_tensors"] / t["priority"],
                         "over_allreduce": ar / t["priority"], "over_ps": ps / t["priority"]})
    svg = write_outputs(out_dir, "byteps_pipeline", rows,
                        {"n": n, "B": B, "gpu_flops": gpu_flops, "part_bytes": part_bytes,
                         "models": bpp.PAPER_MODEL_NOTES})
    bar_chart(svg, f"BytePS priority pipeline: n={n} machines, {B * 8 / 1e9:g} Gb/s", "ms",
              [(f"{r['model']} k={r['k']}", [(name, [r[f"{name}_ms"]]) for name in
                                            ("after_backward", "fifo_tensors", "fifo_parts", "priority")])
               for r in rows], ["iteration time"])
    return rows



# ---- COARSE -----------------------------------------------------------------------------------------------

#: Bandwidth profiles (bytes/s): proxies talk over the memory devices' links, GPUs over PCIe (notes: V100
#: local 9 / remote 16 GB/s, P100 local 25 / remote 18 GB/s; FP32 training throughput of each GPU).
COARSE_PROFILES = {"V100": {"bw_proxy": 16e9, "bw_gpu": 9e9, "flops": 15.7e12},
                   "P100": {"bw_proxy": 18e9, "bw_gpu": 25e9, "flops": 9.3e12}}


def _param_sets():
    bert = [30522 * 1024 + 512 * 1024 + 2 * 1024] + [4 * 1024 * 1024 + 2 * 1024 * 4096 + 4096 + 1024 * 9] * 24 \
        + [1024 * 1024 + 1024]
    resnet = [l.params for l in load_workload("resnet50").layers if l.params]
    return {"BERT-large": ([4 * p for p in bert], 3 * 2 * 340e6 * 128 * 4),      # fp32, 128 tokens x batch 4
            "ResNet-50": ([4 * p for p in resnet], load_workload("resnet50", batch=32).flops)}


def coarse(out_dir, p=4):
    """COARSE dual synchronization: the optimal m (closed form and over layer boundaries, checked by brute
    force) and the iteration time against an all-reduce after back-propagation and against DENSE, per model and
    GPU profile. DENSE (the paper's baseline for Fig. 16: one central parameter server) moves every worker's
    push and pull through the server's one path, ``2 p n`` bytes at the GPU path's bandwidth after
    back-propagation, as :func:`~syncfabric.sim.golden.coarse.dense_cycles` does in cycles."""
    rows = []
    for model, (sizes, flops) in _param_sets().items():
        n = sum(sizes)
        for gpu, prof in COARSE_PROFILES.items():
            t_comp = flops / prof["flops"]
            t_fp, t_bp = t_comp / 3, 2 * t_comp / 3
            m, t = co.optimal_m(n, p, prof["bw_proxy"], prof["bw_gpu"], t_fp, t_bp)
            ml, tl = co.optimal_m(n, p, prof["bw_proxy"], prof["bw_gpu"], t_fp, t_bp, layer_bytes=sizes)
            grid = np.linspace(0, n, 2001)
            brute = min(co.dual_sync_time(x, n, p, prof["bw_proxy"], prof["bw_gpu"], t_fp, t_bp) for x in grid)
            t_ar = t_fp + t_bp + 2 * (p - 1) / p * n / prof["bw_gpu"]
            t_dense = t_fp + t_bp + 2 * p * n / prof["bw_gpu"]
            rows.append({"model": model, "gpu": gpu, "params_MB": n / MB, "m_opt_MB": m / MB, "T_opt_ms": t * 1e3,
                         "m_layers_MB": ml / MB, "T_layers_ms": tl * 1e3, "T_brute_ms": brute * 1e3,
                         "T_allreduce_ms": t_ar * 1e3, "speedup": t_ar / tl, "T_dense_ms": t_dense * 1e3,
                         "speedup_vs_dense": t_dense / tl})
    svg = write_outputs(out_dir, "coarse", rows, {"p": p, "profiles": COARSE_PROFILES})
    bar_chart(svg, f"COARSE dual sync vs all-reduce (p={p})", "ms",
              [(f"{r['model']} {r['gpu']}", [("all-reduce", [r["T_allreduce_ms"]]), ("dual", [r["T_layers_ms"]])])
               for r in rows], ["iteration time"])
    return rows


# ---- RNA --------------------------------------------------------------------------------------------------

def _rna_runs(n, delays, schemes, task, coll, target, max_rounds, seed):
    out = {}
    for name, settings in schemes.items():
        res = rna_model.simulate(task, delays, settings, coll, n, rounds=max_rounds, target_loss=target, seed=seed)
        s = res.summary()
        s["to_target_s"] = res.time_to(target) / 1e3
        s["groups"] = res.groups
        out[name] = s
    return out


def rna(out_dir, ranks=16, delays_ms=(0, 10, 20, 30, 40, 50), compute_ms=100.0, grad_bytes=100 * MB,
        link_GBps=12.5, seed=1, nodes=100, skew=(10.0, 50.0), response_rounds=100, target=0.02,
        max_rounds=3000, dim=64, staleness=4, lr=4.0):
    """RNA as a protocol (:mod:`syncfabric.sim.golden.rna`: controller, probes, expiry, null contributions,
    merging and staleness, hierarchy through a parameter server) on ``ranks`` workers training a least-squares
    model to ``target`` x its initial loss: per straggler delay D (uniform 0..D ms per rank and iteration on
    ``compute_ms``), the mean round and the simulated time to the target for Horovod (a readiness barrier) and
    RNA with 1 and 2 probes; mixed heterogeneity (half the ranks +50-100 ms) with the hierarchical mode; and
    the dissertation's response-time microbenchmark (``nodes`` ranks, tasks of ``skew`` ms, 1-4 probes).
    Collectives take the ring's bandwidth time of ``grad_bytes`` at ``link_GBps`` (EDR InfiniBand); ``lr`` is
    the learning rate of a round every rank contributes to (per contributor ``lr / ranks``)."""
    if ranks < 2:
        raise ValueError(f"RNA ranks {ranks}: need at least 2 (it probes 2 of them)")
    if nodes < 4:
        raise ValueError(f"RNA response benchmark nodes {nodes}: need at least 4 (it probes up to 4)")

    def ring_ms(k):
        return 2 * (k - 1) / k * grad_bytes / (link_GBps * GB) * 1e3 if k > 1 else 0.0

    def bcast_ms(k):
        return grad_bytes / (link_GBps * GB) * 1e3 if k > 1 else 0.0

    coll = rna_model.SumCollectives(ring_ms, bcast_ms)
    task = rna_model.LeastSquares(ranks, dim=dim, seed=seed)
    goal = target * task.loss(task.initial())
    lr = lr / ranks
    schemes = {"barrier": rna_model.RnaSettings(mode="barrier", lr=lr),
               "rna1": rna_model.RnaSettings(probes=1, lr=lr, staleness=staleness),
               "rna2": rna_model.RnaSettings(probes=2, lr=lr, staleness=staleness)}
    rows = []
    for d in delays_ms:
        runs = _rna_runs(ranks, rna_model.Delays(compute_ms, d), schemes, task, coll, goal, max_rounds, seed)
        row = {"delay_ms": d}
        for name, s in runs.items():
            row[f"{name}_ms"] = s["round_ms"]
            row[f"{name}_to_target_s"] = s["to_target_s"]
        for name in ("rna1", "rna2"):
            row[f"{name}_speedup"] = row["barrier_to_target_s"] / row[f"{name}_to_target_s"]
            row[f"{name}_contributors"] = runs[name]["contributors"]
        rows.append(row)
    # mixed heterogeneity: the second half of the ranks 50-100 ms slower; the grouping rule, and two groups
    slow = tuple(range(ranks // 2, ranks))
    mixed_delays = rna_model.Delays(compute_ms, max(delays_ms), slow_ranks=slow)
    halves = [list(range(ranks // 2)), list(slow)]
    mixed = _rna_runs(ranks, mixed_delays, {
        **schemes, "hier_auto": rna_model.RnaSettings(lr=lr, staleness=staleness, groups="auto",
                                                       ps_ms=bcast_ms(2)),
        "hier_halves": rna_model.RnaSettings(lr=lr, staleness=staleness, groups=halves, ps_ms=bcast_ms(2))},
        task, coll, goal, max_rounds, seed)
    for s in mixed.values():
        s["speedup"] = mixed["barrier"]["to_target_s"] / s["to_target_s"]
    # response time (Fig. 5.7): the round ends when the first probed rank is ready; tasks of skew ms
    resp = {}
    micro = rna_model.Delays(skew[0], skew[1] - skew[0])
    tiny = rna_model.LeastSquares(nodes, dim=2, samples=4, batch=1, seed=seed)
    for q in (1, 2, 3, 4):
        res = rna_model.simulate(tiny, micro, rna_model.RnaSettings(probes=q, lr=0.01 / nodes, probe_ms=0.0),
                                 rna_model.SumCollectives(lambda k: 0.0), nodes, rounds=response_rounds, seed=seed)
        resp[q] = float(np.median([r.response_ms for r in res.rounds]))
    meta = {"ranks": ranks, "allreduce_ms": ring_ms(ranks), "seed": seed, "target_loss": goal,
            "median_response_ms": resp, "response_ratio": resp[1] / resp[2], "mixed": mixed,
            "grouping_rule": mixed["hier_auto"]["groups"]}
    svg = write_outputs(out_dir, "rna", rows, meta)
    line_chart(svg, f"RNA: {ranks} ranks, time to {target:g} x initial loss", "max injected delay per rank (ms)",
               "time to target (s)",
               {"ring all-reduce + barrier": [(r["delay_ms"], r["barrier_to_target_s"]) for r in rows],
                "RNA, 1 probe": [(r["delay_ms"], r["rna1_to_target_s"]) for r in rows],
                "RNA, 2 probes": [(r["delay_ms"], r["rna2_to_target_s"]) for r in rows]})
    return rows, meta


# ---- model speed ------------------------------------------------------------------------------------------

def bench(sizes=(16, 128, 1024), workload="resnet50", config="ACE", repeat=3):
    """Simulated iterations per second of the model, cold (profiles and collective times computed) and warm
    (profiles cached). Returns rows; prints nothing."""
    rows = []
    wl = load_workload(workload)
    for n in sizes:
        t0 = time.perf_counter()
        r = simulate(wl, torus_for(n), endpoint(config))
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(repeat):
            simulate(wl, torus_for(n), endpoint(config))
        warm = (time.perf_counter() - t0) / repeat
        rows.append({"npus": n, "topology": torus_for(n), "iteration_ms": r.time * 1e3, "cold_s": cold,
                     "warm_s": warm, "iterations_per_s": r.iterations / warm if warm else math.inf})
    return rows
