"""Data-parallel training with PyTorch's DistributedDataParallel whose gradients are all-reduced by the engine RTL.

Four rank processes (as torchrun would start them) train the same small MLP on synthetic data, once over the
``syncfabric`` backend (a ring of simulated engines) and once over gloo, from the same initial weights and the
same batches; the losses and final parameters are compared. The float32 gradient sums of the two backends
add the four ranks' values in different orders (the engine's ring order, gloo's own), so they agree to
rounding, not bit for bit. With ``--rna-late R`` a third run sends DDP's gradient buckets through the engine's
partial all-reduce (RNA) with rank R contributing nothing on every other step; the mean is taken over the
ranks that contributed.

    python examples/ddp_train.py                   # 4 ranks, 5 steps
    python examples/ddp_train.py --steps 20 --rna-late 3 --config examples/ring4.yaml

Under torchrun (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set) each process runs its rank's part
of the ``syncfabric`` run only.
"""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
IN, HIDDEN, OUT = 32, 64, 10


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))


def _batch(step, rank, batch):
    """Rank ``rank``'s batch of step ``step``: random inputs (two batches per rank, taken in turn), labels from
    a fixed random teacher."""
    import torch
    g = torch.Generator().manual_seed(7919 * (step % 2) + rank)
    x = torch.randn(batch, IN, generator=g)
    teacher = torch.randn(IN, OUT, generator=torch.Generator().manual_seed(1))
    return x, (x @ teacher).argmax(1)


def _rna_hook(late, rank):
    """A DDP communication hook: the bucket's gradients through the engine's partial all-reduce, rank ``late``
    contributing nothing on odd steps; the sum divided by the number of ranks that contributed."""
    import torch.distributed as dist
    step = [0]

    def hook(state, bucket):
        pg = dist.distributed_c10d._get_default_group()
        grads = bucket.buffer()
        work = pg.partial_allreduce(grads, contribute=not (rank == late and step[0] % 2 == 1))
        if bucket.is_last():
            step[0] += 1

        def mean(fut):
            counts = [c for c in work.info["contributors"].values() if c]
            return fut.value()[0].div_(max(counts))
        return work.get_future().then(mean)
    return hook


def train(backend, rank, world, store, steps, batch, rna_late=None, profile=None):
    """One rank's training run (``store``: torch's rendezvous store, or None for ``env://``; ``profile``: a
    path for a torch.profiler trace of the steps after the first); returns its losses, final parameters and
    (syncfabric) engine statistics."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if store is None:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    model = DistributedDataParallel(_model())
    if backend == "syncfabric":         # count the training steps' collectives, not DDP's set-up
        from syncfabric.host import torchdist
        torchdist.reset_stats()
    if rna_late is not None:
        model.register_comm_hook(None, _rna_hook(rna_late, rank))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    losses = []
    prof = contextlib.nullcontext()
    if profile:                         # torch.profiler over the steps after the first (a warm-up)
        from torch.profiler import ProfilerActivity, schedule
        prof = torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                                      schedule=schedule(wait=0, warmup=1, active=steps - 1),
                                      on_trace_ready=lambda p: p.export_chrome_trace(profile))
    with prof:
        for step in range(steps):
            x, y = _batch(step, rank, batch)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()                 # DDP all-reduces the gradient buckets here
            opt.step()
            losses.append(loss.item())
            if profile:
                prof.step()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    stats = torchdist.stats() if backend == "syncfabric" else None
    del model, opt                      # DDP's reducer goes while its process group is there
    dist.destroy_process_group()
    return {"losses": losses, "params": params.tolist(), "stats": stats}


def _rank_main(args):
    import torch.distributed as dist
    rank, world = args.rank, args.world
    # one store for the job (rank 0 serves it), a prefix of it per run
    store = dist.TCPStore("127.0.0.1", args.port, world, rank == 0)
    runs = {}
    traced = "gloo" if not args.no_gloo else "syncfabric"       # the run whose rank 0 is profiled
    for name, backend, late in _runs(args):
        prof = args.profile if rank == 0 and name == traced else None
        runs[name] = train(backend, rank, world, dist.PrefixStore(name, store), args.steps, args.batch, late,
                           prof)
    if args.out:
        Path(args.out, f"rank{rank}.json").write_text(json.dumps(runs))
    return 0


def _runs(args):
    runs = [("syncfabric", "syncfabric", None)]
    if not args.no_gloo:
        runs.append(("gloo", "gloo", None))
    if args.rna_late is not None:
        runs.append(("syncfabric-rna", "syncfabric", args.rna_late))
    return runs


def _report(args, results):
    import torch
    r0 = results[0]
    n_params = len(r0["syncfabric"]["params"])
    print(f"ddp: {args.world} ranks, {args.steps} steps of a {IN}-{HIDDEN}-{OUT} MLP ({n_params:,} parameters), "
          f"batch {args.batch} per rank")
    for name, _, _ in _runs(args):
        losses = r0[name]["losses"]
        line = f"  {name:15s} rank 0 loss {losses[0]:.4f} -> {losses[-1]:.4f}"
        st = r0[name]["stats"]
        if st:
            per = st["cycles"] / args.steps
            ops = ", ".join(f"{n} {op}" for op, (n, _) in sorted(st["by_op"].items()))
            line += (f"; engines: {ops}, {per:,.0f} cycles per step ({st['time_us'] / args.steps:.2f} us at the "
                     f"system clock)")
        print(line)
    ok = True
    if "gloo" in r0:
        worst = max(float((torch.tensor(r[n]["params"]) - torch.tensor(r["gloo"]["params"])).abs().max())
                    for r in results for n in ("syncfabric",))
        loss_diff = max(abs(a - b) for r in results for a, b in zip(r["syncfabric"]["losses"], r["gloo"]["losses"]))
        ok = worst <= args.tolerance and loss_diff <= args.tolerance
        print(f"  syncfabric vs gloo: parameters differ by at most {worst:.3g}, losses by {loss_diff:.3g} "
              f"(tolerance {args.tolerance:g}: float32 sums of the ranks' gradients in another order) - "
              f"{'agree' if ok else 'DISAGREE'}")
    same = all(r["syncfabric"]["params"] == r0["syncfabric"]["params"] for r in results)
    print(f"  every rank holds the same parameters after the syncfabric run: {'yes' if same else 'NO'}")
    return 0 if ok and same else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    ap.add_argument("--batch", type=int, default=16, help="samples per rank and step (default 16)")
    ap.add_argument("--config", default=None,
                    help="the simulated system (YAML; default: a ring of small engines, one per rank, Verilator)")
    ap.add_argument("--rna-late", type=int, default=None, metavar="R",
                    help="also train with RNA's partial all-reduce, rank R late on every other step")
    ap.add_argument("--no-gloo", action="store_true", help="skip the gloo run")
    ap.add_argument("--profile", metavar="FILE", default=None,
                    help="write a torch.profiler trace of rank 0's steps after the first (the gloo run, or the "
                         "syncfabric run with --no-gloo): replay it with syncfabric perf iteration --trace FILE")
    ap.add_argument("--tolerance", type=float, default=1e-5,
                    help="largest difference allowed between the syncfabric and gloo runs (default 1e-5)")
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.world < 1 or args.steps < 1 or args.batch < 1:
        ap.error("--world, --steps and --batch must be at least 1")
    if args.profile and args.steps < 2:
        ap.error("--profile needs --steps 2 or more (the first step is the profiler's warm-up)")
    if args.profile:
        args.profile = str(Path(args.profile).resolve())
    if args.rna_late is not None and not 0 <= args.rna_late < args.world:
        ap.error(f"--rna-late {args.rna_late}: not a rank of 0..{args.world - 1}")
    if args.config:
        os.environ["SYNCFABRIC_TORCH_CONFIG"] = str(Path(args.config).resolve())
    if "RANK" in os.environ and args.rank is None:          # under torchrun: this process is one rank
        import syncfabric.host.torchdist  # noqa: F401
        r = train("syncfabric", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None, args.steps,
                  args.batch)
        print(f"rank {os.environ['RANK']}: loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
        return 0
    if args.rank is not None:
        import syncfabric.host.torchdist  # noqa: F401
        return _rank_main(args)
    # the launcher: one process per rank, as torchrun would start them
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--world", str(args.world), "--steps",
               str(args.steps), "--batch", str(args.batch), "--port", str(_port()), "--out", out]
        if args.no_gloo:
            cmd.append("--no-gloo")
        if args.profile:
            cmd += ["--profile", args.profile]
        if args.rna_late is not None:
            cmd += ["--rna-late", str(args.rna_late)]
        procs = [subprocess.Popen(cmd + ["--rank", str(r)]) for r in range(args.world)]
        codes = [p.wait() for p in procs]
        if any(codes):
            print(f"ddp: rank processes exited with {codes}", file=sys.stderr)
            return 1
        results = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(args.world)]
    return _report(args, results)


if __name__ == "__main__":
    sys.exit(main())
