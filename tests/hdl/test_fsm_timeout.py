"""ChunkFsm's step timeout (STEP_TIMEOUT) in Amaranth's simulator: the testbench plays the decoder, the issue
arbiter and stage (a grant reaches the FSM a cycle after the offer it answers), the units (a SEND/RECV retires
a few cycles after its grant) and the partition manager (moves the chunk on at once).

Checked: a step offered for ``timeout`` cycles without a grant is withdrawn and given up (``expired``), never
granted afterwards; the chunk's status becomes TIMEOUT and every later step retires without being offered; a
grant answering the last cycle's offer wins over the expiry; ``give_up`` (another chunk of the command gave up)
skips the remaining steps at once; an error the chunk already had is kept; 0 turns the timeout off.
"""

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.fsm import ChunkFsm, FsmState
from syncfabric.sim.golden.program import StepOp
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim

CFG = AceConfig.small()


def program(n):
    """``n`` SEND/RECV steps on alternating ports (each waits for the previous one to retire)."""
    return [{"op": StepOp.SEND if i % 2 == 0 else StepOp.RECV, "port": i % 2, "fwd": 0, "fwd_port": 0,
             "slot": i % 2, "key": i, "beats": 4, "wait": 0, "noop": 0, "illegal": 0} for i in range(n)]


def run_chunk(prog, timeout, refuse=(), grant_at=None, give_up_at=None, fail_first=False, max_cycles=2000):
    """Run one chunk of ``prog`` with STEP_TIMEOUT ``timeout``. Steps whose key is in ``refuse`` are never
    granted, except on the offered cycle number ``grant_at`` (counted from 1 for the step's first offered cycle);
    the others are granted on their first offered cycle. ``give_up_at``: the cycle ``give_up`` rises;
    ``fail_first``: the first step's unit reports LINK_CRC. Returns the granted keys, the number of cycles each
    refused step was offered, the cycles ``expired`` was high and the final status."""
    dut = ChunkFsm(CFG)
    out = {"granted": [], "offered": {}, "expired": [], "status": None, "offered_after_expiry": False}

    async def bench(ctx):
        ctx.set(dut.timeout, timeout)
        ctx.set(dut.view, {"n_phases": 1, "phases": [{"first": 0, "stop": len(prog)}]})
        ctx.set(dut.chunk.payload, {"cmd": 0, "chunk": 3, "buf": 1, "seq": 0})
        ctx.set(dut.chunk.valid, 1)
        await ctx.tick()
        ctx.set(dut.chunk.valid, 0)
        decoding, pend, inflight = [], None, []
        for cycle in range(max_cycles):
            ctx.set(dut.give_up, give_up_at is not None and cycle >= give_up_at)
            ctx.set(dut.granted, pend is not None)
            pick = bool(ctx.get(dut.fetch))
            ctx.set(dut.picked, pick)
            if pick:
                decoding.append([3, ctx.get(dut.pc)])
            for d in decoding:
                d[0] -= 1
            wb = prog[decoding.pop(0)[1]] if decoding and decoding[0][0] == 0 else None
            ctx.set(dut.wb, {"valid": wb is not None, "step": wb or {}})
            done = bool(inflight) and inflight[0][0] <= cycle
            ctx.set(dut.unit_done, {"valid": done,
                                    "status": Status.LINK_CRC if done and fail_first and inflight[0][1] == 0 else 0})
            offer = ctx.get(dut.offer)
            grant = False
            if offer.ready:
                key = offer.step.key
                if out["expired"]:
                    out["offered_after_expiry"] = True
                if key in refuse:
                    out["offered"][key] = out["offered"].get(key, 0) + 1
                    grant = out["offered"][key] == grant_at
                else:
                    grant = True
            if ctx.get(dut.expired):
                out["expired"].append(cycle)
            ctx.set(dut.move, ctx.get(dut.state) == FsmState.HANDOFF)
            await ctx.tick()
            if done:
                inflight.pop(0)
            s, pend = pend, prog[offer.step.key] if grant else None
            if s is not None:
                out["granted"].append(s["key"])
                inflight.append((cycle + 3, s["key"]))
            if ctx.get(dut.state) == FsmState.IDLE:
                out["status"] = ctx.get(dut.ctx.status)
                return
        raise AssertionError(f"the chunk did not end in {max_cycles} cycles: {out}")

    run_sim(dut, bench)
    return out


@pytest.mark.parametrize("timeout", [1, 7, 50])
def test_a_step_never_granted_is_given_up_after_the_timeout_and_the_rest_is_skipped(timeout):
    prog = program(8)
    r = run_chunk(prog, timeout, refuse={3})
    assert r["granted"] == [0, 1, 2]
    assert r["offered"] == {3: timeout}, r
    assert len(r["expired"]) >= 1 and not r["offered_after_expiry"]
    assert r["status"] == Status.TIMEOUT


def test_a_grant_of_the_last_offered_cycle_wins_over_the_expiry():
    prog = program(6)
    r = run_chunk(prog, 20, refuse={2}, grant_at=20)
    assert r["granted"] == list(range(6)) and r["expired"] == [] and r["status"] == Status.OK


def test_a_grant_one_cycle_before_the_timeout_leaves_the_chunk_ok():
    r = run_chunk(program(6), 20, refuse={2, 4}, grant_at=19)
    assert r["granted"] == list(range(6)) and r["status"] == Status.OK


def test_zero_turns_the_timeout_off():
    with pytest.raises(AssertionError, match="did not end"):
        run_chunk(program(4), 0, refuse={1}, max_cycles=600)


def test_give_up_skips_the_remaining_steps_at_once():
    prog = program(40)
    r = run_chunk(prog, 0, give_up_at=30)
    assert 0 < len(r["granted"]) < 40 and r["granted"] == list(range(len(r["granted"])))
    assert r["status"] == Status.TIMEOUT and not r["offered_after_expiry"]


def test_an_earlier_error_is_kept():
    r = run_chunk(program(6), 5, refuse={3}, fail_first=True)
    assert r["granted"] == [0, 1, 2] and r["status"] == Status.LINK_CRC
