"""DescriptorValidator alone in Amaranth's simulator, against a Python model of the command processor's checks.

Random descriptors: valid ones (buffers inside the windows, in place when flagged, geometry that fits) and ones
with one to three fields spoiled (collective, communicator, dtype, op, flags, in place, null, count 0,
misalignment, root, program, windows, geometry and sizes, fetch error). The model (written as the priority
chain of docs/engine.md) gives the status, the detail, every failed check and the command table entry. The
inputs are replaced by another descriptor's right after ``start``: the validator must have sampled them.

``SEED=<n>`` replaces the random seed.
"""

import random

import pytest

from syncfabric.hdl.ace.cmdtable import cmd_entry_layout
from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.geometry import geometry_error_layout, geometry_layout
from syncfabric.hdl.ace.regs import TERMINAL_PARTITION, ace_regmap
from syncfabric.hdl.ace.validate import CHECKS, SUPPORTED_COLLECTIVES, DescriptorValidator
from syncfabric.hdl.common.layouts import LOAD_MASK_BITS, MAX_PHASES, DescFlags, program_entry_layout
from syncfabric.sim.golden.types import Collective as C, DType, ReduceOp, Status, dtype_bytes

from sim_helpers import run_sim, seed_for

CONFIGS = {"small": AceConfig.small(), "fp32_int32": AceConfig(dtypes=("fp32", "int32"))}
N_CASES = 400
IN_PLACE, NULL = DescFlags.IN_PLACE, DescFlags.NULL
ALL_OUTCOMES = {name for name, _, _ in CHECKS} | {"ok"}


def rand_fields(rng, layout):
    """Random values for every field of a flat struct layout."""
    return {name: rng.getrandbits(f.width) for name, f in layout}


def bits_of(layout, value):
    """``{field: int}`` of the top-level fields of a layout constant."""
    raw = value.as_bits()
    return {name: (raw >> f.offset) & ((1 << f.width) - 1) for name, f in layout}


# ---- the model -------------------------------------------------------------------------------------------------

def model(cfg, c):
    """(failed checks, status, detail, entry) for case ``c``: the command processor's CHECK state in Python."""
    d, p, g, ge = c["desc"], c["prog"], dict(c["geom"]), c["geom_err"]
    comm_reg = ace_regmap(cfg).register("COMM_CFG", 0)
    cc = comm_reg.decode(c["comm_cfg"][d["comm"]] if d["comm"] < cfg.n_comms else 0)
    rank, size = cc["rank"], cc["size"]
    coll = d["collective"]
    barrier = coll == C.BARRIER
    eshift = 1 if d["dtype"] in (DType.FP16, DType.BF16) else 2
    count = 0 if barrier else d["count"]
    nbytes = count << eshift
    in_seg, out_seg = coll in (C.REDUCE_SCATTER, C.ALLTOALL), coll in (C.ALLGATHER, C.ALLTOALL)
    is_root = rank == d["root"]
    uses_src = not barrier and (coll != C.BROADCAST or is_root)
    uses_dst = not barrier and (coll != C.REDUCE or is_root)
    in_len = nbytes * size if in_seg else nbytes
    out_len = nbytes * size if out_seg else nbytes
    windows = list(zip(c["win_base"], c["win_size"], c["win_comms"]))

    def holds(addr, n):     # per window: open to the communicator, enabled, the buffer inside
        return [(k >> d["comm"]) & 1 and s != 0 and b <= addr and addr + n <= b + s for b, s, k in windows]

    def inside(addr, n):
        return any(holds(addr, n))

    if coll == C.REDUCE_SCATTER:
        in_place_ok = d["src"] + nbytes * rank == d["dst"]
    elif coll == C.ALLGATHER:
        in_place_ok = d["dst"] + nbytes * rank == d["src"]
    else:
        in_place_ok = not uses_src or not uses_dst or d["dst"] == d["src"]
    emask = (1 << eshift) - 1
    if barrier:
        g.update(n_chunks=1, last_chunk=0, last_bytes=0, q_last=0, rem_last=0)
    sb = g["slot_beats"]
    failed = {
        "fetch_err": c["fetch_err"],
        "bad_collective": coll not in SUPPORTED_COLLECTIVES,
        "bad_comm": not (d["comm"] < cfg.n_comms and cc["enable"] and size != 0 and rank < size),
        "bad_dtype": d["dtype"] > max(DType) or (coll in (C.ALLREDUCE, C.REDUCE_SCATTER, C.REDUCE)
                                                 and d["dtype"] not in cfg.dtype_codes),
        "bad_op": d["op"] > max(ReduceOp),
        "bad_flags": d["flags"] & ~DescFlags.SUPPORTED != 0,
        "in_place": bool(d["flags"] & IN_PLACE) and not in_place_ok,
        "null": bool(d["flags"] & NULL) and not (coll in (C.ALLREDUCE, C.REDUCE_SCATTER, C.REDUCE)
                                                 and d["op"] == ReduceOp.SUM),
        "zero_count": d["count"] == 0 and not barrier,
        "misaligned_src": uses_src and d["src"] & emask != 0,
        "misaligned_dst": uses_dst and d["dst"] & emask != 0,
        "bad_root": d["root"] >= size,
        "bad_algorithm": not c["found"] or not 1 <= p["n_phases"] <= MAX_PHASES,
        "src_window": uses_src and not inside(d["src"], in_len),
        "dst_window": uses_dst and not inside(d["dst"], out_len),
        "geometry": any(ge[k] for k in ("blocks_indivisible", "chunk_too_small", "m_not_pow2", "too_many_chunks")),
        "chunk_beats": c["chunk_beats"] > cfg.chunk_beats or c["chunk_beats"] == 0,
        "partitions": c["part"][0] == 0 or c["part"][TERMINAL_PARTITION] == 0,
        "buffer": sb * p["n_slots"] > cfg.buffer_beats,
        "message": sb > cfg.max_message_beats,
        "slots": p["n_slots"] > min(cfg.max_slots, LOAD_MASK_BITS),
    }
    f = {k: bool(v) for k, v in failed.items()}
    # the priority chain as the command processor's CHECK state wrote it
    if f["fetch_err"]:
        code, det = Status.AXI_ERROR, 0
    elif f["bad_collective"]:
        code, det = Status.BAD_COLLECTIVE, coll
    elif f["bad_comm"]:
        code, det = Status.BAD_COMM, d["comm"]
    elif f["bad_dtype"]:
        code, det = Status.BAD_DTYPE, d["dtype"]
    elif f["bad_op"]:
        code, det = Status.BAD_OP, d["op"]
    elif f["bad_flags"] or f["in_place"] or f["null"]:
        code, det = Status.BAD_FLAGS, d["flags"]
    elif f["zero_count"]:
        code, det = Status.ZERO_COUNT, 0
    elif f["misaligned_src"] or f["misaligned_dst"]:
        code, det = Status.MISALIGNED, 0 if f["misaligned_src"] else 1
    elif f["bad_root"]:
        code, det = Status.BAD_ROOT, d["root"]
    elif f["bad_algorithm"]:
        code, det = Status.BAD_ALGORITHM, d["algorithm"]
    elif f["src_window"]:
        code, det = Status.OUT_OF_WINDOW, 0
    elif f["dst_window"]:
        code, det = Status.OUT_OF_WINDOW, 1
    elif any(f[k] for k in ("geometry", "chunk_beats", "partitions", "buffer", "message", "slots")):
        code, det = Status.SRAM_TOO_SMALL, sb
    else:
        code, det = Status.OK, 0
    amask = (1 << cfg.addr_width) - 1
    entry = {
        "dtype": d["dtype"] & 3, "op": d["op"] & 3, "tag": d["tag"] & 0xFFFF, "comm": d["comm"] & 0xF,
        "rank": rank, "count": count, "elem_shift": eshift, "src": d["src"] & amask, "dst": d["dst"] & amask,
        "in_seg": int(in_seg), "out_seg": int(out_seg), "geom": g, "n_phases": p["n_phases"],
        "phase_start": p["phase_start"], "phase_len": p["phase_len"], "load_end": p["load_end"],
        "load_mask": p["load_mask"], "n_slots": p["n_slots"], "null": int(bool(d["flags"] & NULL)),
        "arrivals": (p["arrivals"] * g["n_chunks"]) & 0xFFFFFF,
        "windows": sum(1 << i for i, (a, b) in enumerate(zip(holds(d["src"], in_len), holds(d["dst"], out_len)))
                       if (uses_src and a) or (uses_dst and b)),
    }
    return f, code, det, entry


# ---- random cases ----------------------------------------------------------------------------------------------

def valid_case(cfg, rng):
    """A descriptor every check passes, with random values in every field no check reads."""
    regmap = ace_regmap(cfg)
    comm = rng.randrange(cfg.n_comms)
    size = rng.choice([1, 2, 3, rng.randint(1, 16), rng.randint(1, 512)])
    rank = rng.randrange(size)
    words = [regmap.encode("COMM_CFG", i, value=rng.getrandbits(12) << 19, rank=rng.getrandbits(9),
                           size=rng.getrandbits(10), enable=rng.getrandbits(1)) for i in range(cfg.n_comms)]
    # junk in the bits COMM_CFG does not declare: the validator must read only the declared fields
    words[comm] = regmap.encode("COMM_CFG", comm, value=rng.getrandbits(12) << 19, rank=rank, size=size, enable=1)
    coll = rng.choice(SUPPORTED_COLLECTIVES)
    dtype = rng.choice(cfg.dtype_codes if coll.reduces else list(DType))
    op = rng.choice(list(ReduceOp))
    root = rng.randrange(size)
    eb = dtype_bytes(dtype)
    count = rng.choice([1, 2, 3, rng.randint(1, 3000), rng.getrandbits(24) + 1])
    nbytes = 0 if coll == C.BARRIER else count * eb
    in_len = nbytes * size if coll in (C.REDUCE_SCATTER, C.ALLTOALL) else nbytes
    out_len = nbytes * size if coll in (C.ALLGATHER, C.ALLTOALL) else nbytes
    flags = 0
    if coll in (C.ALLREDUCE, C.REDUCE_SCATTER, C.REDUCE) and op == ReduceOp.SUM and rng.random() < 0.3:
        flags |= NULL
    in_place = rng.random() < 0.35
    if in_place:
        flags |= IN_PLACE
    # windows: random bases (some near the top of the 64-bit space, where base + size needs 65 bits), sizes
    # large enough for the buffers; some disabled
    span = in_len + out_len + 4096
    bases, sizes = [], []
    for _ in range(cfg.n_windows):
        top = rng.choice([32, 40, 48, 64])
        bases.append(rng.getrandbits(top) & ~7)
        sizes.append(0 if rng.random() < 0.2 else span + rng.getrandbits(16))
    ws = rng.randrange(cfg.n_windows)
    wd = rng.choice([ws, rng.randrange(cfg.n_windows)])
    for w in (ws, wd):
        sizes[w] = max(sizes[w], span + rng.getrandbits(12))
        bases[w] = min(bases[w], (1 << 64) - 1 - sizes[w]) & ~7 if rng.random() < 0.5 else bases[w]
        if rng.random() < 0.15:     # a window past the top of the address space: its end needs 65 bits
            sizes[w] = rng.randint(span + 4096, (1 << 64) - 1)
            bases[w] = ((1 << 64) - span - rng.getrandbits(12)) & ~7

    def place(w, n):        # an element-aligned address for n bytes in window w (below 2**64), often at an edge
        room = min(sizes[w] - n, (1 << 64) - max(n, 1) - bases[w])
        return bases[w] + rng.choice([0, room, rng.randint(0, room)]) // eb * eb

    src, dst = place(ws, in_len), place(wd, out_len)
    if in_place:            # output over the input (addresses stay in the window: inside the bigger buffer)
        if coll == C.REDUCE_SCATTER:
            dst = src + nbytes * rank
        elif coll == C.ALLGATHER:
            src = dst + nbytes * rank
        elif in_len >= out_len:
            dst = src
        else:
            src = dst
    geom = rand_fields(rng, geometry_layout(cfg))
    n_slots = rng.randint(1, min(cfg.max_slots, LOAD_MASK_BITS))
    geom["slot_beats"] = rng.randint(1, max(1, min(cfg.max_message_beats, cfg.buffer_beats // n_slots)))
    geom_err = {k: 0 for k in geometry_error_layout().members}
    geom_err["count_zero"] = rng.getrandbits(1)        # not an SRAM reason (the zero count check has it)
    prog = rand_fields(rng, program_entry_layout())
    prog.update(valid=1, n_phases=rng.randint(1, MAX_PHASES), n_slots=n_slots,
                phase_start=[rng.getrandbits(10) for _ in range(MAX_PHASES)],
                phase_len=[rng.getrandbits(11) for _ in range(MAX_PHASES)])
    part = [rng.getrandbits(8) for _ in range(TERMINAL_PARTITION + 1)]
    part[0], part[TERMINAL_PARTITION] = rng.randint(1, 255), rng.randint(1, 255)
    desc = {"collective": coll, "algorithm": rng.getrandbits(8), "dtype": dtype, "op": op, "flags": flags,
            "comm": comm, "root": root, "tag": rng.getrandbits(32), "count": count, "src": src, "dst": dst,
            "cookie": rng.getrandbits(64), "reserved": rng.getrandbits(192)}
    return {"desc": desc, "fetch_err": 0, "found": 1, "prog": prog, "geom": geom, "geom_err": geom_err,
            "comm_cfg": words, "win_base": bases, "win_size": sizes, "part": part,
            "win_comms": [(1 << cfg.n_comms) - 1 if rng.random() < 0.8 else rng.getrandbits(cfg.n_comms)
                          for _ in range(cfg.n_windows)],
            "chunk_beats": rng.randint(1, cfg.chunk_beats)}


def _comm_field(cfg, c, **fields):
    d = c["desc"]
    if d["comm"] < cfg.n_comms:
        c["comm_cfg"][d["comm"]] = ace_regmap(cfg).register("COMM_CFG", 0).encode(c["comm_cfg"][d["comm"]],
                                                                                  **fields)


def _rank_size(cfg, c):
    d = c["desc"]
    w = c["comm_cfg"][d["comm"]] if d["comm"] < cfg.n_comms else 0
    f = ace_regmap(cfg).decode("COMM_CFG", w, 0)
    return f["rank"], f["size"]


def _move_out(cfg, c, rng, key):
    """Put buffer ``key`` across a window edge by an element, before a window, or disable its window."""
    d = c["desc"]
    i = next((i for i, (b, s) in enumerate(zip(c["win_base"], c["win_size"]))
              if s and b <= d[key] < b + s), None)
    if i is None:
        return
    how = rng.randrange(4)
    if how == 0:
        c["win_size"][i] = 0
    elif how == 3:          # closed to the descriptor's communicator
        c["win_comms"][i] &= ~(1 << d["comm"])
    elif how == 1:
        d[key] = max(0, c["win_base"][i] - rng.choice([4, 8, 4096]))
    else:
        d[key] = (c["win_base"][i] + c["win_size"][i] - rng.choice([0, 4, 8])) & ((1 << 64) - 1)


def _in_place_wrap(cfg, c, rng):
    """A reduce-scatter / all-gather in place whose output address is the input's plus the offset modulo
    2**64: not in place (the sum needs 65 bits)."""
    d = c["desc"]
    if d["comm"] >= cfg.n_comms:
        return
    rank, size = _rank_size(cfg, c)
    if size < 2 or rank == 0:
        _comm_field(cfg, c, rank=1, size=max(2, size))
        rank = 1
    d.update(collective=rng.choice([C.REDUCE_SCATTER, C.ALLGATHER]), dtype=DType.FP32, op=ReduceOp.SUM,
             flags=IN_PLACE, count=max(1, d["count"]))
    off = 4 * d["count"] * rank
    lo = (1 << 64) - 4 * rng.randint(1, off // 4)
    hi = (lo + off) & ((1 << 64) - 1)
    if d["collective"] == C.REDUCE_SCATTER:
        d.update(src=lo, dst=hi)
    else:
        d.update(src=hi, dst=lo)


MUTATIONS = {
    "in_place_wrap": _in_place_wrap,
    "fetch_err": lambda cfg, c, rng: c.update(fetch_err=1),
    "collective": lambda cfg, c, rng: c["desc"].update(collective=rng.choice([0, 8, rng.randint(9, 255)])),
    "other_collective": lambda cfg, c, rng: c["desc"].update(collective=rng.choice(SUPPORTED_COLLECTIVES)),
    "comm_range": lambda cfg, c, rng: c["desc"].update(comm=rng.randint(cfg.n_comms, 255)),
    "comm_disabled": lambda cfg, c, rng: _comm_field(cfg, c, enable=0),
    "comm_size0": lambda cfg, c, rng: _comm_field(cfg, c, size=0),
    "comm_rank": lambda cfg, c, rng: _comm_field(cfg, c, rank=rng.randint(min(_rank_size(cfg, c)[1], 511), 511)),
    "comm_rank_other": lambda cfg, c, rng: _comm_field(cfg, c, rank=rng.randrange(max(1, _rank_size(cfg, c)[1]))),
    "dtype": lambda cfg, c, rng: c["desc"].update(dtype=rng.choice([4, rng.randint(5, 255)])),
    "dtype_other": lambda cfg, c, rng: c["desc"].update(dtype=rng.choice(list(DType))),
    "op": lambda cfg, c, rng: c["desc"].update(op=rng.randint(3, 255)),
    "op_other": lambda cfg, c, rng: c["desc"].update(op=rng.choice(list(ReduceOp))),
    "flags": lambda cfg, c, rng: c["desc"].update(flags=c["desc"]["flags"] | 1 << rng.randint(2, 7)),
    "in_place": lambda cfg, c, rng: c["desc"].update(flags=c["desc"]["flags"] | IN_PLACE),
    "in_place_off": lambda cfg, c, rng: c["desc"].update(dst=c["desc"]["dst"] ^ rng.choice([4, 8, 1 << 20])),
    "null": lambda cfg, c, rng: c["desc"].update(flags=c["desc"]["flags"] | NULL),
    "count0": lambda cfg, c, rng: c["desc"].update(count=0),
    "count_big": lambda cfg, c, rng: c["desc"].update(count=rng.getrandbits(32)),
    "misalign_src": lambda cfg, c, rng: c["desc"].update(src=c["desc"]["src"] ^ rng.choice([1, 2, 3])),
    "misalign_dst": lambda cfg, c, rng: c["desc"].update(dst=c["desc"]["dst"] ^ rng.choice([1, 2, 3])),
    "misalign_both": lambda cfg, c, rng: c["desc"].update(src=c["desc"]["src"] | 1, dst=c["desc"]["dst"] | 2),
    "root": lambda cfg, c, rng: c["desc"].update(root=rng.randint(_rank_size(cfg, c)[1], 0xFFFF)),
    "root_other": lambda cfg, c, rng: c["desc"].update(root=rng.randrange(max(1, _rank_size(cfg, c)[1]))),
    "not_found": lambda cfg, c, rng: c.update(found=0),
    "phases": lambda cfg, c, rng: c["prog"].update(n_phases=rng.choice([0, MAX_PHASES + 1, 7])),
    "src_window": lambda cfg, c, rng: _move_out(cfg, c, rng, "src"),
    "dst_window": lambda cfg, c, rng: _move_out(cfg, c, rng, "dst"),
    "geometry": lambda cfg, c, rng: c["geom_err"].update({rng.choice(["blocks_indivisible", "chunk_too_small",
                                                                       "m_not_pow2", "too_many_chunks"]): 1}),
    "chunk_beats": lambda cfg, c, rng: c.update(chunk_beats=rng.choice([0, cfg.chunk_beats + 1, 0xFFFF])),
    "partitions": lambda cfg, c, rng: c["part"].__setitem__(rng.choice([0, TERMINAL_PARTITION]), 0),
    "buffer": lambda cfg, c, rng: c["geom"].update(
        slot_beats=min(0xFFFF, cfg.buffer_beats // c["prog"]["n_slots"] + 1)),
    "message": lambda cfg, c, rng: (c["prog"].update(n_slots=1),
                                    c["geom"].update(slot_beats=cfg.max_message_beats + 1)),
    "slots": lambda cfg, c, rng: (c["geom"].update(slot_beats=1), c["prog"].update(
        n_slots=min(cfg.max_slots, LOAD_MASK_BITS) + 1 + rng.choice([0, 0, rng.randint(0, 1000)]))),
    "slot_beats_big": lambda cfg, c, rng: c["geom"].update(slot_beats=rng.getrandbits(16)),
}


def random_case(cfg, rng):
    c = valid_case(cfg, rng)
    if rng.random() < 0.25:
        return c, []
    kinds = rng.sample(sorted(MUTATIONS), rng.randint(1, 3))
    for k in kinds:
        MUTATIONS[k](cfg, c, rng)
    return c, kinds


def apply(ctx, dut, c):
    ctx.set(dut.desc, c["desc"])
    for port in ("prog", "geom", "geom_err"):
        ctx.set(getattr(dut, port), c[port])
    for port in ("fetch_err", "found", "chunk_beats"):
        ctx.set(getattr(dut, port), c[port])
    for port in ("win_base", "win_size", "win_comms", "part"):
        ctx.set(getattr(dut, port), c[port])
    for i, w in enumerate(c["comm_cfg"]):
        ctx.set(dut.comm_cfg[i].as_value(), w)


# ---- tests -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIGS)
def test_validator_matches_the_model_on_random_valid_and_spoiled_descriptors(name):
    cfg = CONFIGS[name]
    rng = random.Random(seed_for(20261201) + len(name))
    cases, expected, deciding = [], [], set()
    # at least N_CASES, and on until every check has been the deciding (first failing) one
    while len(cases) < N_CASES or (deciding != ALL_OUTCOMES and len(cases) < 4 * N_CASES):
        c, kinds = random_case(cfg, rng)
        cases.append((c, kinds))
        expected.append(model(cfg, c))
        deciding.add(next((k for k, _, _ in CHECKS if expected[-1][0][k]), "ok"))
    # a test that cannot fail is a defect: every check must decide at least one case
    assert deciding == ALL_OUTCOMES, sorted(ALL_OUTCOMES - deciding)
    print(f"{len(cases)} cases")
    dut = DescriptorValidator(cfg)
    entry_l = cmd_entry_layout(cfg)
    L = DescriptorValidator.LATENCY
    checked = []

    async def bench(ctx):
        for n, ((c, kinds), (failed, code, det, entry)) in enumerate(zip(cases, expected)):
            apply(ctx, dut, c)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            apply(ctx, dut, cases[(n + 1) % len(cases)][0])     # sampled at start: these must not matter
            for _ in range(L - 1):
                assert not ctx.get(dut.done)
                await ctx.tick()
            assert ctx.get(dut.done)
            what = f"case {n} mutations {kinds}: {c}"
            got_failed = {k: bool(v) for k, v in bits_of(dut.checks.shape(), ctx.get(dut.checks)).items()}
            assert got_failed == failed, what
            assert (ctx.get(dut.code), ctx.get(dut.det)) == (code, det), what
            assert bits_of(entry_l, ctx.get(dut.entry)) == bits_of(entry_l, entry_l.const(entry)), what
            checked.append(n)

    run_sim(dut, bench)
    assert len(checked) == len(cases)


def test_validator_answers_after_exactly_latency_cycles_and_a_new_start_abandons_the_old_one():
    cfg = CONFIGS["small"]
    rng = random.Random(seed_for(20261202))
    good = valid_case(cfg, rng)
    bad = valid_case(cfg, rng)
    bad["desc"]["op"] = 7
    dut = DescriptorValidator(cfg)
    L = DescriptorValidator.LATENCY
    assert L == 5

    async def bench(ctx):
        async def run(first, second=None, gap=None):
            apply(ctx, dut, first)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            done_at = []
            for t in range(1, 2 * L + 3):
                if t == gap:
                    apply(ctx, dut, second)
                    ctx.set(dut.start, 1)
                if ctx.get(dut.done):
                    done_at.append(t)
                    result = ctx.get(dut.code)
                await ctx.tick()
                ctx.set(dut.start, 0)
            return done_at, result

        done_at, code = await run(good)
        assert (done_at, code) == ([L], Status.OK)
        done_at, code = await run(bad)
        assert (done_at, code) == ([L], Status.BAD_OP)
        # a second start 1 or 2 cycles into a validation: one done, L cycles after the second start, for it
        for gap in range(1, L):
            done_at, code = await run(good, bad, gap)
            assert (done_at, code) == ([gap + L], Status.BAD_OP), gap

    run_sim(dut, bench)
