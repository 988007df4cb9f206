"""torch.profiler (Kineto) traces as the iteration model's workload (sim/perf/trace.py)."""
import json

import pytest

from syncfabric.sim.perf.system import SystemParams, endpoint
from syncfabric.sim.perf.trace import TraceError, load_kineto, trace_workload
from syncfabric.sim.perf.training import simulate


def _x(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path, events):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "M", "name": "process_name"}] + events}))
    return p


def _two_steps():
    ev = []
    for k, t0 in enumerate((0, 1000)):
        ev += [
            _x(f"ProfilerStep#{k + 1}", t0, 1000, cat="user_annotation"),
            _x("aten::linear", t0 + 10, 100),               # top level, with a nested operator
            _x("aten::addmm", t0 + 20, 50),
            _x("autograd::engine::evaluate_function: AddmmBackward0", t0 + 200, 300),
            _x("c10d::allreduce_", t0 + 520, 30),           # communication: not compute, nor its children
            _x("aten::copy_", t0 + 525, 10),
            _x("gloo:all_reduce", t0 + 530, 400, cat="user_annotation", tid=2,
               **{"Input Dims": [[2762]], "Input type": ["float"]}),
            _x("aten::mul", t0 + 600, 100, tid=3),          # another thread, overlapping nothing
        ]
    ev.append(_x("syncfabric:broadcast#int32x5", 20, 5, cat="user_annotation"))    # in step 1 only
    return ev


def test_a_trace_gives_compute_communication_and_collectives_per_step(tmp_path):
    s = load_kineto(_trace(tmp_path, _two_steps()))
    assert s.steps == 2
    assert s.step_s == pytest.approx(1000e-6)
    assert s.compute_s == pytest.approx(500e-6)         # 100 + 300 + 100 (the nested and c10d parts left out)
    assert s.comm_s == pytest.approx((415 + 410) / 2 * 1e-6)    # the union of the communication spans per step
    ops = [(c.op, c.elements, c.element_bytes) for c in s.collectives]
    assert ops == [("broadcast", 5, 4), ("allreduce", 2762, 4)]
    assert s.allreduce_bytes == 2762 * 4


def test_a_trace_replays_on_the_model_with_its_compute(tmp_path):
    s = load_kineto(_trace(tmp_path, _two_steps()))
    wl, compute = trace_workload(s)
    assert [l.allreduce_bytes for l in wl.layers] == [11048] and compute == s.compute_s
    r = simulate(wl, "ring:4", endpoint("ACE"), SystemParams(), compute_s=compute)
    assert r.compute == pytest.approx(500e-6) and r.time >= r.compute and r.collectives == 1


def test_a_trace_without_steps_is_one_step_and_record_param_comms_counts(tmp_path):
    ev = [_x("aten::mm", 0, 50), _x("record_param_comms", 60, 20, **{"Collective name": "all_reduce",
                                                                    "In msg nelems": 1000, "dtype": "Half"}),
          _x("aten::mm", 100, 50)]
    s = load_kineto(_trace(tmp_path, ev))
    assert s.steps == 1 and s.step_s == pytest.approx(150e-6) and s.compute_s == pytest.approx(100e-6)
    assert [(c.op, c.nbytes) for c in s.collectives] == [("allreduce", 2000)]


def test_bad_traces_are_refused_with_the_reason(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("not json")
    with pytest.raises(TraceError, match="not a readable JSON trace"):
        load_kineto(p)
    p.write_text(json.dumps({"something": 1}))
    with pytest.raises(TraceError, match="no traceEvents"):
        load_kineto(p)
    with pytest.raises(TraceError, match="no all-reduce to model"):
        trace_workload(load_kineto(_trace(tmp_path, [_x("aten::mm", 0, 50)])))


def test_a_chakra_execution_trace_in_its_json_form(tmp_path):
    """Node messages of Chakra's et_def.proto in protobuf's JSON mapping (camelCase, int64 as strings, enums by
    name or number)."""
    from syncfabric.sim.perf.trace import load_trace

    nodes = [
        {"id": "1", "name": "fwd", "type": "COMP_NODE", "startTimeMicros": "0", "durationMicros": "300"},
        {"id": "2", "name": "bwd", "type": 4, "startTimeMicros": "300", "durationMicros": "500", "ctrlDeps": ["1"]},
        {"id": "3", "name": "All-Reduce", "type": "COMM_COLL_NODE", "startTimeMicros": "800",
         "durationMicros": "150", "attr": [{"name": "comm_type", "int64Val": "0"},
                                           {"name": "comm_size", "int64Val": "1048576"}]},
        {"id": "4", "name": "a2a", "type": 7, "start_time_micros": 950, "duration_micros": 50,
         "attr": [{"name": "comm_type", "int64_val": "ALL_TO_ALL"}, {"name": "comm_size", "int64_val": 4096}]},
    ]
    p = tmp_path / "et.json"
    p.write_text(json.dumps({"globalMetadata": {"version": "0.0.4"}, "nodes": nodes}))
    s = load_trace(p)
    assert (s.steps, s.step_s, s.compute_s, s.comm_s) == (1, pytest.approx(1000e-6), pytest.approx(800e-6),
                                                          pytest.approx(200e-6))
    assert [(c.op, c.nbytes) for c in s.collectives] == [("allreduce", 1 << 20), ("alltoall", 4096)]
    wl, compute = trace_workload(s)
    assert wl.layers[0].allreduce_bytes == 1 << 20 and wl.layers[0].alltoall_bytes == 2048     # forward, backward
    r = simulate(wl, "ring:4", endpoint("ACE"), SystemParams(), compute_s=compute)
    assert r.compute == pytest.approx(800e-6) and r.collectives == 3
    nodes[2]["attr"][0]["int64Val"] = "4"           # SCATTER: not a collective the model runs
    p.write_text(json.dumps(nodes))
    with pytest.raises(TraceError, match="collective type 4 is not one the model runs"):
        load_trace(p)
    p.write_text(json.dumps({"neither": 1}))
    with pytest.raises(TraceError, match="neither a torch.profiler trace"):
        load_trace(p)
