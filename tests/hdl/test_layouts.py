"""pack/unpack agree with Amaranth's own layout constants, and reject what does not fit."""

import random

import pytest

from syncfabric.hdl.common.layouts import alu_operands_layout, alu_result_layout, pack, unpack
from syncfabric.sim.golden.types import DType, ReduceOp


@pytest.mark.parametrize("lanes,tag_width", [(1, 0), (2, 8), (16, 3)])
def test_pack_matches_amaranth_const_and_round_trips(lanes, tag_width):
    rng = random.Random(lanes * 100 + tag_width)
    layout = alu_operands_layout(lanes, tag_width)
    for _ in range(50):
        fields = {"a": rng.getrandbits(32 * lanes), "b": rng.getrandbits(32 * lanes),
                  "dtype": rng.choice(list(DType)), "op": rng.choice(list(ReduceOp)),
                  "tag": rng.getrandbits(tag_width) if tag_width else 0}
        bits = pack(layout, fields)
        assert bits == layout.const({k: int(v) for k, v in fields.items()}).as_value().value
        assert unpack(layout, bits) == {k: int(v) for k, v in fields.items()}
    out = alu_result_layout(lanes, tag_width)
    assert unpack(out, pack(out, {"data": 5})) == {"data": 5, "tag": 0}


def test_pack_rejects_overflow_and_unknown_fields():
    layout = alu_operands_layout(1, 2)
    with pytest.raises(ValueError, match="does not fit in 2 bits"):
        pack(layout, {"tag": 4})
    with pytest.raises(ValueError, match="not a field"):
        pack(layout, {"lanes": 1})
