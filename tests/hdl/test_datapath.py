"""The Datapath in Amaranth's simulator, driven the way the control plane drives it: unit jobs, credit
reservations and message order, with each link port looped back to itself and NPU memory modelled behind the
DMA requests.

A block goes LOAD -> slot A, SEND on port 0 -> its own landing buffer, RECV into slot B, SEND again and RECV
reduced into slot A (int32 sum: A + A), SEND and RECV on port 0 forwarded to port 1 (the TX mux's forward path)
and RECV on port 1 into slot C, then three STOREs back to memory. Then three messages land back to back in one
channel and three RECVs are issued at once: the second is taken while the first still holds the channel's
head header (its header check reads the header behind the head) and streams right behind it; the third
expects another key and ends with PROTOCOL. Last, messages whose header says another command (another dtype;
another op): MISMATCH on a RECV (a forward of such a message is poisoned, and its receiver reports PROTOCOL),
except for another op on a RECV that does not reduce and for an empty message. Memory, counters and
completions are checked against what those steps mean. A second test does the same for headers that say
another element count (another length or ``final``: MISMATCH) beside an out-of-order one (PROTOCOL).

``SEED=<n>`` replaces the random seed.
"""

import random

import numpy as np
from amaranth.hdl import Elaboratable, Module, Shape
from amaranth.lib import wiring
from amaranth.sim import Simulator

from syncfabric.hdl.ace.config import AceConfig
from syncfabric.hdl.ace.datapath import Datapath
from syncfabric.sim.golden.types import DType, ReduceOp, Status

from sim_helpers import seed_for

CFG = AceConfig.small()
BB = CFG.beat_bytes
BEATS = 3                       # one block: 3 beats (48 B), one packet
NBYTES = BEATS * BB
SLOT_A, SLOT_B, SLOT_C = 0, BEATS, 2 * BEATS       # slot addresses (beats) in buffer 1
BUF = 1
SRC, DST_A, DST_B, DST_C, DST_D = 0x100, 0x400, 0x500, 0x600, 0x700


class Loopback(Elaboratable):
    """The datapath with every TX port wired to its own RX port (flits out, credits back)."""

    def __init__(self, cfg):
        self.dp = Datapath(cfg)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dp = dp = self.dp
        for k in range(len(dp.tx)):
            wiring.connect(m, dp.tx[k], dp.rx[k])
            m.d.comb += dp.tx_credit[k].eq(dp.rx_credit[k])
        return m


def _beats(blob):
    return [int.from_bytes(blob[i:i + BB], "little") for i in range(0, len(blob), BB)]


# (the endless processes wait with plain ticks: a pending `until` would be torn down when the run ends)
async def take(ctx, stream):
    ctx.set(stream.ready, 1)
    while True:
        _, _, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
        if valid:
            ctx.set(stream.ready, 0)
            return payload


def npu_memory(dp, mem):
    """The processes serving the datapath's DMA reads and writes from ``mem`` (a bytearray)."""
    async def memory_reads(ctx):
        while True:
            cmd = await take(ctx, dp.rd_cmd)
            words = _beats(mem[cmd.addr:cmd.addr + cmd.length])
            for i, w in enumerate(words):
                ctx.set(dp.rd_data.payload, {"data": w, "last": i == len(words) - 1, "err": 0})
                ctx.set(dp.rd_data.valid, 1)
                while not (await ctx.tick().sample(dp.rd_data.ready))[2]:
                    pass
            ctx.set(dp.rd_data.valid, 0)

    async def memory_writes(ctx):
        while True:
            cmd = await take(ctx, dp.wr_cmd)
            for i in range((cmd.length + BB - 1) // BB):
                beat = await take(ctx, dp.wr_data)
                n = min(BB, cmd.length - i * BB)
                mem[cmd.addr + i * BB:cmd.addr + i * BB + n] = beat.data.to_bytes(BB, "little")[:n]
            ctx.set(dp.wr_done.payload, {"err": 0})
            ctx.set(dp.wr_done.valid, 1)
            while not (await ctx.tick().sample(dp.wr_done.ready))[2]:
                pass
            ctx.set(dp.wr_done.valid, 0)
    return memory_reads, memory_writes


async def issue(ctx, job, payload, pulses=()):
    """Offer ``payload`` on the job stream ``job`` when its unit is ready, with every (signal, value) of
    ``pulses`` in the same cycle (as the control plane does at a grant)."""
    while not ctx.get(job.ready):
        await ctx.tick()
    ctx.set(job.payload, payload)
    ctx.set(job.valid, 1)
    for sig, value in pulses:
        ctx.set(sig, value)
    await ctx.tick()
    ctx.set(job.valid, 0)
    for sig, _ in pulses:
        ctx.set(sig, {} if hasattr(sig, "shape") and not isinstance(sig.shape(), Shape) else 0)


def _looped_back(seed):
    """A block of random int32 at SRC in a 4 KiB memory, and the looped-back datapath."""
    rng = random.Random(seed_for(seed))
    src = np.array([rng.randrange(-2**30, 2**30) for _ in range(NBYTES // 4)], dtype="<i4")
    mem = bytearray(0x1000)
    mem[SRC:SRC + NBYTES] = src.tobytes()
    top = Loopback(CFG)
    return src, mem, top, top.dp


def test_load_send_recv_reduce_forward_store_through_looped_back_ports():
    src, mem, top, dp = _looped_back(61)
    ctl, port = dp.ctl, dp.port
    dones = {"load": [], "store": [], "send0": [], "recv0": [], "recv1": []}

    async def completions(ctx):
        watched = {"load": ctl.load_done, "store": ctl.store_done, "send0": port[0].send_done,
                   "recv0": port[0].recv_done, "recv1": port[1].recv_done}
        cycle = 0
        async for _, _, *values in ctx.tick().sample(*watched.values()):
            cycle += 1
            for name, v in zip(watched, values):
                if v.valid:
                    dones[name].append((v.fsm, v.status, cycle))

    def header(key, count=1, dtype=DType.INT32, op=ReduceOp.SUM, length=NBYTES):
        return {"dst": 0, "src": 0, "vc": 1, "tag": 0x5A, "chunk": 2, "phase": 0, "key": key, "length": length,
                "count": count, "dtype": dtype, "op": op}

    async def wait_for(ctx, name, n):
        for _ in range(2000):
            if len(dones[name]) >= n:
                return
            await ctx.tick()
        raise AssertionError(f"{name}: {len(dones[name])} completions, expected {n}")

    common = {"fsm": 1, "cmd": 0, "buf": BUF, "beats": BEATS}

    async def send(ctx, p, slot, key, n_sent, **sender):
        await issue(ctx, port[p].send_job, {**common, "sram_addr": slot, "hdr": header(key, **sender)}, [
            (port[p].reserve, {"valid": 1, "vc": 1, "beats": BEATS}),
            (port[p].order.payload, {"src": 0, "empty": 0}), (port[p].order.valid, 1)])
        await wait_for(ctx, f"send{p}", n_sent)

    async def recv(ctx, p, slot, key, n_done, reduce=False, fwd_port=None):
        while not (ctx.get(port[p].hdr_valid) >> 1) & 1:        # the message is in channel 1's landing buffer
            await ctx.tick()
        job = {**common, "sram_addr": slot, "reduce": int(reduce), "dtype": DType.INT32,
               "op": ReduceOp.SUM, "ch": 1, "exp": header(key)}
        pulses = []
        if fwd_port is not None:
            job.update(fwd=1, fwd_port=fwd_port, fwd_hdr=header(key + 1))
            pulses = [(port[fwd_port].reserve, {"valid": 1, "vc": 1, "beats": BEATS}),
                      (port[fwd_port].order.payload, {"src": 1 + p, "empty": 0}), (port[fwd_port].order.valid, 1)]
        await issue(ctx, port[p].recv_job, job, pulses)
        await wait_for(ctx, f"recv{p}", n_done)

    async def store(ctx, slot, addr, n_done):
        await issue(ctx, ctl.store_job, {**common, "sram_addr": slot, "addr": addr, "nbytes": NBYTES, "slot": slot})
        await wait_for(ctx, "store", n_done)

    async def bench(ctx):
        ctx.set(dp.tx_lookahead, 64)
        await issue(ctx, ctl.load_job, {**common, "sram_addr": SLOT_A, "addr": SRC, "nbytes": NBYTES, "slot": SLOT_A})
        await wait_for(ctx, "load", 1)
        assert ctx.get(port[0].beat_credits[1]) == CFG.landing_beats
        await send(ctx, 0, SLOT_A, key=3, n_sent=1)
        await recv(ctx, 0, SLOT_B, key=3, n_done=1)                     # B = A
        await send(ctx, 0, SLOT_A, key=4, n_sent=2)
        await recv(ctx, 0, SLOT_A, key=4, n_done=2, reduce=True)        # A = A + A
        await send(ctx, 0, SLOT_B, key=5, n_sent=3)
        await recv(ctx, 0, SLOT_B, key=5, n_done=3, fwd_port=1)         # B = A (again), forwarded on port 1
        await recv(ctx, 1, SLOT_C, key=6, n_done=1)                     # C = the forward
        for n, (slot, addr) in enumerate(((SLOT_A, DST_A), (SLOT_B, DST_B), (SLOT_C, DST_C)), 1):
            await store(ctx, slot, addr, n)
        for _ in range(20):
            await ctx.tick()
        # every credit came back, and the counters saw what went by
        for k in range(2):
            assert ctx.get(port[k].beat_credits[1]) == CFG.landing_beats
            assert ctx.get(port[k].hdr_credits[1]) == CFG.landing_headers
            assert ctx.get(port[k].tx_room)
        assert ctx.get(dp.tx_flits[0]) == 3 * BEATS and ctx.get(dp.rx_flits[0]) == 3 * BEATS
        assert ctx.get(dp.tx_flits[1]) == BEATS and ctx.get(dp.rx_flits[1]) == BEATS
        assert ctx.get(dp.rx_crc_errs[0]) == 0 and ctx.get(dp.rx_crc_errs[1]) == 0
        assert ctx.get(dp.payload_rd_bytes) == NBYTES
        assert ctx.get(dp.payload_wr_bytes) == 3 * NBYTES
        assert ctx.get(dp.alu_beats) >= BEATS
        assert ctx.get(dp.phase_flits[0]) == 4 * BEATS
        assert not ctx.get(dp.sram_conflict)
        assert ctx.get(ctl.dep_idle)

        # three messages in channel 1 of port 0, then three RECVs offered back to back
        for n, key in enumerate((7, 8, 9), 4):
            await send(ctx, 0, SLOT_A, key=key, n_sent=n)
        while not (ctx.get(port[0].hdr_two) >> 1) & 1:
            await ctx.tick()
        for slot, key in ((SLOT_B, 7), (SLOT_C, 8), (SLOT_B, 10)):
            await issue(ctx, port[0].recv_job, {**common, "sram_addr": slot, "dtype": DType.INT32,
                                                "op": ReduceOp.SUM, "ch": 1, "exp": header(key)})
        await wait_for(ctx, "recv0", 6)
        for _ in range(20):
            await ctx.tick()
        assert ctx.get(port[0].beat_credits[1]) == CFG.landing_beats
        assert ctx.get(port[0].hdr_credits[1]) == CFG.landing_headers
        assert not ctx.get(port[0].hdr_valid)
        await store(ctx, SLOT_C, DST_D, 4)                               # C = A, by the second of the three

        # messages from a rank whose command says another dtype or op
        await send(ctx, 0, SLOT_A, key=11, n_sent=7, dtype=DType.FP32)
        await recv(ctx, 0, SLOT_B, key=11, n_done=7, fwd_port=1)         # MISMATCH, forwarded poisoned
        await recv(ctx, 1, SLOT_C, key=12, n_done=2)                     # PROTOCOL: a poisoned input
        await send(ctx, 0, SLOT_A, key=13, n_sent=8, op=ReduceOp.MAX)
        await recv(ctx, 0, SLOT_B, key=13, n_done=8, reduce=True)        # MISMATCH: it reduces with SUM
        await send(ctx, 0, SLOT_A, key=14, n_sent=9, op=ReduceOp.MAX)
        await recv(ctx, 0, SLOT_B, key=14, n_done=9)                     # OK: a copy has no op
        # an empty message (a barrier's) has no elements to disagree on: OK
        await issue(ctx, port[0].send_job, {**common, "beats": 0, "sram_addr": SLOT_A,
                                            "hdr": header(15, dtype=DType.FP32, length=0)}, [
            (port[0].reserve, {"valid": 1, "vc": 1, "beats": 0}),
            (port[0].order.payload, {"src": 0, "empty": 1}), (port[0].order.valid, 1)])
        await wait_for(ctx, "send0", 10)
        while not (ctx.get(port[0].hdr_valid) >> 1) & 1:
            await ctx.tick()
        await issue(ctx, port[0].recv_job, {**common, "beats": 0, "sram_addr": SLOT_B, "reduce": 1,
                                            "dtype": DType.INT32, "op": ReduceOp.SUM, "ch": 1,
                                            "exp": header(15, length=0)})
        await wait_for(ctx, "recv0", 10)
        for _ in range(20):
            await ctx.tick()
        for k in range(2):
            assert ctx.get(port[k].beat_credits[1]) == CFG.landing_beats
            assert ctx.get(port[k].hdr_credits[1]) == CFG.landing_headers

    sim = Simulator(top)
    sim.add_clock(1e-6)
    for proc in (*npu_memory(dp, mem), completions):
        sim.add_process(proc)
    sim.add_testbench(bench)
    sim.run()

    doubled = (src.astype(np.int64) * 2).astype("<i4")          # int32 sums wrap
    assert bytes(mem[DST_A:DST_A + NBYTES]) == doubled.tobytes()
    assert bytes(mem[DST_B:DST_B + NBYTES]) == src.tobytes()
    assert bytes(mem[DST_C:DST_C + NBYTES]) == src.tobytes()
    assert bytes(mem[DST_C + NBYTES:DST_C + NBYTES + 16]) == bytes(16)     # nothing past the block
    assert bytes(mem[DST_D:DST_D + NBYTES]) == doubled.tobytes()
    back_to_back = dones["recv0"][3:6]
    want = {"recv0": [Status.OK] * 5 + [Status.PROTOCOL, Status.MISMATCH, Status.MISMATCH, Status.OK, Status.OK],
            "recv1": [Status.OK, Status.PROTOCOL]}
    for name, got in dones.items():
        assert all(fsm == 1 for fsm, _, _ in got), (name, got)
        assert [status for _, status, _ in got] == want.get(name, [Status.OK] * len(got)), (name, got)
    # back_to_back[2] is PROTOCOL: the third expected key 10, the header says 9
    # the second message streamed right behind the first: its job waited in the unit, operand-free
    assert back_to_back[1][2] - back_to_back[0][2] <= BEATS + 1, back_to_back
    assert [len(dones[n]) for n in ("load", "store", "send0", "recv0", "recv1")] == [1, 4, 10, 10, 2]


def test_a_message_of_a_command_with_another_element_count_ends_mismatch_and_forwards_poisoned():
    """The RECV's header check tells an out-of-order message (another tag, chunk, phase or key: PROTOCOL) from
    the awaited message of a rank whose command has another element count: another ``length`` (the message
    cannot be processed: drained, the slot left alone, zeros forwarded poisoned) or another ``final`` (the
    chunk is the last of one rank's command only: processed, forwarded poisoned) ends the step with MISMATCH.
    The forwards' receiver on port 1 reports PROTOCOL (a poisoned input). A message that is out of order and
    also of another length is PROTOCOL. Every landing credit comes back."""
    src, mem, top, dp = _looped_back(64)
    ctl, port = dp.ctl, dp.port
    dones = {"recv0": [], "recv1": []}
    common = {"fsm": 1, "cmd": 0, "buf": BUF, "beats": BEATS}

    async def completions(ctx):
        async for _, _, r0, r1 in ctx.tick().sample(port[0].recv_done, port[1].recv_done):
            for name, v in (("recv0", r0), ("recv1", r1)):
                if v.valid:
                    dones[name].append(v.status)

    def header(key, tag=0x5A, length=NBYTES, final=0):
        return {"dst": 0, "src": 0, "vc": 1, "tag": tag, "chunk": 2, "phase": 0, "key": key, "length": length,
                "count": 1, "dtype": DType.INT32, "op": ReduceOp.SUM, "final": final}

    async def wait_for(ctx, name, n):
        for _ in range(2000):
            if len(dones[name]) >= n:
                return
            await ctx.tick()
        raise AssertionError(f"{name}: {len(dones[name])} completions, expected {n}")

    async def send(ctx, key, **sender):
        beats = -(-sender.get("length", NBYTES) // BB)
        await issue(ctx, port[0].send_job, {**common, "beats": beats, "sram_addr": SLOT_A,
                                            "hdr": header(key, **sender)}, [
            (port[0].reserve, {"valid": 1, "vc": 1, "beats": beats}),
            (port[0].order.payload, {"src": 0, "empty": 0}), (port[0].order.valid, 1)])
        while not (ctx.get(port[0].hdr_valid) >> 1) & 1:        # the message is in channel 1's landing buffer
            await ctx.tick()

    async def recv(ctx, p, slot, key, n_done, fwd=False):
        job = {**common, "sram_addr": slot, "dtype": DType.INT32, "op": ReduceOp.SUM, "ch": 1, "exp": header(key)}
        pulses = []
        if fwd:
            job.update(fwd=1, fwd_port=1, fwd_hdr=header(key + 1))
            pulses = [(port[1].reserve, {"valid": 1, "vc": 1, "beats": BEATS}),
                      (port[1].order.payload, {"src": 1, "empty": 0}), (port[1].order.valid, 1)]
        await issue(ctx, port[p].recv_job, job, pulses)
        await wait_for(ctx, f"recv{p}", n_done)

    async def store(ctx, slot, addr):
        await issue(ctx, ctl.store_job, {**common, "sram_addr": slot, "addr": addr, "nbytes": NBYTES, "slot": slot})
        for _ in range(60):
            await ctx.tick()

    async def bench(ctx):
        ctx.set(dp.tx_lookahead, 64)
        await issue(ctx, ctl.load_job, {**common, "sram_addr": SLOT_A, "addr": SRC, "nbytes": NBYTES, "slot": SLOT_A})
        for _ in range(50):
            await ctx.tick()
        await send(ctx, 3)
        await recv(ctx, 0, SLOT_B, key=3, n_done=1)                     # B = A: OK
        # another length (a beat more): drained, B left alone, zeros forwarded poisoned
        await send(ctx, 4, length=NBYTES + BB)
        await recv(ctx, 0, SLOT_B, key=4, n_done=2, fwd=True)           # MISMATCH
        await recv(ctx, 1, SLOT_C, key=5, n_done=1)                     # C = zeros: PROTOCOL (poisoned)
        await store(ctx, SLOT_B, DST_B)
        await store(ctx, SLOT_C, DST_C)
        # another final: processed (C = A), forwarded poisoned
        await send(ctx, 6, final=1)
        await recv(ctx, 0, SLOT_C, key=6, n_done=3, fwd=True)           # MISMATCH
        await recv(ctx, 1, SLOT_B, key=7, n_done=2)                     # PROTOCOL (poisoned)
        await store(ctx, SLOT_C, DST_D)
        # another tag (and another length): out of order, PROTOCOL wins
        await send(ctx, 8, tag=0x5B, length=NBYTES - 4)
        await recv(ctx, 0, SLOT_C, key=8, n_done=4)                     # PROTOCOL
        for _ in range(20):
            await ctx.tick()
        for k in range(2):
            assert ctx.get(port[k].beat_credits[1]) == CFG.landing_beats
            assert ctx.get(port[k].hdr_credits[1]) == CFG.landing_headers
        assert not ctx.get(port[0].hdr_valid) and not ctx.get(port[1].hdr_valid)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    for proc in (*npu_memory(dp, mem), completions):
        sim.add_process(proc)
    sim.add_testbench(bench)
    sim.run()

    assert dones == {"recv0": [Status.OK, Status.MISMATCH, Status.MISMATCH, Status.PROTOCOL],
                     "recv1": [Status.PROTOCOL, Status.PROTOCOL]}, dones
    assert bytes(mem[DST_B:DST_B + NBYTES]) == src.tobytes(), "a drained message was written"
    assert bytes(mem[DST_C:DST_C + NBYTES]) == bytes(NBYTES), "the drained message's forward is not zeros"
    assert bytes(mem[DST_D:DST_D + NBYTES]) == src.tobytes(), "a message of another final was not processed"


class _Deposits:
    """The control plane around the deposit unit for PUT tests: command 0's geometry (``n_chunks`` chunks of
    ``n_blocks`` blocks at ``DST_A``, answered a cycle late), its arrivals, and PUTs of the block at ``SLOT_A``
    sent on port 0's VC 1 when a header credit is free (as the control plane grants them)."""

    def __init__(self, dp, n_chunks=2, n_blocks=4, tag=0x77):
        self.dp, self.n_chunks, self.n_blocks, self.tag = dp, n_chunks, n_blocks, tag
        self.lookups, self.arrivals = [], []

    def block_addr(self, chunk, key):
        return DST_A + (chunk * self.n_blocks + key) * NBYTES

    async def geometry(self, ctx):
        ctl = self.dp.ctl
        async for _, _, cmd, chunk, key in ctx.tick().sample(ctl.dep_geo_cmd, ctl.dep_geo_chunk,
                                                              ctl.dep_geo_block):
            self.lookups.append((cmd, chunk, key))
            ctx.set(ctl.dep_geo_addr, self.block_addr(chunk % self.n_chunks, key % self.n_blocks))
            ctx.set(ctl.dep_geo_nbytes, NBYTES)
            ctx.set(ctl.dep_geo_in_range, chunk < self.n_chunks and key < self.n_blocks)

    async def arrived(self, ctx):
        async for _, _, a in ctx.tick().sample(self.dp.ctl.arrived):
            if a.valid:
                self.arrivals.append((a.cmd, a.status))

    async def put(self, ctx, chunk, key, n=None, length=NBYTES):
        """Send one PUT; with ``n``, wait until ``n`` deposits have arrived."""
        port = self.dp.port[0]
        while ctx.get(port.hdr_credits[1]) == 0:
            await ctx.tick()
        hdr = {"dst": 0, "src": 0, "vc": 1, "tag": self.tag, "chunk": chunk, "phase": 0, "key": key,
               "length": length, "count": 1, "put": 1, "dtype": DType.INT32, "op": ReduceOp.SUM}
        await issue(ctx, port.send_job, {"fsm": 1, "cmd": 0, "buf": BUF, "beats": BEATS, "sram_addr": SLOT_A,
                                         "hdr": hdr}, [
            (port.reserve, {"valid": 1, "vc": 1, "beats": BEATS}),
            (port.order.payload, {"src": 0, "empty": 0}), (port.order.valid, 1)])
        for _ in range(0 if n is None else 400):
            if len(self.arrivals) >= n:
                return
            await ctx.tick()
        if n is not None:
            raise AssertionError(f"{len(self.arrivals)} deposits, expected {n}")

    async def load(self, ctx):
        """The block to send: SRC -> slot A."""
        ctx.set(self.dp.tx_lookahead, 64)
        await issue(ctx, self.dp.ctl.load_job, {"fsm": 1, "cmd": 0, "buf": BUF, "beats": BEATS,
                                                "sram_addr": SLOT_A, "addr": SRC, "nbytes": NBYTES, "slot": SLOT_A})
        for _ in range(50):
            await ctx.tick()

    async def settle(self, ctx, deposits):
        """Every landing credit back, the unit idle, ``deposits`` counted."""
        port = self.dp.port[0]
        for _ in range(20):
            await ctx.tick()
        assert ctx.get(port.beat_credits[1]) == CFG.landing_beats
        assert ctx.get(port.hdr_credits[1]) == CFG.landing_headers
        assert ctx.get(self.dp.ctl.dep_idle)
        assert ctx.get(self.dp.deposits) == deposits

    def run(self, top, mem, bench):
        sim = Simulator(top)
        sim.add_clock(1e-6)
        for proc in (*npu_memory(self.dp, mem), self.geometry, self.arrived):
            sim.add_process(proc)
        sim.add_testbench(bench)
        sim.run()

    def expected_memory(self, src, blocks, extra=()):
        """The memory after deposits of ``src`` into ``blocks`` ((chunk, key)), plus (address, bytes) of
        ``extra``."""
        want = bytearray(0x1000)
        want[SRC:SRC + NBYTES] = src.tobytes()
        for chunk, key in blocks:
            want[self.block_addr(chunk, key):self.block_addr(chunk, key) + NBYTES] = src.tobytes()
        for addr, blob in extra:
            want[addr:addr + len(blob)] = blob
        return want


def test_deposits_outside_the_command_are_drained_with_protocol_not_written():
    """PUT messages (the asynchronous all-to-all's) looped back into the deposit unit, which looks each one's
    (chunk, key) up in the command's geometry (played by the test: 2 chunks of 4 blocks). One in range is
    written to its block; one of a chunk past the last, one whose 12-bit key is past the blocks (and aliases
    block 1 in 10 bits) and one whose length disagrees are drained and counted PROTOCOL, with nothing written;
    a last one in range shows the unit goes on. Every landing credit comes back."""
    src, mem, top, dp = _looped_back(62)
    d = _Deposits(dp)

    async def bench(ctx):
        ctx.set(dp.spill_entries, 0)
        ctx.set(dp.ctl.cmd_tag[0], d.tag)
        ctx.set(dp.ctl.cmd_live, 1)
        await d.load(ctx)
        await d.put(ctx, 1, 2, 1)               # in range
        await d.put(ctx, 2, 0, 2)               # chunk 2 of 2
        await d.put(ctx, 0, 0x401, 3)           # key 1025 of 4 (1 in its low 10 bits)
        await d.put(ctx, 0, 1, 4, length=NBYTES - 4)    # the geometry says NBYTES
        await d.put(ctx, 1, 3, 5)               # in range again
        await d.settle(ctx, 5)

    d.run(top, mem, bench)
    assert d.arrivals == [(0, Status.OK), (0, Status.PROTOCOL), (0, Status.PROTOCOL), (0, Status.PROTOCOL),
                          (0, Status.OK)]
    assert (0, 0, 0x401) in d.lookups           # the whole key reached the lookup
    assert mem == d.expected_memory(src, ((1, 2), (1, 3))), "a deposit wrote outside the blocks it was allowed"


def test_spilled_deposits_outside_the_command_are_dropped_when_copied():
    """PUTs that come before their command (none live has their tag) wait in the landing channel; once it
    is full, the deposit unit spills the oldest to the spill window to make room. When the command is posted,
    the spilled ones are copied from the window to their blocks through the same range and length check as
    landed ones (the copy path, ``COPY_CHECK``): the spilled PUT of a chunk past the last is dropped with
    PROTOCOL and nothing written to the output, the other spilled one and the three still landed are
    written where they belong."""
    src, mem, top, dp = _looped_back(63)
    d = _Deposits(dp)
    spill_base = 0x800
    record = CFG.max_message_beats * BB

    async def bench(ctx):
        ctx.set(dp.spill_base, spill_base)
        ctx.set(dp.spill_entries, 2)
        await d.load(ctx)
        for chunk, key in ((2, 0), (0, 1), (0, 2), (1, 0), (1, 1)):     # the first: past the last chunk
            await d.put(ctx, chunk, key)
        for _ in range(60):
            await ctx.tick()
        assert d.arrivals == [] and ctx.get(dp.spills) == 2
        ctx.set(dp.ctl.cmd_tag[0], d.tag)
        ctx.set(dp.ctl.cmd_live, 1)
        for _ in range(400):
            if len(d.arrivals) == 5:
                break
            await ctx.tick()
        await d.settle(ctx, 5)

    d.run(top, mem, bench)
    assert sorted(s for _, s in d.arrivals) == [Status.OK] * 4 + [Status.PROTOCOL]
    assert {(c, k) for _, c, k in d.lookups} >= {(2, 0), (0, 1), (0, 2), (1, 0), (1, 1)}
    spilled = [(spill_base + e * record, src.tobytes()) for e in range(2)]     # the window holds both records
    assert mem == d.expected_memory(src, ((0, 1), (0, 2), (1, 0), (1, 1)), spilled), \
        "a spilled deposit was copied outside the blocks it was allowed"
