"""NPU emulation: compute phases that take a share of the memory port, and a training iteration's backward
pass whose gradient all-reduces overlap the compute. Ratios of simulated cycles only (deterministic)."""

import pytest

from syncfabric.host.npu import Layer, training_iteration
from syncfabric.host.system import System, UsageError

LAYERS = [Layer("conv1", 3000, 2048), Layer("conv2", 2000, 4096), Layer("fc", 1000, 8192)]


@pytest.mark.cocotb
def test_memory_share_slows_collectives_and_overlap_hides_communication():
    with System({"topology": "ring:4", "links": {"latency": 4}}, backend="verilator") as s:
        free = training_iteration(s, LAYERS, share=0.0)
        busy = training_iteration(s, LAYERS, share=0.9)
        serial = training_iteration(s, LAYERS, share=0.5, overlap=False)
        half = training_iteration(s, LAYERS, share=0.5)
    assert free["compute_cycles"] == busy["compute_cycles"] == 6000
    # the NPU taking 90 % of the memory port slows the all-reduces that run beside its compute
    assert busy["layers"][0]["cycles"] > 1.5 * free["layers"][0]["cycles"]
    assert busy["exposed_cycles"] > 2 * free["exposed_cycles"]
    # posting each gradient's all-reduce and computing on hides communication that waiting for it does not
    assert serial["exposed_cycles"] > 2 * half["exposed_cycles"]
    assert serial["total_cycles"] > half["total_cycles"]


def test_training_iteration_on_the_amaranth_backend():
    with System({"topology": "ring:2", "links": {"latency": 4}}) as s:
        r = training_iteration(s, [Layer("a", 200, 64), Layer("b", 100, 32)], share=0.5)
        assert r["compute_cycles"] == 300 and r["total_cycles"] > 300 and len(r["layers"]) == 2
        with pytest.raises(UsageError, match="share"):
            s.compute(10, share=1.5)
        with pytest.raises(ValueError, match="no layers"):
            training_iteration(s, [])
