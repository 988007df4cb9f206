"""Fault-injection campaigns behind ``syncfabric bench faults``: random collectives on a system whose links flip
data bits, stall, and (on engines with link retransmission) lose or duplicate flits at random, every rank's
result checked against the golden model.

A collective on a rank is one *completion*. Each is classified:

``exact``   status OK and every output byte equal to the golden model's;
``error``   any other status (the engine reported the fault: ``LINK_CRC`` where a packet failed its CRC or
            arrived stomped, ``PROTOCOL`` where a message came poisoned);
``silent``  status OK with a wrong or stray byte: silent corruption, which must never happen;
``hung``    no completion (a batch that did not finish within its cycle budget counts all its collectives).

Corrupted packets are the link CRC errors the engines counted (``RX_CRC_ERRS``; a stomped packet is not its
link's fault and is not counted); replays and flits sent again are the link retransmission's (``TX_REPLAYS``,
``TX_RESENT``): with it every fault is recovered on its link and every completion should be exact. The campaign runs in batches, one simulation per batch, the collectives of a
batch back to back on the same engines, so a collective after a failed one also shows that nothing was left
wedged. The figures are printed, never asserted here; the command exits non-zero if any completion was silent
or hung.
"""

import random
import time

__all__ = ["FAULT_KINDS", "check_faults_recoverable", "classify", "fault_campaign", "parse_faults", "report"]

#: The faults the link models inject (drawn by LFSRs in the models, :class:`~syncfabric.hdl.system.link.Link`,
#: in the order of :data:`~syncfabric.hdl.system.link.LINK_FAULTS`).
FAULT_KINDS = {"flip": "a random data bit of a flit the link carries is flipped (probability per flit)",
               "stall": "the link holds its ready low (probability per cycle)",
               "drop": "a flit the link carries is lost (probability per flit; needs link retransmission)",
               "dup": "a flit the link carries arrives twice (probability per flit; needs link retransmission)"}
#: Faults the engine can only recover, not report: without retransmission a lost flit leaves a message short.
LOSSY = ("drop", "dup")
#: How to turn link retransmission on (in every error that asks for it).
RETRANSMIT_HINT = ("give the engines a replay buffer covering the link's round trip, e.g. replay_flits=256 on "
                   "90-cycle links (docs/engine.md section 15)")

_COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce")


def parse_faults(text, need_flip=True):
    """``"flip=1e-3,stall=0.01"`` -> ``{"flip": 0.001, "stall": 0.01}``; a one-line ValueError otherwise (also,
    when ``need_flip``, without a fault that damages packets: flip, drop or dup)."""
    out = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        name, sep, value = item.partition("=")
        if not sep or name not in FAULT_KINDS:
            raise ValueError(f"--fault {item!r}: expected KIND=PROBABILITY with KIND one of "
                             f"{', '.join(FAULT_KINDS)}")
        try:
            p = float(value)
        except ValueError:
            raise ValueError(f"--fault {item!r}: {value!r} is not a probability") from None
        if not 0 <= p < 1:
            raise ValueError(f"--fault {item!r}: the probability must be in [0, 1)")
        out[name] = p
    if need_flip and not any(out.get(k) for k in ("flip", "drop", "dup")):
        raise ValueError("--fault needs flip=P, drop=P or dup=P with P > 0 (the campaign is about damaged packets)")
    if not any(out.values()):
        raise ValueError("--fault: give at least one fault with a probability above 0")
    return out


def check_faults_recoverable(faults, cfg):
    """A one-line ValueError when ``faults`` lose or duplicate flits and engine configuration ``cfg`` has no
    link retransmission (the message would stay short: the collective hangs instead of failing)."""
    lossy = [k for k in LOSSY if faults.get(k)]
    if lossy and not cfg.replay_flits:
        raise ValueError(f"--fault {lossy[0]}=...: lost or duplicated flits are recovered only by link "
                         f"retransmission: {RETRANSMIT_HINT}, --engine replay_flits=N")


def _jobs(rng, topology, n, max_bytes):
    """``n`` random collectives (type, element type, size up to ``max_bytes`` per rank, root), tags 1..n."""
    from .run import job_spec

    jobs = []
    for k in range(n):
        coll = rng.choice(_COLLECTIVES)
        dtype = rng.choice(["fp32", "int32", "bf16"])
        op = rng.choice(["sum", "max"]) if coll in ("allreduce", "reduce_scatter", "reduce") else "sum"
        nbytes = rng.randrange(64, max_bytes + 1, 64)
        spec = job_spec(coll, topology, nbytes, dtype, op, root=rng.randrange(2), seed=rng.randrange(1 << 30))
        jobs.append({"spec": spec, "tag": k + 1})
    return jobs


def fault_campaign(collectives=200, topology="ring:4", faults=None, config="small", backend="verilator",
                   batch=50, max_bytes=4096, seed=1, latency=None, progress=True):
    """Run ``collectives`` random collectives (up to ``max_bytes`` per rank) in batches of ``batch`` on
    ``topology`` with ``faults`` (:func:`parse_faults`'s dict; default flips of 0.002 of the flits);
    returns the summary dict (the module docstring's classes, per-status counts, batches, wall time)."""
    from ..hdl.ace.config import AceConfig
    from .transports.ace import run_system
    from .transports.harness import build_root
    from .run import engine_config_for

    faults = faults or {"flip": 0.002}
    if collectives < 1 or batch < 1:
        raise ValueError("--collectives and the batch size must be at least 1")
    if max_bytes < 64:
        raise ValueError(f"--bytes {max_bytes}: the campaign draws sizes from 64 bytes per rank up to it")
    cfg = engine_config_for(config if isinstance(config, AceConfig) else AceConfig.profile(config), topology)
    check_faults_recoverable(faults, cfg)
    rng = random.Random(seed)
    out = {"topology": topology, "backend": backend, "faults": dict(faults), "collectives": 0, "completions": 0,
           "exact": 0, "error": 0, "silent": 0, "hung": 0, "corrupted_packets": 0, "replays": 0,
           "resent_flits": 0, "statuses": {}, "batches": [], "silent_at": [], "seed": seed,
           "replay_flits": cfg.replay_flits}
    logs = build_root() / "faults"
    logs.mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"  simulator output in {logs}/batch<k>.log", flush=True)
    t0 = time.monotonic()
    for b, start in enumerate(range(0, collectives, batch)):
        jobs = _jobs(rng, topology, min(batch, collectives - start), max_bytes)
        res = run_system(cfg, topology, jobs, sim=backend, seed=seed * 1000 + b, latency=latency,
                         **{f"link_{k}": v for k, v in faults.items()}, check=False,
                         timeout_cycles=400_000, log_file=str(logs / f"batch{b}.log"))
        out["collectives"] += len(jobs)
        if "jobs" not in res:       # the batch did not finish (or the simulation failed)
            out["hung"] += len(jobs) * _ranks(topology)
            out["batches"].append({"jobs": len(jobs), "error": str(res.get("error", "no result"))[:300]})
            if progress:
                print(f"  batch {b}: {len(jobs)} collectives did not finish: {out['batches'][-1]['error']}",
                      flush=True)
            continue
        crc = sum(sum(c["RX_CRC_ERRS"]) for c in res["counters"] if c is not None)
        out["corrupted_packets"] += crc
        out["replays"] += sum(sum(c["TX_REPLAYS"]) for c in res["counters"] if c is not None)
        out["resent_flits"] += sum(sum(c["TX_RESENT"]) for c in res["counters"] if c is not None)
        counts = {"exact": 0, "error": 0, "silent": 0, "hung": 0}
        for k, j in enumerate(res["jobs"]):
            for r, status in enumerate(j["status"]):
                kind = classify(status, j["mismatches"][r], j["guard_touched"][r])
                counts[kind] += 1
                if status is not None:
                    out["statuses"][status] = out["statuses"].get(status, 0) + 1
                if kind == "silent":
                    out["silent_at"].append({"batch": b, "collective": k, "rank": r,
                                             "spec": j.get("spec", {}).get("collective")})
        for kind, v in counts.items():
            out[kind] += v
        out["completions"] += sum(counts.values())
        out["batches"].append({"jobs": len(jobs), "corrupted_packets": crc, **counts})
        if progress:
            print(f"  batch {b}: {len(jobs)} collectives, {crc} corrupted packets, {counts['exact']} exact, "
                  f"{counts['error']} error, {counts['silent']} silent, {counts['hung']} hung "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def _ranks(topology):
    from ..sim.golden.topology import parse

    return parse(topology).n_endpoints


def classify(status, mismatches, guard_touched):
    """A rank's completion: ``exact``, ``error``, ``silent`` or ``hung`` (the module docstring)."""
    if status is None or status == "TIMEOUT":
        return "hung"
    if status != "OK":
        return "error"
    return "silent" if mismatches or guard_touched else "exact"


def report(summary):
    """The campaign's figures as printed lines."""
    s = summary
    faults = ", ".join(f"{k}={v:g}" for k, v in s["faults"].items())
    retx = (f"link retransmission with {s['replay_flits']} flits of replay buffer" if s.get("replay_flits")
            else "no link retransmission")
    lines = [f"fault campaign on {s['topology']} ({s['backend']}): {faults} (stall per cycle, the others per "
             f"flit, every link), {retx}, seed {s['seed']}",
             f"collectives run          {s['collectives']}",
             f"rank completions         {s['completions']}",
             f"corrupted packets        {s['corrupted_packets']} (link CRC errors counted by the engines)",
             f"link replays             {s.get('replays', 0)} ({s.get('resent_flits', 0)} flits sent again)",
             f"completed exact          {s['exact']}",
             f"completed with an error  {s['error']} "
             f"({', '.join(f'{k} {v}' for k, v in sorted(s['statuses'].items()) if k != 'OK') or 'none'})",
             f"silent corruptions       {s['silent']} (must be 0)",
             f"hangs                    {s['hung']} (must be 0)",
             f"wall time                {s['wall_s']} s"]
    return "\n".join(lines)
