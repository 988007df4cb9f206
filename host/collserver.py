"""A collective server: one process owns the simulated system (:class:`~syncfabric.host.system.System`), and
processes that each play one rank - the ranks of a ``torch.distributed`` job (:mod:`syncfabric.host.torchdist`)
- send it their part of each collective.

The ranks of a group call collectives in the same order (torch's rule), so the server matches the ``seq``-th
call of every member of a group; when all have arrived it checks that they agree (operation, element type,
count, reduction, root), writes each rank's data into that rank's NPU memory, posts the collective on every
engine of the group's communicator, runs the simulation until every engine has completed, reads each rank's
result back and answers each rank. A rank's answer carries the engines' cycles for the collective.

What the server does not simulate: the time between ranks' calls (the engines of a group are posted together,
when the last rank has called) and overlap between collectives (one runs at a time, in the order their last
rank called them).

Protocol (``multiprocessing.connection`` messages, pickled tuples; every request is answered in order of
completion and carries the caller's ``(group, seq)``):

* ``("hello", rank)`` once per connection, the sender's global rank;
* ``("group", gid, ranks)``: the group ``gid`` (any hashable name the ranks agree on) has these global ranks
  (sorted); answered ``("group", gid, None)`` or ``("group", gid, message)`` if the system cannot make it;
* ``("op", gid, seq, op, meta, data)``: ``op`` one of :data:`OPS`, ``meta`` a dict (``dtype`` a syncfabric
  dtype name, ``count``, ``reduce`` a reduction name, ``root`` a group rank, ``null`` for a rank making a null
  contribution), ``data`` a numpy array of the rank's input (None where the rank has none); answered
  ``("done", gid, seq, result, info)`` (``result`` the rank's output array or None; ``info`` the cycles and
  contributors) or ``("error", gid, seq, message)``;
* ``("bye",)``: the rank is done. The server exits when every rank has said bye or hung up; a rank that hangs
  up with calls pending fails the calls of the ranks waiting with it.

Run it as ``python -m syncfabric.host.collserver --world N --config JSON``: it prints ``listening HOST PORT`` on
its first line of output and reads the connection key from ``SYNCFABRIC_SERVER_KEY`` (hex).
"""

import argparse
import json
import os
import sys
from multiprocessing.connection import Listener, wait

import numpy as np

from ..sim.golden.chunking import buffer_counts
from ..sim.golden.types import DType, dtype_bytes

__all__ = ["OPS", "CollectiveServer", "main"]

#: Operations a rank may ask for, each the host API's collective of the same meaning.
OPS = ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce", "barrier")
#: Fields every member's call must agree on.
_AGREE = ("dtype", "count", "reduce", "root")
#: Simulated cycles a collective may take before the server gives up on it.
TIMEOUT_CYCLES = 50_000_000


class _Group:
    def __init__(self, gid, ranks, comm):
        self.gid, self.ranks, self.comm = gid, tuple(ranks), comm
        self.pending = {}           # seq -> {rank: (op, meta, data)}


class CollectiveServer:
    """Serves the collectives of ``world`` rank processes on ``system`` (a :class:`~syncfabric.host.system.System`
    whose size is ``world``), listening on ``listener``."""

    def __init__(self, system, world, listener, log=None):
        if system.size != world:
            raise ValueError(f"the system has {system.size} endpoints, the job {world} ranks")
        self.system, self.world, self.listener = system, world, listener
        self.log = log or (lambda msg: None)
        self.conns = {}             # rank -> connection
        self.departed = {}          # rank -> how it went ("left", "hung up")
        self.groups = {}            # gid -> _Group
        self.buffers = [None, None]  # registered send / receive buffers, grown on demand
        self.collectives = 0

    # -- connections --------------------------------------------------------------------------------------
    def accept(self):
        """Wait until every rank has connected and said hello."""
        while len(self.conns) < self.world:
            conn = self.listener.accept()
            msg = conn.recv()
            if not (isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "hello"):
                conn.close()
                continue
            rank = msg[1]
            if not isinstance(rank, int) or not 0 <= rank < self.world or rank in self.conns:
                conn.send(("error", None, None, f"rank {rank!r}: expected a new rank of 0..{self.world - 1}"))
                conn.close()
                continue
            self.conns[rank] = conn
            self.log(f"rank {rank} connected")

    def serve(self):
        """Answer the ranks until all have left."""
        self.accept()
        while self.conns:
            for conn in wait(list(self.conns.values())):
                rank = next(r for r, c in self.conns.items() if c is conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._gone(rank, "hung up")
                    continue
                if msg[0] == "bye":
                    self._gone(rank, "left")
                elif msg[0] == "group":
                    self._group(rank, *msg[1:])
                elif msg[0] == "op":
                    self._op(rank, *msg[1:])

    def _send(self, rank, msg):
        conn = self.conns.get(rank)
        if conn is not None:
            try:
                conn.send(msg)
            except (OSError, EOFError):
                pass

    def _gone(self, rank, how):
        self.conns.pop(rank).close()
        self.departed[rank] = how
        self.log(f"rank {rank} {how}")
        for g in self.groups.values():      # calls that can no longer complete fail for the ranks waiting
            if rank in g.ranks:
                for seq, calls in list(g.pending.items()):
                    for r in calls:
                        self._send(r, ("error", g.gid, seq, f"rank {rank} {how} before joining this collective"))
                    del g.pending[seq]

    # -- groups and collectives ------------------------------------------------------------------------------
    def _group(self, rank, gid, ranks):
        ranks = tuple(ranks)
        g = self.groups.get(gid)
        if g is not None:
            err = None if g.ranks == ranks else f"group {gid!r} was made with ranks {list(g.ranks)}, not {list(ranks)}"
            self._send(rank, ("group", gid, err))
            return
        try:
            if ranks == tuple(range(self.world)):
                comm = self.system.world
            else:
                comm = self.system.split(ranks)
        except Exception as e:          # a rank set the links do not connect, no communicator id left
            self._send(rank, ("group", gid, f"{type(e).__name__}: {e}"))
            return
        self.groups[gid] = _Group(gid, ranks, comm)
        self._send(rank, ("group", gid, None))

    def _op(self, rank, gid, seq, op, meta, data):
        g = self.groups.get(gid)
        if g is None or rank not in g.ranks:
            self._send(rank, ("error", gid, seq, f"rank {rank} is not a member of group {gid!r}"))
            return
        gone = sorted((r for r in g.ranks if r in self.departed), key=lambda r: (self.departed[r] != "hung up", r))
        if gone:
            self._send(rank, ("error", gid, seq, f"rank {gone[0]} {self.departed[gone[0]]}: this collective "
                                                 f"cannot complete"))
            return
        calls = g.pending.setdefault(seq, {})
        calls[rank] = (op, meta, data)
        if len(calls) < len(g.ranks):
            return
        del g.pending[seq]
        try:
            results, info = self.run(g, calls)
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            for r in calls:
                self._send(r, ("error", gid, seq, msg))
            return
        for r in calls:
            self._send(r, ("done", gid, seq, results.get(r), info))

    def _buffer(self, i, nbytes):
        """Registered buffer ``i`` (0 send, 1 receive) of at least ``nbytes`` on every endpoint."""
        buf = self.buffers[i]
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                self.system.deregister(buf)
            size = max(4096, 1 << (max(1, nbytes) - 1).bit_length())
            self.buffers[i] = buf = self.system.register(size)
        return buf

    def run(self, g, calls):
        """Run one collective: ``calls`` maps each global rank of group ``g`` to its ``(op, meta, data)``.
        Returns ``({rank: output array or None}, info)``."""
        ops = {r: c[0] for r, c in calls.items()}
        first = g.ranks[0]
        op, meta = calls[first][0], calls[first][1]
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}; expected one of {', '.join(OPS)}")
        for r, (o, m, _) in sorted(calls.items()):
            if o != op or any(m.get(k) != meta.get(k) for k in _AGREE):
                desc = {rr: (ops[rr], *(calls[rr][1].get(k) for k in _AGREE)) for rr in sorted(calls)}
                raise ValueError(f"the ranks of group {g.gid!r} called different collectives at the same point "
                                 f"(operation, dtype, count, reduction, root per rank: {desc})")
        comm, n = g.comm, len(g.ranks)
        count, root = int(meta.get("count", 0)), int(meta.get("root", 0))
        if op == "barrier":
            req = comm.barrier().wait(timeout_cycles=TIMEOUT_CYCLES)
            self.collectives += 1
            return {}, {"cycles": req.cycles}
        dt = DType.parse(meta["dtype"])
        eb = dtype_bytes(dt)
        per = [buffer_counts(op, count, n, cr, root) for cr in range(n)]
        n_in = max(p[0] for p in per)
        n_out = max(p[1] for p in per)
        in_place = op in ("broadcast", "reduce")
        send = self._buffer(0, max(n_in, n_out if in_place else 0) * eb)
        recv = None if in_place else self._buffer(1, n_out * eb)
        for cr, sr in enumerate(g.ranks):
            data = calls[sr][2]
            if per[cr][0]:
                arr = np.asarray(data).reshape(-1)      # Buffer.write checks and converts it to the dtype
                if arr.size != per[cr][0]:
                    raise ValueError(f"{op}: rank {sr} gave {arr.size} elements, the collective needs {per[cr][0]}")
                send.write(sr, arr, dtype=meta["dtype"])
        null = [cr for cr, sr in enumerate(g.ranks) if calls[sr][1].get("null")]
        kw = {}
        if op in ("broadcast", "reduce"):
            kw["root"] = root
        if op in ("allreduce", "reduce_scatter", "reduce"):
            kw["op"] = meta.get("reduce", "sum")
            if null:
                kw["null_ranks"] = null
        elif null:
            raise ValueError(f"{op}: a null contribution is for allreduce, reduce_scatter or reduce")
        req = getattr(comm, op)(send, recv, count, meta["dtype"], **kw).wait(timeout_cycles=TIMEOUT_CYCLES)
        self.collectives += 1
        out_buf = send if in_place else recv
        results = {}
        for cr, sr in enumerate(g.ranks):
            if per[cr][1] and not (op == "reduce" and cr != root):
                results[sr] = out_buf.read(sr, meta["dtype"], count=per[cr][1])
        contributors = req.contributors
        return results, {"cycles": req.cycles, "time_us": req.time_us,
                         "contributors": {sr: contributors.get(sr) for sr in g.ranks}}


def main(argv=None):
    """``python -m syncfabric.host.collserver --world N --config JSON``: build the system, listen on an
    ephemeral local port, print ``listening HOST PORT``, serve until every rank has left."""
    from .system import System

    ap = argparse.ArgumentParser(prog="python -m syncfabric.host.collserver")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--config", required=True, help="the system configuration as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--quiet", action="store_true", help="no progress output while the system builds")
    ap.add_argument("--log", action="store_true", help="log connections and departures on standard error")
    args = ap.parse_args(argv)
    key = bytes.fromhex(os.environ.get("SYNCFABRIC_SERVER_KEY", ""))
    if not key:
        ap.error("SYNCFABRIC_SERVER_KEY (hex) must name the connection key")
    if args.log:
        def log(msg):
            print(f"syncfabric server: {msg}", file=sys.stderr, flush=True)
    else:
        def log(msg):
            pass
    out, sys.stdout = sys.stdout, sys.stderr    # standard output carries the protocol lines only
    with Listener((args.host, 0), backlog=args.world + 4, authkey=key) as listener:
        host, port = listener.address
        print(f"listening {host} {port}", file=out, flush=True)
        config = json.loads(args.config)
        try:
            system = System(config, progress=not args.quiet)
        except Exception as e:
            print(f"error {type(e).__name__}: {e}", file=out, flush=True)
            raise SystemExit(2) from None
        print("ready", file=out, flush=True)
        with system:
            server = CollectiveServer(system, args.world, listener, log)
            server.serve()
        log(f"done: {server.collectives} collectives")


if __name__ == "__main__":
    main()
