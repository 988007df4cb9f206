"""PyTorch profiler (Kineto) traces as the iteration model's workload.

``torch.profiler`` writes a Chrome trace (``prof.export_chrome_trace(path)``): ``traceEvents`` with complete
events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds) of categories ``cpu_op`` (ATen operators, autograd
functions), ``kernel`` (GPU kernels) and ``user_annotation`` (``ProfilerStep#N``, and the communication
backends' own: ``gloo:all_reduce``, ``nccl:all_reduce``, ... with ``Input Dims`` and ``Input type`` in
``args``; the ``syncfabric`` backend's carry the element type and count in their name,
``syncfabric:all_reduce#fp32x2762``; newer NCCL traces also have ``record_param_comms`` events with
``Collective name``, ``In msg nelems`` and ``dtype``).

:func:`load_kineto` reads one iteration out of it:

* the **steps**: the ``ProfilerStep#N`` annotations (``schedule`` in ``torch.profiler``), or the whole trace as
  one step when there are none; figures are the mean over the steps;
* **compute** per step: the union of the top-level operator intervals (``cpu_op`` not inside another on its
  thread, and GPU ``kernel`` events) inside the step, leaving out the communication operators (``c10d::``,
  the backends' annotations) and everything inside them;
* the **collectives** per step (operation, elements, element bytes) and the time the communication
  annotations spanned (its measured communication, which includes waiting for the other ranks).

:func:`trace_workload` turns that into a :class:`~.workload.Workload` for :func:`~.training.simulate`: one
``custom`` layer per gradient all-reduce, with the compute split among them in proportion to their sizes (the
trace says how long compute took, not which layer a gradient bucket belongs to), and the measured compute per
iteration as ``compute_s``. ``syncfabric perf iteration --trace FILE`` replays it on a modelled system beside
the trace's own step time.
"""

import json
import re
from dataclasses import dataclass, field

from .workload import Layer, Workload, WorkloadError

__all__ = ["TraceSummary", "TraceCollective", "load_kineto", "load_chakra", "load_trace", "trace_workload",
           "TraceError"]

#: Element bytes by the trace's type names (``Input type`` of an annotation, ``dtype`` of record_param_comms,
#: the syncfabric backend's names).
TYPE_BYTES = {"float": 4, "double": 8, "c10::half": 2, "half": 2, "c10::bfloat16": 2, "bfloat16": 2, "int": 4,
              "long int": 8, "long": 8, "int64": 8, "float32": 4, "float16": 2, "float64": 8, "int32": 4,
              "fp32": 4, "fp16": 2, "bf16": 2, "unsigned char": 1, "bool": 1, "uint8": 1, "signed char": 1}
#: Collective names in the traces -> the model's.
COLLECTIVES = {"all_reduce": "allreduce", "allreduce": "allreduce", "broadcast": "broadcast",
               "all_gather": "allgather", "allgather": "allgather", "_allgather_base": "allgather",
               "all_gather_into_tensor": "allgather", "reduce_scatter": "reduce_scatter",
               "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
               "all_to_all": "alltoall", "alltoall": "alltoall", "alltoall_base": "alltoall",
               "all_to_all_single": "alltoall", "reduce": "reduce", "barrier": "barrier"}
_BACKEND_EVENT = re.compile(r"^(gloo|nccl|mpi|ucc|syncfabric):([a-z_]+)(?:#([a-z0-9]+)x(\d+))?$")


class TraceError(WorkloadError):
    """A trace file that is not a Kineto/Chrome trace, or has nothing to model."""


@dataclass(frozen=True)
class TraceCollective:
    op: str             # the model's name (allreduce, broadcast, ...)
    elements: int
    element_bytes: int

    @property
    def nbytes(self):
        return self.elements * self.element_bytes


@dataclass
class TraceSummary:
    """One iteration of a trace (means over its steps)."""

    source: str
    steps: int
    step_s: float
    compute_s: float
    comm_s: float
    collectives: list = field(default_factory=list)      # per step (the first step's list)

    @property
    def allreduce_bytes(self):
        return sum(c.nbytes for c in self.collectives if c.op == "allreduce")


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"{path}: not a readable JSON trace ({e})") from None


def _events(path, data=None):
    data = _read_json(path) if data is None else data
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list (expected a torch.profiler Chrome trace)")
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and \
                isinstance(e.get("dur"), (int, float)):
            out.append(e)
    if not out:
        raise TraceError(f"{path}: no complete (ph X) events")
    return out


def _collective(e):
    """The event's collective (a TraceCollective) or None; the second value: is it a communication event."""
    name = str(e.get("name", ""))
    args = e.get("args") or {}
    m = _BACKEND_EVENT.match(name)
    if m:
        op = COLLECTIVES.get(m.group(2))
        if m.group(3):                          # syncfabric:op#dtypexCOUNT
            return (TraceCollective(op, int(m.group(4)), TYPE_BYTES.get(m.group(3), 4)) if op else None), True
        dims = args.get("Input Dims") or [[]]
        types = args.get("Input type") or [""]
        n = 1
        for d in (dims[0] if dims and isinstance(dims[0], list) else []):
            n *= int(d)
        return (TraceCollective(op, n, TYPE_BYTES.get(str(types[0]), 4)) if op else None), True
    if name == "record_param_comms":
        op = COLLECTIVES.get(str(args.get("Collective name", "")))
        n = int(args.get("In msg nelems", 0) or 0)
        return (TraceCollective(op, n, TYPE_BYTES.get(str(args.get("dtype", "")).lower(), 4))
                if op and n else None), True
    return None, name.startswith("c10d::")


def _union(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def load_kineto(path, data=None):
    """The :class:`TraceSummary` of the Chrome trace at ``path`` (``data``: its JSON, already read)."""
    events = _events(path, data)
    steps = sorted(((e["ts"], e["ts"] + e["dur"]) for e in events
                    if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda w: w[0])
    if not steps:
        steps = [(min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events))]
    comm, ops = [], []
    for e in events:
        coll, is_comm = _collective(e)
        if is_comm:
            comm.append((e, coll))
        elif e.get("cat") in ("cpu_op", "kernel") and not str(e.get("name", "")).startswith("ProfilerStep#"):
            ops.append(e)
    comm_spans = [(e["ts"], e["ts"] + e["dur"], e.get("tid")) for e, _ in comm]
    # top-level operators per thread, not inside a communication operator on the same thread
    by_tid = {}
    for e in ops:
        by_tid.setdefault((e.get("pid"), e.get("tid"), e.get("cat")), []).append(e)
    top = []
    for (_, tid, cat), evs in by_tid.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = None
        for e in evs:
            s, f = e["ts"], e["ts"] + e["dur"]
            if end is not None and f <= end:
                continue                        # nested in the previous top-level operator
            if any(cs <= s and f <= ce and ct == tid for cs, ce, ct in comm_spans):
                continue
            top.append((s, f))
            end = f
    n = len(steps)
    compute = sum(_union([(max(s, a), min(f, b)) for s, f in top if f > a and s < b]) for a, b in steps) / n
    comm_s = sum(_union([(max(s, a), min(f, b)) for s, f, _ in comm_spans if f > a and s < b])
                 for a, b in steps) / n
    first = steps[0]
    # a collective seen by two events (the backend's annotation and record_param_comms) counts once
    seen, unique = set(), []
    for e, c in sorted(comm, key=lambda ec: ec[0]["ts"]):
        if c is None or not first[0] <= e["ts"] < first[1]:
            continue
        key = (c, round(e["ts"]))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    colls = unique
    step_s = sum(b - a for a, b in steps) / n
    if step_s <= 0:
        raise TraceError(f"{path}: the trace spans no time")
    return TraceSummary(str(path), n, step_s * 1e-6, compute * 1e-6, comm_s * 1e-6, colls)


#: Chakra's ``NodeType`` and ``CollectiveCommType`` (schema/protobuf/et_def.proto), by number and name.
_CHAKRA_NODE = {4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE"}
_CHAKRA_COLL = {0: "allreduce", 1: "reduce", 2: "allgather", 5: "broadcast", 6: "alltoall", 7: "reduce_scatter",
                8: "reduce_scatter", 9: "barrier"}
_CHAKRA_COLL_NAMES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
                      "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}


def _field(node, name):
    """A Chakra node field by its proto name or its JSON (camelCase) name."""
    if name in node:
        return node[name]
    parts = name.split("_")
    return node.get(parts[0] + "".join(p.title() for p in parts[1:]))


def _attr(node, name):
    for a in node.get("attr") or []:
        if isinstance(a, dict) and a.get("name") == name:
            for k, v in a.items():
                if k not in ("name", "doc_string", "docString"):
                    return v
    return None


def load_chakra(path, data=None):
    """The :class:`TraceSummary` of a Chakra execution trace in its JSON form (the ``Node`` messages of
    ``et_def.proto`` in protobuf's JSON mapping, as Chakra's jsonizer writes them: a list of nodes, or an
    object with ``nodes``): one iteration of one rank. Compute is the sum of the ``COMP_NODE`` durations (one
    compute stream, as the model has), communication the ``COMM_COLL_NODE``s with ``comm_type`` and
    ``comm_size`` (bytes); the step is the nodes' span when they carry start times, else compute plus
    communication."""
    data = _read_json(path) if data is None else data
    nodes = data.get("nodes") if isinstance(data, dict) else data
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise TraceError(f"{path}: no list of Chakra nodes")
    compute = comm = 0.0
    spans, colls = [], []
    for n in nodes:
        kind = _field(n, "type")
        kind = _CHAKRA_NODE.get(kind, kind) if isinstance(kind, int) else kind
        dur = float(_field(n, "duration_micros") or 0)
        start = _field(n, "start_time_micros")
        if start is not None:
            spans.append((float(start), float(start) + dur))
        if kind == "COMP_NODE":
            compute += dur
        elif kind == "COMM_COLL_NODE":
            comm += dur
            ctype = _attr(n, "comm_type")
            ctype = _CHAKRA_COLL_NAMES.get(ctype, ctype) if isinstance(ctype, str) and not ctype.isdigit() \
                else int(ctype or 0)
            op = _CHAKRA_COLL.get(ctype)
            size = int(_attr(n, "comm_size") or 0)
            if op is None:
                raise TraceError(f"{path}: node {_field(n, 'id')}: collective type {ctype} is not one the model "
                                 f"runs ({', '.join(sorted(set(_CHAKRA_COLL.values())))})")
            colls.append(TraceCollective(op, size, 1))
    step = (max(e for _, e in spans) - min(s for s, _ in spans)) if spans else compute + comm
    if step <= 0:
        raise TraceError(f"{path}: the trace's nodes take no time")
    return TraceSummary(str(path), 1, step * 1e-6, compute * 1e-6, comm * 1e-6, colls)


def load_trace(path):
    """A Kineto (``traceEvents``) or Chakra (nodes) trace, told apart by its content."""
    data = _read_json(path)
    if isinstance(data, dict) and "traceEvents" in data:
        return load_kineto(path, data)
    if (isinstance(data, dict) and "nodes" in data) or (isinstance(data, list) and data and
                                                        isinstance(data[0], dict) and "type" in data[0]):
        return load_chakra(path, data)
    raise TraceError(f"{path}: neither a torch.profiler trace (traceEvents) nor a Chakra execution trace (nodes)")


def trace_workload(summary, name=None):
    """``(workload, compute_s)`` for :func:`~.training.simulate`: one ``custom`` layer per all-reduce of the
    step (its elements as parameters, the compute split in proportion to them); the step's all-to-all bytes
    become the first layer's model-parallel traffic, half in its forward and half in its backward
    all-to-all (the model's embedding layers)."""
    ars = [c for c in summary.collectives if c.op == "allreduce" and c.elements]
    if not ars:
        raise TraceError(f"{summary.source}: the trace's first step has no all-reduce to model (the iteration "
                         f"model replays gradient all-reduces; collectives seen: "
                         f"{sorted({c.op for c in summary.collectives}) or 'none'})")
    total = sum(c.elements for c in ars)
    a2a = sum(c.nbytes for c in summary.collectives if c.op == "alltoall")
    layers = []
    for i, c in enumerate(ars):
        share = c.elements / total
        layers.append(Layer(f"bucket{i}", "custom", fwd_flops=share, fwd_bytes=0.0, wg_flops=share, wg_bytes=0.0,
                            ig_flops=share, ig_bytes=0.0, params=c.elements, allreduce_bytes=c.nbytes,
                            alltoall_bytes=a2a // 2 if i == 0 else 0))
    wl = Workload(name or f"trace:{summary.source}", 1, ars[0].element_bytes, tuple(layers))
    return wl, summary.compute_s
