"""ChunkFsm in Amaranth's simulator: the testbench plays the decoder (a step comes back three cycles after the
FSM's decode request is picked), the issue arbiter and stage (grant a ready step at random; the FSM hears of
the grant a cycle later, when the step's job goes out, and offers nothing in that cycle), the units (retire
SEND/RECVs after random delays, in order) and the partition manager (moves the chunk on at random). Random
programs of LOAD/SEND/RECV/STORE steps over two phases, some waiting for their slot's LOAD.

Checked: every step is granted exactly once and in program order, phase by phase; at most two steps are in
flight, and two only on one unit (same op, port, forward) with different slots for RECVs; a STORE never issues
behind a RECV that writes its slot; a waiting step is offered only after its slot's LOAD ended; unit errors and
illegal steps end up in the context's status, and so does a failed LOAD of the chunk's buffer (not one of
another buffer); the FSM returns to IDLE and takes its next chunk.

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.fsm import ChunkFsm, FsmState
from syncfabric.sim.golden.program import StepOp
from syncfabric.sim.golden.types import Status

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
N_CHUNKS = 30
OPS = (StepOp.LOAD, StepOp.SEND, StepOp.RECV, StepOp.STORE)


def random_program(rng, n_steps, weights=(1, 4, 4, 2), slots=2):
    prog = []
    for i in range(n_steps):
        op = rng.choices(OPS, weights=weights)[0]
        # (few ports and slots, so that steps often meet on one unit or one slot)
        prog.append({"op": op, "port": int(rng.random() < 0.2), "fwd": int(op == StepOp.RECV and rng.random() < 0.2),
                     "fwd_port": 1, "slot": rng.randrange(slots), "key": i, "beats": 4,
                     "wait": int(rng.random() < 0.15), "noop": 0, "illegal": 0})
    return prog


# step mix (op weights, slots) and the units' chance to retire a step per cycle. The last: mostly RECVs and
# STOREs over three slots and slow units, so that STOREs often come behind two RECVs in flight
MIXES = {"default": ((1, 4, 4, 2), 2, 0.15), "recv_store": ((1, 1, 6, 4), 3, 0.04)}


@pytest.mark.parametrize("seed,mix", [(0, "default"), (1, "default"), (2, "default"), (3, "recv_store")])
def test_steps_are_granted_in_order_within_the_overlap_rules(seed, mix):
    rng = random.Random(seed_for(100 + seed))
    dut = ChunkFsm(CFG)
    chunks = []
    # two SEND/RECVs in flight; a STORE granted behind one; behind two
    stats = {"pairs": 0, "stores_behind": 0, "stores_behind_two": 0}
    for n in range(N_CHUNKS):
        lens = [rng.randint(1, 12), rng.randint(0, 12)]
        load_end = rng.randint(0, min(2, lens[0]))
        prog = random_program(rng, sum(lens), *MIXES[mix][:2])
        if n % 3 == 2:                               # an illegal step retires as a no-op and is reported
            prog[-1].update(illegal=1, noop=1)
        chunks.append({"cmd": n % CFG.n_cmds, "chunk": 10 + n, "buf": n + 1, "seq": n, "final": n % 2, "lens": lens,
                       "load_end": load_end, "prog": prog, "fail": n % 3 == 1,
                       "load_fail": n % 6 == 0, "load_fail_at": rng.randrange(4)})

    async def bench(ctx):
        for ck in chunks:
            lens, prog = ck["lens"], ck["prog"]
            ctx.set(dut.view, {"n_phases": 2 if lens[1] else 1,
                               "phases": [{"first": ck["load_end"], "stop": lens[0]},
                                          {"first": lens[0], "stop": lens[0] + lens[1]}]})
            ctx.set(dut.chunk.payload, {"cmd": ck["cmd"], "chunk": ck["chunk"], "buf": ck["buf"] % CFG.n_buffers,
                                        "seq": ck["seq"], "final": ck["final"]})
            ctx.set(dut.chunk.valid, 1)
            while not ctx.get(dut.chunk.ready):
                await ctx.tick()
            await ctx.tick()
            ctx.set(dut.chunk.valid, 0)
            assert ctx.get(dut.ctx.chunk) == ck["chunk"] and ctx.get(dut.ctx.buf) == ck["buf"] % CFG.n_buffers
            assert ctx.get(dut.ctx.final) == ck["final"]
            expected = list(range(ck["load_end"], lens[0])) + list(range(lens[0], lens[0] + lens[1]))
            granted, inflight, decoding = [], [], []
            fills = []              # [cycles left, slot]: LOADs of the chunk's buffer that end later
            filled_keys = set()     # waiting steps whose LOAD has ended
            waiting = {}            # waiting step key -> its fill (any fill of the slot ends the wait)
            wb_at, own_loads = {}, []   # when each step came back; the FSM's own LOADs: [cycle, slot, ended]
            pend = None                 # the step granted last cycle: its job goes out this cycle
            for cycle in range(3000):
                # issue stage: last cycle's grant reaches the FSM (whose decode request depends on it: set first),
                # and its own LOAD goes to the load unit
                ctx.set(dut.granted, pend is not None)
                ctx.set(dut.own_load, {"valid": pend is not None and pend["op"] == StepOp.LOAD,
                                       "slot": 0 if pend is None else pend["slot"]})
                # decoder: a picked request comes back three cycles later
                pick = ctx.get(dut.fetch) and rng.random() < 0.8
                ctx.set(dut.picked, pick)
                if pick:
                    decoding.append([3, ctx.get(dut.pc)])
                wb = None
                for d in decoding:
                    d[0] -= 1
                if decoding and decoding[0][0] == 0:
                    wb = prog[decoding.pop(0)[1]]
                    if wb["wait"]:          # its slot's LOAD ends some cycles later
                        waiting[wb["key"]] = [rng.randrange(3, 30), wb["slot"]]
                        fills.append(waiting[wb["key"]])
                ctx.set(dut.wb, {"valid": wb is not None, "step": wb or {}})
                if wb is not None:
                    wb_at[wb["key"]] = cycle
                # LOADs that end now (at most two per cycle; the others a cycle later), the other buffer's too
                now = [f for f in fills if f[0] <= 0][:2]
                ports = [{"valid": 1, "buf": ck["buf"] % CFG.n_buffers, "slot": f[1]} for f in now]
                if len(ports) < 2 and rng.random() < 0.2:
                    ports.append({"valid": 1, "buf": (ck["buf"] + 1) % CFG.n_buffers, "slot": rng.randrange(4)})
                ctx.set(dut.filled, ports + [{"valid": 0, "buf": 0, "slot": 0}] * (2 - len(ports)))
                for f in now:
                    fills.remove(f)
                    for o in own_loads:
                        o[2] = o[2] or o[1] == f[1]
                for k, f in list(waiting.items()):     # any LOAD of its slot ending ends the wait
                    if any(g[1] == f[1] for g in now):
                        filled_keys.add(k)
                        del waiting[k]
                for f in fills:
                    f[0] -= 1
                # units: retire the oldest SEND/RECV in flight now and then
                done = inflight and rng.random() < MIXES[mix][2]
                fail = done and ck["fail"] and inflight[0]["key"] == expected[0]
                ctx.set(dut.unit_done, {"valid": bool(done), "status": Status.LINK_CRC if fail else 0})
                # a LOAD of this chunk's buffer fails (load_fail), or one of another buffer's does
                mine = ck["load_fail"] and cycle == ck["load_fail_at"]
                other = not mine and rng.random() < 0.05
                ctx.set(dut.load_err, {"valid": mine or other, "status": Status.AXI_ERROR,
                                       "buf": (ck["buf"] + other) % CFG.n_buffers})
                # arbiter: grant the offered step at random
                offer = ctx.get(dut.offer)
                assert pend is None or not offer.ready, "offered while its grant goes out"
                grant = bool(offer.ready) and rng.random() < 0.7
                if offer.ready:
                    s = prog[offer.step.key]
                    assert not s["wait"] or s["key"] in filled_keys, "a waiting step was offered"
                # partition manager: move the chunk on at random once its phase is done
                move = (ctx.get(dut.at_end) or ctx.get(dut.state) == FsmState.HANDOFF) and rng.random() < 0.5
                ctx.set(dut.move, move)
                await ctx.tick()
                if done:
                    inflight.pop(0)
                s, pend = pend, prog[offer.step.key] if grant else None
                if s is not None:
                    granted.append(s["key"])
                    if s["op"] == StepOp.LOAD:      # the load unit finishes it later
                        fills.append([rng.randrange(3, 30), s["slot"]])
                        own_loads.append([cycle, s["slot"], False])
                    elif not s["noop"]:             # a step held while its slot's LOAD was granted waits for it
                        assert not any(o[1] == s["slot"] and not o[2] and wb_at[s["key"]] <= o[0]
                                       for o in own_loads), "a step overtook its slot's LOAD"
                    if s["op"] in (StepOp.SEND, StepOp.RECV) and not s["noop"]:
                        for o in inflight:
                            assert (o["op"], o["port"], o["fwd"]) == (s["op"], s["port"], s["fwd"])
                            assert s["op"] == StepOp.SEND or o["slot"] != s["slot"]
                        inflight.append(s)
                        assert len(inflight) <= 2
                        stats["pairs"] += len(inflight) == 2
                    if s["op"] == StepOp.STORE and not s["noop"]:      # (a no-op touches nothing)
                        assert not any(o["op"] == StepOp.RECV and o["slot"] == s["slot"] for o in inflight)
                        stats["stores_behind"] += bool(inflight)
                        stats["stores_behind_two"] += len(inflight) == 2
                if ctx.get(dut.state) == FsmState.IDLE:
                    break
            assert granted == expected, (ck, granted)
            status = ctx.get(dut.ctx.status)
            if prog[-1]["illegal"] and expected and expected[-1] == len(prog) - 1:
                assert status == Status.ILLEGAL_INSTRUCTION
            elif ck["fail"] and any(prog[k]["op"] in (StepOp.SEND, StepOp.RECV) for k in expected[:1]):
                assert status == Status.LINK_CRC
            elif ck["load_fail"]:
                assert status == Status.AXI_ERROR
            else:
                assert status == Status.OK
            for _ in range(rng.randrange(3)):
                await ctx.tick()

    run_sim(dut, bench)
    assert stats["pairs"] > 10 and stats["stores_behind"] > 10, stats
    assert mix != "recv_store" or stats["stores_behind_two"] > 1, stats
