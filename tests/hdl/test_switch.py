"""The switch model alone (Amaranth simulator): random packets from every input to random outputs with random
output backpressure arrive whole (no interleaving on an output), in order per (source, destination), with
nothing lost; credits freed by a receiver reach the source as channel ``vc + n_fsms * receiver``; a bad
destination or a full queue sets ``overflow``."""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from syncfabric.hdl.common.layouts import flit_layout
from syncfabric.hdl.system.switch import Switch, round_trip_queue

from sim_helpers import seed_for

W = 16
FL = flit_layout(W)


def flit(src, dst, pkt, k, n):
    """Flit ``k`` of ``n`` of packet ``pkt`` from ``src`` to ``dst`` (the data names all four)."""
    hdr = {"dst": dst, "src": src, "tag": pkt} if k == 0 else {}
    return FL.const({"data": (src << 48) | (dst << 40) | (pkt << 8) | k, "hdr": hdr, "first": int(k == 0),
                     "last": int(k == n - 1), "crc": 0}).as_value().value


def run(dut, procs, cycles=3500):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for p in procs:
        sim.add_testbench(p)
    sim.run_until(cycles * 1e-8)


@pytest.mark.parametrize("ports", [3, 4])
def test_random_packets_arrive_whole_and_in_order(ports):
    seed = seed_for(ports * 101)
    rng = random.Random(seed)
    dut = Switch(W, ports, 4, 16, 4, queue_depth=64)
    # per input: a list of packets (dst, n_flits); sent back to back with random gaps
    plans = [[(rng.choice([d for d in range(ports) if d != s]), rng.randint(1, 4)) for _ in range(25)]
             for s in range(ports)]
    expected = {(s, d): deque() for s in range(ports) for d in range(ports)}
    for s, plan in enumerate(plans):
        for pkt, (d, n) in enumerate(plan):
            expected[(s, d)].append([flit(s, d, pkt, k, n) for k in range(n)])
    total = sum(n for plan in plans for _, n in plan)
    got = {"flits": 0}

    def sender(s):
        async def proc(ctx):
            inp = getattr(dut, f"inp{s}")
            for pkt, (d, n) in enumerate(plans[s]):
                for k in range(n):
                    ctx.set(inp.payload.as_value(), flit(s, d, pkt, k, n))
                    ctx.set(inp.valid, 1)
                    await ctx.tick()
                ctx.set(inp.valid, 0)
                # gaps only between packets: a queue of 64 never fills with these 25 packets of <= 4 flits
                for _ in range(rng.randint(0, 6)):
                    await ctx.tick()
        return proc

    def receiver(j):
        async def proc(ctx):
            out = getattr(dut, f"out{j}")
            cur = None            # (source, remaining flits of its packet)
            r = random.Random(seed * 7 + j)
            while True:
                ready = r.random() < 0.6
                ctx.set(out.ready, ready)
                await ctx.delay(1e-9)
                valid = ctx.get(out.valid)
                bits = ctx.get(out.payload.as_value())
                await ctx.tick()
                if not (valid and ready):
                    continue
                f = FL.from_bits(bits)
                src = f.data >> 48
                assert (f.data >> 40) & 0xFF == j, "flit delivered to the wrong output"
                if cur is None:
                    assert f.first, "a packet's later flit without its first"
                    cur = expected[(src, j)].popleft()
                else:
                    assert src == cur_src, "packets interleaved on an output"
                assert bits == cur.pop(0), "flit changed or out of order"
                cur_src = src
                got["flits"] += 1
                if not cur:
                    cur = None
        return proc

    async def watch(ctx):
        for _ in range(3000):
            await ctx.tick()
        assert got["flits"] == total, f"{got['flits']} of {total} flits arrived"
        assert not ctx.get(dut.overflow)
        assert [ctx.get(dut.flits_out[j]) for j in range(ports)] == \
               [sum(n for plan in plans for d, n in plan if d == j) for j in range(ports)]

    run(dut, [sender(s) for s in range(ports)] + [receiver(j) for j in range(ports)] + [watch])
    assert all(not q for q in expected.values())


def test_a_packet_for_a_free_output_passes_packets_waiting_for_a_busy_one():
    """Virtual output queues: input 1 sends three packets to output 0, which is not ready, then one to output
    2, which is. The packet for output 2 arrives while the others wait (one input FIFO would hold it behind
    them: head-of-line blocking); once output 0 is ready its packets follow, in order."""
    dut = Switch(W, 3, 4, 16, 4, queue_depth=16)
    plan = [(0, 4), (0, 4), (0, 4), (2, 3)]
    arrived = {0: [], 2: []}

    async def bench(ctx):
        todo = [flit(1, d, pkt, k, n) for pkt, (d, n) in enumerate(plan) for k in range(n)]
        ctx.set(dut.out2.ready, 1)
        for cycle in range(50):
            if cycle == 30:
                assert [FL.from_bits(b).data & 0xFF for b in arrived[2]] == [0, 1, 2]
                assert arrived[0] == []
                ctx.set(dut.out0.ready, 1)
            ctx.set(dut.inp1.valid, bool(todo))
            if todo:
                ctx.set(dut.inp1.payload.as_value(), todo.pop(0))
            await ctx.delay(1e-9)
            for j in (0, 2):
                out = getattr(dut, f"out{j}")
                if ctx.get(out.valid) and ctx.get(out.ready):
                    arrived[j].append(ctx.get(out.payload.as_value()))
            await ctx.tick()
        assert arrived[0] == [flit(1, 0, pkt, k, 4) for pkt in range(3) for k in range(4)]
        assert not ctx.get(dut.overflow)

    run(dut, [bench], 60)


def test_credits_return_to_their_source_as_the_receivers_channel():
    F, P = 4, 4
    dut = Switch(W, P, F, 16, 4, queue_depth=8)
    seen = {s: [] for s in range(P)}

    async def bench(ctx):
        # receivers 1, 2 and 3 free credits for source 0 in the same cycles; receiver 0 frees one for source 3
        for _ in range(3):
            for j in (1, 2, 3):
                c = getattr(dut, f"credit_in{j}")
                ctx.set(c, {"beat": 1, "beat_vc": 2 + F * 0, "hdr": j == 2, "hdr_vc": 1 + F * 0})
            ctx.set(dut.credit_in0, {"beat": 1, "beat_vc": 3 + F * 3, "hdr": 0, "hdr_vc": 0})
            await ctx.tick()
            collect(ctx)
        for j in range(P):
            ctx.set(getattr(dut, f"credit_in{j}"), {})
        for _ in range(15):
            await ctx.tick()
            collect(ctx)

    def collect(ctx):
        for s in range(P):
            c = ctx.get(getattr(dut, f"credit_out{s}"))
            if c.beat:
                seen[s].append(("beat", c.beat_vc))
            if c.hdr:
                seen[s].append(("hdr", c.hdr_vc))

    run(dut, [bench], 40)
    beats0 = sorted(ch for kind, ch in seen[0] if kind == "beat")
    assert beats0 == sorted([2 + F * 1] * 3 + [2 + F * 2] * 3 + [2 + F * 3] * 3)
    assert sorted(ch for kind, ch in seen[0] if kind == "hdr") == [1 + F * 2] * 3
    assert seen[3] == [("beat", 3 + F * 0)] * 3
    assert seen[1] == seen[2] == []


def test_a_flit_for_its_own_port_or_beyond_the_switch_sets_overflow():
    dut = Switch(W, 3, 4, 16, 4, queue_depth=8)

    async def bench(ctx):
        assert not ctx.get(dut.overflow)
        ctx.set(dut.inp1.payload.as_value(), flit(1, 1, 0, 0, 1))
        ctx.set(dut.inp1.valid, 1)
        await ctx.tick()
        ctx.set(dut.inp1.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.overflow)
        assert ctx.get(dut.flits_out[1]) == 0

    run(dut, [bench], 10)


@pytest.mark.parametrize("obey", [True, False])
def test_a_short_queue_holds_its_links_transmitter_and_loses_nothing(obey):
    """Queues of 26 flits for links of latency 3 (margin 2 * 3 + 4 = 10, ``round_trip_queue(3)`` but
    shorter): three inputs send packets back to back to one slow output, so their queues fill; each
    sender sees its ``hold`` a link latency late and its flits arrive a link latency after they leave.
    Every flit arrives whole and in order and ``overflow`` stays low; the same traffic from senders that
    ignore the hold overflows the queues (what the hold is for)."""
    L, P = 3, 4
    depth, margin = round_trip_queue(L)
    assert (depth, margin) == (20, 10)
    dut = Switch(W, P, 4, 16, 4, queue_depth=depth + 6, hold_margin=margin)
    seed = seed_for(4242)
    rng = random.Random(seed)
    plans = [[(0, rng.randint(1, 4)) for _ in range(30)] if s else [] for s in range(P)]
    expected = {s: [flit(s, 0, pkt, k, n) for pkt, (_, n) in enumerate(plans[s]) for k in range(n)]
                for s in range(P)}
    got = {s: [] for s in range(P)}

    def sender(s):
        async def proc(ctx):
            inp = getattr(dut, f"inp{s}")
            holds = [0] * L                     # the hold as the transmitter sees it: L cycles late
            wire = [None] * L                   # flits on the link
            todo = list(expected[s])
            for _ in range(2500):
                holds.append(ctx.get(getattr(dut, f"hold{s}")))
                held = holds.pop(0)
                send = todo and not (obey and held)
                wire.append(todo.pop(0) if send else None)
                arriving = wire.pop(0)
                ctx.set(inp.valid, arriving is not None)
                if arriving is not None:
                    ctx.set(inp.payload.as_value(), arriving)
                await ctx.tick()
            ctx.set(inp.valid, 0)
        return proc

    async def receiver(ctx):
        r = random.Random(seed + 1)
        while True:
            ready = r.random() < 0.5
            ctx.set(dut.out0.ready, ready)
            await ctx.delay(1e-9)
            valid, bits = ctx.get(dut.out0.valid), ctx.get(dut.out0.payload.as_value())
            await ctx.tick()
            if valid and ready:
                got[FL.from_bits(bits).data >> 48].append(bits)

    async def watch(ctx):
        for _ in range(2600):
            await ctx.tick()
        if obey:
            assert not ctx.get(dut.overflow)
            assert ctx.get(dut.hold_cycles) > 100
            assert got == expected
        else:
            assert ctx.get(dut.overflow)

    run(dut, [sender(s) for s in range(1, P)] + [receiver, watch], 2700)


def test_a_hold_margin_must_leave_room_in_the_queue():
    with pytest.raises(ValueError, match="hold_margin"):
        Switch(W, 4, 4, 16, 4, queue_depth=10, hold_margin=10)
