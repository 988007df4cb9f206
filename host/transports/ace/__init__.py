"""System testbenches of the ACE engine: N engines on a topology of link models, each with an NPU memory (an
HDL ``AxiRam`` in the system, or a cocotbext-axi ``AxiRam``), driven by the host driver
(:mod:`syncfabric.host.job`).

:func:`ace_system_verilog` is the harness factory: the system top (``ace_system``), the link model and the engine
(``ace_engine``, converted once per configuration and cached, whatever the topology).
"""

from ....hdl.ace.config import AceConfig
from ....hdl.common.axiram import RAM_ARRAY_MODULE
from ....hdl.system.top import ENGINE_MODULE, NPU_MEM_MODULE, AceSystem, engine_verilog, link_verilog, npu_mem_verilog
from ..harness import verilog_for

__all__ = ["ace_system_verilog", "ace_engine", "ace_npu_mem", "run_system", "npu_mem_for", "NPU_MEM_MIN_BYTES"]

#: The smallest NPU memory of a system build with HDL memories (bytes per endpoint). The testbench lays out
#: only what the jobs need (at least 256 KiB), so a larger RAM changes no cycle; 1 MiB lets the test suite's
#: small jobs (256 KiB to 1 MiB) share one build each instead of three (8 MiB of RAM for 8 endpoints).
NPU_MEM_MIN_BYTES = 1 << 20


def ace_engine(cfg):
    """Verilog of the engine module of configuration ``cfg`` (a dict of :class:`AceConfig` fields), its reset
    registered inside (:func:`~syncfabric.hdl.system.top.engine_verilog`)."""
    return engine_verilog(AceConfig(**cfg))


def ace_npu_mem(beat_bytes, addr_width, npu_mem):
    """Verilog of the NPU memory (:class:`~syncfabric.hdl.common.axiram.AxiRam`, :func:`~syncfabric.hdl.system.
    top.npu_mem_verilog`) of ``npu_mem`` for engines of ``beat_bytes`` and ``addr_width`` (all the RAM depends
    on: one conversion serves every configuration)."""
    return npu_mem_verilog(AceConfig.small(beat_bytes=beat_bytes, addr_width=addr_width), npu_mem)


def ace_system_verilog(cfg, topology, max_latency=None, npu_mem=None, ranks=None, cut=False, switch_queue=None):
    """Verilog of ``AceSystem(AceConfig(**cfg), topology, max_latency=max_latency, npu_mem=npu_mem,
    ranks=ranks, cut=cut, switch_queue=switch_queue)`` followed by the link, engine (and NPU memory) modules (link latencies and rates
    are inputs of the system: one build serves them all). ``ranks``/``cut``: a partition of a partitioned
    simulation (:mod:`syncfabric.host.transports.ace.partition`)."""
    from amaranth.back import verilog
    engine = verilog_for(ace_engine, {"cfg": cfg}, ENGINE_MODULE).read_text()
    system = AceSystem(AceConfig(**cfg), topology, max_latency=max_latency, npu_mem=npu_mem, ranks=ranks, cut=cut,
                       switch_queue=switch_queue)
    top = verilog.convert(system, name="ace_system", emit_src=False)
    text = top + "\n" + link_verilog(cfg["beat_bytes"], system.max_latency) + "\n" + engine
    if npu_mem is not None:
        # its words in a RamArray: the text does not grow with the memory (npu_mem_verilog)
        ram = {"beat_bytes": cfg["beat_bytes"], "addr_width": cfg["addr_width"], "npu_mem": npu_mem}
        text += "\n" + verilog_for(ace_npu_mem, ram, NPU_MEM_MODULE).read_text()
    return text


def npu_mem_for(cfg, topology, jobs, **options):
    """``npu_mem`` for :func:`run_system`: an :class:`AxiRam` big enough for ``jobs`` on every rank of
    ``topology``: a power of two of at least :data:`NPU_MEM_MIN_BYTES`, so that runs of small jobs share one
    build (the stall probabilities are inputs of the system, set by the testbench), with the other
    :class:`AxiRam` ``options``."""
    from ...job import CollectiveJob, memory_bytes
    from ....sim.golden.topology import parse as parse_topology

    objs = [CollectiveJob(j["spec"], cfg, comm=j.get("comm", 0), tag=j.get("tag", 0),
                          in_place=j.get("in_place", False), misalign=j.get("misalign", 0))
            for j in jobs if "reject" not in j]
    n = parse_topology(topology).n_endpoints
    need = max([memory_bytes(objs, r) for r in range(n)] + [NPU_MEM_MIN_BYTES])
    return {"size_bytes": 1 << (need - 1).bit_length(), **options}


def run_system(cfg, topology, jobs, *, sim=None, latency=None, rate=None, testcase="collectives", seed=1,
               pause=0.0, link_stall=0.0, link_flip=0.0, link_drop=0.0, link_dup=0.0, post_skew=0, timeout_cycles=10**6, build_tag=None, out=None, progress=False,
               check=True, buffers=None, fsms=None, log_file=None, late=None, spill_entries=None, npu_mem=True,
               partition=None, threads=1, sram_split=None, max_latency=None, switch_queue=None):
    """Run the cocotb system testbench (:mod:`syncfabric.host.transports.ace.cocotb_system`) on ``topology`` with
    engines configured by ``cfg`` (an :class:`AceConfig`); ``jobs`` as its ``jobs`` parameter. Returns the result
    JSON of the testbench (``out``: where it is written; default a temporary file) with the harness summary
    under ``"run"``; raises AssertionError when the testbench fails (``check=False``: returns what the
    testbench wrote, with the failure under ``"error"``). ``link_stall``/``link_flip``: the probability per
    cycle that every link holds its ready low / per flit that it flips a random data bit of it;
    ``link_drop``/``link_dup``: per flit that it loses / duplicates it (drawn by the link models; a list: one
    per link). ``progress``: True
    logs the simulated cycles every few seconds; a callable is called about once a second with ``(cycle, cycles_per_s)`` while the simulation
    runs. ``buffers``/``fsms``: chunk buffers and FSMs the engines use (default all; set through the PART and
    FSM_LIMIT registers, so one build serves a whole sweep); ``sram_split``: the drivers' partition heuristic
    (None: the driver's default, residence time; ``"ace"``: the ACE paper's). ``post_skew``: each rank posts a random 0..post_skew
cycles after the others are ready. ``log_file``: the simulator's output goes there
    instead of the terminal. ``late``/``spill_entries``: see :mod:`syncfabric.host.transports.ace.cocotb_system`.
    ``max_latency``: the largest link latency the build takes (default :data:`~syncfabric.hdl.system.top.
    MAX_LATENCY`, or more if a link needs it; the topology's own latencies always fit); ``switch_queue``: a
    switch's input queue depth (:class:`~syncfabric.hdl.system.top.AceSystem`).
    ``npu_mem``: True (default: an HDL ``AxiRam`` per endpoint, sized by :func:`npu_mem_for`, reached through
    its back door, stalling with probability ``pause`` on every channel), None (cocotbext-axi ``AxiRam`` models
    with their protocol checks, paused per channel by Python on every edge) or a dict of ``AxiRam`` arguments
    with ``size_bytes``. ``partition``: this run is one partition of a partitioned simulation (a dict of
    ``index``, ``ranks``, ``hub``, ``authkey``, ``window``;
    :func:`syncfabric.host.transports.ace.partition.run_partitioned` sets it). ``threads``: Verilator simulation threads
    (:func:`syncfabric.host.transports.harness.verilator_threads`)."""
    import dataclasses
    import json
    import os
    import tempfile
    import threading

    from ....hdl.system.top import MAX_LATENCY, link_params
    from ..harness import run_cocotb

    lats = [ln[4] for ln in link_params(topology, latency, rate)]
    params = {"cfg": dataclasses.asdict(cfg), "topology": topology,
              "max_latency": max([MAX_LATENCY] + lats) if max(lats, default=0) > MAX_LATENCY else None}
    if max_latency is not None:
        params["max_latency"] = max([max_latency] + lats)
    if switch_queue is not None:
        params["switch_queue"] = switch_queue
    public = ()
    if npu_mem is not None:
        params["npu_mem"] = npu_mem_for(cfg, topology, jobs) if npu_mem is True else dict(npu_mem)
        public = ((RAM_ARRAY_MODULE, "mem"),)
    if partition is not None:
        # the cut halves' rings, reached by the partition exchange (a module per half: ace_system.cut<k>)
        params.update(ranks=list(partition["ranks"]), cut=True)
        public += (("ace_system.cut*", "flit_ring"), ("ace_system.cut*", "credit_ring"))
    with tempfile.TemporaryDirectory() as tmp:
        path = out or os.path.join(tmp, "result.json")
        stop = threading.Event()
        watcher = None
        if callable(progress):
            prog_path = os.path.join(tmp, "progress.json")
            watcher = threading.Thread(target=_watch_progress, args=(prog_path, progress, stop), daemon=True)
            watcher.start()
            progress = prog_path
        error = None
        try:
            run = run_cocotb(ace_system_verilog, params, toplevel="ace_system",
                             test_module="syncfabric.host.transports.ace.cocotb_system", sim=sim, testcase=testcase,
                             tb_params={"jobs": jobs, "seed": seed, "latency": latency, "rate": rate,
                                        "pause": pause, "link_stall": link_stall, "link_flip": link_flip,
                                        "link_drop": link_drop, "link_dup": link_dup,
                                        "post_skew": post_skew,
                                        "timeout_cycles": timeout_cycles, "out": path, "progress": progress,
                                        "buffers": buffers, "fsms": fsms, "late": late,
                                        "spill_entries": spill_entries, "partition": partition,
                                        "sram_split": sram_split},
                             build_tag=build_tag, hier_blocks=(ENGINE_MODULE,), log_file=log_file,
                             public=public, threads=threads)
        except AssertionError as exc:
            if check:
                raise
            # an assertion without a message (the design's own checks) still says where it failed
            run, error = {"sim": sim}, str(exc) or _where(exc)
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
        result = {}
        if os.path.exists(path):
            with open(path) as f:
                result = json.load(f)
        if error:
            result["error"] = error
    result["run"] = run
    return result


def _where(exc):
    """``AssertionError`` at its innermost frames, for an assertion that has no message."""
    import traceback

    frames = traceback.format_tb(exc.__traceback__)[-3:]
    return "AssertionError at\n" + "".join(frames).rstrip()


def _watch_progress(path, callback, stop):
    """Call ``callback(cycle, cycles_per_s)`` whenever the testbench's progress file changes, until ``stop``."""
    import json

    last = None
    while not stop.wait(0.5):
        try:
            with open(path) as f:
                p = json.load(f)
        except (OSError, ValueError):
            continue
        if p != last:
            last = p
            callback(p["cycle"], p["cycles_per_s"])
