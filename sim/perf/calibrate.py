"""The model against the engine RTL: collective cycles predicted from the engine configuration (beat bytes,
chunk size, chunk buffers, FSMs) and the links (latency, rate), next to the cycles the RTL takes on Verilator.

Each :class:`RtlPoint` is one ``syncfabric run`` job with the cycles last recorded for it (``docs/results.md``).
:func:`calibrate` compares the model with the recorded cycles, or, given a function that measures, runs every job on
the RTL again (:func:`syncfabric.host.run.measure_point`, the same code as ``syncfabric run``, every byte
checked against the golden executor) and compares with what it measured: ``syncfabric perf calibrate --measure``.

Engine units: one cycle per second (``clock_hz=1``), a rate-1 link carries one beat per cycle
(``link_bw=beat_bytes``), no link efficiency factor (the RTL's links lose nothing), memory one beat per cycle
on each AXI channel, ``ACE_STEP_CYCLES`` per FSM step.
"""

from dataclasses import dataclass

from ..golden.topology import LinkAttr, Ring, Switch, Torus, parse as parse_topology
from .collective import collective_time
from .system import SystemParams, endpoint_from_ace

__all__ = ["RtlPoint", "RTL_POINTS", "predict", "predict_cycles", "measure", "calibrate"]


@dataclass(frozen=True)
class RtlPoint:
    """One measured RTL run: the configuration, the job and the cycles it took. ``chunk_bytes`` None: the
    largest chunk the engine runs the program with (``--chunk-bytes max``), not the driver's choice.
    ``partitions``: simulator processes the run is split into (``--partitions``; cycle-identical to one process,
    which a 64-engine `paper` system could not be built as)."""

    command: str
    config: str
    collective: str
    topology: str
    nbytes: int
    cycles: int
    latency: int = None
    rate: float = None
    buffers: int = None
    fsms: int = None
    algorithm: str = None
    chunk_bytes: int = None
    partitions: int = None

    def run_kwargs(self):
        """Keyword arguments of :func:`~syncfabric.host.run.run_collective` for this job."""
        return {"collective": self.collective, "topology": self.topology, "nbytes": self.nbytes,
                "config": self.config, "latency": self.latency, "rate": self.rate, "buffers": self.buffers,
                "fsms": self.fsms, "algorithm": self.algorithm, "chunk_bytes": self.chunk_bytes or "max",
                "partitions": self.partitions}

    @property
    def run_command(self):
        """The same job as a ``syncfabric run`` command line."""
        cmd = (f"syncfabric run --config {self.config} --collective {self.collective} --topology {self.topology} "
               f"--bytes {self.nbytes}")
        for flag, v in (("latency", self.latency), ("rate", self.rate), ("buffers", self.buffers),
                        ("fsms", self.fsms), ("algorithm", self.algorithm), ("chunk-bytes", self.chunk_bytes),
                        ("partitions", self.partitions)):
            if v is not None:
                cmd += f" --{flag} {v}"
        return cmd + ("" if self.chunk_bytes else " --chunk-bytes max")


_P = "syncfabric bench sweep --config paper --bytes 1M"
#: Measured on Verilator (docs/results.md); cycles from the descriptor fetch to the last completion. The `paper`
#: engine's rows on rings (ring:8, bidir-ring:8, bidir-ring:4) were measured again in session 74 on d721c22 (the
#: RTL of 3bfb135; `syncfabric perf calibrate --measure --config paper --topology ring:8 --topology bidir-ring:8
#: --topology bidir-ring:4`, 22 min of runs): they had been recorded before the TX CRC stage and the wide engine's control
#: stages (-6.7 % to +2.7 %); the torus and switch rows keep the figures of their sessions.
RTL_POINTS = (
    RtlPoint("syncfabric bench efficiency --config paper --bytes 1M --topology ring:8", "paper", "allreduce",
             "ring:8", 1 << 20, 30105, latency=10),
    RtlPoint("syncfabric bench efficiency --config paper --bytes 1M --topology bidir-ring:8", "paper",
             "allreduce", "bidir-ring:8", 1 << 20, 19006, latency=10),
    RtlPoint("syncfabric bench efficiency --config paper --bytes 1M --topology ring:8 --rate 0.5", "paper",
             "allreduce", "ring:8", 1 << 20, 58183, latency=10, rate=0.5),
    RtlPoint("syncfabric bench efficiency --config paper --bytes 1M --topology bidir-ring:8 --rate 0.5", "paper",
             "allreduce", "bidir-ring:8", 1 << 20, 30576, latency=10, rate=0.5),
    RtlPoint(_P + " --topology ring:8 --fsms 1", "paper", "allreduce", "ring:8", 1 << 20, 35047, latency=10,
             buffers=52, fsms=1),
    RtlPoint(_P + " --topology ring:8 --fsms 2", "paper", "allreduce", "ring:8", 1 << 20, 31897, latency=10,
             buffers=52, fsms=2),
    RtlPoint(_P + " --topology ring:8 --buffers 4 --fsms 16", "paper", "allreduce", "ring:8", 1 << 20, 32079,
             latency=10, buffers=4, fsms=16),
    RtlPoint(_P + " --topology bidir-ring:8 --latency 90 --fsms 1", "paper", "allreduce", "bidir-ring:8", 1 << 20,
             36253, latency=90, buffers=52, fsms=1),
    RtlPoint(_P + " --topology bidir-ring:8 --latency 90 --fsms 2", "paper", "allreduce", "bidir-ring:8", 1 << 20,
             19833, latency=90, buffers=52, fsms=2),
    RtlPoint(_P + " --topology bidir-ring:8 --latency 90 --fsms 16", "paper", "allreduce", "bidir-ring:8",
             1 << 20, 19006, latency=90, buffers=52, fsms=16),
    # chunk sizes on the rings (session 57, `syncfabric run --config paper --topology T --bytes 1M --latency 10
    # --chunk-bytes C`): what ACE_MESSAGE_CYCLES is fitted to
    *(RtlPoint(f"syncfabric run --topology {t} --config paper --bytes 1M --latency 10 --chunk-bytes {c >> 10}K",
               "paper", "allreduce", t, 1 << 20, cycles, latency=10, chunk_bytes=c)
      for t, c, cycles in (("ring:8", 8 << 10, 31911), ("ring:8", 16 << 10, 30161), ("ring:8", 32 << 10, 29749),
                           ("bidir-ring:8", 8 << 10, 19008), ("bidir-ring:8", 16 << 10, 18151),
                           ("bidir-ring:8", 32 << 10, 18435))),
    # the design point on a torus (16 paper engines, the paper's 90/500-cycle links, 1/8 rate between packages;
    # SRAM split by residence time; 44,010 cycles with the paper's split): 3 min of simulation after a 10 min
    # conversion and a 10 min Verilator build
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 1M", "paper", "allreduce",
             "torus:4x2x2", 1 << 20, 25595),
    # with 16 KiB chunks (session 56, with 8 landing headers: --engine landing_headers=8; the model does not
    # depend on them)
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 1M --chunk-bytes 16K", "paper",
             "allreduce", "torus:4x2x2", 1 << 20, 20953, chunk_bytes=16 << 10),
    # the same at 4 MiB per NPU (16 MiB NPU memories; 21 min wall with the build)
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 4M", "paper", "allreduce",
             "torus:4x2x2", 4 << 20, 78436),
    # other chunk sizes (sessions 52 and 55; 16 KiB the best, 0.898 of the bound; at 8 KiB the 16 FSMs, one
    # chunk each, cannot cover the slow links' latency) and the rotated program (session 56; the driver gives
    # its engines 8 landing headers)
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 4M --chunk-bytes 16K", "paper",
             "allreduce", "torus:4x2x2", 4 << 20, 73546, chunk_bytes=16 << 10),
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 4M --chunk-bytes 32K", "paper",
             "allreduce", "torus:4x2x2", 4 << 20, 74402, chunk_bytes=32 << 10),
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 4M --chunk-bytes 8K", "paper",
             "allreduce", "torus:4x2x2", 4 << 20, 105105, chunk_bytes=8 << 10),
    # 8 MiB per NPU (session 63, on 603c0a1, 8 landing headers: --engine landing_headers=8; 32 MiB NPU
    # memories, 70 min wall with a 36 min build on a loaded machine): 0.9175 of the bound
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 8M --chunk-bytes 16K", "paper",
             "allreduce", "torus:4x2x2", 8 << 20, 143409, chunk_bytes=16 << 10),
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 4M --algorithm hierarchical-rotated",
             "paper", "allreduce", "torus:4x2x2", 4 << 20, 78491, algorithm="hierarchical-rotated"),
    RtlPoint("syncfabric run --topology torus:4x2x2 --config paper --bytes 4M --algorithm hierarchical-rotated "
             "--chunk-bytes 32K", "paper", "allreduce", "torus:4x2x2", 4 << 20, 74954,
             algorithm="hierarchical-rotated", chunk_bytes=32 << 10),
    # the switch at the design point (8 paper engines, the switch's 90-cycle links): the all-reduce of session 64
    # (on 0925e95: input queues a round trip deep that hold their up-links; 22 min wall with the conversion and
    # a 537 s build); the all-to-all at the largest chunk re-measured in session 70 on the virtual output
    # queues and the TX CRC stage (20,173 cycles, 0.720 of the link bound; 22,771 before the queues), 13.5 min
    # wall with the conversion and a 313 s build
    RtlPoint("syncfabric run --config paper --collective allreduce --topology switch:8 --bytes 1M", "paper",
             "allreduce", "switch:8", 1 << 20, 32586),
    RtlPoint("syncfabric run --config paper --collective alltoall --topology switch:8 --bytes 1M", "paper",
             "alltoall", "switch:8", 1 << 20, 20173),
    # the all-to-all on the virtual output queues (session 68, on 6776cdd) with the chunk the driver chooses
    # (8 KiB): 0.795 of the link bound; 44 min wall with the conversion and a 937 s build beside another run
    RtlPoint("syncfabric run --config paper --collective alltoall --topology switch:8 --bytes 1M "
             "--chunk-bytes 8K", "paper", "alltoall", "switch:8", 1 << 20, 18249, chunk_bytes=8 << 10),
    # 16 paper engines on switch:16 (session 75, on a1edf1a: the issue arbiter's narrowed port status, without
    # which the engine did not convert; 62 min wall: 28 min converting, a 1,724 s Verilator build, 129
    # cycles/s; peak RSS 5.7 GB), the chunk the driver chooses (32 KiB): 0.880 of the link bound
    RtlPoint("syncfabric run --config paper --collective allreduce --topology switch:16 --bytes 1M "
             "--chunk-bytes 32K", "paper", "allreduce", "switch:16", 1 << 20, 35099, chunk_bytes=32 << 10),
    # the design point on torus:4x4x4 (64 paper engines, the paper's links, two partitions: `--partitions 2
    # --threads 1`), 32 KiB chunks (the driver's choice): 1 MiB per NPU in session 66 (0.772 of the link bound;
    # 16 min of simulation), 4 MiB in session 68 on 6776cdd (0.930; 55 min wall, 42 cycles/s, builds cached)
    RtlPoint("syncfabric run --topology torus:4x4x4 --config paper --bytes 1M --chunk-bytes 32K --partitions 2",
             "paper", "allreduce", "torus:4x4x4", 1 << 20, 32500, chunk_bytes=32 << 10, partitions=2),
    RtlPoint("syncfabric run --topology torus:4x4x4 --config paper --bytes 4M --chunk-bytes 32K --partitions 2",
             "paper", "allreduce", "torus:4x4x4", 4 << 20, 106241, chunk_bytes=32 << 10, partitions=2),
    # an all-gather bound by the NPU memory port (session 64, on 6305d25; `syncfabric run --config paper
    # --topology bidir-ring:4 --collective allgather --bytes 1M --chunk-bytes 64K|8K`): the model put 8 KiB 5 %
    # ahead, the RTL took them alike (+0.2 %)
    RtlPoint("syncfabric run --config paper --collective allgather --topology bidir-ring:4 --bytes 1M", "paper",
             "allgather", "bidir-ring:4", 1 << 20, 17753),
    RtlPoint("syncfabric run --config paper --collective allgather --topology bidir-ring:4 --bytes 1M "
             "--chunk-bytes 8K", "paper", "allgather", "bidir-ring:4", 1 << 20, 17834, chunk_bytes=8 << 10),
    # an all-gather on ring:2 of small engines at two chunk sizes (session 64, on 1d1f5de): 1 KiB chunks near
    # the NPU memory port's bound (4,096 cycles), 256 B chunks bound by the FSMs' steps (2.5 idle cycles per
    # step)
    RtlPoint("syncfabric run --config small --collective allgather --topology ring:2 --bytes 64K "
             "--chunk-bytes 1K", "small", "allgather", "ring:2", 64 << 10, 4798, chunk_bytes=1 << 10),
    RtlPoint("syncfabric run --config small --collective allgather --topology ring:2 --bytes 64K "
             "--chunk-bytes 256", "small", "allgather", "ring:2", 64 << 10, 9891, chunk_bytes=256),
    # the small engine's rows measured with `syncfabric perf calibrate --measure --config small` on ff93be0
    # (the all-to-all programs spreading their ties)
    RtlPoint("syncfabric run --config small --collective allreduce --topology ring:4 --bytes 16384 --latency 10",
             "small", "allreduce", "ring:4", 16 << 10, 1976, latency=10),
    RtlPoint("syncfabric run --config small --collective allreduce --topology bidir-ring:4 --bytes 16384 "
             "--latency 10", "small", "allreduce", "bidir-ring:4", 16 << 10, 1597, latency=10),
    RtlPoint("syncfabric run --topology ring:8 --config small --bytes 32K --latency 90", "small", "allreduce",
             "ring:8", 32 << 10, 12436, latency=90),
    # re-measured on the residence-time SRAM split (19,597 with the ACE paper's: --sram-split ace)
    RtlPoint("syncfabric run --topology torus:4x2x2 --config small --bytes 16K", "small", "allreduce",
             "torus:4x2x2", 16 << 10, 13443),
    RtlPoint("syncfabric run --collective alltoall --topology torus:4x2x2 --config small --bytes 16K", "small",
             "alltoall", "torus:4x2x2", 16 << 10, 10793),
    # the switch's virtual output queues (session 67) took the all-to-all from 2,156 to 2,078 cycles; the
    # all-reduce (one partner per step) kept its 5,985
    RtlPoint("syncfabric run --collective alltoall --topology switch:8 --config small --bytes 16K", "small",
             "alltoall", "switch:8", 16 << 10, 2078, latency=90),
    RtlPoint("syncfabric run --collective allreduce --topology switch:8 --config small --bytes 16K", "small",
             "allreduce", "switch:8", 16 << 10, 5985, latency=90),
)


def _topology(spec, latency, rate):
    """``spec`` with every link's latency and/or rate replaced where given (``syncfabric run --latency
    --rate``); the other attribute stays each link's own."""
    t = parse_topology(spec)
    if latency is None and rate is None:
        return t

    def attr(a):
        return LinkAttr(rate=a.rate if rate is None else rate, latency=a.latency if latency is None else latency)
    if isinstance(t, Ring):
        return Ring(t.p, t.bidirectional, attr(t.attr))
    if isinstance(t, Switch):
        return Switch(t.p, attr(t.attr))
    return Torus(*t.dims, attrs=tuple(attr(a) for a in t.attrs))


def predict(config, collective, topology, nbytes, latency=None, rate=None, buffers=None, fsms=None,
            algorithm=None, chunk_bytes=None):
    """The model's :class:`~.collective.CollectiveResult` of one RTL job in engine cycles (``config``: an
    AceConfig or a profile name; ``chunk_bytes``: the job's chunk, each in one of the configuration's chunk
    buffers): ``time`` the cycles, ``phase_busy`` the cycles a chunk was in each phase (the engine's
    ``PHASE_BUSY``)."""
    from ...hdl.ace.config import AceConfig
    cfg = AceConfig.profile(config) if isinstance(config, str) else config
    if chunk_bytes:
        cfg = cfg.replace(chunk_bytes=chunk_bytes)
    topo = _topology(topology, latency, rate)
    ep = endpoint_from_ace(cfg, buffers=buffers, fsms=fsms)
    system = SystemParams(clock_hz=1.0, link_bw=float(cfg.beat_bytes), link_efficiency=1.0)
    return collective_time(collective, nbytes, topo, ep, system, algorithm=algorithm)


def predict_cycles(config, collective, topology, nbytes, latency=None, rate=None, buffers=None, fsms=None,
                   algorithm=None, chunk_bytes=None):
    """Cycles the model predicts for one RTL job (:func:`predict`)."""
    return predict(config, collective, topology, nbytes, latency, rate, buffers, fsms, algorithm,
                   chunk_bytes).time


def calibrate(points=RTL_POINTS, *, measure=None, on_row=None):
    """Rows of (command, RTL cycles, model cycles, error) and the mean absolute error.

    ``measure``: a function running a point's job on the RTL and returning its result (``cycles``, ``wall_s``;
    :func:`syncfabric.host.run.measure_point`); the model is then compared with the cycles measured now
    (``recorded_cycles`` and ``drift`` say how far the recorded figure is from them); without it, with the
    recorded cycles. ``on_row(i, n, row)`` is called after each row (progress of long measurements). A row whose
    run fails (``measure`` raises RuntimeError) is kept with ``failed`` (the reason) and compared with its
    recorded cycles, so one failed run does not lose the others' hours; the mean covers the rows that ran."""
    rows = []
    for i, p in enumerate(points):
        m = predict_cycles(p.config, p.collective, p.topology, p.nbytes, p.latency, p.rate, p.buffers, p.fsms,
                           p.algorithm, p.chunk_bytes)
        row = {"command": p.run_command, "config": p.config, "collective": p.collective, "topology": p.topology,
               "bytes": p.nbytes, "rtl_cycles": p.cycles, "model_cycles": round(m), "error": m / p.cycles - 1,
               "measured": False}
        if measure is not None:
            try:
                r = measure(p)
            except RuntimeError as exc:
                row.update(failed=str(exc))
            else:
                row.update(rtl_cycles=r["cycles"], error=m / r["cycles"] - 1, measured=True,
                           recorded_cycles=p.cycles, drift=r["cycles"] / p.cycles - 1, wall_s=r["wall_s"])
        rows.append(row)
        if on_row:
            on_row(i, len(points), row)
    ran = [r for r in rows if not r.get("failed")]
    mae = sum(abs(r["error"]) for r in ran) / len(ran) if ran else float("nan")
    return rows, mae
