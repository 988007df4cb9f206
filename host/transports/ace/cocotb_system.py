"""cocotb testbench of an ACE system (``ace_system``: N engines on a topology of link models).

Each endpoint's NPU memory is a cocotbext-axi ``AxiRam`` (optionally with random pauses on all five channels,
i.e. random response delays), or, when the system was built with ``npu_mem`` (``params["npu_mem"]``), the
system's own HDL RAM ``mem<i>`` reached through its back door
(:class:`~syncfabric.host.transports.backdoor.MemoryBackdoor`: no Python runs on the clock edges for memory traffic;
``pause`` is its stall probability, driven on the system's ``mem<i>_stall_ready``/``mem<i>_stall_valid`` inputs); each
endpoint is driven by the host driver over a
:class:`~syncfabric.host.transports.cocotb.CocotbTransport` running :func:`syncfabric.host.job.run_endpoint` - the
testbench has no second copy of the driver. Every output byte is compared with the golden executor, and
every guard band around the buffers must be left untouched.

Parameters (:func:`syncfabric.host.transports.harness.tb_params`): ``params`` (the factory's: cfg, topology,
max_latency), ``latency``/``rate`` (every link's; default the topology's: driven on the system's link inputs
before reset, so one build serves them all), ``jobs`` (a list of ``{"spec": job_spec(...), "comm", "tag", "in_place", "misalign"}``, posted in
order on every rank), ``seed``, ``pause`` (probability that an AXI channel pauses in a cycle),
``link_stall`` (probability that a link holds ready low in a cycle), ``link_flip`` (probability that a link
flips a random data bit of a flit it carries: the receiver's CRC must catch it), ``link_drop``/``link_dup``
(probability that a link loses / duplicates a flit: only engines with link retransmission recover; each may
be a list, one probability per link in the system's link order, and all are drawn in the link models), ``post_skew`` (each rank posts a
random 0..post_skew cycles late), ``timeout_cycles``, ``out`` (write the
result JSON there), ``progress`` (True: log the simulated cycle every few seconds; a path: keep the
simulated cycle and rate in that JSON file, for a progress bar), ``buffers``/``fsms`` (use
that many chunk buffers / FSMs of the engines: the partitions and FSM_LIMIT registers), ``expect`` (per job,
the status every rank must complete with; default OK), ``late`` (``{"rank": r, "max_wait": cycles}``: rank
``r`` posts only once every other rank has read all its input and has no chunk left, i.e. every slice of
theirs has left, or after ``max_wait`` cycles; the result's ``late`` says which and what rank ``r`` had
spilled by then - the asynchronous all-to-all's test), ``spill_entries`` (the spill window's records),
``partition`` (this simulation is one partition of a partitioned run, :mod:`syncfabric.host.transports.ace.partition`:
the system holds the ranks ``partition["ranks"]``, drives only those, and exchanges the cut links' rows through the
hub every ``partition["window"]`` cycles; the ranks post at the first window boundary after every rank of
every partition is ready).
"""

import json
import logging
import os
import random
import time
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, Timer
from cocotb.utils import get_sim_steps
from cocotbext.axi import AxiBus, AxiRam

from ....hdl.ace.config import AceConfig
from ....hdl.common.axiram import stall_threshold
from ....hdl.common.layouts import MAX_PHASES
from ....hdl.ace.retry import replay_timeout
from ....hdl.system.link import LINK_FAULTS
from ....hdl.system.top import link_port_values, split_links, system_links
from ...driver import AceDriver
from ...job import (CANARY, DATA_BASE, CollectiveJob, RejectedCommand, bring_up, load_programs,
                         memory_bytes, run_endpoint)
from ....sim.golden.topology import parse as parse_topology
from ..backdoor import MemoryBackdoor
from ..harness import tb_params
from ..cocotb import CocotbTransport, after_cycles
from .partition import CutRings, HubPeer

CLOCK_NS = 10
#: Cycles between two looks at the wall clock for progress reports.
PROGRESS_CYCLES = 2000


def _pauses(rng, prob):
    while True:
        yield rng.random() < prob


class Barrier:
    """All ``n`` parties resume in the same simulation step once the last one arrives."""

    def __init__(self, n):
        self.n, self.count, self.event = n, 0, Event()

    async def wait(self):
        self.count += 1
        if self.count == self.n:
            self.event.set()
        else:
            await self.event.wait()


class SystemTB:
    """Clock, reset, one memory (a cocotbext-axi AxiRam, or the back door of the system's RAM) and one driver
    per endpoint, random link stalls."""

    def __init__(self, dut, p):
        self.dut, self.p = dut, p
        fp = p["params"]
        self.cfg = AceConfig(**fp["cfg"])
        self.topology = fp["topology"]
        self.partition = part = p.get("partition")
        self.n = parse_topology(self.topology).n_endpoints
        #: the ranks this simulation holds and drives (all but in a partitioned run)
        self.local = sorted(part["ranks"]) if part else list(range(self.n))
        if part:    # the on-chip links, and the cut ones (``cut<k>`` of the system: ExternalPort, row)
            on_chip, ext, rows = split_links(self.topology, self.local, p.get("latency"), p.get("rate"))
            self.links, self.external = on_chip, list(zip(ext, rows))
        else:
            self.links, self.external = system_links(self.topology, p.get("latency"), p.get("rate")), []
        self.seed = int(p.get("seed", 1))
        self.rng = random.Random(self.seed)
        self.log = dut._log
        specs = p.get("jobs", [])
        self.jobs = [None if "reject" in j else
                     CollectiveJob(j["spec"], self.cfg, comm=j.get("comm", 0), tag=j.get("tag", 0),
                                   in_place=j.get("in_place", False), misalign=j.get("misalign", 0))
                     for j in specs]
        for k, j in enumerate(specs):       # a rejection spoils a descriptor of a collective of the list
            if "reject" in j:
                self.jobs[k] = RejectedCommand(j["reject"], self.jobs[j.get("template", 0)])
        self.ranks = [set(j.get("ranks", range(self.n))) for j in specs]
        self.mem_bytes = max([memory_bytes(self.jobs_of(r), r) for r in range(self.n)]
                             + [int(p.get("mem_bytes", 1 << 18))])
        self.rams, self.drivers = [], []
        self.pause = pause = float(p.get("pause", 0.0))
        # cocotbext-axi still calls cocotb APIs that 2.x deprecates, and announces every model it creates
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
        quiet = logging.getLogger(f"cocotb.{dut._name}")
        level = quiet.level
        quiet.setLevel(logging.WARNING)
        hdl_mem = fp.get("npu_mem")
        self.hdl_mem = hdl_mem is not None
        for i in range(self.n):
            if i not in self.local:
                self.rams.append(None)
                self.drivers.append(None)
                continue
            if hdl_mem is not None:
                array = getattr(dut, f"mem{i}").array           # the RamArray: its words and bulk door
                ram = MemoryBackdoor(array.mem, bulk=array)
                assert ram.size >= self.mem_bytes, \
                    f"the system's NPU memories hold {ram.size:#x} bytes, the jobs need {self.mem_bytes:#x}"
                self._add_driver(dut, i, ram, p)
                continue
            ram = AxiRam(AxiBus.from_prefix(dut, f"ep{i}_axi_"), dut.clk, dut.rst, size=self.mem_bytes)
            if pause > 0:
                for k, ch in enumerate((ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                                        ram.read_if.ar_channel, ram.read_if.r_channel)):
                    ch.set_pause_generator(_pauses(random.Random(self.seed * 1000 + i * 8 + k), pause))
            for log in (ram.write_if.log, ram.read_if.log, ram.write_if.aw_channel.log, ram.write_if.w_channel.log,
                        ram.write_if.b_channel.log, ram.read_if.ar_channel.log, ram.read_if.r_channel.log):
                log.setLevel(logging.WARNING)     # a line per burst costs more than the simulation
            # cocotbext-axi queues two beats per channel by default, which lets its read and write loops stall
            # each other into about half a beat per cycle; a deeper queue makes the RAM keep up with the engine
            for ch in (ram.read_if.ar_channel, ram.read_if.r_channel, ram.write_if.aw_channel,
                       ram.write_if.w_channel, ram.write_if.b_channel):
                ch.queue_occupancy_limit = 64
            self._add_driver(dut, i, ram, p)
        quiet.setLevel(level)

    def _add_driver(self, dut, i, ram, p):
        self.rams.append(ram)
        tr = CocotbTransport(dut, dut.clk, csr_prefix=f"ep{i}_csr", mem=ram, irq=getattr(dut, f"ep{i}_irq"))
        drv = AceDriver(tr, self.cfg)
        drv.buffer_budget = p.get("buffers")
        drv.sram_split = p.get("sram_split") or drv.sram_split
        self.drivers.append(drv)

    def set_stall(self, rank, prob):
        """The HDL NPU memory of endpoint ``rank`` withholds a ready or a valid with probability ``prob``."""
        stall = min(255, stall_threshold(prob))     # 256 would stall every cycle: a wedged run
        getattr(self.dut, f"mem{rank}_stall_ready").value = stall
        getattr(self.dut, f"mem{rank}_stall_valid").value = stall

    def jobs_of(self, rank):
        """The commands ``rank`` posts, in order (a rejected command may be posted by some ranks only)."""
        return [j for j, ranks in zip(self.jobs, self.ranks) if rank in ranks]

    async def start(self):
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        for li in range(len(self.links)):
            getattr(self.dut, f"link{li}_inject").value = 0
            getattr(self.dut, f"link{li}_stall").value = 0
        # random link faults are drawn by the link models' LFSRs: no per-cycle work here
        faults = {kind: self.p.get(f"link_{kind}") or 0.0 for kind in LINK_FAULTS}
        for name, value in link_port_values(self.links, **faults).items():
            getattr(self.dut, name).value = value
        for k, (x, row) in enumerate(self.external):
            getattr(self.dut, f"cut{k}_latency").value = row[4]
            if x.direction == "tx":
                getattr(self.dut, f"cut{k}_rate_num").value, getattr(self.dut, f"cut{k}_rate_den").value = row[5]
                getattr(self.dut, f"cut{k}_stall").value = 0
                getattr(self.dut, f"cut{k}_inject").value = 0
        if self.partition:      # from time 0: every partition exchanges at the same simulated times
            self.go, self.finished, self.local_done = Event(), Event(), False
            self.windows, self.exchange_s, self.rings = 0, 0.0, None
            cocotb.start_soon(self.coordinate())
        if self.hdl_mem:
            for i in self.local:
                self.set_stall(i, self.pause)
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    def replay_timeout(self, rank):
        """``rank``'s REPLAY_TIMEOUT from the round trips of its links (None: no link retransmission)."""
        if not self.cfg.replay_flits:
            return None
        return replay_timeout(self.cfg, list(self.links) + [row for _, row in self.external], rank)

    async def coordinate(self):
        """The partition's side of the exchange (:mod:`syncfabric.host.transports.ace.partition`): every ``window``
        cycles, mid-cycle, send the cut links' rows of the window and this partition's flags to the hub, write what
        it answers into the rings, release the ranks at the barrier when every partition is ready, and end
        when every partition is done."""
        part = self.partition
        window = int(part["window"])
        peer = HubPeer(part["hub"], part["authkey"], int(part["index"]))
        halves = [(k, tuple(row[:4]), x.direction) for k, (x, row) in enumerate(self.external)]
        depth = len(self.dut.cut0.flit_ring) if halves else 1
        self.rings = rings = CutRings(self.dut, halves, depth, window)
        await Timer(CLOCK_NS // 2, unit="ns")
        while True:
            await Timer(window * CLOCK_NS, unit="ns")
            t0 = time.monotonic()
            message = rings.collect()
            barrier = getattr(self, "barrier", None)
            message.update(arrived=barrier is not None and barrier.count >= barrier.n, done=self.local_done)
            reply = peer.exchange(message)
            rings.deliver(reply)
            self.windows += 1
            self.exchange_s += time.monotonic() - t0
            if reply["go"] and not self.go.is_set():
                self.go.set()
            if reply["stop"]:
                peer.close()
                self.finished.set()
                return

    async def report_progress(self, path=None, every_s=5.0):
        """Every ``every_s`` seconds of wall time, log the simulated cycle and the simulation rate, or (with
        ``path``) write them to that JSON file, replacing it atomically."""
        t_start = t_last = time.monotonic()
        cycle = last = 0
        while True:     # a timer, not ClockCycles: no Python on every clock edge
            await Timer(PROGRESS_CYCLES * CLOCK_NS, unit="ns")
            cycle += PROGRESS_CYCLES
            now = time.monotonic()
            if now - t_last >= every_s:
                rate = (cycle - last) / (now - t_last)
                if path:
                    tmp = f"{path}.tmp"
                    with open(tmp, "w") as f:
                        json.dump({"cycle": cycle, "cycles_per_s": rate, "wall_s": now - t_start}, f)
                    os.replace(tmp, path)
                else:
                    self.log.info("progress: cycle %d, %.0f cycles/s, %.0f s", cycle, rate, now - t_start)
                t_last, last = now, cycle

    async def run_jobs(self, timeout_cycles, setup=True):
        """Every endpoint runs :func:`run_endpoint` for its commands concurrently; all post at the same cycle,
        or, with the ``post_skew`` parameter, each a random 0..post_skew cycles after the others are ready
        (ranks posting at different times)."""
        self.barrier = barrier = Barrier(len(self.local))
        skew = int(self.p.get("post_skew", 0))
        rng = random.Random(self.seed * 13 + 5)
        delays = [rng.randrange(skew + 1) if skew else 0 for _ in range(self.n)]
        self.post_delays = delays

        late = self.p.get("late")
        self.late_info = None

        async def all_sent(late_rank):
            """Wait until every other rank has read its whole input and has no chunk in flight (its PUTs have
            all left), or ``max_wait`` cycles; record which, and the late rank's spills at that point."""
            want = [sum(j.golden.mem_read_bytes[r] for j in self.jobs_of(r) if isinstance(j, CollectiveJob))
                    for r in range(self.n)]
            waited, sent = 0, False
            while waited < int(late.get("max_wait", 200_000)):
                await after_cycles(self.dut.clk, 100, get_sim_steps(CLOCK_NS, "ns"))
                waited += 100
                sent = True
                for r in range(self.n):
                    if r == late_rank:
                        continue
                    drv = self.drivers[r]
                    if (await drv.read("PAYLOAD_RD_BYTES") < want[r]
                            or (await drv.read_fields("STATUS"))["chunks_active"] != 0):
                        sent = False
                        break
                if sent:
                    break
            self.late_info = {"rank": late_rank, "waited": waited, "others_sent_all": sent,
                              "spills": await self.drivers[late_rank].read("SPILLS"),
                              "deposits": await self.drivers[late_rank].read("DEPOSITS")}

        def sync_for(i):
            async def sync():
                await barrier.wait()
                if self.partition:      # every rank of every partition: released at a window boundary
                    await self.go.wait()
                if late is not None and i == late["rank"]:
                    await all_sent(i)
                elif delays[i]:
                    await after_cycles(self.dut.clk, delays[i], get_sim_steps(CLOCK_NS, "ns"))
            return sync

        tasks = [cocotb.start_soon(run_endpoint(self.drivers[i], i, self.jobs_of(i), mem_bytes=self.mem_bytes,
                                                timeout_cycles=timeout_cycles, sync=sync_for(i), setup=setup,
                                                fsm_limit=self.p.get("fsms"),
                                                spill_entries=self.p.get("spill_entries"),
                                                replay_timeout=self.replay_timeout(i)))
                 for i in self.local]
        done = {i: await t for i, t in zip(self.local, tasks)}
        if self.partition:      # keep simulating (and exchanging) until every partition is done
            self.local_done = True
            await self.finished.wait()
        return [done.get(i) for i in range(self.n)]


def summarize(tb, results, wall):
    """The JSON result: per command the status, detail, mismatching and guard bytes of each rank that posted
    it (``None`` for the others), the expected status and detail, the collective's cycles (the largest
    completion ``cycles`` field over the ranks: descriptor fetch to completion write) and the golden
    model's traffic; per rank the counters."""
    jobs = []
    for k, job in enumerate(tb.jobs):
        row = {"kind": getattr(job, "kind", "collective"), "expect": job.status.name,
               "status": [], "detail": [], "expect_detail": [], "mismatches": [], "guard_touched": [],
               "contributors": [], "expect_contributors": []}
        for r, res in enumerate(results):
            if r not in tb.ranks[k] or res is None:
                for key in ("status", "detail", "expect_detail", "mismatches", "guard_touched", "contributors",
                            "expect_contributors"):
                    row[key].append(None)
                continue
            i = tb.jobs_of(r).index(job)
            cpl = res.completions[i]
            job.descriptor(r)          # the detail a rejection expects depends on the rank's descriptor
            row["status"].append(cpl["status_name"])
            row["detail"].append(cpl["detail"])
            row["expect_detail"].append(job.detail)
            row["mismatches"].append(res.mismatches[i])
            row["guard_touched"].append(res.guard_touched[i])
            row["contributors"].append(res.contributors[i][0])
            row["expect_contributors"].append(res.contributors[i][1])
            row["cycles"] = max(row.get("cycles", 0), cpl["cycles"])
        if isinstance(job, CollectiveJob):
            row["spec"] = job.spec
            row["golden"] = {"mem_read_bytes": list(job.golden.mem_read_bytes),
                             "mem_write_bytes": list(job.golden.mem_write_bytes),
                             "bytes_sent_per_byte_read": job.golden.bytes_sent_per_byte_read,
                             "phase_flits": [[sum(f for (q, r, _), f in job.golden.phase_link_flits.items()
                                                  if q == pi and r == rank) for pi in range(MAX_PHASES)]
                                             for rank in range(tb.n)],
                             "chunks": job.golden.n_chunks, "messages": job.golden.n_messages,
                             "packets": job.golden.n_packets}
        jobs.append(row)
    overflow = getattr(tb.dut, "switch_overflow", None)
    held = getattr(tb.dut, "switch_hold_cycles", None)
    mine = [r for r in results if r is not None]
    return {"jobs": jobs, "counters": [r and r.counters for r in results],
            "sram_conflict": [r and r.sram_conflict for r in results],
            "switch_overflow": None if overflow is None else int(overflow.value),
            "switch_hold_cycles": None if held is None else int(held.value),
            "window_cycles": max(r.cycles for r in mine), "wall_s": wall, "seed": tb.seed,
            "window_wall_s": max(r.wall_s for r in mine),
            "late": getattr(tb, "late_info", None),
            "partition": tb.partition and {"windows": tb.windows, "crossed": tb.rings.crossed,
                                           "exchange_s": tb.exchange_s}}


def check_summary(tb, out):
    """Assert every command completed as expected, every byte matched and no guard byte changed."""
    for k, j in enumerate(out["jobs"]):
        posted = [r for r in range(tb.n) if j["status"][r] is not None]
        what = f"command {k} ({j['kind']}{', ' + j['spec']['collective'] if 'spec' in j else ''})"
        for r in posted:
            assert j["status"][r] == j["expect"], f"{what}: rank {r} completed {j['status'][r]}, expected {j['expect']}"
            if j["expect"] != "OK":
                assert j["detail"][r] == j["expect_detail"][r], \
                    f"{what}: rank {r} detail {j['detail'][r]:#x}, expected {j['expect_detail'][r]:#x}"
            assert j["mismatches"][r] == 0, f"{what}: rank {r} has {j['mismatches'][r]} mismatching bytes"
            assert j["guard_touched"][r] == 0, f"{what}: rank {r} wrote {j['guard_touched'][r]} bytes it must not"
            if j["expect"] == "OK":
                assert j["contributors"][r] == j["expect_contributors"][r], \
                    (f"{what}: rank {r} completion reports {j['contributors'][r]} contributors, the golden count "
                     f"lane {j['expect_contributors'][r]}")
    # links that damage packets on purpose (recovered by link retransmission, or failing the collective) count
    # CRC errors; otherwise there must be none
    damaging = any(tb.p.get(f"link_{kind}") for kind in ("flip", "drop", "dup"))
    for r, c in enumerate(out["counters"]):
        if c is None or damaging:       # a rank of another partition
            continue
        assert c["RX_CRC_ERRS"] == [0] * len(c["RX_CRC_ERRS"]), f"rank {r}: CRC errors {c['RX_CRC_ERRS']}"
    assert not any(out["sram_conflict"]), f"SRAM bank conflicts on ranks {out['sram_conflict']}"
    assert not out.get("switch_overflow"), "the switch dropped a flit (an input queue overflowed)"


@cocotb.test()
async def collectives(dut):
    """The commands of ``tb_params()["jobs"]``, posted in order on every rank (rejections where they say);
    every byte against the golden model, every rejection with its status and detail and nothing written."""
    p = tb_params()
    tb = SystemTB(dut, p)
    tb.log.info("seed %d: %d commands on %s, AXI pause %.2f, link faults %s", tb.seed, len(tb.jobs),
                tb.topology, float(p.get("pause", 0)), {k: p.get(f"link_{k}", 0) for k in LINK_FAULTS})
    await tb.start()
    if p.get("progress"):
        prog = p["progress"]
        cocotb.start_soon(tb.report_progress(prog, 1.0) if isinstance(prog, str) else tb.report_progress())
    t0 = time.monotonic()
    results = await tb.run_jobs(p.get("timeout_cycles", 10**6))
    out = summarize(tb, results, time.monotonic() - t0)
    if p.get("out"):
        with open(p["out"], "w") as f:
            json.dump(out, f)
    for k, j in enumerate(out["jobs"]):
        tb.log.info("command %d %s: %s, %d cycles", k, j["spec"]["collective"] if "spec" in j else j["kind"],
                    j["status"], j.get("cycles", 0))
    check_summary(tb, out)


@cocotb.test()
async def register_errors(dut):
    """A descriptor that needs more SRAM per chunk than the engine has (CHUNK_BEATS set beyond the buffers)
    completes SRAM_TOO_SMALL with nothing written; with CHUNK_BEATS restored the same job runs correctly on
    every rank."""
    p = tb_params()
    tb = SystemTB(dut, p)
    await tb.start()
    job = tb.jobs[0]
    drv = tb.drivers[0]
    await bring_up(drv, tb.mem_bytes)
    await load_programs(drv, 0, [job])
    job.place(0, DATA_BASE)
    await job.write_inputs(drv.transport, 0)
    good = await drv.read("CHUNK_BEATS")
    await drv.write("CHUNK_BEATS", tb.cfg.chunk_beats + 1)
    await drv.post(job.descriptor(0))
    [cpl] = await drv.wait(1, timeout_cycles=100_000)
    assert cpl["status_name"] == "SRAM_TOO_SMALL", cpl
    b = job.buffers[0]
    region = await drv.transport.read_mem(b.dst, b.end - b.dst)
    assert set(region) == {CANARY}, "a rejected command wrote to memory"
    await drv.write("CHUNK_BEATS", good)
    results = await tb.run_jobs(p.get("timeout_cycles", 10**6))
    check_summary(tb, summarize(tb, results, 0.0))
