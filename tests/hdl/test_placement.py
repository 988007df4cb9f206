"""PlacementCheck in Amaranth's simulator against a model of the in-place and memory window rules: random
buffers placed inside windows, across their edges by an element, before them, in disabled windows, near the top
of the 64-bit space, in windows closed to the communicator, and in-place layouts right, off by an element, or
right only modulo 2**64; and the windows that hold a used buffer. The inputs change right after ``start``: the
block must have sampled them.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.placement import PlacementCheck
from syncfabric.hdl.ace.validate import comm_cfg_layout

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
NW = CFG.n_windows
TOP = 1 << 64


def model(c):
    """(in_place, src_window, dst_window) failed and the windows holding a used buffer, by the rules of the
    module docstring."""
    md, n = c["mode"], c["nbytes"]
    in_len = n * c["size"] if md["in_seg"] else n
    out_len = n * c["size"] if md["out_seg"] else n

    def holds(addr, length):
        return [(c["win_ok"] >> i) & 1 and s != 0 and b <= addr and addr + length <= b + s
                for i, (b, s) in enumerate(zip(c["win_base"], c["win_size"]))]

    def inside(addr, length):
        return any(holds(addr, length))

    used = [(md["uses_src"] and a) or (md["uses_dst"] and b)
            for a, b in zip(holds(c["src"], in_len), holds(c["dst"], out_len))]
    windows = sum(1 << i for i, u in enumerate(used) if u)

    if md["rs"]:
        ok = c["src"] + n * c["rank"] == c["dst"]
    elif md["ag"]:
        ok = c["dst"] + n * c["rank"] == c["src"]
    else:
        ok = not md["uses_src"] or not md["uses_dst"] or c["src"] == c["dst"]
    return (bool(md["in_place"] and not ok), bool(md["uses_src"] and not inside(c["src"], in_len)),
            bool(md["uses_dst"] and not inside(c["dst"], out_len)), windows)


def random_case(rng):
    kind = rng.choice(["rs", "ag", "a2a", "other"])
    mode = {"rs": int(kind == "rs"), "ag": int(kind == "ag"), "in_seg": int(kind in ("rs", "a2a")),
            "out_seg": int(kind in ("ag", "a2a")), "uses_src": int(rng.random() < 0.85),
            "uses_dst": int(rng.random() < 0.85), "in_place": int(rng.random() < 0.4)}
    size = rng.choice([1, 2, rng.randint(1, 1023)])
    rank = rng.randrange(min(size, 512))
    nbytes = rng.choice([0, 4, rng.randint(1, 4096) * 4, rng.getrandbits(34)])
    in_len = nbytes * size if mode["in_seg"] else nbytes
    out_len = nbytes * size if mode["out_seg"] else nbytes
    bases = [rng.choice([rng.getrandbits(40), TOP - rng.getrandbits(50) - 1]) for _ in range(NW)]
    sizes = [rng.choice([0, rng.getrandbits(48), rng.getrandbits(64), max(in_len, out_len) + rng.getrandbits(12)])
             for _ in range(NW)]

    def place(length):
        w = rng.randrange(NW)
        edge = [0, sizes[w] - length, sizes[w] - length + rng.choice([1, 4, 8]), -rng.choice([1, 4, 4096]),
                rng.randint(0, max(0, sizes[w] - length))]
        return (bases[w] + rng.choice(edge)) % TOP

    src, dst = place(in_len), place(out_len)
    if mode["in_place"] and rng.random() < 0.7:     # mostly a real in-place layout, sometimes off a bit
        off = nbytes * rank + rng.choice([0, 0, 0, 4, -4])
        if kind in ("rs", "ag") and rank and nbytes and rng.random() < 0.2:     # lo + off wraps at 2**64
            lo = TOP - rng.randint(1, max(1, off))
            src, dst = (lo, (lo + off) % TOP) if kind == "rs" else ((lo + off) % TOP, lo)
        elif kind == "rs":
            dst = (src + off) % TOP
        elif kind == "ag":
            src = (dst + off) % TOP
        elif rng.random() < 0.8:
            dst = src
    return {"src": src, "dst": dst, "nbytes": nbytes, "rank": rank, "size": size, "mode": mode,
            "win_base": bases, "win_size": sizes,
            "win_ok": rng.choice([(1 << NW) - 1] * 3 + [rng.getrandbits(NW)])}


def apply(ctx, dut, c):
    for port, value in c.items():
        ctx.set(getattr(dut, port), value)


def test_in_place_and_window_checks_match_the_model_latency_cycles_after_start():
    rng = random.Random(seed_for(7501))
    dut = PlacementCheck(CFG, comm_cfg_layout(CFG))
    cases = [random_case(rng) for _ in range(1500)]
    outcomes = [model(c) for c in cases]
    for k in range(3):          # every check both passes and fails somewhere
        assert 50 < sum(o[k] for o in outcomes) < len(cases) - 50, k
    # windows closed to the communicator decide some cases, and some buffers lie in two windows
    assert sum(any(o[1:3]) and any(model({**c, "win_ok": (1 << NW) - 1})[1:3]) is False
               for c, o in zip(cases, outcomes)) > 20
    assert sum(bin(o[3]).count("1") > 1 for o in outcomes) > 0

    async def bench(ctx):
        for n, (c, want) in enumerate(zip(cases, outcomes)):
            apply(ctx, dut, c)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            apply(ctx, dut, cases[(n + 1) % len(cases)])       # sampled at start: these must not matter
            for _ in range(PlacementCheck.LATENCY - 1):
                await ctx.tick()
            got = (ctx.get(dut.in_place), ctx.get(dut.src_window), ctx.get(dut.dst_window), ctx.get(dut.windows))
            assert got == want, (n, c)
            await ctx.tick()        # and they hold until the next start
            assert (ctx.get(dut.in_place), ctx.get(dut.src_window), ctx.get(dut.dst_window),
                    ctx.get(dut.windows)) == want, n

    run_sim(dut, bench)
