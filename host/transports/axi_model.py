"""An AXI4 slave RAM for Amaranth's simulator, with seeded random stalls, latency and error injection.

Usage::

    ram = AxiRamModel(dut.axi, size=1 << 16, seed=seed, latency=8, ready_prob=0.7, valid_prob=0.8)
    ram.write(0x100, b"...")              # back door
    ram.add_to(sim)                       # background processes serving AR/R and AW/W/B
    sim.run()
    assert ram.read(0x100, 4) == ...

``bus`` is the master-side interface of the design (:class:`~syncfabric.hdl.common.axi.AXI4Signature`, or only
its read or write half): the model drives its ``*ready``, ``r*`` and ``b*`` members and samples the rest at the
clock edge, exactly as the design sees them. It serves INCR bursts of full beats in order (one ID), checks AXI
rules on the way (stable payload while VALID waits for READY, ``AxSIZE`` = data width, no 4 KiB crossing, WLAST)
and the master's own limits if given (``max_burst`` beats per burst; ``max_reads`` read bursts accepted and not
fully returned, ``max_writes`` write bursts accepted and not answered: the model never throttles to meet them,
so a master exceeding them is caught) and raises ``AssertionError`` on a violation, which stops
``sim.run()``. A beat touching ``error_ranges`` (a list of ``(start, end)`` byte ranges, end exclusive) is
answered SLVERR: a read beat still returns the memory's bytes, a written beat is dropped.

Timing: RVALID of a burst's first beat (BVALID of its response) rises at the earliest in the cycle right after
the address handshake (after the last W beat) plus ``latency`` (``write_latency``) plus a random ``0..jitter``
cycles; after that, every cycle has a ``valid_prob`` chance to present the next beat, and
ARREADY/AWREADY/WREADY are high with probability ``ready_prob`` in each cycle. With the defaults (no latency,
probabilities 1) the RAM moves one beat per cycle on every channel.

``npu_share`` (0 by default, settable at any time) models the NPU's own compute competing for the memory port:
in each cycle every channel is taken by the NPU with that probability (its READY and VALID stay low for the
engine), so the engine gets about ``1 - npu_share`` of the port's beats.
"""

import random
from collections import deque, namedtuple

from ...hdl.common.axi import AxiBurst, AxiResp

__all__ = ["AxiRamModel", "Burst"]

#: One accepted burst: byte address, beats, and the model's cycle count at its address handshake.
Burst = namedtuple("Burst", "addr beats cycle")


class AxiRamModel:
    """Byte-addressed RAM of ``size`` bytes behind an AXI4 slave port (see the module docstring).

    Statistics after a run: ``reads``/``writes`` (a :class:`Burst` per burst, in handshake order),
    ``max_reads_in_flight`` (read bursts accepted and not fully returned), ``max_writes_in_flight`` (write bursts
    accepted and not yet answered by B), ``r_stalls``/``b_stalls`` (cycles the model offered a beat that the
    design did not take) and ``cycles``.
    """

    def __init__(self, bus, *, size=1 << 16, seed=0, latency=0, write_latency=None, jitter=0, ready_prob=1.0,
                 valid_prob=1.0, error_ranges=(), max_burst=256, max_reads=None, max_writes=None):
        self.bus = bus
        self.mem = bytearray(size)
        self.rng = random.Random(seed)
        self.latency = latency
        self.write_latency = latency if write_latency is None else write_latency
        self.jitter = jitter
        self.ready_prob = ready_prob
        self.valid_prob = valid_prob
        self.error_ranges = list(error_ranges)
        self.max_burst = max_burst
        self.max_reads = max_reads
        self.max_writes = max_writes
        members = bus.signature.members
        self.has_read = "araddr" in members
        self.has_write = "awaddr" in members
        data_width = len(bus.rdata) if self.has_read else len(bus.wdata)
        self.beat_bytes = data_width // 8
        self.size_code = self.beat_bytes.bit_length() - 1
        self.reads, self.writes = [], []
        self.max_reads_in_flight = self.max_writes_in_flight = 0
        self.r_stalls = self.b_stalls = 0
        self.cycles = 0
        self.npu_share = 0.0

    # ---- back door ----------------------------------------------------------------------------------------
    def read(self, addr, length):
        """``length`` bytes at ``addr``."""
        self._check_range(addr, length)
        return bytes(self.mem[addr:addr + length])

    def write(self, addr, data):
        """Store ``data`` at ``addr``."""
        self._check_range(addr, len(data))
        self.mem[addr:addr + len(data)] = data

    def _check_range(self, addr, length):
        assert 0 <= addr and addr + length <= len(self.mem), \
            f"access {addr:#x}+{length} outside the model's {len(self.mem):#x} bytes"

    def is_error(self, addr, length):
        """True if bytes ``[addr, addr + length)`` touch an error range."""
        return any(addr < end and start < addr + length for start, end in self.error_ranges)

    def add_to(self, sim):
        """Add the model's processes (background: they never keep ``sim.run()`` going) to ``sim``."""
        if self.has_read:
            sim.add_process(self._read_process)
        if self.has_write:
            sim.add_process(self._write_process)

    # ---- protocol helpers ---------------------------------------------------------------------------------
    def _npu_takes(self):
        return self.npu_share > 0 and self.rng.random() < self.npu_share

    def _ready(self):
        return not self._npu_takes() and (self.ready_prob >= 1.0 or self.rng.random() < self.ready_prob)

    def _offer(self):
        return not self._npu_takes() and (self.valid_prob >= 1.0 or self.rng.random() < self.valid_prob)

    def _check_burst(self, kind, addr, length, size, burst):
        beats = length + 1
        w = self.beat_bytes
        assert burst == AxiBurst.INCR, f"{kind} burst type {burst} at {addr:#x}: only INCR is modelled"
        assert size == self.size_code, f"{kind} size {size} at {addr:#x}: expected full beats ({self.size_code})"
        assert addr % w == 0, f"{kind} address {addr:#x} not beat-aligned"
        assert beats <= self.max_burst, f"{kind} burst of {beats} beats at {addr:#x} > {self.max_burst}"
        assert addr // 4096 == (addr + beats * w - 1) // 4096, \
            f"{kind} burst {addr:#x}+{beats} beats crosses a 4 KiB boundary"
        self._check_range(addr, beats * w)
        return beats

    @staticmethod
    def _check_stable(kind, pending, valid, payload):
        """AXI: once VALID is high it stays high, with the same payload, until READY."""
        if pending is not None:
            assert valid, f"{kind}VALID dropped before its handshake"
            assert payload == pending, f"{kind} payload changed while waiting for READY: {pending} -> {payload}"

    # ---- read channels ------------------------------------------------------------------------------------
    async def _read_process(self, ctx):
        bus, w = self.bus, self.beat_bytes
        beats = deque()             # (earliest cycle, data, resp, last) of accepted bursts, in order
        bursts_in_flight = 0
        arready = self._ready()
        rbeat = None                # beat on R
        pending = None              # AR payload waiting for ARREADY
        cycle = 0
        ctx.set(bus.arready, arready)
        async for _, rst, arvalid, *ar, rready in ctx.tick().sample(
                bus.arvalid, bus.araddr, bus.arlen, bus.arsize, bus.arburst, bus.rready):
            cycle += 1
            self.cycles = max(self.cycles, cycle)
            if rst:
                beats.clear()
                rbeat = pending = None
                bursts_in_flight = 0
                ctx.set(bus.rvalid, 0)
                continue
            self._check_stable("AR", pending, arvalid, tuple(ar))
            pending = tuple(ar) if arvalid and not arready else None
            if arvalid and arready:
                addr, length, size, burst = ar
                n = self._check_burst("read", addr, length, size, burst)
                self.reads.append(Burst(addr, n, cycle))
                bursts_in_flight += 1
                self.max_reads_in_flight = max(self.max_reads_in_flight, bursts_in_flight)
                if self.max_reads is not None:
                    assert bursts_in_flight <= self.max_reads, f"{bursts_in_flight} read bursts in flight"
                start = cycle + self.latency + (self.rng.randint(0, self.jitter) if self.jitter else 0)
                for k in range(n):
                    a = addr + k * w
                    resp = AxiResp.SLVERR if self.is_error(a, w) else AxiResp.OKAY
                    beats.append((start, int.from_bytes(self.mem[a:a + w], "little"), resp, k == n - 1))
            if rbeat is not None:
                if rready:
                    if rbeat[3]:
                        bursts_in_flight -= 1
                    rbeat = None
                else:
                    self.r_stalls += 1
            if rbeat is None and beats and beats[0][0] <= cycle and self._offer():
                rbeat = beats.popleft()
            arready = self._ready()
            ctx.set(bus.arready, arready)
            ctx.set(bus.rvalid, rbeat is not None)
            if rbeat is not None:
                ctx.set(bus.rdata, rbeat[1])
                ctx.set(bus.rresp, rbeat[2])
                ctx.set(bus.rlast, rbeat[3])
                ctx.set(bus.rid, 0)

    # ---- write channels -----------------------------------------------------------------------------------
    async def _write_process(self, ctx):
        bus, w = self.bus, self.beat_bytes
        bursts = deque()            # [addr, beats, beats written, resp] of accepted AW bursts, in order
        responses = deque()         # (earliest cycle, resp)
        awready = self._ready()
        wready = False
        bresp = None                # response on B
        pending_aw = pending_w = None
        awaiting_b = 0
        cycle = 0
        ctx.set(bus.awready, awready)
        async for _, rst, awvalid, *aw, wvalid, wdata, wstrb, wlast, bready in ctx.tick().sample(
                bus.awvalid, bus.awaddr, bus.awlen, bus.awsize, bus.awburst,
                bus.wvalid, bus.wdata, bus.wstrb, bus.wlast, bus.bready):
            cycle += 1
            self.cycles = max(self.cycles, cycle)
            if rst:
                bursts.clear()
                responses.clear()
                bresp = pending_aw = pending_w = None
                awaiting_b = 0
                ctx.set(bus.wready, 0)
                ctx.set(bus.bvalid, 0)
                continue
            self._check_stable("AW", pending_aw, awvalid, tuple(aw))
            pending_aw = tuple(aw) if awvalid and not awready else None
            self._check_stable("W", pending_w, wvalid, (wdata, wstrb, wlast))
            pending_w = (wdata, wstrb, wlast) if wvalid and not wready else None
            if awvalid and awready:
                addr, length, size, burst = aw
                n = self._check_burst("write", addr, length, size, burst)
                self.writes.append(Burst(addr, n, cycle))
                bursts.append([addr, n, 0, AxiResp.OKAY])
                awaiting_b += 1
                self.max_writes_in_flight = max(self.max_writes_in_flight, awaiting_b)
                if self.max_writes is not None:
                    assert awaiting_b <= self.max_writes, f"{awaiting_b} write bursts in flight"
            if wvalid and wready:
                head = bursts[0]
                a = head[0] + head[2] * w
                head[2] += 1
                assert bool(wlast) == (head[2] == head[1]), \
                    f"WLAST={wlast} on beat {head[2]} of a {head[1]}-beat burst at {head[0]:#x}"
                if self.is_error(a, w):
                    head[3] = AxiResp.SLVERR
                else:
                    raw = wdata.to_bytes(w, "little")
                    for j in range(w):
                        if wstrb >> j & 1:
                            self.mem[a + j] = raw[j]
                if head[2] == head[1]:
                    bursts.popleft()
                    delay = self.write_latency + (self.rng.randint(0, self.jitter) if self.jitter else 0)
                    responses.append((cycle + delay, head[3]))
            if bresp is not None:
                if bready:
                    bresp = None
                    awaiting_b -= 1
                else:
                    self.b_stalls += 1
            if bresp is None and responses and responses[0][0] <= cycle and self._offer():
                bresp = responses.popleft()[1]
            awready = self._ready()
            # W is taken only for a burst whose address is known (AXI lets a slave wait for AW first).
            wready = bool(bursts) and self._ready()
            ctx.set(bus.awready, awready)
            ctx.set(bus.wready, wready)
            ctx.set(bus.bvalid, bresp is not None)
            if bresp is not None:
                ctx.set(bus.bresp, bresp)
                ctx.set(bus.bid, 0)
