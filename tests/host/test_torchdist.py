"""torch.distributed on the engines: the ``syncfabric`` process-group backend (host/torchdist.py) with four rank
processes, as ``mp.spawn`` starts them, on a ring of four ``small`` engines simulated by Verilator.

Inputs are small integers in every element type, so every sum is exact whatever the reduction order and each
result is compared exactly with numpy's.
"""
import socket
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

pytestmark = pytest.mark.cocotb

ROOT = Path(__file__).resolve().parents[2]
RING4 = str(ROOT / "examples" / "ring4.yaml")
WORLD = 4
TYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inputs(rank, n, dtype):
    """Rank ``rank``'s input: small integers (exact in every type), different per rank and element."""
    g = np.random.default_rng(1000 + rank)
    return torch.tensor(g.integers(-20, 21, n), dtype=torch.int64).to(dtype)


def _expect(values, op):
    stack = torch.stack([v.to(torch.float64) for v in values])
    return {"sum": stack.sum(0), "max": stack.max(0).values, "min": stack.min(0).values}[op]


def _init(rank, port, config):
    import syncfabric.host.torchdist  # noqa: F401  (registers the backend)
    dist.init_process_group("syncfabric", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            pg_options=config)


def _collectives(rank, port, config):
    from syncfabric.host import torchdist as sfd
    _init(rank, port, config)
    n = 37                                          # not a multiple of any beat or chunk
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    for dtype in TYPES:
        everyone = [_inputs(r, n, dtype) for r in range(WORLD)]
        for name, op in ops.items():
            t = everyone[rank].clone()
            dist.all_reduce(t, op=op)
            assert t.dtype == dtype
            assert torch.equal(t.to(torch.float64), _expect(everyone, name)), (dtype, name)
        # reduce-scatter and all-gather, the tensor forms (and all-gather's list form)
        full = [_inputs(r, WORLD * 5, dtype) for r in range(WORLD)]
        out = torch.zeros(5, dtype=dtype)
        dist.reduce_scatter_single(out, full[rank].clone())
        assert torch.equal(out.to(torch.float64), _expect(full, "sum")[rank * 5:(rank + 1) * 5])
        gathered = torch.zeros(WORLD * n, dtype=dtype)
        dist.all_gather_single(gathered, everyone[rank])
        assert torch.equal(gathered, torch.cat(everyone))
        parts = [torch.zeros(n, dtype=dtype) for _ in range(WORLD)]
        dist.all_gather(parts, everyone[rank])
        assert all(torch.equal(p, e) for p, e in zip(parts, everyone))
        # all-to-all: slice j of rank i goes to slice i of rank j
        a2a = torch.zeros(WORLD * 3, dtype=dtype)
        dist.all_to_all_single(a2a, full[rank][:WORLD * 3].clone())
        assert torch.equal(a2a, torch.cat([full[r][rank * 3:(rank + 1) * 3] for r in range(WORLD)]))
        # broadcast from rank 2, reduce (max) to rank 1: the others' tensors stay as they were
        b = everyone[rank].clone()
        dist.broadcast(b, 2)
        assert torch.equal(b, everyone[2])
        red = everyone[rank].clone()
        dist.reduce(red, 1, op=dist.ReduceOp.MAX)
        assert torch.equal(red.to(torch.float64), _expect(everyone, "max")) if rank == 1 else \
            torch.equal(red, everyone[rank])
    # the deprecated names reach the same methods
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        g2 = torch.zeros(WORLD, dtype=torch.int32)
        dist.all_gather_into_tensor(g2, torch.tensor([rank], dtype=torch.int32))
        assert g2.tolist() == list(range(WORLD))
        rs = torch.zeros(1, dtype=torch.int32)
        dist.reduce_scatter_tensor(rs, torch.arange(WORLD, dtype=torch.int32))
        assert rs.item() == WORLD * rank
    # AVG: a sum scaled on the rank
    avg = torch.full((8,), float(rank + 1))
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)
    assert torch.equal(avg, torch.full((8,), 2.5))
    # two collectives in flight, completed in order; zero elements are a no-op
    x, y = torch.ones(16), torch.full((16,), float(rank), dtype=torch.float16)
    w1 = dist.all_reduce(x, async_op=True)
    w2 = dist.all_reduce(y, async_op=True)
    assert w2.wait() and w1.wait() and w1.is_completed()
    assert torch.equal(x, torch.full((16,), 4.0)) and torch.equal(y, torch.full((16,), 6.0, dtype=torch.float16))
    assert isinstance(w1.get_future().value()[0], torch.Tensor)
    empty = torch.zeros(0)
    dist.all_reduce(empty)
    dist.barrier()
    # what the engine does not do: refused on the calling rank, nothing posted (the next call still matches)
    for call, what in ((lambda: dist.all_reduce(torch.ones(4, dtype=torch.float64)), "torch.float64"),
                       (lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.PRODUCT), "PRODUCT"),
                       (lambda: dist.all_to_all_single(torch.zeros(6), torch.zeros(6), [1, 2, 1, 2], [1, 2, 1, 2]),
                        "uneven"),
                       (lambda: dist.send(torch.ones(1), (rank + 1) % WORLD), "send")):
        with pytest.raises(RuntimeError, match=what):
            call()
    # ranks that call different collectives all get an error naming the disagreement, and the group goes on
    bad = torch.ones(4 if rank == 0 else 8)
    with pytest.raises(RuntimeError, match="called different collectives"):
        dist.all_reduce(bad)
    ok = torch.ones(3)
    dist.all_reduce(ok)
    assert torch.equal(ok, torch.full((3,), 4.0))
    # RNA's partial all-reduce: rank 3 contributes nothing, the result says three ranks did
    part = torch.full((10,), float(rank + 1))
    assert sfd.partial_all_reduce(part, contribute=rank != 3) == 3
    assert torch.equal(part, torch.full((10,), 6.0))
    # a sub-group the links do not connect directly (two ranks of a ring) is refused when made
    if rank in (0, 1):
        with pytest.raises(RuntimeError, match="sub-topolog|line or plane|connect"):
            dist.new_group([0, 1])
    else:
        dist.new_group([0, 1])
    s = sfd.stats()
    # 9 per type, 2 by the deprecated names, AVG, 2 in flight, barrier, the one after the mismatch, partial
    assert s["collectives"] == 4 * 9 + 2 + 1 + 2 + 1 + 1 + 1 and s["by_op"]["allreduce"][0] == 4 * 3 + 5
    assert s["cycles"] == sum(c for _, c in s["by_op"].values()) > 0
    dist.destroy_process_group()


def test_every_collective_and_type_through_the_engines_from_four_rank_processes():
    mp.spawn(_collectives, args=(_port(), RING4), nprocs=WORLD, join=True)


def _wrong_size(rank, port, config):
    with pytest.raises(ValueError if rank == 0 else RuntimeError,
                       match="ring:2 has 2 endpoints, the job 4 ranks"):
        _init(rank, port, config)


def test_a_system_of_the_wrong_size_fails_on_every_rank():
    """The configuration is checked before anything is simulated; ranks other than 0 learn of it through the
    store instead of waiting for a server that never comes."""
    mp.spawn(_wrong_size, args=(_port(), {"topology": "ring:2", "backend": "verilator"}), nprocs=WORLD, join=True)


def _one_dies(rank, port, config):
    import os
    _init(rank, port, config)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 3:
        os._exit(0)                 # gone without a word: its connection closes
    for _ in range(2):              # the call that was waiting for it, and a later one: both fail at once
        with pytest.raises(RuntimeError, match="rank 3 hung up"):
            dist.all_reduce(t)
    store = dist.distributed_c10d._get_default_store()          # no rank leaves before the others' checks
    store.add("checked", 1)
    while store.add("checked", 0) < WORLD - 1:
        time.sleep(0.05)


def test_a_rank_process_that_dies_fails_the_others_calls_instead_of_hanging():
    mp.spawn(_one_dies, args=(_port(), RING4), nprocs=WORLD, join=True)


def test_refusals_name_the_unsupported_type_and_operation_without_a_server():
    from syncfabric.host.torchdist import SyncfabricProcessGroup

    pg = SyncfabricProcessGroup(None, "g", 0, WORLD, range(WORLD))
    assert pg.getBackendName() == "syncfabric"
    with pytest.raises(RuntimeError, match="torch.float64"):
        pg.allreduce([torch.ones(2, dtype=torch.float64)])
    with pytest.raises(RuntimeError, match="torch.int64"):
        pg.reduce([torch.ones(2, dtype=torch.int64)])
    with pytest.raises(RuntimeError, match="AVG of torch.int32"):
        pg.allreduce([torch.ones(2, dtype=torch.int32)], _opts(dist.AllreduceOptions(), dist.ReduceOp.AVG))
    with pytest.raises(RuntimeError, match="BAND"):
        pg.allreduce([torch.ones(2, dtype=torch.int32)], _opts(dist.AllreduceOptions(), dist.ReduceOp.BAND))
    with pytest.raises(RuntimeError, match="2 tensors at once"):
        pg.allreduce([torch.ones(2), torch.ones(2)])
    with pytest.raises(RuntimeError, match="mixing element types"):
        pg.all_gather_single(torch.zeros(8, dtype=torch.float16), torch.ones(2))
    with pytest.raises(ValueError, match="4 x the output"):
        pg.reduce_scatter_single(torch.zeros(3), torch.zeros(8))
    for name in ("scatter", "gather"):
        with pytest.raises(RuntimeError, match=name):
            getattr(pg, name)([], [])
    # zero elements: done at once, nothing sent
    w = pg.allreduce([torch.zeros(0)])
    assert w.is_completed() and w.wait()


def test_a_collective_some_rank_never_calls_times_out_with_the_groups_timeout():
    import concurrent.futures
    from datetime import timedelta

    from syncfabric.host.torchdist import SyncfabricProcessGroup

    class Silent:           # a server that never answers: the other ranks never called
        closed = False

        def call(self, key, msg):
            return concurrent.futures.Future()

    pg = SyncfabricProcessGroup(Silent(), "g", 0, WORLD, range(WORLD), timeout=timedelta(seconds=0.2))
    work = pg.allreduce([torch.ones(2)])
    with pytest.raises(RuntimeError, match="allreduce did not complete within 0.2 s"):
        work.wait()
    with pytest.raises(RuntimeError, match="within 0.05 s"):
        work.wait(timedelta(seconds=0.05))
    assert not work.is_completed()


def _opts(opts, op):
    opts.reduceOp = op
    return opts
