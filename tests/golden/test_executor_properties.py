"""Property tests of the golden executor over random sizes, chunkings, algorithms and schedules.

Random data is drawn from ``numpy.random.default_rng(seed)`` with ``seed`` a Hypothesis argument, so a
failing example's report names the seed (it is also printed, see ``pytest -s``).
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.executor import DeadlockError, ExecutionError, execute
from syncfabric.sim.golden.program import Phase, Program, Step, StepOp
from syncfabric.sim.golden.topology import parse
from syncfabric.sim.golden.types import DType, ReduceOp

from _collective_ref import check_result, make_inputs

# Four ways to all-reduce / reduce-scatter / all-gather on 8 ranks.
EIGHT = [("ring:8", "ring"), ("bidir-ring:8", "bidir-ring"), ("torus:2x2x2", "hierarchical"),
         ("switch:8", "halving-doubling")]
EXACT_OPS = [(DType.INT32, ReduceOp.SUM), (DType.INT32, ReduceOp.MIN), (DType.FP32, ReduceOp.MAX)]
PROGRAMS = {(spec, coll): generate(coll, algo, spec)
            for spec, algo in EIGHT for coll in ("allreduce", "reduce_scatter", "allgather")}


def _payload(seg_chunk_elems, draw):
    """A count from 1 element to about three chunks, often with a ragged tail."""
    return draw(st.one_of(st.integers(1, 40), st.integers(1, 3 * seg_chunk_elems + 37)))


@st.composite
def reduction_case(draw, coll):
    chunk_beats = draw(st.integers(1, 24))
    segs = 8 if coll != "allreduce" else 1
    chunk_bytes = 64 * chunk_beats * segs
    count = _payload(16 * chunk_beats, draw)
    dtype, op = draw(st.sampled_from(EXACT_OPS))
    seed = draw(st.integers(0, 2**32 - 1))
    return chunk_bytes, count, dtype, op, seed


def _run_everywhere(coll, case):
    chunk_bytes, count, dtype, op, seed = case
    print(f"seed={seed} coll={coll} count={count} chunk_bytes={chunk_bytes} {dtype.name} {op.name}")
    inputs = make_inputs(coll, 8, count, 0, dtype, np.random.default_rng(seed))
    results = []
    for spec, _ in EIGHT:
        res = execute(PROGRAMS[(spec, coll)], parse(spec), inputs, dtype, op, count, chunk_bytes=chunk_bytes)
        check_result(res, coll, inputs, 8, count, 0, dtype, op)
        results.append(res)
    return inputs, results


@given(reduction_case("allreduce"))
@settings(max_examples=40, deadline=None)
def test_allreduce_identical_across_algorithms_and_memory_touched_once(case):
    inputs, results = _run_everywhere("allreduce", case)
    nbytes = inputs[0].nbytes
    for res in results:
        for r in range(8):
            assert np.array_equal(res.outputs[r], results[0].outputs[0])
            # ACE reads each payload byte once and writes it once.
            assert res.mem_read_bytes[r] == nbytes and res.mem_write_bytes[r] == nbytes
            assert (res.read_counts[r] == 1).all() and (res.write_counts[r] == 1).all()


@given(reduction_case("reduce_scatter"))
@settings(max_examples=25, deadline=None)
def test_reduce_scatter_identical_across_algorithms(case):
    _, results = _run_everywhere("reduce_scatter", case)
    for res in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(res.outputs, results[0].outputs))


@given(reduction_case("allgather"))
@settings(max_examples=25, deadline=None)
def test_allgather_identical_across_algorithms(case):
    _, results = _run_everywhere("allgather", case)
    for res in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(res.outputs, results[0].outputs))


A2A_TOPOLOGIES = ["ring:5", "bidir-ring:6", "torus:2x2x2", "torus:3x2x1", "torus:1x4x2", "switch:4", "ring:2"]


@given(spec=st.sampled_from(A2A_TOPOLOGIES), chunk_beats=st.integers(1, 6), count=st.integers(1, 200),
       seed=st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_alltoall_is_a_permutation_of_blocks(spec, chunk_beats, count, seed):
    t = parse(spec)
    P = t.n_endpoints
    progs = generate("alltoall", None, t)
    # Element (src, dst, i) carries its own address, so any misplaced element is caught.
    order = np.random.default_rng(seed).permutation(count)  # a random payload pattern per segment
    inputs = [np.concatenate([(s << 24) | (d << 16) | order for d in range(P)]).astype(np.int32) for s in range(P)]
    print(f"seed={seed} {spec} count={count} chunk_beats={chunk_beats}")
    res = execute(progs, t, inputs, DType.INT32, ReduceOp.SUM, count, chunk_bytes=64 * chunk_beats * P)
    outs = [res.output_as(r, np.int32) for r in range(P)]
    for r in range(P):
        for s in range(P):
            assert np.array_equal(outs[r][s * count:(s + 1) * count], (s << 24) | (r << 16) | order)
    assert sorted(np.concatenate(outs).tolist()) == sorted(np.concatenate(inputs).tolist())
    assert res.mem_read_bytes == [P * count * 4] * P == res.mem_write_bytes


SCHEDULE_CASES = [("allreduce", "torus:2x4x2"), ("allreduce", "bidir-ring:5"), ("allreduce", "switch:8"),
                  ("reduce_scatter", "torus:2x2x2"), ("alltoall", "torus:2x2x2"), ("reduce", "bidir-ring:4"),
                  ("broadcast", "torus:2x2x2"), ("allgather", "ring:3")]


@given(case=st.sampled_from(SCHEDULE_CASES), chunk_beats=st.integers(1, 4), count=st.integers(1, 400),
       in_flight=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_result_independent_of_interleaving(case, chunk_beats, count, in_flight, seed):
    """Chunks overlapping in any order (keys, not arrival order, match messages): same bits, same traffic."""
    coll, spec = case
    t = parse(spec)
    P = t.n_endpoints
    progs = generate(coll, None, t, root=P - 1)
    chunk_bytes = 64 * chunk_beats * progs[0].segments
    print(f"seed={seed} {coll} {spec} count={count} chunk_bytes={chunk_bytes} in_flight={in_flight}")
    inputs = make_inputs(coll, P, count, P - 1, DType.FP32, np.random.default_rng(seed))
    a = execute(progs, t, inputs, DType.FP32, ReduceOp.SUM, count, chunk_bytes=chunk_bytes)
    b = execute(progs, t, inputs, DType.FP32, ReduceOp.SUM, count, chunk_bytes=chunk_bytes,
                max_chunks_in_flight=in_flight, seed=seed)
    assert all(np.array_equal(x, y) for x, y in zip(a.outputs, b.outputs))
    assert a.link_bytes == b.link_bytes and a.link_packets == b.link_packets and a.n_messages == b.n_messages
    check_result(a, coll, inputs, P, count, P - 1, DType.FP32, ReduceOp.SUM)


@given(chunk_beats=st.integers(2, 8), count=st.integers(1, 1500), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_fp32_sum_within_rounding_bound_and_identical_on_all_ranks(chunk_beats, count, seed):
    t = parse("torus:2x4x2")
    progs = generate("allreduce", None, t)
    print(f"seed={seed} count={count} chunk_beats={chunk_beats}")
    inputs = make_inputs("allreduce", 16, count, 0, DType.FP32, np.random.default_rng(seed))
    res = execute(progs, t, inputs, DType.FP32, ReduceOp.SUM, count, chunk_bytes=64 * chunk_beats)
    check_result(res, "allreduce", inputs, 16, count, 0, DType.FP32, ReduceOp.SUM)
    assert all(np.array_equal(res.outputs[r], res.outputs[0]) for r in range(16))


# ---- error behaviour ------------------------------------------------------------------------------------------

def _two_rank(steps0, steps1, coll="allreduce", n_blocks=2, n_slots=2):
    return [Program(r, 2, coll, "hand-written", n_blocks, n_slots, (Phase("p", (0, 1), s),))
            for r, s in enumerate((steps0, steps1))]


RING2 = parse("ring:2")


def test_deadlock_when_both_ranks_receive_first():
    """Valid pairing (check_programs accepts it) but both ranks wait for each other."""
    def steps(peer):
        return (Step(StepOp.LOAD, 0, 0), Step(StepOp.RECV, 1, 0, port=1, key=0),
                Step(StepOp.SEND, 0, 0, port=0, peer=peer, key=0), Step(StepOp.STORE, 1, 0))
    progs = _two_rank(steps(1), steps(0), n_blocks=1)
    with pytest.raises(DeadlockError) as e:
        execute(progs, RING2, [np.zeros(32, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 32, chunk_bytes=128)
    assert len(e.value.blocked) == 2
    assert "rank 0 chunk 0 phase 0 (p) step 1 [RECV slot=1 block=0 port=1 key=0] waits for key 0" in str(e.value)
    # The same programs with SEND before RECV run fine (so the deadlock is the order, nothing else).
    def fixed(peer):
        s = steps(peer)
        return (s[0], s[2], s[1], s[3])
    res = execute(_two_rank(fixed(1), fixed(0), n_blocks=1), RING2,
                  [np.arange(32, dtype=np.int32), -np.arange(32, dtype=np.int32)], DType.INT32, ReduceOp.SUM, 32)
    assert np.array_equal(res.output_as(0, np.int32), -np.arange(32))


def test_deadlock_on_recv_without_message():
    progs = _two_rank((Step(StepOp.LOAD, 0, 0), Step(StepOp.STORE, 0, 0), Step(StepOp.LOAD, 1, 1),
                       Step(StepOp.STORE, 1, 1)),
                      (Step(StepOp.RECV, 0, 0, port=1, key=3),))
    with pytest.raises(DeadlockError, match="rank 1 chunk 0 phase 0 \\(p\\) step 0 .* waits for key 3"):
        execute(progs, RING2, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8, check=False)


def test_unconsumed_message_is_an_error():
    progs = _two_rank((Step(StepOp.LOAD, 0, 0), Step(StepOp.SEND, 0, 0, port=0, peer=1, key=5)), ())
    with pytest.raises(ExecutionError, match="1 message\\(s\\) never received:\n  to rank 1 phase 0 key 5"):
        execute(progs, RING2, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8, check=False)


def test_duplicate_message_is_an_error():
    send = Step(StepOp.SEND, 0, 0, port=0, peer=1, key=0)
    progs = _two_rank((Step(StepOp.LOAD, 0, 0), send, send), (Step(StepOp.RECV, 0, 0, port=1, key=0),))
    with pytest.raises(ExecutionError, match="already holds an unconsumed message with key 0"):
        execute(progs, RING2, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8, check=False)


def test_message_on_wrong_port_is_an_error():
    t = parse("bidir-ring:2")
    progs = _two_rank((Step(StepOp.LOAD, 0, 0), Step(StepOp.SEND, 0, 0, port=0, peer=1, key=0)),
                      (Step(StepOp.RECV, 0, 0, port=0, key=0),))
    with pytest.raises(ExecutionError, match="arrived on port 1"):
        execute(progs, t, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8, check=False)


def test_empty_slot_is_an_error():
    progs = _two_rank((Step(StepOp.SEND, 0, 0, port=0, peer=1, key=0),), (Step(StepOp.RECV, 0, 0, port=1, key=0),))
    with pytest.raises(ExecutionError, match="slot 0 is empty"):
        execute(progs, RING2, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8, check=False)


def test_executor_checks_programs_by_default():
    progs = _two_rank((Step(StepOp.LOAD, 0, 0),), (Step(StepOp.RECV, 0, 0, port=1, key=3),))
    with pytest.raises(ValueError, match="no message is ever sent with key 3"):
        execute(progs, RING2, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8)


@pytest.mark.parametrize("inputs,match", [
    ([np.zeros(8, np.int32)], "1 input buffers for 2 ranks"),
    ([np.zeros(8, np.int32), np.zeros(7, np.int32)], "rank 1: input has 28 bytes, the collective needs 32"),
    ([np.zeros(8, np.int32), None], "rank 1 needs an input buffer"),
    ([np.zeros(8, np.int32), np.zeros(8, ">i4")], "little-endian"),
])
def test_bad_inputs(inputs, match):
    progs = generate("allreduce", "ring", RING2)
    with pytest.raises(ValueError, match=match):
        execute(progs, RING2, inputs, DType.INT32, ReduceOp.SUM, 8)


def test_broadcast_non_root_inputs_are_optional():
    t = parse("ring:3")
    progs = generate("broadcast", None, t, root=1)
    x = np.arange(10, dtype=np.float32)
    res = execute(progs, t, [None, x, None], DType.FP32, ReduceOp.SUM, 10)
    assert all(np.array_equal(res.output_as(r, np.float32), x) for r in range(3))
    assert res.mem_read_bytes == [0, 40, 0] and res.mem_write_bytes == [40] * 3


def test_packet_and_message_stats():
    t = parse("ring:2")
    progs = generate("allreduce", "ring", t)
    # One chunk, 2 blocks of 600 bytes: 3 packets each (256 + 256 + 88).
    res = execute(progs, t, [np.zeros(300, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 300, chunk_bytes=1216)
    sizes = [b.nbytes for b in res.decomposition.chunk(0).blocks]
    assert sizes == [640, 560]
    # Each rank sends 2 messages (one RS, one AG): one of each block size overall per direction.
    assert res.n_messages == 4 and res.link_messages == {(0, 0): 2, (1, 0): 2}
    assert res.n_packets == 4 * 3 and res.total_bytes_sent == 2 * (640 + 560)
    # Zero-length blocks are still messages, one header-only packet each.
    res = execute(progs, t, [np.zeros(1, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 1)
    assert res.n_messages == 4 and res.n_packets == 4 and res.total_bytes_sent == 8


def test_per_phase_link_traffic_splits_the_links_traffic_by_phase():
    """A hierarchical all-reduce on torus:4x2x2: every phase sends only on its dimension's ports, the phases
    add up to ``link_bytes``, and the flit counts are the messages' beats (one flit for an empty message)."""
    t = parse("torus:4x2x2")
    progs = generate("allreduce", "hierarchical", t)
    res = execute(progs, t, [np.arange(1000, dtype=np.int32)] * 16, DType.INT32, ReduceOp.SUM, 1000,
                  chunk_bytes=1024, beat_bytes=16)
    total = {}
    for (pi, r, port), b in res.phase_link_bytes.items():
        total[(r, port)] = total.get((r, port), 0) + b
        assert port // 2 == (0, 1, 2, 0)[pi], f"phase {pi} sent on port {port}"
        assert res.phase_link_flits[(pi, r, port)] >= -(-b // 16)
    assert total == res.link_bytes
    assert set(res.phase_link_flits) == set(res.phase_link_bytes)
    res = execute(progs, t, [np.zeros(1, np.int32)] * 16, DType.INT32, ReduceOp.SUM, 1, beat_bytes=16)
    assert sum(res.phase_link_flits.values()) == res.n_messages       # every block of 0 or 4 bytes: one flit


def test_rotated_allreduce_sends_what_hierarchical_sends_with_both_middle_phases_on_every_slow_link():
    """``hierarchical-rotated`` on torus:4x2x2: the same bytes on every (rank, port) as ``hierarchical``, and
    each middle phase puts the same bytes on all four vertical and horizontal ports of every rank (half of
    what one of hierarchical's middle phases puts on its two)."""
    t = parse("torus:4x2x2")
    kw = dict(chunk_bytes=2048, beat_bytes=16)
    data = [np.arange(4096, dtype=np.int32) * (r + 1) for r in range(16)]
    base = execute(generate("allreduce", "hierarchical", t), t, data, DType.INT32, ReduceOp.SUM, 4096, **kw)
    rot = execute(generate("allreduce", "hierarchical-rotated", t), t, data, DType.INT32, ReduceOp.SUM, 4096,
                  **kw)
    assert rot.link_bytes == base.link_bytes
    assert all(np.array_equal(a, b) for a, b in zip(rot.outputs, base.outputs))
    for r in range(16):
        for pi in (1, 2):
            sent = [rot.phase_link_bytes.get((pi, r, port), 0) for port in range(6)]
            assert sent[:2] == [0, 0] and len(set(sent[2:])) == 1, f"rank {r} phase {pi}: {sent}"
            assert sent[2] * 2 == base.phase_link_bytes[(1, r, 2)]


def test_out_of_range_slot_is_an_error_without_check():
    progs = _two_rank((Step(StepOp.LOAD, 5, 0),), ())
    with pytest.raises(ExecutionError, match="slot or block out of range"):
        execute(progs, RING2, [np.zeros(8, np.int32)] * 2, DType.INT32, ReduceOp.SUM, 8, check=False)
