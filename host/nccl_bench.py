"""``syncfabric bench COLLECTIVE``: a size sweep through the host API, printed as nccl-tests prints it.

Each size runs out of place and in place (all-to-all: out of place only, ``N/A`` in the in-place columns),
``iters`` times after ``warmup`` untimed runs; every result is checked element by element against the golden
executor (``#wrong``: mismatching elements over all ranks). Time is the engines' own measure - descriptor fetch
to completion, the slowest rank - in simulated microseconds at the configuration's ``clock_mhz``; ``algbw`` is
``size / time`` and ``busbw`` is ``algbw`` times nccl-tests' factor: ``2(n-1)/n`` for all-reduce, ``(n-1)/n``
for reduce-scatter, all-gather and all-to-all, 1 for broadcast and reduce. ``size`` and ``count`` follow
nccl-tests too: for reduce-scatter, all-gather and all-to-all ``size`` is the whole buffer and ``count`` the
elements per rank.
"""

import os
import time

import numpy as np

from ..sim.golden.algorithms import default_algorithm, generate
from ..sim.golden.chunking import COLLECTIVES, REDUCING, ROOTED, SEGMENTED
from ..sim.golden.executor import execute
from ..sim.golden.types import DType, ReduceOp, dtype_bytes
from .run import random_inputs

__all__ = ["BENCH_COLLECTIVES", "bus_factor", "bench", "format_table", "parse_table"]

#: What nccl-tests measures: every collective but the barrier, which moves no data.
BENCH_COLLECTIVES = tuple(c for c in COLLECTIVES if c != "barrier")
_TYPE_NAMES = {DType.FP32: "float", DType.FP16: "half", DType.BF16: "bfloat16", DType.INT32: "int32"}


def bus_factor(collective, n):
    """nccl-tests' bus bandwidth factor for ``n`` ranks."""
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in SEGMENTED:
        return (n - 1) / n
    return 1.0


def _sizes(min_bytes, max_bytes, factor):
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"sizes: need 0 < -b ({min_bytes}) <= -e ({max_bytes}) and -f ({factor}) >= 2")
    if max_bytes > 1 << 30:
        raise ValueError(f"sizes: -e {max_bytes} is more than a simulated endpoint's memory can hold")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def _check_runs(iters, warmup):
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters (-n) {iters!r}: need at least 1 timed run per size")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup (-w) {warmup!r}: need 0 or more untimed runs")


def _one(system, comm, coll, count, dtype, op, root, in_place, send, recv, inputs, eb):
    """Run one collective; returns (cycles, wrong elements)."""
    for cr, sr in enumerate(comm.ranks):
        if inputs[cr] is None:
            continue
        send.write(sr, inputs[cr], offset=cr * count * eb if coll == "allgather" and in_place else 0)
    kw = {"root": root} if coll in ROOTED else {}
    args = (count, dtype.name.lower()) + ((op.name.lower(),) if coll in REDUCING else ())
    req = getattr(comm, coll)(send, None if in_place else recv, *args, **kw)
    req.wait()
    progs = generate(coll, default_algorithm(coll, comm.topology), comm.topology, root=root)
    cfg = system.config.engine
    gold = execute(progs, comm.topology, inputs, dtype, op, count, req.chunk_bytes, cfg.packet_bytes,
                   cfg.beat_bytes)
    wrong = 0
    out = send if in_place else recv
    for cr, sr in enumerate(comm.ranks):
        want = gold.outputs[cr].tobytes()
        if not want:
            continue
        at = cr * count * eb if in_place and coll == "reduce_scatter" else 0     # NCCL's in-place layout
        got = out.read(sr, count=len(want), offset=at).tobytes()
        a = np.frombuffer(got, np.uint8).reshape(-1, eb)
        b = np.frombuffer(want, np.uint8).reshape(-1, eb)
        wrong += int((a != b).any(axis=1).sum())
    return req.cycles, wrong


def bench(system, collective, min_bytes=8, max_bytes=1 << 16, factor=2, *, dtype="fp32", op="sum", root=0,
          iters=1, warmup=0, comm=None, seed=1, progress=None):
    """Sweep ``collective`` on ``comm`` (default the world) from ``min_bytes`` to ``max_bytes`` (times
    ``factor``); returns one row per size: ``size``, ``count``, ``type``, ``redop``, ``root`` and per placement
    (``out``, ``in``: None where not offered) ``time_us``, ``algbw``, ``busbw``, ``wrong``, ``cycles``.
    ``progress(done, total)`` is called after each run."""
    if collective not in BENCH_COLLECTIVES:
        raise ValueError(f"bench: unknown collective {collective!r}; expected one of {', '.join(BENCH_COLLECTIVES)}")
    _check_runs(iters, warmup)
    comm = comm or system.world
    n = comm.size
    dt, rop = DType.parse(dtype), ReduceOp.parse(op)
    eb = dtype_bytes(dt)
    per = n if collective in SEGMENTED else 1
    sizes = [s for s in _sizes(min_bytes, max_bytes, factor) if s // (eb * per) >= 1]
    if not sizes:
        raise ValueError(f"bench: no size in {min_bytes}..{max_bytes} holds one {dt.name.lower()} element per "
                         f"rank")
    rng = np.random.default_rng(seed)
    biggest = max(sizes)
    send, recv = system.register(biggest), system.register(biggest)
    placements = ("out",) if collective == "alltoall" else ("out", "in")
    total, done = len(sizes) * len(placements) * (iters + warmup), 0
    rows = []
    try:
        for size in sizes:
            count = size // (eb * per)
            row = {"size": count * eb * per, "count": count, "type": _TYPE_NAMES[dt],
                   "redop": rop.name.lower() if collective in REDUCING else "none",
                   "root": root if collective in ROOTED else -1, "out": None, "in": None}
            for place in placements:
                cycles, wrong = [], 0
                for it in range(warmup + iters):
                    inputs = random_inputs(collective, count, n, dt, root, rng)
                    c, w = _one(system, comm, collective, count, dt, rop, root, place == "in", send, recv,
                                inputs, eb)
                    if it >= warmup:
                        cycles.append(c)
                        wrong += w
                    done += 1
                    if progress:
                        progress(done, total)
                mean = sum(cycles) / len(cycles)
                t_us = system.config.cycles_to_us(mean)
                algbw = row["size"] / t_us / 1e3 if t_us else 0.0
                row[place] = {"time_us": t_us, "algbw": algbw, "busbw": algbw * bus_factor(collective, n),
                              "wrong": wrong, "cycles": mean}
            rows.append(row)
    finally:
        system.deregister(send)
        system.deregister(recv)
    return rows


def format_table(rows, system, collective, min_bytes, max_bytes, factor, iters=1, warmup=0):
    """The nccl-tests text of :func:`bench`'s ``rows``."""
    cfg = system.config
    lines = [f"# nThread 1 nGpus {system.size} minBytes {min_bytes} maxBytes {max_bytes} step: {factor}(factor) "
             f"warmup iters: {warmup} iters: {iters} agg iters: 1 validation: 1 graph: 0",
             "#", "# Using devices"]
    for r in range(system.size):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {os.getpid():6d} on syncfabric device {r:2d} [ACE engine, "
                     f"{cfg.topology}, {cfg.backend}, {cfg.clock_mhz:g} MHz]")
    lines += ["#",
              f"# {collective}: time in simulated microseconds at {cfg.clock_mhz:g} MHz (engine cycles: "
              f"descriptor fetch to completion, slowest rank)",
              "#                                                              out-of-place                       "
              "in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
              "(GB/s)  (GB/s)       "]
    wrong, bws = 0, []
    for row in rows:
        cols = f"{row['size']:12d}  {row['count']:12d}  {row['type']:>8s}  {row['redop']:>6s}  {row['root']:6d}"
        for place in ("out", "in"):
            p = row[place]
            if p is None:
                cols += f"  {'N/A':>7s}  {'N/A':>6s}  {'N/A':>6s}  {'N/A':>5s}"
            else:
                cols += f"  {p['time_us']:7.2f}  {p['algbw']:6.2f}  {p['busbw']:6.2f}  {p['wrong']:5d}"
                wrong += p["wrong"]
                bws.append(p["busbw"])
        lines.append(cols)
    lines += [f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
              f"# Avg bus bandwidth    : {sum(bws) / len(bws) if bws else 0.0:.6g} ", "#"]
    return "\n".join(lines)


def parse_table(text):
    """The data rows of nccl-tests output as dicts (``size``, ``count``, ``type``, ``redop``, ``root`` and the
    out-of-place / in-place ``time``, ``algbw``, ``busbw``, ``wrong``; None for ``N/A``) - what a script
    reading nccl-tests logs does."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        if len(f) != 13:
            raise ValueError(f"not an nccl-tests data row (13 columns): {line!r}")

        def num(x, kind=float):
            return None if x == "N/A" else kind(x)
        rows.append({"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4]),
                     "out": {"time": num(f[5]), "algbw": num(f[6]), "busbw": num(f[7]), "wrong": num(f[8], int)},
                     "in": {"time": num(f[9]), "algbw": num(f[10]), "busbw": num(f[11]), "wrong": num(f[12], int)}})
    return rows


def main(args):
    """``syncfabric bench COLLECTIVE`` (arguments parsed by the CLI): build the system from ``--system`` (a
    YAML file) or from ``--topology``/``--config``, sweep, print the nccl-tests table; exit status 1 if any
    element was wrong."""
    import json

    from .config import load_config
    from ..sim.progress import ProgressLine
    from .system import System

    _sizes(args.minbytes, args.maxbytes, args.stepfactor)        # bad sizes fail before a simulator starts
    _check_runs(args.iters, args.warmup_iters)
    if args.bench not in BENCH_COLLECTIVES:
        raise ValueError(f"unknown collective {args.bench!r}")
    if args.system:
        source = dict(load_config(args.system).source)      # validated; the options below override it
        if args.topology:
            source["topology"] = args.topology[0]
        if args.config:
            source["engine"] = dict(source.get("engine") or {}, profile=args.config)
    else:
        source = {"topology": (args.topology or ["ring:4"])[0], "engine": {"profile": args.config or "small"}}
    if args.latency is not None:
        source["links"] = dict(source.get("links") or {}, latency=args.latency)
    overrides = {}
    if args.backend:
        overrides["backend"] = args.backend
    if args.clock_mhz is not None:
        overrides["clock_mhz"] = args.clock_mhz
    config = load_config(source, **overrides)                   # and a bad system or root too
    if args.bench in ROOTED and not 0 <= args.root < config.n_endpoints:
        raise ValueError(f"-r {args.root} is not a rank of {config.topology} (0..{config.n_endpoints - 1})")
    t0 = time.monotonic()
    with System(config, progress=not args.quiet) as system:
        line = ProgressLine(enabled=not args.quiet)
        rows = bench(system, args.bench, args.minbytes, args.maxbytes, args.stepfactor, dtype=args.datatype,
                     op=args.op, root=args.root, iters=args.iters, warmup=args.warmup_iters,
                     progress=lambda done, total: line.update(f"{args.bench}: run {done} of {total}"))
        line.done()
        print(format_table(rows, system, args.bench, args.minbytes, args.maxbytes, args.stepfactor, args.iters,
                           args.warmup_iters))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"collective": args.bench, "topology": system.config.topology,
                           "backend": system.config.backend, "clock_mhz": system.config.clock_mhz,
                           "npus": system.size, "rows": rows, "wall_s": time.monotonic() - t0}, f, indent=1)
    wrong = sum(r[p]["wrong"] for r in rows for p in ("out", "in") if r[p])
    return 1 if wrong else 0
