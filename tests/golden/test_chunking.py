"""Chunk / block / packet decomposition and the collectives' buffer mapping."""

import pytest
from hypothesis import given, settings, strategies as st

from syncfabric.sim.golden.chunking import (COLLECTIVES, Decomposition, block_buffer_ranges, buffer_counts,
                                            normalize_collective, recv_segment, segments_for, send_segment)


def test_one_element_over_sixteen_blocks():
    d = Decomposition(count=1, elem_bytes=4, n_blocks=16)
    assert d.n_chunks == 1
    c = d.chunk(0)
    assert [(b.lo, b.hi) for b in c.blocks] == [(0, 1)] + [(1, 1)] * 15
    assert c.blocks[0].packets == ((0, 4),)
    assert all(b.nbytes == 0 and b.packets == () for b in c.blocks[1:])


def test_default_table_iii_granularity():
    # 64 KiB chunk of fp32 in 8 messages of 8 KiB = 32 packets of 256 B = 4 beats each.
    d = Decomposition(count=3 * 16384 + 100, elem_bytes=4, n_blocks=8)
    assert d.segment_chunk_elems == 16384 and d.n_chunks == 4
    c = d.chunk(1)
    assert (c.lo, c.hi) == (16384, 32768)
    assert all(b.nbytes == 8192 and len(b.packets) == 32 for b in c.blocks)
    assert c.blocks[3].packets[5] == (1280, 256)
    tail = d.chunk(3)
    assert (tail.lo, tail.hi) == (49152, 49252) and tail.nbytes == 400
    # 400 B = 7 beats (the last one 16 B): 1 beat each, the 7th block holding the partial beat.
    assert [b.nbytes for b in tail.blocks] == [64] * 6 + [16, 0]
    assert d.slot_bytes == 8192


def test_balanced_beats():
    # 17 beats over 16 blocks: one block of 2 beats, fifteen of 1 (not 8 of 2 and 7 empty).
    d = Decomposition(count=17 * 16, elem_bytes=4, n_blocks=16, chunk_bytes=4096)
    assert [b.nbytes for b in d.chunk(0).blocks] == [128] + [64] * 15
    assert d.slot_bytes == 4 * 64  # 64 beats per full chunk / 16 blocks


def test_segmented_chunk():
    d = Decomposition(count=10, elem_bytes=4, n_blocks=8, segments=4, chunk_bytes=1024)
    assert d.sub_blocks == 2 and d.segment_chunk_bytes == 256
    c = d.chunk(0)
    assert [(b.segment, b.sub, b.lo, b.hi) for b in c.blocks] == [(s, j, lo, hi) for s in range(4)
                                                                 for j, (lo, hi) in enumerate([(0, 10), (10, 10)])]
    # The per-segment share of the chunk is rounded down to whole beats.
    assert Decomposition(1, 4, 3, 3, chunk_bytes=1024).segment_chunk_bytes == 320


@pytest.mark.parametrize("kwargs,match", [
    (dict(count=0), "count must be positive"),
    (dict(count=-5), "count must be positive"),
    (dict(count=2.0), "count must be an integer"),
    (dict(elem_bytes=0), "elem_bytes must be positive"),
    (dict(n_blocks=0), "n_blocks must be positive"),
    (dict(chunk_bytes=0), "chunk_bytes must be positive"),
    (dict(chunk_bytes=1000), "chunk_bytes \\(1000\\) must be a multiple of beat_bytes"),
    (dict(packet_bytes=100), "packet_bytes \\(100\\) must be a multiple of beat_bytes"),
    (dict(beat_bytes=6), "beat_bytes \\(6\\) must be a multiple of the element size"),
    (dict(beat_bytes=-64), "beat_bytes must be positive"),
    (dict(n_blocks=6, segments=4), "multiple of the number of segments"),
    (dict(n_blocks=64, segments=64, chunk_bytes=2048), "too small for 64 segments"),
    (dict(segments=True), "segments must be an integer"),
])
def test_bad_parameters(kwargs, match):
    args = dict(count=100, elem_bytes=4, n_blocks=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Decomposition(**args)


def test_chunk_index_out_of_range():
    with pytest.raises(IndexError, match="chunk 1 out of range"):
        Decomposition(10, 4, 2).chunk(1)


@given(count=st.integers(1, 5000), eb=st.sampled_from([2, 4]), m=st.integers(1, 12), segs=st.integers(1, 5),
       beats=st.integers(1, 40), packet_beats=st.integers(1, 6))
@settings(max_examples=300, deadline=None)
def test_decomposition_invariants(count, eb, m, segs, beats, packet_beats):
    beat = 64
    d = Decomposition(count, eb, m * segs, segs, chunk_bytes=beats * beat * segs, packet_bytes=packet_beats * beat,
                      beat_bytes=beat)
    covered = 0
    for c in d.chunks():
        assert c.lo == covered and c.hi > c.lo
        covered = c.hi
        for s in range(segs):
            subs = c.blocks[s * m:(s + 1) * m]
            assert subs[0].lo == c.lo and subs[-1].hi == c.hi
            for a, b in zip(subs, subs[1:]):
                assert a.hi == b.lo
            sizes = []
            for b in subs:
                assert b.segment == s and b.index == s * m + b.sub
                assert b.nbytes == 0 or (b.lo - c.lo) * eb % beat == 0   # non-empty blocks start on a beat
                assert b.nbytes == (b.hi - b.lo) * eb <= d.slot_bytes
                sizes.append(-(-b.nbytes // beat))
                # packets tile the block, all full except the last
                off = 0
                for po, pl in b.packets:
                    assert po == off and 0 < pl <= d.packet_bytes
                    off += pl
                assert off == b.nbytes
                assert all(pl == d.packet_bytes for _, pl in b.packets[:-1])
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert covered == count


# ---- collectives' buffers -------------------------------------------------------------------------------------

def test_normalize_collective():
    assert normalize_collective("All-Reduce") == "allreduce"
    assert normalize_collective("rs") == "reduce_scatter"
    assert normalize_collective("all_to_all") == "alltoall"
    assert normalize_collective("bcast") == "broadcast"
    with pytest.raises(ValueError, match="unknown collective 'barrier2'"):
        normalize_collective("barrier2")


def test_buffer_counts():
    P, n = 4, 10
    assert buffer_counts("allreduce", n, P, 0) == (10, 10)
    assert buffer_counts("reduce_scatter", n, P, 0) == (40, 10)
    assert buffer_counts("allgather", n, P, 0) == (10, 40)
    assert buffer_counts("alltoall", n, P, 0) == (40, 40)
    assert buffer_counts("broadcast", n, P, 2, root=2) == (10, 10)
    assert buffer_counts("broadcast", n, P, 1, root=2) == (0, 10)
    assert buffer_counts("reduce", n, P, 1, root=2) == (10, 0)
    with pytest.raises(ValueError, match="needs a root"):
        buffer_counts("reduce", n, P, 1)
    with pytest.raises(ValueError, match="root 4 out of range"):
        buffer_counts("reduce", n, P, 1, root=4)
    with pytest.raises(ValueError, match="rank 4 out of range"):
        buffer_counts("allreduce", n, P, 4)


def test_segment_maps():
    P = 4
    assert segments_for("alltoall", P) == 4 and segments_for("allreduce", P) == 1
    assert [send_segment("reduce_scatter", 1, P, s) for s in range(P)] == [0, 1, 2, 3]
    assert [recv_segment("reduce_scatter", 1, P, s) for s in range(P)] == [None, 0, None, None]
    assert [send_segment("allgather", 2, P, s) for s in range(P)] == [None, None, 0, None]
    assert [recv_segment("allgather", 2, P, s) for s in range(P)] == [0, 1, 2, 3]
    assert send_segment("broadcast", 1, P, 0, root=0) is None and recv_segment("reduce", 1, P, 0, root=0) is None


@pytest.mark.parametrize("coll", COLLECTIVES)
@pytest.mark.parametrize("count", [1, 37, 300])
def test_block_ranges_tile_the_buffers(coll, count):
    """Over all chunks and blocks, the LOADable ranges tile each rank's send buffer exactly and the STOREable
    ranges its receive buffer (broadcast / reduce: only where the rank has one)."""
    P, root = 3, 1
    segs = segments_for(coll, P)
    d = Decomposition(count, 4, 2 * segs, segs, chunk_bytes=128 * segs)
    for r in range(P):
        ns, nr = buffer_counts(coll, count, P, r, root)
        send_cov, recv_cov = [0] * ns, [0] * nr
        for c in d.chunks():
            for b in range(d.n_blocks):
                s, rv = block_buffer_ranges(coll, r, P, d, c, b, root)
                for rng, cov in ((s, send_cov), (rv, recv_cov)):
                    if rng is not None:
                        for i in range(*rng):
                            cov[i] += 1
        assert send_cov == [1] * ns and recv_cov == [1] * nr


def test_alltoall_block_ranges():
    d = Decomposition(5, 4, 3, 3, chunk_bytes=192)
    # Rank 1: block 2 of the chunk is input segment 2 (data for rank 2) and output segment 2 (data from 2).
    assert block_buffer_ranges("alltoall", 1, 3, d, 0, 2) == ((10, 15), (10, 15))
    with pytest.raises(ValueError, match="decomposition has 3 segments but allreduce"):
        block_buffer_ranges("allreduce", 1, 3, d, 0, 2)
    with pytest.raises(ValueError, match="block 3 out of range"):
        block_buffer_ranges("alltoall", 1, 3, d, 0, 3)
