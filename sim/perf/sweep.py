"""Design-space sweeps over a Dask cluster (the ``perf`` extra), or a local process pool without Dask.

``run_sweep(fn, points)`` evaluates ``fn(point)`` for every point and returns the results in order, with a
progress line. ``scheduler``: a Dask scheduler address (``tcp://host:8786``), ``"local"`` for a
``LocalCluster`` on this machine (the default when Dask is installed), or ``"processes"`` for a
``concurrent.futures`` process pool (the fallback when ``dask.distributed`` is not importable).
"""

import concurrent.futures as cf
import os

from ..progress import ProgressLine

__all__ = ["run_sweep", "dask_available", "dask_client"]


def dask_available():
    """True when ``dask.distributed`` can be imported (``pip install syncfabric[perf]``)."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return False
    return True


def dask_client(scheduler, workers, min_slots=None):
    """``(client, cluster, backend)``: a ``LocalCluster`` of ``workers`` single-threaded worker processes
    (``scheduler`` None or ``"local"``; ``cluster`` to close after the client), or a client of the scheduler
    at that address (``cluster`` None), which must offer at least ``min_slots`` worker threads when given
    (tasks that must all run at once)."""
    from dask.distributed import Client, LocalCluster

    if scheduler in (None, "local"):
        import dask
        # a task that holds the GIL for minutes (converting a design of 32 `paper` engines) on a loaded machine
        # misses its worker's heartbeats; the scheduler's default 5-minute limit then restarted the workers
        # and lost the work. A local cluster dies with its client, so it needs no such limit.
        with dask.config.set({"distributed.scheduler.worker-ttl": None}):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
        return Client(cluster), cluster, f"dask LocalCluster ({workers} workers)"
    client = Client(scheduler)
    slots = sum(client.nthreads().values())
    if min_slots is not None and slots < min_slots:
        client.close()
        raise RuntimeError(f"the Dask cluster at {scheduler} has {slots} worker threads; {min_slots} tasks must "
                           f"run at once")
    return client, None, f"dask scheduler {scheduler}"


def run_sweep(fn, points, scheduler=None, workers=None, progress=True, label="sweep"):
    """``[fn(p) for p in points]`` distributed over workers; ``fn`` must be a picklable top-level function.
    Returns ``(results, backend)`` where ``backend`` says what ran them."""
    points = list(points)
    workers = workers or max(1, min(len(points), os.cpu_count() or 1))
    bar = ProgressLine(enabled=progress)
    results = [None] * len(points)
    if scheduler in (None, "local") and not dask_available():
        bar.update(f"{label}: dask.distributed is not installed (pip install syncfabric[perf]); "
                   f"using a local process pool")
        bar.done()
        scheduler = "processes"
    if scheduler == "processes" or workers == 1 and scheduler is None:
        backend = f"process pool ({workers} workers)"
        if workers == 1:
            for i, p in enumerate(points):
                results[i] = fn(p)
                bar.update(f"{label}: {i + 1}/{len(points)} points")
        else:
            with cf.ProcessPoolExecutor(workers) as pool:
                futs = {pool.submit(fn, p): i for i, p in enumerate(points)}
                for k, f in enumerate(cf.as_completed(futs)):
                    results[futs[f]] = f.result()
                    bar.update(f"{label}: {k + 1}/{len(points)} points ({backend})")
        bar.done(f"{label}: {len(points)} points on a {backend}")
        return results, backend
    from dask.distributed import as_completed

    client, cluster, backend = dask_client(scheduler, workers)
    try:
        futs = client.map(fn, points, pure=False)
        index = {f.key: i for i, f in enumerate(futs)}
        for k, f in enumerate(as_completed(futs)):
            results[index[f.key]] = f.result()
            bar.update(f"{label}: {k + 1}/{len(points)} points ({backend})")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    bar.done(f"{label}: {len(points)} points on a {backend}")
    return results, backend
