"""The ACE system in Amaranth's simulator: two engines on a ring, driven by the host driver through
:class:`~syncfabric.host.transports.amaranth.AmaranthTransport`, checked byte for byte against the golden model.
No external simulator is involved (the same flow as the cocotb tests; see test_engine_system.py)."""

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.host.job import CollectiveJob, RejectedCommand
from syncfabric.host.run import job_spec
from syncfabric.sim.golden.types import Status
from syncfabric.host.transports.ace.amaranth_sim import run_system_amaranth

CFG = AceConfig.small()


def test_ring_allreduce_and_a_rejection_in_amaranths_simulator_with_memory_stalls():
    topo = "ring:2"
    ar = CollectiveJob(job_spec("allreduce", topo, 4 * 333, "int32", "sum", seed=7), CFG, tag=1)
    ag = CollectiveJob(job_spec("allgather", topo, 2 * 2 * 45, "fp16", "max", seed=8), CFG, tag=2)
    bad = RejectedCommand("misaligned_dst", ar)
    results = run_system_amaranth(CFG, topo, lambda r: [ar, bad, ag] if r == 0 else [ar, ag], latency=3,
                                  seed=2, ready_prob=0.7, valid_prob=0.8)
    for r, res in enumerate(results):
        statuses = [c["status"] for c in res.completions]
        assert statuses == ([Status.OK, Status.MISALIGNED, Status.OK] if r == 0 else [Status.OK, Status.OK])
        assert res.mismatches == [0] * len(statuses), f"rank {r}: {res.mismatches}"
        assert res.guard_touched == [0] * len(statuses)
        assert not res.sram_conflict
        assert res.counters["PAYLOAD_RD_BYTES"] == 4 * 333 + 2 * 45
        assert res.counters["PAYLOAD_WR_BYTES"] == 4 * 333 + 2 * 2 * 45
