"""RNA on the engines: the protocol of :mod:`syncfabric.sim.golden.rna` (controller, probes, null
contributions, merging, hierarchy with a parameter server) with every collective run by the emulated engines
through the System API.

Each round's partial all-reduce is posted on the group's communicator with the ranks that hold no gradient as
null ranks (the descriptor's NULL flag: the engine reads nothing for them and reduces a zero block with count
0); the result and the count lane (``Request.contributors``) are read back and checked byte for byte against
the golden executor running the same programs at the request's chunk size, and the engines' cycles at the
system clock are the round's communication time. In the hierarchical mode each group is a communicator of its
own (:meth:`System.split`: a line or plane of a torus) and the server's global model reaches the group by an
engine broadcast from the round's initiator, checked on every rank.
"""

import numpy as np

from ..sim.golden.executor import execute
from ..sim.golden.algorithms import generate
from ..sim.golden.rna import Collectives
from ..sim.golden.types import DType, ReduceOp

__all__ = ["EngineCollectives"]


class EngineCollectives(Collectives):
    """:class:`~syncfabric.sim.golden.rna.Collectives` on a :class:`~syncfabric.host.system.System`: vectors of
    ``count`` float32 elements. Counts what it ran in :attr:`stats` (``allreduce``, ``broadcast``, ``cycles``,
    ``checked_bytes``)."""

    def __init__(self, system, count, timeout_cycles=2_000_000):
        self.system, self.count, self.timeout_cycles = system, int(count), timeout_cycles
        if self.count < 1:
            raise ValueError(f"RNA on the engines: count {count} must be >= 1")
        self._comms = {}
        self._programs = {}             # (ranks, algorithm) -> the golden programs the check runs
        nbytes = 4 * self.count
        self.send, self.recv = system.register(nbytes), system.register(nbytes)
        self.stats = {"allreduce": 0, "broadcast": 0, "cycles": 0, "checked_bytes": 0}

    def close(self):
        for buf in (self.send, self.recv):
            self.system.deregister(buf)
        for comm in self._comms.values():
            if comm is not self.system.world:
                comm.free()
        self._comms = {}

    def _comm(self, ranks):
        key = tuple(sorted(ranks))
        if key not in self._comms:
            self._comms[key] = (self.system.world if list(key) == list(range(self.system.size))
                                else self.system.split(key))
        return self._comms[key]

    def _ms(self, req):
        self.stats["cycles"] += req.cycles
        return req.cycles / self.system.config.clock_mhz / 1e3

    def allreduce(self, ranks, contributions):
        comm = self._comm(ranks)
        null = [cr for cr, sr in enumerate(comm.ranks) if contributions[sr] is None]
        inputs = []
        for cr, sr in enumerate(comm.ranks):
            data = contributions[sr]
            if data is not None:
                data = np.ascontiguousarray(data, dtype=np.float32)
                if data.shape != (self.count,):
                    raise ValueError(f"rank {sr}'s contribution has shape {data.shape}, expected ({self.count},)")
                self.send.write(sr, data)
            inputs.append(data)
        req = comm.allreduce(self.send, self.recv, self.count, "fp32", "sum", null_ranks=null)
        req.wait(timeout_cycles=self.timeout_cycles)
        cfg = self.system.config.engine
        key = (comm.ranks, comm.algorithm("allreduce"))
        if key not in self._programs:   # generated once per communicator, not every round
            self._programs[key] = generate("allreduce", key[1], comm.topology)
        progs = self._programs[key]
        gold = execute(progs, comm.topology, inputs, DType.FP32, ReduceOp.SUM, self.count, req.chunk_bytes,
                       cfg.packet_bytes, cfg.beat_bytes, null_ranks=null)
        want = gold.outputs[0].tobytes()
        for cr, sr in enumerate(comm.ranks):
            got = self.recv.read(sr, count=4 * self.count).tobytes()
            if got != want or gold.outputs[cr].tobytes() != want:
                raise AssertionError(f"RNA all-reduce: rank {sr}'s result differs from the golden executor in "
                                     f"{sum(a != b for a, b in zip(got, want))} bytes")
        counts = set(req.contributors.values())
        expect = comm.size - len(null)
        if counts != {expect} or set(gold.contributors) != {expect}:
            raise AssertionError(f"RNA all-reduce: count lane {req.contributors}, expected {expect} contributors")
        self.stats["allreduce"] += 1
        self.stats["checked_bytes"] += len(want) * comm.size
        return np.frombuffer(want, dtype=np.float32).copy(), expect, self._ms(req)

    def broadcast(self, ranks, root, data):
        comm = self._comm(ranks)
        data = np.ascontiguousarray(data, dtype=np.float32)
        self.send.write(root, data)
        req = comm.broadcast(self.send, self.recv, self.count, "fp32", root=comm.ranks.index(root))
        req.wait(timeout_cycles=self.timeout_cycles)
        want = data.tobytes()
        for sr in comm.ranks:
            if self.recv.read(sr, count=4 * self.count).tobytes() != want:
                raise AssertionError(f"RNA broadcast from rank {root}: rank {sr} received other bytes")
        self.stats["broadcast"] += 1
        self.stats["checked_bytes"] += len(want) * comm.size
        return self._ms(req)
