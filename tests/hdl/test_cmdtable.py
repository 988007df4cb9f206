"""CommandTable in Amaranth's simulator against a model: random commands (chunk counts, deposits) allocated into
free slots, their chunks finishing, deposits arriving, STOREs folding counts and errors reported, under random
backpressure on the completion stream.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.cmdtable import CommandTable
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.common.layouts import COUNT_BITS

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
NC = CFG.n_cmds
N_REPORTS = 3
NONE = (1 << COUNT_BITS) - 1


class Model:
    def __init__(self):
        self.cmds = {}          # slot -> dict

    def finished(self):
        return sorted(s for s, c in self.cmds.items()
                      if c["dispatched"] and c["done"] == c["n_chunks"] and c["arrived"] == c["arrivals"])


def test_commands_complete_when_every_chunk_and_deposit_is_in_with_their_first_error_and_count():
    rng = random.Random(seed_for(77))
    dut = CommandTable(CFG, n_reports=N_REPORTS)
    model = Model()
    completed = []

    async def bench(ctx):
        tag = 0
        for cycle in range(3000):
            # the completion the table offers now
            fin = model.finished()
            valid = ctx.get(dut.done.valid)
            assert valid == bool(fin), (cycle, fin)
            ready = rng.random() < 0.6
            ctx.set(dut.done.ready, ready)
            taken = None
            if valid:
                p = ctx.get(dut.done.payload)
                c = model.cmds[fin[0]]
                assert p.slot == fin[0]
                assert (p.status, p.detail) == c["error"], (cycle, p, c)
                assert p.contributors == (0 if c["contrib"] == NONE else c["contrib"])
                assert ctx.get(dut.entries[p.slot]).tag == c["tag"]
                if ready:
                    taken = p.slot
                    completed.append(c["tag"])
            assert ctx.get(dut.busy) == sum(1 << s for s in model.cmds)

            # this cycle's inputs
            free = [s for s in range(NC) if s not in model.cmds]
            alloc = free and rng.random() < 0.3
            if alloc:
                slot = rng.choice(free)
                tag += 1
                n_chunks, arrivals = rng.randint(1, 4), rng.choice([0, 0, 1, 3])
                ctx.set(dut.alloc, {"valid": 1, "slot": slot,
                                    "entry": {"tag": tag, "geom": {"n_chunks": n_chunks}, "arrivals": arrivals}})
            else:
                ctx.set(dut.alloc, {})
            live = [s for s in model.cmds if s != taken]
            disp = [s for s in live if not model.cmds[s]["dispatched"] and rng.random() < 0.3]
            ctx.set(dut.dispatched, sum(1 << s for s in disp))
            chunk = [s for s in live if model.cmds[s]["done"] < model.cmds[s]["n_chunks"]]
            chunk = rng.choice(chunk) if chunk and rng.random() < 0.4 else None
            ctx.set(dut.chunk_done, {"valid": chunk is not None, "cmd": chunk or 0})
            dep = [s for s in live if model.cmds[s]["arrived"] < model.cmds[s]["arrivals"]]
            dep = rng.choice(dep) if dep and rng.random() < 0.4 else None
            ctx.set(dut.arrived, {"valid": dep is not None, "cmd": dep or 0})
            fold = rng.choice(live) if live and rng.random() < 0.3 else None
            count = rng.randrange(1, 9)
            ctx.set(dut.fold, {"valid": fold is not None, "cmd": fold or 0, "count": count})
            reports = []
            for _ in range(N_REPORTS):
                if live and rng.random() < 0.05:
                    reports.append({"valid": 1, "cmd": rng.choice(live), "status": rng.randrange(1, 12),
                                    "detail": rng.randrange(1 << 32)})
                else:
                    reports.append({"valid": 0, "cmd": rng.randrange(NC), "status": 5, "detail": 1})
            ctx.set(dut.reports, reports)
            await ctx.tick()

            # the model follows
            if taken is not None:
                del model.cmds[taken]
            for s in disp:
                model.cmds[s]["dispatched"] = True
            if chunk is not None:
                model.cmds[chunk]["done"] += 1
            if dep is not None:
                model.cmds[dep]["arrived"] += 1
            if fold is not None:
                model.cmds[fold]["contrib"] = min(model.cmds[fold]["contrib"], count)
            firsts = {}
            for r in reports:           # of several errors in one cycle, the highest index wins
                if r["valid"]:
                    firsts[r["cmd"]] = (r["status"], r["detail"])
            for s, err in firsts.items():
                if model.cmds[s]["error"] == (0, 0):
                    model.cmds[s]["error"] = err
            if alloc:
                model.cmds[slot] = {"tag": tag, "n_chunks": n_chunks, "arrivals": arrivals, "dispatched": False,
                                    "done": 0, "arrived": 0, "contrib": NONE, "error": (0, 0)}

    run_sim(dut, bench)
    assert len(completed) > 100
    assert len(set(completed)) == len(completed)


def test_each_fsm_reads_its_commands_view_a_cycle_after_addressing_it():
    """The view memory: rows computed from random entries at allocation (phase 0 starts after the LOADs), one
    registered read port per FSM, a row written in cycle t read by addresses from t + 1 on."""
    rng = random.Random(seed_for(78))
    dut = CommandTable(CFG, n_reports=N_REPORTS)
    F = CFG.n_fsms
    rows = {}                       # slot -> expected row (the memory's content)

    def random_entry():
        starts = [rng.randrange(1 << 10) for _ in range(4)]
        lens = [rng.randrange(1 << 11) for _ in range(4)]
        e = {"phase_start": starts, "phase_len": lens, "load_end": rng.randrange(1 << 11),
             "n_phases": rng.randint(1, 4), "tag": rng.randrange(1 << 16), "rank": rng.randrange(1 << 9),
             "dtype": rng.randrange(3), "op": rng.randrange(3), "null": rng.randrange(2)}
        row = {"phases": [((s + (e["load_end"] if p == 0 else 0)) % 2048, (s + n) % 2048)
                          for p, (s, n) in enumerate(zip(starts, lens))],
               **{k: e[k] for k in ("n_phases", "tag", "rank", "dtype", "op", "null")}}
        return e, row

    async def bench(ctx):
        expect = None               # per FSM: the row the previous cycle's address selects
        checked = 0
        for cycle in range(600):
            if expect is not None:
                for f in range(F):
                    v = ctx.get(dut.views[f])
                    if expect[f] is None:
                        continue
                    got = {"phases": [(ph.first, ph.stop) for ph in v.phases], "n_phases": v.n_phases,
                           "tag": v.tag, "rank": v.rank, "dtype": int(v.dtype), "op": int(v.op), "null": v.null}
                    assert got == expect[f], (cycle, f, got, expect[f])
                    checked += 1
            addrs = [rng.randrange(NC) for _ in range(F)]
            ctx.set(dut.view_addr, addrs)
            expect = [rows.get(a) for a in addrs]      # read before this cycle's write lands
            if rng.random() < 0.4:
                slot = rng.randrange(NC)
                e, row = random_entry()
                ctx.set(dut.alloc, {"valid": 1, "slot": slot, "entry": e})
                rows[slot] = row
            else:
                ctx.set(dut.alloc, {})
            # free every slot again at once so that allocations may reuse them
            ctx.set(dut.done.ready, 1)
            await ctx.tick()
        assert checked > 1000

    run_sim(dut, bench)
