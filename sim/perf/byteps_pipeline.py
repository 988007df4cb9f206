"""BytePS's priority pipeline (section 6.1, after P3 [34] and ByteScheduler [55]): tensors cut into parts, each
part pushed to its summation service and pulled back through a two-stage pipeline, the parts of the layers
needed first by the next forward pass served first; communication overlaps the backward pass and the next
forward pass.

Model of one GPU machine's iteration in the steady state (every machine is the same):

* Backward from ``t = 0``, the last layer first; layer ``l``'s gradient is ready when its backward ends, and its
  parts (``split_parts``, at most ``part_bytes``) enter the push stage then.
* Two stages, each one server, non-preemptive at part granularity: *push* (the part travels to its summation
  service) and *pull* (the sum travels back; a part enters it when its push ends: the service sums at least at
  the link rate, paper Fig. 9b). A part of ``s`` bytes takes ``s * c`` in each stage, ``c`` the per-byte time of
  the communication pattern (BytePS Eq. 6, ring all-reduce or a non-colocated PS), so a long stream of parts
  takes the formula's time plus one part (push and pull of different parts overlap: both link directions).
* Policies: ``fifo`` serves each stage in arrival order (the backward order); ``priority`` serves the waiting
  part of the lowest layer index (input side first), then in tensor order.
* The next forward pass runs layer ``l`` once layer ``l-1``'s forward ended and every part of layer ``l`` was
  pulled (the parameter update on the GPU is not modelled); the next backward starts when the forward ends.
  Every layer's parts are pulled before the last forward layer runs, so no communication crosses into the next
  backward and the iteration time is the end of the forward pass.

``after_backward`` releases every part when the whole backward has ended (no overlap with the backward pass).
"""

import heapq
from dataclasses import dataclass

from ..golden import byteps as bp
from .workload import load_workload

__all__ = ["ModelLayer", "PipelineResult", "iteration", "paper_models", "PAPER_MODEL_NOTES", "per_byte_time"]

MB = 1 << 20


@dataclass(frozen=True)
class ModelLayer:
    """One layer (input side first): gradient bytes, forward and backward compute seconds."""

    name: str
    grad_bytes: int
    fwd_s: float
    bwd_s: float


@dataclass(frozen=True)
class PipelineResult:
    """Steady-state iteration: ``time``; ``compute`` (forward + backward); ``comm`` (the busy time of one
    stage: bytes x per-byte time); ``layer_ready``: when each layer's last part was pulled, from the start of
    the backward pass; ``forward_start``."""

    time: float
    compute: float
    comm: float
    layer_ready: tuple
    forward_start: float


def _stage(jobs, ready, cost, priority):
    """One non-preemptive server: ``jobs`` ``(key, bytes)`` arriving at ``ready``; returns finish times."""
    order = sorted(range(len(jobs)), key=lambda j: (ready[j], j))
    finish = [0.0] * len(jobs)
    waiting, t, i = [], 0.0, 0
    while i < len(order) or waiting:
        if not waiting:
            t = max(t, ready[order[i]])
        while i < len(order) and ready[order[i]] <= t:
            j = order[i]
            heapq.heappush(waiting, (jobs[j][0] if priority else (ready[j], j), j))
            i += 1
        _, j = heapq.heappop(waiting)
        t += jobs[j][1] * cost
        finish[j] = t
    return finish


def iteration(layers, per_byte_s, part_bytes=4 * MB, policy="priority", after_backward=False, stages=2):
    """Steady-state iteration of ``layers`` (:class:`ModelLayer`, input side first) with communication of
    ``per_byte_s`` seconds per byte and stage, parts of at most ``part_bytes`` (None: whole tensors),
    ``policy`` ``"fifo"`` or ``"priority"``; ``stages`` 2 (push, pull) or 1 (an all-reduce: one collective per
    part). Returns a :class:`PipelineResult`."""
    if policy not in ("fifo", "priority"):
        raise ValueError(f"policy {policy!r}: expected 'fifo' or 'priority'")
    if stages not in (1, 2):
        raise ValueError(f"stages {stages}: expected 1 or 2")
    if not layers:
        raise ValueError("no layers")
    if per_byte_s < 0 or (part_bytes is not None and part_bytes < 1):
        raise ValueError("per_byte_s must be >= 0 and part_bytes >= 1")
    n = len(layers)
    grad_ready, t = [0.0] * n, 0.0
    for l in reversed(range(n)):
        t += layers[l].bwd_s
        grad_ready[l] = t
    bwd_end = t
    sizes = [ly.grad_bytes for ly in layers]
    biggest = max(sizes)
    parts = bp.split_parts(sizes, part_bytes if part_bytes is not None else max(1, biggest))
    # listed in the backward order (last layer first: FIFO's order among parts ready at once); the priority
    # key is (layer, offset)
    parts = sorted((p for p in parts if p[2] > 0), key=lambda p: (-p[0], p[1]))
    jobs = [((layer, off), length) for layer, off, length in parts]
    ready = [bwd_end if after_backward else grad_ready[layer] for layer, _, _ in parts]
    done = list(ready)
    for _ in range(stages):
        done = _stage(jobs, done, per_byte_s, policy == "priority")
    layer_ready = [0.0] * n
    for (layer, _, _), d in zip(parts, done):
        layer_ready[layer] = max(layer_ready[layer], d)
    t = bwd_end
    for l in range(n):
        t = max(t, layer_ready[l]) + layers[l].fwd_s
    compute = sum(ly.fwd_s + ly.bwd_s for ly in layers)
    return PipelineResult(t, compute, sum(sizes) * per_byte_s, tuple(layer_ready), bwd_end)


def per_byte_time(scheme, n, k, B):
    """Seconds per gradient byte and stage: ``"byteps"`` (Eq. 6), ``"allreduce"`` (ring), ``"ps"``
    (non-colocated, ``k`` servers)."""
    if scheme == "byteps":
        return bp.byteps_time(n, k, 1.0, B)
    if scheme == "allreduce":
        return bp.allreduce_time(n, 1.0, B)
    if scheme == "ps":
        return bp.ps_time(n, k, 1.0, B)
    raise ValueError(f"scheme {scheme!r}: expected byteps, allreduce or ps")


#: What each model is built from (the paper names the models, not their shapes or per-GPU batches).
PAPER_MODEL_NOTES = {
    "ResNet-50": "workloads/resnet50.yaml layer table, batch 32 images per GPU",
    "VGG-16": "the 13 conv + 3 fc layers of the VGG-16 paper, 224x224 input, batch 32 images per GPU",
    "BERT-large": "24 encoder layers + embeddings (340M parameters), 16 x 128 tokens per GPU",
    "GPT-2": "GPT-2 small (12 layers, 124M parameters), 80 tokens per GPU (the paper's Fig. 13 batch)",
    "Transformer": "Transformer base (6 + 6 layers, d = 512, 32k shared vocabulary), 4096 tokens per GPU",
}
#: Left out: UGATIT (the paper gives neither its layers nor which variant; 2 images per GPU).


def _vgg16(batch):
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    out, cin, h = [], 3, 224
    for v in cfg:
        if v == "M":
            h //= 2
            continue
        params = 9 * cin * v + v
        out.append((f"conv{len(out) + 1}", params, 2.0 * 9 * cin * v * h * h * batch))
        cin = v
    for i, (a, b) in enumerate(((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000))):
        out.append((f"fc{i + 1}", a * b + b, 2.0 * a * b * batch))
    return out


def _transformer_stack(name, n_layers, d, vocab, positions, tokens):
    layer = 12 * d * d + 13 * d                    # attention (4 d^2) + MLP (8 d^2) + biases and norms
    out = [(f"{name}.embed", vocab * d + positions * d, 0.0)]
    out += [(f"{name}.layer{i}", layer, 2.0 * layer * tokens) for i in range(n_layers)]
    return out


def _transformer_base(tokens, d=512):
    enc, dec = 12 * d * d + 13 * d, 16 * d * d + 18 * d       # a decoder layer adds cross-attention
    out = [("embed", 32000 * d, 0.0)]
    out += [(f"enc{i}", enc, 2.0 * enc * tokens) for i in range(6)]
    out += [(f"dec{i}", dec, 2.0 * dec * tokens) for i in range(6)]
    return out


def paper_models(gpu_flops=15.7e12 * 0.5, grad_bytes=4):
    """The paper's models we have shapes for (:data:`PAPER_MODEL_NOTES`): ``{name: [ModelLayer]}``, forward
    FLOPs from the layer shapes, backward twice the forward, at ``gpu_flops`` (default: half a V100's FP32
    peak), gradients of ``grad_bytes`` per parameter (FP32)."""
    models = {}
    wl = load_workload("resnet50", batch=32)
    models["ResNet-50"] = [ModelLayer(l.name, l.params * grad_bytes, l.fwd_flops / gpu_flops,
                                      (l.wg_flops + l.ig_flops) / gpu_flops) for l in wl.layers]
    for name, spec in (("VGG-16", _vgg16(32)),
                       ("BERT-large", _transformer_stack("bert", 24, 1024, 30522, 514, 16 * 128)),
                       ("GPT-2", _transformer_stack("gpt2", 12, 768, 50257, 1024, 80)),
                       ("Transformer", _transformer_base(4096))):
        models[name] = [ModelLayer(ln, p * grad_bytes, f / gpu_flops, 2 * f / gpu_flops) for ln, p, f in spec]
    return models
