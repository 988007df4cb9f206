"""The ``syncfabric`` command line.

``syncfabric run``   one collective end to end on emulated NPUs, each with an ACE engine RTL, every byte checked
                     against the golden model;
``syncfabric demo``  the main job: an 8-NPU ring all-reduce of 256 KiB per NPU on the medium engine (Verilator);
``syncfabric bench`` collective sweeps through the host API printed as nccl-tests prints them, and engine
                     benchmarks (link efficiency, simulation speed, SRAM x FSM sweep).
"""

import argparse
import importlib
import json
import sys

from ..hdl.ace.config import PROFILES
from ..sim.golden.chunking import COLLECTIVES
from ..sim.golden.partitions import SPLITS
from ..sim.golden.types import DType, ReduceOp
from .config import SIZE_UNITS as _UNITS
from .nccl_bench import BENCH_COLLECTIVES
from .run import BACKENDS, DEFAULT_LATENCY

__all__ = ["main", "parse_size", "check_output_path"]


def parse_size(text):
    """Bytes in a size such as ``4096``, ``64K``, ``64KiB`` or ``1M`` (binary units)."""
    s = str(text).strip().lower()
    num = s.rstrip("kmgib")
    unit = s[len(num):]
    if not num.isdigit() or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4096, 64K, 1MiB)")
    return int(num) * _UNITS[unit]


def parse_chunk(text):
    """``--chunk-bytes``: a size (:func:`parse_size`), ``auto`` or ``max``."""
    s = str(text).strip().lower()
    if s in ("auto", "max"):
        return s
    try:
        return parse_size(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a size, auto or max: {text!r} (examples: 16K, auto, max)") from None


def check_output_path(path, option="--json"):
    """Raise ValueError unless ``path`` (an output file; None or ``-``: none or stdout) can be created: its
    directory exists and is writable, and it is not a directory. Checked before a run, not after it."""
    import os

    if not path or path == "-":
        return
    where = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise ValueError(f"{option} {path}: is a directory, not a file")
    if not os.path.isdir(where):
        raise ValueError(f"{option} {path}: the directory {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: the directory {where} is not writable")


def _rank_list(text):
    """Ranks in ``"1,3,5"`` (empty: none)."""
    try:
        return tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ranks: {text!r}") from None


def engine_config_of(args):
    """The engine configuration a command's ``--config`` and ``--engine FIELD=VALUE`` options name: the profile
    name itself when nothing is overridden, else the :class:`AceConfig` (a bad value raises ValueError)."""
    if not args.engine:
        return args.config
    from ..hdl.ace.config import AceConfig

    return AceConfig.profile(args.config, **dict(args.engine))


def _engine_field(text):
    """``FIELD=VALUE`` of an ``AceConfig`` integer field."""
    import dataclasses

    from ..hdl.ace.config import AceConfig

    name, sep, value = str(text).partition("=")
    fields = {f.name for f in dataclasses.fields(AceConfig)}
    if not sep or name not in fields:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE with FIELD an engine configuration field "
                                         f"({', '.join(sorted(fields))}), got {text!r}")
    try:
        return name, int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected an integer, got {value!r}") from None


def _add_run_args(p, defaults):
    p.add_argument("--collective", default=defaults["collective"],
                   choices=COLLECTIVES,
                   help="collective to run (default %(default)s)")
    p.add_argument("--topology", default=defaults["topology"],
                   help="ring:N, bidir-ring:N, torus:LxVxH or switch:N, at most 512 endpoints (default "
                        "%(default)s)")
    p.add_argument("--algorithm", default=None, help="algorithm (default: the topology's default)")
    p.add_argument("--bytes", type=parse_size, default=defaults["bytes"],
                   help="bytes per endpoint buffer, nccl-tests convention; ignored by barrier; at most 256MiB "
                        "over all endpoints together (the golden model checks every run in host memory) "
                        "(default %(default)s)")
    p.add_argument("--dtype", default="fp32", type=str.lower, choices=[d.name.lower() for d in DType])
    p.add_argument("--op", default="sum", type=str.lower, choices=[o.name.lower() for o in ReduceOp],
                   help="reduction of allreduce, reduce_scatter and reduce (the other collectives refuse any "
                        "but the default, %(default)s)")
    p.add_argument("--root", type=int, default=0, help="root rank of broadcast/reduce")
    p.add_argument("--null-ranks", type=_rank_list, default=(),
                   help="comma-separated ranks that make a null contribution (partial all-reduce, RNA): they "
                        "read nothing and count 0; allreduce, reduce_scatter or reduce with op sum")
    p.add_argument("--chunk-bytes", type=parse_chunk, default=None,
                   help="chunk size, or auto (the default: the driver ranks the engine's largest chunk and its "
                        "halves with the performance model, messages of at least 16 beats) or max (the "
                        "largest the engine runs the program with); golden: 64KiB unless a size")
    p.add_argument("--backend", default=defaults["backend"], choices=list(BACKENDS),
                   help="verilator/icarus: one engine RTL per NPU under cocotb; amaranth: the same in Amaranth's "
                        "simulator (slow); golden: the numpy model only (default %(default)s)")
    p.add_argument("--config", default=defaults["config"], choices=list(PROFILES),
                   help="engine configuration: small (tests), medium (16 B beats, builds in minutes), paper "
                        "(the design point: 64 B beats, 16 FSMs, 64 KiB chunks; a long first build) "
                        "(default %(default)s)")
    p.add_argument("--latency", type=int, default=None,
                   help=f"every link's latency in cycles (default: the topology's: {DEFAULT_LATENCY} on rings; "
                        f"a torus's local links 90, its vertical/horizontal links 500)")
    p.add_argument("--rate", type=float, default=None,
                   help="every link's rate in flits per cycle, in (0, 1] (default: the topology's: 1 on rings; "
                        "a torus's local links 1, its vertical/horizontal links 1/8)")
    p.add_argument("--buffers", type=int, default=None,
                   help="chunk buffers the engines use (default: all of the configuration's)")
    p.add_argument("--fsms", type=int, default=None, help="FSMs the engines use (default: all)")
    p.add_argument("--sram-split", choices=SPLITS, default="residence",
                   help="how the driver splits the chunk buffers among a program's phases (PART registers): "
                        "residence (in proportion to the time a chunk stays in each phase) or ace (the ACE "
                        "paper's link bandwidth x initial chunk size; docs/engine.md section 3) "
                        "(default %(default)s)")
    p.add_argument("--engine", type=_engine_field, action="append", default=[], metavar="FIELD=VALUE",
                   help="override a field of the engine configuration (docs/engine.md section 8), e.g. "
                        "--engine n_fsms=16 --engine n_buffers=32; repeatable")
    p.add_argument("--pause", type=float, default=0.0,
                   help="probability that an NPU memory's AXI channel stalls in a cycle (default 0)")
    p.add_argument("--fault", default=None, metavar="KIND=P,...",
                   help="links that misbehave at random: flip=P (a random data bit flipped, per flit carried), "
                        "stall=P (ready held low, per cycle), drop=P and dup=P (a flit lost or delivered twice; "
                        "with --engine replay_flits=N only); verilator and icarus, one process; the summary "
                        "classes each NPU's completion exact, error or silent (OK with wrong bytes)")
    p.add_argument("--seed", type=int, default=1, help="seed of the random input data (default 1)")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE ('-' for stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--npu-mem", choices=("cocotb", "hdl"), default=None,
                   help="NPU memories: an HDL RAM per endpoint in the simulated system, loaded and read through "
                        "a back door (hdl; --pause becomes its stall probability, fixed in the build), or "
                        "cocotbext-axi models served by Python every cycle (cocotb, about a third of the "
                        "speed) (default hdl on verilator and icarus)")
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="simulate the system as N simulator processes cut at its links (contiguous rank "
                        "blocks, exchanging the cut links' flits every window of the shortest cut link's "
                        "latency - 1 cycles; cycle for cycle the one-process run); point-to-point topologies "
                        "on verilator or icarus (default: one process)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the partitions on this Dask scheduler (tcp://host:8786; its workers need "
                        "syncfabric and the simulator) instead of a LocalCluster on this machine; implies "
                        "--partitions 2 unless given")
    _add_threads_arg(p)


def _threads(text):
    from .transports.harness import verilator_threads

    try:
        return text if text == "auto" else verilator_threads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_threads_arg(p, extra="", repeat=False):
    p.add_argument("--threads", type=_threads, default=None if repeat else "auto", metavar="N",
                   action="append" if repeat else "store",
                   help="Verilator simulation threads per simulator process (a model with more than one is a "
                        "build of its own; auto: the idle cores (cores less the load average) shared among "
                        "partitions, 1 to 4, or $SYNCFABRIC_VERILATOR_THREADS; more threads than idle cores "
                        "is many times slower than one; default auto)" + extra)


def _cmd_run(args):
    from .run import run_collective, format_summary, passed

    try:
        check_output_path(args.json)
        config = engine_config_of(args)
        result = run_collective(collective=args.collective, topology=args.topology, algorithm=args.algorithm,
                                nbytes=args.bytes, dtype=args.dtype, op=args.op, root=args.root,
                                null_ranks=args.null_ranks,
                                chunk_bytes=args.chunk_bytes, backend=args.backend, config=config,
                                latency=args.latency, rate=args.rate, pause=args.pause, seed=args.seed,
                                buffers=args.buffers, fsms=args.fsms,
                                npu_mem=args.npu_mem or ("hdl" if args.backend in ("verilator", "icarus")
                                                         else "cocotb"),
                                partitions=args.partitions, scheduler=args.scheduler,
                                threads=args.threads, progress=not args.quiet, fault=args.fault,
                                sram_split=args.sram_split)
    except (ValueError, RuntimeError) as exc:
        print(f"syncfabric {args.command}: error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(result))
    if args.json == "-":
        json.dump(result, sys.stdout, indent=2)
        print()
    elif args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
        except OSError as exc:
            print(f"syncfabric {args.command}: error: --json {args.json}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0 if passed(result) else 1


def _cmd_bench(args):
    from .bench import main as bench_main
    from .nccl_bench import main as nccl_main

    try:
        check_output_path(args.json)
        if args.bench in BENCH_COLLECTIVES:
            return nccl_main(args)
        args.config = args.config or ("small" if args.bench in ("transports", "faults") else "paper")
        return bench_main(args)
    except (ValueError, RuntimeError) as exc:
        print(f"syncfabric bench: error: {exc}", file=sys.stderr)
        return 2


#: Modules that add their own subcommands: each has ``register(subparsers)``, which adds its parser(s) and sets
#: ``func`` (called with the parsed arguments, returns the exit status). Imported when the command line is built.
EXTRA_COMMANDS = (
    "syncfabric.host.coarse.cli",
    "syncfabric.fpga.cli",
    "syncfabric.host.perf_cli",
)


def main(argv=None):
    """Entry point of the ``syncfabric`` command."""
    parser = argparse.ArgumentParser(prog="syncfabric", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_defaults = {"collective": "allreduce", "topology": "ring:4", "bytes": 64 * 1024, "backend": "verilator",
                    "config": "medium"}
    demo_defaults = {"collective": "allreduce", "topology": "ring:8", "bytes": 256 * 1024, "backend": "verilator",
                     "config": "medium"}
    p_run = sub.add_parser("run", help="run one collective end to end and check every byte")
    _add_run_args(p_run, run_defaults)
    p_run.set_defaults(func=_cmd_run)
    p_demo = sub.add_parser("demo", help="the main job: an 8-NPU ring all-reduce checked against the golden model")
    _add_run_args(p_demo, demo_defaults)
    p_demo.set_defaults(func=_cmd_run)
    p_bench = sub.add_parser(
        "bench", help="collective sweeps in nccl-tests format, and engine benchmarks (link efficiency, simulation "
                      "speed, SRAM x FSM sweep)",
        description="syncfabric bench COLLECTIVE -b MIN -e MAX -f FACTOR prints nccl-tests' table for a size sweep "
                    "through the host API (every result checked: #wrong); efficiency, simspeed and sweep are the "
                    "engine benchmarks of docs/results.md.")
    p_bench.add_argument("bench", choices=list(BENCH_COLLECTIVES) + ["efficiency", "simspeed", "sweep",
                                                                     "transports", "faults"],
                         help="a collective (nccl-tests style sweep), or efficiency: all-reduce against the link "
                              "bound on uni- and bidirectional rings; simspeed: simulated cycles/s per simulator "
                              "and NPU memory; sweep: chunk buffers x FSMs; transports: the host API's backends "
                              "(simulated cycles/s, host time per collective); faults: random collectives on "
                              "links that flip bits, counting exact, error, silent and hung completions")
    p_bench.add_argument("--config", default=None, choices=list(PROFILES),
                         help="engine configuration (default: small for collective sweeps, transports and faults, "
                              "paper otherwise)")
    p_bench.add_argument("--system", metavar="FILE", help="collective sweeps: the system's YAML configuration "
                                                           "(docs/api.md); --topology/--backend override it")
    p_bench.add_argument("-b", "--minbytes", type=parse_size, default=8, help="smallest size (default 8)")
    p_bench.add_argument("-e", "--maxbytes", type=parse_size, default=8192, help="largest size (default 8K)")
    p_bench.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier (default 2)")
    p_bench.add_argument("-d", "--datatype", default="fp32", choices=["fp32", "fp16", "bf16", "int32"],
                         help="element type (default fp32)")
    p_bench.add_argument("-o", "--op", default="sum", choices=["sum", "max", "min"], help="reduction (default sum)")
    p_bench.add_argument("-r", "--root", type=int, default=0, help="root of broadcast / reduce (default 0)")
    p_bench.add_argument("-n", "--iters", type=int, default=1, help="timed runs per size (default 1)")
    p_bench.add_argument("-w", "--warmup_iters", type=int, default=0, help="untimed runs first (default 0)")
    p_bench.add_argument("--clock-mhz", type=float, default=None, help="engine clock for the time column "
                                                                       "(default the configuration's, 1000)")
    p_bench.add_argument("--quiet", action="store_true", help="no progress output")
    p_bench.add_argument("--bytes", type=parse_size, action="append",
                         help="engine benchmarks: bytes per NPU (repeatable; default 1M)")
    p_bench.add_argument("--topology", action="append", help="topology (repeatable for the engine benchmarks)")
    p_bench.add_argument("--backend", choices=["verilator", "icarus", "amaranth"], default=None,
                         help="simulator (default: amaranth for collective sweeps unless --system says otherwise; "
                              "verilator for the engine benchmarks; simspeed: verilator and icarus)")
    p_bench.add_argument("--latency", type=int, default=None, help="link latency in cycles (engine benchmarks: "
                         "default 10 on rings and switches; a torus keeps its own links, the ACE paper's 90-cycle "
                         "local and 500-cycle inter-package links at 1/8 rate)")
    p_bench.add_argument("--rate", type=float, default=None,
                         help="efficiency, sweep: every link's rate in flits per cycle (default the topology's, 1)")
    p_bench.add_argument("--chunk-bytes", type=parse_chunk, default=None,
                         help="efficiency, sweep: chunk size, auto (the default: the driver's choice per run) or "
                              "max (the largest the engine runs the program with)")
    p_bench.add_argument("--npu-mem", choices=("cocotb", "hdl"), default=None,
                         help="efficiency, sweep: NPU memories (default: hdl, the HDL RAMs, on Verilator and "
                              "Icarus; the simulator's own model on Amaranth)")
    p_bench.add_argument("--buffers", type=int, action="append", help="sweep: chunk buffers (repeatable)")
    p_bench.add_argument("--fsms", type=int, action="append", help="sweep: FSMs (repeatable)")
    p_bench.add_argument("--partitions", type=int, action="append", default=None,
                         help="simspeed: also run the system as this many simulator processes (repeatable; "
                              "the topology's links need latency >= 2)")
    p_bench.add_argument("--collectives", type=int, default=200,
                         help="faults: collectives to run (default 200, in simulations of 50)")
    p_bench.add_argument("--fault", default="flip=0.002",
                         help="faults: KIND=P,...; KIND flip (a random data bit flipped, per flit a link carries), "
                              "stall (a link's ready held low, per cycle), drop or dup (a flit lost or delivered "
                              "twice, per flit; needs --engine replay_flits=N); default flip=0.002")
    p_bench.add_argument("--engine", type=_engine_field, action="append", default=[], metavar="FIELD=VALUE",
                         help="faults: override a field of the engine configuration, e.g. --engine "
                              "replay_flits=64 (link retransmission, docs/engine.md section 15); repeatable")
    p_bench.add_argument("--seed", type=int, default=1, help="faults: random seed (default 1)")
    p_bench.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    _add_threads_arg(p_bench, "; engine benchmarks only, and simspeed takes several: a row each", repeat=True)
    p_bench.set_defaults(func=_cmd_bench)
    for name in EXTRA_COMMANDS:
        importlib.import_module(name).register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
