"""One collective end to end on emulated NPUs: the job behind ``syncfabric run`` and ``syncfabric demo``.

Every endpoint gets a send buffer of seeded random data. Backends:

``verilator``/``icarus``  one ACE engine RTL per NPU (configuration ``small``, ``medium`` or ``paper``, see
                        :meth:`~syncfabric.hdl.ace.config.AceConfig.profile`) on the topology's link models,
                        each with an AXI memory, driven by the host driver under cocotb: the driver writes the
                        inputs, posts one descriptor per NPU and waits for the completions; every output byte is
                        compared with the golden executor running the same program, and the engines' counters
                        give cycles, link and memory traffic.
``amaranth``            the same system and driver flow in Amaranth's simulator (slow; no external tools).
``golden``              the numpy golden executor alone, checked against a plain numpy reference (exact for
                        integers and max/min, within the accumulated rounding bound for float sums).
"""

import numbers
import time

import numpy as np

from ..sim.golden import topology as topo_mod
from ..sim.golden.algorithms import default_algorithm, generate
from ..sim.golden.arith import float32_from_bf16
from ..sim.golden.chunking import COLLECTIVES, normalize_collective
from ..sim.golden.executor import execute
from ..sim.golden.inputs import make_inputs, random_inputs
from ..sim.golden.partitions import SPLITS
from ..sim.golden.types import DType, ReduceOp, dtype_bytes

__all__ = ["job_spec", "make_inputs", "run_golden", "run_collective", "format_summary", "count_for_bytes",
           "bound_cycles", "bandwidth_cycles", "memory_cycles", "passed", "measure_point", "BACKENDS"]

BACKENDS = ("verilator", "icarus", "amaranth", "golden")
ENGINE_BACKENDS = ("verilator", "icarus", "amaranth")
#: What the engine RTL runs: collectives and the topologies the system top wires.
ENGINE_COLLECTIVES = COLLECTIVES
ENGINE_TOPOLOGIES = ("ring", "bidir-ring", "torus", "switch")
#: Link latency (cycles) of ring links (ACE Table V's intra-package links); a torus's links default to its
#: per-dimension attributes (local 90 cycles at full rate, vertical/horizontal 500 cycles at 1/8 rate).
DEFAULT_LATENCY = 90
#: Most endpoints a job may have: programs name ranks in 9-bit step fields (docs/perf.md), so no collective
#: program exists for more (the performance model composes larger tori itself, without job_spec).
MAX_NPUS = 512
#: Most bytes in all endpoints' buffers together (--bytes x NPUs): every run draws its inputs and checks its
#: outputs in host memory with the golden model (executor buffers, a float64 reference), which peaks near 25
#: times this (6 GiB for fp16 sums).
MAX_TOTAL_BYTES = 256 << 20
#: Collectives that reduce, and so use ``op`` (the others move data only).
REDUCING_COLLECTIVES = ("allreduce", "reduce_scatter", "reduce")


def count_for_bytes(collective, nbytes, nranks, dtype):
    """NCCL ``count`` for a per-endpoint buffer of ``nbytes`` (nccl-tests' size convention)."""
    if collective == "barrier":
        return 0
    eb = dtype_bytes(dtype)
    per = nranks if collective in ("reduce_scatter", "allgather", "alltoall") else 1
    if nbytes <= 0 or nbytes % (eb * per):
        what = f"{eb}-byte {DType(dtype).name.lower()} elements"
        if per > 1:
            what += f" times {nranks} endpoints"
        raise ValueError(f"--bytes {nbytes} must be a positive multiple of {eb * per} ({what}) for {collective}")
    return nbytes // (eb * per)


def job_spec(collective, topology, nbytes, dtype, op, *, algorithm=None, root=0, chunk_bytes=None, seed=1,
             null_ranks=()):
    """Validate the parameters of a job and return them as a JSON-friendly dict. ``null_ranks``: ranks that
    make a null contribution (partial all-reduce: all-reduce, reduce-scatter or reduce with op sum)."""
    from ..sim.golden.executor import NULL_COLLECTIVES

    coll = normalize_collective(collective)
    topo = topo_mod.parse(topology)
    dtype, op = DType.parse(dtype), ReduceOp.parse(op)
    p = topo.n_endpoints
    if p > MAX_NPUS:
        raise ValueError(f"{topo.spec} has {p} endpoints; programs address at most {MAX_NPUS} ranks")
    if coll in ("broadcast", "reduce") and not 0 <= root < p:
        raise ValueError(f"--root {root} is not a rank of {topo.spec} (0..{p - 1})")
    null = sorted(set(int(r) for r in null_ranks))
    if null:
        if coll not in NULL_COLLECTIVES or op != ReduceOp.SUM:
            raise ValueError(f"--null-ranks (partial all-reduce) needs {', '.join(NULL_COLLECTIVES)} with op sum, "
                             f"not {coll} with {op.name.lower()}")
        bad = [r for r in null if not 0 <= r < p]
        if bad:
            raise ValueError(f"--null-ranks {bad} are not ranks of {topo.spec} (0..{p - 1})")
    if chunk_bytes is not None and (chunk_bytes <= 0 or chunk_bytes % 64):
        raise ValueError(f"--chunk-bytes {chunk_bytes} must be a positive multiple of 64")
    count = count_for_bytes(coll, nbytes, p, dtype)
    if coll != "barrier" and nbytes * p > MAX_TOTAL_BYTES:      # a barrier ignores --bytes
        raise ValueError(f"--bytes {nbytes} on {p} endpoints is {nbytes * p} bytes in all; at most "
                         f"{MAX_TOTAL_BYTES >> 20} MiB over all endpoints ({MAX_TOTAL_BYTES // p} bytes each on "
                         f"{topo.spec}): the golden model that checks the run holds them in host memory")
    algo = algorithm or default_algorithm(coll, topo)
    return {"collective": coll, "topology": topo.spec, "algorithm": algo, "npus": p, "bytes": nbytes,
            "count": count, "dtype": dtype.name.lower(), "op": op.name.lower(), "root": root,
            "chunk_bytes": chunk_bytes, "seed": seed, "null_ranks": null}



def _programs(spec):
    return generate(spec["collective"], spec["algorithm"], spec["topology"], root=spec["root"])


def run_golden(spec, inputs=None, reducer=None):
    """Execute the job's programs in the golden executor; ``reducer`` replaces the golden reduction."""
    inputs = make_inputs(spec) if inputs is None else inputs
    kwargs = {"reducer": reducer} if reducer is not None else {}
    kwargs["null_ranks"] = spec.get("null_ranks", ())
    return execute(_programs(spec), topo_mod.parse(spec["topology"]), inputs, DType.parse(spec["dtype"]),
                   ReduceOp.parse(spec["op"]), spec["count"], spec["chunk_bytes"] or 65536, **kwargs)


def _as_float64(buf, dtype):
    if dtype == DType.FP32:
        return buf.view(np.float32).astype(np.float64)
    if dtype == DType.FP16:
        return buf.view(np.float16).astype(np.float64)
    if dtype == DType.BF16:
        return float32_from_bf16(buf.view(np.uint16)).astype(np.float64)
    return buf.view(np.int32).astype(np.int64)


def reference_mismatches(spec, inputs, result):
    """Elements of the golden result that disagree with a plain numpy reference of the collective.

    Integers and max/min must match exactly; float sums must lie within ``(P-1) * eps * sum|x|`` (the bound
    of any summation order) of the float64 sum.
    """
    dtype, op = DType.parse(spec["dtype"]), ReduceOp.parse(spec["op"])
    p, coll, count, root = spec["npus"], spec["collective"], spec["count"], spec["root"]
    null = set(spec.get("null_ranks", ()))
    xs = [None if x is None else _as_float64(np.ascontiguousarray(x).view(np.uint8), dtype) * (r not in null)
          for r, x in enumerate(inputs)]
    outs = [_as_float64(result.outputs[r], dtype) if result.outputs[r].size else None for r in range(p)]
    eps = {DType.FP32: 2.0 ** -24, DType.FP16: 2.0 ** -11, DType.BF16: 2.0 ** -8, DType.INT32: 0.0}[dtype]

    def reduced(arrays):
        stack = np.stack(arrays)
        if op == ReduceOp.SUM:
            if dtype == DType.INT32:
                return (stack.sum(axis=0) + 2**31) % 2**32 - 2**31, 0
            return stack.sum(axis=0), (p - 1) * eps * np.abs(stack).sum(axis=0)
        return (stack.max(axis=0) if op == ReduceOp.MAX else stack.min(axis=0)), 0

    bad = 0
    if coll in ("allreduce", "reduce"):
        ref, tol = reduced(xs)
        for r in range(p):
            if outs[r] is not None:
                bad += int(np.count_nonzero(np.abs(outs[r] - ref) > tol))
    elif coll == "reduce_scatter":
        ref, tol = reduced(xs)
        for r in range(p):
            sl = slice(r * count, (r + 1) * count)
            bad += int(np.count_nonzero(np.abs(outs[r] - ref[sl]) > (tol[sl] if np.ndim(tol) else tol)))
    elif coll == "allgather":
        ref = np.concatenate(xs)
        bad += sum(int(np.count_nonzero(outs[r] != ref)) for r in range(p))
    elif coll == "alltoall":
        for r in range(p):
            ref = np.concatenate([xs[s][r * count:(r + 1) * count] for s in range(p)])
            bad += int(np.count_nonzero(outs[r] != ref))
    elif coll == "broadcast":
        bad += sum(int(np.count_nonzero(outs[r] != xs[root])) for r in range(p))
    return bad

def _ratio(x):
    """A ratio for the JSON report: None instead of NaN (nothing was read, e.g. a barrier)."""
    return None if x != x else x


def _traffic(res):
    return {
        "mem_read_bytes": list(res.mem_read_bytes),
        "mem_write_bytes": list(res.mem_write_bytes),
        "bytes_sent": list(res.bytes_sent),
        "bytes_sent_per_byte_read": _ratio(res.bytes_sent_per_byte_read),
        "link_bytes": {f"{r}:{port}": b for (r, port), b in sorted(res.link_bytes.items())},
        "messages": res.n_messages,
        "packets": res.n_packets,
        "chunks": res.n_chunks,
    }


def bandwidth_cycles(golden, links, beat_bytes):
    """The bandwidth term of a collective: the busiest directed link's payload (golden ``link_bytes``) at its
    rate of ``rate`` ``beat_bytes``-byte flits per cycle; ``links`` is
    :func:`~syncfabric.hdl.system.top.system_links` of the topology. For a ring all-reduce of S bytes per
    endpoint that is 2(P-1)/P * S/W (unidirectional) or (P-1)/P * S/W (bidirectional: each direction carries
    half); for reduce-scatter and all-gather (P-1)/P * S/W and half that."""
    rate = {(src, port): num / den for src, port, _, _, _, (num, den) in links}
    return max((b / beat_bytes / rate[key] for key, b in golden.link_bytes.items()), default=0.0)


def memory_cycles(golden, beat_bytes):
    """The NPU memory term: the most payload any endpoint reads or writes (golden ``mem_read_bytes`` /
    ``mem_write_bytes``) at one ``beat_bytes`` beat per cycle on each of the AXI read and write channels. When
    it exceeds :func:`bandwidth_cycles` the endpoint's memory port, not the links, limits the collective (a
    bidirectional ring whose memory port is as wide as one link)."""
    most = max(list(golden.mem_read_bytes) + list(golden.mem_write_bytes) + [0])
    return -(-most // beat_bytes)


def bound_cycles(golden, links, beat_bytes):
    """A lower bound on a collective's cycles: :func:`bandwidth_cycles` plus one hop's latency (the busiest
    link's last flit must still cross it). Chunk pipelining hides the other steps' latencies behind other
    chunks' data, so the textbook alpha-beta term (one latency per step) is not a bound; with enough data in
    flight the engine approaches this one."""
    return bandwidth_cycles(golden, links, beat_bytes) + path_latency(links)


def path_latency(links):
    """The longest one-hop path of ``links`` (:func:`~syncfabric.hdl.system.top.system_links`): the largest
    link latency, or through a switch the largest up-link plus the largest down-link latency."""
    from ..hdl.system.top import SWITCH
    up = [ln[4] for ln in links if ln[2] == SWITCH]
    down = [ln[4] for ln in links if ln[0] == SWITCH]
    if up:
        return max(up) + max(down)
    return max((ln[4] for ln in links), default=0)


def _check_engine_job(spec, backend):
    kind = spec["topology"].split(":")[0]
    if spec["collective"] not in ENGINE_COLLECTIVES or kind not in ENGINE_TOPOLOGIES:
        raise ValueError(f"the engine RTL runs {', '.join(ENGINE_COLLECTIVES)} on ring:N, bidir-ring:N, "
                         f"torus:LxVxH and switch:N topologies; {spec['collective']} on {spec['topology']} runs on "
                         f"--backend golden only")
    if backend not in ENGINE_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")


def engine_config_for(cfg, topology):
    """``cfg`` with as many link ports (a torus has 6, rings 2) and routing-table entries (ranks) as
    ``topology`` needs; on a switch one port with a landing channel per (source rank, FSM): ``rx_sources``
    the number of ranks rounded up to a power of two."""
    topo = topo_mod.parse(topology)
    if cfg.replay_flits and topo.routed:
        raise ValueError(f"link retransmission (replay_flits={cfg.replay_flits}) needs point-to-point links; "
                         f"{topology} goes through a switch: use replay_flits=0")
    out = cfg.replace(n_ports=max(cfg.n_ports, topo.n_ports), max_ranks=max(cfg.max_ranks, topo.n_endpoints))
    if topo.routed:
        out = out.replace(n_ports=topo.n_ports,
                          rx_sources=max(cfg.rx_sources, 1 << (topo.n_endpoints - 1).bit_length()))
    return out


def forwarded_bytes_to_npu_memory(job, counters):
    """NPU memory traffic beyond the collective's own buffers, from the engines' counters: per rank the
    payload read beyond its send buffer plus the payload written beyond its receive buffer (the golden
    program reads and writes each exactly once). A message forwarded through NPU memory instead of SRAM
    would show up here; the engine forwards in SRAM, so this is 0."""
    extra = 0
    for r, c in enumerate(counters):
        n_in = job.golden.mem_read_bytes[r]
        n_out = job.golden.mem_write_bytes[r]
        extra += max(0, c["PAYLOAD_RD_BYTES"] - n_in) + max(0, c["PAYLOAD_WR_BYTES"] - n_out)
    return int(extra)


def port_utilization(counters, links, cycles):
    """Per port index: flits sent / (cycles x rate), averaged over the ranks whose port has a link (the
    share of the port's bandwidth the run used)."""
    rate = {(src, port): num / den for src, port, _, _, _, (num, den) in links if src >= 0}
    per = {}
    for (src, port), r in rate.items():
        per.setdefault(port, []).append(counters[src]["TX_FLITS"][port] / (cycles * r) if cycles else 0.0)
    return {port: round(sum(v) / len(v), 4) for port, v in sorted(per.items())}


def phase_link_use(job, counters, links, beat_bytes):
    """Per program phase of the collective's program (one row each, in order): the phase's name, its payload
    on the links (golden ``phase_link_bytes``, all ranks), its bandwidth term (its busiest directed link's
    payload at that link's rate, as :func:`bandwidth_cycles` for the whole collective), and from the engines'
    per-phase counters the cycles a chunk was in the phase (``busy_cycles``, mean over ranks), the flits its
    messages sent, and its link efficiency: flits / (busy cycles x the summed rate of the ports the phase
    sends on), the share of its links' bandwidth the phase used while it held chunks (mean over the ranks
    that send in it). Phases that share ports (the local rings of a hierarchical all-reduce's first and
    last phases) are told apart by the messages' ``phase`` header field."""
    rate = {(src, port): num / den for src, port, _, _, _, (num, den) in links}
    golden = job.golden
    prog = job.programs[0]
    out = []
    for pi, ph in enumerate(prog.phases):
        mine = {(r, port): b for (q, r, port), b in golden.phase_link_bytes.items() if q == pi and b}
        bw = max((b / beat_bytes / rate[key] for key, b in mine.items()), default=0.0)
        eff, busy = [], []
        for r, c in enumerate(counters):
            ports_rate = sum(rate[(r, port)] for (q, port) in mine if q == r)
            b = c["PHASE_BUSY"][pi]
            busy.append(b)
            if ports_rate and b:
                eff.append(c["PHASE_FLITS"][pi] / (b * ports_rate))
        out.append({"phase": pi, "name": ph.name, "bytes": int(sum(mine.values())),
                    "bandwidth_cycles": round(bw, 1),
                    "busy_cycles": round(sum(busy) / len(busy), 1) if busy else 0.0,
                    "flits": int(sum(c["PHASE_FLITS"][pi] for c in counters)),
                    "link_efficiency": round(sum(eff) / len(eff), 4) if eff else None})
    return out


def _engine_result(spec, cfg, job, links, statuses, mismatches, guards, job_cycles, counters, window_cycles,
                   sim_wall, conflicts):
    golden = job.golden
    p = spec["npus"]
    bound = bound_cycles(golden, links, cfg.beat_bytes)
    bw = bandwidth_cycles(golden, links, cfg.beat_bytes)
    busiest = max(golden.link_bytes.values(), default=0)
    tx = [sum(c["TX_FLITS"]) for c in counters]
    return {
        "chunk_bytes": job.chunk_bytes,
        "status": statuses,
        "mismatches": int(sum(mismatches)),
        "mismatches_per_npu": [int(x) for x in mismatches],
        "guard_bytes_touched": int(sum(guards)),
        "guard_bytes_per_npu": [int(x) for x in guards],
        "sram_conflicts": int(sum(bool(c) for c in conflicts)),
        "cycles": int(job_cycles),
        "bound_cycles": round(bound, 1),
        "bandwidth_cycles": round(bw, 1),
        "memory_cycles": memory_cycles(golden, cfg.beat_bytes),
        "link_efficiency": round(bound / job_cycles, 4) if job_cycles else 0.0,
        "busiest_link_bytes": int(busiest),
        "mem_read_bytes": [c["PAYLOAD_RD_BYTES"] for c in counters],
        "mem_write_bytes": [c["PAYLOAD_WR_BYTES"] for c in counters],
        "desc_read_bytes": [c["DESC_RD_BYTES"] for c in counters],
        "cpl_write_bytes": [c["CPL_WR_BYTES"] for c in counters],
        "golden_mem_read_bytes": list(golden.mem_read_bytes),
        "golden_mem_write_bytes": list(golden.mem_write_bytes),
        "tx_flits": tx,
        "rx_crc_errors": [list(c["RX_CRC_ERRS"]) for c in counters],
        "link_replays": [list(c["TX_REPLAYS"]) for c in counters],
        "link_resent_flits": [list(c["TX_RESENT"]) for c in counters],
        "alu_beats": [c["ALU_BEATS"] for c in counters],
        "stalls": [c["STALL"] for c in counters],
        "steps": [c["STEPS"] for c in counters],
        "step_gap": [c["STEP_GAP"] for c in counters],
        "step_gap_per_step": (round(sum(c["STEP_GAP"] for c in counters) / sum(c["STEPS"] for c in counters), 3)
                              if sum(c["STEPS"] for c in counters) else None),
        "bytes_sent_per_byte_read": _ratio(golden.bytes_sent_per_byte_read),
        "flit_bytes_sent_per_byte_read": (round(sum(tx) * cfg.beat_bytes / sum(c["PAYLOAD_RD_BYTES"]
                                                                              for c in counters), 4)
                                          if sum(c["PAYLOAD_RD_BYTES"] for c in counters) else None),
        "forwarded_bytes_to_npu_memory": forwarded_bytes_to_npu_memory(job, counters),
        "port_utilization": port_utilization(counters, links, job_cycles),
        "phases": phase_link_use(job, counters, links, cfg.beat_bytes),
        "chunks": golden.n_chunks, "messages": golden.n_messages, "packets": golden.n_packets,
        "sim_cycles": int(window_cycles),
        "sim_cycles_per_s": round(window_cycles / sim_wall, 1) if sim_wall else 0.0,
        "npus_x_cycles_per_s": round(p * window_cycles / sim_wall, 1) if sim_wall else 0.0,
    }


def _run_engine(spec, cfg, backend, latency, rate, seed, pause, progress, build_tag, buffers, fsms,
                npu_mem="cocotb", partitions=None, scheduler=None, threads="auto", faults=None,
                sram_split="residence"):
    from ..hdl.system.top import system_links
    from .job import CollectiveJob

    links = system_links(spec["topology"], latency, rate)
    job = CollectiveJob(spec, cfg)
    t0 = time.monotonic()
    if backend == "amaranth":
        from .transports.ace.amaranth_sim import run_system_amaranth

        if progress:
            print(f"simulating {spec['npus']} engines in Amaranth's simulator (slow: about 100 cycles/s)",
                  flush=True)
        rs = run_system_amaranth(cfg, spec["topology"], lambda r: [job], latency=latency, rate=rate,
                                 seed=seed, ready_prob=1.0 - pause, timeout_cycles=10**7, buffers=buffers,
                                 fsms=fsms, sram_split=sram_split)
        wall = time.monotonic() - t0
        res = _engine_result(spec, cfg, job, links, [r.completions[0]["status_name"] for r in rs],
                              [r.mismatches[0] for r in rs], [r.guard_touched[0] for r in rs],
                              max(r.completions[0]["cycles"] for r in rs), [r.counters for r in rs],
                             max(r.cycles for r in rs), wall, [r.sram_conflict for r in rs])
        res["contributors"] = [r.contributors[0][0] for r in rs]
        res["expected_contributors"] = [r.contributors[0][1] for r in rs]
        return res, {"sim": "amaranth", "build_s": 0.0}
    from .transports.ace import run_system
    from .transports.harness import run_dir_for
    from ..sim.progress import ProgressLine

    tag = build_tag or (f"run-{backend}-{cfg_digest(cfg)}-{spec['topology']}"
                        + ("-hdlmem" if npu_mem == "hdl" else ""))
    log = run_dir_for(tag, backend) / "sim.log"
    bound = bound_cycles(job.golden, links, cfg.beat_bytes)
    line = ProgressLine(enabled=bool(progress))
    where = log if not partitions else log.with_name(f"sim-p<k>.log (k < {partitions})")
    line.update(f"building the {backend} model of {spec['npus']} engines (cached after the first build; "
                f"simulator output in {where})")
    line.done()

    def show(cycle, rate_cps):
        line.update(f"  simulating: cycle {cycle:,} (bound {bound:,.0f}) at {rate_cps:,.0f} cycles/s")

    timeout = max(10**6, int(20 * bound))
    options = dict(sim=backend, latency=latency, rate=rate, seed=seed, pause=pause, check=False,
                   timeout_cycles=timeout, buffers=buffers, fsms=fsms, build_tag=tag, log_file=log,
                   npu_mem=True if npu_mem == "hdl" else None, threads=threads, sram_split=sram_split)
    if faults:
        options.update({f"link_{k}": v for k, v in faults.items()})
    if partitions:
        from .transports.ace.partition import run_partitioned

        def show_windows(cycle, wall):
            line.update(f"  simulating in {partitions} partitions: cycle {cycle:,} (bound {bound:,.0f}) at "
                        f"{cycle / max(wall, 1e-9):,.0f} cycles/s")

        out = run_partitioned(cfg, spec["topology"], [{"spec": spec}], partitions=partitions, scheduler=scheduler,
                              progress=show_windows if progress else None, **options)
    else:
        out = run_system(cfg, spec["topology"], [{"spec": spec}], progress=show if progress else False, **options)
    line.done()
    if "jobs" not in out:
        raise RuntimeError(f"the {backend} testbench produced no result: {out.get('error', 'no details')}")
    j = out["jobs"][0]
    res = _engine_result(spec, cfg, job, links, j["status"], j["mismatches"], j["guard_touched"],
                         j.get("cycles", 0), out["counters"], out["window_cycles"],
                         out.get("window_wall_s") or out["wall_s"], out.get("sram_conflict", []))
    res["contributors"] = j["contributors"]
    res["expected_contributors"] = j["expect_contributors"]
    if out.get("switch_hold_cycles") is not None:
        # a switch: the cycles it held an up-link (its queues a round trip deep, docs/engine.md section 5)
        res["switch_hold_cycles"] = out["switch_hold_cycles"]
    if partitions:
        res["partitions"] = [{k: p[k] for k in ("ranks", "windows", "crossed", "exchange_s")}
                             for p in out["partitions"]]
        res["partition_backend"], res["partition_window"] = out["backend"], out["window"]
    if out.get("error"):
        res["error"] = out["error"]
    return res, out["run"]


def cfg_digest(cfg):
    """A short stable name of an engine configuration (build directories)."""
    import hashlib
    import json

    return hashlib.sha1(json.dumps(cfg.as_dict(), sort_keys=True).encode()).hexdigest()[:8]


#: ``chunk_bytes`` values that are not sizes: ``auto`` (the default) lets the driver choose the chunk for the
#: collective (:mod:`syncfabric.host.chunksize`), ``max`` takes the largest the engine runs the program with.
CHUNK_CHOICES = ("auto", "max")


def _choose_chunk(spec, cfg, choose, latency, rate, buffers, fsms):
    """The ``chunk_choice`` of a run: the chunk ``choose`` (one of :data:`CHUNK_CHOICES`) gives ``spec``'s job on
    engines of ``cfg``, and the model's cycles for each candidate (``auto`` only)."""
    from .chunksize import choose_chunk_bytes, chunk_candidates

    head = generate(spec["collective"], spec["algorithm"], topo_mod.parse(spec["topology"]), root=spec["root"])[0]
    if choose == "max":
        return {"rule": "max", "chunk_bytes": chunk_candidates(cfg, head)[0]}
    c = choose_chunk_bytes(cfg, head, spec["collective"], spec["topology"], spec["bytes"],
                           algorithm=spec["algorithm"], latency=latency, rate=rate, buffers=buffers, fsms=fsms)
    return {"rule": "auto", **c.as_dict()}


def run_collective(collective="allreduce", topology="ring:4", nbytes=65536, dtype="fp32", op="sum", *,
                   algorithm=None, root=0, chunk_bytes=None, backend="verilator", config="medium",
                   latency=None, rate=None, seed=1, pause=0.0, progress=True, build_tag=None,
                   buffers=None, fsms=None, null_ranks=(), npu_mem="cocotb", partitions=None, scheduler=None,
                   threads="auto", fault=None, sram_split="residence"):
    """Run one collective end to end and return a result dict (see the module docstring for the backends).

    ``config``: an engine configuration name (:meth:`AceConfig.profile`) or an :class:`AceConfig` (given as
    many link ports and routing entries as the topology needs, and landing buffers deep enough for the
    collective's programs: ``engine_config_for_job``); ``latency``/``rate``: every link's latency in cycles and rate in
    flits per cycle (None: the topology's, e.g. a torus's slow inter-package dimensions); ``pause``: probability that an NPU memory's AXI channel stalls in a cycle; ``chunk_bytes``:
    the chunk size in bytes, or ``"auto"`` (None, the default: the driver's choice for the collective,
    :mod:`syncfabric.host.chunksize`) or ``"max"`` (the largest the engine runs the program with; the golden
    backend runs 64 KiB unless given a size); ``buffers``/``fsms``: use only
    that many of the engine's chunk buffers / FSMs (default all); ``null_ranks``: ranks that make a null
    contribution (partial all-reduce); ``npu_mem``: ``"cocotb"`` (the NPU memories are cocotbext-axi models
    served by Python every cycle) or ``"hdl"`` (an HDL RAM per endpoint inside the simulated system, loaded
    and read through a back door; Verilator and Icarus only); ``partitions``: simulate the system as that
    many simulator processes cut at its links (:mod:`syncfabric.host.transports.ace.partition`; point-to-point
    topologies, Verilator and Icarus) on ``scheduler`` (None: a Dask ``LocalCluster``, or a Dask scheduler address);
    ``threads``: Verilator simulation threads per simulator process (``"auto"``: the idle cores, shared among
    the partitions, 1 to 4; :func:`syncfabric.host.transports.harness.verilator_threads`); ``fault``: links that flip
    data bits or stall at random (``"flip=1e-3,stall=0.01"``: per flit / per cycle; Verilator and Icarus, one process:
    :func:`syncfabric.host.faults.parse_faults`), the result then classes each rank's completion
    (``faults``); ``sram_split``: how the driver splits the chunk buffers among the phases
    (:data:`~syncfabric.sim.golden.partitions.SPLITS`: ``"residence"``, or the ACE paper's ``"ace"``)."""
    from ..hdl.ace.config import AceConfig

    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if not 0.0 <= pause < 1.0:
        raise ValueError(f"--pause {pause} must be in [0, 1)")
    if npu_mem not in ("cocotb", "hdl"):
        raise ValueError(f"--npu-mem {npu_mem!r}: expected cocotb or hdl")
    if npu_mem == "hdl" and backend not in ("verilator", "icarus"):
        raise ValueError(f"--npu-mem hdl needs a Verilog simulator backend, not {backend}")
    if (partitions is not None or scheduler is not None) and backend not in ("verilator", "icarus"):
        raise ValueError(f"--partitions/--scheduler need a Verilog simulator backend, not {backend}")
    if scheduler is not None and partitions is None:
        partitions = 2
    if sram_split not in SPLITS:
        raise ValueError(f"--sram-split {sram_split!r}: expected one of {', '.join(SPLITS)}")
    faults = None
    if fault:
        from .faults import check_faults_recoverable, parse_faults

        faults = parse_faults(fault, need_flip=False)
        if backend not in ("verilator", "icarus") or partitions:
            raise ValueError("--fault needs a Verilog simulator backend (verilator or icarus) in one process")
        cfg0 = config if isinstance(config, AceConfig) else AceConfig.profile(config)
        check_faults_recoverable(faults, cfg0)
    from .transports.harness import verilator_threads

    verilator_threads(threads)              # a bad value fails here, before any build (whatever the backend)
    if chunk_bytes is not None and not isinstance(chunk_bytes, numbers.Integral) and chunk_bytes not in CHUNK_CHOICES:
        raise ValueError(f"--chunk-bytes {chunk_bytes!r}: expected a size or one of {', '.join(CHUNK_CHOICES)}")
    choose = chunk_bytes if chunk_bytes in CHUNK_CHOICES else "auto" if chunk_bytes is None else None
    spec = job_spec(collective, topology, nbytes, dtype, op, algorithm=algorithm, root=root, null_ranks=null_ranks,
                    chunk_bytes=None if choose else chunk_bytes, seed=seed)
    if spec["collective"] not in REDUCING_COLLECTIVES and spec["op"] != "sum":
        # job_spec itself stays lenient: the engine testbenches post such jobs to check the engine ignores op
        raise ValueError(f"--op {spec['op']}: {spec['collective']} does not reduce; --op applies to "
                         f"{', '.join(REDUCING_COLLECTIVES)}")
    t0 = time.monotonic()
    result = {**spec, "backend": backend}
    if backend == "golden":
        inputs = make_inputs(spec)
        res = run_golden(spec, inputs)
        result.update(_traffic(res))
        result["chunk_bytes"] = spec["chunk_bytes"] or 65536
        result["mismatches"] = reference_mismatches(spec, inputs, res)
        result["contributors"] = list(res.contributors)
        result["checked_against"] = "numpy reference"
    else:
        _check_engine_job(spec, backend)
        cfg = config if isinstance(config, AceConfig) else AceConfig.profile(config)
        cfg = engine_config_for(cfg, spec["topology"])
        from .job import engine_config_for_job
        if choose:
            result["chunk_choice"] = _choose_chunk(spec, cfg, choose, latency, rate, buffers, fsms)
            spec["chunk_bytes"] = result["chunk_bytes"] = result["chunk_choice"]["chunk_bytes"]
        cfg = engine_config_for_job(cfg, spec)
        result["config"] = config if isinstance(config, str) else "custom"
        result["engine"] = cfg.as_dict()
        result["latency"] = latency
        result["rate"] = rate
        for name, v, top in (("--buffers", buffers, cfg.n_buffers), ("--fsms", fsms, cfg.n_fsms)):
            if v is not None and not 1 <= v <= top:
                raise ValueError(f"{name} {v} out of range: the {result['config']} engine has {top}")
        result["buffers"] = cfg.n_buffers if buffers is None else buffers
        result["fsms"] = cfg.n_fsms if fsms is None else fsms
        result["sram_split"] = sram_split
        res, run = _run_engine(spec, cfg, backend, latency, rate, seed, pause, progress, build_tag, buffers, fsms,
                               npu_mem, partitions, scheduler, threads, faults, sram_split)
        result.update(res)
        model = _model_of(spec, cfg, res["chunk_bytes"], latency, rate, buffers, fsms, sram_split,
                          faults or pause)
        if model is not None:
            result["model"] = model
        if faults:
            from .faults import classify

            kinds = [classify(s, m, g) for s, m, g in zip(res["status"], res["mismatches_per_npu"],
                                                           res["guard_bytes_per_npu"])]
            result["faults"] = {**faults, "completions": kinds,
                                "corrupted_packets": sum(sum(c) for c in res["rx_crc_errors"]),
                                "replays": sum(sum(c) for c in res["link_replays"]),
                                "resent_flits": sum(sum(c) for c in res["link_resent_flits"])}
        result["build_s"] = round(run.get("build_s", 0.0), 1)
        result["threads"] = run.get("threads", 1)
        result["checked_against"] = "golden executor, byte for byte"
    result["wall_s"] = round(time.monotonic() - t0, 3)
    return result


def _model_of(spec, cfg, chunk_bytes, latency, rate, buffers, fsms, sram_split, disturbed):
    """The performance model's figures for an engine run (:func:`syncfabric.sim.perf.calibrate.predict`): the
    cycles, and per program phase the cycles a chunk was in it, the figure the engine's ``PHASE_BUSY``
    counters measure. None for runs the model does not describe: a barrier, null
    contributions, the ACE paper's SRAM split, a memory that stalls or links with faults (``disturbed``), an
    algorithm it has no profile of."""
    if spec["collective"] == "barrier" or spec["null_ranks"] or sram_split != "residence" or disturbed:
        return None
    from ..sim.perf.calibrate import predict

    try:
        m = predict(cfg, spec["collective"], spec["topology"], spec["bytes"], latency, rate, buffers, fsms,
                    spec["algorithm"], chunk_bytes)
    except (KeyError, NotImplementedError, ValueError):
        return None
    return {"cycles": round(m.time), "phase_busy": [round(b) for b in m.phase_busy]}


def _choice_note(choice):
    """How the chunk was chosen, for the summary (empty when it was given)."""
    if not choice:
        return ""
    if choice["rule"] == "max":
        return " (the largest the engine runs the program with)"
    cands = choice["model_cycles"]
    if len(cands) == 1:
        return " (the largest; smaller ones would make messages under the floor)"
    return " (the driver's choice; model cycles " + ", ".join(f"{c} B {t}" for c, t in cands.items()) + ")"


def format_summary(r):
    from .faults import FAULT_KINDS
    """A human-readable summary of a :func:`run_collective` result."""
    lines = [
        f"{r['collective']} on {r['topology']} ({r['algorithm']}), {r['npus']} NPUs, {r['bytes']} B per NPU, "
        f"{r['dtype']} {r['op']}, backend {r['backend']}"
        + (f", engine configuration {r['config']}, link latency "
           + (f"{r['latency']} cycles" if r.get("latency") is not None else "and rate: the topology's")
           if "config" in r else ""),
        f"  chunk {r['chunk_bytes']} B{_choice_note(r.get('chunk_choice'))}: chunks {r['chunks']}, "
        f"messages {r['messages']}, packets {r['packets']}, "
        f"bytes sent per byte read "
        + (f"{r['bytes_sent_per_byte_read']:.4f}" if r["bytes_sent_per_byte_read"] is not None else "- (none read)"),
        f"  NPU memory per endpoint: read {min(r['mem_read_bytes'])}..{max(r['mem_read_bytes'])} B, "
        f"written {min(r['mem_write_bytes'])}..{max(r['mem_write_bytes'])} B",
    ]
    if "cycles" in r:
        lines.append(f"  {r['cycles']} cycles (descriptor fetch to completion); bound {r['bound_cycles']:.0f} "
                     f"cycles (busiest link {r['busiest_link_bytes']} B: {r['bandwidth_cycles']:.0f} cycles, "
                     f"+ one hop's latency): link efficiency {r['link_efficiency']:.3f}")
        model = r.get("model")
        if model and r["cycles"]:
            lines.append(f"  the performance model (sim/perf): {model['cycles']} cycles "
                         f"({model['cycles'] / r['cycles'] - 1:+.1%})")
        util = ", ".join(f"{p}: {u:.3f}" for p, u in r["port_utilization"].items())
        lines.append(f"  link use per port (flits / (cycles x rate), mean over ranks): {util}; forwarded bytes "
                     f"through NPU memory: {r['forwarded_bytes_to_npu_memory']}")
        if r.get("switch_hold_cycles") is not None:
            lines.append(f"  switch: held an up-link in {r['switch_hold_cycles']} cycles (its queues full to the "
                         f"round trip's margin)")
        for ph in r.get("phases", ()) if len(r.get("phases", ())) > 1 else ():
            eff = "-" if ph["link_efficiency"] is None else f"{ph['link_efficiency']:.3f}"
            in_model = ""
            if model and ph["phase"] < len(model["phase_busy"]):
                in_model = f", model {model['phase_busy'][ph['phase']]}"
            lines.append(f"  phase {ph['phase']} ({ph['name']}): {ph['bytes']} B on the links, bandwidth term "
                         f"{ph['bandwidth_cycles']:.0f} cycles, a chunk in it {ph['busy_cycles']:.0f} cycles "
                         f"(mean over ranks{in_model}), link efficiency while busy {eff}")
        if r.get("step_gap_per_step") is not None:
            stalls = {}
            for per_rank in r["stalls"]:
                for cause, n in per_rank.items():
                    stalls[cause] = stalls.get(cause, 0) + n
            waits = ", ".join(f"{c} {n // len(r['stalls'])}" for c, n in stalls.items() if n)
            lines.append(f"  FSMs: {sum(r['steps'])} steps, {r['step_gap_per_step']:.2f} idle cycles per step between "
                         f"steps (STEP_GAP / STEPS); cycles a ready step waited, mean over ranks: {waits or 'none'}")
        if r["memory_cycles"] > r["bandwidth_cycles"]:
            lines.append(f"  the NPU memory port bounds this run: {r['memory_cycles']} cycles to read or write "
                         f"{max(r['mem_read_bytes'] + r['mem_write_bytes'])} B at one beat per cycle")
        lines.append(f"  simulation: {r['sim_cycles']} cycles at {r['sim_cycles_per_s']:.0f} cycles/s from the first "
                     f"doorbell to the last completion (build {r['build_s']:.0f} s"
                     + (f", {r['threads']} Verilator threads" + (" per process" if r.get("partitions") else "")
                        if r.get("threads", 1) > 1 else "") + ")")
        if r.get("partitions"):
            parts = r["partitions"]
            lines.append(f"  partitioned: {len(parts)} simulator processes on a {r['partition_backend']}, "
                         f"{parts[0]['windows']} windows of {r['partition_window']} cycles, "
                         f"{sum(p['crossed'] for p in parts)} flits and credits crossed the cuts, "
                         f"{max(p['exchange_s'] for p in parts):.1f} s in exchanges (slowest partition)")
        if any(s != "OK" for s in r["status"]):
            lines.append(f"  completion status per NPU: {r['status']}")
        if r.get("faults"):
            f = r["faults"]
            kinds = f["completions"]
            lines.append(f"  faults ({', '.join(f'{k}={f[k]:g}' for k in FAULT_KINDS if k in f)}; stall per "
                         f"cycle, the others per flit): {f['corrupted_packets']} corrupted packets, "
                         f"{f['replays']} link replays ({f['resent_flits']} flits sent again); completions "
                         + ", ".join(f"{k} {kinds.count(k)}" for k in ("exact", "error", "silent", "hung"))
                         + " (silent: OK with wrong bytes, must be 0)")
    if r.get("null_ranks"):
        lines.append(f"  partial all-reduce: null ranks {r['null_ranks']}; contributors per NPU "
                     f"{r.get('contributors')}" + (f" (golden {r['expected_contributors']})"
                                                   if "expected_contributors" in r else ""))
    if r.get("error"):
        lines.append(f"  testbench: {r['error']}")
    verdict = "PASS" if passed(r) else "FAIL"
    lines.append(f"  {verdict}: {r['mismatches']} mismatches against the {r['checked_against']}; "
                 f"{r['wall_s']:.2f} s")
    return "\n".join(lines)


def measure_point(point, backend="verilator", threads=1):
    """Run a calibration point's job (:class:`~syncfabric.sim.perf.calibrate.RtlPoint`) on the engine RTL
    (``syncfabric run``'s path, NPU memories in HDL) and return the run's result; raises RuntimeError when the
    run did not pass (a byte wrong, a status not OK)."""
    r = run_collective(**point.run_kwargs(), backend=backend, npu_mem="hdl", threads=threads, progress=False)
    if not passed(r):
        raise RuntimeError(f"{point.run_command}: the RTL run failed (status {r['status']}, "
                           f"{r['mismatches']} bytes wrong)")
    return r


def passed(r):
    """True when every NPU completed OK, every byte matched, nothing outside the buffers was written and no
    engine saw an SRAM bank conflict."""
    return r["mismatches"] == 0 and r.get("guard_bytes_touched", 0) == 0 and not r.get("error") and \
        r.get("contributors") == r.get("expected_contributors", r.get("contributors")) and \
        r.get("sram_conflicts", 0) == 0 and \
        all(s == "OK" for s in r.get("status", ["OK"]))
