"""``syncfabric perf sven``: Sven's four-stage pipeline and hot-embedding placement
(:mod:`syncfabric.sim.golden.sven`) on three DLRM-like models, with stage times from this project's models.

Stage times of a model (:func:`stages`), per GPU and iteration at the dissertation's batch of 1024 samples
(Criteo's 26 sparse and 13 dense features, fp32):

- **communication** from the performance model (:func:`~.collective.collective_time`, endpoint ``ACE``) on
  ``switch:n`` with links of ``link_GBps`` (default 25 GB/s: one of the dissertation's 4x200 Gb/s InfiniBand
  NICs per GPU): the forward and backward all-to-all carry the sample's looked-up embeddings
  (``batch * 26 * dim * 4`` bytes per GPU), the all-reduce the dense parameters, the input re-distribution the
  indices and lengths (``batch * 26 * 8 * 2`` bytes);
- **compute** as a roofline on an A100 (``peak_TFLOPS`` x ``efficiency``, HBM ``gpu_GBps``): dense forward
  ``2 * batch * params`` flops (the backward twice that), the sparse forward reading the accessed rows (the
  sparse backward reading and writing them), the optimizer reading and writing the dense parameters 4 times
  (Adam's moments). Kernel launches and framework overheads are left out: they are the dissertation's, not the
  model's, and would only add to the compute side.

So the three models differ only in their shapes (below), and the pipeline's gain follows from how their
communication compares with their compute, as the dissertation's does.
"""

import math

from ..golden import sven as model
from .collective import collective_time
from .repro import write_outputs
from .svg import line_chart
from .system import SystemParams, endpoint

__all__ = ["sven", "stages", "dense_params", "MODELS", "SCALING_SIZES", "MAX_NPUS"]

#: (embedding dim per table, dense MLP layers, extra dense params and flops per sample (cross layers))
MODELS = {
    "DeepFM": {"dim": 16, "mlp": (400, 400, 400, 1), "extra_params": 26 * 16 + 26},      # FM: first-order weights
    "W&D": {"dim": 33, "mlp": (1024, 512, 256, 1), "extra_params": 0},                  # 32 deep + 1 wide
    "DCN": {"dim": 16, "mlp": (1024, 1024, 1), "extra_params": 6 * 2 * (26 * 16 + 13)},  # 6 cross layers
}
SCALING_SIZES = (1, 8, 16, 32, 64, 128)
#: the largest switch the scaling sweep simulates (switch:1024 alone takes about a minute)
MAX_NPUS = 1024
SPARSE, DENSE, BATCH = 26, 13, 1024


def dense_params(m):
    """Dense parameters of model ``m`` (weights and biases of the MLP on the concatenated embeddings)."""
    spec = MODELS[m]
    width, total = SPARSE * spec["dim"] + DENSE, spec["extra_params"]
    for out in spec["mlp"]:
        total += width * out + out
        width = out
    return total


def stages(m, n, hit_ratio=1.0, link_GBps=25.0, peak_TFLOPS=19.5, efficiency=0.5, gpu_GBps=1555.0,
           host_GBps=16.0, batch=BATCH, _cache=None):
    """:class:`~syncfabric.sim.golden.sven.Stages` (ms) of model ``m`` on ``n`` GPUs, a fraction
    ``hit_ratio`` of its embedding accesses in GPU memory (the rest over PCIe at ``host_GBps``)."""
    if n < 1:
        raise ValueError(f"GPUs {n}: need at least 1")
    spec = MODELS[m]
    params = dense_params(m)
    flops = peak_TFLOPS * 1e12 * efficiency
    emb = batch * SPARSE * spec["dim"] * 4
    mem_s = emb * (hit_ratio / (gpu_GBps * 1e9) + (1 - hit_ratio) / (host_GBps * 1e9))
    cache = {} if _cache is None else _cache

    def coll(kind, nbytes):
        if n == 1:
            return 0.0
        key = (kind, nbytes, n, link_GBps)
        if key not in cache:
            system = SystemParams(link_bw=link_GBps * 1e9)
            cache[key] = collective_time(kind, nbytes, f"switch:{n}", endpoint("ACE"), system).time * 1e3
        return cache[key]

    fp = 2 * batch * params / flops * 1e3
    return model.Stages(sfp=mem_s * 1e3, fp=fp, fa2a=coll("alltoall", emb), bp=2 * fp,
                        ba2a=coll("alltoall", emb), allreduce=coll("allreduce", params * 4),
                        sbp=2 * mem_s * 1e3, opt=8 * params * 4 / (gpu_GBps * 1e9) * 1e3,
                        input_a2a=coll("alltoall", batch * SPARSE * 8 * 2))


def sven(out_dir, npus=16, sizes=SCALING_SIZES, iterations=100, alphas=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1,
         0.2, 0.5), rows=20000, zipf_s=1.05, batches=60, seed=0, link_GBps=25.0, host_GBps=16.0):
    """Pipeline speedup over sequential execution for DeepFM, W&D and DCN on ``npus`` GPUs; the scaling factor
    ``T_n / (n T_1)`` over ``sizes`` (weak scaling: 1024 samples per GPU, as the dissertation); and, on one
    rank, the hit ratio of each placement policy over ``alphas`` on a Zipf(``zipf_s``) stream of ``rows`` rows
    with the resulting training throughput (the dissertation's Table 6.4 compares hot and random)."""
    if not 2 <= npus <= MAX_NPUS:
        raise ValueError(f"GPUs {npus}: the pipeline's communication needs 2 to {MAX_NPUS}")
    if not sizes or not all(1 <= n <= MAX_NPUS for n in sizes):
        raise ValueError(f"scaling GPU counts {list(sizes)}: each must be 1 to {MAX_NPUS}")
    if not 1 <= iterations <= 100000:
        raise ValueError(f"iterations {iterations}: need 1 to 100000")
    if not (0 < link_GBps < math.inf and 0 < host_GBps < math.inf):
        raise ValueError(f"link {link_GBps!r} GB/s, host {host_GBps!r} GB/s: bandwidths must be finite and > 0")
    sizes = sorted(set(sizes))
    cache = {}
    rows_out, meta = [], {"npus": npus, "iterations": iterations, "link_GBps": link_GBps,
                          "dense_params": {m: dense_params(m) for m in MODELS}}
    for m in MODELS:
        st = stages(m, npus, link_GBps=link_GBps, host_GBps=host_GBps, _cache=cache)
        pipe, seq = model.pipeline(st, iterations), model.pipeline(st, iterations, pipelined=False)
        rows_out.append({"part": "pipeline", "model": m, "npus": npus, "sequential_ms": seq.time / iterations,
                         "pipelined_ms": pipe.time / iterations, "speedup": seq.time / pipe.time,
                         "closed_form_ms": model.closed_form(st, 1), "compute_ms": st.compute,
                         "communication_ms": st.communication, "max_staleness": max(pipe.staleness)})
        meta.setdefault("stages_ms", {})[m] = {k: getattr(st, k) for k in
                                                ("sfp", "fp", "fa2a", "bp", "ba2a", "allreduce", "sbp", "opt",
                                                 "input_a2a")}
    scaling = {}
    for m in MODELS:
        t1 = model.closed_form(stages(m, 1, link_GBps=link_GBps, _cache=cache), 1)
        for n in sizes:
            st = stages(m, n, link_GBps=link_GBps, _cache=cache)
            f_pipe = t1 / model.closed_form(st, 1)
            f_seq = model.sequential_time(stages(m, 1, _cache=cache), 1) / model.sequential_time(st, 1)
            scaling.setdefault(m, []).append((n, f_pipe))
            rows_out.append({"part": "scaling", "model": m, "npus": n, "scaling_factor": f_pipe,
                             "scaling_factor_sequential": f_seq})
    stream = model.ZipfStream(rows=rows, s=zipf_s, batches=batches, seed=seed)
    hits = {}
    for a in alphas:
        res = {p: model.place(stream, a, p, seed=seed) for p in model.POLICIES}
        row = {"part": "placement", "alpha": a}
        for p, r in res.items():
            row[f"{p}_hit"] = r.hit_ratio
            hits.setdefault(p, []).append((a, r.hit_ratio))
        for m in MODELS:
            ips = {p: 1e3 / model.closed_form(stages(m, 1, hit_ratio=res[p].hit_ratio, host_GBps=host_GBps), 1)
                   for p in ("hot", "random")}
            row[f"{m}_hot_per_s"] = ips["hot"]
            row[f"{m}_hot_over_random"] = ips["hot"] / ips["random"]
        row["importance_migrations"] = res["importance"].migrations
        rows_out.append(row)
    meta["stream"] = {"rows": rows, "s": zipf_s, "batches": batches, "batch": stream.batch, "seed": seed}
    svg = write_outputs(out_dir, "sven", rows_out, meta)
    line_chart(svg, f"Sven: scaling factor T_n / (n T_1), pipelined, switch at {link_GBps:g} GB/s", "GPUs",
               "scaling factor", scaling)
    line_chart(svg.replace(".svg", "_placement.svg"), f"Sven: hit ratio on a Zipf({zipf_s:g}) stream",
               "alpha = m_G / (m_G + m_H)", "GPU hit ratio", hits)
    return rows_out, meta
