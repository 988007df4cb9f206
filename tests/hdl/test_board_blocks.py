"""The prototype board's blocks in Amaranth's simulator: UART, host bridge (frames, CRC, resynchronisation,
timeouts) and the on-chip AXI RAM (bursts, strobes, back-pressure, host word port)."""

import random

import pytest
from amaranth.hdl import Module

from syncfabric.hdl.common.axiram import AxiRam
from syncfabric.hdl.common.bridge import (
    SYNC_REQ, SYNC_RESP, BridgeProtocolError, Op, Status, UartBridge, crc8, decode_response, encode_request,
    response_length)
from syncfabric.hdl.common.uart import UartRx, UartTx, uart_bits, uart_divisor

from sim_helpers import run_sim, seed_for


# -- protocol (pure Python) -----------------------------------------------------------------------------------

def test_crc8_matches_the_standard_check_value():
    assert crc8(b"123456789") == 0xF4          # CRC-8 (poly 0x07, init 0): the catalogue's check value
    assert crc8(b"") == 0


def test_request_encoding_and_its_errors():
    frame = encode_request(Op.WRITE, 0x1000_0010, words=[0xDEADBEEF, 1])
    assert frame[0] == SYNC_REQ and frame[1] == Op.WRITE
    assert frame[2:6] == (0x1000_0010).to_bytes(4, "little") and frame[6] == 1
    assert frame[-1] == crc8(frame[1:-1]) and len(frame) == 8 + 8
    with pytest.raises(BridgeProtocolError, match="aligned"):
        encode_request(Op.READ, 0x2, 1)
    with pytest.raises(BridgeProtocolError, match="1..64"):
        encode_request(Op.READ, 0, 65)
    with pytest.raises(BridgeProtocolError, match="no data"):
        encode_request(Op.READ, 0, 1, [5])


def test_response_decoding_rejects_bad_frames():
    body = bytes([Status.OK]) + (7).to_bytes(4, "little")
    good = bytes([SYNC_RESP]) + body + bytes([crc8(body)])
    assert decode_response(good, Op.READ, 1) == (Status.OK, [7])
    with pytest.raises(BridgeProtocolError, match="CRC"):
        decode_response(good[:-1] + bytes([good[-1] ^ 1]), Op.READ, 1)
    with pytest.raises(BridgeProtocolError, match="expected"):
        decode_response(good, Op.READ, 2)
    assert response_length(Op.WRITE, 9) == 3 and response_length(Op.READ, 2, Status.CRC) == 3


def test_uart_divisor_refuses_inexact_rates():
    assert uart_divisor(50_000_000, 115200) == 434
    with pytest.raises(ValueError, match="at least 4"):
        uart_divisor(300_000, 115200)
    with pytest.raises(ValueError, match="off"):
        uart_divisor(1_000_000, 230400)


# -- UART -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_loopback_delivers_every_byte(divisor):
    rng = random.Random(seed_for(11))
    data = [rng.randrange(256) for _ in range(24)] + [0x00, 0xFF]
    m = Module()
    m.submodules.tx = tx = UartTx(divisor)
    m.submodules.rx = rx = UartRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    got = []

    async def bench(ctx):
        ctx.set(rx.o_stream.ready, 1)
        for b in data:
            ctx.set(tx.i_stream.payload, b)
            ctx.set(tx.i_stream.valid, 1)
            await ctx.tick().until(tx.i_stream.ready)
            ctx.set(tx.i_stream.valid, 0)
            for _ in range(10 * divisor + 2):
                await ctx.tick()
                if ctx.get(rx.o_stream.valid):
                    got.append(ctx.get(rx.o_stream.payload))
        for _ in range(12 * divisor):
            await ctx.tick()
            if ctx.get(rx.o_stream.valid):
                got.append(ctx.get(rx.o_stream.payload))
        assert ctx.get(rx.framing_errors) == 0

    run_sim(m, bench)
    assert got == data


def test_uart_rx_drops_a_byte_with_a_bad_stop_bit():
    div = 4
    dut = UartRx(div)
    got = []

    async def drive(ctx, bits):
        for level in bits:
            ctx.set(dut.rx, level)
            for _ in range(div):
                await ctx.tick()
                if ctx.get(dut.o_stream.valid):
                    got.append(ctx.get(dut.o_stream.payload))

    async def bench(ctx):
        ctx.set(dut.o_stream.ready, 1)
        await drive(ctx, [1, 1] + uart_bits(0x3C)[:-1] + [0] + [1] * 4)     # stop bit low
        await drive(ctx, uart_bits(0xA7) + [1] * 3)
        assert ctx.get(dut.framing_errors) == 1

    run_sim(dut, bench)
    assert got == [0xA7]


# -- bridge -----------------------------------------------------------------------------------------------------

class BridgeBench:
    """The bridge with a bus model: a dict of words answering after a random delay."""

    def __init__(self, max_words=8, timeout=64, seed=1):
        self.dut = UartBridge(max_words=max_words, timeout_cycles=timeout)
        self.mem = {}
        self.accesses = []
        self.rng = random.Random(seed)

    async def exchange(self, ctx, frame, expect_bytes, gap=0):
        """Send ``frame`` (with ``gap`` idle cycles between bytes) while serving the bus; collect the answer."""
        dut, out = self.dut, []
        pending = None                          # (cycles left, rdata) of the bus access in flight
        tx_bytes = list(frame)
        wait = 0
        ctx.set(dut.o_tx.ready, 1)
        for _ in range(20000):
            # host -> bridge
            if tx_bytes and wait == 0:
                ctx.set(dut.i_rx.payload, tx_bytes[0])
                ctx.set(dut.i_rx.valid, 1)
            else:
                ctx.set(dut.i_rx.valid, 0)
            # bus
            ack, rdata = 0, 0
            if pending is not None:
                if pending[0] == 0:
                    ack, rdata, pending = 1, pending[1], None
                else:
                    pending = (pending[0] - 1, pending[1])
            ctx.set(dut.bus.ack, ack)
            ctx.set(dut.bus.rdata, rdata)
            we, re, addr, wdata = (ctx.get(dut.bus.we), ctx.get(dut.bus.re), ctx.get(dut.bus.addr),
                                   ctx.get(dut.bus.wdata))
            sent = ctx.get(dut.i_rx.valid) and ctx.get(dut.i_rx.ready)
            if ctx.get(dut.o_tx.valid):
                out.append(ctx.get(dut.o_tx.payload))
            await ctx.tick()
            if we or re:
                assert pending is None and not ack, "a second access before the first was acknowledged"
                self.accesses.append(("w" if we else "r", addr, wdata if we else None))
                if we:
                    self.mem[addr] = wdata
                pending = (self.rng.randrange(3), self.mem.get(addr, addr ^ 0x5A5A5A5A))
            if sent:
                tx_bytes.pop(0)
                wait = gap
            elif wait:
                wait -= 1
            if not tx_bytes and len(out) >= expect_bytes:
                break
        ctx.set(dut.i_rx.valid, 0)
        return bytes(out)


def _bridge_run(bench_fn, **kw):
    tb = BridgeBench(**kw)

    async def bench(ctx):
        await bench_fn(tb, ctx)

    run_sim(tb.dut, bench)
    return tb


def test_bridge_executes_write_and_read_bursts():
    words = [0x11111111 * (i + 1) & 0xFFFFFFFF for i in range(8)]

    async def steps(tb, ctx):
        resp = await tb.exchange(ctx, encode_request(Op.WRITE, 0x2000_0100, words=words), 3, gap=2)
        assert decode_response(resp, Op.WRITE, 8) == (Status.OK, [])
        resp = await tb.exchange(ctx, encode_request(Op.READ, 0x2000_0104, 5), response_length(Op.READ, 5))
        assert decode_response(resp, Op.READ, 5) == (Status.OK, words[1:6])
        resp = await tb.exchange(ctx, encode_request(Op.READ, 0x0000_0040, 1), response_length(Op.READ, 1))
        assert decode_response(resp, Op.READ, 1) == (Status.OK, [0x40 ^ 0x5A5A5A5A])

    tb = _bridge_run(steps)
    assert [a[:2] for a in tb.accesses[:8]] == [("w", 0x2000_0100 + 4 * i) for i in range(8)]
    assert [a[1] for a in tb.accesses[8:13]] == [0x2000_0104 + 4 * i for i in range(5)]


def test_bridge_refuses_corrupted_and_oversized_requests_without_touching_the_bus():
    async def steps(tb, ctx):
        bad = bytearray(encode_request(Op.WRITE, 0x100, words=[1, 2]))
        bad[7] ^= 0x10                                      # a data bit flipped on the wire
        assert decode_response(await tb.exchange(ctx, bad, 3), Op.WRITE, 2)[0] == Status.CRC
        big = encode_request(Op.WRITE, 0x100, words=list(range(9)), max_words=64)
        assert decode_response(await tb.exchange(ctx, big, 3), Op.WRITE, 9)[0] == Status.LENGTH
        big_read = encode_request(Op.READ, 0x100, 20, max_words=64)
        assert decode_response(await tb.exchange(ctx, big_read, 3), Op.READ, 20)[0] == Status.LENGTH
        assert ctx.get(tb.dut.errors) == 3
        ok = encode_request(Op.READ, 0x100, 1)
        assert decode_response(await tb.exchange(ctx, ok, 7), Op.READ, 1)[0] == Status.OK

    tb = _bridge_run(steps)
    assert tb.accesses == [("r", 0x100, None)]


def test_bridge_resynchronises_after_noise_and_abandoned_frames():
    async def steps(tb, ctx):
        # noise (including a lone sync byte followed by an unknown opcode), then a good write
        frame = bytes([0x00, 0x5A, SYNC_REQ, 0x77, 0x13]) + encode_request(Op.WRITE, 0x80, words=[42])
        assert decode_response(await tb.exchange(ctx, frame, 3), Op.WRITE, 1) == (Status.OK, [])
        # half a frame, then silence longer than the timeout: the bridge must forget it
        half = encode_request(Op.WRITE, 0x84, words=[7])[:5]
        await tb.exchange(ctx, half, 0)
        for _ in range(100):
            await ctx.tick()
        resp = await tb.exchange(ctx, encode_request(Op.READ, 0x80, 1), 7)
        assert decode_response(resp, Op.READ, 1) == (Status.OK, [42])

    tb = _bridge_run(steps)
    assert ("w", 0x84, 7) not in tb.accesses


# -- AXI RAM ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data_width", [32, 128])
def test_axi_ram_bursts_strobes_backpressure_and_host_port(data_width):
    rng = random.Random(seed_for(5))
    size = 1024
    beat = data_width // 8
    dut = AxiRam(size, data_width=data_width, addr_width=16)
    model = bytearray(size)
    axi, host = dut.axi, dut.host

    async def host_access(ctx, addr, value=None):
        ctx.set(host.addr, addr)
        ctx.set(host.wdata, value or 0)
        ctx.set(host.we if value is not None else host.re, 1)
        await ctx.tick()
        ctx.set(host.we, 0)
        ctx.set(host.re, 0)
        for _ in range(50):
            if ctx.get(host.ack):
                data = ctx.get(host.rdata)
                await ctx.tick()
                return data
            await ctx.tick()
        raise AssertionError("the host port did not acknowledge")

    async def write_burst(ctx, beat_idx, beats):
        ctx.set(axi.awaddr, beat_idx * beat)
        ctx.set(axi.awlen, len(beats) - 1)
        ctx.set(axi.awburst, 1)
        ctx.set(axi.awvalid, 1)
        await ctx.tick().until(axi.awready)
        ctx.set(axi.awvalid, 0)
        for i, (data, strb) in enumerate(beats):
            while rng.random() < 0.3:
                ctx.set(axi.wvalid, 0)
                await ctx.tick()
            ctx.set(axi.wdata, data)
            ctx.set(axi.wstrb, strb)
            ctx.set(axi.wlast, i == len(beats) - 1)
            ctx.set(axi.wvalid, 1)
            await ctx.tick().until(axi.wready)
            for k in range(beat):
                if strb >> k & 1:
                    model[(beat_idx + i) * beat + k] = (data >> (8 * k)) & 0xFF
        ctx.set(axi.wvalid, 0)
        ctx.set(axi.bready, 1)
        await ctx.tick().until(axi.bvalid)
        ctx.set(axi.bready, 0)

    async def read_burst(ctx, beat_idx, n):
        ctx.set(axi.araddr, beat_idx * beat)
        ctx.set(axi.arlen, n - 1)
        ctx.set(axi.arburst, 1)
        ctx.set(axi.arvalid, 1)
        await ctx.tick().until(axi.arready)
        ctx.set(axi.arvalid, 0)
        out = []
        while len(out) < n:
            ready = rng.random() < 0.6
            ctx.set(axi.rready, ready)
            valid, data, last = ctx.get(axi.rvalid), ctx.get(axi.rdata), ctx.get(axi.rlast)
            await ctx.tick()
            if ready and valid:
                out.append(data)
                assert last == (len(out) == n)
        ctx.set(axi.rready, 0)
        return out

    async def bench(ctx):
        depth = size // beat
        for _ in range(12):
            start = rng.randrange(depth)
            n = rng.randint(1, min(8, depth - start))
            beats = [(rng.getrandbits(data_width), rng.getrandbits(beat)) for _ in range(n)]
            await write_burst(ctx, start, beats)
            addr = rng.randrange(size // 4) * 4
            value = rng.getrandbits(32)
            await host_access(ctx, addr, value)
            model[addr:addr + 4] = value.to_bytes(4, "little")
            start = rng.randrange(depth)
            n = rng.randint(1, min(8, depth - start))
            got = await read_burst(ctx, start, n)
            want = [int.from_bytes(model[(start + i) * beat:(start + i + 1) * beat], "little") for i in range(n)]
            assert got == want
            addr = rng.randrange(size // 4) * 4
            assert await host_access(ctx, addr) == int.from_bytes(model[addr:addr + 4], "little")

    run_sim(dut, bench)
