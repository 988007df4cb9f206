"""The host API (:mod:`syncfabric.host.system`) on every backend - Amaranth's simulator in this process,
Verilator and Icarus through the cocotb server - with the same driver code: every collective byte for byte
against the golden executor (same programs, same chunk size), requests with wait/test/timeouts, memory
registration, communicators, and bad calls refused with clear errors while the system stays usable."""

import os
import random
from types import SimpleNamespace

import numpy as np
import pytest

from syncfabric.hdl.common.layouts import COMPLETION_BYTES, DESCRIPTOR_BYTES
from syncfabric.host.driver import WindowInUseError
from syncfabric.host.job import REJECTIONS
from syncfabric.host.run import random_inputs
from syncfabric.host.system import (CollectiveError, CommunicatorError, RegistrationError, RequestTimeout, System,
                                    UsageError, sub_topology)
from syncfabric.sim.golden.algorithms import default_algorithm, generate
from syncfabric.sim.golden.chunking import buffer_counts
from syncfabric.sim.golden.executor import execute
from syncfabric.sim.golden.topology import parse as parse_topology
from syncfabric.sim.golden.types import DType, ReduceOp, dtype_bytes


def seed_for(default):
    """``SEED`` from the environment, else ``default`` (printed, so a failing run can be repeated)."""
    seed = int(os.environ.get("SEED", default))
    print(f"seed {seed}")
    return seed

def run_and_check(system, comm, coll, count, dtype="fp32", op="sum", *, root=0, null_ranks=(), seed=1,
                  in_place=False):
    """Post one collective through the API with random inputs and compare every rank's output with the
    golden executor running the same programs at the request's chunk size."""
    rng = np.random.default_rng(seed)
    eb = dtype_bytes(DType.parse(dtype))
    inputs = random_inputs(coll, count, comm.size, dtype, root, rng)
    n_in = max(buffer_counts(coll, count, comm.size, r, root)[0] for r in range(comm.size))
    n_out = max(buffer_counts(coll, count, comm.size, r, root)[1] for r in range(comm.size))
    send = system.register(max(n_in, n_out, 1) * eb)
    recv = None if in_place else system.register(max(n_out, 1) * eb)
    try:
        for cr, sr in enumerate(comm.ranks):
            if inputs[cr] is not None:
                send.write(sr, inputs[cr], offset=cr * count * eb if in_place and coll == "allgather" else 0)
        kw = {"root": root} if coll in ("broadcast", "reduce") else {}
        if null_ranks:
            kw["null_ranks"] = null_ranks
        args = (count, dtype) if coll in ("allgather", "alltoall", "broadcast") else (count, dtype, op)
        req = getattr(comm, coll)(send, recv, *args, **kw)
        req.wait(timeout_cycles=200_000)
        progs = generate(coll, comm.algorithm(coll), comm.topology, root=root)
        cfg = system.config.engine
        gold = execute(progs, comm.topology, inputs, DType.parse(dtype), ReduceOp.parse(op), count,
                       req.chunk_bytes, cfg.packet_bytes, cfg.beat_bytes, null_ranks=null_ranks)
        out = send if in_place else recv
        for cr, sr in enumerate(comm.ranks):
            want = gold.outputs[cr].tobytes()
            at = cr * count * eb if in_place and coll == "reduce_scatter" else 0
            got = out.read(sr, count=len(want), offset=at).tobytes()
            assert got == want, f"{coll} rank {cr}: {sum(a != b for a, b in zip(got, want))} bytes differ"
        assert req.contributors == {sr: gold.contributors[cr] for cr, sr in enumerate(comm.ranks)}
        return req
    finally:
        system.deregister(send)
        if recv is not None:
            system.deregister(recv)


BACKENDS = [pytest.param("amaranth"), pytest.param("verilator", marks=pytest.mark.cocotb),
            pytest.param("icarus", marks=pytest.mark.cocotb)]


@pytest.fixture(scope="module", params=BACKENDS)
def ring2(request):
    # the paper's SRAM split (one-phase ring programs partition alike under both): the YAML's driver settings
    # must reach every driver
    with System({"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(5),
                 "driver": {"sram_split": "ace"}}, backend=request.param) as s:
        yield s


def test_every_collective_and_dtype_against_the_golden_model(ring2):
    assert [(d.sram_split, d.buffer_budget) for d in ring2.drivers] == [("ace", None)] * 2
    rng = np.random.default_rng(seed_for(11))
    cases = [("allreduce", "fp32", "sum"), ("allreduce", "bf16", "max"), ("reduce_scatter", "int32", "min"),
             ("allgather", "fp16", "sum"), ("alltoall", "int32", "sum"), ("broadcast", "fp32", "sum"),
             ("reduce", "fp16", "sum")]
    for k, (coll, dtype, op) in enumerate(cases):
        count = int(rng.integers(1, 300))
        run_and_check(ring2, ring2.world, coll, count, dtype, op, root=int(rng.integers(2)), seed=k)
    req = ring2.world.barrier()
    assert req.wait(timeout_cycles=20_000).done and req.cycles > 0 and req.time_us == req.cycles / 1000


def test_in_place_partial_allreduce_and_several_requests_in_flight(ring2):
    run_and_check(ring2, ring2.world, "allreduce", 200, "fp32", in_place=True, seed=3)
    run_and_check(ring2, ring2.world, "allgather", 50, "int32", in_place=True, seed=4)
    run_and_check(ring2, ring2.world, "reduce_scatter", 40, "fp32", in_place=True, seed=6)
    req = run_and_check(ring2, ring2.world, "allreduce", 100, "fp32", null_ranks=[1], seed=5)
    assert req.contributors == {0: 1, 1: 1}
    a, b, c = (ring2.register(1024) for _ in range(3))
    for r in range(2):
        a.write(r, np.full(256, r + 1, np.int32))
        b.write(r, np.full(256, 10 * (r + 1), np.int32))
    reqs = [ring2.world.allreduce(a, c.view(0, 512), 128, "int32"), ring2.world.allreduce(b, c.view(512, 512), 128,
                                                                                          "int32")]
    assert len(ring2.outstanding) == 2
    for req in reqs:
        req.wait(timeout_cycles=100_000)
    assert not ring2.outstanding
    for r in range(2):
        got = c.read(r, "int32")
        assert (got[:128] == 3).all() and (got[128:] == 30).all()
    for buf in (a, b, c):
        ring2.deregister(buf)


def test_bad_calls_are_refused_and_leave_the_system_usable(ring2):
    s, w = ring2, ring2.world
    a, b = s.register(256), s.register(256)
    with pytest.raises(UsageError, match="unknown dtype|dtype"):
        w.allreduce(a, b, 4, "fp64")
    with pytest.raises(UsageError, match="count must be"):
        w.allreduce(a, b, -1)
    with pytest.raises(UsageError, match="sends 4096 bytes"):
        w.allreduce(a, b, 1024)
    with pytest.raises(UsageError, match="root 5"):
        w.broadcast(a, b, 4, root=5)
    with pytest.raises(UsageError, match="null contributions"):
        w.allreduce(a, b, 4, op="max", null_ranks=[0])
    with pytest.raises(UsageError, match="not aligned"):
        w.allreduce(a.view(2, 64), b, 4, "fp32")
    with pytest.raises(UsageError, match="in-place"):
        w.alltoall(a, None, 4)
    with pytest.raises(UsageError, match="overflows"):
        a.write(0, np.zeros(100, np.float32))
    with pytest.raises(UsageError, match="rank 7"):
        a.read(7)
    gone = s.register(256)
    s.deregister(gone)
    with pytest.raises(RegistrationError, match="not registered"):
        w.allreduce(gone, b, 4)
    with pytest.raises(RegistrationError, match="already deregistered"):
        s.deregister(gone)
    with pytest.raises(RegistrationError, match="memory windows"):
        [s.register(64) for _ in range(4)]
    with pytest.raises(CommunicatorError, match="sub-topology"):
        s.split([0])
    with pytest.raises(CommunicatorError, match="cannot be freed"):
        w.free()
    assert not s.outstanding
    for buf in list(s._buffers):
        s.deregister(buf)
    run_and_check(s, w, "allreduce", 64, "fp32", seed=9)


def test_timeouts_fire_and_engine_errors_are_typed(ring2):
    s, w = ring2, ring2.world
    a, b = s.register(4096), s.register(4096)
    req = w.allreduce(a, b, 1024)
    with pytest.raises(RequestTimeout, match="have not completed after 5 cycles"):
        req.wait(timeout_cycles=5)
    assert not req.done
    req.wait(timeout_cycles=100_000)
    assert req.test()
    # behind the API's back, take the window away on every engine: the engines refuse the descriptor
    for drv in s.drivers:
        drv.add_window(b.window, 0, 0)
    req = w.allreduce(a, b, 16)
    with pytest.raises(CollectiveError) as err:
        req.wait(timeout_cycles=10_000)
    e = err.value
    assert e.status == "OUT_OF_WINDOW" and e.rank == 0 and e.code is not None
    assert e.descriptor["dst"] == b.addr and set(e.failures) == {0, 1}
    for drv in s.drivers:
        drv.add_window(b.window, b.addr, 4096)
    s.deregister(a)
    s.deregister(b)
    run_and_check(s, w, "reduce_scatter", 32, "fp32", seed=12)


def _int32_sum(system, comm, a, b, count, seed):
    """Post ``comm``'s int32 all-reduce from ``a`` into ``b`` and check every rank's result."""
    rng = np.random.default_rng(seed)
    ins = {r: rng.integers(-2**20, 2**20, count, dtype=np.int32) for r in comm.ranks}
    for r, x in ins.items():
        a.write(r, x)
    comm.allreduce(a, b, count, "int32").wait(timeout_cycles=200_000)
    want = sum(ins.values())
    for r in comm.ranks:
        assert np.array_equal(b.read(r, "int32", count), want), r


def test_a_window_in_use_is_locked_and_windows_open_only_to_their_communicators(ring2):
    """The engines refuse to move a window while a command in flight has a buffer in it (the driver gives up
    with WindowInUseError, WIN_REFUSED counts the refused writes, the collective completes bit-exact); a buffer
    registered for one communicator is refused by the host for another, and by the engines (OUT_OF_WINDOW) when
    the host check is bypassed, also for the next communicator that gets a freed communicator's engine id."""
    s, w = ring2, ring2.world
    a, b = s.register(4096), s.register(4096)
    drv = s.drivers[0]
    refused = drv.read("WIN_REFUSED")
    rng = np.random.default_rng(seed_for(31))
    ins = {r: rng.integers(-2**20, 2**20, 1024, dtype=np.int32) for r in w.ranks}
    for r, x in ins.items():
        a.write(r, x)
    req = w.allreduce(a, b, 1024, "int32")
    while drv.read_fields("STATUS")["cmds_active"] == 0:
        pass
    with pytest.raises(WindowInUseError, match=f"window {b.window}"):
        drv.add_window(b.window, 0, 0)
    assert drv.read("WIN_REFUSED") - refused >= 4 * drv.WINDOW_ATTEMPTS - 3
    req.wait(timeout_cycles=200_000)
    for r in w.ranks:
        assert np.array_equal(b.read(r, "int32", 1024), ins[0] + ins[1]), r
    drv.add_window(b.window, b.addr, 4096)          # not in use any more: taken
    s.deregister(a)
    s.deregister(b)

    c = s.split(w.ranks)
    a, b = s.register(4096, communicators=[c]), s.register(4096, communicators=[c])
    assert a.view(0, 64).communicators == (c,)
    with pytest.raises(UsageError, match="registered for other communicators"):
        w.allreduce(a, b, 16, "int32")
    _int32_sum(s, c, a, b, 300, seed_for(32))
    for buf in (a, b):                              # behind the host's back: the engines refuse
        buf._communicators = None
    with pytest.raises(CollectiveError) as err:
        w.allreduce(a, b, 16, "int32").wait(timeout_cycles=50_000)
    assert {st for st, _ in err.value.failures.values()} == {"OUT_OF_WINDOW"}
    for buf in (a, b):
        buf._communicators = (c,)
    c_id = c.id
    c.free()
    assert a.communicators == ()
    c2 = s.split(w.ranks)
    assert c2.id == c_id
    for buf in (a, b):
        buf._communicators = None
    with pytest.raises(CollectiveError) as err:
        c2.allreduce(a, b, 16, "int32").wait(timeout_cycles=50_000)
    assert {st for st, _ in err.value.failures.values()} == {"OUT_OF_WINDOW"}
    c2.free()
    s.deregister(a)
    s.deregister(b)
    run_and_check(s, w, "allreduce", 64, "fp32", seed=15)


def _post_with(system, rank, monkeypatch, **fields):
    """Make ``rank``'s driver post its next descriptors with ``fields`` replaced (a rank whose command
    disagrees); returns the list the descriptors it posted are appended to."""
    post, posted = system.drivers[rank].post, []
    monkeypatch.setattr(system.drivers[rank], "post",
                        lambda desc: post(posted.append({**desc, **fields}) or posted[-1]))
    return posted


@pytest.mark.parametrize("field, value", [("op", ReduceOp.MAX), ("dtype", DType.INT32)])
def test_ranks_posting_another_op_or_dtype_complete_with_mismatch_not_ok(ring2, field, value, monkeypatch):
    """Rank 1 posts the all-reduce with op max (or dtype int32) where rank 0 posts sum fp32: each rank's RECVs
    see the other's op and dtype in the headers, so both complete MISMATCH instead of OK with wrong data (on
    ring:2 each rank receives from the disagreeing one and detects it itself); the engines stay usable."""
    s, w = ring2, ring2.world
    a, b = s.register(4096), s.register(4096)
    posted = _post_with(s, 1, monkeypatch, **{field: value})
    req = w.allreduce(a, b, 64, "fp32", "sum")
    monkeypatch.undo()
    assert [d[field] for d in posted] == [value] and req.descriptors[0][field] != value
    with pytest.raises(CollectiveError) as err:
        req.wait(timeout_cycles=100_000)
    assert err.value.failures.keys() == {0, 1}
    assert {st for st, _ in err.value.failures.values()} == {"MISMATCH"}, err.value.failures
    s.deregister(a)
    s.deregister(b)
    run_and_check(s, w, "allreduce", 64, "fp32", seed=13)


def test_ranks_posting_another_element_count_in_as_many_chunks_complete_with_mismatch(ring2, monkeypatch):
    """Rank 1 posts the all-reduce of 60 fp32 elements where rank 0 posts 64: one chunk on both ranks, but
    every message has another length than the RECV awaiting it expects (a block of 30 elements against 32).
    The RECVs drain them and report the disagreement: both ranks complete MISMATCH (not PROTOCOL, not OK), and
    the engines then run a correct all-reduce bit-exact."""
    s, w = ring2, ring2.world
    a, b = s.register(4096), s.register(4096)
    posted = _post_with(s, 1, monkeypatch, count=60)
    req = w.allreduce(a, b, 64, "fp32", "sum")
    monkeypatch.undo()
    assert [d["count"] for d in posted] == [60] and req.descriptors[0]["count"] == 64
    with pytest.raises(CollectiveError) as err:
        req.wait(timeout_cycles=100_000)
    assert err.value.failures.keys() == {0, 1}
    assert {st for st, _ in err.value.failures.values()} == {"MISMATCH"}, err.value.failures
    s.deregister(a)
    s.deregister(b)
    run_and_check(s, w, "allreduce", 64, "fp32", seed=16)


@pytest.mark.parametrize("ender", ["step_timeout", "watchdog"])
def test_ranks_posting_another_number_of_chunks_complete_mismatch(ring2, monkeypatch, ender):
    """Rank 0 posts an all-reduce of one full chunk, rank 1 of four. The blocks of chunk 0 have the same length
    on both ranks, but chunk 0 is rank 0's final chunk and not rank 1's: the headers' ``final`` differs, so
    rank 0 completes MISMATCH (its RECVs process the messages and report it) and rank 1's chunk 0 records
    MISMATCH too. Rank 1 then waits for chunks 1-3 of a rank that never sends them. With the step timeout
    armed its engine gives them up and completes MISMATCH, the first error, by itself; with only the watchdog
    nothing moves, the watchdog fires and ``wait`` names rank 1, and ``System.reset`` fails its side TIMEOUT.
    Either way the engines then run a correct all-reduce bit-exact (after a reset: the given-up command's
    messages may be on the links)."""
    s, w = ring2, ring2.world
    w.prepare("allreduce")
    chunk = s.chunk_bytes // 4                  # fp32 elements per chunk
    a, b = s.register(4 * chunk * 4), s.register(4 * chunk * 4)
    try:
        if ender == "watchdog":
            s.set_watchdog(3_000)
        else:
            s.set_step_timeout(3_000)
        posted = _post_with(s, 1, monkeypatch, count=4 * chunk)
        req = w.allreduce(a, b, chunk, "fp32", "sum")
        monkeypatch.undo()
        assert [d["count"] for d in posted] == [4 * chunk] and req.chunk_bytes == 4 * chunk
        if ender == "step_timeout":
            with pytest.raises(CollectiveError) as err:
                req.wait(timeout_cycles=500_000)
            assert err.value.failures == {0: ("MISMATCH", 0), 1: ("MISMATCH", 0)}, err.value.failures
            s.reset()
        else:
            with pytest.raises(RequestTimeout, match=r"watchdog of rank\(s\) \[1\]"):
                req.wait(timeout_cycles=500_000)
            assert set(req.completions) == {0} and req.completions[0]["status_name"] == "MISMATCH", req.completions
            s.reset()
            assert req.completions[1]["status_name"] == "TIMEOUT"
            with pytest.raises(CollectiveError) as err:
                req.test()
            assert err.value.failures == {0: ("MISMATCH", 0), 1: ("TIMEOUT", 0)}
        assert not any(drv.status()["hung"] or drv.status()["aborting"] for drv in s.drivers)
    finally:
        s.set_watchdog(0)
        s.set_step_timeout(0)
        s.deregister(a)
        s.deregister(b)
    run_and_check(s, w, "allreduce", 4 * chunk, "fp32", seed=17)


#: Malformed descriptors per backend in the fuzz below (the issue's 1,000 on the fast simulator).
FUZZ_DESCRIPTORS = {"verilator": 1000, "icarus": 60, "amaranth": 20}


def test_random_malformed_descriptors_are_rejected_and_write_nothing(ring2):
    """Descriptors of an all-reduce or a reduce spoiled in one to three ways at random (every kind of
    ``REJECTIONS`` that every rank rejects for the collective: opcodes, communicator, dtype, op, flags,
    in-place and null misuse, count 0, misaligned or out-of-window buffers, root, algorithm), posted in
    batches on both ranks
    with a valid collective between batches. Each completes with a rejection status, one of those its
    spoilers earn, and writes nothing: every byte of both endpoints' memory outside the rings is unchanged
    across each batch; the valid collectives stay bit-exact."""
    _fuzz_malformed_descriptors(ring2, FUZZ_DESCRIPTORS[ring2.config.backend], seed_for(41))


@pytest.mark.slow
@pytest.mark.cocotb
def test_ten_thousand_random_malformed_descriptors_are_rejected_and_write_nothing():
    """The fuzz above at the issue's slow size: 10,000 malformed descriptors on Verilator."""
    with System({"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(5)}, backend="verilator") as s:
        _fuzz_malformed_descriptors(s, 10_000, seed_for(42))


def _fuzz_malformed_descriptors(s, total, seed):
    w = s.world
    rng = random.Random(seed)
    lay = s.layout
    rings = [(lay.sq_base, lay.sq_base + lay.sq_entries * DESCRIPTOR_BYTES),
             (lay.cq_base, lay.cq_base + lay.cq_entries * COMPLETION_BYTES)]
    mem_bytes = s.config.memory_bytes

    def memory(rank):
        data = bytearray(s.transports[rank].read_mem(0, mem_bytes))
        for lo, hi in rings:
            data[lo:hi] = bytes(hi - lo)
        return bytes(data)

    a, b = s.register(4096), s.register(4096)
    templates = {}
    for coll, kw in (("allreduce", {}), ("reduce", {"root": 1})):
        req = getattr(w, coll)(a, b, 256, "fp32", "sum", **kw)
        req.wait(timeout_cycles=200_000)
        templates[coll] = req.descriptors
    # spoilers every rank rejects (a reduce's destination is the root's only: a non-root rank runs its part)
    applies = {"allreduce": [k for k in REJECTIONS if k != "bad_root"],
               "reduce": [k for k in REJECTIONS if k not in ("in_place_mismatch", "misaligned_dst",
                                                            "dst_out_of_window")]}
    n_bad = total
    seen, cookie = {}, 1 << 40
    while n_bad > 0:
        before = [memory(r) for r in range(s.size)]
        batch = min(n_bad, 40, lay.sq_entries - 2)
        expected = []
        for _ in range(batch):
            coll = rng.choice(sorted(templates))
            kinds = rng.sample(applies[coll], rng.randint(1, 3))
            cookie += 1
            for r in range(s.size):
                desc = {**templates[coll][r], "cookie": cookie}
                # misalignment first: it steps by the element size, which a spoiled dtype no longer has
                for k in sorted(kinds, key=lambda k: not k.startswith("misaligned")):
                    REJECTIONS[k][1](desc, SimpleNamespace(P=w.size))
                s.drivers[r].post(desc)
            expected.append((cookie, kinds, {REJECTIONS[k][0] for k in kinds}))
        for r in range(s.size):
            cpls = s.drivers[r].wait(batch, timeout_cycles=50_000 * batch)
            for cpl, (ck, kinds, statuses) in zip(cpls, expected):
                assert cpl["cookie"] == ck, (r, cpl["cookie"], ck)
                assert cpl["status"] in statuses, (r, kinds, cpl["status_name"])
                seen[cpl["status_name"]] = seen.get(cpl["status_name"], 0) + 1
        after = [memory(r) for r in range(s.size)]
        for r in range(s.size):
            if after[r] != before[r]:
                at = next(i for i, (x, y) in enumerate(zip(after[r], before[r])) if x != y)
                raise AssertionError(f"rank {r}: a rejected descriptor wrote memory at {at:#x}")
        n_bad -= batch
        run_and_check(s, w, "allreduce", rng.randint(1, 600), "fp32", seed=rng.randrange(1 << 20))
    s.deregister(a)
    s.deregister(b)
    print("rejections by status (both ranks):", seen)
    assert len(seen) >= min(8, total // 4), seen      # most of the 9 rejection statuses were earned


@pytest.mark.parametrize("backend", BACKENDS[:2] + [
    pytest.param("icarus", marks=(pytest.mark.cocotb, pytest.mark.slow))])
def test_a_dead_link_times_out_and_an_abort_leaves_the_engines_usable(backend):
    """A dead link (the link out of rank 0 held stalled): the watchdog fires, ``wait`` raises naming it, and
    ``System.reset`` aborts the engines (rank 0's AXI bursts under way completed by the fence, links drained)
    with the request failing TIMEOUT. With the link back, the next collectives are bit-exact, also on a fresh
    communicator. Then an abort in the middle of a large all-reduce that is moving (DMA bursts and link
    messages in flight on both ranks): the request fails ABORTED and the engines run bit-exact afterwards.
    (A system of its own: the shared one's program table may be full of the world's programs.)"""
    with System({"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(5)}, backend=backend) as s:
        _dead_link_and_aborts(s)


def _dead_link_and_aborts(s):
    w = s.world
    a, b = s.register(16384), s.register(16384)
    try:
        s.set_watchdog(3_000)
        s.stall_link(0, 0)
        req = w.allreduce(a, b, 4096)
        with pytest.raises(RequestTimeout, match=r"watchdog of rank\(s\) \[0, 1\]"):
            req.wait(timeout_cycles=500_000)
        assert all(drv.status()["hung"] for drv in s.drivers)
        s.reset()
        s.stall_link(0, 0, stalled=False)
        assert req.done and {c["status_name"] for c in req.completions.values()} == {"TIMEOUT"}
        with pytest.raises(CollectiveError, match="TIMEOUT"):
            req.test()
        assert not any(drv.status()["hung"] or drv.status()["aborting"] for drv in s.drivers)
        run_and_check(s, w, "allreduce", 1000, "fp32", seed=21)
        sub = s.split([0, 1])
        run_and_check(s, sub, "reduce_scatter", 96, "int32", "min", seed=22)
        # abort while the collective moves: both ranks have bursts and messages in flight
        req = w.allreduce(a, b, 4096)
        s.advance(400)
        assert not req.test() and s.drivers[0].status()["chunks_active"] > 0
        sub.abort()
        assert {c["status_name"] for c in req.completions.values()} == {"ABORTED"}
        with pytest.raises(CommunicatorError, match="freed"):
            sub.barrier()
        run_and_check(s, w, "allreduce", 4096, "fp32", seed=23)
        fresh = s.split([0, 1])
        run_and_check(s, fresh, "allgather", 300, "fp16", seed=24)
        fresh.free()
    finally:
        s.stall_link(0, 0, stalled=False)
        s.set_watchdog(0)
        s.deregister(a)
        s.deregister(b)


@pytest.mark.parametrize("backend", BACKENDS[1:2] + [
    pytest.param("icarus", marks=(pytest.mark.cocotb, pytest.mark.slow)),
    pytest.param("amaranth", marks=pytest.mark.slow)])       # (about 4 minutes in Amaranth's simulator)
def test_the_step_timeout_ends_a_dead_link_collective_timeout_on_every_rank(backend):
    """The engines end a collective a dead link blocks by themselves (STEP_TIMEOUT, no watchdog, no host
    timeout): the link out of rank 0 held stalled, rank 0's port is declared down (LINK_DOWN) and drops its
    flits, the steps waiting for messages and credits are given up, and both ranks complete TIMEOUT well within
    the wait's limit. After ``System.reset`` and with the link back (the timeout still armed), collectives are
    bit-exact on the world and a fresh communicator, so a healthy run is not cut short by it."""
    with System({"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(6),
                 "driver": {"step_timeout": 2_000}}, backend=backend) as s:
        w = s.world
        a, b = s.register(16384), s.register(16384)
        assert s.step_timeout_cycles == 2_000 and all(drv.read("STEP_TIMEOUT") == 2_000 for drv in s.drivers)
        try:
            s.stall_link(0, 0)
            req = w.allreduce(a, b, 4096)
            with pytest.raises(CollectiveError) as err:
                req.wait(timeout_cycles=150_000)
            assert err.value.failures.keys() == {0, 1}
            assert {st for st, _ in err.value.failures.values()} == {"TIMEOUT"}, err.value.failures
            assert s.links_down() == {0: [0]}
            assert not any(drv.status()["hung"] for drv in s.drivers)      # the watchdog is off
            s.reset()
            s.stall_link(0, 0, stalled=False)
            assert s.links_down() == {}
            run_and_check(s, w, "allreduce", 4096, "fp32", seed=31)
            sub = s.split([0, 1])
            run_and_check(s, sub, "allgather", 300, "fp16", seed=32)
            sub.free()
        finally:
            s.stall_link(0, 0, stalled=False)
            s.set_step_timeout(0)
            s.deregister(a)
            s.deregister(b)


def test_an_abort_on_a_switch_resets_the_switch_with_the_engines():
    """switch:4 (Amaranth's simulator): an abort while an all-to-all and an all-reduce move through the switch
    (end-to-end credits per source and landing channel, the switch's queues). Every rank not done fails
    ABORTED, and the collectives after the abort run bit-exact. (The switch is held in reset with the engines;
    on this run its queues would also have drained into the held engines within the abort's hold.)"""
    with System({"topology": "switch:4", "links": {"latency": 4}, "seed": seed_for(31)}, backend="amaranth") as s:
        a, b = s.register(8192), s.register(8192)
        s.world.prepare("alltoall", "allreduce")     # loading a program would wait for the requests
        reqs = [s.world.alltoall(a, b, 256, "int32"), s.world.allreduce(a, b, 1024)]
        s.advance(200)
        assert not any(r.test() for r in reqs)
        s.reset()
        for r in reqs:
            assert {c["status_name"] for c in r.completions.values()} <= {"OK", "ABORTED"}
            assert "ABORTED" in {c["status_name"] for c in r.completions.values()}
        s.deregister(a)
        s.deregister(b)
        run_and_check(s, s.world, "alltoall", 100, "int32", seed=32)
        run_and_check(s, s.world, "allreduce", 600, "fp32", seed=33)


def test_sub_topologies():
    assert sub_topology("torus:4x2x2", range(16)) == "torus:4x2x2"
    assert sub_topology("torus:4x2x2", [0, 1, 2, 3]) == "torus:4x1x1"
    assert sub_topology("torus:4x2x2", [1, 5]) == "torus:1x2x1"
    assert sub_topology("torus:4x2x2", [2, 6, 10, 14]) == "torus:1x2x2"
    for topo, ranks in (("torus:4x2x2", [0, 1]), ("torus:4x2x2", [0, 5]), ("ring:4", [0, 1]),
                        ("switch:4", [0, 1])):
        with pytest.raises(CommunicatorError):
            sub_topology(topo, ranks)


@pytest.mark.cocotb
@pytest.mark.slow
def test_split_communicators_on_a_torus():
    """torus:2x2x1 on Verilator: an all-reduce on a split line of the torus, then on the world (the engines
    of the line ran one command more than the others: chunk-to-FSM assignment must not depend on that); a
    freed communicator's id serves the next split."""
    with System({"topology": "torus:2x2x1", "links": {"latency": 3}, "driver": {"buffers": 6}},
                backend="verilator") as s:
        assert all(d.buffer_budget == 6 for d in s.drivers)
        line = s.split([1, 3])
        assert line.topology.spec == "torus:1x2x1" and line.ranks == (1, 3)
        run_and_check(s, line, "allreduce", 40, "fp32", seed=21)
        run_and_check(s, s.world, "allreduce", 30, "int32", seed=22)
        with pytest.raises(CommunicatorError, match="in use"):
            s.split([0, 2])
        line.free()
        with pytest.raises(CommunicatorError, match="freed"):
            line.allreduce(None, None, 1)
        other = s.split([0, 2])
        assert other.id == line.id and other.barrier().wait(timeout_cycles=20_000).done


def test_engines_built_for_some_dtypes(monkeypatch):
    """Engines whose ALUs are built for fp32 and int32 only (``engine.dtypes``, as on a prototype board): the API
    refuses an fp16 reduction up front, the engine itself refuses one that gets past the API (BAD_DTYPE on every
    rank, the ALU never sees it), data-movement collectives still run on any type, and the built types reduce
    bit-exactly."""
    conf = {"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(8),
            "engine": {"profile": "small", "dtypes": ["int32", "FP32"]}}
    with System(conf, backend="amaranth") as s:
        w = s.world
        assert s.config.engine.dtypes == ("fp32", "int32")
        a, b = s.register(256), s.register(256)
        with pytest.raises(UsageError, match=r"reduce only fp32, int32 \(engine.dtypes\), not fp16"):
            w.allreduce(a, b, 8, "fp16")
        monkeypatch.setattr(type(s.config.engine), "supports", lambda self, dtype: True)
        with pytest.raises(CollectiveError) as err:
            w.reduce_scatter(a, b, 8, "bf16").wait(timeout_cycles=10_000)
        assert err.value.status == "BAD_DTYPE" and set(err.value.failures) == {0, 1}
        monkeypatch.undo()
        s.deregister(a)
        s.deregister(b)
        run_and_check(s, w, "allgather", 24, "fp16", seed=2)
        run_and_check(s, w, "allreduce", 40, "int32", "max", seed=3)
        run_and_check(s, w, "allreduce", 40, "fp32", seed=4)


def test_a_communicator_runs_the_algorithm_chosen_for_a_collective():
    """``set_algorithm``: the asynchronous all-to-all (Sven's deposits) instead of the direct one on ring:2,
    byte for byte against the golden executor running that algorithm's programs, then the default again;
    algorithms the topology does not support are refused with the choices."""
    conf = {"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(12), "engine": {"profile": "small"}}
    with System(conf, backend="amaranth") as s:
        w = s.world
        assert w.algorithm("alltoall") == "direct" and w.algorithm("barrier") == "ring"
        run_and_check(s, w, "alltoall", 12, "int32", seed=1)
        w.set_algorithm("all-to-all", "ASYNC")
        assert w.algorithm("alltoall") == "async" and ("alltoall", 0) not in w.loaded
        run_and_check(s, w, "alltoall", 12, "int32", seed=2)
        assert s._programs[(w.id, "alltoall", 0)].algorithm == "async"
        w.set_algorithm("alltoall")
        run_and_check(s, w, "alltoall", 9, "fp32", seed=3)
        assert s._programs[(w.id, "alltoall", 0)].algorithm == "direct"
        with pytest.raises(UsageError, match="'hierarchical-rotated' is not one of ring"):
            w.set_algorithm("allreduce", "hierarchical-rotated")
        with pytest.raises(UsageError, match="unknown collective"):
            w.set_algorithm("allsum", "ring")
        run_and_check(s, w, "allreduce", 16, "fp32", seed=4)


def test_a_full_program_table_makes_room_for_the_next_collective():
    """Engines with two program-table entries: a third collective evicts the least recently used program (it
    is loaded again at its next use), every result stays exact, and a program that cannot fit even alone is
    refused with the engine's reason while the system stays usable."""
    conf = {"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(9),
            "engine": {"profile": "small", "n_programs": 2}}
    with System(conf, backend="amaranth") as s:
        w = s.world
        run_and_check(s, w, "allreduce", 24, "fp32", seed=1)
        run_and_check(s, w, "allgather", 16, "int32", seed=2)
        run_and_check(s, w, "allreduce", 24, "fp32", seed=3)            # used again: allgather is now the oldest
        run_and_check(s, w, "broadcast", 20, "fp32", root=1, seed=4)
        assert w.loaded == {("allreduce", 0), ("broadcast", 1)}
        run_and_check(s, w, "allgather", 16, "int32", seed=5)           # evicted, loaded again
        assert w.loaded == {("broadcast", 1), ("allgather", 0)}
        for drv in s.drivers:
            assert len(drv.ptab) == 2
        imem = s.drivers[0].imem
        words, imem.words = imem.words, 2          # as if rank 0's instruction memory held two instructions
        a = s.register(64)
        with pytest.raises(UsageError, match="do not fit the engine.*no room for a program"):
            w.reduce_scatter(a, a, 8)
        assert w.loaded == set()
        imem.words = words
        s.deregister(a)
        run_and_check(s, w, "allreduce", 24, "fp32", seed=6)
        run_and_check(s, w, "reduce_scatter", 8, "int32", "max", seed=7)


@pytest.mark.cocotb
def test_links_that_retransmit_complete_every_collective_through_faults():
    """``engine.replay_flits`` and every fault kind in ``links``: the links recover corrupted, lost and
    duplicated flits, so every all-reduce completes OK and bit-exact, and the ports count their replays."""
    cfg = {"topology": "ring:2", "links": {"latency": 4, "flip": 0.003, "drop": 0.002, "dup": 0.002},
           "seed": seed_for(7), "engine": {"profile": "small", "replay_flits": 64}}
    with System(cfg, backend="verilator") as s:
        w = s.world
        for k in range(4):
            run_and_check(s, w, "allreduce", 2048, "fp32", seed=80 + k)
        replays = sum(s.drivers[r].read("TX_REPLAYS", p) for r in range(2) for p in range(2))
        assert replays > 0
        # an abort resets both ends of every link (sequence numbers, replay buffers) together
        s.reset()
        run_and_check(s, w, "reduce_scatter", 512, "int32", "max", seed=90)
        with pytest.raises(UsageError, match="probability"):
            s.set_link_faults(drop=1.0)


@pytest.mark.cocotb
def test_faulty_links_fail_collectives_but_never_silently():
    """``links.flip`` in the configuration: both links of ring:2 flip random data bits. Every all-reduce either
    fails (``CollectiveError``) or completes; every rank that completed OK holds exactly the golden result,
    whatever the other rank saw. With the faults turned off (``set_link_faults``) the next one is bit-exact."""
    cfg = {"topology": "ring:2", "links": {"latency": 4, "flip": 0.001}, "seed": seed_for(6),
           "engine": {"profile": "small"}}
    with System(cfg, backend="verilator") as s:
        w = s.world
        a, b = s.register(8192), s.register(8192)
        outcomes = []
        for k in range(10):
            rng = np.random.default_rng(60 + k)
            inputs = random_inputs("allreduce", 1024, 2, "fp32", 0, rng)
            for r in range(2):
                a.write(r, inputs[r])
            req = w.allreduce(a, b, 1024, "fp32", "sum")
            try:
                req.wait(timeout_cycles=200_000)
            except CollectiveError:
                pass
            progs = generate("allreduce", default_algorithm("allreduce", w.topology), w.topology)
            gold = execute(progs, w.topology, inputs, DType.FP32, ReduceOp.SUM, 1024, req.chunk_bytes,
                           s.config.engine.packet_bytes, s.config.engine.beat_bytes)
            for r in range(2):
                status = req.completions[r]["status_name"]
                outcomes.append(status)
                if status == "OK":
                    assert b.read(r, count=1024 * 4).tobytes() == gold.outputs[r].tobytes(), (k, r)
        assert "OK" in outcomes and set(outcomes) - {"OK"} <= {"LINK_CRC", "PROTOCOL"}, outcomes
        assert len(set(outcomes)) > 1, outcomes
        s.set_link_faults(0)
        run_and_check(s, w, "allreduce", 1024, "fp32", seed=70)
        with pytest.raises(UsageError, match="both rank and port"):
            s.set_link_faults(0.1, rank=0)
        with pytest.raises(UsageError, match="probability"):
            s.set_link_faults(1.5)


def test_typed_writes_reads_and_torch_like_arguments(ring2):
    """Numpy data reaches the engine only as an element type it has; a buffer remembers what it holds and a
    collective of another type on it is refused; bf16 reads as float32 on request; numpy integer ranks and
    roots are accepted; a collective of zero elements is a no-op, as in torch."""
    from syncfabric.sim.golden.arith import bf16_from_float32
    a, b = ring2.register(1024), ring2.register(1024)
    try:
        with pytest.raises(UsageError, match="float64 array is not an element type"):
            a.write(0, np.ones(4))
        with pytest.raises(UsageError, match="would truncate"):
            a.write(0, np.ones(4), dtype="int32")
        with pytest.raises(UsageError, match="outside int32"):
            a.write(0, np.array([1 << 40]), dtype="int32")
        with pytest.raises(UsageError, match="converts numpy arrays"):
            a.write(0, b"\0" * 4, dtype="fp32")
        values = np.array([1.0, 1 / 3, -2.5e-3, 3e38], np.float64)
        a.write(np.int64(0), values, dtype="fp32")
        assert a.read(0, "fp32", 4).tolist() == values.astype(np.float32).tolist()
        a.write(1, values, dtype="bf16")
        bits = bf16_from_float32(values.astype(np.float32))
        assert a.read(1, "bf16", 4).tolist() == bits.tolist()
        assert a.read(1, "bf16", 4, float32=True).tolist() == \
            (bits.astype(np.uint32) << 16).view(np.float32).tolist()
        with pytest.raises(UsageError, match="float32=True converts bf16"):
            a.read(0, "fp32", 4, float32=True)
        # a buffer holding fp32 on rank 0 and bf16 on rank 1: an fp32 collective is refused for rank 1
        with pytest.raises(UsageError, match="rank 1's send buffer holds bf16 data"):
            ring2.world.allreduce(a, b, 4, "fp32")
        for r in range(2):
            a.write(r, np.arange(8, dtype=np.int32) + r)
        assert ring2.world.allreduce(a, b, np.int64(8), "int32").wait(timeout_cycles=200_000).done
        assert b.read(0, "int32", 8).tolist() == (2 * np.arange(8) + 1).tolist()
        # the result is int32 data: a following fp32 collective on it is refused, an int32 one runs
        with pytest.raises(UsageError, match="holds int32 data"):
            ring2.world.allreduce(b, a, 8, "fp32")
        req = ring2.world.broadcast(a, b, 8, "int32", root=np.int64(1))
        assert req.wait(timeout_cycles=200_000).done
        assert b.read(0, "int32", 8).tolist() == (np.arange(8) + 1).tolist()
        with pytest.raises(UsageError, match="root True is not a rank"):
            ring2.world.broadcast(a, b, 8, "int32", root=True)
        # views of one registration hold their own types: an int32 view and an fp32 view side by side
        lo, hi = a.view(0, 32), a.view(512, 32)
        for r in range(2):
            lo.write(r, np.arange(8, dtype=np.int32))
            hi.write(r, np.ones(8, np.float32))
        assert ring2.world.allreduce(hi, b.view(512, 32), 8, "fp32").wait(timeout_cycles=200_000).done
        with pytest.raises(UsageError, match="holds int32 data"):
            ring2.world.allreduce(lo, b.view(0, 32), 8, "fp32")
        # nothing to do: done at once, no engine touched (torch's rule for zero-size tensors)
        tails = [d.sq["tail"] for d in ring2.drivers]
        req = ring2.world.allreduce(a, b, 0, "fp32")
        assert req.done and req.test() and req.cycles == 0 and not req.descriptors
        assert [d.sq["tail"] for d in ring2.drivers] == tails          # no descriptor posted
    finally:
        ring2.deregister(a)
        ring2.deregister(b)


def test_a_collective_that_would_overflow_the_landing_buffers_names_the_setting_that_fits_it():
    """all-to-all on ring:8 with the small engine's 4 landing headers would never finish: the error says which
    configuration key to set and to what (checked without a simulator)."""
    from syncfabric.hdl.ace.config import AceConfig
    from syncfabric.host.run import engine_config_for
    cfg = engine_config_for(AceConfig.profile("small"), "ring:8")
    comm = SimpleNamespace(id=0, size=8, topology=parse_topology("ring:8"))
    progs = generate("alltoall", default_algorithm("alltoall", comm.topology), comm.topology)
    fake = SimpleNamespace(config=SimpleNamespace(engine=cfg), _programs={(0, "alltoall", 0): progs[0]},
                           chunk_bytes=cfg.chunk_bytes)
    with pytest.raises(UsageError, match=r"set engine.landing_headers: 8 in the system configuration"):
        System._check_landing(fake, comm, "alltoall", 0, 16, 4)
    fits = SimpleNamespace(config=SimpleNamespace(engine=cfg.replace(landing_headers=8)),
                           _programs=fake._programs, chunk_bytes=cfg.chunk_bytes)
    System._check_landing(fits, comm, "alltoall", 0, 16, 4)


def test_driver_chunk_auto_sizes_the_chunk_per_collective_and_drains_before_changing_it(monkeypatch):
    """``driver.chunk_bytes: auto``: each collective runs with the chunk the driver chooses for it (here a
    stand-in rule: half the largest above 1 KiB per rank), CHUNK_BEATS is rewritten only when the engines are
    idle (an outstanding request finishes first), and every result is exact at its request's chunk; then the
    model's own choice on the same system."""
    import syncfabric.host.chunksize as cs
    from syncfabric.host.config import ConfigError, load_config

    real = cs.choose_chunk_bytes
    asked = []

    def rule(cfg, head, coll, topo, nbytes, **kw):
        asked.append((coll, nbytes, kw["largest"]))
        return cs.ChunkChoice(kw["largest"] // 2 if nbytes > 1024 else kw["largest"], ())

    monkeypatch.setattr(cs, "choose_chunk_bytes", rule)
    conf = {"topology": "ring:2", "links": {"latency": 4}, "seed": seed_for(13), "engine": {"profile": "small"},
            "driver": {"chunk_bytes": "auto"}}
    with System(conf, backend="amaranth") as s:
        w, beat = s.world, s.config.engine.beat_bytes
        big = run_and_check(s, w, "allreduce", 600, "fp32", seed=1)          # 2,400 B: half the largest
        assert big.chunk_bytes == 512 and asked[-1] == ("allreduce", 2400, 1024)
        assert all(d.read("CHUNK_BEATS") == 512 // beat for d in s.drivers)
        # a big request in flight, then a small one: the chunk changes only after the big one has finished
        a = s.register(2400)
        b = s.register(400)
        for r in range(2):
            a.write(r, np.ones(600, np.float32))
            b.write(r, np.ones(100, np.float32))
        first = w.allreduce(a, None, 600)
        second = w.allreduce(b, None, 100)
        assert first.done and first.chunk_bytes == 512 and second.chunk_bytes == 1024
        second.wait(timeout_cycles=200_000)
        assert all(d.read("CHUNK_BEATS") == 1024 // beat for d in s.drivers)
        assert (a.read(0, "fp32") == 2).all() and (b.read(1, "fp32") == 2).all()
        n = len(asked)
        run_and_check(s, w, "allreduce", 600, "fp32", seed=2)               # the choice is remembered
        assert len(asked) == n
        monkeypatch.setattr(cs, "choose_chunk_bytes", real)
        req = run_and_check(s, w, "reduce_scatter", 700, "fp32", seed=3)
        assert req.chunk_bytes in (512, 1024)
    with pytest.raises(ConfigError, match="driver.chunk_bytes: expected one of max, auto, got 'most'"):
        load_config({"topology": "ring:2", "driver": {"chunk_bytes": "most"}})
