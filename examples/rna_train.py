"""RNA training on emulated NPUs through the engine RTL, with injected stragglers.

Eight ranks (a 4x2 torus of small engines) train a least-squares model with data-parallel SGD. Every rank's
iteration takes a base compute time plus a random delay (0-50 ms per rank and iteration, the dissertation's
setting after Hop); with ``--slow-group`` the second half of the ranks (the torus's second row) take 50-100 ms
instead (its "mixed heterogeneity"). Four synchronization schemes run on the same engines, from the same initial model:

- ``horovod``: ring all-reduce behind a readiness barrier (every rank contributes every round);
- ``rna-1``: RNA with one probe (a random initiator); ``rna-2``: RNA with two probes (power of two choices);
- ``rna-h``: RNA with two probes inside each row of the torus, the rows joined through a parameter server
  (the hierarchical mode with the rows as its groups, as the dissertation's two rings; what the grouping rule
  itself would form from a profile of the delays is printed: at these settings one group).

The protocol (controller, probes tagged with the round id, expiry, null contributions, merging of waiting
gradients, staleness bound, learning rate scaled by the contributors) is :mod:`syncfabric.sim.golden.rna`; every
all-reduce and broadcast runs on the engines (:class:`syncfabric.host.rna.EngineCollectives`), null ranks by
the descriptor's NULL flag, and is checked byte for byte against the golden executor, the count lane against
the contributors. Compute time is simulated (the engines do not idle 100 ms between collectives); the
engines' cycles at the system clock are the communication time. The figure of merit is the dissertation's:
simulated time until the model reaches the target loss.

    python examples/rna_train.py                        # uniform 0-50 ms delays
    python examples/rna_train.py --slow-group           # the second row 50-100 ms slower
    python examples/rna_train.py --config my.yaml --modes horovod,rna-2
"""

import argparse
import json
import math
import os
import sys
import time

# n_comms 4: the world and one communicator per row for the hierarchical mode (the small profile has 2)
DEFAULT_CONFIG = {"topology": "torus:4x2x1", "backend": "verilator", "clock_mhz": 1000,
                  "engine": {"profile": "small", "n_comms": 4}, "links": {"latency": 10},
                  "memory": {"bytes": "64KiB"}}
MODES = ("horovod", "rna-1", "rna-2", "rna-h")


def settings_for(mode, n, dims, lr):
    from syncfabric.sim.golden.rna import RnaSettings
    if mode == "horovod":
        return RnaSettings(mode="barrier", lr=lr)
    if mode in ("rna-1", "rna-2"):
        return RnaSettings(mode="rna", probes=int(mode[-1]), lr=lr)
    rows = [list(range(y * dims[0], (y + 1) * dims[0])) for y in range(n // dims[0])]
    return RnaSettings(mode="rna", probes=2, lr=lr, groups=rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help="system YAML (default: 8 small engines on torus:4x2x1, Verilator)")
    ap.add_argument("--backend", help="override the configuration's backend (verilator, icarus, amaranth)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated of {', '.join(MODES)}")
    ap.add_argument("--rounds", type=int, default=400, help="most rounds per scheme (default 400)")
    ap.add_argument("--target", type=float, default=0.02, help="target loss as a fraction of the initial")
    ap.add_argument("--compute-ms", type=float, default=20.0, help="base compute per iteration (default 20)")
    ap.add_argument("--jitter-ms", type=float, default=50.0, help="injected delay 0..J ms (default 50)")
    ap.add_argument("--slow-group", action="store_true",
                    help="the second half of the ranks (the default torus's second row) delayed 50-100 ms")
    ap.add_argument("--dim", type=int, default=64, help="model parameters (float32; default 64)")
    ap.add_argument("--lr", type=float, default=4.0,
                    help="learning rate of a round with every rank contributing (default 4; scaled by the "
                         "contributors, so per contributor lr / ranks)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the results as JSON to this file")
    args = ap.parse_args(argv)
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        ap.error(f"--json {args.json}: no such directory")
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"--modes: {', '.join(bad) or 'none given'}; choose from {', '.join(MODES)}")
    if args.rounds < 1 or args.dim < 1 or not 0 < args.target < 1 or not args.compute_ms > 0 \
            or not args.jitter_ms >= 0 or not 0 < args.lr < 20:
        ap.error("--rounds and --dim must be >= 1, --target in (0, 1), --compute-ms > 0, --jitter-ms >= 0, "
                 "--lr in (0, 20)")

    from syncfabric.host.config import load_config
    from syncfabric.host.rna import EngineCollectives
    from syncfabric.host.system import System
    from syncfabric.sim.golden import rna
    from syncfabric.sim.golden.topology import Torus, parse as parse_topology

    overrides = {"backend": args.backend} if args.backend else {}
    config = load_config(args.config or DEFAULT_CONFIG, **overrides)
    topo = parse_topology(config.topology)
    n = topo.n_endpoints
    dims = topo.dims if isinstance(topo, Torus) else (n, 1, 1)
    if "rna-h" in modes and (not isinstance(topo, Torus) or n // dims[0] < 2):
        ap.error(f"rna-h needs a torus with at least two rows (groups are rows), not {config.topology}")
    if "rna-h" in modes and n // dims[0] >= config.engine.n_comms:
        ap.error(f"rna-h needs a communicator per row besides the world: engine.n_comms "
                 f"{config.engine.n_comms} < {n // dims[0] + 1}")
    slow = tuple(range(n // 2, n)) if args.slow_group else ()
    delays = rna.Delays(args.compute_ms, args.jitter_ms, slow_ranks=slow)
    task = rna.LeastSquares(n, dim=args.dim, seed=args.seed)
    target = args.target * task.loss(task.initial())
    lr = args.lr / n
    auto = rna.group_ranks(rna.profile_ranks(delays, n, 20, args.seed))
    print(f"{n} ranks on {config.topology} ({config.backend}); compute {args.compute_ms:g} ms + 0-"
          f"{args.jitter_ms:g} ms" + (f", ranks {slow[0]}-{slow[-1]} +50-100 ms" if slow else "") +
          f"; target loss {target:.4g}; the grouping rule forms {auto}")
    results = []
    with System(config, progress=True) as system:
        coll = EngineCollectives(system, args.dim)
        try:
            for mode in modes:
                t0 = time.perf_counter()
                before = dict(coll.stats)
                res = rna.simulate(task, delays, settings_for(mode, n, dims, lr), coll, n, rounds=args.rounds,
                                   target_loss=target, seed=args.seed)
                s = res.summary()
                s.update(mode=mode, time_to_target_ms=res.time_to(target), groups=res.groups,
                         engine_allreduces=coll.stats["allreduce"] - before["allreduce"],
                         engine_broadcasts=coll.stats["broadcast"] - before["broadcast"],
                         engine_cycles=coll.stats["cycles"] - before["cycles"], wall_s=time.perf_counter() - t0)
                results.append(s)
                print(f"  {mode:8s} {s['rounds']:4d} rounds, target at {s['time_to_target_ms']:9.1f} ms, "
                      f"{s['contributors']:.2f} contributors/round, {s['expired']} probes expired, "
                      f"{s['dropped']} stale dropped; engines: {s['engine_allreduces']} all-reduces, "
                      f"{s['engine_broadcasts']} broadcasts, {s['engine_cycles']} cycles "
                      f"({s['wall_s']:.1f} s wall)", flush=True)
        finally:
            coll.close()
    base = next((r["time_to_target_ms"] for r in results if r["mode"] == "horovod"), None)
    if base is not None:
        for r in results:
            t = r["time_to_target_ms"]
            r["speedup"] = base / t if math.isfinite(t) and math.isfinite(base) else None
        print("time to target vs horovod: " + ", ".join(
            f"{r['mode']} {r['speedup']:.2f}x" if r["speedup"] else f"{r['mode']} not reached"
            for r in results))
    print(f"every collective byte for byte against the golden executor ({coll.stats['checked_bytes']} bytes)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": config.topology, "target_loss": target, "results": results}, f, indent=1,
                      default=str)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
