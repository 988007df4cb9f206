"""Training workloads as layer tables: a YAML format, its loader, and the per-layer FLOPs, bytes and
communication the iteration model needs.

A workload file (``docs/perf.md`` has the full format)::

    name: resnet50
    batch: 32                 # samples per NPU (weak scaling)
    dtype_bytes: 2            # FP16
    seq: 50                   # optional: tokens per sample for lstm layers
    layers:
      - {name: conv1, type: conv, cin: 3, cout: 64, k: 7, stride: 2, hin: 224, bn: true}
      - {name: fc, type: fc, in: 2048, out: 1000}
      - {name: custom, type: custom, fwd_flops: 1.0e9, fwd_bytes: 4.0e6, params: 1000000}

Layer types: ``conv`` (square ``k x k``, input ``hin x hin``, optional batch-norm), ``fc`` (``tokens`` rows
per sample, default 1), ``lstm`` (``input``, ``hidden``, over ``seq`` tokens), ``embedding`` (``rows x
dim`` table(s), ``lookups`` rows per sample; ``parallel: model`` shards the tables over the NPUs and moves the
looked-up rows with an all-to-all), ``interaction`` (DLRM's pairwise dot products), ``pool``, and ``custom``
(FLOPs, bytes and parameters given). Data-parallel layers all-reduce their weight gradients.
"""

from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["Layer", "Workload", "WorkloadError", "load_workload", "builtin_workloads", "WORKLOAD_DIR"]

WORKLOAD_DIR = Path(__file__).resolve().parent / "workloads"


class WorkloadError(ValueError):
    """A workload file or entry is malformed (the message names the file, the layer and the field)."""


@dataclass(frozen=True)
class Layer:
    """One layer per NPU per iteration: FLOPs and memory bytes of the forward pass, the weight-gradient and the
    input-gradient computation; ``params`` (elements), ``allreduce_bytes`` (weight gradients all-reduced) and
    ``alltoall_bytes`` (per NPU, forward and backward: model-parallel embeddings)."""

    name: str
    type: str
    fwd_flops: float
    fwd_bytes: float
    wg_flops: float
    wg_bytes: float
    ig_flops: float
    ig_bytes: float
    params: int
    allreduce_bytes: int
    alltoall_bytes: int


@dataclass(frozen=True)
class Workload:
    """A named list of layers (input to output) with the batch it was computed for."""

    name: str
    batch: int
    dtype_bytes: int
    layers: tuple

    @property
    def params(self):
        """Parameters of the model (all layers, data- and model-parallel)."""
        return sum(l.params for l in self.layers)

    @property
    def allreduce_bytes(self):
        return sum(l.allreduce_bytes for l in self.layers)

    @property
    def flops(self):
        """FLOPs of one iteration per NPU (forward + both gradients)."""
        return sum(l.fwd_flops + l.wg_flops + l.ig_flops for l in self.layers)


_REQUIRED = {
    "conv": ("cin", "cout", "k", "hin"),
    "fc": ("in", "out"),
    "lstm": ("input", "hidden"),
    "embedding": ("rows", "dim", "lookups"),
    "interaction": ("features", "dim"),
    "pool": ("channels", "hin"),
    "custom": ("fwd_flops", "fwd_bytes", "params"),
}
_OPTIONAL = {
    "conv": ("stride", "bn"), "fc": ("tokens",), "lstm": ("bidirectional",), "pool": ("stride",),
    "embedding": ("tables", "parallel"), "interaction": (), "custom": ("wg_flops", "ig_flops", "wg_bytes",
                                                                      "ig_bytes", "alltoall_bytes"),
}


def _num(where, key, v, integer=True, minimum=1):
    if isinstance(v, str) and not integer:       # YAML 1.1 reads 1.0e9 (no exponent sign) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or v < minimum:
        kind = "an integer" if integer else "a number"
        raise WorkloadError(f"{where}: {key} must be {kind} >= {minimum}, got {v!r}")
    return v


def _layer(where, e, batch, eb, seq):
    if not isinstance(e, dict):
        raise WorkloadError(f"{where}: a layer must be a mapping, got {e!r}")
    name = e.get("name")
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{where}: every layer needs a name")
    where = f"{where} ({name})"
    t = e.get("type")
    if t not in _REQUIRED:
        raise WorkloadError(f"{where}: unknown layer type {t!r}; expected one of {', '.join(_REQUIRED)}")
    allowed = {"name", "type", *_REQUIRED[t], *_OPTIONAL[t]}
    extra = sorted(set(e) - allowed)
    if extra:
        raise WorkloadError(f"{where}: unknown field(s) {', '.join(extra)} for a {t} layer")
    missing = [k for k in _REQUIRED[t] if k not in e]
    if missing:
        raise WorkloadError(f"{where}: missing field(s) {', '.join(missing)} for a {t} layer")
    a2a = 0
    if t == "conv":
        cin, cout, k, hin = (_num(where, x, e[x]) for x in ("cin", "cout", "k", "hin"))
        stride = _num(where, "stride", e.get("stride", 1))
        hout = -(-hin // stride)
        params = cin * cout * k * k + (2 * cout if e.get("bn") else 0)
        macs = cin * cout * k * k * hout * hout * batch
        act_in, act_out = cin * hin * hin * batch * eb, cout * hout * hout * batch * eb
        fwd_f, wg_f, ig_f = 2 * macs, 2 * macs, 2 * macs
        fwd_b = act_in + act_out + params * eb
        wg_b = act_in + act_out + params * eb
        ig_b = act_out + act_in + params * eb
    elif t == "fc":
        i, o = _num(where, "in", e["in"]), _num(where, "out", e["out"])
        rows = batch * _num(where, "tokens", e.get("tokens", 1))
        params = i * o + o
        fwd_f = wg_f = ig_f = 2 * i * o * rows
        fwd_b = wg_b = ig_b = (i + o) * rows * eb + params * eb
    elif t == "lstm":
        i, h = _num(where, "input", e["input"]), _num(where, "hidden", e["hidden"])
        dirs = 2 if e.get("bidirectional") else 1
        params = dirs * 4 * h * (i + h + 1)
        rows = batch * seq
        fwd_f = wg_f = ig_f = 2 * params * rows
        # Each time step streams the weights once (the recurrence serializes the steps).
        fwd_b = wg_b = ig_b = params * eb * seq + (i + 4 * h * dirs) * rows * eb
    elif t == "embedding":
        rows, dim, look = (_num(where, x, e[x]) for x in ("rows", "dim", "lookups"))
        tables = _num(where, "tables", e.get("tables", 1))
        par = e.get("parallel", "data")
        if par not in ("data", "model"):
            raise WorkloadError(f"{where}: parallel must be data or model, got {par!r}")
        params = rows * dim * tables
        moved = batch * look * dim * eb
        fwd_f, wg_f, ig_f = batch * look * dim, batch * look * dim, 0
        fwd_b, wg_b, ig_b = 2 * moved, 3 * moved, 0
        if par == "model":
            a2a = moved
    elif t == "interaction":
        f, dim = _num(where, "features", e["features"]), _num(where, "dim", e["dim"])
        params = 0
        fwd_f = ig_f = 2 * f * f * dim * batch
        wg_f = 0
        fwd_b = ig_b = (f * dim + f * f) * batch * eb
        wg_b = 0
    elif t == "pool":
        c, hin = _num(where, "channels", e["channels"]), _num(where, "hin", e["hin"])
        stride = _num(where, "stride", e.get("stride", 2))
        params = 0
        fwd_f = ig_f = c * hin * hin * batch
        wg_f = 0
        fwd_b = ig_b = c * hin * hin * batch * eb * (1 + 1 / (stride * stride))
        wg_b = 0
    else:
        fwd_f = _num(where, "fwd_flops", e["fwd_flops"], integer=False, minimum=0)
        fwd_b = _num(where, "fwd_bytes", e["fwd_bytes"], integer=False, minimum=0)
        params = _num(where, "params", e["params"], minimum=0)
        wg_f = _num(where, "wg_flops", e.get("wg_flops", fwd_f), integer=False, minimum=0)
        ig_f = _num(where, "ig_flops", e.get("ig_flops", fwd_f), integer=False, minimum=0)
        wg_b = _num(where, "wg_bytes", e.get("wg_bytes", fwd_b), integer=False, minimum=0)
        ig_b = _num(where, "ig_bytes", e.get("ig_bytes", fwd_b), integer=False, minimum=0)
        a2a = _num(where, "alltoall_bytes", e.get("alltoall_bytes", 0), minimum=0)
    data_parallel = not (t == "embedding" and e.get("parallel") == "model") and not a2a
    return Layer(name, t, float(fwd_f), float(fwd_b), float(wg_f), float(wg_b), float(ig_f), float(ig_b),
                 int(params), int(params * eb) if data_parallel else 0, int(a2a))


def load_workload(source, batch=None):
    """A :class:`Workload` from a YAML file path, a built-in name (``resnet50``, ``gnmt``, ``dlrm``) or an
    already parsed mapping; ``batch`` overrides the file's batch per NPU. Raises :class:`WorkloadError`."""
    where = "workload"
    if isinstance(source, dict):
        data = source
    else:
        path = Path(source)
        if not path.suffix and (WORKLOAD_DIR / f"{source}.yaml").exists():
            path = WORKLOAD_DIR / f"{source}.yaml"
        if not path.exists():
            raise WorkloadError(f"no workload file {str(source)!r} (built-in: {', '.join(builtin_workloads())})")
        where = str(path)
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:       # PyYAML's messages span lines: one line for the command line
            raise WorkloadError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from None
        except UnicodeDecodeError as exc:
            raise WorkloadError(f"{where}: not a UTF-8 text (YAML) file, byte {exc.start} is "
                                f"{exc.object[exc.start:exc.start + 1]!r}") from None
        except OSError as exc:
            raise WorkloadError(f"{where}: cannot read it: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{where}: expected a mapping with name, batch and layers")
    extra = sorted(set(data) - {"name", "batch", "dtype_bytes", "seq", "layers"})
    if extra:
        raise WorkloadError(f"{where}: unknown top-level field(s) {', '.join(extra)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{where}: name must be a non-empty string")
    b = _num(where, "batch", data.get("batch") if batch is None else batch)
    eb = _num(where, "dtype_bytes", data.get("dtype_bytes", 2))
    seq = _num(where, "seq", data.get("seq", 1))
    layers = data.get("layers")
    if not isinstance(layers, list) or not layers:
        raise WorkloadError(f"{where}: layers must be a non-empty list")
    out = tuple(_layer(f"{where}: layer {i}", e, b, eb, seq) for i, e in enumerate(layers))
    names = [l.name for l in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise WorkloadError(f"{where}: duplicate layer name(s) {', '.join(dup)}")
    return Workload(name, b, eb, out)


def builtin_workloads():
    """Names of the workloads shipped with the model."""
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.yaml"))
