"""The driver's choice of chunk size for one collective.

An engine runs a program with chunks of at most :func:`~syncfabric.host.job.engine_chunk_bytes` (its chunk
buffer, its landing buffers' message limit). The largest chunk is not always the fastest: a collective of a few
dozen chunks spends a large share of its time filling and draining the pipeline of phases, which smaller
chunks shorten (torus:4x2x2, `paper` engines, 1 MiB per NPU: 64 KiB chunks 0.660 of the link bound, 16 KiB
0.806). Below a size, though, the messages get too short for the latency they cross: on that torus a
chunk's trip through the 500-cycle links is long against its traffic, and the FSMs, each holding one chunk
through every phase, are too few to cover it (the same collective at 4 MiB: 16 KiB chunks 0.898, 8 KiB 0.628;
`docs/results.md`).

:func:`choose_chunk_bytes` therefore ranks the chunk sizes from the engine's largest down by halves, as long as
the program's messages stay at least :data:`MIN_MESSAGE_BEATS` beats, with the performance model
(:func:`~syncfabric.sim.perf.calibrate.predict_cycles`, a few milliseconds each: pipeline fill and drain, the
FSMs holding their chunks, and each message's cost on a full-rate port, ``ACE_MESSAGE_CYCLES``), and takes the
fastest if the model puts it at least :data:`MIN_GAIN` ahead of the largest chunk (a tie or a smaller gain
keeps the largest). The model ranks the torus's 8 KiB chunks last, as the RTL did (within 4.7 %); the floor
stays: that one run is the only RTL measurement of messages under 16 beats, too little to trust the model's
ranking of them elsewhere.
"""

from dataclasses import dataclass

from .job import engine_chunk_bytes, slot_beats_for

__all__ = ["MIN_MESSAGE_BEATS", "MIN_GAIN", "ChunkChoice", "chunk_candidates", "choose_chunk_bytes"]

#: The shortest message (beats) a chosen chunk may give the program: 16 beats (1 KiB at the `paper` engine's
#: 64 B beat) ran at 0.93 of the slow links on torus:4x2x2, 8 beats at 0.64.
MIN_MESSAGE_BEATS = 16


def chunk_candidates(cfg, head, min_message_beats=MIN_MESSAGE_BEATS, largest=None):
    """Chunk sizes (bytes, largest first) the driver considers for ``head``'s program on an engine of ``cfg``:
    the largest the engine runs it with (or ``largest``, when other programs on the engine need less), then
    halves of it (whole beats) while its messages keep at least ``min_message_beats`` beats. Always at least
    the largest."""
    top = largest or engine_chunk_bytes(cfg, head.n_blocks, segments=head.segments, n_slots=head.n_slots)
    out = [top]
    beats = top // cfg.beat_bytes
    while beats % 2 == 0 and slot_beats_for(beats // 2, head.n_blocks, head.segments) >= min_message_beats:
        beats //= 2
        out.append(beats * cfg.beat_bytes)
    return out


#: How much faster (a fraction of the largest chunk's cycles) the model must predict a smaller chunk before the
#: driver takes it: gains below the spread of the model's errors between chunk sizes are not taken.
MIN_GAIN = 0.02


@dataclass(frozen=True)
class ChunkChoice:
    """The chosen chunk and what the model predicted for each candidate (``(chunk_bytes, cycles)``)."""

    chunk_bytes: int
    predicted: tuple

    def as_dict(self):
        return {"chunk_bytes": self.chunk_bytes,
                "model_cycles": {str(c): round(t) for c, t in self.predicted}}


def choose_chunk_bytes(cfg, head, collective, topology, nbytes, *, algorithm=None, latency=None, rate=None,
                       buffers=None, fsms=None, largest=None, min_message_beats=MIN_MESSAGE_BEATS,
                       min_gain=MIN_GAIN):
    """:class:`ChunkChoice` for one collective of ``nbytes`` per NPU on ``topology`` (a spec or a Topology) whose head
    program is ``head``, on engines of ``cfg`` with ``buffers`` chunk buffers and ``fsms`` FSMs in use (None:
    all) and links of ``latency``/``rate`` (None: the topology's); ``largest``: the largest chunk allowed
    (default the engine's for the program). A smaller chunk than the largest is taken only when the model
    predicts it at least ``min_gain`` faster."""
    from ..sim.perf.calibrate import predict_cycles

    predicted = []
    for c in chunk_candidates(cfg, head, min_message_beats, largest):
        t = predict_cycles(cfg, collective, topology, nbytes, latency=latency, rate=rate, buffers=buffers,
                           fsms=fsms, algorithm=algorithm, chunk_bytes=c)
        predicted.append((c, t))
    best, t = min(predicted, key=lambda ct: (ct[1], -ct[0]))
    if t > predicted[0][1] * (1 - min_gain):
        best = predicted[0][0]
    return ChunkChoice(best, tuple(predicted))
