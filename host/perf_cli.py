"""``syncfabric perf``: the system performance model's command line (registered by ``host/cli.py``)."""

import json
import sys

from ..sim.perf.profile import DIRECTIONS, TORUS_ALLREDUCES

__all__ = ["register"]


def _add_common(p, out=True):
    if out:
        p.add_argument("--out", default="build/perf", help="folder for the CSV/JSON/SVG outputs (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _eff(p):
    p.add_argument("--compute", choices=("paper", "roofline"), default="paper",
                   help="compute per iteration: 'paper' takes the ACE paper's (derived from section VI-B, ResNet-50 "
                        "only; other workloads fall back to the roofline), 'roofline' the layers' roofline "
                        "(default %(default)s)")
    p.add_argument("--compute-efficiency", type=float, default=1.0,
                   help="fraction of the NPU's peak FLOPs the roofline uses (default 1)")


def _sched(p):
    p.add_argument("--scheduler", default=None,
                   help="Dask scheduler address, 'local' (a LocalCluster) or 'processes' (a process pool); default: "
                        "a LocalCluster when dask.distributed is installed, else a process pool")


def _size(text):
    from .cli import parse_size
    return parse_size(text)


def _directions(text):
    import argparse
    dirs = tuple(d.strip() for d in text.split(","))
    if len(dirs) != 3 or any(d not in DIRECTIONS for d in dirs):
        raise argparse.ArgumentTypeError(f"{text!r}: three of {', '.join(DIRECTIONS)} separated by commas "
                                         f"(local,vertical,horizontal)")
    return dirs


def register(subparsers):
    """Add ``perf`` and its subcommands to the ``syncfabric`` command line."""
    perf = subparsers.add_parser("perf", help="system performance model: training iterations, the ACE, BytePS, "
                                              "COARSE and RNA reproductions, calibration against the RTL")
    sub = perf.add_subparsers(dest="perf_command", required=True)
    p = sub.add_parser("iteration", help="one training iteration of a workload on a system")
    p.add_argument("--workload", default="resnet50", help="built-in name or a YAML file (default %(default)s)")
    p.add_argument("--npus", type=int, default=128, help="system size (default %(default)s)")
    p.add_argument("--topology", default=None, help="topology spec (default: the torus of --npus)")
    p.add_argument("--config", action="append", help="Table VI configuration (repeatable; default all)")
    p.add_argument("--batch", type=int, default=None, help="batch per NPU (default: the workload's)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON ('-' for stdout)")
    p.add_argument("--trace", metavar="FILE",
                   help="a torch.profiler (Kineto) Chrome trace or a Chakra execution trace (JSON) to replay "
                        "instead of --workload: its measured compute and its gradient all-reduces "
                        "(sim/perf/trace.py)")
    _eff(p)
    p = sub.add_parser("fig5", help="network BW driven vs memory BW (ACE Fig. 5)")
    p.add_argument("--npus", type=int, action="append", help="system sizes (default 16 and 64)")
    p.add_argument("--bytes", type=int, default=64 << 20, help="all-reduce bytes (default 64 MiB)")
    _add_common(p)
    _sched(p)
    p = sub.add_parser("fig6", help="network BW driven vs SMs given to communication, baseline (ACE Fig. 6)")
    p.add_argument("--npus", type=int, action="append", help="system sizes (default 16 and 64)")
    p.add_argument("--bytes", type=_size, default=64 << 20, help="all-reduce bytes (default 64M)")
    p.add_argument("--max-sms", type=int, default=12, help="sweep 1..N SMs (default %(default)s)")
    p.add_argument("--mem-gbps", type=float, action="append",
                   help="memory bandwidth budget for communication, GB/s (repeatable; default 450 and 900)")
    _add_common(p)
    p = sub.add_parser("fig9a", help="ACE SRAM size x FSM sweep (ACE Fig. 9a)")
    p.add_argument("--npus", type=int, default=128)
    p.add_argument("--bytes", type=int, default=64 << 20)
    p.add_argument("--sram-mb", type=float, action="append", help="SRAM sizes in MB (repeatable)")
    p.add_argument("--fsms", type=int, action="append", help="FSM counts (repeatable)")
    _add_common(p)
    _sched(p)
    p = sub.add_parser("fig9b", help="ACE utilization in the forward and back-propagation passes (ACE Fig. 9b)")
    p.add_argument("--workload", action="append", help="workloads (default resnet50, gnmt, dlrm)")
    p.add_argument("--npus", type=int, default=128, help="system size (default %(default)s)")
    _eff(p)
    _add_common(p)
    p = sub.add_parser("algorithms", help="all-reduce on a torus decomposed as ACE does and as ASTRA-sim does, "
                                          "per-dimension link directions: phases, traffic, bound, time")
    p.add_argument("--topology", default="torus:4x4x4", help="a torus (default %(default)s)")
    p.add_argument("--bytes", type=_size, default=64 << 20, help="all-reduce bytes per NPU (default 64M)")
    p.add_argument("--config", action="append", help="endpoint configuration (repeatable; default ACE and Ideal)")
    p.add_argument("--decomposition", action="append", choices=TORUS_ALLREDUCES,
                   help="phases of the all-reduce (repeatable; default all): hierarchical (ACE: RS local, AR "
                        "vertical and horizontal on the 1/L share, AG local), rs-ar (ASTRA-sim localBWAware: RS on "
                        "all but the last dimension, AR on the last, AG back), rs-ag (RS on every dimension, AG "
                        "back), baseline (AR on each dimension in turn), rotated (the engine's "
                        "hierarchical-rotated: half of each share AR vertical then horizontal, half the other "
                        "way; bidirectional rings only)")
    p.add_argument("--directions", action="append", type=_directions,
                   help="link direction per dimension, local,vertical,horizontal each bidir or uni (repeatable; "
                        "default bidir,bidir,bidir)")
    _add_common(p)
    p = sub.add_parser("fig10", help="compute and network utilization timelines (ACE Fig. 10)")
    p.add_argument("--workload", default="resnet50")
    p.add_argument("--npus", type=int, default=128)
    _eff(p)
    _add_common(p)
    p = sub.add_parser("fig11", help="iteration time across system sizes and ACE's speedup (ACE Fig. 11)")
    p.add_argument("--workload", action="append", help="workloads (default resnet50, gnmt, dlrm)")
    p.add_argument("--npus", type=int, action="append", help="system sizes (default 16 32 64 128)")
    _eff(p)
    _add_common(p)
    _sched(p)
    p = sub.add_parser("fig12", help="DLRM with its embedding lookup/update off the critical path, "
                                     "BaselineCompOpt and ACE (ACE Fig. 12)")
    p.add_argument("--npus", type=int, action="append", help="system sizes (default 16 32 64 128)")
    p.add_argument("--side-sms", type=int, default=1, help="SMs of the embedding stream (default %(default)s)")
    p.add_argument("--side-gbps", type=float, default=80.0,
                   help="memory bandwidth of the embedding stream, GB/s (default %(default)g)")
    p.add_argument("--compute-efficiency", type=float, default=1.0,
                   help="fraction of the NPU's peak FLOPs the roofline uses (default 1)")
    _add_common(p)
    p = sub.add_parser("byteps", help="BytePS: time vs CPU machines, formula and traffic simulation; PCIe")
    p.add_argument("--n", type=int, default=32, help="GPU machines (default %(default)s)")
    p.add_argument("--kmax", type=int, default=40, help="largest k (default %(default)s)")
    p.add_argument("--pipeline", action="store_true",
                   help="also the priority pipeline (tensor partitioning + priority scheduling) on the paper's "
                        "models at k = 0 and k = n, against FIFO, all-reduce and PS")
    p.add_argument("--gpu-tflops", type=float, default=7.85,
                   help="achieved GPU TFLOP/s of the pipeline's compute (default %(default)s: half a V100's FP32)")
    p.add_argument("--part-mb", type=float, default=4.0, help="partition size, MiB (default %(default)s)")
    _add_common(p)
    p = sub.add_parser("coarse", help="COARSE dual synchronization vs all-reduce")
    p.add_argument("--p", type=int, default=4, help="GPUs (default %(default)s)")
    _add_common(p)
    p = sub.add_parser("rna", help="RNA's protocol under straggler delays: time to a target loss against a "
                                   "barrier, the hierarchical mode, median response time with 1-4 probes")
    p.add_argument("--ranks", type=int, default=16, help="workers (default %(default)s)")
    p.add_argument("--staleness", type=int, default=4,
                   help="largest version gap of a merged gradient (default %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    _add_common(p)
    p = sub.add_parser("sven", help="Sven: four-stage pipeline vs sequential for DeepFM, W&D, DCN; scaling factor; "
                                    "hot-embedding placement's hit ratio vs alpha (hot, random, LRU, importance)")
    p.add_argument("--npus", type=int, default=16, help="GPUs of the pipeline comparison (default %(default)s)")
    p.add_argument("--scaling-npus", type=int, action="append",
                   help="GPU counts of the scaling factor (repeatable; default 1 8 16 32 64 128)")
    p.add_argument("--iterations", type=int, default=100, help="pipelined iterations (default %(default)s)")
    p.add_argument("--link-gbps", type=float, default=25.0, help="link bandwidth, GB/s (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the access stream")
    _add_common(p)
    p = sub.add_parser("calibrate", help="model vs RTL cycle counts (recorded, or measured again with --measure)")
    p.add_argument("--measure", action="store_true",
                   help="run every job on the engine RTL now (Verilator; the design point's rows take minutes "
                        "each) instead of reading the recorded cycles")
    p.add_argument("--config", action="append", choices=("small", "paper"),
                   help="only the rows of this engine configuration (repeatable; default all)")
    p.add_argument("--topology", action="append", metavar="SPEC",
                   help="only the rows on this topology, as the table writes it (e.g. ring:8; repeatable; "
                        "default all)")
    p.add_argument("--backend", choices=("verilator", "icarus"), default="verilator",
                   help="simulator of --measure (default %(default)s)")
    _add_common(p)
    p = sub.add_parser("bench", help="model speed: simulated iterations per second")
    p.add_argument("--npus", type=int, action="append", help="sizes (default 16 128 1024)")
    p.add_argument("--workload", default="resnet50")
    perf.set_defaults(func=_run)


def _table(rows, keys):
    print("  ".join(f"{k:>14}" for k in keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k)
            cells.append(f"{v:>14.4g}" if isinstance(v, float) else f"{str(v):>14}")
        print("  ".join(cells))


def _run(args):
    try:
        return _dispatch(args)
    except (ValueError, RuntimeError) as exc:
        print(f"syncfabric perf {args.perf_command}: error: {exc}", file=sys.stderr)
        return 2


def _dispatch(args):
    from ..sim.perf import repro
    from ..sim.perf.system import CONFIGS, SystemParams, endpoint, paper_compute, torus_for
    from ..sim.perf.training import simulate
    from ..sim.perf.workload import load_workload

    c = args.perf_command
    progress = not getattr(args, "quiet", False)
    if c == "iteration":
        from .cli import check_output_path

        check_output_path(args.json)        # before the simulation, not after it
        traced = None
        if args.trace:
            from ..sim.perf.trace import load_trace, trace_workload
            traced = load_trace(args.trace)
            wl, trace_compute = trace_workload(traced)
            kinds = {}
            for coll in traced.collectives:
                kinds[coll.op] = kinds.get(coll.op, 0) + 1
            print(f"trace {args.trace}: {traced.steps} step(s), measured per step {traced.step_s * 1e3:.3f} ms "
                  f"(compute {traced.compute_s * 1e3:.3f} ms, communication spans {traced.comm_s * 1e3:.3f} ms); "
                  f"collectives per step: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}; "
                  f"{traced.allreduce_bytes:,} B all-reduced")
        else:
            wl = load_workload(args.workload, batch=args.batch)
        topo = args.topology or torus_for(args.npus)
        rows = []
        for name in args.config or list(CONFIGS):
            if traced is not None:
                cs = trace_compute
            else:
                cs = paper_compute(wl.name, endpoint(name).name, wl.batch) if args.compute == "paper" else None
            r = simulate(wl, topo, endpoint(name), SystemParams(compute_efficiency=args.compute_efficiency),
                         compute_s=cs)
            rows.append({**r.as_dict(), "time_ms": r.time * 1e3, "compute_ms": r.compute * 1e3,
                         "exposed_ms": r.exposed * 1e3})
        _table(rows, ["config", "time_ms", "compute_ms", "exposed_ms", "collectives"])
        if traced is not None:
            print(f"model on {topo}: the trace's compute, its gradient all-reduces on each configuration's "
                  f"network; measured on the traced machine: {traced.step_s * 1e3:.3f} ms per step")
            for r in rows:
                r["measured_step_ms"] = traced.step_s * 1e3
                r["measured_compute_ms"] = traced.compute_s * 1e3
        if args.json == "-":
            print(json.dumps(rows, indent=1))
        elif args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if c == "fig5":
        rows, need, reads = repro.fig5(args.out, sizes=tuple(args.npus or (16, 64)), nbytes=args.bytes,
                                scheduler=args.scheduler, progress=progress)
        _table(rows, ["npus", "config", "mem_bw_GBps", "network_bw_GBps"])
        print("memory BW for 90% of Ideal (GB/s):", need)
        for n, r in reads.items():
            print(f"{n} NPUs: NPU memory read per byte sent: baseline {r['baseline']:.3f}, ACE {r['ACE']:.3f} "
                  f"({1 / r['ACE']:.2f} bytes sent per byte read)")
    elif c == "fig6":
        if args.max_sms < 1:
            raise ValueError(f"--max-sms {args.max_sms}: sweep at least 1 SM")
        rows, summary = repro.fig6(args.out, sizes=tuple(args.npus or (16, 64)),
                                   sms=tuple(range(1, args.max_sms + 1)),
                                   budgets=tuple(args.mem_gbps or (450, 900)), nbytes=args.bytes)
        _table(rows, ["npus", "mem_budget_GBps", "sms", "sm_mem_bw_GBps", "network_bw_GBps", "of_ideal"])
        for k, v in summary.items():
            n, b = k.split("@")
            print(f"{n} NPUs, {b} GB/s budget: Ideal {v['ideal_GBps']:.0f} GB/s; SMs for 90% of Ideal: "
                  f"{v['sms_for_90pct_ideal'] or 'not reached'}; SMs to saturate: {v['sms_to_saturate']}")
        print("paper: 6 SMs (80 GB/s each) are enough to reach the 450 GB/s memory BW")
    elif c == "fig9b":
        rows = repro.fig9b(args.out, tuple(args.workload or ("resnet50", "gnmt", "dlrm")), args.npus,
                           compute=args.compute, compute_efficiency=args.compute_efficiency)
        _table(rows, ["workload", "pass", "collectives", "window_us", "busy_us", "utilization", "from_first",
                      "paper"])
        print("paper (back-propagation): resnet50 0.964, gnmt 0.913, dlrm 0.883; forward near 0 (dlrm low)")
    elif c == "fig12":
        rows = repro.fig12(args.out, tuple(args.npus or (16, 32, 64, 128)), side_sms=args.side_sms,
                           side_gbps=args.side_gbps, compute_efficiency=args.compute_efficiency)
        _table(rows, ["npus", "config", "default_ms", "overlap_ms", "default_compute_ms", "overlap_compute_ms",
                      "speedup"])
        print("paper: BaselineCompOpt 1.05x, ACE 1.2x over their default training loops")
    elif c == "fig9a":
        rows, backend = repro.fig9a(args.out, srams=tuple(args.sram_mb or (0.5, 1, 2, 4, 8)),
                                    fsms=tuple(args.fsms or (4, 8, 12, 16, 20)), npus=args.npus, nbytes=args.bytes,
                                    scheduler=args.scheduler, progress=progress)
        _table(rows, ["sram_MB", "fsms", "network_bw_GBps", "normalized"])
    elif c == "algorithms":
        rows = repro.algorithms(args.out, args.topology, args.bytes, tuple(args.config or ("ACE", "Ideal")),
                                tuple(args.decomposition or TORUS_ALLREDUCES),
                                tuple(args.directions or (("bidir",) * 3,)), progress=progress)
        _table(rows, ["decomposition", "directions", "config", "sent_per_read", "bound_us", "time_us",
                      "of_bound"])
    elif c == "fig10":
        rows = repro.fig10(args.out, args.workload, args.npus, progress=progress,
                           compute_efficiency=args.compute_efficiency, compute=args.compute)
        for name in ("BaselineCommOpt", "BaselineCompOpt", "ACE", "Ideal"):
            sel = [r for r in rows if r["config"] == name]
            print(f"{name:>16}: mean compute utilization {sum(r['compute_util'] for r in sel) / len(sel):.3f}, "
                  f"network {sum(r['network_util'] for r in sel) / len(sel):.3f}")
    elif c == "fig11":
        rows, summary = repro.fig11(args.out, tuple(args.workload or ("resnet50", "gnmt", "dlrm")),
                                    tuple(args.npus or repro.FIG11_SIZES), scheduler=args.scheduler,
                                    progress=progress, compute_efficiency=args.compute_efficiency,
                                    compute=args.compute)
        _table(rows, ["workload", "npus", "config", "iteration_ms", "compute_ms", "exposed_ms", "of_ideal"])
        print(json.dumps(summary, indent=1))
    elif c == "byteps":
        if args.kmax < 0:
            raise ValueError(f"--kmax {args.kmax}: the largest CPU machine count k must be at least 0")
        if not all(0 < v < float("inf") for v in (args.gpu_tflops, args.part_mb)):     # NaN fails too
            raise ValueError(f"--gpu-tflops {args.gpu_tflops} and --part-mb {args.part_mb}: expected positive "
                             f"finite numbers")
        rows, pcie = repro.byteps(args.out, n=args.n, ks=range(0, args.kmax + 1, 2))
        _table(rows, ["n", "k", "model_s", "traffic_s", "allreduce_s", "speedup_over_allreduce"])
        _table(pcie, ["m", "rho", "x_opt", "x_brute", "J_ca_s", "J_opt_s", "J_allreduce_s"])
        if args.pipeline:
            rows = repro.byteps_pipeline(args.out, n=args.n, gpu_flops=args.gpu_tflops * 1e12,
                                         part_bytes=max(1, int(args.part_mb * (1 << 20))))
            _table(rows, ["model", "k", "grad_MB", "compute_ms", "comm_ms", "after_backward_ms", "fifo_tensors_ms",
                          "fifo_parts_ms", "priority_ms", "allreduce_ms", "ps_ms", "priority_gain",
                          "over_allreduce", "over_ps"])
    elif c == "coarse":
        rows = repro.coarse(args.out, p=args.p)
        _table(rows, ["model", "gpu", "params_MB", "m_layers_MB", "T_layers_ms", "T_allreduce_ms", "speedup",
                      "T_dense_ms", "speedup_vs_dense"])
    elif c == "rna":
        if args.staleness < 0:
            raise ValueError(f"--staleness {args.staleness}: the version gap bound must be at least 0")
        rows, meta = repro.rna(args.out, ranks=args.ranks, seed=args.seed, staleness=args.staleness)
        _table(rows, ["delay_ms", "barrier_ms", "rna1_ms", "rna2_ms", "barrier_to_target_s", "rna1_speedup",
                      "rna2_speedup", "rna2_contributors"])
        print("mixed heterogeneity (half the ranks +50-100 ms): " + ", ".join(
            f"{k} {v['to_target_s']:.1f} s ({v['speedup']:.2f}x)" for k, v in meta["mixed"].items())
            + f"; the grouping rule forms {len(meta['grouping_rule'])} group(s)")
        m = meta["median_response_ms"]
        print("median response time: " + ", ".join(f"{q} probe(s) {t:.1f} ms" for q, t in m.items())
              + f" (1 vs 2: {meta['response_ratio']:.2f}x)")
    elif c == "sven":
        from ..sim.perf.sven import SCALING_SIZES, sven

        rows, meta = sven(args.out, npus=args.npus, sizes=tuple(args.scaling_npus or SCALING_SIZES),
                          iterations=args.iterations, link_GBps=args.link_gbps, seed=args.seed)
        _table([r for r in rows if r["part"] == "pipeline"],
               ["model", "npus", "sequential_ms", "pipelined_ms", "speedup", "max_staleness"])
        _table([r for r in rows if r["part"] == "scaling"],
               ["model", "npus", "scaling_factor", "scaling_factor_sequential"])
        _table([r for r in rows if r["part"] == "placement"],
               ["alpha", "hot_hit", "random_hit", "lru_hit", "importance_hit", "DeepFM_hot_over_random",
                "W&D_hot_over_random", "DCN_hot_over_random"])
    elif c == "calibrate":
        from ..sim.perf.calibrate import RTL_POINTS, calibrate
        from .run import measure_point

        points = [p for p in RTL_POINTS if (not args.config or p.config in args.config)
                  and (not args.topology or p.topology in args.topology)]
        if not points:
            known = sorted({p.topology for p in RTL_POINTS})
            print(f"syncfabric perf calibrate: error: no row on {', '.join(args.topology or [])} with "
                  f"{', '.join(args.config or ['any configuration'])} (the table's topologies: "
                  f"{', '.join(known)})", file=sys.stderr)
            return 2

        def show(i, n, row):
            if row.get("failed"):
                print(f"[{i + 1}/{n}] {row['command']}: FAILED ({row['failed']})", flush=True)
            elif not args.quiet:
                print(f"[{i + 1}/{n}] {row['command']}: {row['rtl_cycles']:,} cycles (recorded "
                      f"{row['recorded_cycles']:,}, drift {row['drift']:+.1%}), model {row['model_cycles']:,} "
                      f"({row['error']:+.1%}), {row['wall_s']:.0f} s", flush=True)

        rows, mae = calibrate(points, measure=(lambda p: measure_point(p, args.backend)) if args.measure else None,
                              on_row=show if args.measure else None)
        failed = [r for r in rows if r.get("failed")]
        repro.write_outputs(args.out, "calibrate", rows, {"mean_abs_error": mae if len(failed) < len(rows) else None,
                                                          "measured": args.measure, "failed": len(failed)})
        _table([r for r in rows if not r.get("failed")],
               ["config", "topology", "collective", "bytes", "rtl_cycles", "model_cycles", "error"])
        if len(failed) < len(rows):
            print(f"mean absolute error {mae:.3f} against {'measured' if args.measure else 'recorded'} RTL cycles"
                  + (f" ({len(rows) - len(failed)} of {len(rows)} rows ran)" if failed else ""))
        for r in failed:
            print(f"syncfabric perf calibrate: error: {r['failed']}", file=sys.stderr)
        if failed:
            return 1
    elif c == "bench":
        rows = repro.bench(tuple(args.npus or (16, 128, 1024)), args.workload)
        _table(rows, ["npus", "topology", "iteration_ms", "cold_s", "warm_s", "iterations_per_s"])
        return 0
    if c != "calibrate":
        print(f"outputs in {args.out}/")
    return 0
