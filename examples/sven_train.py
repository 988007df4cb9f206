"""Sven's four-stage pipeline training a tiny DLRM-like model on the engines (the dissertation's chapter 6).

Each of the ``n`` ranks owns one embedding table (model parallel: table t on rank t, as after Sven's column-wise
sharding on the CPU-only cluster, which also hands each owner the indices of its feature for every rank's
batch) and holds a replica of the dense layer (data parallel). An iteration is the dissertation's:

- ``sfp``: each owner looks up its table's rows for every rank's samples;
- ``fa2a``: the forward all-to-all sends rank d the rows of its samples (``Communicator.alltoall``);
- ``fp``: each rank concatenates its samples' rows with their dense features and applies the dense layer
  (a linear model with a squared loss);
- ``bp``: the dense layer's gradient, and the gradient of each sample's rows;
- ``ba2a``: the backward all-to-all returns the rows' gradients to their owners;
- ``allreduce``: the dense gradients summed (``Communicator.allreduce``);
- ``sbp``: each owner applies its rows' gradients (SGD); ``opt``: each rank applies the averaged dense gradient.

The schedule is :func:`syncfabric.sim.golden.sven.pipeline`'s, run slot by slot: a slot's communication is
posted on the engines, the slot's compute runs (numpy), then the slot waits for the collective. So the sparse
forward reads tables missing up to three iterations' updates, as in Sven. The same schedule runs again with
numpy collectives as the reference: every all-to-all must equal the reference's exactly (it only moves data),
every all-reduce to float32 rounding, and the final tables and dense weights must agree. The sequential
schedule (eq. 6.1, staleness 0) runs too, for the loss.

    python examples/sven_train.py [--config ring4.yaml] [--iterations 6] [--batch 8] [--dim 4]
"""

import argparse
from pathlib import Path

import numpy as np

from syncfabric.sim.golden import sven


class Task:
    """A synthetic click-through task: per rank and iteration ``batch`` samples, each with one index per table
    (Zipf-distributed rows: a few hot ones), ``dense`` dense features and a label from a hidden model."""

    def __init__(self, n, rows, dim, dense, batch, iterations, seed=0):
        rng = np.random.default_rng(seed)
        p = 1.0 / np.arange(1, rows + 1) ** 1.05
        self.n, self.rows, self.dim, self.dense, self.batch = n, rows, dim, dense, batch
        self.idx = rng.choice(rows, size=(iterations, n, n, batch), p=p / p.sum())   # [it, rank, table, sample]
        self.x = rng.standard_normal((iterations, n, batch, dense)).astype(np.float32)
        true_tables = rng.standard_normal((n, rows, dim)).astype(np.float32)
        true_w = rng.standard_normal(n * dim + dense).astype(np.float32)
        emb = true_tables[np.arange(n)[None, None, :, None], self.idx]      # [it, rank, table, sample, dim]
        feats = np.concatenate([emb.transpose(0, 1, 3, 2, 4).reshape(iterations, n, batch, n * dim), self.x], -1)
        self.y = (feats @ true_w).astype(np.float32)
        self.tables0 = (0.1 * rng.standard_normal((n, rows, dim))).astype(np.float32)
        self.w0 = np.zeros(n * dim + dense, np.float32)


class NumpyCollectives:
    """The reference: what the collectives must return."""
    name = "numpy"

    def alltoall(self, send):              # send[s][d] -> recv[d][s]
        return np.ascontiguousarray(np.swapaxes(send, 0, 1)), None

    def allreduce(self, send):
        return np.broadcast_to(send.sum(axis=0, dtype=np.float32), send.shape).copy(), None


class EngineCollectives:
    """The same collectives on the engines through the System API; each post returns a handle the slot waits
    for after its compute."""
    name = "engines"

    def __init__(self, system, a2a_count, ar_count):
        self.system, self.n = system, system.size
        self.a2a_count, self.ar_count = a2a_count, ar_count
        self.a2a_send = system.register(4 * self.n * a2a_count)
        self.a2a_recv = system.register(4 * self.n * a2a_count)
        self.ar_send = system.register(4 * ar_count)
        self.ar_recv = system.register(4 * ar_count)
        self.cycles, self.bytes = {"alltoall": [], "allreduce": []}, 0

    def post_alltoall(self, send):
        for r in range(self.n):
            self.a2a_send.write(r, np.ascontiguousarray(send[r], np.float32).ravel())
        return self.system.world.alltoall(self.a2a_send, self.a2a_recv, self.a2a_count, "fp32")

    def finish_alltoall(self, req, shape):
        req.wait(timeout_us=10000)
        self.cycles["alltoall"].append(req.cycles)
        self.bytes += 4 * self.n * self.n * self.a2a_count
        return np.stack([self.a2a_recv.read(r, "fp32").reshape(shape[1:]) for r in range(self.n)])

    def post_allreduce(self, send):
        for r in range(self.n):
            self.ar_send.write(r, np.ascontiguousarray(send[r], np.float32))
        return self.system.world.allreduce(self.ar_send, self.ar_recv, self.ar_count, "fp32", "sum")

    def finish_allreduce(self, req):
        req.wait(timeout_us=10000)
        self.cycles["allreduce"].append(req.cycles)
        self.bytes += 4 * self.n * self.ar_count
        return np.stack([self.ar_recv.read(r, "fp32") for r in range(self.n)])


def train(task, schedule, coll, lr=0.05, check=None):
    """Run ``schedule`` (a :class:`~syncfabric.sim.golden.sven.PipelineResult`'s slots) on ``task``.
    ``check``: the reference collectives, each engine result compared with theirs as it arrives."""
    n, b, d = task.n, task.batch, task.dim
    tables, w = task.tables0.copy(), task.w0.copy()
    st = {}                # (stash, iteration) -> array: what a stage leaves for the next (the FIFO queues)
    losses = {}
    checked = {"alltoall": 0, "allreduce": 0}

    def compute(k, i):
        idx = task.idx[i]
        if k == "sfp":     # owner t looks up table t for every rank's samples: send[t][r] = rows of rank r
            st["emb_send", i] = np.stack([tables[t][idx[:, t]] for t in range(n)])      # [t, r, sample, dim]
        elif k == "fp":
            emb = st.pop(("emb", i))                                                      # [r, t, sample, dim]
            feats = np.concatenate([emb.transpose(0, 2, 1, 3).reshape(n, b, n * d), task.x[i]], -1)
            st["feats", i], st["w", i] = feats, w.copy()        # the weights this forward used, for the backward
            pred = feats @ w
            st["err", i] = pred - task.y[i]
            losses[i] = float(np.mean(st["err", i] ** 2))
        elif k == "bp":
            feats, err, wi = st.pop(("feats", i)), st.pop(("err", i)), st.pop(("w", i))
            st["gw_send", i] = (2.0 / b * np.einsum("rs,rsf->rf", err, feats)).astype(np.float32)
            gfeat = (2.0 / b * err[..., None] * wi[None, None, :]).astype(np.float32)   # [r, sample, feat]
            st["gemb_send", i] = gfeat[..., :n * d].reshape(n, b, n, d).transpose(0, 2, 1, 3)   # [r, t, s, dim]
        elif k == "sbp":   # owner t applies the gradients of its rows (rows hit twice get both)
            g = st.pop(("gemb", i))                                                       # [t, r, sample, dim]
            for t in range(n):
                np.add.at(tables[t], idx[:, t].ravel(), -lr * g[t].reshape(-1, d))
        elif k == "opt":
            w[:] = w - lr * st.pop(("gw", i))[0] / n

    def post(k, i):
        src = {"fa2a": "emb_send", "ba2a": "gemb_send", "allreduce": "gw_send"}[k]
        send = st.pop((src, i))
        if hasattr(coll, "post_alltoall"):
            req = coll.post_alltoall(send) if k != "allreduce" else coll.post_allreduce(send)
        else:
            req = None
        return send, req

    def finish(k, i, send, req):
        ref = None
        if check is not None:
            ref = check.allreduce(send)[0] if k == "allreduce" else check.alltoall(send)[0]
        if req is None:
            got = coll.alltoall(send)[0] if k != "allreduce" else coll.allreduce(send)[0]
        elif k == "allreduce":
            got = coll.finish_allreduce(req)
        else:
            got = coll.finish_alltoall(req, send.shape)
        if check is not None:
            if k == "allreduce":
                assert np.allclose(got, ref, rtol=1e-5, atol=1e-6), f"all-reduce of iteration {i} differs"
                checked["allreduce"] += 1
            else:
                assert np.array_equal(got, ref), f"{k} of iteration {i} differs"
                checked["alltoall"] += 1
        st[{"fa2a": "emb", "ba2a": "gemb", "allreduce": "gw"}[k], i] = got

    for slot in schedule.slots:
        comm = [(k, i) for k, i in slot if k in ("fa2a", "ba2a", "allreduce")]
        posted = [(k, i, *post(k, i)) for k, i in comm]      # post first: the engines run during the compute
        for k, i in slot:
            if (k, i) not in comm:
                compute(k, i)
        for k, i, send, req in posted:
            finish(k, i, send, req)
    return tables, w, [losses[i] for i in sorted(losses)], checked


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).with_name("ring4.yaml")), help="system YAML")
    ap.add_argument("--backend", default=None, help="override the configuration's simulator")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8, help="samples per rank and iteration")
    ap.add_argument("--dim", type=int, default=4, help="embedding dimension")
    ap.add_argument("--rows", type=int, default=32, help="rows per table")
    ap.add_argument("--compute-us", type=float, default=0.3,
                    help="simulated time of each compute task (the engines' cycles are the communication's)")
    args = ap.parse_args(argv)
    if args.iterations < 1 or args.batch < 1 or args.dim < 1 or args.rows < 1:
        ap.error("--iterations, --batch, --dim and --rows must be at least 1")
    if not 0 <= args.compute_us < float("inf"):
        ap.error(f"--compute-us {args.compute_us}: must be finite and >= 0")

    from syncfabric.host.system import System

    with System(args.config, backend=args.backend) as system:
        n = system.size
        task = Task(n, args.rows, args.dim, 3, args.batch, args.iterations)
        dummy = sven.Stages(*([1.0] * 8))        # the slot structure does not depend on the times
        piped, seq = sven.pipeline(dummy, args.iterations), sven.pipeline(dummy, args.iterations, pipelined=False)
        coll = EngineCollectives(system, args.batch * args.dim, n * args.dim + 3)
        tables, w, losses, checked = train(task, piped, coll, check=NumpyCollectives())
        ref_tables, ref_w, ref_losses, _ = train(task, piped, NumpyCollectives())
        _, _, seq_losses, _ = train(task, seq, NumpyCollectives())
        assert np.allclose(tables, ref_tables, rtol=1e-5, atol=1e-6) and np.allclose(w, ref_w, rtol=1e-5, atol=1e-6)
        us = {k: float(np.mean(v)) / system.config.clock_mhz for k, v in coll.cycles.items()}
        c = args.compute_us
        stages = sven.Stages(sfp=c, fp=c, fa2a=us["alltoall"], bp=c, ba2a=us["alltoall"], allreduce=us["allreduce"],
                             sbp=c, opt=c)
        t_pipe = sven.pipeline(stages, args.iterations).time
        t_seq = sven.pipeline(stages, args.iterations, pipelined=False).time
        print(f"Sven pipeline on {system.config.topology} ({system.config.backend}), {n} tables of {args.rows}x"
              f"{args.dim}, {args.batch} samples per rank: {args.iterations} iterations in {len(piped.slots)} "
              f"stage slots, max staleness {max(piped.staleness)}")
        print(f"all-to-all {us['alltoall']:.2f} us, all-reduce {us['allreduce']:.2f} us on the engines (mean); "
              f"with {c:g} us per compute task: pipelined {t_pipe:.1f} us, sequential {t_seq:.1f} us "
              f"({t_seq / t_pipe:.2f}x)")
        print("loss per iteration, pipelined: " + " ".join(f"{x:.3f}" for x in losses))
        print("loss per iteration, sequential: " + " ".join(f"{x:.3f}" for x in seq_losses))
        print(f"{checked['alltoall']} all-to-alls equal to numpy's, {checked['allreduce']} all-reduces within "
              f"float32 rounding, {coll.bytes} bytes; final tables and dense weights agree with the numpy run")
    return {"losses": losses, "sequential_losses": seq_losses, "checked": checked, "speedup": t_seq / t_pipe,
            "staleness": max(piped.staleness), "cycles": coll.cycles}


if __name__ == "__main__":
    main()
