"""System parameters (ACE Table V), endpoint configurations (Table VI) and the roofline compute model.

Units: seconds, bytes, bytes per second, FLOPs. Link rates come from the golden topology
(:class:`~syncfabric.sim.golden.topology.LinkAttr`: a rate in flits per cycle, 1 for the intra-package links,
1/8 for the inter-package ones, and a latency in cycles): a link carries ``rate * link_bandwidth`` bytes/s and
its latency is ``latency / clock_hz`` seconds.
"""

from dataclasses import dataclass, replace, asdict
import math

__all__ = ["SystemParams", "Endpoint", "CONFIGS", "endpoint", "endpoint_from_ace", "ACE_COMMAND_CYCLES",
           "ACE_STEP_CYCLES", "torus_for",
           "SYSTEM_SIZES", "compute_time", "PAPER_COMPUTE_S", "paper_compute"]

INF = math.inf


@dataclass(frozen=True)
class SystemParams:
    """ACE Table V: the NPU, its memory and its fabric.

    ``compute_efficiency`` scales the NPU peak in the roofline (1.0: the paper's compute model is not public,
    so the model takes the peak; a user calibrating against a real NPU sets it).
    """

    peak_flops: float = 120e12       # FP16
    n_sms: int = 80
    clock_hz: float = 1.245e9
    mem_bw: float = 900e9            # NPU-MEM
    afi_bw: float = 500e9            # NPU-AFI
    sm_bw: float = 80e9              # memory bandwidth one SM drives (64 B/cycle at 1245 MHz)
    link_bw: float = 200e9           # a rate-1 link (intra-package); inter-package links have rate 1/8 = 25 GB/s
    link_efficiency: float = 0.94
    packet_bytes: int = 256
    message_bytes: int = 8192
    chunk_bytes: int = 65536
    compute_efficiency: float = 1.0
    dtype_bytes: int = 2             # FP16 training

    def __post_init__(self):
        if not 0 < self.compute_efficiency <= 1:        # 0 divided the roofline's FLOPs by zero
            raise ValueError(f"compute efficiency {self.compute_efficiency}: expected a fraction of the peak "
                             f"in (0, 1]")

    def replace(self, **kw):
        return replace(self, **kw)

    def as_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class Endpoint:
    """How an endpoint runs collectives and what it leaves to compute (one row of ACE Table VI).

    ``kind``: ``"ace"`` (an engine: only LOAD/STORE touch NPU memory, the rest is SRAM), ``"npu"`` (the NPU's
    cores run the program out of memory: every message is read from / written to memory) or ``"ideal"``
    (an endpoint that handles a message in one cycle and needs no memory bandwidth).
    ``comm_mem_bw`` / ``comm_sms``: memory bandwidth and SMs reserved for communication (a baseline's
    reduction throughput is also capped at ``comm_sms * sm_bw``). ``overlap``: False issues all gradients as
    one collective after back-propagation (BaselineNoOverlap), with every resource available to it.
    ``step_cycles``: endpoint cycles per program step (the engine's FSM overhead; 7 measured on the RTL).
    ``command_cycles``: endpoint cycles a collective costs once, beside its chunks: the doorbell, descriptor
    fetch and validation, the program's first LOAD waiting on memory, the last STORE's write response and the
    completion write (0 for the paper's endpoints, which the paper charges nothing of the kind;
    :data:`ACE_COMMAND_CYCLES` for the RTL's).
    ``sram_bytes`` / ``n_fsms`` / ``alus``: ACE resources (chunks in flight per phase come from the SRAM
    partition heuristic and the FSMs per phase). ``split_memory``: ``comm_mem_bw`` is the read bandwidth, with a write channel
    as wide beside it (the RTL's AXI port; the paper's accounting, which counts the bytes read per byte
    sent: 450 GB/s for a baseline, 133 GB/s for ACE, to drive 300 GB/s); False: one budget for both. ``inflight``: chunks in flight per
    phase for ``npu``/``ideal`` endpoints (memory-backed, so not bound by SRAM). ``buffer_granular``: the SRAM
    is whole chunk buffers, one chunk each in any phase (the RTL), rather than byte-sized partitions where a
    chunk takes only the share of it that reaches the phase (the paper's engine). ``message_cycles``: endpoint
    cycles a link port spends per message beyond its beats (the RTL's send path between one message and the
    next, :data:`ACE_MESSAGE_CYCLES`); a port then sends a message in ``max(beats / rate, beats +
    message_cycles)`` cycles, so the cost shows on full-rate links and hides on slower ones.
    """

    name: str
    kind: str
    comm_mem_bw: float
    comm_sms: int = 0
    overlap: bool = True
    step_cycles: float = 7.0
    command_cycles: float = 0.0
    sram_bytes: int = 4 << 20
    n_fsms: int = 16
    alus: int = 4
    alu_bytes: int = 64
    split_memory: bool = True
    inflight: int = 16
    chunk_bytes: int = None
    buffer_granular: bool = False
    message_cycles: float = 0.0

    def __post_init__(self):
        if self.kind not in ("ace", "npu", "ideal"):
            raise ValueError(f"endpoint kind must be ace, npu or ideal, not {self.kind!r}")
        if self.comm_mem_bw <= 0:
            raise ValueError(f"comm_mem_bw must be positive, got {self.comm_mem_bw}")
        if self.n_fsms < 1 or self.sram_bytes <= 0 or self.inflight < 1:
            raise ValueError("n_fsms, sram_bytes and inflight must be positive")

    def replace(self, **kw):
        return replace(self, **kw)

    def compute_share(self, system):
        """``(SMs, memory bandwidth)`` left to training compute while collectives may run."""
        if not self.overlap or self.kind == "ideal":
            return system.n_sms, system.mem_bw
        if self.kind == "ace":
            return system.n_sms, system.mem_bw - self.comm_mem_bw
        return system.n_sms - self.comm_sms, system.mem_bw - self.comm_mem_bw


GB = 1e9

#: ACE Table VI. NoOverlap runs its one collective with every resource of the NPU.
CONFIGS = {
    "BaselineNoOverlap": Endpoint("BaselineNoOverlap", "npu", comm_mem_bw=900 * GB, comm_sms=80, overlap=False,
                                  step_cycles=7.0),
    "BaselineCommOpt": Endpoint("BaselineCommOpt", "npu", comm_mem_bw=450 * GB, comm_sms=6, step_cycles=7.0),
    "BaselineCompOpt": Endpoint("BaselineCompOpt", "npu", comm_mem_bw=128 * GB, comm_sms=2, step_cycles=7.0),
    "ACE": Endpoint("ACE", "ace", comm_mem_bw=128 * GB),
    "Ideal": Endpoint("Ideal", "ideal", comm_mem_bw=INF, step_cycles=1.0, inflight=64),
}


def endpoint(name):
    """The Table VI configuration ``name`` (case-insensitive)."""
    for k, v in CONFIGS.items():
        if k.lower() == str(name).lower():
            return v
    raise ValueError(f"unknown configuration {name!r}; expected one of {', '.join(CONFIGS)}")


#: Cycles the RTL engine spends on a collective beyond what the chunk model charges: a 256 B all-reduce on
#: ring:4 of ``small`` engines (links of latency 10) takes 318 cycles on the RTL (``syncfabric run --config
#: small --topology ring:4 --bytes 256 --latency 10``, measured on 7f68af0), the chunk model 156 (1 KiB: 371
#: against 198; 4 KiB: 692 against 486).
ACE_COMMAND_CYCLES = 160.0


#: Cycles a link port of the RTL engine spends per message beyond its beats, fitted to the paper engine on
#: ring:8 (1 MiB, latency 10) at 8 to 64 KiB chunks (docs/results.md, "The driver's chunk choice").
ACE_MESSAGE_CYCLES = 1.0


#: Cycles an FSM of the RTL engine spends on a step before it issues (decode, grant), in the step-level time
#: of a chunk (:mod:`.steptime`): fitted to the calibration table (mean error 2.9 % at 6; 3.2 % at 7, the
#: figure measured before the FSMs' step pipeline; 3.0 % at 5.5).
ACE_STEP_CYCLES = 6.0


def endpoint_from_ace(cfg, *, buffers=None, fsms=None, step_cycles=ACE_STEP_CYCLES,
                      command_cycles=ACE_COMMAND_CYCLES, message_cycles=ACE_MESSAGE_CYCLES):
    """An ``ace`` endpoint with the resources of an :class:`~syncfabric.hdl.ace.config.AceConfig` (in engine
    cycles: use it with :meth:`SystemParams` of ``clock_hz=1`` and ``link_bw=cfg.beat_bytes``). The memory
    port moves one beat per cycle on each AXI channel."""
    n_buf = cfg.n_buffers if buffers is None else buffers
    return Endpoint("ACE-" + str(cfg.beat_bytes * 8) + "b", "ace", comm_mem_bw=float(cfg.beat_bytes),
                    sram_bytes=n_buf * cfg.chunk_bytes, n_fsms=cfg.n_fsms if fsms is None else fsms,
                    alus=1, alu_bytes=cfg.beat_bytes, split_memory=True, step_cycles=step_cycles,
                    command_cycles=command_cycles, chunk_bytes=cfg.chunk_bytes, buffer_granular=True,
                    message_cycles=message_cycles)


#: The torus shape per system size (L local NPUs per package, V x H packages), as in ACE section V.
SYSTEM_SIZES = {16: (4, 2, 2), 32: (4, 2, 4), 64: (4, 4, 4), 128: (4, 4, 8), 256: (4, 8, 8), 512: (4, 8, 16),
                1024: (4, 16, 16)}


def torus_for(n):
    """Topology spec of an ``n``-NPU system (``torus:LxVxH``)."""
    if n not in SYSTEM_SIZES:
        raise ValueError(f"no torus shape for {n} NPUs; known sizes: {', '.join(map(str, SYSTEM_SIZES))} "
                         f"(or give a topology spec)")
    return "torus:" + "x".join(map(str, SYSTEM_SIZES[n]))


def compute_time(flops, nbytes, system, sms, mem_bw):
    """Roofline time of one kernel: ``max(flops / (peak * sms / n_sms * efficiency), bytes / mem_bw)``."""
    if flops < 0 or nbytes < 0:
        raise ValueError("flops and bytes must be non-negative")
    peak = system.peak_flops * sms / system.n_sms * system.compute_efficiency
    return max(flops / peak if flops else 0.0, nbytes / mem_bw if nbytes else 0.0)


def _paper_resnet50():
    """ResNet-50 compute per iteration (batch 32) in the paper's compute model, from section VI-B (Fig. 10,
    128 NPUs; weak scaling keeps it at every size). Stated: BaselineCompOpt iterates in 3.5 ms; ACE is 2.52x
    faster than CompOpt and 2.67x faster than CommOpt and reaches 94.3% of Ideal; CommOpt's exposed
    communication is 31.5% of its iteration; CompOpt computes 1.75x faster than CommOpt and ACE 1.06x faster
    than CompOpt. Derived: ACE iterates in 3.5 / 2.52 = 1.389 ms, CommOpt in 1.389 x 2.67 = 3.708 ms of which
    68.5% = 2.540 ms is compute; CompOpt computes 2.540 / 1.75 = 1.451 ms, ACE 1.451 / 1.06 = 1.369 ms; Ideal
    iterates in 1.389 x 0.943 = 1.310 ms, taken as its compute (the bound with no exposed communication),
    and BaselineNoOverlap, which computes with every resource, as Ideal."""
    ace_it = 3.5e-3 / 2.52
    commopt = ace_it * 2.67 * (1 - 0.315)
    compopt = commopt / 1.75
    ideal = ace_it * 0.943
    return {"BaselineCommOpt": commopt, "BaselineCompOpt": compopt, "ACE": compopt / 1.06, "Ideal": ideal,
            "BaselineNoOverlap": ideal}


#: Compute per iteration (seconds) of the paper's compute model, per workload and configuration, where the
#: paper's text states enough to derive it (see :func:`_paper_resnet50`). GNMT and DLRM have no stated times.
PAPER_COMPUTE_S = {"resnet50": _paper_resnet50()}

#: The batch per NPU the paper's figures are for (section V).
PAPER_BATCH = {"resnet50": 32, "gnmt": 128, "dlrm": 512}


def paper_compute(workload, config, batch=None):
    """The paper-derived compute per iteration of ``workload`` (a name) on ``config``, or ``None`` (no stated
    figure, or ``batch`` is not the paper's)."""
    if batch is not None and batch != PAPER_BATCH.get(workload):
        return None
    return PAPER_COMPUTE_S.get(workload, {}).get(config)
