"""The barrier: the topology's all-reduce program run on zero bytes (one chunk of empty blocks).

Checks that ``generate("barrier", ...)`` is the all-reduce's program under the barrier's name, that the
executor runs it as one chunk of header-only messages whatever ``count`` is, and that it is a real barrier:
in the happens-before graph of the program (program order plus SEND -> matching RECV), every rank's final
step depends on a SEND of every other rank.
"""

import numpy as np
import pytest

from syncfabric.sim.golden.algorithms import default_algorithm, generate, supported_algorithms
from syncfabric.sim.golden.chunking import (COLLECTIVES, Decomposition, block_buffer_ranges, buffer_counts,
                                            decomposition_for, normalize_collective, segments_for)
from syncfabric.sim.golden.executor import execute
from syncfabric.sim.golden.program import StepOp, check_programs
from syncfabric.sim.golden.topology import parse
from syncfabric.sim.golden.types import Collective, DType, ReduceOp

BARRIER_TOPOLOGIES = ["ring:4", "bidir-ring:4", "torus:2x2x2", "switch:4"]
MORE_TOPOLOGIES = ["ring:2", "bidir-ring:5", "torus:4x2x1", "torus:1x4x2", "switch:6", "switch:8"]


# ---- names, buffers, decomposition ----------------------------------------------------------------------------

def test_barrier_name_and_buffers():
    assert normalize_collective("barrier") == "barrier" == normalize_collective(" Barrier ")
    assert "barrier" in COLLECTIVES and Collective.BARRIER.golden_name == "barrier"
    assert segments_for("barrier", 8) == 1
    for n in (0, 1, 37, 10**9):
        assert [buffer_counts("barrier", n, 4, r) for r in range(4)] == [(0, 0)] * 4


@pytest.mark.parametrize("count", [0, 1, 1000, 10**9])
def test_barrier_decomposition_is_one_chunk_of_empty_blocks(count):
    d = Decomposition(count, 4, 8, chunk_bytes=256, barrier=True)
    assert d.n_chunks == 1 and d.slot_bytes == 0 and list(d.chunks()) == [d.chunk(0)]
    c = d.chunk(0)
    assert (c.index, c.lo, c.hi, c.nbytes) == (0, 0, 0, 0)
    assert [(b.index, b.segment, b.sub) for b in c.blocks] == [(i, 0, i) for i in range(8)]
    assert all(b.lo == b.hi == 0 and b.nbytes == 0 and b.nelems == 0 and b.packets == () for b in c.blocks)
    with pytest.raises(IndexError, match="chunk 1 out of range"):
        d.chunk(1)
    for r in range(3):
        assert block_buffer_ranges("barrier", r, 3, d, 0, 5) == ((0, 0), (0, 0))
    assert decomposition_for("barrier", 3, count, 4, 8, chunk_bytes=256) == d


def test_barrier_decomposition_validation():
    with pytest.raises(ValueError, match="count must be positive, got 0"):
        Decomposition(0, 4, 8)
    with pytest.raises(ValueError, match="count must be non-negative, got -1"):
        Decomposition(-1, 4, 8, barrier=True)
    with pytest.raises(ValueError, match="barrier must be a bool"):
        Decomposition(1, 4, 8, barrier=1)
    with pytest.raises(ValueError, match="beat_bytes \\(64\\) must be a multiple of the element size"):
        Decomposition(1, 3, 8, barrier=True)
    d = Decomposition(10, 4, 4, barrier=True)
    with pytest.raises(ValueError, match="a barrier decomposition .* cannot map the buffers of allreduce"):
        block_buffer_ranges("allreduce", 0, 4, d, 0, 0)
    # The other collectives keep their decomposition.
    rs = decomposition_for("rs", 4, 10, 4, 8, chunk_bytes=512)
    assert rs == Decomposition(10, 4, 8, 4, 512) and not rs.barrier


# ---- programs ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", BARRIER_TOPOLOGIES + MORE_TOPOLOGIES)
def test_barrier_programs_are_the_allreduce_programs(spec):
    t = parse(spec)
    assert supported_algorithms("barrier", t) == supported_algorithms("allreduce", t)
    assert default_algorithm("barrier", t) == default_algorithm("allreduce", t)
    for algo in (None,) + supported_algorithms("allreduce", t):
        bar, ar = generate("barrier", algo, t), generate("allreduce", algo, t)
        check_programs(bar, t)
        assert len(bar) == len(ar) == t.n_endpoints
        for b, a in zip(bar, ar):
            assert b.collective == "barrier" and a.collective == "allreduce"
            assert (b.rank, b.nranks, b.algorithm, b.n_blocks, b.n_slots, b.root, b.phases) == \
                   (a.rank, a.nranks, a.algorithm, a.n_blocks, a.n_slots, a.root, a.phases)
            assert b.instruction_words() == a.instruction_words()


def test_barrier_generate_errors_name_the_barrier():
    with pytest.raises(ValueError, match="algorithm 'direct' does not support barrier on ring:4"):
        generate("barrier", "direct", "ring:4")
    with pytest.raises(ValueError, match="halving-doubling needs a power-of-two number of ranks"):
        generate("barrier", "halving-doubling", "switch:6")
    with pytest.raises(ValueError, match="unknown collective 'barrier2'"):
        generate("barrier2", None, "ring:4")


# ---- execution --------------------------------------------------------------------------------------------------

def _one_chunk_allreduce(algorithm, t):
    """The all-reduce with the same algorithm on a one-chunk payload (its message counts per chunk)."""
    ar = generate("allreduce", algorithm, t)
    return execute(ar, t, [np.ones(5, np.int32)] * t.n_endpoints, DType.INT32, ReduceOp.SUM, 5)


@pytest.mark.parametrize("spec", BARRIER_TOPOLOGIES)
@pytest.mark.parametrize("count", [0, 1, 1000, 10**6])
def test_barrier_runs_one_chunk_of_empty_messages(spec, count):
    t = parse(spec)
    P = t.n_endpoints
    progs = generate("barrier", None, t)
    ref = _one_chunk_allreduce(progs[0].algorithm, t)
    for dtype in DType:
        for kw in ({}, {"seed": count + int(dtype), "max_chunks_in_flight": 3}):
            res = execute(progs, t, None, dtype, ReduceOp.SUM, count, chunk_bytes=128, **kw)
            assert res.n_chunks == 1 and res.decomposition.barrier
            # Header-only messages: the all-reduce's messages of one chunk, one packet each, no payload.
            assert res.link_messages == ref.link_messages and res.n_messages == ref.n_messages > 0
            assert res.link_packets == res.link_messages and res.n_packets == res.n_messages
            assert set(res.link_bytes.values()) == {0} and res.link_bytes.keys() == ref.link_bytes.keys()
            assert res.bytes_sent == [0] * P and res.total_bytes_sent == 0
            # No memory traffic, no outputs.
            assert res.mem_read_bytes == [0] * P and res.mem_write_bytes == [0] * P
            assert all(o.dtype == np.uint8 and o.size == 0 for o in res.outputs)
            assert all(c.size == 0 for c in res.read_counts + res.write_counts)
            # The count lane still travels: every rank heard from all P ranks.
            assert res.contributors == [P] * P
            assert res.store_counts == [{b: P for b in range(progs[0].n_blocks)}] * P
            assert res.n_steps == sum(len(p.steps()) for p in progs)


def test_barrier_ignores_inputs_and_rejects_null_ranks():
    t = parse("ring:4")
    progs = generate("barrier", None, t)
    res = execute(progs, t, [np.arange(7, dtype=np.int32)] * 4, DType.INT32, ReduceOp.MAX, 7)
    assert res.mem_read_bytes == [0] * 4 and res.total_bytes_sent == 0
    with pytest.raises(ValueError, match="2 input buffers for 4 ranks"):
        execute(progs, t, [None, None], DType.INT32, ReduceOp.SUM, 0)
    with pytest.raises(ValueError, match="null contributions are only defined for allreduce, reduce_scatter, "
                                         "reduce, not barrier"):
        execute(progs, t, None, DType.INT32, ReduceOp.SUM, 0, null_ranks=[1])


# ---- it is a real barrier -------------------------------------------------------------------------------------

def happens_before(programs, topology):
    """The happens-before graph of one chunk: nodes ``(rank, i)`` (``i``-th step in execution order), edges of
    program order within the rank and from every emitting step (SEND, RECV with forward) to the RECV that
    consumes its message (matched by phase and key at ``peer``). Returns ``(steps, successors)``."""
    topology = parse(topology)
    steps = {p.rank: p.steps() for p in programs}
    recv_at = {}
    for r, ss in steps.items():
        for i, (pi, _, s) in enumerate(ss):
            if s.op == StepOp.RECV:
                recv_at[(r, pi, s.key)] = (r, i)
    succ = {}
    for r, ss in steps.items():
        for i, (pi, _, s) in enumerate(ss):
            out = succ.setdefault((r, i), [])
            if i + 1 < len(ss):
                out.append((r, i + 1))
            if s.emits:
                dst, _ = topology.link(r, s.out_port, s.peer)
                assert dst == s.peer
                out.append(recv_at[(dst, pi, s.out_key)])
    return steps, succ


def _reachable(succ, start):
    seen, todo = {start}, [start]
    while todo:
        for n in succ[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def barrier_violations(programs, topology):
    """Pairs ``(s, r)`` (``s != r``) such that rank ``r``'s final step or last RECV does not depend on any
    SEND of rank ``s``, or its final step not on rank ``s``'s first step; empty for a real barrier."""
    steps, succ = happens_before(programs, topology)
    P = len(steps)
    reach = {s: _reachable(succ, (s, 0)) for s in range(P) if steps[s]}
    from_sends = {s: set().union(*[_reachable(succ, (s, i)) for i, (_, _, st) in enumerate(steps[s])
                                   if st.op == StepOp.SEND]) for s in range(P)}
    bad = []
    for r in range(P):
        if not steps[r]:
            bad.extend((s, r) for s in range(P) if s != r)
            continue
        final = (r, len(steps[r]) - 1)
        recvs = [i for i, (_, _, st) in enumerate(steps[r]) if st.op == StepOp.RECV]
        for s in range(P):
            if s == r:
                continue
            if (s not in reach or final not in reach[s] or final not in from_sends[s]
                    or not recvs or (r, recvs[-1]) not in from_sends[s]):
                bad.append((s, r))
    return bad


@pytest.mark.parametrize("spec", BARRIER_TOPOLOGIES + MORE_TOPOLOGIES)
def test_barrier_every_final_step_depends_on_every_rank(spec):
    t = parse(spec)
    for algo in supported_algorithms("barrier", t):
        progs = generate("barrier", algo, t)
        assert barrier_violations(progs, t) == [], f"{algo} on {spec} is not a barrier"


def test_barrier_check_catches_a_non_barrier():
    """The check has teeth: a broadcast is no barrier (the root depends on nobody), nor is a reduce (the
    chain's first rank, the root's successor, depends on nobody)."""
    t = parse("ring:4")
    bad = barrier_violations(generate("broadcast", None, t, root=2), t)
    assert {(0, 2), (1, 2), (3, 2)} <= set(bad)
    bad = barrier_violations(generate("reduce", None, t, root=2), t)
    assert {(0, 3), (1, 3), (2, 3)} <= set(bad)
