"""Seeded random send buffers of a collective: the inputs every run, testbench and benchmark checks against the
golden executor (numpy only, so the host's job layer and the run command share them without importing each
other)."""

import numpy as np

from .arith import bf16_from_float32
from .chunking import buffer_counts
from .types import DType

__all__ = ["make_inputs", "random_inputs"]


def make_inputs(spec):
    """Seeded random send buffers of every endpoint of the job ``spec`` (:func:`syncfabric.host.run.job_spec`;
    None where a rank has no send buffer)."""
    return random_inputs(spec["collective"], spec["count"], spec["npus"], spec["dtype"], spec["root"],
                         np.random.default_rng(spec["seed"]))


def random_inputs(collective, count, npus, dtype, root, rng):
    """Random send buffers of ``npus`` ranks for ``collective`` of ``count`` elements (NCCL convention) drawn
    from the numpy generator ``rng``; None where a rank has no send buffer."""
    dtype = DType.parse(dtype)
    inputs = []
    for r in range(npus):
        n, _ = buffer_counts(collective, count, npus, r, root)
        if n == 0:
            inputs.append(None)
        elif dtype == DType.INT32:
            inputs.append(rng.integers(-(1 << 24), 1 << 24, n, dtype=np.int32))
        elif dtype == DType.FP16:
            inputs.append(rng.standard_normal(n).astype(np.float16))
        elif dtype == DType.BF16:
            inputs.append(bf16_from_float32(rng.standard_normal(n).astype(np.float32)))
        else:
            inputs.append(rng.standard_normal(n).astype(np.float32))
    return inputs
