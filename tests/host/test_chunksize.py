"""The driver's chunk choice (host/chunksize.py): the candidates it ranks, the floor on message size, the model
ranking, and how `syncfabric run` applies and reports it."""

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host import run as run_mod
from syncfabric.host.chunksize import MIN_MESSAGE_BEATS, choose_chunk_bytes, chunk_candidates
from syncfabric.host.cli import main
from syncfabric.host.job import engine_chunk_bytes
from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.topology import parse
from syncfabric.sim.perf.calibrate import predict_cycles

PAPER, SMALL = AceConfig.profile("paper"), AceConfig.profile("small")


def _head(collective, topology, algorithm=None):
    return generate(collective, algorithm, parse(topology))[0]


def test_candidates_halve_the_largest_chunk_down_to_the_message_floor():
    head = _head("allreduce", "torus:4x2x2")            # 16 blocks: 64 KiB chunks make 64-beat messages
    assert chunk_candidates(PAPER, head) == [65536, 32768, 16384]
    assert chunk_candidates(PAPER, head, min_message_beats=8) == [65536, 32768, 16384, 8192]
    assert chunk_candidates(PAPER, head, min_message_beats=10 ** 6) == [65536]
    # the small engine's 1 KiB chunks already make 16-beat messages on ring:4: nothing smaller is tried
    assert chunk_candidates(SMALL, _head("allreduce", "ring:4")) == [1024]
    for coll, topo in (("allreduce", "ring:8"), ("alltoall", "torus:4x2x2"), ("reduce_scatter", "bidir-ring:4"),
                       ("broadcast", "torus:2x2x2")):
        head = _head(coll, topo)
        cands = chunk_candidates(PAPER, head)
        assert cands[0] == engine_chunk_bytes(PAPER, head.n_blocks, segments=head.segments, n_slots=head.n_slots)
        assert all(c % PAPER.beat_bytes == 0 for c in cands)
        assert all(-(-c // PAPER.beat_bytes // head.n_blocks) >= MIN_MESSAGE_BEATS for c in cands[1:])


def test_the_choice_is_the_models_fastest_candidate():
    head = _head("allreduce", "torus:4x2x2")
    c = choose_chunk_bytes(PAPER, head, "allreduce", "torus:4x2x2", 4 << 20)
    times = dict(c.predicted)
    assert set(times) == {65536, 32768, 16384}
    assert times[16384] == predict_cycles(PAPER, "allreduce", "torus:4x2x2", 4 << 20, chunk_bytes=16384)
    assert c.chunk_bytes == min(times, key=times.get) == 16384      # measured: 0.898 against 0.842 at 64 KiB
    assert c.as_dict()["model_cycles"] == {str(k): round(v) for k, v in times.items()}
    # the links and the resources in use reach the model: one FSM makes the small chunks' steps costly
    one = choose_chunk_bytes(PAPER, head, "allreduce", "torus:4x2x2", 4 << 20, fsms=1, latency=10, rate=1.0)
    assert dict(one.predicted) != times


def test_a_tie_goes_to_the_larger_chunk(monkeypatch):
    import syncfabric.sim.perf.calibrate as cal

    monkeypatch.setattr(cal, "predict_cycles", lambda *a, **k: 1000.0)
    head = _head("allreduce", "torus:4x2x2")
    assert choose_chunk_bytes(PAPER, head, "allreduce", "torus:4x2x2", 1 << 20).chunk_bytes == 65536


def _capture(monkeypatch):
    """run_collective up to the engine run: what spec and config it would simulate."""
    seen = {}

    def fake(spec, cfg, *a):
        seen.update(spec=dict(spec), cfg=cfg)
        raise SystemExit(0)

    monkeypatch.setattr(run_mod, "_run_engine", fake)
    return seen


@pytest.mark.parametrize("given, expect", [(None, 16384), ("auto", 16384), ("max", 65536), (32768, 32768)])
def test_run_applies_the_choice_before_sizing_the_engine(monkeypatch, given, expect):
    seen = _capture(monkeypatch)
    with pytest.raises(SystemExit):
        run_mod.run_collective("allreduce", "torus:4x2x2", 4 << 20, config="paper", chunk_bytes=given,
                               progress=False)
    assert seen["spec"]["chunk_bytes"] == expect


def test_run_refuses_a_chunk_that_is_neither_a_size_nor_a_rule():
    with pytest.raises(ValueError, match="expected a size or one of auto, max"):
        run_mod.run_collective(chunk_bytes="most", backend="golden")


def test_the_summary_says_how_the_chunk_was_chosen():
    r = {"collective": "allreduce", "topology": "ring:4", "algorithm": "ring", "npus": 4, "bytes": 4096,
         "dtype": "fp32", "op": "sum", "backend": "golden", "chunk_bytes": 16384, "chunks": 1, "messages": 4,
         "packets": 4, "bytes_sent_per_byte_read": 1.5, "mem_read_bytes": [1], "mem_write_bytes": [1],
         "mismatches": 0, "checked_against": "x", "wall_s": 0.1,
         "chunk_choice": {"rule": "auto", "chunk_bytes": 16384, "model_cycles": {"65536": 900, "16384": 800}}}
    text = run_mod.format_summary(r)
    assert "chunk 16384 B (the driver's choice; model cycles 65536 B 900, 16384 B 800)" in text
    r["chunk_choice"] = {"rule": "max", "chunk_bytes": 16384}
    assert "(the largest the engine runs the program with)" in run_mod.format_summary(r)


def test_cli_takes_auto_max_and_sizes(capsys):
    assert main(["run", "--backend", "golden", "--chunk-bytes", "max", "--bytes", "4K", "--quiet"]) == 0
    assert main(["run", "--backend", "golden", "--chunk-bytes", "16K", "--bytes", "4K", "--quiet"]) == 0
    with pytest.raises(SystemExit) as e:
        main(["run", "--backend", "golden", "--chunk-bytes", "most"])
    assert e.value.code == 2
    assert "not a size, auto or max: 'most'" in capsys.readouterr().err
