"""On-chip RAM with an AXI4 slave port (the NPU memory of a prototype board, or of a simulated system) and a
32-bit host word port.

:class:`AxiRam` holds ``size_bytes`` in one memory of ``data_width``-bit words with a read port and a write
port with byte enables (one simple dual-port block RAM on an FPGA). AXI reads and writes run independently:

* reads: ``INCR`` and ``FIXED`` bursts of full-width beats (``arsize`` = log2 of the data width in bytes, as
  the engine's DMA issues them), one beat per cycle after a one-cycle fetch, holding ``rdata`` under
  back-pressure; ``WRAP`` bursts are answered as ``INCR``;
* writes: ``wstrb`` selects the bytes written; one ``B`` response per burst, ``OKAY``.

Addresses wrap modulo ``size_bytes`` (a power of two). The ``host`` port (a
:class:`~syncfabric.hdl.common.csr.CsrSignature` served by the RAM, byte addresses, one 32-bit word per
access) is how the host bridge reads and writes the NPU memory; a host access waits for the AXI side of its
direction to be between bursts, then takes one cycle (write) or two (read).

Simulation options (all off by default; with any of them on, the RAM is the *timed* variant, the HDL
counterpart of :class:`syncfabric.host.transports.axi_model.AxiRamModel` for simulations that should not run Python on
every clock edge):

* ``read_latency`` / ``write_latency``: the first R beat of a burst is presented at the earliest
  ``2 + read_latency + j`` cycles after its AR handshake; a B response at the earliest
  ``1 + write_latency + j`` cycles after the burst's last W beat (``j`` pseudo-random in ``0..jitter``);
* ``max_reads`` read bursts (``max_writes`` write bursts) accepted and not yet finished: their latencies run
  concurrently, so latency does not serialise bursts; AR (AW) is not ready while that many are pending;
* ``ready_stall`` / ``valid_stall``: probabilities (quantised to 1/256) that ARREADY, AWREADY, WREADY are low
  in a cycle, and that a beat due on R or B is withheld for a cycle (VALID, once high, stays high until its
  handshake); each channel has its own LFSR, seeded from ``seed``, so RAMs with different seeds differ
  (``seed_port=True`` adds an input ``lfsr_seed`` mixed into the seeds at reset: instances of one converted
  module then differ too); ``stall_port=True`` makes both probabilities inputs instead, ``stall_ready`` and
  ``stall_valid`` (0..256, in 1/256: the probability that a ready or a valid is withheld), so one build serves
  any stall setting;
* ``error_ranges``: ``(start, end)`` byte ranges (end exclusive): a beat touching one is answered SLVERR (a
  read beat still returns the memory's bytes, a written beat is dropped, the burst's B is SLVERR).

In the timed variant a host access takes its own memory ports (it never waits for AXI): two cycles from the
request to ``ack``. The memory is the Verilog array ``mem`` of this module, which is what
:class:`syncfabric.host.transports.backdoor.MemoryBackdoor` reads and writes from a cocotb testbench.

``storage="verilog"`` (simulation builds of large memories) keeps the words in an instance ``array`` of the
hand-written Verilog module :data:`RAM_ARRAY_MODULE` (:data:`RAM_ARRAY_VERILOG`, appended to the design's
Verilog; the back door's array is then ``array.mem``) instead of an Amaranth ``Memory``: the same ports and
timing, but Amaranth and yosys never see the rows. An Amaranth memory's zero initialiser is one constant of
``depth x width`` bits in the RTLIL, so a 16 MiB memory took yosys over half an hour to convert (the Python
process up to 15 GB); the Verilog module's size does not depend on its depth.
"""

from amaranth.hdl import Cat, ClockSignal, Const, Elaboratable, Instance, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, AxiBurst, AxiResp
from .csr import CsrSignature

__all__ = ["AxiRam", "Lfsr", "RamArray", "RAM_ARRAY_MODULE", "RAM_ARRAY_VERILOG", "BD_FILE_BYTES", "stall_threshold"]

#: Verilog module name of :class:`RamArray`.
RAM_ARRAY_MODULE = "sf_ram_array"

#: Bytes of :data:`RAM_ARRAY_VERILOG`'s ``bd_file`` register: the longest path of a bulk back-door file.
BD_FILE_BYTES = 256

#: :class:`RamArray`'s Verilog: ``DEPTH`` words of ``WIDTH`` bits, two read ports (registered, read-first:
#: a read in the cycle of a write to its word returns the old word, as an Amaranth read port not transparent
#: for the write port) and two write ports with byte enables (the second wins a same-word same-byte
#: collision), zero at time 0 by one loop. ``mem`` is public for Verilator's VPI (the back door). Bulk back
#: door: on a rising edge of ``bd_strobe`` (a variable the testbench sets, not a port: no clock edge, no
#: simulated cycle) words ``bd_lo..bd_hi`` are read from (``bd_dump`` 0, ``$readmemh``) or written to
#: (``bd_dump`` 1, ``$writememh``) the file whose path ``bd_file`` holds (ASCII, right-aligned), so a testbench
#: moves a buffer with a handful of VPI accesses instead of one handle per word
#: (:class:`syncfabric.host.transports.backdoor.MemoryBackdoor`).
RAM_ARRAY_VERILOG = f"""module {RAM_ARRAY_MODULE} #(parameter WIDTH = 32, parameter DEPTH = 2, parameter ABITS = 1) (
  input clk,
  input r0_en, input [ABITS-1:0] r0_addr, output reg [WIDTH-1:0] r0_data,
  input r1_en, input [ABITS-1:0] r1_addr, output reg [WIDTH-1:0] r1_data,
  input [WIDTH/8-1:0] w0_en, input [ABITS-1:0] w0_addr, input [WIDTH-1:0] w0_data,
  input [WIDTH/8-1:0] w1_en, input [ABITS-1:0] w1_addr, input [WIDTH-1:0] w1_data
);
  reg [WIDTH-1:0] mem [0:DEPTH-1] /*verilator public_flat_rw*/;
  reg [8*{BD_FILE_BYTES}-1:0] bd_file /*verilator public_flat_rw*/;
  reg [31:0] bd_lo /*verilator public_flat_rw*/;
  reg [31:0] bd_hi /*verilator public_flat_rw*/;
  reg bd_dump /*verilator public_flat_rw*/;
  reg bd_strobe /*verilator public_flat_rw*/;
  integer row;
  initial begin
    for (row = 0; row < DEPTH; row = row + 1) mem[row] = 0;
    r0_data = 0;
    r1_data = 0;
    bd_strobe = 0;
  end
  always @(posedge bd_strobe) begin
    if (bd_dump) $writememh(bd_file, mem, bd_lo, bd_hi);
    else $readmemh(bd_file, mem, bd_lo, bd_hi);
  end
  // byte enables as bit masks: a write is one masked word update (no per-byte loop on every edge)
  wire [WIDTH-1:0] m0, m1;
  genvar lane;
  generate for (lane = 0; lane < WIDTH / 8; lane = lane + 1) begin : lanes
    assign m0[8 * lane +: 8] = {{8{{w0_en[lane]}}}};
    assign m1[8 * lane +: 8] = {{8{{w1_en[lane]}}}};
  end endgenerate
  wire same = |w0_en && |w1_en && w0_addr == w1_addr;
  wire [WIDTH-1:0] w0_word = (mem[w0_addr] & ~m0) | (w0_data & m0);
  always @(posedge clk) begin
    if (r0_en) r0_data <= mem[r0_addr];
    if (r1_en) r1_data <= mem[r1_addr];
    if (|w0_en && !same) mem[w0_addr] <= w0_word;
    if (|w1_en) mem[w1_addr] <= ((same ? w0_word : mem[w1_addr]) & ~m1) | (w1_data & m1);
  end
endmodule
"""


class _Port:
    """A port of :class:`RamArray`: the signals of an Amaranth memory port that :class:`AxiRam` drives."""

    def __init__(self, abits, width, write):
        self.addr = Signal(abits)
        self.data = Signal(width)
        # as an Amaranth port: a read port is enabled unless driven low, a write port writes nothing
        self.en = Signal(width // 8) if write else Signal(init=1)


class RamArray(Elaboratable):
    """``depth`` words of ``width`` bits as an instance of :data:`RAM_ARRAY_MODULE` (whose Verilog the design
    must include), with up to two read ports and two write ports (byte granularity) handed out like an
    Amaranth ``Memory``'s; ports not taken are tied off."""

    def __init__(self, width, depth):
        self.width, self.depth = width, depth
        self.abits = max(1, (depth - 1).bit_length())
        self._reads = [_Port(self.abits, width, False) for _ in range(2)]
        self._writes = [_Port(self.abits, width, True) for _ in range(2)]
        self._taken = {"r": 0, "w": 0}

    def _take(self, kind, ports):
        if self._taken[kind] == len(ports):
            raise ValueError(f"RamArray has {len(ports)} {'read' if kind == 'r' else 'write'} ports")
        self._taken[kind] += 1
        return ports[self._taken[kind] - 1]

    def read_port(self):
        return self._take("r", self._reads)

    def write_port(self, granularity=8):
        if granularity != 8:
            raise ValueError(f"RamArray writes bytes (granularity 8), not {granularity} bits")
        return self._take("w", self._writes)

    def elaborate(self, platform):
        # the instance itself is the fragment: the words are then ``<this submodule's name>.mem``
        ports = {}
        for k, port in enumerate(self._reads):
            taken = k < self._taken["r"]
            ports[f"i_r{k}_en"] = port.en if taken else Const(0, 1)
            ports[f"i_r{k}_addr"] = port.addr
            if taken:
                ports[f"o_r{k}_data"] = port.data
        for k, port in enumerate(self._writes):
            taken = k < self._taken["w"]
            ports[f"i_w{k}_en"] = port.en if taken else Const(0, self.width // 8)
            ports[f"i_w{k}_addr"] = port.addr
            ports[f"i_w{k}_data"] = port.data
        return Instance(RAM_ARRAY_MODULE, p_WIDTH=self.width, p_DEPTH=self.depth, p_ABITS=self.abits,
                        i_clk=ClockSignal("sync"), **ports)

_TAPS = 0xB400      # x^16 + x^14 + x^13 + x^11 + 1, a maximal-length 16-bit Galois LFSR


def stall_threshold(prob):
    """The :class:`Lfsr` ``threshold`` (0..256, in 1/256) of stall probability ``prob``."""
    return min(256, max(0, round(prob * 256)))


def _lfsr_next(state, steps):
    """The state ``steps`` steps after ``state``, as one XOR of state bits per bit (the LFSR is linear)."""
    def step(x):
        return (x >> 1) ^ (_TAPS if x & 1 else 0)

    images = []
    for i in range(16):
        x = 1 << i
        for _ in range(steps):
            x = step(x)
        images.append(x)
    bits = []
    for j in range(16):
        taps = [state[i] for i in range(16) if images[i] >> j & 1]
        bit = taps[0]
        for t in taps[1:]:
            bit = bit ^ t
        bits.append(bit)
    return Cat(*bits)


class Lfsr(wiring.Component):
    """A 16-bit Galois LFSR advanced ``steps`` (default 8) steps per cycle (so ``value``'s low ``steps`` bits are
    fresh every cycle).

    ``go`` is high in a cycle with probability ``1 - threshold / 256`` (``threshold``, an input of 0..256: the
    low byte against it; 0 never stalls); ``value`` is the state. ``seed`` is any integer; the state after reset is
    ``seed ^ salt`` (folded to non-zero), loaded in the first cycle, so one module instantiated several times
    runs a different sequence per instance when each drives its own ``salt``.
    """

    salt: In(16)
    threshold: In(9)
    value: Out(16)
    go: Out(1)

    def __init__(self, seed, steps=8):
        self.seed = (seed ^ (seed >> 16)) & 0xFFFF or 0xACE1
        self.steps = steps
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        state = Signal(16)      # 0 (never reached by stepping): not seeded yet
        seeded = Signal(16)
        m.d.comb += seeded.eq(self.seed ^ self.salt)
        with m.If(state == 0):
            m.d.sync += state.eq(Mux(seeded == 0, 0xACE1, seeded))
        with m.Else():
            m.d.sync += state.eq(_lfsr_next(state, self.steps))
        m.d.comb += [self.value.eq(state), self.go.eq(state[:8] >= self.threshold)]
        return m


class AxiRam(wiring.Component):
    """``size_bytes`` (a power of two) of RAM behind an AXI4 slave port ``axi`` (``addr_width``,
    ``data_width`` bits, ``id_width``) and a host word port ``host``; the keyword options after ``id_width``
    are the simulation options of the module docstring."""

    def __init__(self, size_bytes, *, data_width=128, addr_width=32, id_width=1, read_latency=0,
                 write_latency=0, jitter=0, ready_stall=0.0, valid_stall=0.0, seed=1, error_ranges=(),
                 max_reads=1, max_writes=1, seed_port=False, stall_port=False, storage="memory"):
        if storage not in ("memory", "verilog"):
            raise ValueError(f"storage must be 'memory' (an Amaranth Memory) or 'verilog' (RamArray), got "
                             f"{storage!r}")
        self.storage = storage
        if data_width < 32 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two >= 32, got {data_width}")
        beat = data_width // 8
        if size_bytes < beat or size_bytes & (size_bytes - 1):
            raise ValueError(f"size_bytes must be a power of two >= {beat}, got {size_bytes}")
        if size_bytes > 1 << addr_width:
            raise ValueError(f"{size_bytes} bytes do not fit {addr_width} address bits")
        if min(read_latency, write_latency, jitter, max_reads - 1, max_writes - 1) < 0:
            raise ValueError("latencies and jitter must be >= 0, max_reads and max_writes >= 1")
        if not (0 <= ready_stall < 1 and 0 <= valid_stall < 1):
            raise ValueError("stall probabilities must be in [0, 1)")
        for start, end in error_ranges:
            if not 0 <= start < end <= size_bytes:
                raise ValueError(f"error range ({start:#x}, {end:#x}) outside {size_bytes:#x} bytes")
        self.size_bytes, self.data_width, self.id_width = size_bytes, data_width, id_width
        self.read_latency, self.write_latency, self.jitter = read_latency, write_latency, jitter
        self.ready_stall, self.valid_stall, self.seed = ready_stall, valid_stall, seed
        self.error_ranges = [tuple(r) for r in error_ranges]
        self.max_reads, self.max_writes = max_reads, max_writes
        if stall_port and (ready_stall or valid_stall):
            raise ValueError("with stall_port the stall probabilities are inputs (stall_ready, stall_valid), "
                             "not ready_stall/valid_stall")
        self.timed = bool(read_latency or write_latency or jitter or ready_stall or valid_stall or error_ranges
                          or max_reads > 1 or max_writes > 1 or stall_port)
        self.host_addr_width = max(3, (size_bytes - 1).bit_length())
        self._lw = beat.bit_length() - 1                                # log2 bytes per beat
        self._ib = max(1, (size_bytes // beat - 1).bit_length())        # beat index bits
        self.seed_port, self.stall_port = seed_port, stall_port
        super().__init__(self.signature_of(size_bytes, data_width=data_width, addr_width=addr_width,
                                           id_width=id_width, seed_port=seed_port, stall_port=stall_port))

    @staticmethod
    def signature_of(size_bytes, *, data_width=128, addr_width=32, id_width=1, seed_port=False,
                     stall_port=False):
        """The signature of an :class:`AxiRam` of these parameters (for an ``Instance`` of a separately
        converted RAM, as the system top makes)."""
        members = {
            "axi": In(AXI4Signature(addr_width, data_width, id_width)),
            "host": Out(CsrSignature(max(3, (size_bytes - 1).bit_length()))),
        }
        if seed_port:
            members["lfsr_seed"] = In(16)
        if stall_port:
            members["stall_ready"] = In(9)
            members["stall_valid"] = In(9)
        return wiring.Signature(members)

    def elaborate(self, platform):
        m = Module()
        depth = self.size_bytes // (self.data_width // 8)
        if self.storage == "verilog":
            m.submodules.array = mem = RamArray(self.data_width, depth)
        else:
            m.submodules.mem = mem = Memory(shape=self.data_width, depth=depth, init=[])
        wp = mem.write_port(granularity=8)
        rp = mem.read_port()
        if self.timed:
            now = Signal(32)        # cycle count: due times of bursts and responses
            m.d.sync += now.eq(now + 1)
            self._timed_reads(m, rp, now)
            self._timed_writes(m, wp, now)
            host_wp = mem.write_port(granularity=8)
            host_rp = mem.read_port()
            self._timed_host(m, host_rp, host_wp)
        else:
            self._plain(m, rp, wp)
        return m

    def _beat_index(self, addr):
        return addr[self._lw:self._lw + self._ib] if self.size_bytes > self.data_width // 8 else Const(0, 1)

    # -- the board's RAM: one burst per direction, no added latency ------------------------------------
    def _plain(self, m, rp, wp):
        beat, lw, ib = self.data_width // 8, self._lw, self._ib
        axi, host = self.axi, self.host

        # host accesses: remembered until the AXI side of their direction is idle
        h_rd, h_wr = Signal(), Signal()
        h_addr, h_data = Signal(self.host_addr_width), Signal(32)
        with m.If(host.re | host.we):
            m.d.sync += [h_addr.eq(host.addr), h_data.eq(host.wdata), h_rd.eq(host.re), h_wr.eq(host.we)]
        h_beat = self._beat_index(h_addr)
        h_lane = h_addr[2:lw]
        h_ack_rd = Signal()
        m.d.sync += h_ack_rd.eq(0)
        m.d.comb += host.ack.eq(0)

        r_idx, r_left, r_id, r_incr = Signal(ib), Signal(8), Signal.like(axi.arid), Signal()
        m.d.comb += [axi.rid.eq(r_id), axi.rresp.eq(AxiResp.OKAY), axi.rdata.eq(rp.data)]
        with m.FSM(name="rd"):
            with m.State("IDLE"):
                m.d.comb += rp.en.eq(1)
                with m.If(h_rd):
                    m.d.comb += rp.addr.eq(h_beat)
                    m.d.sync += [h_rd.eq(0), h_ack_rd.eq(1)]
                with m.Else():
                    m.d.comb += axi.arready.eq(1)
                    with m.If(axi.arvalid):
                        idx = self._beat_index(axi.araddr)
                        m.d.comb += rp.addr.eq(idx)
                        m.d.sync += [r_idx.eq(idx), r_left.eq(axi.arlen), r_id.eq(axi.arid),
                                     r_incr.eq(axi.arburst != AxiBurst.FIXED)]
                        m.next = "SEND"
            with m.State("SEND"):
                # rp.data is mem[r_idx]; on a handshake fetch the next beat, otherwise hold
                m.d.comb += [axi.rvalid.eq(1), axi.rlast.eq(r_left == 0)]
                nxt = r_idx + r_incr
                m.d.comb += [rp.addr.eq(nxt), rp.en.eq(axi.rready)]
                with m.If(axi.rready):
                    m.d.sync += [r_idx.eq(nxt), r_left.eq(r_left - 1)]
                    with m.If(r_left == 0):
                        m.next = "IDLE"
        with m.If(h_ack_rd):
            m.d.comb += [host.ack.eq(1), host.rdata.eq(rp.data.word_select(h_lane, 32) if lw > 2 else rp.data)]

        w_idx, w_id, w_incr = Signal(ib), Signal.like(axi.awid), Signal()
        m.d.comb += [axi.bid.eq(w_id), axi.bresp.eq(AxiResp.OKAY)]
        with m.FSM(name="wr"):
            with m.State("IDLE"):
                with m.If(h_wr):
                    lanes = beat // 4
                    m.d.comb += [wp.addr.eq(h_beat), wp.data.eq(Cat(*[h_data] * lanes)),
                                 wp.en.eq(0xF << (h_lane * 4) if lw > 2 else 0xF), host.ack.eq(1)]
                    m.d.sync += h_wr.eq(0)
                with m.Else():
                    m.d.comb += axi.awready.eq(1)
                    with m.If(axi.awvalid):
                        m.d.sync += [w_idx.eq(self._beat_index(axi.awaddr)), w_id.eq(axi.awid),
                                     w_incr.eq(axi.awburst != AxiBurst.FIXED)]
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [axi.wready.eq(1), wp.addr.eq(w_idx), wp.data.eq(axi.wdata)]
                with m.If(axi.wvalid):
                    m.d.comb += wp.en.eq(axi.wstrb)
                    m.d.sync += w_idx.eq(w_idx + w_incr)
                    with m.If(axi.wlast):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += axi.bvalid.eq(1)
                with m.If(axi.bready):
                    m.next = "IDLE"

    # -- the timed variant: latency, jitter, stalls, errors, several bursts in flight -------------------
    def _lfsr(self, m, name, stall):
        salt = {"ar": 0x1F35, "aw": 0x2B67, "w": 0x3C89, "r": 0x4DAB, "b": 0x5ECD, "jr": 0x6F01, "jw": 0x7123}
        m.submodules[f"lfsr_{name}"] = lfsr = Lfsr(self.seed * 0x9E37 ^ salt[name])
        if self.seed_port:
            m.d.comb += lfsr.salt.eq(self.lfsr_seed)
        if isinstance(stall, str):      # "ready" or "valid": the stall_port input of that name
            m.d.comb += lfsr.threshold.eq(getattr(self, f"stall_{stall}"))
        else:
            m.d.comb += lfsr.threshold.eq(stall_threshold(stall))
        return lfsr

    def _stall(self, kind):
        """The stall of ``kind`` ("ready" or "valid"): its probability, or its input's name with stall_port."""
        return kind if self.stall_port else getattr(self, f"{kind}_stall")

    def _due(self, m, now, latency, name):
        """The cycle count at which something accepted now is due: ``now + 1 + latency + 0..jitter`` (it
        reaches the head of its FIFO in the next cycle at the earliest)."""
        if not self.jitter:
            return now + 1 + latency
        rnd = self._lfsr(m, name, 0.0).value[:8]
        return now + 1 + latency + ((rnd * (self.jitter + 1)) >> 8)

    def _is_error(self, idx):
        """True if beat ``idx`` touches an error range."""
        w = self.data_width // 8
        hit = Const(0)
        for start, end in self.error_ranges:
            hit = hit | ((idx >= start // w) & (idx <= (end - 1) // w))
        return hit

    def _ripe(self, now, due):
        return ~(now - due)[31]     # now >= due, for delays under 2**31 cycles

    def _timed_reads(self, m, rp, now):
        axi, ib = self.axi, self._ib
        layout = data.StructLayout({"idx": ib, "left": 8, "id": self.id_width, "incr": 1, "due": 32})
        m.submodules.rq = rq = SyncFIFO(width=layout.size, depth=self.max_reads)
        ar_go = self._lfsr(m, "ar", self._stall("ready")).go
        r_go = self._lfsr(m, "r", self._stall("valid")).go
        new = data.View(layout, rq.w_data)
        m.d.comb += [axi.arready.eq(rq.w_rdy & ar_go), rq.w_en.eq(axi.arvalid & axi.arready),
                     new.idx.eq(self._beat_index(axi.araddr)), new.left.eq(axi.arlen), new.id.eq(axi.arid),
                     new.incr.eq(axi.arburst != AxiBurst.FIXED),
                     new.due.eq(self._due(m, now, self.read_latency, "jr"))]

        # the beat on R is rp.data = mem[r_idx] while `loaded`; the burst leaves the FIFO when it starts
        head = data.View(layout, rq.r_data)
        loaded, held = Signal(), Signal()
        r_idx, r_left, r_id, r_incr = Signal(ib), Signal(8), Signal(self.id_width), Signal()
        m.d.comb += [axi.rvalid.eq(loaded & (held | r_go)), axi.rdata.eq(rp.data), axi.rid.eq(r_id),
                     axi.rlast.eq(r_left == 0),
                     axi.rresp.eq(Mux(self._is_error(r_idx), AxiResp.SLVERR, AxiResp.OKAY))]
        m.d.sync += held.eq(axi.rvalid & ~axi.rready)
        m.d.comb += rp.en.eq(0)         # (a read port is enabled by default) hold rdata unless a beat moves
        taken = axi.rvalid & axi.rready
        with m.If(taken & (r_left != 0)):
            m.d.comb += [rp.addr.eq(r_idx + r_incr), rp.en.eq(1)]
            m.d.sync += [r_idx.eq(r_idx + r_incr), r_left.eq(r_left - 1)]
        with m.Elif(~loaded | taken):
            with m.If(rq.r_rdy & self._ripe(now, head.due)):
                m.d.comb += [rq.r_en.eq(1), rp.addr.eq(head.idx), rp.en.eq(1)]
                m.d.sync += [loaded.eq(1), r_idx.eq(head.idx), r_left.eq(head.left), r_id.eq(head.id),
                             r_incr.eq(head.incr)]
            with m.Else():
                m.d.sync += loaded.eq(0)

    def _timed_writes(self, m, wp, now):
        axi, ib = self.axi, self._ib
        aw_layout = data.StructLayout({"idx": ib, "id": self.id_width, "incr": 1})
        b_layout = data.StructLayout({"id": self.id_width, "err": 1, "due": 32})
        m.submodules.awq = awq = SyncFIFO(width=aw_layout.size, depth=self.max_writes)
        m.submodules.bq = bq = SyncFIFO(width=b_layout.size, depth=self.max_writes)
        aw_go = self._lfsr(m, "aw", self._stall("ready")).go
        w_go = self._lfsr(m, "w", self._stall("ready")).go
        b_go = self._lfsr(m, "b", self._stall("valid")).go
        new = data.View(aw_layout, awq.w_data)
        m.d.comb += [axi.awready.eq(awq.w_rdy & aw_go), awq.w_en.eq(axi.awvalid & axi.awready),
                     new.idx.eq(self._beat_index(axi.awaddr)), new.id.eq(axi.awid),
                     new.incr.eq(axi.awburst != AxiBurst.FIXED)]

        # W beats go to the burst at the head of the AW FIFO (a slave may wait for AW before taking W)
        head = data.View(aw_layout, awq.r_data)
        started, w_err, w_idx = Signal(), Signal(), Signal(ib)
        idx = Mux(started, w_idx, head.idx)
        err = self._is_error(idx)
        m.d.comb += [axi.wready.eq(awq.r_rdy & bq.w_rdy & w_go), wp.addr.eq(idx), wp.data.eq(axi.wdata)]
        resp = data.View(b_layout, bq.w_data)
        m.d.comb += [resp.id.eq(head.id), resp.err.eq(w_err | err),
                     resp.due.eq(self._due(m, now, self.write_latency, "jw"))]
        with m.If(axi.wvalid & axi.wready):
            m.d.comb += wp.en.eq(Mux(err, 0, axi.wstrb))
            m.d.sync += [w_idx.eq(idx + head.incr), started.eq(1), w_err.eq(w_err | err)]
            with m.If(axi.wlast):
                m.d.comb += [awq.r_en.eq(1), bq.w_en.eq(1)]
                m.d.sync += [started.eq(0), w_err.eq(0)]

        b = data.View(b_layout, bq.r_data)
        held = Signal()
        m.d.comb += [axi.bvalid.eq(bq.r_rdy & self._ripe(now, b.due) & (held | b_go)), axi.bid.eq(b.id),
                     axi.bresp.eq(Mux(b.err, AxiResp.SLVERR, AxiResp.OKAY)),
                     bq.r_en.eq(axi.bvalid & axi.bready)]
        m.d.sync += held.eq(axi.bvalid & ~axi.bready)

    def _timed_host(self, m, rp, wp):
        """Host accesses on ports of their own: request registered, then the write (or the read's fetch),
        ``ack`` in the cycle after that."""
        host, lw = self.host, self._lw
        h_rd, h_wr = Signal(), Signal()
        h_addr, h_data = Signal(self.host_addr_width), Signal(32)
        m.d.sync += [h_addr.eq(host.addr), h_data.eq(host.wdata), h_rd.eq(host.re), h_wr.eq(host.we)]
        acked, was_rd, lane = Signal(), Signal(), Signal(max(1, lw - 2))
        m.d.sync += lane.eq(h_addr[2:lw] if lw > 2 else 0)
        m.d.sync += [acked.eq(h_rd | h_wr), was_rd.eq(h_rd)]
        m.d.comb += [rp.addr.eq(self._beat_index(h_addr)), rp.en.eq(h_rd),
                     wp.addr.eq(self._beat_index(h_addr)), wp.data.eq(Cat(*[h_data] * (self.data_width // 32))),
                     wp.en.eq(Mux(h_wr, 0xF << (h_addr[2:lw] * 4) if lw > 2 else 0xF, 0)),
                     host.ack.eq(acked)]
        with m.If(acked & was_rd):
            m.d.comb += host.rdata.eq(rp.data.word_select(lane, 32) if lw > 2 else rp.data)
