"""Program format: step encoding (the RTL's instruction word) and every rule of check_programs."""

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.program import (FIELDS, STEP_BITS, Phase, Program, ProgramError, Step, StepOp,
                                           check_link_order, check_programs)
from syncfabric.sim.golden.topology import parse

# ---- encoding -------------------------------------------------------------------------------------------------


def test_field_layout_is_64_contiguous_bits():
    pos = 0
    for name, lsb, width in FIELDS:
        assert lsb == pos, name
        pos += width
    assert pos == STEP_BITS == 64


def test_known_encoding():
    # RECV slot=5 block=6 port=1 key=7 reduce fwd=0 peer=2 fwd_key=9
    s = Step(StepOp.RECV, slot=5, block=6, port=1, peer=2, key=7, reduce=True, fwd=0, fwd_key=9)
    word = 3 | 1 << 3 | 1 << 4 | 1 << 5 | 0 << 8 | 5 << 11 | 6 << 21 | 2 << 31 | 7 << 40 | 9 << 52
    assert s.encode() == word
    assert Step.decode(word) == s
    assert Step(StepOp.LOAD, 1, 2).encode() == 1 | 1 << 11 | 2 << 21


@st.composite
def steps(draw):
    op = draw(st.sampled_from(list(StepOp)))
    slot, block = draw(st.integers(0, 1023)), draw(st.integers(0, 1023))
    if op in (StepOp.LOAD, StepOp.STORE):
        return Step(op, slot, block)
    port, key = draw(st.integers(0, 7)), draw(st.integers(0, 4095))
    if op in (StepOp.SEND, StepOp.PUT):
        return Step(op, slot, block, port, draw(st.integers(0, 511)), key)
    red = draw(st.booleans())
    if draw(st.booleans()):
        return Step(op, slot, block, port, draw(st.integers(0, 511)), key, red, draw(st.integers(0, 7)),
                    draw(st.integers(0, 4095)))
    return Step(op, slot, block, port, 0, key, red)


@given(steps())
@settings(max_examples=300, deadline=None)
def test_encode_decode_roundtrip(step):
    w = step.encode()
    assert 0 < w < 1 << 64
    assert Step.decode(w) == step


@pytest.mark.parametrize("word,match", [(0, "unknown opcode"), (7, "unknown opcode"), (6, "unknown opcode"),
                                        (3 | 1 << 8, "fwd_port without fwd_en"), (1 << 64, "64-bit"),
                                        (-1, "64-bit"), (1 | 1 << 5, "must leave port unset")])
def test_decode_rejects(word, match):
    with pytest.raises(ProgramError, match=match):
        Step.decode(word)


@pytest.mark.parametrize("kwargs,match", [
    (dict(op=StepOp.LOAD, slot=1024, block=0), "slot=1024 does not fit"),
    (dict(op=StepOp.LOAD, slot=0, block=-1), "block=-1 does not fit"),
    (dict(op=StepOp.SEND, slot=0, block=0, key=4096), "key=4096"),
    (dict(op=StepOp.SEND, slot=0, block=0, peer=512), "peer=512"),
    (dict(op=StepOp.SEND, slot=0, block=0, port=8), "port=8"),
    (dict(op=StepOp.RECV, slot=0, block=0, fwd=8), "fwd=8"),
    (dict(op=StepOp.LOAD, slot=0, block=0, port=1), "LOAD step must leave port unset"),
    (dict(op=StepOp.SEND, slot=0, block=0, reduce=True), "SEND step must leave reduce unset"),
    (dict(op=StepOp.PUT, slot=0, block=0, fwd=1), "PUT step must leave fwd unset"),
    (dict(op=StepOp.RECV, slot=0, block=0, peer=3), "RECV step must leave peer unset"),
    (dict(op=9, slot=0, block=0), "unknown step opcode"),
    (dict(op=StepOp.RECV, slot=0, block=0, reduce=1), "must be a bool"),
])
def test_step_field_validation(kwargs, match):
    with pytest.raises(ProgramError, match=match):
        Step(**kwargs)


def test_program_n_blocks_multiple_of_segments():
    with pytest.raises(ProgramError, match="not a multiple"):
        Program(0, 4, "reduce_scatter", "x", 6, 6, ())


def test_phase_table_and_listing():
    prog = generate("allreduce", None, "torus:2x2x2")[0]
    table = prog.phase_table()
    assert [n for _, n, _ in table] == [len(ph.steps) for ph in prog.phases]
    assert [m for _, _, m in table] == [0b11, 0b1100, 0b110000, 0b11]
    assert table[1][0] == table[0][1]
    assert "phase 2 ar-horizontal" in prog.listing()


# ---- check_programs -------------------------------------------------------------------------------------------

def _edit(progs, rank, phase, index, step=None, **changes):
    """Programs with step ``index`` of ``phase`` at ``rank`` replaced (or changed, or deleted if step is False)."""
    progs = list(progs)
    p = progs[rank]
    steps = list(p.phases[phase].steps)
    if step is False:
        del steps[index]
    else:
        steps[index] = step if step is not None else dataclasses.replace(steps[index], **changes)
    phases = list(p.phases)
    phases[phase] = dataclasses.replace(phases[phase], steps=tuple(steps))
    progs[rank] = dataclasses.replace(p, phases=tuple(phases))
    return progs


def _find(prog, op, pred=lambda s: True):
    for pi, si, s in prog.steps():
        if s.op == op and pred(s):
            return pi, si, s
    raise LookupError(op)


RING3 = parse("ring:3")
AR3 = generate("allreduce", "ring", RING3)


def _reject(progs, topo, match):
    with pytest.raises(ProgramError, match=match):
        check_programs(progs, topo)


def test_generated_programs_pass():
    check_programs(AR3, RING3)


def test_rejects_wrong_program_count():
    _reject(AR3[:2], RING3, "2 programs for 3 endpoints")


def test_rejects_programs_out_of_rank_order():
    _reject([AR3[1], AR3[0], AR3[2]], RING3, r"programs\[0\] has rank 1")


def test_rejects_inconsistent_headers():
    progs = list(AR3)
    progs[2] = dataclasses.replace(progs[2], n_slots=9)
    _reject(progs, RING3, "n_slots=9 differs")
    progs = list(AR3)
    progs[1] = dataclasses.replace(progs[1], nranks=4)
    _reject(progs, RING3, "nranks=4")
    progs = list(AR3)
    progs[1] = dataclasses.replace(progs[1], phases=progs[1].phases + (Phase("extra", (), ()),))
    _reject(progs, RING3, "2 phases")


def test_rejects_slot_out_of_range():
    _reject(_edit(AR3, 0, 0, 0, slot=3), RING3, "slot 3 >= n_slots 3")


def test_rejects_block_out_of_range():
    _reject(_edit(AR3, 0, 0, 0, block=3), RING3, "block 3 >= n_blocks 3")


def test_rejects_send_on_port_without_link():
    pi, si, s = _find(AR3[0], StepOp.SEND)
    _reject(_edit(AR3, 0, pi, si, port=1), RING3, "no outgoing link on port 1")
    _reject(_edit(AR3, 0, pi, si, port=5), RING3, "port 5 out of range")


def test_rejects_send_to_non_neighbour():
    pi, si, s = _find(AR3[0], StepOp.SEND)
    _reject(_edit(AR3, 0, pi, si, peer=2), RING3, "leads to rank 1, not to destination 2")
    _reject(_edit(AR3, 0, pi, si, peer=0), RING3, "message to itself")
    _reject(_edit(AR3, 0, pi, si, peer=7), RING3, "destination 7 is not a rank")


def test_rejects_recv_on_port_without_link():
    pi, si, s = _find(AR3[0], StepOp.RECV)
    _reject(_edit(AR3, 0, pi, si, port=0), RING3, "cannot receive on port 0")


def test_rejects_recv_on_wrong_port():
    t = parse("bidir-ring:3")
    progs = generate("allreduce", "bidir-ring", t)
    pi, si, s = _find(progs[0], StepOp.RECV, lambda s: s.port == 1)
    _reject(_edit(progs, 0, pi, si, port=0), t, "arrives at rank 0 on port 1")


def test_rejects_load_without_input():
    t = parse("ring:3")
    progs = generate("allgather", "ring", t)
    pi, si, s = _find(progs[0], StepOp.LOAD)
    _reject(_edit(progs, 0, pi, si, block=1), t, "rank 0 has no input for block 1")


def test_rejects_store_without_output():
    t = parse("ring:3")
    progs = generate("reduce_scatter", "ring", t)
    pi, si, s = _find(progs[0], StepOp.STORE)
    _reject(_edit(progs, 0, pi, si, block=2), t, "rank 0 has no output for block 2")
    rprogs = list(generate("reduce", "ring", t, root=1))
    rprogs[0] = dataclasses.replace(rprogs[1], rank=0)  # the root's program text at a non-root rank
    _reject(rprogs, t, "rank 0 has no output for block 0")


def test_rejects_read_before_write():
    pi, si, s = _find(AR3[0], StepOp.LOAD, lambda s: s.slot == 2)
    _reject(_edit(AR3, 0, pi, si, step=False), RING3, "SEND reads slot 2 before anything was written")
    pi, si, s = _find(AR3[0], StepOp.LOAD, lambda s: s.slot == 1)
    _reject(_edit(AR3, 0, pi, si, step=False), RING3, "RECV reduce into slot 1 before")


def test_rejects_store_of_unwritten_slot():
    t = parse("ring:3")
    progs = generate("broadcast", "ring", t, root=0)
    # A non-root rank storing a slot nobody wrote: replace its first RECV by a STORE of that slot.
    pi, si, s = _find(progs[1], StepOp.RECV)
    _reject(_edit(progs, 1, pi, si, step=Step(StepOp.STORE, s.slot, s.block)), t, "STORE reads slot")


def test_rejects_block_size_mismatch():
    t = parse("bidir-ring:3")
    progs = generate("reduce_scatter", "bidir-ring", t)  # 2 sub-blocks per segment: sizes may differ
    pi, si, s = _find(progs[0], StepOp.SEND)
    other = s.block ^ 1
    _reject(_edit(progs, 0, pi, si, block=other), t, "sub-block")


def test_rejects_duplicate_recv_key():
    pis = [(pi, si, s) for pi, si, s in AR3[0].steps() if s.op == StepOp.RECV]
    (pi, si, s), (_, _, s2) = pis[0], pis[1]
    _reject(_edit(AR3, 0, pi, si, key=s2.key), RING3, "duplicate RECV key")


def test_rejects_send_without_recv():
    pi, si, s = _find(AR3[0], StepOp.SEND)
    _reject(_edit(AR3, 0, pi, si, key=99), RING3, "no RECV with key 99 in phase 0 at rank 1")


def test_rejects_forward_without_recv():
    pi, si, s = _find(AR3[0], StepOp.RECV, lambda s: s.fwd is not None)
    _reject(_edit(AR3, 0, pi, si, fwd_key=77), RING3, "no RECV with key 77")


def test_rejects_recv_without_send():
    pi, si, s = _find(AR3[0], StepOp.SEND)
    progs = _edit(AR3, 0, pi, si, step=False)
    _reject(progs, RING3, f"no message is ever sent with key {s.key} in phase 0 to rank 1")


def test_rejects_two_messages_for_one_recv():
    # Rank 0 sends its first message twice.
    pi, si, s = _find(AR3[0], StepOp.SEND)
    p = AR3[0]
    steps = list(p.phases[0].steps)
    steps.insert(si, s)
    progs = list(AR3)
    progs[0] = dataclasses.replace(p, phases=(dataclasses.replace(p.phases[0], steps=tuple(steps)),))
    _reject(progs, RING3, "a second message with key")


def test_rejects_rooted_collective_without_root():
    t = parse("ring:3")
    progs = [dataclasses.replace(p, root=None) for p in generate("broadcast", "ring", t, root=0)]
    _reject(progs, t, "needs a root")


def test_rejects_switch_message_to_self_and_accepts_any_peer():
    t = parse("switch:4")
    progs = generate("allreduce", "ring", t)
    check_programs(progs, t)
    pi, si, s = _find(progs[0], StepOp.SEND)
    _reject(_edit(progs, 0, pi, si, peer=0), t, "message to itself")


def test_reports_every_problem():
    progs = _edit(AR3, 0, 0, 0, slot=3)
    progs = _edit(progs, 1, 0, 0, block=3)
    with pytest.raises(ProgramError) as e:
        check_programs(progs, RING3)
    assert "slot 3 >= n_slots" in str(e.value) and "block 3 >= n_blocks" in str(e.value)


def test_link_order_violation_is_detected_but_legal():
    """Swapping two SENDs to the same neighbour keeps the programs valid (keys match) but breaks link order."""
    t = parse("switch:4")
    progs = generate("allreduce", "halving-doubling", t)
    check_link_order(progs, t)
    p = progs[0]
    steps = list(p.phases[0].steps)
    i = next(i for i, s in enumerate(steps) if s.op == StepOp.SEND)
    assert steps[i + 1].op == StepOp.SEND and steps[i + 1].peer == steps[i].peer
    steps[i], steps[i + 1] = steps[i + 1], steps[i]
    bad = list(progs)
    bad[0] = dataclasses.replace(p, phases=(dataclasses.replace(p.phases[0], steps=tuple(steps)),))
    check_programs(bad, t)
    with pytest.raises(ProgramError, match="rank 0 -> rank 2 port 0"):
        check_link_order(bad, t)
