"""DescriptorFetch in Amaranth's simulator against a cycle model of the submission ring reader: random requests,
ring registers (size 0, full and empty rings, head wrapping), DMA command stalls, beat gaps and AXI errors. The
ring test and the descriptor address are registered: the model computes them from the previous cycle's values.

``SEED=<n>`` replaces the random seed.
"""

import random

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.sqfetch import DescriptorFetch
from syncfabric.hdl.common.layouts import DESCRIPTOR_BYTES

from sim_helpers import run_sim, seed_for

CFG = AceConfig.small()
W = CFG.beat_bytes
BEATS = DESCRIPTOR_BYTES // W


def test_reader_fetches_the_descriptor_at_the_head_and_moves_the_head_under_random_stalls():
    rng = random.Random(seed_for(7101))
    dut = DescriptorFetch(CFG)
    m = {"state": "IDLE", "head": 0, "beat": 0, "desc": 0, "err": 0, "index": 0, "bytes": 0}
    fetched_n = []

    async def bench(ctx):
        size, base, tail = 8, rng.getrandbits(20) << 6, 0
        reg = {"pending": 0, "index": 0, "addr": 0}     # the registered ring test and address, after reset
        for cycle in range(6000):
            if rng.random() < 0.01:             # the driver reconfigures the ring (while the reader is idle)
                if m["state"] == "IDLE":
                    size = rng.choice([0, 2, 4, 8, 16])
                    base = rng.getrandbits(20) << 6
            if rng.random() < 0.2:
                tail = rng.getrandbits(32)      # the doorbell: any value, taken modulo the size
            enable, go = int(rng.random() < 0.9), int(rng.random() < 0.7)
            cmd_ready = int(rng.random() < 0.6)
            beat_valid = int(rng.random() < 0.6)
            beat = {"data": rng.getrandbits(8 * W), "last": int(m["beat"] == BEATS - 1),
                    "err": int(rng.random() < 0.05)}
            for port, v in (("go", go), ("enable", enable), ("sq_base", base), ("sq_size", size),
                            ("sq_tail", tail)):
                ctx.set(getattr(dut, port), v)
            ctx.set(dut.rd_cmd.ready, cmd_ready)
            ctx.set(dut.rd_data.valid, beat_valid)
            ctx.set(dut.rd_data.payload, beat)

            # the model's outputs in this cycle: the ring test and the address are the previous cycle's
            want_cmd = m["state"] == "IDLE" and go and reg["pending"]
            assert ctx.get(dut.rd_cmd.valid) == want_cmd, cycle
            if want_cmd:
                assert ctx.get(dut.rd_cmd.payload.addr) == reg["addr"], cycle
                assert ctx.get(dut.rd_cmd.payload.length) == DESCRIPTOR_BYTES
            mask = (size - 1) & 0xFFFFFFFF
            index = m["head"] & mask
            reg_next = {"pending": enable and size != 0 and index != (tail & mask), "index": index,
                        "addr": (base + index * DESCRIPTOR_BYTES) & ((1 << CFG.addr_width) - 1)}
            assert ctx.get(dut.started) == (want_cmd and cmd_ready), cycle
            assert ctx.get(dut.rd_data.ready) == (m["state"] == "FETCH"), cycle
            last = m["state"] == "FETCH" and beat_valid and beat["last"]
            assert ctx.get(dut.fetched) == last, cycle
            await ctx.tick()

            # the model's next state (``lag``: the bytes of this cycle's beat, which the counter adds a cycle late)
            lag = 0
            if want_cmd and cmd_ready:
                m.update(state="FETCH", beat=0, err=0, index=reg["index"] & 0xFFFF)
            elif m["state"] == "SETTLE":
                m["state"] = "IDLE"
            elif m["state"] == "FETCH" and beat_valid:
                k = m["beat"]
                m["desc"] = m["desc"] & ~(((1 << 8 * W) - 1) << 8 * W * k) | beat["data"] << 8 * W * k
                m["beat"] += 1
                m["bytes"] += W
                lag = W
                m["err"] |= beat["err"]
                if last:           # SQ_HEAD moves on; the registered ring test sees it a cycle later
                    m.update(state="SETTLE", head=(m["head"] + 1) & mask)
                    fetched_n.append(cycle)
            assert ctx.get(dut.sq_head) == m["head"], cycle
            assert ctx.get(dut.desc.as_value()) == m["desc"], cycle
            assert (ctx.get(dut.fetch_err), ctx.get(dut.sq_index)) == (m["err"], m["index"]), cycle
            assert ctx.get(dut.desc_bytes) == m["bytes"] - lag, cycle
            reg = reg_next

    run_sim(dut, bench)
    assert len(fetched_n) > 100, len(fetched_n)
