"""Components that refuse their arguments do so before they exist (hdl/common/refuse.py): a ValueError, and no
"created but never used" warning from Amaranth, without its private API."""

import gc
import warnings

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import wiring

from syncfabric.hdl.ace.arbiter import AgeMatrix, OldestPick
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.coarse.cci import CciTarget
from syncfabric.hdl.coarse.summation import PushScoreboard, SummationService
from syncfabric.hdl.coarse.sync_core import SyncCore
from syncfabric.hdl.common.refuse import Checked
from syncfabric.hdl.system.board import BoardSystem
from syncfabric.hdl.system.link import DelayLine, Link
from syncfabric.hdl.system.pinlink import PinLink
from syncfabric.hdl.system.switch import Switch
from syncfabric.hdl.system.top import AceSystem
from syncfabric.host.run import engine_config_for
from syncfabric.host.transports.ace.amaranth_sim import Partitions


def _unused_warnings(make):
    # Amaranth stays silent about unused designs until the first elaboration of the process: start one
    Fragment.get(_Guarded(1), None)
    with warnings.catch_warnings():         # what earlier code left unused is not this call's
        warnings.simplefilter("ignore")
        gc.collect()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        try:
            make()
        except ValueError:
            pass
        gc.collect()
    return [w for w in got if "never used" in str(w.message)]


class _Plain(wiring.Component):
    def __init__(self, n):
        super().__init__({})
        if n < 1:
            raise ValueError("refused after it exists")

    def elaborate(self, platform):
        return Module()


class _Guarded(Checked, _Plain):
    @classmethod
    def check(cls, n):
        if n < 1:
            raise ValueError("refused before it exists")


def test_a_refusal_after_construction_warns_and_a_checked_one_does_not():
    assert len(_unused_warnings(lambda: _Plain(0))) == 1            # what Checked exists to avoid
    assert _unused_warnings(lambda: _Guarded(0)) == []
    with pytest.raises(ValueError, match="before it exists"):
        _Guarded(0)
    ok = _Guarded(1)                                                 # good arguments: an ordinary component
    assert isinstance(ok, wiring.Component) and ok.signature.members == wiring.Signature({}).members


def _small(topology):
    return engine_config_for(AceConfig.profile("small"), topology)


@pytest.mark.parametrize("make, msg", [
    (lambda: AgeMatrix(0), "at least one FSM"),
    (lambda: OldestPick(0), "at least one FSM"),
    (lambda: Switch(16, 1, 4, 64, 4), "at least 2 ports"),
    (lambda: Switch(16, 4, 3, 64, 4), "power of two"),
    (lambda: PinLink(_small("ring:2"), div=3), "even number"),
    (lambda: AceSystem(_small("ring:4"), "ring:4", ranks=(4,)), "distinct ranks"),
    (lambda: AceSystem(_small("switch:2"), "switch:2", ranks=(0,)), "holds all ranks of a switch"),
    (lambda: BoardSystem(_small("ring:4"), topology="ring:4", link_port={}), "no link leaves it"),
    (lambda: BoardSystem(_small("ring:4"), topology="ring:4", ranks=(0,)), "need link_port"),
    (lambda: BoardSystem(_small("ring:2"), mem_bytes=1000), "power of two"),
    (lambda: SyncCore(beat_bytes=2), "at least 4"),
    (lambda: Partitions(_small("ring:2"), "ring:2", [[0]]), "every rank"),
    (lambda: Link(8, 0), "latency must be in"),
    (lambda: Link(8, 1, (3, 2)), "rate must be"),
    (lambda: Link(8, 2, (1, 1), 0), "credit latency must be in"),
    (lambda: DelayLine(8, 5, 4), "latency must be in"),
    (lambda: CciTarget(depth=0), "at least 1 entry"),
    (lambda: PushScoreboard(0, 4, 2), "a depth and a probe"),
    (lambda: SummationService(n_workers=1), "at least 2 workers"),
])
def test_refused_components_raise_and_leave_nothing_unused(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()
    assert _unused_warnings(make) == []
