"""Decomposition of a collective's payload into chunks, blocks (messages) and packets (ACE Table III).

Granularity, outermost first::

    payload (count elements per rank, NCCL semantics)
      -> chunk   (chunk_bytes of SRAM working set; the pipelining unit; chunks are independent)
        -> block (one message; n_blocks per chunk, chosen by the algorithm: a multiple of the group size)
          -> packet (packet_bytes, default 256 B; the last packet of a block may be shorter)
            -> beat (beat_bytes, default 64 B: SRAM / ALU / AXI data width)

Segmented collectives (reduce-scatter, all-gather, all-to-all) have ``P`` segments of ``count`` elements in
one of their buffers (rank-major). A chunk then covers the same element range ``[lo, hi)`` of every segment,
and its blocks are numbered ``block = segment * m + sub`` with ``m = n_blocks // segments`` sub-blocks per
segment. The chunk's SRAM working set is ``segments`` times the per-segment range, so the per-segment chunk
size is ``chunk_bytes // segments`` rounded down to whole beats.

Block sizes: the per-segment range of a chunk is cut into whole beats (the last one possibly partial, the
tail of the payload); the beats are dealt out as evenly as possible, the first ``n_beats % m`` sub-blocks
getting one beat more. So every block boundary is beat aligned, blocks differ in size by at most one beat,
and when a chunk has fewer beats than sub-blocks the trailing sub-blocks are empty (length 0). Empty blocks
are still messages (header only) so that one program text serves every chunk.

A barrier is the all-reduce program run on zero bytes: it has no buffers, and its decomposition
(``Decomposition(..., barrier=True)``) is exactly one chunk whose blocks are all empty, whatever ``count`` is
(the engine ignores the count of a barrier). Its messages are header-only, so it synchronises the ranks
without moving data.

This module is pure Python; it knows nothing of algorithms, only of collectives' buffer layouts.
"""

from dataclasses import dataclass

from .types import Collective

__all__ = [
    "COLLECTIVES", "SEGMENTED", "ROOTED",
    "normalize_collective", "segments_for", "buffer_counts", "send_segment", "recv_segment",
    "Block", "Chunk", "Decomposition", "decomposition_for", "block_buffer_ranges",
]

#: Canonical collective names (the strings used in programs and by the dispatcher), in opcode order: the
#: :class:`~.types.Collective` members' ``golden_name``.
COLLECTIVES = tuple(c.golden_name for c in Collective)
#: Collectives whose chunk working set has one segment per rank.
SEGMENTED = frozenset(c.golden_name for c in Collective if c.segmented)
#: Collectives with a root rank.
ROOTED = frozenset(c.golden_name for c in Collective if c.rooted)
#: Collectives that combine contributions in the ALUs.
REDUCING = frozenset(c.golden_name for c in Collective if c.reduces)

_ALIASES = {
    "allreduce": "allreduce", "all_reduce": "allreduce", "all-reduce": "allreduce", "ar": "allreduce",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter", "reduce-scatter": "reduce_scatter",
    "rs": "reduce_scatter",
    "allgather": "allgather", "all_gather": "allgather", "all-gather": "allgather", "ag": "allgather",
    "alltoall": "alltoall", "all_to_all": "alltoall", "all-to-all": "alltoall", "a2a": "alltoall",
    "broadcast": "broadcast", "bcast": "broadcast",
    "reduce": "reduce",
    "barrier": "barrier",
}


def normalize_collective(name):
    """Canonical name of collective ``name`` (accepts e.g. ``"all-reduce"``, ``"reduce_scatter"``, ``"rs"``)."""
    try:
        return _ALIASES[str(name).strip().lower()]
    except KeyError:
        raise ValueError(f"unknown collective {name!r}; expected one of {', '.join(COLLECTIVES)}") from None


def segments_for(collective, nranks):
    """Number of segments in a chunk's working set: ``nranks`` for segmented collectives, else 1."""
    return nranks if normalize_collective(collective) in SEGMENTED else 1


def _check_rank(rank, nranks, what="rank"):
    if not 0 <= rank < nranks:
        raise ValueError(f"{what} {rank} out of range for {nranks} ranks")


def _root_of(collective, nranks, root):
    if collective in ROOTED:
        if root is None:
            raise ValueError(f"{collective} needs a root rank")
        _check_rank(root, nranks, "root")
    return root


def buffer_counts(collective, count, nranks, rank, root=None):
    """Element counts ``(send, recv)`` of ``rank``'s buffers; 0 means the rank has no such buffer.

    ``count`` follows NCCL: elements per rank for all-reduce / broadcast / reduce, the output count of
    reduce-scatter (input ``nranks * count``), the input count of all-gather (output ``nranks * count``)
    and the count per peer of all-to-all (both buffers ``nranks * count``). A barrier has no buffers:
    ``(0, 0)`` whatever ``count``.
    """
    c = normalize_collective(collective)
    _check_rank(rank, nranks)
    root = _root_of(c, nranks, root)
    if c == "allreduce":
        return count, count
    if c == "reduce_scatter":
        return nranks * count, count
    if c == "allgather":
        return count, nranks * count
    if c == "alltoall":
        return nranks * count, nranks * count
    if c == "barrier":
        return 0, 0
    if c == "broadcast":
        return (count if rank == root else 0), count
    return count, (count if rank == root else 0)  # reduce


def send_segment(collective, rank, nranks, segment, root=None):
    """Index of the send-buffer segment holding chunk-segment ``segment`` at ``rank``, or None.

    None means ``rank`` has no input for that segment (a LOAD of its blocks is illegal).
    """
    c = normalize_collective(collective)
    root = _root_of(c, nranks, root)
    if c == "allgather":
        return 0 if segment == rank else None
    if c == "broadcast":
        return 0 if rank == root else None
    return segment  # allreduce/reduce/barrier: segment 0; reduce_scatter/alltoall: input segment s


def recv_segment(collective, rank, nranks, segment, root=None):
    """Index of the receive-buffer segment written from chunk-segment ``segment`` at ``rank``, or None.

    None means ``rank`` has no output for that segment (a STORE of its blocks is illegal).
    """
    c = normalize_collective(collective)
    root = _root_of(c, nranks, root)
    if c == "reduce_scatter":
        return 0 if segment == rank else None
    if c == "reduce":
        return 0 if rank == root else None
    return segment  # allgather/alltoall: segment s of the output comes from rank s; others: segment 0


@dataclass(frozen=True)
class Block:
    """One block (message) of a chunk.

    ``lo``/``hi`` are element offsets inside the segment (``0 <= lo <= hi <= count``); ``packets`` are
    ``(byte offset within the block, length)`` pairs, empty for a zero-length block.
    """

    index: int
    segment: int
    sub: int
    lo: int
    hi: int
    nbytes: int
    packets: tuple

    @property
    def nelems(self):
        """Number of elements in the block."""
        return self.hi - self.lo


@dataclass(frozen=True)
class Chunk:
    """One chunk: the per-segment element range ``[lo, hi)`` and its blocks (indexed by block number)."""

    index: int
    lo: int
    hi: int
    blocks: tuple

    @property
    def nbytes(self):
        """Bytes of the chunk's whole working set (all segments)."""
        return sum(b.nbytes for b in self.blocks)


def _positive_int(name, value, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {value}")


@dataclass(frozen=True)
class Decomposition:
    """How ``count`` elements per segment of ``elem_bytes`` each split into chunks, blocks and packets.

    Parameters are validated on construction (``ValueError`` with the reason). ``n_blocks`` is the number of
    blocks per chunk (from the program), ``segments`` the number of segments (see :func:`segments_for`).

    ``barrier=True`` is a barrier's decomposition: exactly one chunk (``lo == hi == 0``) whose ``n_blocks``
    blocks are all empty, whatever ``count`` is (which may then be 0); :attr:`slot_bytes` is 0. The other
    parameters are validated as usual. Use :func:`decomposition_for` to get the right one for a collective.
    """

    count: int
    elem_bytes: int
    n_blocks: int
    segments: int = 1
    chunk_bytes: int = 65536
    packet_bytes: int = 256
    beat_bytes: int = 64
    barrier: bool = False

    def __post_init__(self):
        if not isinstance(self.barrier, bool):
            raise ValueError(f"barrier must be a bool, got {self.barrier!r}")
        _positive_int("count", self.count, allow_zero=self.barrier)
        for name in ("elem_bytes", "n_blocks", "segments", "chunk_bytes", "packet_bytes", "beat_bytes"):
            _positive_int(name, getattr(self, name))
        if self.beat_bytes % self.elem_bytes:
            raise ValueError(f"beat_bytes ({self.beat_bytes}) must be a multiple of the element size "
                             f"({self.elem_bytes})")
        if self.packet_bytes % self.beat_bytes:
            raise ValueError(f"packet_bytes ({self.packet_bytes}) must be a multiple of beat_bytes "
                             f"({self.beat_bytes})")
        if self.chunk_bytes % self.beat_bytes:
            raise ValueError(f"chunk_bytes ({self.chunk_bytes}) must be a multiple of beat_bytes "
                             f"({self.beat_bytes})")
        if self.n_blocks % self.segments:
            raise ValueError(f"n_blocks ({self.n_blocks}) must be a multiple of the number of segments "
                             f"({self.segments})")
        if self.segment_chunk_bytes == 0:
            raise ValueError(f"chunk_bytes ({self.chunk_bytes}) too small for {self.segments} segments: "
                             f"need at least {self.segments * self.beat_bytes} (one beat per segment)")

    @property
    def sub_blocks(self):
        """Blocks per segment (``m``)."""
        return self.n_blocks // self.segments

    @property
    def beat_elems(self):
        """Elements per beat."""
        return self.beat_bytes // self.elem_bytes

    @property
    def segment_chunk_bytes(self):
        """Bytes of one segment's share of a full chunk: ``chunk_bytes // segments`` in whole beats."""
        return (self.chunk_bytes // self.segments) // self.beat_bytes * self.beat_bytes

    @property
    def segment_chunk_elems(self):
        """Elements of one segment's share of a full chunk."""
        return self.segment_chunk_bytes // self.elem_bytes

    @property
    def n_chunks(self):
        """Number of chunks (the last one may be partial); always 1 for a barrier."""
        if self.barrier:
            return 1
        return -(-self.count // self.segment_chunk_elems)

    @property
    def slot_bytes(self):
        """Size of the largest block of any chunk: the SRAM slot size a chunk context needs (0 for a barrier)."""
        if self.barrier:
            return 0
        beats = -(-self.segment_chunk_bytes // self.beat_bytes)
        return -(-beats // self.sub_blocks) * self.beat_bytes

    def chunk(self, index):
        """The :class:`Chunk` number ``index``."""
        if not 0 <= index < self.n_chunks:
            raise IndexError(f"chunk {index} out of range (payload has {self.n_chunks} chunks)")
        if self.barrier:
            m = self.sub_blocks
            return Chunk(0, 0, 0, tuple(Block(b, b // m, b % m, 0, 0, 0, ()) for b in range(self.n_blocks)))
        lo = index * self.segment_chunk_elems
        hi = min(lo + self.segment_chunk_elems, self.count)
        nbytes = (hi - lo) * self.elem_bytes
        n_beats = -(-nbytes // self.beat_bytes)
        m = self.sub_blocks
        base, extra = divmod(n_beats, m)
        subs = []
        for j in range(m):
            first = j * base + min(j, extra)
            beats = base + (1 if j < extra else 0)
            b_lo = min(lo + first * self.beat_elems, hi)
            b_hi = min(lo + (first + beats) * self.beat_elems, hi)
            subs.append((b_lo, b_hi))
        blocks = []
        for s in range(self.segments):
            for j, (b_lo, b_hi) in enumerate(subs):
                nb = (b_hi - b_lo) * self.elem_bytes
                packets = tuple((off, min(self.packet_bytes, nb - off)) for off in range(0, nb, self.packet_bytes))
                blocks.append(Block(s * m + j, s, j, b_lo, b_hi, nb, packets))
        return Chunk(index, lo, hi, tuple(blocks))

    def chunks(self):
        """Iterate over all chunks in order."""
        for i in range(self.n_chunks):
            yield self.chunk(i)


def decomposition_for(collective, nranks, count, elem_bytes, n_blocks, chunk_bytes=65536, packet_bytes=256,
                      beat_bytes=64):
    """The :class:`Decomposition` of ``collective`` on ``nranks`` ranks: :func:`segments_for` segments, and
    the one-chunk, all-empty decomposition (``barrier=True``) for a barrier."""
    c = normalize_collective(collective)
    return Decomposition(count, elem_bytes, n_blocks, segments_for(c, nranks), chunk_bytes, packet_bytes,
                         beat_bytes, barrier=c == "barrier")


def block_buffer_ranges(collective, rank, nranks, decomposition, chunk, block, root=None):
    """Element ranges ``(send, recv)`` of ``block`` of ``chunk`` in ``rank``'s send and receive buffers.

    Each is ``(lo, hi)`` (element offsets in the whole buffer) or None when the rank has no such data (LOAD
    resp. STORE of that block is illegal for this rank). ``chunk`` is a :class:`Chunk` or a chunk index.
    A barrier has no buffers: every block of it is the empty range ``(0, 0)`` of both (LOAD and STORE move
    nothing). A barrier decomposition serves only the barrier.
    """
    d = decomposition
    c = normalize_collective(collective)
    if d.segments != segments_for(c, nranks):
        raise ValueError(f"decomposition has {d.segments} segments but {c} "
                         f"on {nranks} ranks needs {segments_for(c, nranks)}")
    if d.barrier and c != "barrier":
        raise ValueError(f"a barrier decomposition (every block empty) cannot map the buffers of {c}")
    if not isinstance(chunk, Chunk):
        chunk = d.chunk(chunk)
    if not 0 <= block < d.n_blocks:
        raise ValueError(f"block {block} out of range for {d.n_blocks} blocks per chunk")
    if c == "barrier":
        return (0, 0), (0, 0)
    b = chunk.blocks[block]
    ss = send_segment(collective, rank, nranks, b.segment, root)
    rs = recv_segment(collective, rank, nranks, b.segment, root)
    send = None if ss is None else (ss * d.count + b.lo, ss * d.count + b.hi)
    recv = None if rs is None else (rs * d.count + b.lo, rs * d.count + b.hi)
    return send, recv
