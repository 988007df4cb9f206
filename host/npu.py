"""NPU emulation: a training iteration's backward pass on emulated NPUs, overlapping gradient all-reduces with
compute, measuring the communication the compute could not hide (the ACE paper's microbenchmark shape:
compute, post the collective, compute, wait).

Each layer's backward compute is :meth:`~syncfabric.host.system.System.compute`: simulated cycles during
which every NPU takes a share of its memory port, so the engines' DMA competes with it exactly as the paper
argues; each layer's gradient is all-reduced as soon as its compute ends. ``exposed_cycles`` is the iteration
time minus the compute time: the wait for communication.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Layer", "training_iteration"]


@dataclass(frozen=True)
class Layer:
    """A layer of the emulated model: its backward compute in cycles and its gradient in elements."""

    name: str
    compute_cycles: int
    grad_elems: int


def training_iteration(system, layers, *, share=0.5, overlap=True, comm=None, dtype="fp32", check=True,
                       timeout_cycles=None):
    """Run the backward pass of ``layers`` (given in forward order; the pass goes last to first) on
    ``comm`` (default the world): per layer, compute for ``compute_cycles`` with ``share`` of the memory
    port, then all-reduce its gradient - without waiting (``overlap``) or waiting for it before the next
    layer's compute. Waits for every all-reduce at the end. Returns ``total_cycles``, ``compute_cycles``,
    ``exposed_cycles`` and per layer the all-reduce's ``cycles``. ``check``: every rank's gradients (integer
    valued, so any summation order gives the same sums) are compared with numpy's sum."""
    comm = comm or system.world
    if not layers:
        raise ValueError("training_iteration: no layers")
    eb = 4 if dtype in ("fp32", "int32") else 2
    offsets, total = [], 0
    for layer in layers:
        offsets.append(total)
        total += -(-layer.grad_elems * eb // 64) * 64
    grads, summed = system.register(total), system.register(total)
    rng = np.random.default_rng(system.config.seed)
    np_type = {"fp32": np.float32, "int32": np.int32, "fp16": np.float16}[dtype]
    data = [rng.integers(-8, 8, total // eb).astype(np_type) for _ in comm.ranks]
    try:
        for cr, sr in enumerate(comm.ranks):
            grads.write(sr, data[cr])
        start = system.now
        compute = 0
        reqs = []
        for k in reversed(range(len(layers))):
            layer = layers[k]
            system.compute(layer.compute_cycles, share)
            compute += layer.compute_cycles
            nbytes = layer.grad_elems * eb
            req = comm.allreduce(grads.view(offsets[k], nbytes), summed.view(offsets[k], nbytes),
                                 layer.grad_elems, dtype, "sum")
            reqs.append((layer, req))
            if not overlap:
                req.wait(timeout_cycles=timeout_cycles)
        for _, req in reqs:
            req.wait(timeout_cycles=timeout_cycles)
        total_cycles = system.now - start
        if check:
            expect = np.sum(data, axis=0)
            for sr in comm.ranks:
                for layer, k in zip(layers, offsets):
                    n = layer.grad_elems
                    got = summed.read(sr, np_type, count=n, offset=k)
                    if not np.array_equal(got, expect[k // eb:k // eb + n]):
                        raise AssertionError(f"rank {sr}: the gradient of {layer.name} is wrong")
        return {"total_cycles": total_cycles, "compute_cycles": compute,
                "exposed_cycles": total_cycles - compute, "share": share, "overlap": overlap,
                "layers": [{"name": layer.name, "grad_bytes": layer.grad_elems * eb, "cycles": req.cycles}
                           for layer, req in reqs]}
    finally:
        system.deregister(grads)
        system.deregister(summed)
