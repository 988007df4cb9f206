"""BytePS's asynchronous training on the host cluster model (paper section 5, Theorem 2): workers push delta
parameters in any interleaving and get the latest parameters back; the services end with w0 plus every delta,
and each answer is what a parameter server applying the same deltas in the same order holds (Asynchronous
Parallel). int32 so that the order of additions cannot hide a wrong sum."""

import os
import random
import sys

import numpy as np

from syncfabric.host.coarse.byteps import BytePSCluster
from syncfabric.sim.golden import byteps

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402


def test_async_cluster_answers_what_asynchronous_parallel_holds_in_any_push_order():
    seed = seed_for(11)
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    n, k, part = 3, 2, 16
    sizes = [byteps.bucket_count(n, k) * part // 4 + 3, 5]        # parts on every service, a ragged tail
    cl = BytePSCluster(n, k, "int32", part_bytes=part, asynchronous=True)
    w0 = [nrng.integers(-1000, 1000, s, dtype=np.int32) for s in sizes]
    assert all(np.array_equal(a.view(np.int32), b) for a, b in zip(cl.push(0, w0), w0))   # initial push: w0
    ps = [w.copy() for w in w0]            # the parameter server of Asynchronous Parallel
    order = [w for w in range(n) for _ in range(4)]
    rng.shuffle(order)                      # 4 iterations per worker, workers at different speeds
    for w in order:
        delta = [nrng.integers(-50, 50, s, dtype=np.int32) for s in sizes]
        got = cl.push(w, delta)
        ps = [p + d for p, d in zip(ps, delta)]
        assert all(np.array_equal(a.view(np.int32), b) for a, b in zip(got, ps)), f"worker {w} (seed {seed})"
    assert all(np.array_equal(a.view(np.int32), b) for a, b in zip(cl.pull(1), ps))
