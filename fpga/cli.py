"""``syncfabric build`` (a board's bitstream) and ``syncfabric report`` (area and power per component).

Registered through :data:`syncfabric.host.cli.EXTRA_COMMANDS`.
"""

import json
import sys
from pathlib import Path

__all__ = ["register"]


def _engine_config(text):
    """A profile name, or a system YAML file whose ``engine`` (and ``topology``) the build takes."""
    from ..hdl.ace.config import PROFILES

    if text is None or text in PROFILES:
        return text, None
    if not Path(text).exists():
        raise ValueError(f"--config {text!r} is neither a configuration ({', '.join(PROFILES)}) nor a file")
    from ..host.config import load_config

    sc = load_config(text)
    return sc.engine, sc.topology


def _cmd_build(args):
    from .boards import BOARDS
    from .build import BuildError, build_board, format_build
    from ..host.cli import check_output_path
    from .tools import ToolError

    if args.list:
        width = max(map(len, BOARDS))
        for name, b in BOARDS.items():
            print(f"{name:<{width}}  {b.family:<6} {f'{b.clk_hz / 1e6:g} MHz':<9} {b.note}")
        return 0
    if not args.board:
        print("syncfabric build: error: --board is required (--list shows the boards)", file=sys.stderr)
        return 2
    try:
        check_output_path(args.json)        # before the build, not after it
        cfg, topo = _engine_config(args.config)
        res = build_board(args.board, cfg, topology=args.topology or topo, mem_bytes=args.mem_bytes,
                          clk_hz=args.clock_mhz * 1e6 if args.clock_mhz else None, build_dir=args.build_dir,
                          seed=args.seed, progress=None if args.quiet else (lambda t: print(t, flush=True)))
        status = 0
    except BuildError as exc:
        res = exc.result
        if res is not None and res.resources:
            print(format_build(res))
        print(f"syncfabric build: error: {exc}", file=sys.stderr)
        status = 1
    except (ValueError, ToolError) as exc:
        print(f"syncfabric build: error: {exc}", file=sys.stderr)
        return 2
    if status == 0:
        print(format_build(res))
    if args.json and res is not None:
        text = json.dumps(res.as_dict(), indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return status


def _cmd_report(args):
    from ..host.cli import engine_config_of
    from .report import format_block, format_markdown, run_report, time_block
    from .tools import ToolError

    try:
        comps = [c.strip() for c in args.components.split(",")] if args.components else None
        config = engine_config_of(args)
        if args.block:
            rep = time_block(config, args.block, Path(args.out) / args.block, clock_mhz=args.clock_mhz,
                             progress=None if args.quiet else (lambda t: print(t, flush=True)))
            print(format_block(rep))
            return 0 if rep["timing"]["meets"] else 1
        rep = run_report(config, components=comps, out_dir=args.out, fpga=not args.no_fpga,
                         power=not args.no_power, sweep=args.sweep, clock_mhz=args.clock_mhz,
                         pnr=not args.no_pnr, fpga_mhz=args.fpga_mhz,
                         progress=None if args.quiet else (lambda t: print(t, flush=True)))
    except (ValueError, ToolError) as exc:
        print(f"syncfabric report: error: {exc}", file=sys.stderr)
        return 2
    print(format_markdown(rep))
    print(f"\nwritten: {', '.join(rep['files'])}")
    return 0


def register(sub):
    """Add ``build`` and ``report`` to the ``syncfabric`` subcommands."""
    from ..hdl.ace.config import PROFILES
    from .timing import BLOCKS
    from ..host.cli import _engine_field

    p = sub.add_parser("build", help="build a prototype board's bitstream (YoWASP tools) and print its resources")
    p.add_argument("--board", help="board name (--list shows them)")
    p.add_argument("--list", action="store_true", help="list the boards and exit")
    p.add_argument("--config", default=None,
                   help=f"engine configuration ({', '.join(PROFILES)}) or a system YAML file whose engine and "
                        f"topology are built (default: the board's)")
    p.add_argument("--topology", default=None, help="endpoints on the board (default the board's, e.g. ring:2)")
    p.add_argument("--mem-bytes", type=int, default=None, help="on-chip NPU memory per endpoint (power of two)")
    p.add_argument("--clock-mhz", type=float, default=None, help="target clock (default the board's oscillator)")
    p.add_argument("--build-dir", default=None, help="where the build goes (default build/fpga/<board>)")
    p.add_argument("--seed", type=int, default=1, help="nextpnr placement seed (default 1)")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-' for stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=_cmd_build)

    r = sub.add_parser("report", help="area and power per component: FPGA resources, Nangate 45 nm cells with "
                                      "OpenSTA power, and the ACE paper's Table IV beside them")
    r.add_argument("--config", default="small", choices=list(PROFILES),
                   help="engine configuration (default %(default)s; 'paper' is the design point, a long run)")
    r.add_argument("--engine", type=_engine_field, action="append", default=[], metavar="FIELD=VALUE",
                   help="override a field of the engine configuration, e.g. --engine replay_flits=256; repeatable")
    r.add_argument("--components", default=None,
                   help="comma-separated subset of: alu, control, sram, dma, link, switch, sync_core "
                        "(default all)")
    r.add_argument("--out", default="build/report", help="folder for report.md, report.json and the plots")
    r.add_argument("--clock-mhz", type=float, default=1000.0,
                   help="target clock: synthesis is delay-driven for it, timing is checked against it, power "
                        "is at the lower of it and the clock met (default 1000: the ACE paper's 1 GHz)")
    r.add_argument("--no-fpga", action="store_true", help="skip the FPGA synthesis")
    r.add_argument("--no-pnr", action="store_true",
                   help="skip the ECP5 place and route of each unit (its Fmax; minutes for the whole engine)")
    r.add_argument("--fpga-mhz", type=float, default=100.0, help="ECP5 target clock for place and route (100)")
    r.add_argument("--no-power", action="store_true", help="skip the activity simulation and OpenSTA")
    r.add_argument("--sweep", action="store_true",
                   help="also sweep SRAM size, FSM count and ALU lanes (area growth; several syntheses)")
    r.add_argument("--block", choices=list(BLOCKS), default=None,
                   help="instead of the report: synthesize this engine block alone and time it at 45 nm (its "
                        "worst path into each submodule; exits 1 when it misses the clock). The control "
                        "component is otherwise timed only inside the whole engine")
    r.add_argument("--quiet", action="store_true", help="no progress output")
    r.set_defaults(func=_cmd_report)
