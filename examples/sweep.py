"""A size sweep of reduce-scatter printed as nccl-tests prints it (the library call behind
`syncfabric bench reduce_scatter -b 64 -e 16K -f 4`).

    python examples/sweep.py [--backend amaranth|verilator|icarus]
"""

import argparse
from pathlib import Path

from syncfabric.host.nccl_bench import bench, format_table
from syncfabric.host.system import System


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).with_name("ring4.yaml")), help="system YAML")
    ap.add_argument("--backend", default=None, help="override the configuration's simulator")
    ap.add_argument("--max-bytes", type=int, default=16384)
    args = ap.parse_args(argv)
    with System(args.config, backend=args.backend, progress=True) as system:
        rows = bench(system, "reduce_scatter", 64, args.max_bytes, 4, dtype="fp32", op="sum")
        print(format_table(rows, system, "reduce_scatter", 64, args.max_bytes, 4))
    return 0 if all(r[p]["wrong"] == 0 for r in rows for p in ("out", "in") if r[p]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
