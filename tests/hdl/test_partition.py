"""PartitionManager in Amaranth's simulator against a cycle model of its rules: random requests, partition sizes
(zero included), dispatch sequence numbers and STORE acknowledgements, in both forms (the small engine's, which
grants and applies a move in one cycle, and the design point's ``control_stages``, which registers the grant and
the leaving chunk); plus the rule that matters for deadlock freedom, checked directly: the oldest chunk moves
even into a full partition (the manager finding it, and the move, on the FSM bank's age matrix).

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest

from syncfabric.hdl.ace.arbiter import SEQ_BITS, age_matrix_model, oldest_first_model
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.partition import PartitionManager
from syncfabric.hdl.ace.regs import N_PARTITIONS, TERMINAL_PARTITION
from syncfabric.hdl.common.layouts import MAX_PHASES

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
#: the design point's form (``control_stages``) on the small engine's other parameters
STAGED = AceConfig.small(n_fsms=16, n_buffers=32)
assert STAGED.control_stages and not CFG.control_stages
F, NB = CFG.n_fsms, CFG.n_buffers


class Model:
    def __init__(self, cfg=CFG):
        self.F, self.staged = cfg.n_fsms, cfg.control_stages
        self.grant = None       # with the stage: the move granted last cycle, applied now
        self.leaving = None     # with the stage: the chunk picked last cycle, leaving now
        self.used = [0] * MAX_PHASES
        self.used_term = 0
        self.term = {}          # buffer -> (cmd, status)
        # the room checks follow the PART registers a cycle late (the RTL keeps each "count < PART" in a
        # flip-flop); after reset every partition counts as having room
        self.prev_part = [1] * N_PARTITIONS

    def step(self, x):
        """Outputs for inputs ``x`` this cycle, then the state update (as the RTL's clock edge)."""
        part, self.prev_part = self.prev_part, x["part"]
        term_free = self.used_term < part[TERMINAL_PARTITION]
        req, pwait, hwait = [], [], []
        oldest = oldest_first_model(x["active"], x["seq"])
        for f in range(self.F):
            is_oldest = f == oldest         # privileged: the oldest chunk any FSM holds
            nxt = x["phase"][f] + 1
            room = nxt < MAX_PHASES and self.used[nxt] < part[nxt]
            at_end, ho = x["at_end"][f], x["handoff"][f]
            req.append((at_end and (room or is_oldest)) or (ho and (term_free or is_oldest)))
            pwait.append(at_end and not room and not is_oldest)
            hwait.append(ho and not term_free and not is_oldest)
        ready = sorted(b for b in self.term if not x["pending"][b])
        pick = (ready[0], *self.term[ready[0]]) if ready else None
        if self.staged:
            # no grant in the cycle a grant is applied; the picked chunk leaves in the next cycle
            move = self.grant
            self.grant = oldest_first_model(req, x["seq"]) if move is None else None
            done, self.leaving = self.leaving, pick
        else:
            move, done = oldest_first_model(req, x["seq"]), pick
        out = {"move": move, "phase_wait": pwait, "handoff_wait": hwait, "room0": self.used[0] < part[0],
               "done": done, "used": list(self.used), "used_term": self.used_term}
        # update
        if pick:
            del self.term[pick[0]]
        if done:
            self.used_term -= 1
        if x["dispatch"]:
            self.used[0] += 1
        if move is not None:
            p = x["phase"][move]
            self.used[p] -= 1
            if x["handoff"][move]:
                self.term[x["buf"][move]] = (x["cmd"][move], x["status"][move])
                self.used_term += 1
            else:
                self.used[p + 1] += 1
        self.used = [u % 256 for u in self.used]
        self.used_term %= 256
        return out


@pytest.mark.parametrize("cfg", [CFG, STAGED], ids=["one-cycle", "staged"])
def test_partition_moves_match_the_model_under_random_requests(cfg):
    rng = random.Random(seed_for(5))
    dut = PartitionManager(cfg)
    model = Model(cfg)
    F, NB = cfg.n_fsms, cfg.n_buffers
    n = 3000
    checked = {"moves": 0, "handoffs": 0, "done": 0, "refused": 0}

    async def bench(ctx):
        base = 0
        prev_x = None
        for t in range(n):
            # a granted move reaches its FSM in this cycle (registered, with the stage): it still asks, with the
            # same chunk, as a real FSM does until it sees the move
            held = ctx.get(dut.move_fsm) if cfg.control_stages and ctx.get(dut.move_valid) else None
            base = (base + rng.randrange(3)) % (1 << SEQ_BITS)
            at_end = [rng.random() < 0.3 for _ in range(F)]
            x = {
                "part": [rng.choice([0, 1, 2, 3, 8]) for _ in range(N_PARTITIONS)],
                "dispatch": rng.random() < 0.3,
                "active": [rng.random() < 0.8 for _ in range(F)],
                "at_end": at_end,
                "handoff": [not a and rng.random() < 0.3 for a in at_end],
                "seq": [(base + rng.randrange(40)) % (1 << SEQ_BITS) for _ in range(F)],
                "phase": [rng.randrange(MAX_PHASES - 1) if a else rng.randrange(MAX_PHASES) for a in at_end],
                "buf": rng.sample(range(NB), F),
                "cmd": [rng.randrange(CFG.n_cmds) for _ in range(F)],
                "status": [rng.choice([0, 0, 0, 9]) for _ in range(F)],
                "pending": [rng.random() < 0.5 for _ in range(NB)],
            }
            if held is not None:
                prev = x["buf"][held]
                for name in ("active", "at_end", "handoff", "seq", "phase", "cmd", "status"):
                    x[name][held] = prev_x[name][held]
                old = prev_x["buf"][held]
                if old in x["buf"]:         # keep the buffers distinct
                    j = x["buf"].index(old)
                    x["buf"][j] = prev
                x["buf"][held] = old
            prev_x = x
            for p, v in enumerate(x["part"]):
                ctx.set(dut.part[p], v)
            ctx.set(dut.dispatch, x["dispatch"])
            ctx.set(dut.stores_pending, sum(1 << b for b in range(NB) if x["pending"][b]))
            for name in ("active", "at_end", "handoff"):
                ctx.set(getattr(dut, name), sum(1 << f for f in range(F) if x[name][f]))
            ctx.set(dut.ctx, [{name: x[name][f] for name in ("phase", "buf", "cmd", "status")}
                              for f in range(F)])
            ctx.set(dut.age, _age(x["seq"]))
            exp = model.step(x)
            got = {
                "move": ctx.get(dut.move_fsm) if ctx.get(dut.move_valid) else None,
                "phase_wait": [bool(ctx.get(dut.phase_wait) >> f & 1) for f in range(F)],
                "handoff_wait": [bool(ctx.get(dut.handoff_wait) >> f & 1) for f in range(F)],
                "room0": bool(ctx.get(dut.room0)),
                "done": ((ctx.get(dut.done.payload.buf), ctx.get(dut.done.payload.cmd),
                          ctx.get(dut.done.payload.status)) if ctx.get(dut.done.valid) else None),
                "used": [ctx.get(dut.used[p]) for p in range(MAX_PHASES)],
                "used_term": ctx.get(dut.used_term),
            }
            assert got == exp, f"cycle {t}: inputs {x}"
            checked["moves"] += exp["move"] is not None
            checked["handoffs"] += exp["move"] is not None and x["handoff"][exp["move"]]
            checked["done"] += exp["done"] is not None
            checked["refused"] += any(exp["phase_wait"]) or any(exp["handoff_wait"])
            await ctx.tick()

    run_sim(dut, bench)
    print(checked)
    assert all(checked.values()), checked


def _age(seq):
    """The age matrix (FSM bank) of chunks with dispatch numbers ``seq``, as the port takes it."""
    return [sum(b << g for g, b in enumerate(row)) for row in age_matrix_model(seq)]


def test_the_oldest_chunk_moves_into_a_full_partition_and_a_younger_one_waits():
    dut = PartitionManager(CFG)

    async def bench(ctx):
        for p in range(N_PARTITIONS):
            ctx.set(dut.part[p], 0)                 # every partition full
        await ctx.tick()                            # (the room flags follow PART a cycle late)
        ctx.set(dut.active, 0b11)
        ctx.set(dut.age, _age([7, 5] + [0] * (F - 2)))  # FSM 1 holds the oldest chunk
        ctx.set(dut.at_end, 0b11)
        assert ctx.get(dut.move_valid) and ctx.get(dut.move_fsm) == 1
        assert ctx.get(dut.phase_wait) == 0b01      # FSM 0 waits for room
        await ctx.tick()
        ctx.set(dut.age, _age([7, 9] + [0] * (F - 2)))  # FSM 1 took a new, younger chunk: FSM 0 is the oldest
        ctx.set(dut.at_end, 0b11)
        assert ctx.get(dut.move_valid) and ctx.get(dut.move_fsm) == 0 and ctx.get(dut.phase_wait) == 0b10
        ctx.set(dut.active, 0b10)                   # FSM 0 idle: FSM 1 is the oldest chunk held
        ctx.set(dut.at_end, 0b10)
        assert ctx.get(dut.move_valid) and ctx.get(dut.move_fsm) == 1 and ctx.get(dut.phase_wait) == 0

    run_sim(dut, bench)
