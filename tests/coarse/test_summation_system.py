"""BytePS's summation service placed in the COARSE system top and driven by the host over every GPU's CCI path
(:mod:`syncfabric.host.coarse.summation`): sync and async rounds and a BytePS cluster on the RTL service, every
pulled byte against the golden summation service in the service's acceptance order, on Verilator and Icarus;
bad input refused with a message before any traffic; the checker catches one wrong byte (a Python model of the
service as the backend)."""

import os
import sys

import numpy as np
import pytest

from syncfabric.hdl.coarse.layouts import CciOpcode, summation_register_map
from syncfabric.host.cli import main
from syncfabric.host.coarse.byteps import BytePSCluster
from syncfabric.host.coarse.rtl import CciBackend, CoarseRtl, MismatchError
from syncfabric.host.coarse.summation import RtlSummationService, run_byteps, run_summation
from syncfabric.sim.golden.arith import reduce_bytes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hdl"))
from sim_helpers import seed_for  # noqa: E402

N, BB, PB, PARTS = 2, 8, 4, 4
GEOMETRY = {"n_devices": N, "n_groups": 1, "beat_bytes": BB, "entry_beats": 4, "sum_parts": PARTS,
            "sum_part_beats": PB}


class ServiceModel(CciBackend):
    """The summation service as a Python model of its beats (golden arithmetic): a batch's requests in order
    (asynchronous; the host sends one worker at a time) or its pushes before its pulls (synchronous: a pull
    waits for every push); ``corrupt`` flips one bit of every pull answered to worker 1."""

    def __init__(self, corrupt=False):
        self.contrib, self.w, self.mode, self.corrupt, self.now = {}, {}, 0, corrupt, 0

    def _reduce(self, a, b, mode):
        return reduce_bytes(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8), mode["dtype"],
                            mode["op"]).tobytes()

    def _answer(self, worker, opcode, addr, value, mode):
        if opcode == CciOpcode.MEM_WR:
            index = addr // BB                                  # (part * N + worker) * PB + beat
            key, beat = (index // (N * PB), index % PB), value.to_bytes(BB, "little")
            if mode["asynchronous"]:
                self.w[key] = self._reduce(self.w[key], beat, mode) if key in self.w else beat
            else:
                self.contrib.setdefault(key, {})[worker] = beat
            return 0
        index = (addr & ((1 << 30) - 1)) // BB                  # part * PB + beat
        key = (index // PB, index % PB)
        if mode["asynchronous"]:
            word = self.w[key]
        else:
            got = self.contrib[key]
            word = got[0]
            for k in range(1, N):
                word = self._reduce(word, got[k], mode)
        return int.from_bytes(word, "little") ^ (self.corrupt and worker == 1)

    def call(self, op, *args):
        self.now += 1
        if op == "cycles":
            return self.now
        if op == "sum_write":                                   # the MODE register
            self.mode = int.from_bytes(args[2][:4], "little")
            return None
        assert op == "batch" and all(r[0] == "sum_transact" for r in args[0]), (op, args)
        mode = summation_register_map(BB).decode("MODE", self.mode)
        flat = [(k, worker, r) for k, (_, worker, reqs) in enumerate(args[0]) for r in reqs]
        if not mode["asynchronous"]:
            flat.sort(key=lambda item: item[2][0] != CciOpcode.MEM_WR)
        out = [{} for _ in args[0]]
        for k, worker, r in flat:
            out[k][len(out[k])] = (r, self._answer(worker, *r, mode))
        # answers in each worker's request order
        return [[dict((id(r), v) for r, v in o.values())[id(r)] for r in reqs] for o, (_, _, reqs) in
                zip(out, args[0])]

    def close(self):
        pass


def model_rtl(corrupt=False):
    return CoarseRtl(**GEOMETRY, backend=ServiceModel(corrupt))


@pytest.mark.parametrize("asynchronous", [False, True])
def test_rounds_on_the_service_model_match_and_a_corrupted_byte_is_caught(asynchronous):
    svc = RtlSummationService(model_rtl(), "fp32", "sum", asynchronous)
    data = np.arange(8, dtype=np.float32)
    pulled, _ = svc.run({0: [("push", 1, data), ("pull", 1)], 1: [("push", 1, data), ("pull", 1)]})
    assert pulled[0][0] == (data * (1 if asynchronous else 2)).tobytes() and pulled[1][0] == (data * 2).tobytes()
    assert svc.checked == 2 * svc.part_bytes
    with pytest.raises(MismatchError, match="worker 1 pulled part 0 .* first at byte 0"):
        svc = RtlSummationService(model_rtl(corrupt=True), "int32", "max", asynchronous)
        svc.run({0: [("push", 0, np.ones(8, np.int32))], 1: [("push", 0, np.ones(8, np.int32)), ("pull", 0)]})


@pytest.mark.parametrize("asynchronous, call, message", [
    (False, lambda s: s.pull(0, 0), r"pull of part 0 before every worker pushed it \(workers \[\] of 2"),
    (False, lambda s: (s.push(0, 0, np.ones(8, np.float32)), s.pull(0, 0)), r"workers \[0\] of 2 did"),
    (False, lambda s: (s.push(0, 0, np.ones(8, np.float32)), s.push(0, 0, np.ones(8, np.float32))),
     "worker 0 pushed part 0 twice"),
    (False, lambda s: (s.push(0, 0, np.ones(8, np.float32)), s.push(1, 0, np.ones(4, np.float32))),
     "16 bytes pushed, the round's earlier pushes had 32"),
    (True, lambda s: s.pull(1, 2), "pull of part 2 before any push"),
    (True, lambda s: s.push(0, 0, np.ones(9, np.float32)), "36 bytes do not fit the service's 32-byte parts"),
    (True, lambda s: s.push(0, 4, b"abcd"), "no part 4: the service holds parts 0..3"),
    (True, lambda s: s.push(2, 0, b"abcd"), "no worker 2"),
    (True, lambda s: s.push(0, 0, b"abc"), "3 bytes is not a whole, positive number of FP32"),
    (True, lambda s: s.run({0: [("pull",)]}), "a script holds"),
    (True, lambda s: BytePSCluster(N, 1, part_bytes=64, asynchronous=True, service=s), "do not fit the RTL"),
    (False, lambda s: BytePSCluster(N, 1, "int32", service=s), r"serves .*FP32.* the cluster needs .*INT32"),
    (True, lambda s: BytePSCluster(N, 3, part_bytes=32, asynchronous=True, service=s).push(
        0, [np.ones(8, np.float32)] * 5),
     "needs more than the service's 4 parts"),
])
def test_bad_input_is_refused_with_a_message_before_any_traffic(asynchronous, call, message):
    svc = RtlSummationService(model_rtl(), "fp32", "sum", asynchronous)
    with pytest.raises(ValueError, match=message):
        call(svc)


def test_a_system_without_the_service_and_bad_cli_values_are_refused():
    rtl = CoarseRtl(N, 1, BB, 4, backend=ServiceModel())
    with pytest.raises(ValueError, match="no summation service: build it with sum_parts > 0"):
        RtlSummationService(rtl)
    with pytest.raises(ValueError, match="power-of-two sum_part_beats"):
        CoarseRtl(N, 1, BB, 4, sum_parts=2, sum_part_beats=3, backend=ServiceModel())
    assert main(["coarse", "sumsvc", "--rounds", "0"]) == 2


def _system_checks(rtl, seed, rounds):
    """BytePS clusters first (their shares need parts without asynchronous parameters), then rounds of every
    worker pushing and pulling every part; sync then async on one system."""
    for asynchronous in (False, True):
        bp = run_byteps(rtl, asynchronous, (48, 16), 1, "fp32", "sum", seed)
        # 3 parts of 32 bytes; sync: every worker pulls each sum, async: each worker pulls after its push
        assert bp["parts"] == 3 and bp["checked"] == 3 * N * 32
        rep = run_summation(rtl, asynchronous, rounds, "fp32", "sum", seed)
        assert rep["checked"] == rounds * N * PARTS * PB * BB
        assert all(r["cycles"] >= r["link_bound"] for r in rep["rounds"])
    rep = run_summation(rtl, False, 1, "bf16", "max", seed)       # a synchronous round after async ones
    assert rep["counters"] == {"PARTS_SUMMED": PARTS, "PUSHES_APPLIED": 0, "BAD_REQUESTS": 0}


@pytest.mark.cocotb
def test_service_in_the_system_on_verilator_sums_every_byte_as_golden_in_both_modes():
    with CoarseRtl(**GEOMETRY, mem_bytes=1 << 12, seed=seed_for(91)) as rtl:
        _system_checks(rtl, seed_for(91), rounds=2)


@pytest.mark.cocotb
def test_service_in_the_system_on_verilator_with_random_link_stalls():
    """Every link (the service's paths too) stalls in a cycle with probability 0.2."""
    with CoarseRtl(**GEOMETRY, mem_bytes=1 << 12, seed=seed_for(93), stall=0.2) as rtl:
        _system_checks(rtl, seed_for(93), rounds=1)


@pytest.mark.cocotb
def test_service_in_the_system_on_icarus_sums_every_byte_as_golden_in_both_modes():
    with CoarseRtl(**GEOMETRY, mem_bytes=1 << 12, seed=seed_for(92), sim="icarus") as rtl:
        _system_checks(rtl, seed_for(92), rounds=1)


def test_a_refused_script_leaves_the_replay_as_the_service_is():
    """A script refused halfway (its second item is bad) sends nothing and changes none of the golden replay:
    the round that follows is checked as if it had never been given."""
    svc = RtlSummationService(model_rtl(), "fp32", "sum")
    data = np.arange(8, dtype=np.float32)
    with pytest.raises(ValueError, match="36 bytes do not fit"):
        svc.run({0: [("push", 0, data), ("push", 1, np.ones(9, np.float32))]})
    pulled, _ = svc.run({0: [("push", 0, data), ("pull", 0)], 1: [("push", 0, data), ("pull", 0)]})
    assert pulled[0][0] == (2 * data).tobytes()
