"""Exposed communication of a training iteration's backward pass: gradient all-reduces overlapped with
compute that takes a share of each NPU's memory port (the ACE paper's microbenchmark shape).

    python examples/training_overlap.py [--backend amaranth|verilator|icarus]
"""

import argparse
from pathlib import Path

from syncfabric.host.npu import Layer, training_iteration
from syncfabric.host.system import System

#: A small model: backward compute per layer (cycles) and gradient elements.
LAYERS = [Layer("conv1", 3000, 2048), Layer("conv2", 2000, 4096), Layer("fc", 1000, 8192)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).with_name("ring4.yaml")), help="system YAML")
    ap.add_argument("--backend", default=None, help="override the configuration's simulator")
    ap.add_argument("--shares", default="0,0.5,0.9", help="memory shares the NPU compute takes")
    args = ap.parse_args(argv)
    with System(args.config, backend=args.backend, progress=True) as system:
        print(f"{'share':>6} {'overlap':>8} {'total':>8} {'compute':>8} {'exposed':>8}  all-reduce cycles per layer")
        for share in (float(x) for x in args.shares.split(",")):
            for overlap in (True, False):
                r = training_iteration(system, LAYERS, share=share, overlap=overlap)
                per = ", ".join(f"{x['name']} {x['cycles']}" for x in r["layers"])
                print(f"{share:6.2f} {str(overlap):>8} {r['total_cycles']:8d} {r['compute_cycles']:8d} "
                      f"{r['exposed_cycles']:8d}  {per}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
