"""COARSE host side: routing tables from the profiler, partitioned push/pull, FCFS deadlock vs per-client queues,
copy-on-write storage and checkpoint restore, DENSE."""

import numpy as np
import pytest

from syncfabric.host.coarse.client import CoarseService, DenseService
from syncfabric.host.coarse.profiler import Profiler, model_measure, profile_paths
from syncfabric.host.coarse.proxy import Proxy, ProxyScheduler, SyncDeadlock
from syncfabric.host.coarse.storage import ParameterStorage
from syncfabric.sim.golden.coarse import PathModel, dense_allreduce, proxy_reduce
from syncfabric.sim.golden.types import DType, ReduceOp


def test_profiler_routes_small_tensors_local_and_large_remote_on_v100_anti_locality():
    prof = Profiler(model_measure(profile_paths("v100", 4)), 4)
    t = prof.table(1)
    assert t.lat_proxy == 1 and t.bw_proxy != 1
    exact = 2e-6 / (1 / 9e9 - 1 / 16e9)
    assert abs(t.threshold - exact) / exact < 0.05
    assert t.proxy_for(1024) == 1 and t.proxy_for(1 << 20) == t.bw_proxy
    assert 1 << 20 <= t.shard_bytes <= 4 << 20


def test_profiler_keeps_everything_local_on_p100():
    t = Profiler(model_measure(profile_paths("p100", 4)), 4).table(2)
    assert (t.lat_proxy, t.bw_proxy, t.threshold) == (2, 2, 0)


@pytest.mark.parametrize("profile", ["v100", "p100"])
@pytest.mark.parametrize("nbytes", [4, 4096, 100_000, 5_000_004])
def test_push_pull_returns_the_reduced_tensor_for_every_size(profile, nbytes):
    seed = nbytes % 97
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    n = 4
    svc = CoarseService(n, "fp32", "sum", model_measure(profile_paths(profile, n)))
    data = [rng.standard_normal(nbytes // 4).astype(np.float32) for _ in range(n)]
    for c in range(n):
        svc.clients[c].push("w", data[c])
    svc.synchronize()
    plan = svc.clients[0].history["w"]
    expect = np.empty(nbytes, np.uint8)
    for key, proxy, off, ln in plan:
        contribs = {}
        for c in range(n):
            _, pr, o, l2 = next(x for x in svc.clients[c].history["w"] if x[0] == key)
            contribs.setdefault(pr, []).append((c, data[c].view(np.uint8)[o:o + l2]))
        expect[off:off + ln] = proxy_reduce(contribs, DType.FP32, ReduceOp.SUM)
    for c in range(n):
        got = svc.clients[c].pull("w")
        assert np.array_equal(got, expect)
    np.testing.assert_allclose(svc.clients[0].pull("w").view(np.float32), sum(data), rtol=1e-4, atol=1e-4)
    if nbytes > svc.clients[0].table.shard_bytes:
        assert len(plan) > 1


def test_push_refuses_partial_elements():
    svc = CoarseService(2, "fp32")
    with pytest.raises(ValueError, match="whole number"):
        svc.clients[0].push("x", np.zeros(3, np.uint8))


def _fig10(discipline):
    proxies = [Proxy(0, discipline), Proxy(1, discipline)]
    sched = ProxyScheduler(proxies, 2, DType.INT32, ReduceOp.SUM)
    one = np.array([1], np.int32).view(np.uint8)
    # client 0: T1 -> proxy 0, T2 -> proxy 1; client 1: T2 -> proxy 0, T1 -> proxy 1 (arrival order as Fig. 10)
    proxies[0].enqueue(0, "T1", one)
    proxies[1].enqueue(0, "T2", one)
    proxies[0].enqueue(1, "T2", one)
    proxies[1].enqueue(1, "T1", one)
    return sched


def test_fcfs_proxies_deadlock_on_fig10():
    with pytest.raises(SyncDeadlock, match="wait on each other"):
        _fig10("fcfs").drain()


def test_per_client_queues_avoid_the_fig10_deadlock():
    sched = _fig10("per_client")
    done = sched.drain()
    assert set(done) == {"T1", "T2"}
    assert all(v.view(np.int32)[0] == 2 for v in done.values())


def test_copy_on_write_makes_versions_only_for_changes_and_restore_loses_nothing():
    rng = np.random.default_rng(5)
    print("seed 5")
    n = 2
    svc = CoarseService(n, "int32", "sum")
    history = []
    for epoch in range(3):
        grads = [rng.integers(-5, 5, 64, dtype=np.int32) for _ in range(n)]
        for c in range(n):
            svc.clients[c].push("w", grads[c])
        svc.synchronize()
        history.append(svc.clients[0].pull("w").copy())
        svc.end_epoch()
    copies = svc.storages[0].copies
    # the same values again: copy-on-write stores no new version
    for c in range(n):
        svc.clients[c].push("w", np.zeros(64, np.int32) if c else history[-1].view(np.int32))
    svc.synchronize()
    assert svc.storages[0].copies == copies
    # a worker fails mid-epoch after a partial push: restore epoch 1's checkpoint
    svc.clients[0].push("w", rng.integers(0, 9, 64, dtype=np.int32))
    svc.restore(1)
    assert np.array_equal(svc.clients[1].pull("w"), history[1])
    assert all(not p.pending() for p in svc.proxies)
    svc.restore(0)
    assert np.array_equal(svc.clients[0].pull("w"), history[0])


def test_storage_refuses_unknown_snapshot_and_overflow():
    s = ParameterStorage(capacity=128)
    s.put("a", np.zeros(64, np.uint8))
    with pytest.raises(MemoryError):
        s.put("b", np.zeros(100, np.uint8))
    with pytest.raises(KeyError):
        s.restore(3)


def test_reprofiling_updates_the_routing_table_when_paths_change():
    paths = profile_paths("p100", 2)
    svc = CoarseService(2, "fp32", measure=model_measure(paths), reprofile_every=2)
    c = svc.clients[0]
    assert c.table.bw_proxy == 0
    paths[0][1] = PathModel(4e-6, 40e9)        # the remote path got faster
    assert not c.end_iteration()
    assert c.end_iteration()
    assert c.table.bw_proxy == 1 and c.table.lat_proxy == 0


def test_partitioned_push_pull_is_faster_than_fifo_for_unequal_tensors():
    paths = profile_paths("v100", 2)
    svc = CoarseService(2, "fp32", measure=model_measure(paths))
    sizes = [64 << 20, 4 << 20, 32 << 20]
    c = svc.clients[0]
    assert c.push_pull_time(sizes, paths, True) < c.push_pull_time(sizes, paths, False)


def test_dense_reduces_in_worker_order():
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal(32).astype(np.float16) for _ in range(3)]
    d = DenseService(3, "fp16")
    for c in (2, 0, 1):
        d.push(c, "t", xs[c])
    assert np.array_equal(d.pull("t"), dense_allreduce([x.view(np.uint8) for x in xs], DType.FP16, ReduceOp.SUM))


def test_dual_plan_gives_layers_to_proxies_from_the_back():
    svc = CoarseService(4, "fp32")
    m, t = svc.dual_plan([4e6, 8e6, 16e6, 4e6], 16e9, 9e9, 0.005, 0.001)
    assert m in (0, 4e6, 20e6, 28e6, 32e6)


def test_byteps_cluster_sums_every_part_once_and_splits_bytes_as_eq1_eq2():
    from syncfabric.host.coarse.byteps import BytePSCluster
    from syncfabric.sim.golden import byteps
    print("seed 9")
    rng = np.random.default_rng(9)
    n, k = 4, 2
    D = byteps.bucket_count(n, k)
    part = 64
    cl = BytePSCluster(n, k, "fp32", part_bytes=part)
    tensors = [[rng.standard_normal(D * part // 4 // 2).astype(np.float32) for _ in range(2)] for _ in range(n)]
    for w in range(n - 1):
        cl.push(w, tensors[w])
    with pytest.raises(RuntimeError, match="wait for contributions"):
        cl.pull(0)
    cl.push(n - 1, tensors[n - 1])
    out = cl.pull(2)
    for t in range(2):
        want = dense_allreduce([tensors[w][t].view(np.uint8) for w in range(n)], DType.FP32, ReduceOp.SUM)
        assert np.array_equal(out[t], want)
    M = 2 * (D * part // 2)
    for (kind, j), b in cl.bytes_summed.items():
        share = byteps.cpu_share(n, k, M) if kind == "cpu" else byteps.gpu_share(n, k, M)
        assert b == share


def test_coarse_command_prints_routing_tables_and_byteps_figures(capsys):
    from syncfabric.host.cli import main
    assert main(["coarse", "profile"]) == 0
    out = capsys.readouterr().out
    assert "v100" in out and "BwProxy 1" in out and "threshold S 41143 B" in out
    assert "p100" in out and "BwProxy 0, threshold S 0 B" in out
    assert main(["coarse", "byteps", "--n", "32", "--k", "16"]) == 0
    assert "D=1504" in capsys.readouterr().out


def test_coarse_command_refuses_bad_rates_and_ring_sizes_with_a_message(capsys):
    from syncfabric.host.cli import main
    assert main(["coarse", "sync", "--ring-rate", "3/2"]) == 2
    assert "a link rate is in (0, 1]" in capsys.readouterr().err
    assert main(["coarse", "sync", "--devices", "1"]) == 2
    assert "--devices >= 2" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["profile", "--client", "9"], "--client 9 is not one of the 4 clients (0..3)"),
    (["profile", "--devices", "2", "--client", "-1"], "--client -1 is not one of the 2 clients (0..1)"),
    (["profile", "--devices", "0"], "--devices 0: need at least 1 client/device pair"),
    (["byteps", "--bandwidth", "0"], "bandwidth 0.0: expected a positive number of bytes per second"),
    (["byteps", "--model-bytes", "-1"], "model size -1.0: expected a positive number of bytes"),
    (["byteps", "--n", "1"], "n=1 GPU machine has nothing to synchronize through k=16 CPU machines"),
])
def test_coarse_profile_and_byteps_refuse_values_outside_the_model(args, message, capsys):
    """`coarse profile --client 9` (an IndexError before), `coarse byteps --bandwidth 0` (ZeroDivisionError),
    `--model-bytes -1` (negative times printed) and one GPU machine with CPU machines (zero buckets) end in one
    error line naming the value; the library functions refuse the same values."""
    from syncfabric.host.cli import main
    from syncfabric.sim.golden import byteps

    assert main(["coarse", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"syncfabric coarse: error: {err.split(': error: ', 1)[1]}"
    assert err.count("\n") == 1 and message in err
    with pytest.raises(ValueError, match="bandwidth"):
        byteps.byteps_time(32, 16, 1e6, 0)
    with pytest.raises(ValueError, match="model size"):
        byteps.allreduce_time(32, -1, 1e9)
    with pytest.raises(ValueError, match="no path from client 9"):
        Profiler(model_measure(profile_paths("v100", 4)), 4).table(9)
