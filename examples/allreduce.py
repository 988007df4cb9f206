"""One all-reduce through the host API: register buffers, write each NPU's gradients, post, wait, check.

    python examples/allreduce.py [--backend amaranth|verilator|icarus] [--count N]
"""

import argparse
from pathlib import Path

import numpy as np

from syncfabric.host.system import System


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).with_name("ring4.yaml")), help="system YAML")
    ap.add_argument("--backend", default=None, help="override the configuration's simulator")
    ap.add_argument("--count", type=int, default=4096, help="fp32 elements per NPU")
    args = ap.parse_args(argv)

    with System(args.config, backend=args.backend, progress=True) as system:
        n, count = system.size, args.count
        grads = system.register(4 * count)
        summed = system.register(4 * count)
        rng = np.random.default_rng(0)
        # integer-valued floats: every summation order gives the same result, so numpy can check it
        data = [rng.integers(-100, 100, count).astype(np.float32) for _ in range(n)]
        for rank in range(n):
            grads.write(rank, data[rank])
        req = system.world.allreduce(grads, summed, count, "fp32", "sum")
        req.wait(timeout_us=1000)
        expect = np.sum(data, axis=0)
        for rank in range(n):
            assert np.array_equal(summed.read(rank, "fp32"), expect), f"rank {rank} differs"
        busbw = 2 * (n - 1) / n * 4 * count / req.time_us / 1e3
        print(f"all-reduce of {4 * count} B on {system.config.topology} ({system.config.backend}): "
              f"{req.cycles} cycles = {req.time_us:.2f} us at {system.config.clock_mhz:g} MHz, "
              f"bus bandwidth {busbw:.2f} GB/s; every rank holds the sum")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
