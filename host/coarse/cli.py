"""``syncfabric coarse``: COARSE runs and figures.

``syncfabric coarse sync``     the system top (sync cores on Verilator or Icarus): push, sync, pull, every byte
                               checked; prints cycles against the ring bound, for one or several ring-link rates;
``syncfabric coarse compare``  DENSE (model), COARSE sync cores (RTL) and the dual-sync split on the same links;
``syncfabric coarse host``     the host's parameter clients and proxies on the RTL: every GPU pushes tensors over
                               its CCI link, the sync cores synchronize them, every GPU pulls; every byte checked
                               against the golden sync-core order; push/pull cycles against the link bound;
``syncfabric coarse sumsvc``   BytePS's summation service in the system top (Verilator or Icarus): every GPU
                               pushes parts over its CCI path to the service and pulls the sums (sync) or the
                               latest parameters (async), and a BytePS cluster runs its services on it; every
                               byte checked against the golden service; cycles against the link bound;
``syncfabric coarse profile``  the routing table and shard size the profiler picks for a bandwidth profile;
``syncfabric coarse byteps``   BytePS times, CPU/GPU shares and speedups for n GPU and k CPU machines.
"""

import json
import tempfile
from fractions import Fraction
from pathlib import Path

from ...sim.golden import byteps
from ...sim.golden.coarse import dense_cycles, optimal_m, ring_bound_cycles
from ...sim.golden.types import DType, ReduceOp
from .profiler import PROFILES, Profiler, model_measure, profile_paths

__all__ = ["register", "run_system"]


def _rate(text):
    try:
        f = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a link rate: {text!r} (examples: 1, 1/2, 0.25)") from None
    if not 0 < f <= 1:
        raise ValueError(f"a link rate is in (0, 1] flits per cycle, not {text}")
    f = f.limit_denominator(256)
    return f.numerator, f.denominator


def run_system(n_devices, n_groups, chunks, dtype="fp32", op="sum", ring_rate=(1, 1), latency=4,
               beat_bytes=16, entry_beats=16, sim="verilator", seed=1, stall=0.0):
    """Run the COARSE system top once (push, sync, pull, all checked); returns the testbench's report dict
    (``runs``: cycles per run; ``links``: flits per link; ``cores``: per-core counters)."""
    from ...hdl.coarse.system import system_verilog
    from ..transports.harness import run_cocotb
    params = {"n_devices": n_devices, "n_groups": n_groups, "beat_bytes": beat_bytes, "entry_beats": entry_beats}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        run_cocotb(system_verilog, params, toplevel="coarse_system",
                   test_module="syncfabric.tb.coarse.test_system", sim=sim, testcase="sync_matches_golden",
                   build_tag=f"coarse_cli_{n_devices}x{n_groups}", hier_blocks=("coarse_device",),
                   log_file=Path(tmp) / "sim.log",
                   tb_params={"seed": seed, "runs": [[dtype, op]], "chunks": chunks, "report": str(report),
                              "fixed_latency": latency, "ring_rate": list(ring_rate), "stall": stall,
                              "mem_bytes": max(1 << 14, 2 * 0x1000 + chunks * n_groups * n_devices * entry_beats
                                               * beat_bytes * 2)})
        return json.loads(report.read_text())


def _sync(args):
    from ...sim.progress import ProgressLine
    rates = [_rate(r) for r in args.ring_rate.split(",")]
    if args.devices < 2 or args.groups < 1 or args.chunks < 1:
        raise ValueError("need --devices >= 2, --groups >= 1 and --chunks >= 1")
    line = ProgressLine(enabled=not args.quiet)
    rows = []
    for k, rate in enumerate(rates):
        line.update(f"coarse sync: rate {rate[0]}/{rate[1]} ({k + 1}/{len(rates)})")
        rep = run_system(args.devices, args.groups, args.chunks, args.dtype, args.op, rate, args.latency,
                         args.beat_bytes, args.entry_beats, args.backend, args.seed)
        run = rep["runs"][0]
        r = rate[0] / rate[1]
        # per direction and link: each group's chunks cross every ring link once per step
        bound = ring_bound_cycles(run["bytes"] // args.groups, args.devices, args.beat_bytes, r) \
            * max(1, -(-args.groups // 2))
        ring_flits = max(v for name, v in rep["links"].items() if name.startswith("r"))
        alu = max(c["alu_beats"] for c in rep["cores"])
        busy = max(c["cycles"] for c in rep["cores"])
        mem = run["bytes"] / args.beat_bytes      # each DRAM channel moves every byte once, a beat per cycle
        rows.append((f"{rate[0]}/{rate[1]}", run["bytes"], run["core_cycles"], bound, mem,
                     max(bound, mem) / run["core_cycles"], ring_flits / busy, alu / busy))
    line.done("")
    print(f"COARSE sync cores: {args.devices} devices x {args.groups} groups, {args.dtype} {args.op}, "
          f"{args.beat_bytes} B beats, {args.entry_beats}-beat entries, link latency {args.latency} ({args.backend})")
    print(f"{'rate':>6} {'bytes/dev':>10} {'cycles':>8} {'link bnd':>9} {'DRAM bnd':>9} {'eff':>6} "
          f"{'flits/cyc':>10} {'ALU beats/cyc':>14}")
    for rate, nb, cyc, bound, mem, eff, fpc, apc in rows:
        print(f"{rate:>6} {nb:>10} {cyc:>8} {bound:>9.0f} {mem:>9.0f} {eff:>6.2f} {fpc:>10.3f} {apc:>14.3f}")
    print("cycles: cores busy (load, ring, write-back overlapped); link bnd: ring bound per link direction; DRAM "
          "bnd: the device's one AXI port;\neff = max(bounds)/cycles; flits/cyc: busiest ring link; ALU: beats "
          "per cycle of the busiest core (capacity 1)")
    return 0


def _compare(args):
    rate = _rate(args.ring_rate)
    r = rate[0] / rate[1]
    rep = run_system(args.devices, args.groups, args.chunks, args.dtype, args.op, rate, args.latency,
                     args.beat_bytes, args.entry_beats, args.backend, args.seed)
    run = rep["runs"][0]
    nbytes = run["bytes"]
    dense = dense_cycles(nbytes, args.devices, args.beat_bytes, r, args.latency)
    print(f"{nbytes} bytes per device, {args.devices} devices, links {rate[0]}/{rate[1]} flits/cycle of "
          f"{args.beat_bytes} B, latency {args.latency}")
    print(f"  DENSE (central server, model)     {dense:>10.0f} cycles")
    print(f"  COARSE sync cores (RTL, measured) {run['core_cycles']:>10} cycles  ({args.groups} groups)")
    print(f"  ring bound 2(p-1)/p*S/W           {ring_bound_cycles(nbytes, args.devices, args.beat_bytes, r):>10.0f}"
          " cycles")
    # dual sync: proxies at the measured sync-core rate, GPUs at the same link rate (bytes per cycle)
    bw_proxy = nbytes * 2 * (args.devices - 1) / args.devices / run["core_cycles"]
    bw_gpu = args.beat_bytes * r
    m, t = optimal_m(nbytes, args.devices, bw_proxy, bw_gpu, args.t_fp, args.t_bp)
    print(f"  dual sync (T_FP {args.t_fp}, T_BP {args.t_bp} cycles): m = {m:.0f} of {nbytes} bytes to the "
          f"proxies, T_train {t:.0f} cycles (all proxies: "
          f"{max(args.t_fp + args.t_bp, args.t_fp + run['core_cycles']):.0f})")
    print("  engine ring all-reduce: syncfabric run --topology ring:P --config small --bytes <same>")
    return 0


def _sizes(text):
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--tensors takes comma-separated byte counts, not {text!r}") from None
    if not sizes:
        raise ValueError("--tensors names no tensor")
    return sizes


def _on_rtl(args, run, **params):
    """Start a :class:`CoarseRtl` of ``args`` (and ``params``) and return ``run(rtl)``; a simulator that does not
    start, a mismatch or a run error print one line and return status 1."""
    import sys

    from ..transport import TransportError
    from .rtl import CoarseRtl, MismatchError
    if args.devices < 2 or args.groups < 1:
        raise ValueError("need --devices >= 2 and --groups >= 1")
    try:
        rtl = CoarseRtl(args.devices, args.groups, args.beat_bytes, args.entry_beats, sim=args.backend,
                        latency=args.latency, seed=args.seed, progress=not args.quiet, **params)
    except TransportError as exc:       # the simulator did not build or start
        print(f"syncfabric coarse: error: {exc}", file=sys.stderr)
        return 1
    with rtl:
        try:
            return run(rtl)
        except MismatchError as exc:
            print(f"syncfabric coarse: MISMATCH: {exc}", file=sys.stderr)
        except (TransportError, RuntimeError) as exc:
            print(f"syncfabric coarse: error: {exc}", file=sys.stderr)
        return 1


def _host(args):
    from .rtl import run_round
    sizes = _sizes(args.tensors)
    rep = _on_rtl(args, lambda rtl: run_round(rtl, sizes, args.dtype, args.op, args.seed), mem_bytes=args.mem_bytes,
                  window=args.window, cci_depth=args.cci_depth, ram_queue=args.ram_queue)
    if rep == 1:
        return 1
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"COARSE host on the RTL: {rep['devices']} devices x {rep['groups']} groups, {rep['dtype']} {rep['op']}, "
          f"{rep['beat_bytes']} B beats, link latency {rep['latency']}, {rep['window']} CCI requests in flight "
          f"per GPU, CCI target depth {rep['cci_depth'] or 'default'}, DRAM model queues {rep['ram_queue']} "
          f"({args.backend})")
    print(f"{'tensor':>7} {'bytes':>8} {'push cyc':>9} {'pull cyc':>9} {'link bnd':>9} {'push/bnd':>9} "
          f"{'pull/bnd':>9} {'sync cyc':>9}")
    for r in rep["tensors"]:
        print(f"{r['tensor']:>7} {r['bytes']:>8} {r['push_cycles']:>9} {r['pull_cycles']:>9} {r['link_bound']:>9} "
              f"{r['push_cycles'] / r['link_bound']:>9.2f} {r['pull_cycles'] / r['link_bound']:>9.2f} "
              f"{r['sync_cycles']:>9}")
    print("every GPU pushed and pulled at once; every pulled byte equals the golden sync-core result.\n"
          "link bnd: flits of the padded tensor on one host link at 1 flit/cycle; sync cyc: the sync-core run "
          "(START to the poll that saw DONE)")
    return 0


def _sumsvc(args):
    from .summation import run_byteps, run_summation
    modes = {"sync": [False], "async": [True], "both": [False, True]}[args.mode]
    sizes = _sizes(args.tensors)
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, not {args.rounds}")

    def run(rtl):
        out = []
        for a in modes:     # the cluster first: its shares need parts holding no asynchronous parameters yet
            bp = run_byteps(rtl, a, sizes, args.k, args.dtype, args.op, args.seed)
            out.append((run_summation(rtl, a, args.rounds, args.dtype, args.op, args.seed), bp))
        return out

    reps = _on_rtl(args, run, mem_bytes=1 << 12, window=args.window, sum_parts=args.parts,
                   sum_part_beats=args.part_beats)
    if reps == 1:
        return 1
    if args.json:
        print(json.dumps([{"service": s, "byteps": b} for s, b in reps], indent=1))
        return 0
    s0 = reps[0][0]
    print(f"BytePS summation service in the system ({args.backend}): {s0['workers']} workers, {s0['parts']} parts "
          f"of {s0['part_bytes']} B, {s0['beat_bytes']} B beats, {s0['dtype']} {s0['op']}, link latency "
          f"{args.latency}")
    print(f"{'mode':>6} {'round':>5} {'checked B':>9} {'cycles':>7} {'link bnd':>8} {'svc bnd':>8} {'cyc/link':>8} "
          f"{'cyc/svc':>8}")
    for svc, _ in reps:
        for r in svc["rounds"]:
            print(f"{svc['mode']:>6} {r['round']:>5} {r['checked']:>9} {r['cycles']:>7} {r['link_bound']:>8} "
                  f"{r['service_bound']:>8} {r['cycles'] / r['link_bound']:>8.2f} "
                  f"{r['cycles'] / r['service_bound']:>8.2f}")
    for svc, bp in reps:
        print(f"BytePS cluster ({bp['mode']}, {bp['workers']} GPU + {bp['cpu_machines']} CPU machines, tensors "
              f"{bp['sizes']} B in {bp['parts']} parts) on the RTL service: {bp['checked']} bytes checked, "
              f"{bp['cycles']} cycles; service counters {svc['counters']}")
    print("every pulled byte equals the golden summation service's (sync: the round's sum in worker order; async: "
          "the latest parameters in the order the service accepted the requests).\nlink bnd: flits on the "
          "busiest CCI path to the service (1 per cycle; async workers take turns); svc bnd: every worker's "
          "requests, the service taking one per cycle")
    return 0


def _profile(args):
    names = list(PROFILES) if args.profile == "all" else [args.profile]
    if args.devices < 1:
        raise ValueError(f"--devices {args.devices}: need at least 1 client/device pair")
    if not 0 <= args.client < args.devices:
        raise ValueError(f"--client {args.client} is not one of the {args.devices} clients (0..{args.devices - 1})")
    for name in names:
        prof = Profiler(model_measure(profile_paths(name, args.devices)), args.devices)
        t = prof.table(args.client)
        local, remote = PROFILES[name]["local"], PROFILES[name]["remote"]
        print(f"{name}: local {local[1] / 1e9:g} GB/s {local[0] * 1e6:g} us, remote {remote[1] / 1e9:g} GB/s "
              f"{remote[0] * 1e6:g} us -> LatProxy {t.lat_proxy}, BwProxy {t.bw_proxy}, threshold S "
              f"{t.threshold} B, shard S' {t.shard_bytes} B ({prof.measurements} timings)")
    return 0


def _byteps(args):
    n, k, M, B = args.n, args.k, args.model_bytes, args.bandwidth
    t_byteps = byteps.byteps_time(n, k, M, B)           # bad values fail here, before anything is printed
    print(f"n={n} GPU machines, k={k} CPU machines, M={M} B, B={B:g} B/s: D={byteps.bucket_count(n, k)}")
    print(f"  M_cpu {byteps.cpu_share(n, k, M):.0f} B  M_gpu {byteps.gpu_share(n, k, M):.0f} B per service")
    print(f"  BytePS {t_byteps * 1e3:.3f} ms, all-reduce "
          f"{byteps.allreduce_time(n, M, B) * 1e3:.3f} ms, speedup {byteps.speedup_over_allreduce(n, k):.3f}x")
    if k:
        print(f"  non-colocated PS {byteps.ps_time(n, k, M, B) * 1e3:.3f} ms")
    return 0


def _checked(func):
    """Run ``func``; bad parameters (ValueError) end with a one-line message and status 2, not a traceback."""
    def run(args):
        try:
            return func(args)
        except ValueError as exc:
            import sys
            print(f"syncfabric coarse: error: {exc}", file=sys.stderr)
            return 2
    return run


def register(subparsers):
    """Add ``syncfabric coarse`` to the command line."""
    p = subparsers.add_parser("coarse", help="COARSE sync cores, profiler and BytePS figures")
    sub = p.add_subparsers(dest="coarse_command", required=True)

    def common(q):
        q.add_argument("--devices", type=int, default=4)
        q.add_argument("--groups", type=int, default=2)
        q.add_argument("--chunks", type=int, default=4, help="chunks per group (default %(default)s)")
        q.add_argument("--dtype", default="fp32", type=str.lower, choices=[d.name.lower() for d in DType])
        q.add_argument("--op", default="sum", type=str.lower, choices=[o.name.lower() for o in ReduceOp])
        q.add_argument("--latency", type=int, default=4, help="cycles per link (default %(default)s)")
        q.add_argument("--beat-bytes", type=int, default=16)
        q.add_argument("--entry-beats", type=int, default=16)
        q.add_argument("--backend", default="verilator", choices=["verilator", "icarus"])
        q.add_argument("--seed", type=int, default=1)
        q.add_argument("--quiet", action="store_true")

    q = sub.add_parser("sync", help="sync cores on the RTL against the ring bound")
    common(q)
    q.add_argument("--ring-rate", default="1", help="comma-separated ring link rates (flits/cycle), e.g. 1/4,1/2,1")
    q.set_defaults(func=_checked(_sync))
    q = sub.add_parser("compare", help="DENSE vs COARSE vs ring bound, and the dual-sync split")
    common(q)
    q.add_argument("--ring-rate", default="1")
    q.add_argument("--t-fp", type=float, default=2000.0, help="forward pass, cycles")
    q.add_argument("--t-bp", type=float, default=4000.0, help="backward pass, cycles")
    q.set_defaults(func=_checked(_compare))
    q = sub.add_parser("host", help="parameter clients push/pull and proxies sync through the RTL, checked")
    common(q)
    q.add_argument("--tensors", default="4096,1000,64", help="comma-separated tensor sizes in bytes "
                   "(default %(default)s)")
    q.add_argument("--window", type=int, default=32, help="CCI requests in flight per GPU (default %(default)s)")
    q.add_argument("--cci-depth", type=int, default=None,
                   help="requests each device's CCI target keeps outstanding (default: the RTL's, 8)")
    q.add_argument("--ram-queue", type=int, default=8, help="items per channel queue of the testbench's DRAM "
                   "model (cocotbext-axi's own: 2; default %(default)s)")
    q.add_argument("--mem-bytes", type=int, default=1 << 16, help="DRAM per device (default %(default)s)")
    q.add_argument("--json", action="store_true", help="print the report as JSON")
    q.set_defaults(func=_checked(_host))
    q = sub.add_parser("sumsvc", help="BytePS's summation service in the system: push/pull through the RTL, "
                                      "checked, and a BytePS cluster on it")
    common(q)
    q.set_defaults(devices=2, groups=1, beat_bytes=8, entry_beats=4)
    q.add_argument("--mode", default="both", choices=["sync", "async", "both"])
    q.add_argument("--parts", type=int, default=4, help="parts in the service (default %(default)s)")
    q.add_argument("--part-beats", type=int, default=4, help="beats per part (default %(default)s)")
    q.add_argument("--rounds", type=int, default=2, help="rounds of push/pull per mode (default %(default)s)")
    q.add_argument("--tensors", default="48,16", help="the BytePS cluster's tensor sizes in bytes "
                   "(default %(default)s)")
    q.add_argument("--k", type=int, default=1, help="CPU machines of the BytePS cluster (default %(default)s)")
    q.add_argument("--window", type=int, default=32, help="CCI requests in flight per GPU (default %(default)s)")
    q.add_argument("--json", action="store_true", help="print the reports as JSON")
    q.set_defaults(func=_checked(_sumsvc))
    q = sub.add_parser("profile", help="routing table and shard size for a bandwidth profile")
    q.add_argument("--profile", default="all", choices=["all", *PROFILES])
    q.add_argument("--devices", type=int, default=4)
    q.add_argument("--client", type=int, default=0)
    q.set_defaults(func=_checked(_profile))
    q = sub.add_parser("byteps", help="BytePS model figures")
    q.add_argument("--n", type=int, default=32)
    q.add_argument("--k", type=int, default=16)
    q.add_argument("--model-bytes", type=float, default=100e6)
    q.add_argument("--bandwidth", type=float, default=12.5e9)
    q.set_defaults(func=_checked(_byteps))
