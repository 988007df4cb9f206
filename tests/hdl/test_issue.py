"""IssueArbiter in Amaranth's simulator against a model of the grant rules (docs/engine.md section 4) and of
what each FSM's step would take (the issue stage's holds) and its RECV candidate: random steps of every kind
offered by random FSMs against random unit readiness, credits, landing heads, TX_LOOKAHEAD room, held FSMs and
held units (the issue stage's job: the rules see its units as busy), on point-to-point ports and through a
switch (several landing channels per FSM).

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.ace.arbiter import SEQ_BITS, age_matrix_model, oldest_first_model
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.issue import IssueArbiter
from syncfabric.sim.golden.program import StepOp

from sim_helpers import seed_for

CONFIGS = {"p2p": AceConfig.small(), "switch": AceConfig.small(rx_sources=4, n_ports=1)}
OPS = (StepOp.LOAD, StepOp.STORE, StepOp.SEND, StepOp.RECV)


def expected(cfg, fsms, ports, load_ready, store_ready):
    """(grant fsm or None, landing channel of the granted step, per-FSM causes) by the rules."""
    F, S = cfg.n_fsms, cfg.rx_sources
    can, causes = [], {"port": [], "cred": [], "land": [], "dma": []}
    hit_ch, second = {}, {}
    for f, r in enumerate(fsms):
        s = r["step"]
        for k, p in enumerate(ports):
            hit_ch[f, k], second[f, k] = None, False
            if S == 1 and p["unpopped"] >> f & 1:   # the unit holds the head: the second header is next
                if p["hdr_two"] >> f & 1:
                    hit_ch[f, k], second[f, k] = f, True
                continue
            for src in range(S):            # the first source whose head is the awaited message
                c = f + F * src
                h = p["heads"][c]
                if p["hdr_valid"] >> c & 1 and not p["unpopped"] >> c & 1 and (
                        S == 1 or (h["tag"], h["chunk"], h["phase"], h["key"])
                        == (r["tag"], r["chunk"], r["phase"], s["key"])):
                    hit_ch[f, k] = c
                    break
        ch = f + F * (s["peer"] % S) if S > 1 else f

        def cred(k):
            return ports[k]["beat_credits"][ch] >= s["beats"] and ports[k]["hdr_credits"][ch] >= 1

        def tx(k):
            p = ports[k]
            return p["send_ready"] and p["order_ready"] and (p["tx_room"] or r["behind"])

        op, k = s["op"], s["port"]
        if op == StepOp.LOAD:
            free, cr, land = True, True, load_ready
        elif op == StepOp.STORE:
            free, cr, land = True, True, store_ready
        elif op == StepOp.SEND:
            free, cr, land = tx(k), cred(k), True
        else:
            p = ports[k]
            rx_ok = p["recv_ready"] and not p["dep_req"]
            land = hit_ch[f, k] is not None
            if s["fwd"]:
                q = ports[s["fwd_port"]]
                free, cr = rx_ok and q["order_ready"] and (q["tx_room"] or r["behind"]), cred(s["fwd_port"])
            else:
                free, cr = rx_ok, True
        real = r["ready"] and not s["noop"]
        can.append(r["ready"] and (s["noop"] or (free and cr and land)))
        causes["port"].append(real and not free)
        causes["cred"].append(real and free and not cr)
        causes["land"].append(real and free and cr and not land and op == StepOp.RECV)
        causes["dma"].append(real and not land and op in (StepOp.LOAD, StepOp.STORE))
    g = oldest_first_model(can, [r["seq"] for r in fsms])
    recv = g is not None and fsms[g]["step"]["op"] == StepOp.RECV
    ch = hit_ch[g, fsms[g]["step"]["port"]] if recv else None
    sec = recv and second[g, fsms[g]["step"]["port"]]
    # the count lane of the header matched: the one behind the head when it is the second
    port = None if ch is None else ports[fsms[g]["step"]["port"]]
    count = None if ch is None else port["next_counts"][ch] if sec else port["heads"][ch]["count"]
    return g, ch, sec, count, causes


@pytest.mark.parametrize("name", CONFIGS)
def test_grants_follow_the_resource_rules_and_the_oldest_chunk_wins(name):
    cfg = CONFIGS[name]
    rng = random.Random(seed_for(91 + len(name)))
    dut = IssueArbiter(cfg)
    F, K, n = cfg.n_fsms, cfg.n_ports, cfg.n_channels
    lb, lh = cfg.landing_beats, cfg.landing_headers
    base_seq = 0

    def header():
        return {"tag": rng.choice([7, 8]), "chunk": rng.choice([1, 2]), "phase": rng.choice([0, 1]),
                "key": rng.choice([3, 4]), "count": rng.randrange(4)}

    async def bench(ctx):
        nonlocal base_seq
        grants = seconds = 0
        for cycle in range(1500):
            base_seq = (base_seq + rng.randrange(3)) % (1 << SEQ_BITS)
            fsms = []
            for f in range(F):
                step = {"op": rng.choice(OPS), "port": rng.randrange(K), "fwd": int(K > 1 and rng.random() < 0.4),
                        "fwd_port": rng.randrange(K), "beats": rng.choice([0, 1, 4, lb // 2, lb]),
                        "peer": rng.randrange(8), "key": rng.choice([3, 4]), "noop": int(rng.random() < 0.1)}
                fsms.append({"ready": int(rng.random() < 0.7), "behind": int(rng.random() < 0.3),
                             "seq": (base_seq + rng.randrange(F * 2)) % (1 << SEQ_BITS), "step": step,
                             "tag": rng.choice([7, 8]), "chunk": rng.choice([1, 2]), "phase": rng.choice([0, 1])})
            ports = []
            for k in range(K):
                ports.append({
                    "send_ready": int(rng.random() < 0.8), "recv_ready": int(rng.random() < 0.8),
                    "dep_req": int(rng.random() < 0.1), "order_ready": int(rng.random() < 0.9),
                    "tx_room": int(rng.random() < 0.7),
                    "beat_credits": [rng.choice([0, 3, lb // 2, lb]) for _ in range(n)],
                    "hdr_credits": [rng.choice([0, 1, lh]) for _ in range(n)],
                    "hdr_valid": rng.randrange(1 << n), "unpopped": rng.randrange(1 << n) & rng.randrange(1 << n),
                    "hdr_two": rng.randrange(1 << n),
                    "heads": [header() for _ in range(n)], "next_counts": [rng.randrange(4) for _ in range(n)]})
            load_ready, store_ready = rng.random() < 0.7, rng.random() < 0.7
            hold = sum(int(rng.random() < 0.2) << f for f in range(F))      # the issue stage's FSM
            ctx.set(dut.hold, hold)
            # the FSMs' chunk order reaches the arbiter as the FSM bank's age matrix
            ctx.set(dut.fsm, [{k: v for k, v in r.items() if k != "seq"} for r in fsms])
            ctx.set(dut.age, [sum(b << g for g, b in enumerate(row))
                              for row in age_matrix_model([r["seq"] for r in fsms])])
            ctx.set(dut.port, ports)
            ctx.set(dut.load_ready, load_ready)
            ctx.set(dut.store_ready, store_ready)
            await ctx.delay(1e-9)
            # what the issue stage's job takes as it goes out: the rules see those units as busy
            held = {"send": rng.randrange(1 << K) * (rng.random() < 0.3),
                    "recv": rng.randrange(1 << K) * (rng.random() < 0.3),
                    "order": rng.randrange(1 << K) * (rng.random() < 0.3),
                    "load": int(rng.random() < 0.2), "store": int(rng.random() < 0.2)}
            ctx.set(dut.held, held)
            seen_ports = [dict(p, send_ready=p["send_ready"] & ~(held["send"] >> k) & 1,
                               recv_ready=p["recv_ready"] & ~(held["recv"] >> k) & 1,
                               order_ready=p["order_ready"] & ~(held["order"] >> k) & 1) for k, p in enumerate(ports)]
            # a held FSM is neither granted nor counted as waiting
            unheld = [dict(r, ready=r["ready"] & ~(hold >> f) & 1) for f, r in enumerate(fsms)]
            g, ch, sec, count, causes = expected(cfg, unheld, seen_ports, load_ready and not held["load"],
                                                 store_ready and not held["store"])
            got = ctx.get(dut.grant)
            assert bool(got.valid) == (g is not None), (cycle, fsms, ports)
            assert ctx.get(dut.grant_oh) == (0 if g is None else 1 << g), cycle
            # what every FSM's step would take (the issue stage registers them all and selects the granted one)
            for f, r in enumerate(fsms):
                take = ctx.get(dut.takes[f])
                want = {"send": 0, "recv": 0, "order": 0, "load": 0, "store": 0}
                s = r["step"]
                if not s["noop"]:
                    op, k = s["op"], s["port"]
                    want.update(send=int(op == StepOp.SEND) << k, recv=int(op == StepOp.RECV) << k,
                                load=int(op == StepOp.LOAD), store=int(op == StepOp.STORE))
                    want["order"] = want["send"] | (int(op == StepOp.RECV and s["fwd"]) << s["fwd_port"])
                assert {n: getattr(take, n) for n in want} == want, (cycle, f)
            if g is not None:
                grants += 1
                assert got.fsm == g, cycle
                if ch is not None:      # the granted RECV's candidate: channel, second header, count lane
                    cand = ctx.get(dut.cand[g])
                    assert (cand.ch, cand.second, cand.count) == (ch, sec, count), cycle
                    seconds += sec
            for name, sig in (("port", dut.cause_port), ("cred", dut.cause_cred), ("land", dut.cause_land),
                              ("dma", dut.cause_dma)):
                assert ctx.get(sig) == sum(int(bool(c)) << f for f, c in enumerate(causes[name])), (cycle, name)
        assert grants > 500
        assert cfg.rx_sources > 1 or seconds > 20, seconds

    sim = Simulator(dut)            # combinational: no clock
    sim.add_testbench(bench)
    sim.run()


def test_an_engine_too_wide_for_one_port_status_is_refused_with_the_reason():
    """The design point fits a 32-port switch (512 channels per port); 1024 channels would not fit one
    Amaranth value, and the arbiter says so instead of failing deep in the conversion."""
    from syncfabric.hdl.ace.issue import MAX_VALUE_BITS, port_status_layout
    from syncfabric.host.run import engine_config_for

    fits = engine_config_for(AceConfig.profile("paper"), "switch:32")
    assert port_status_layout(fits).size <= MAX_VALUE_BITS
    IssueArbiter(fits)
    with pytest.raises(ValueError, match="1024 landing channels per port .16 FSMs x 64 sources"):
        IssueArbiter(engine_config_for(AceConfig.profile("paper"), "switch:64"))
