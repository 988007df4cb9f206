"""Partitioned co-simulation: an ACE system cut at its links into partitions, each its own simulator process.

A partition is an :class:`~syncfabric.hdl.system.top.AceSystem` holding some of the ranks with ``cut=True``:
every link to a rank elsewhere is the local half of a cut link (:mod:`syncfabric.hdl.system.cut`). Each
partition runs the system testbench (:mod:`syncfabric.host.transports.ace.cocotb_system`) for its own ranks in its own
simulator (Verilator or Icarus), and every ``window`` cycles (at most the shortest cut link's latency minus
one: the conservative lookahead of a link) it stops and exchanges the cut links' ring rows with the others
through a :class:`Hub` in the launching process:

1. each partition reads, per cut half it holds, the ``sent`` mask (one wide read) and the rows of the last
   window that carry a flit (sending halves) or a credit (receiving halves);
2. it sends them to the hub with two flags: all its ranks have reached the posting barrier, and all its
   ranks are done;
3. the hub waits for every partition, routes each link's rows to the partition holding the other half, and
   answers with them and the global flags: ``go`` (every rank is at the barrier: post now; all partitions
   post in the same cycle), ``stop`` (every rank is done) or ``abort`` (a partition failed);
4. each partition writes the rows it received into its read-side rings and clears the rows of this window
   that held something a lap ago and carry nothing now (:class:`CutRings`), then runs the next window.

All partitions start, reset and exchange at the same simulated times, so the partitioned run is cycle for
cycle the single-process run of the same system with the same barrier rule (ranks post at the first window
boundary after the last one is ready): ``tests/tb/test_partitioned.py``. The cost is one round trip through
the hub per window and one VPI access per flit or credit that crosses a cut (docs/architecture.md
"Partitioned simulation").

:func:`run_partitioned` launches the partitions on Dask (a ``LocalCluster`` by default, or any scheduler by
address) or, without Dask, on a local process pool, and merges their results into one result of the shape
:func:`~syncfabric.host.transports.ace.run_system` returns.
"""

import os
import secrets
import socket
import threading
import time
from multiprocessing.connection import Client, Listener

from ....hdl.system.top import split_links
from ....sim.golden.topology import parse as parse_topology

__all__ = ["Hub", "HubPeer", "CutRings", "split_ranks", "plan", "run_partitioned", "merge_results"]


def split_ranks(topology, partitions):
    """``partitions`` contiguous, nearly equal rank blocks of ``topology`` (on a torus, rank blocks are
    planes or groups of rows: the fewest links cross)."""
    n = parse_topology(topology).n_endpoints
    if not isinstance(partitions, int) or not 1 <= partitions <= n:
        raise ValueError(f"partitions must be 1..{n} for {topology} ({n} ranks), got {partitions!r}")
    bounds = [n * k // partitions for k in range(partitions + 1)]
    return [list(range(bounds[k], bounds[k + 1])) for k in range(partitions)]


def plan(topology, parts, latency=None, rate=None, window=None):
    """Check a partitioning and return its window (cycles between exchanges): every rank in exactly one
    partition, a point-to-point topology, every cut link of latency >= 2; ``window`` at most the shortest cut
    link's latency minus one (the default)."""
    topo = parse_topology(topology)
    if sorted(r for part in parts for r in part) != list(range(topo.n_endpoints)):
        raise ValueError(f"the partitions must hold every rank of {topo.spec} exactly once, got {parts!r}")
    if topo.routed and len(parts) > 1:
        raise ValueError(f"{topo.spec} is a switch: it cannot be cut at its links (one partition only)")
    lats = [row[4] for part in parts for row in split_links(topo, part, latency, rate)[2]]
    if not lats:
        return window or 1000
    if min(lats) < 2:
        raise ValueError("a link of latency 1 cannot be cut: partitions need links of latency >= 2")
    longest = min(lats) - 1
    if window is None:
        return longest
    if not 1 <= window <= longest:
        raise ValueError(f"window must be 1..{longest} cycles (the shortest cut link's latency - 1), got {window}")
    return window


class Hub:
    """The exchange point of the partitions of one run: a TCP listener (``address``) that accepts one
    connection per partition and then, window after window, routes the cut links' rows between them and
    answers with the global flags. Runs in a thread; :meth:`abort` ends the run for every partition."""

    def __init__(self, topology, parts, host="127.0.0.1", timeout_s=7200.0, progress=None, window=1):
        self.parts = [list(p) for p in parts]
        self.owner = {r: k for k, part in enumerate(self.parts) for r in part}
        self.authkey = secrets.token_bytes(16)
        self.listener = Listener((host, 0), authkey=self.authkey)
        self.address = self.listener.address
        self.timeout_s = timeout_s
        self.progress, self.window = progress, window
        self.windows = 0
        self.error = None
        self._abort = None
        self.conns = [None] * len(self.parts)
        self._accepting = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def abort(self, reason):
        """Stop every partition with ``reason`` (a launcher that saw one fail before it connected)."""
        if self._abort is None:
            self._abort = reason
        if self._accepting:     # wake the accept() waiting for a partition that will never connect
            threading.Thread(target=self._wake, args=(reason,), daemon=True).start()

    def _wake(self, reason):
        try:        # (in a thread: if accept() has just returned, nobody answers the handshake)
            with Client(self.address, authkey=self.authkey) as c:
                c.send(("abort", reason))
        except OSError:
            pass

    def close(self):
        self.abort("the launcher closed the run")
        self.thread.join(timeout=10)

    def _serve(self):
        try:
            self._accept()
            if self._abort is None:
                self._run()
        except Exception as exc:        # noqa: BLE001 - any failure ends the run for every partition
            self._abort = self._abort or f"hub: {exc!r}"
        finally:
            self.error = self._abort if self._abort and not self._abort.startswith("the launcher") else None
            for c in self.conns:
                if c is not None:
                    if self._abort:
                        try:
                            c.send({"abort": self._abort})
                        except OSError:
                            pass
                    c.close()
            self.listener.close()

    def _accept(self):
        self._accepting = True
        while any(c is None for c in self.conns) and self._abort is None:
            conn = self.listener.accept()
            kind, value = conn.recv()
            if kind == "abort":
                self._abort = self._abort or value
                conn.close()
            elif kind == "hello" and 0 <= value < len(self.conns) and self.conns[value] is None:
                self.conns[value] = conn
            else:
                conn.close()
        self._accepting = False

    def _recv(self, k):
        conn, waited = self.conns[k], 0.0
        while not conn.poll(0.5):
            waited += 0.5
            if self._abort is not None:
                raise RuntimeError(self._abort)
            if waited > self.timeout_s:
                raise TimeoutError(f"partition {k} sent nothing for {self.timeout_s:.0f} s")
        try:
            return conn.recv()
        except EOFError:
            raise RuntimeError(f"partition {k} went away (its simulator ended or crashed)") from None

    def _run(self):
        t0 = time.monotonic()
        while True:
            msgs = [self._recv(k) for k in range(len(self.parts))]
            errors = [f"partition {k}: {m['error']}" for k, m in enumerate(msgs) if m.get("error")]
            if errors:
                self._abort = "; ".join(errors)
                return
            replies = [{"flits": {}, "credits": {}} for _ in self.parts]
            for m in msgs:
                for key, rows in m["flits"].items():        # to the partition receiving the link
                    replies[self.owner[key[2]]]["flits"][key] = rows
                for key, rows in m["credits"].items():      # back to the partition sending on it
                    replies[self.owner[key[0]]]["credits"][key] = rows
            go = all(m["arrived"] for m in msgs)
            stop = all(m["done"] for m in msgs)
            for k, reply in enumerate(replies):
                reply.update(go=go, stop=stop)
                self.conns[k].send(reply)
            self.windows += 1
            if self.progress is not None and self.windows % 64 == 0:
                self.progress(self.windows * self.window, time.monotonic() - t0)
            if stop:
                self._abort = None
                return


class HubPeer:
    """A partition's connection to its :class:`Hub` (in the simulator process)."""

    def __init__(self, address, authkey, index):
        self.conn = Client(tuple(address), authkey=bytes.fromhex(authkey))
        self.conn.send(("hello", index))

    def exchange(self, message):
        """Send this window's rows and flags; return the hub's answer (rows for this partition, ``go``,
        ``stop``) or raise RuntimeError when the run was aborted."""
        self.conn.send(message)
        try:
            reply = self.conn.recv()
        except EOFError:
            raise RuntimeError("the hub went away") from None
        if reply.get("abort"):
            raise RuntimeError(f"partitioned run aborted: {reply['abort']}")
        return reply

    def close(self):
        self.conn.close()


class CutRings:
    """The cut halves of a partition's system top ``dut`` as the exchange sees them. ``halves``: ``(k, key,
    direction)`` of each ``cut<k>`` (``key`` the link's ``(src, src_port, dst, dst_port)``), ``depth``
    the rings' rows. :meth:`collect` reads the rows of the last ``window`` cycles that carry something;
    :meth:`deliver` writes what the other sides sent and clears the rows of this window that held something a
    lap ago and carry nothing now."""

    def __init__(self, dut, halves, depth, window):
        from cocotb.handle import Immediate
        self._immediate = Immediate
        self.dut, self.depth, self.window = dut, depth, window
        self.halves = []
        for k, key, direction in halves:
            cut = getattr(dut, f"cut{k}")
            out_ring, in_ring = ((cut.flit_ring, cut.credit_ring) if direction == "tx"
                                 else (cut.credit_ring, cut.flit_ring))
            self.halves.append((key, direction, getattr(dut, f"cut{k}_sent"), out_ring, in_ring, set()))
        self.crossed = 0        # rows copied out (flits and credits)

    def collect(self):
        """``{"flits": {key: [(row, value)]}, "credits": {...}}`` of this partition's halves: only the rows
        whose ``sent`` bit is set (the work follows the traffic, not the window)."""
        out = {"flits": {}, "credits": {}}
        if not self.halves:
            return out
        now = int(self.dut.cut_now.value)
        for key, direction, sent, ring, _, _ in self.halves:
            mask = sent.value.to_unsigned() & ((1 << self.window) - 1)
            got = []
            while mask:
                i = (mask & -mask).bit_length() - 1       # bit i: row now - 1 - i
                mask &= mask - 1
                row = (now - 1 - i) % self.depth
                got.append((row, ring[row].value.to_unsigned()))
            self.crossed += len(got)
            out["flits" if direction == "tx" else "credits"][key] = got
        return out

    def deliver(self, reply):
        """Write the rows the other sides sent; clear the rows of this window that this side filled a lap ago
        (``held``) and the other side left empty this time."""
        if not self.halves:
            return
        now = int(self.dut.cut_now.value)
        for key, direction, _, _, ring, held in self.halves:
            got = dict(reply["credits" if direction == "tx" else "flits"].get(key, ()))
            stale = [r for r in held if r not in got and (now - 1 - r) % self.depth < self.window]
            for row in stale:
                ring[row].value = self._immediate(0)
                held.discard(row)
            for row, value in got.items():
                ring[row].value = self._immediate(value)
                held.add(row)


def merge_results(parts, results):
    """One result of :func:`~syncfabric.host.transports.ace.run_system`'s shape from the partitions' ``results`` (each
    filled in for its own ranks only)."""
    owner = {r: k for k, part in enumerate(parts) for r in part}
    n = len(owner)
    base = results[0]
    out = {key: base.get(key) for key in ("seed", "late", "switch_overflow")}
    out["jobs"] = []
    for j, row in enumerate(base["jobs"]):
        merged = dict(row)
        for key, value in row.items():
            if isinstance(value, list) and len(value) == n and key != "golden":
                merged[key] = [results[owner[r]]["jobs"][j][key][r] for r in range(n)]
        cycles = [res["jobs"][j].get("cycles") for res in results if res["jobs"][j].get("cycles") is not None]
        if cycles:
            merged["cycles"] = max(cycles)
        out["jobs"].append(merged)
    for key in ("counters", "sram_conflict"):
        out[key] = [results[owner[r]][key][r] for r in range(n)]
    for key in ("window_cycles", "wall_s", "window_wall_s"):
        out[key] = max(res[key] for res in results)
    out["partitions"] = [{"ranks": part, "windows": res["partition"]["windows"],
                          "crossed": res["partition"]["crossed"], "exchange_s": res["partition"]["exchange_s"],
                          "run": res.get("run")} for part, res in zip(parts, results)]
    return out


def _run_partition(point):
    """One partition's testbench (a picklable top-level function for Dask workers and process pools): its
    result, or ``{"error": ...}`` - it never raises, so that the launcher can stop the others."""
    from ....hdl.ace.config import AceConfig
    from . import run_system
    try:
        return run_system(AceConfig(**point["cfg"]), point["topology"], point["jobs"], check=False,
                          **point["options"])
    except Exception as exc:        # noqa: BLE001 - reported to the launcher, which aborts the run
        return {"error": f"{type(exc).__name__}: {exc}"}


def _completed(points, use_dask, scheduler):
    """Run :func:`_run_partition` on every point at once; yield the backend's name, then ``(index, result)``
    as each finishes."""
    import concurrent.futures as cf

    if use_dask:
        from dask.distributed import as_completed

        from ....sim.perf.sweep import dask_client
        client, cluster, backend = dask_client(scheduler, len(points), min_slots=len(points))
        try:
            yield backend
            futs = client.map(_run_partition, points, pure=False)
            index = {f.key: k for k, f in enumerate(futs)}
            for f in as_completed(futs):
                yield index[f.key], f.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
        return
    yield f"process pool ({len(points)} workers)"
    with cf.ProcessPoolExecutor(len(points)) as pool:
        futs = {pool.submit(_run_partition, p): k for k, p in enumerate(points)}
        for f in cf.as_completed(futs):
            yield futs[f], f.result()


def run_partitioned(cfg, topology, jobs, *, partitions=2, parts=None, scheduler=None, window=None, latency=None,
                    rate=None, build_tag=None, progress=None, check=True, hub_host=None, **options):
    """Run the system testbench of :func:`~syncfabric.host.transports.ace.run_system` (same ``cfg``, ``topology``,
    ``jobs`` and keyword ``options``) as ``partitions`` simulator processes (contiguous rank blocks; ``parts``: explicit
    rank lists), exchanging every ``window`` cycles (default the longest safe window). ``scheduler``: None or
    ``"local"`` (a Dask ``LocalCluster`` of one worker per partition; a local process pool when Dask is not
    installed), ``"processes"`` (the process pool), or a Dask scheduler address (``tcp://host:8786``: its
    workers need this package and a simulator; ``hub_host`` is the address they reach this machine by, default
    its host name). ``threads`` (among the ``options``): each partition's Verilator threads; ``"auto"`` shares
    this machine's idle cores among the partitions on a local cluster and is 1 on a remote one.
    ``progress(cycle, wall_s)`` is called every 64 windows. Returns the merged result (with
    ``partitions``: ranks, windows, rows crossed and exchange time of each, and ``backend``); raises
    AssertionError when a partition fails (``check=False``: the result with ``error``). A ``log_file``
    becomes one per partition (``<name>-p<k>.log``)."""
    import dataclasses

    from ....sim.perf.sweep import dask_available
    from ..harness import verilator_threads

    parts = [list(p) for p in (parts or split_ranks(topology, partitions))]
    window = plan(topology, parts, latency, rate, window)
    if options.get("late") or any(options.get(f"link_{k}") for k in ("stall", "flip", "drop", "dup")):
        raise ValueError("a partitioned run has no late posting or random link stalls or bit flips (they need "
                         "every rank's state, or a random draw per link, in one process)")
    remote = scheduler not in (None, "local", "processes")
    threads = options.get("threads", 1)
    options["threads"] = (1 if remote and threads in (None, "auto")
                          else verilator_threads(threads, share=len(parts)))
    if not remote:
        # every partition holds the same engine: convert it once here, not in every partition side by side
        # (about 10 minutes and 3 GB each for the `paper` engine)
        from ....hdl.system.top import ENGINE_MODULE
        from ..harness import verilog_for
        from . import ace_engine
        verilog_for(ace_engine, {"cfg": dataclasses.asdict(cfg)}, ENGINE_MODULE)
    host = hub_host or (socket.gethostname() if remote else "127.0.0.1")
    hub = Hub(topology, parts, host=host, progress=progress, window=window)
    tag = build_tag or os.environ.get("PYTEST_CURRENT_TEST", "partitioned").split(" ")[0]
    tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
    log = options.pop("log_file", None)      # one simulator log per partition, beside the given one
    points = [{"cfg": dataclasses.asdict(cfg), "topology": topology, "jobs": jobs,
               "options": {**options, "latency": latency, "rate": rate,
                           "log_file": log and f"{os.path.splitext(str(log))[0]}-p{k}.log",
                           "build_tag": f"{tag}-p{k}of{len(parts)}",
                           "partition": {"index": k, "ranks": part, "hub": list(hub.address),
                                         "authkey": hub.authkey.hex(), "window": window}}}
              for k, part in enumerate(parts)]
    results = [None] * len(parts)
    use_dask = remote or (scheduler in (None, "local") and dask_available())
    done = _completed(points, use_dask, scheduler)
    try:
        backend = next(done)
        for k, result in done:
            results[k] = result
            if result.get("error"):     # stop the others rather than leave them waiting for its rows
                hub.abort(f"partition {k} failed: {result['error'].splitlines()[0]}")
    finally:
        hub.close()
        done.close()        # the Dask cluster or process pool
    errors = [f"partition {k} (ranks {parts[k]}): {r['error']}" for k, r in enumerate(results) if r.get("error")]
    if errors or hub.error:
        message = "; ".join(errors) or hub.error
        if check:
            raise AssertionError(f"partitioned run failed: {message}")
        return {"error": message, "partitions": [{"ranks": p} for p in parts], "backend": backend}
    out = merge_results(parts, results)
    out.update(backend=backend, window=window, run=results[0].get("run"))
    return out
