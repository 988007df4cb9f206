"""The ACE driver over an in-memory transport: descriptor bytes and doorbells, ring wrap and full rings,
completion polling and waiting, program loading (IMEM, PTAB and ROUTE decode back), partitions, counters,
and the same driver run synchronously (SyncAceDriver) and asynchronously (asyncio) giving the same accesses.
"""

import asyncio
import dataclasses

import pytest

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.regs import (ACE_ID, IRQ_CPL, IRQ_ERROR, PTAB_ENTRY_WORDS, ROUTE_VALID, STALL_CAUSES,
                                     ace_regmap)
from syncfabric.hdl.common.layouts import (COMPLETION_BYTES, DESCRIPTOR_BYTES, completion_layout,
                                           descriptor_layout, pack_bytes, unpack_bytes)
from syncfabric.host.driver import AceDriver, AceError, RingFullError, SyncAceDriver, WindowInUseError, status_name
from syncfabric.host.programs import (ImemAllocator, ace_phase_weights, decode_entry, entry_words, partition_sizes,
                                      phase_weights, program_entry, program_partitions, routing_table)
from syncfabric.sim.golden.partitions import SPLITS, phase_depth
from syncfabric.host.transport import AsyncTransport, Transport, as_async, run_sync
from syncfabric.sim.golden.algorithms import generate
from syncfabric.sim.golden.program import Step
from syncfabric.sim.golden.types import Algorithm, Collective, DType, ReduceOp, Status

CFG = AceConfig()
RM = ace_regmap(CFG)
SQ_BASE, CQ_BASE = 0x10000, 0x20000


class MemTransport(Transport):
    """A register file (one value per word address, reset values from the map) and a sparse memory.

    Records every access in ``log``; ``on_wait`` (if set) runs when the driver waits for the interrupt, so a
    test can play the engine. Each access takes one "cycle"; a wait takes its timeout.
    """

    def __init__(self, regmap=RM):
        self.regs = {}
        for reg in regmap.registers():
            for half, addr in enumerate(reg.addresses):
                self.regs[addr] = (reg.init >> (32 * half)) & 0xFFFFFFFF
        self.mem = {}
        self.log = []
        self.on_wait = None
        self.now = 0

    def read_reg(self, addr):
        self.now += 1
        self.log.append(("r", addr))
        return self.regs.get(addr, 0)

    def write_reg(self, addr, value):
        assert 0 <= value < 1 << 32 and addr % 4 == 0
        self.now += 1
        self.log.append(("w", addr, value))
        self.regs[addr] = value

    def read_mem(self, addr, n):
        return bytes(self.mem.get(addr + i, 0) for i in range(n))

    def write_mem(self, addr, data):
        self.log.append(("m", addr, len(data)))
        for i, b in enumerate(bytes(data)):
            self.mem[addr + i] = b

    def wait_irq(self, timeout_cycles=None):
        if self.on_wait is not None:
            self.on_wait()
            self.now += 1
            return True
        self.now += timeout_cycles if timeout_cycles is not None else 1
        return False

    def cycles(self):
        return self.now

    # helpers for the tests -------------------------------------------------------------------------
    def reg(self, name, index=None):
        reg = RM.register(name, index)
        return sum(self.regs[a] << (32 * h) for h, a in enumerate(reg.addresses))

    def set_reg(self, name, value, index=None):
        reg = RM.register(name, index)
        for h, a in enumerate(reg.addresses):
            self.regs[a] = (value >> (32 * h)) & 0xFFFFFFFF

    def window(self, name, first, n):
        return [self.regs.get(RM.addr(name, first + i), 0) for i in range(n)]

    def writes_to(self, name, index=None):
        addr = RM.addr(name, index)
        return [e[2] for e in self.log if e[0] == "w" and e[1] == addr]


class SlowAsyncTransport(AsyncTransport):
    """``MemTransport`` behind coroutines that really suspend (as a simulator's would)."""

    def __init__(self, inner):
        self.inner = inner

    async def read_reg(self, addr):
        await asyncio.sleep(0)
        return self.inner.read_reg(addr)

    async def write_reg(self, addr, value):
        await asyncio.sleep(0)
        self.inner.write_reg(addr, value)

    async def read_mem(self, addr, n):
        await asyncio.sleep(0)
        return self.inner.read_mem(addr, n)

    async def write_mem(self, addr, data):
        await asyncio.sleep(0)
        self.inner.write_mem(addr, data)

    async def wait_irq(self, timeout_cycles=None):
        await asyncio.sleep(0)
        return self.inner.wait_irq(timeout_cycles)

    async def cycles(self):
        return self.inner.cycles()


def configured(sq=8, cq=8):
    t = MemTransport()
    drv = SyncAceDriver(t, CFG)
    drv.configure(SQ_BASE, sq, CQ_BASE, cq)
    t.log.clear()
    return t, drv


def write_completion(t, slot, **fields):
    t.write_mem(CQ_BASE + slot * COMPLETION_BYTES, pack_bytes(completion_layout(), fields, COMPLETION_BYTES))


# ---- bring-up ---------------------------------------------------------------------------------------------------

def test_check_config_accepts_the_reset_values_and_names_each_mismatch():
    t = MemTransport()
    drv = SyncAceDriver(t, CFG)
    assert drv.check_config()["CFG0"]["n_fsms"] == CFG.n_fsms
    t.set_reg("CFG1", RM.encode("CFG1", chunk_beats=1, landing_beats=CFG.landing_beats))
    with pytest.raises(AceError, match="CFG1 reads"):
        drv.check_config()
    t.set_reg("ID", 0)
    with pytest.raises(AceError, match="not an ACE engine"):
        drv.check_config()
    with pytest.raises(AceError, match="CFG0 reads .*CFG1 reads"):   # a default engine, a small config
        SyncAceDriver(MemTransport(RM), AceConfig.small()).check_config()


def test_configure_sets_rings_zeroes_them_and_enables_the_engine_last():
    t = MemTransport()
    for a in range(SQ_BASE, SQ_BASE + 4 * DESCRIPTOR_BYTES):
        t.mem[a] = 0xFF
    t.set_reg("SQ_HEAD", 6)          # the engine stopped at slot 6 of an earlier ring
    drv = SyncAceDriver(t, CFG)
    drv.configure(SQ_BASE, 4, CQ_BASE, 16, irq=False)
    assert t.read_mem(SQ_BASE, 4 * DESCRIPTOR_BYTES) == bytes(4 * DESCRIPTOR_BYTES)
    assert (t.reg("SQ_BASE"), t.reg("SQ_SIZE"), t.reg("CQ_BASE"), t.reg("CQ_SIZE")) == (SQ_BASE, 4, CQ_BASE, 16)
    assert t.reg("SQ_TAIL") == 2, "the driver continues at the engine's head (6 mod 4)"
    assert RM.decode("CTRL", t.reg("CTRL")) == {"enable": 1, "irq_enable": 0, "abort": 0}
    ctrl = RM.addr("CTRL")
    writes = [e for e in t.log if e[0] == "w"]
    assert writes[0] == ("w", ctrl, 0) and writes[-1][1] == ctrl, "disabled first, enabled last"
    with pytest.raises(ValueError, match="power of two"):
        drv.configure(SQ_BASE, 6, CQ_BASE, 16)
    with pytest.raises(ValueError, match="aligned"):
        drv.configure(SQ_BASE + 32, 4, CQ_BASE, 16)


def test_add_window_hides_the_window_while_it_changes():
    t = MemTransport()
    drv = SyncAceDriver(t, CFG)
    drv.add_window(3, 0x1_0000_0000, 0x4000)
    assert (t.reg("WIN_BASE", 3), t.reg("WIN_SIZE", 3)) == (0x1_0000_0000, 0x4000)
    assert t.writes_to("WIN_SIZE", 3)[0] == 0
    with pytest.raises(ValueError, match="window 4 out of range"):
        drv.add_window(4, 0, 1)
    assert t.reg("WIN_COMMS", 3) == (1 << CFG.n_comms) - 1          # every communicator by default
    drv.add_window(2, 0x8000, 0x100, comms=[1, 3, 1])
    assert t.reg("WIN_COMMS", 2) == 0b1010
    with pytest.raises(ValueError, match=r"communicator ids \[9\] out of range"):
        drv.add_window(2, 0x8000, 0x100, comms=[0, 9])


def test_add_window_writes_again_after_a_refusal_and_gives_up_on_a_window_in_use():
    """The engine refuses window writes while the window is in use (WIN_REFUSED counts them): one refusal (a
    descriptor being checked) costs one more attempt; a window that stays in use raises WindowInUseError."""
    class Locking(MemTransport):
        refusals = 0

        def write_reg(self, addr, value):
            if self.refusals and RM.addr("WIN_BASE", 0) <= addr < RM.addr("WIN_BASE", 0) + 0x100:
                self.refusals -= 1
                self.regs[RM.addr("WIN_REFUSED")] += 1
                self.now += 1
                return
            super().write_reg(addr, value)

    t = Locking()
    drv = SyncAceDriver(t, CFG)
    t.refusals = 2
    drv.add_window(1, 0x4000, 0x1000, comms=[0])
    assert (t.reg("WIN_BASE", 1), t.reg("WIN_SIZE", 1), t.reg("WIN_COMMS", 1)) == (0x4000, 0x1000, 1)
    assert t.reg("WIN_REFUSED") == 2
    t.refusals = 10**6
    with pytest.raises(WindowInUseError, match="window 1: the engine refused 8 times"):
        drv.add_window(1, 0, 0)
    assert (t.reg("WIN_BASE", 1), t.reg("WIN_SIZE", 1)) == (0x4000, 0x1000)


# ---- submission ring --------------------------------------------------------------------------------------------

def test_post_writes_the_packed_descriptor_then_rings_the_doorbell():
    t, drv = configured()
    desc = {"collective": "allreduce", "algorithm": "ring", "dtype": "bf16", "op": "max", "comm": 2, "count": 1000,
            "src": 0x1_0000_0040, "dst": 0x2_0000_0000, "cookie": 0xC0FFEE, "tag": 9, "flags": 1}
    assert drv.post(desc) == 0
    raw = t.read_mem(SQ_BASE, DESCRIPTOR_BYTES)
    fields = unpack_bytes(descriptor_layout(), raw)
    assert fields["collective"] == Collective.ALLREDUCE and fields["algorithm"] == Algorithm.RING
    assert fields["dtype"] == DType.BF16 and fields["op"] == ReduceOp.MAX
    assert {k: fields[k] for k in ("comm", "count", "src", "dst", "cookie", "tag", "flags")} == \
        {k: desc[k] for k in ("comm", "count", "src", "dst", "cookie", "tag", "flags")}
    assert t.log == [("m", SQ_BASE, DESCRIPTOR_BYTES), ("w", RM.addr("SQ_TAIL"), 1)]
    assert drv.post({"collective": Collective.ALLGATHER, "count": 1}) == 1
    assert unpack_bytes(descriptor_layout(), t.read_mem(SQ_BASE + DESCRIPTOR_BYTES, 64))["collective"] == 3
    with pytest.raises(ValueError, match="unknown dtype"):
        drv.post({"dtype": "fp64"})
    with pytest.raises(ValueError, match="not a field"):
        drv.post({"colective": 1})


def test_submission_ring_fills_at_size_minus_one_and_wraps():
    t, drv = configured(sq=4)
    assert [drv.post({"count": i + 1}) for i in range(3)] == [0, 1, 2]
    with pytest.raises(RingFullError):
        drv.post({"count": 9})
    t.set_reg("SQ_HEAD", 2)                           # the engine fetched two descriptors
    assert [drv.post({"count": 10 + i}) for i in range(2)] == [3, 0]
    with pytest.raises(RingFullError):
        drv.post({"count": 99})
    assert t.writes_to("SQ_TAIL") == [1, 2, 3, 0, 1]
    counts = [unpack_bytes(descriptor_layout(), t.read_mem(SQ_BASE + i * 64, 64))["count"] for i in range(4)]
    assert counts == [11, 2, 3, 10], "slot 0 was reused after the wrap"


def test_post_before_configure_is_an_error():
    drv = SyncAceDriver(MemTransport(), CFG)
    with pytest.raises(AceError, match="configure"):
        drv.post({"count": 1})


# ---- completion ring --------------------------------------------------------------------------------------------

def test_poll_reads_completions_in_order_across_the_wrap_and_advances_cq_head():
    t, drv = configured(cq=4)
    assert drv.poll() == []
    seq = 0
    seen = []
    for batch in (3, 2, 3):
        for _ in range(batch):
            slot = seq % 4
            seq += 1
            write_completion(t, slot, cookie=100 + seq, status=Status.OK if seq % 3 else Status.OUT_OF_WINDOW,
                             seq=seq, sq_index=seq)
        t.set_reg("CQ_TAIL", seq % 4)
        got = drv.poll()
        assert len(got) == batch
        seen += got
        assert t.reg("CQ_HEAD") == seq % 4
    assert [c["cookie"] for c in seen] == [101 + i for i in range(8)]
    assert [c["status_name"] for c in seen[:3]] == ["OK", "OK", "OUT_OF_WINDOW"]


def test_poll_refuses_a_completion_ring_out_of_sync():
    t, drv = configured(cq=4)
    write_completion(t, 0, seq=1)
    write_completion(t, 1, seq=3)
    t.set_reg("CQ_TAIL", 2)
    with pytest.raises(AceError, match="seq 3, expected 2"):
        drv.poll()
    t2, drv2 = configured(cq=4)
    t2.set_reg("CQ_TAIL", 1)                         # tail moved, record never written
    with pytest.raises(AceError, match="seq 0"):
        drv2.poll()


def test_wait_sleeps_on_the_interrupt_clears_it_and_keeps_extra_completions():
    t, drv = configured(cq=8)
    state = {"seq": 0}

    def engine():                                   # two completions per interrupt
        for _ in range(2):
            write_completion(t, state["seq"] % 8, seq=state["seq"] + 1, cookie=state["seq"])
            state["seq"] += 1
        t.set_reg("CQ_TAIL", state["seq"] % 8)

    t.on_wait = engine
    got = drv.wait(3, timeout_cycles=1000)
    assert [c["cookie"] for c in got] == [0, 1, 2]
    assert IRQ_CPL | IRQ_ERROR in t.writes_to("IRQ")
    assert [c["cookie"] for c in drv.wait(1)] == [3], "the extra completion of the last batch is kept"


def test_wait_times_out_with_the_count_so_far():
    t, drv = configured()
    with pytest.raises(TimeoutError, match="0 of 1 completions after 500 cycles"):
        drv.wait(1, timeout_cycles=500)


def test_status_names_cover_every_code_and_unknown_ones():
    assert status_name(0) == "OK" and status_name(Status.LINK_CRC) == "LINK_CRC"
    assert status_name(200) == "UNKNOWN_200"


# ---- programs ---------------------------------------------------------------------------------------------------

def decode_imem(t, offset, n):
    raw = t.window("IMEM", 2 * offset, 2 * n)
    return [Step.decode(raw[2 * i] | raw[2 * i + 1] << 32) for i in range(n)]


def test_configure_comm_loads_programs_that_decode_back():
    t = MemTransport()
    drv = SyncAceDriver(t, CFG)
    rank = 3
    progs = {c: generate(c, topology="ring:8")[rank] for c in ("allreduce", "reduce_scatter", "allgather")}
    placed = drv.configure_comm(1, rank, 8, progs, "ring:8")
    spans = sorted((p["imem"], p["imem"] + p["words"]) for p in placed.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "programs do not overlap in IMEM"
    assert len({p["ptab"] for p in placed.values()}) == 3
    for coll, p in placed.items():
        prog = progs[coll.golden_name]
        steps = [s for ph in prog.phases for s in ph.steps]
        assert decode_imem(t, p["imem"], p["words"]) == steps
        entry = decode_entry(t.window("PTAB", PTAB_ENTRY_WORDS * p["ptab"], PTAB_ENTRY_WORDS))
        assert entry == program_entry(prog, p["imem"], comm=1)
        assert entry["collective"] == coll and entry["algorithm"] == Algorithm.RING
        assert entry["phase_start"][0] == p["imem"] and entry["phase_len"][0] == len(steps)
        assert entry["n_blocks"] == prog.n_blocks and entry["segments"] == prog.segments
    assert RM.decode("COMM_CFG", t.reg("COMM_CFG", 1), 1) == {"rank": 3, "size": 8, "enable": 1}
    assert t.writes_to("COMM_CFG", 1)[0] == 0, "disabled while loading"
    dims = RM.decode("COMM_DIMS", t.reg("COMM_DIMS", 1), 1)
    assert (dims["dim0_plus"], dims["dim0_minus"], dims["dim0_valid"], dims["dim1_valid"]) == (0, 1, 1, 0)


def test_reconfiguring_a_comm_invalidates_its_old_entries_and_reuses_imem():
    t = MemTransport()
    drv = SyncAceDriver(t, CFG)
    first = drv.configure_comm(0, 0, 8, {"allreduce": generate("allreduce", topology="ring:8")[0]}, "ring:8")
    (old,) = first.values()
    second = drv.configure_comm(0, 0, 4, {"allgather": generate("allgather", topology="ring:4")[0]}, "ring:4")
    (new,) = second.values()
    assert new["imem"] == old["imem"] == 0 and new["ptab"] == old["ptab"]
    assert decode_entry(t.window("PTAB", 0, PTAB_ENTRY_WORDS))["collective"] == Collective.ALLGATHER
    route = t.window("ROUTE", 0, CFG.max_ranks)
    assert route[4:] == [0] * (CFG.max_ranks - 4), "stale routes of the 8-rank group are cleared"


def test_configure_comm_checks_its_arguments():
    drv = SyncAceDriver(MemTransport(), CFG)
    ar = generate("allreduce", topology="ring:8")
    with pytest.raises(ValueError, match="rank 2 of 8, not 3 of 8"):
        drv.configure_comm(0, 3, 8, {"allreduce": ar[2]}, "ring:8")
    with pytest.raises(ValueError, match="is a allreduce program"):
        drv.configure_comm(0, 2, 8, {"allgather": ar[2]}, "ring:8")
    with pytest.raises(ValueError, match="has 8 ranks, not 4"):
        drv.configure_comm(0, 2, 4, {"allreduce": ar[2]}, "ring:8")
    with pytest.raises(ValueError, match="communicator 4 out of range"):
        drv.configure_comm(4, 2, 8, {"allreduce": ar[2]}, "ring:8")


def test_routing_tables_of_ring_8_and_bidir_ring_8():
    v = ROUTE_VALID
    assert routing_table("ring:8", 5) == [v, v, v, v, v, 0, v, v]
    # shorter way round; port 0 (next) on the tie at distance 4
    assert routing_table("bidir-ring:8", 0) == [0, v, v, v, v, v | 1, v | 1, v | 1]
    assert routing_table("bidir-ring:8", 6) == [v, v, v, v | 1, v | 1, v | 1, 0, v]
    assert routing_table("ring:8", 0, 16)[8:] == [0] * 8
    # torus 4x2x1: XYZ routing, local dimension first
    table = routing_table("torus:4x2x1", 0)
    assert table[1] == v | 0 and table[3] == v | 1 and table[4] == v | 2 and table[5] == v | 0
    t = MemTransport()
    SyncAceDriver(t, CFG).configure_comm(2, 6, 8, {"allreduce": generate("allreduce", topology="bidir-ring:8")[6]},
                                         "bidir-ring:8")
    assert t.window("ROUTE", 2 * CFG.max_ranks, 8) == routing_table("bidir-ring:8", 6)


def test_program_entry_rejects_a_write_to_a_slot_after_its_store():
    """The engine posts STOREs, so a later write to the slot could overtake the STORE's reads."""
    ar = generate("allreduce", topology="ring:4")[0]
    phase = ar.phases[-1]
    steps = list(phase.steps)
    k = next(i for i, s in enumerate(steps) if s.op.name == "STORE")
    late = next(s for s in steps[:k] if s.op.name == "RECV" and s.slot == steps[k].slot)
    bad = dataclasses.replace(ar, phases=ar.phases[:-1] + (dataclasses.replace(phase, steps=tuple(steps) + (late,)),))
    with pytest.raises(ValueError, match=f"writes slot {late.slot} after the STORE"):
        program_entry(bad)
    program_entry(ar)


def test_program_entry_rejects_values_that_do_not_fit():
    ar = generate("allreduce", topology="ring:4")[0]
    with pytest.raises(ValueError, match="phase_start=1024 does not fit in 10 bits"):
        program_entry(ar, 1024 - ar.phase_table()[0][0])
    with pytest.raises(ValueError, match="unknown program entry fields"):
        entry_words({"bogus": 1})


# ---- partitions -------------------------------------------------------------------------------------------------

def test_partition_heuristic_one_phase_splits_half_and_half():
    ar = generate("allreduce", topology="ring:8")[0]
    assert program_partitions(ar, "ring:8", 52, 1024) == (26, 0, 0, 0, 26)
    assert program_partitions(ar, "ring:8", 7, 64) == (4, 0, 0, 0, 3)


def test_partition_heuristic_weights_torus_phases_by_residence():
    ar = generate("allreduce", topology="torus:4x4x4")[0]
    # 32 blocks of a 1,024-beat chunk: local phases 3 hops of 90 cycles and 12 blocks per port at rate 1
    # (270 + 384); vertical/horizontal 6 hops of 500 and 6 blocks per port at rate 1/8 (3000 + 1536)
    assert [phase_depth(ar, p) for p in range(4)] == [3, 6, 6, 3]
    assert phase_weights(ar, "torus:4x4x4", 1024) == (654.0, 4536.0, 4536.0, 654.0)
    # quotas 3.4, 23.6, 23.6, 3.4, 3.4 -> floors 3, 23, 23, 3, 3 (55): two taken back from the most over quota
    assert program_partitions(ar, "torus:4x4x4", 52, 1024) == (3, 22, 21, 3, 3)
    assert program_partitions(ar, "torus:4x4x4", 5, 1024) == (1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="4 chunk buffers cannot give 5 partitions"):
        program_partitions(ar, "torus:4x4x4", 4, 1024)
    # the ACE paper's heuristic (bandwidth x initial chunk fraction) starves the slow rings
    assert ace_phase_weights(ar, "torus:4x4x4") == (2.0, 0.0625, 0.0625, 0.5)
    assert partition_sizes([ace_phase_weights(ar, "torus:4x4x4")], 52) == (33, 1, 1, 9, 8)


def test_phase_depth_from_one_rank_matches_all_ranks_on_symmetric_algorithms():
    from syncfabric.sim.perf.profile import data_depth
    for coll, topo in (("allreduce", "torus:4x2x2"), ("allreduce", "bidir-ring:8"), ("allreduce", "switch:8"),
                       ("alltoall", "torus:4x2x2"), ("reduce_scatter", "torus:4x2x2"),
                       ("allgather", "torus:4x2x2")):
        progs = generate(coll, topology=topo)
        for p in range(len(progs[0].phases)):
            assert {phase_depth(q, p) for q in progs} == {data_depth(progs, p, topo)}, (coll, topo, p)
    # a broadcast's relay chain is longer than one rank can see (7 on ring:8): counted 2, never unbounded
    assert max(phase_depth(q, 0) for q in generate("broadcast", topology="ring:8")) == 2


def test_partition_heuristic_averages_phases_shared_by_programs():
    # phase 0 weighs 1.5 (the average), phase 1 and the terminal partition 1.0: quotas 4.29, 2.86, 2.86
    assert partition_sizes([(2.0,), (1.0, 1.0)], 10) == (4, 3, 0, 0, 3)


def test_driver_writes_partitions_for_all_loaded_programs():
    t = MemTransport()
    drv = SyncAceDriver(t, CFG)
    drv.configure_comm(0, 0, 8, {"allreduce": generate("allreduce", topology="ring:8")[0]}, "ring:8")
    assert [t.reg("PART", i) for i in range(5)] == [26, 0, 0, 0, 26]
    ring = generate("allreduce", topology="ring:8")[0]
    torus = generate("allreduce", topology="torus:2x2x2")[0]
    drv.configure_comm(1, 0, 8, {"allreduce": torus}, "torus:2x2x2")
    expect = partition_sizes([phase_weights(ring, "ring:8", CFG.chunk_beats),
                              phase_weights(torus, "torus:2x2x2", CFG.chunk_beats)], CFG.n_buffers)
    assert expect[1] > 0 and expect[3] > 0
    assert tuple(t.reg("PART", i) for i in range(5)) == expect == drv.partitions()


def test_driver_splits_by_the_heuristic_it_is_given():
    torus = generate("allreduce", topology="torus:4x2x2")[0]
    parts = {}
    for split in SPLITS:
        t = MemTransport()
        drv = SyncAceDriver(t, CFG)
        drv.sram_split = split
        drv.configure_comm(0, 0, 16, {"allreduce": torus}, "torus:4x2x2")
        parts[split] = tuple(t.reg("PART", i) for i in range(5))
    assert parts["ace"] == partition_sizes([ace_phase_weights(torus, "torus:4x2x2")], CFG.n_buffers)
    assert parts["residence"] == partition_sizes([phase_weights(torus, "torus:4x2x2", CFG.chunk_beats)],
                                                 CFG.n_buffers)
    assert parts["residence"][1] > parts["ace"][1]      # the slow vertical ring gets more buffers
    drv.sram_split = "bytes"
    with pytest.raises(ValueError, match="unknown SRAM split 'bytes'"):
        drv.partitions()


# ---- instruction memory -----------------------------------------------------------------------------------------

def test_imem_allocator_first_fit_free_and_full():
    a = ImemAllocator(100)
    assert [a.alloc(30, "a"), a.alloc(30, "b"), a.alloc(30, "c")] == [0, 30, 60]
    a.free(30)
    assert a.alloc(20, "d") == 30 and a.alloc(10, "e") == 50
    with pytest.raises(ValueError, match="no room for a program of 20 words"):
        a.alloc(20)
    assert a.free_owner("c") == [60] and a.alloc(40) == 60
    assert ImemAllocator(4096).words == 1024, "phase_start is 10 bits"


# ---- counters ---------------------------------------------------------------------------------------------------

def test_counters_read_every_counter_low_word_first():
    t = MemTransport()
    t.set_reg("CYCLES", 0x1_2345_6789)
    t.set_reg("CMDS_ERR", 4)
    t.set_reg("TX_FLITS", 77, 1)
    t.set_reg("STALL", 5, STALL_CAUSES.index("credits"))
    drv = SyncAceDriver(t, CFG)
    c = drv.counters()
    assert c["CYCLES"] == 0x1_2345_6789 and c["CMDS_ERR"] == 4 and c["TX_FLITS"] == [0, 77]
    assert c["STALL"]["credits"] == 5 and set(c["STALL"]) == set(STALL_CAUSES)
    cycles = RM.addr("CYCLES")
    reads = [e[1] for e in t.log if e[0] == "r"]
    assert reads.index(cycles) + 1 == reads.index(cycles + 4)


# ---- sync and async ---------------------------------------------------------------------------------------------

def scenario_steps():
    prog = generate("allreduce", topology="bidir-ring:8")[1]
    return [("configure", (SQ_BASE, 8, CQ_BASE, 8)), ("add_window", (0, 0x1000, 0x10000)),
            ("configure_comm", (0, 1, 8, {"allreduce": prog}, "bidir-ring:8")),
            ("post", ({"collective": "allreduce", "count": 64, "src": 0x1000, "dst": 0x2000},)),
            ("poll", ())]


def test_async_driver_over_a_suspending_transport_matches_the_sync_driver():
    sync_t = MemTransport()
    sync_drv = SyncAceDriver(sync_t, CFG)
    sync_results = [getattr(sync_drv, name)(*args) for name, args in scenario_steps()]

    async_t = MemTransport()

    async def main():
        drv = AceDriver(SlowAsyncTransport(async_t), CFG)
        return [await getattr(drv, name)(*args) for name, args in scenario_steps()]

    assert asyncio.run(main()) == sync_results
    assert async_t.log == sync_t.log and async_t.mem == sync_t.mem


def test_run_sync_refuses_a_coroutine_that_suspends():
    drv = AceDriver(SlowAsyncTransport(MemTransport()), CFG)
    with pytest.raises(RuntimeError, match="await it in the simulator's event loop"):
        run_sync(drv.read("ID"))
    assert run_sync(AceDriver(MemTransport(), CFG).read("ID")) == ACE_ID
    with pytest.raises(TypeError, match="needs a synchronous Transport"):
        SyncAceDriver(SlowAsyncTransport(MemTransport()), CFG)
    with pytest.raises(TypeError, match="neither a Transport nor an AsyncTransport"):
        as_async(object())


def test_sync_driver_exposes_the_async_drivers_api_with_its_docs():
    for name in ("configure", "configure_comm", "post", "poll", "wait", "counters", "read", "write"):
        method = getattr(SyncAceDriver, name)
        assert method.__doc__ == getattr(AceDriver, name).__doc__
    assert SyncAceDriver(MemTransport(), CFG).regmap is RM


def test_every_golden_program_loads_its_slots_before_receiving_into_them():
    """The engine starts each slot's count lane at the LOAD's value when a chunk is dispatched; that is only
    the LOAD's effect if no RECV wrote the slot first. Every generated program keeps to it, and a program that
    does not is refused before anything is written."""
    from syncfabric.host.programs import check_load_first
    from syncfabric.sim.golden.algorithms import supported_algorithms
    from syncfabric.sim.golden.program import Phase, Program, StepOp

    for topo in ("ring:4", "bidir-ring:5", "torus:2x2x2", "torus:4x2x2", "switch:4"):
        for coll in ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce", "barrier"):
            for algo in supported_algorithms(coll, topo):
                for prog in generate(coll, algo, topo):
                    check_load_first(prog)
    good = generate("allreduce", "ring", "ring:2")[0]
    steps = good.phases[0].steps
    recv = next(s for s in steps if s.op == StepOp.RECV)
    bad = Program(good.rank, good.nranks, good.collective, good.algorithm, good.n_blocks, good.n_slots,
                  (Phase("bad", good.phases[0].ports, (recv, Step(StepOp.LOAD, recv.slot, recv.block))),))
    with pytest.raises(ValueError, match="count lane"):
        program_entry(bad)
