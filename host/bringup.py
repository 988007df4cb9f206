"""Bringing an ACE endpoint up and posting work to it, written once: the host API (:class:`~syncfabric.host.system.
System`, behind ``syncfabric bench COLLECTIVE`` and the examples) and the job layer (:mod:`syncfabric.host.job`,
behind ``syncfabric run``, ``syncfabric demo``, the engine benchmarks and the system testbenches) both do
every step through these functions.

* :func:`memory_layout` - where the rings, the spill window and the data go in an endpoint's memory;
* :func:`bring_up` - identity and configuration check, rings, spill window, link retransmission timer, and
  (for a job runner) the data window and the chunk size;
* :func:`load_programs` - one communicator's programs on one rank's engine (the driver partitions the SRAM
  and places the programs in instruction memory);
* :func:`descriptor` - the descriptor a rank posts for a collective (the driver's ``post`` rings the doorbell,
  its ``poll``/``wait`` collect the completions).

The functions are coroutines over an :class:`~syncfabric.host.driver.AceDriver`: await them in a simulator's
event loop (the cocotb and Amaranth system testbenches), or run them with
:func:`~syncfabric.host.transport.run_sync` over a synchronous transport (:class:`System`).
"""

import dataclasses

from ..hdl.common.layouts import DescFlags

__all__ = ["SQ_BASE", "SQ_ENTRIES", "CQ_BASE", "CQ_ENTRIES", "SPILL_BASE", "DATA_BASE", "MemoryLayout",
           "memory_layout", "spill_entries_for", "bring_up", "program_table", "load_programs", "descriptor"]

SQ_BASE = 0x00000
SQ_ENTRIES = 128
CQ_BASE = 0x04000
CQ_ENTRIES = 128
#: The deposit unit's spill window (asynchronous all-to-all) sits between the rings and the data.
SPILL_BASE = 0x08000
#: The first byte of the data (the buffers descriptors name).
DATA_BASE = 0x10000


@dataclasses.dataclass(frozen=True)
class MemoryLayout:
    """Where the host puts the engine's rings, the spill window and the registered buffers in each endpoint's
    memory (:func:`memory_layout`)."""
    sq_base: int
    sq_entries: int
    cq_base: int
    cq_entries: int
    spill_base: int
    spill_entries: int
    data_base: int


def spill_entries_for(cfg, spill_base=SPILL_BASE, data_base=DATA_BASE):
    """Spill records that fit between ``spill_base`` and ``data_base`` (at most the engine's table)."""
    return min(cfg.spill_entries, (data_base - spill_base) // (cfg.max_message_beats * cfg.beat_bytes))


def memory_layout(mem_bytes, cfg, *, compact=None):
    """The layout for ``mem_bytes`` of memory per endpoint and engine configuration ``cfg``: rings and spill
    window in the first 64 KiB from 128 KiB on, below that (or with ``compact``) a compact one for the on-chip
    memories of prototype boards (16-entry rings, a 2 KiB spill window, buffers from 4 KiB)."""
    if compact is None:
        compact = mem_bytes < 1 << 17
    if not compact:
        sq, sqn, cq, cqn, spill, data = SQ_BASE, SQ_ENTRIES, CQ_BASE, CQ_ENTRIES, SPILL_BASE, DATA_BASE
    else:
        sq, sqn, cq, cqn, spill, data = 0x0, 16, 0x400, 16, 0x800, 0x1000
    return MemoryLayout(sq, sqn, cq, cqn, spill, spill_entries_for(cfg, spill, data), data)


async def bring_up(drv, layout, *, window=None, chunk_beats=None, replay_timeout=None):
    """Bring the engine of ``drv`` up for ``layout`` (a :class:`MemoryLayout`): check its identity and
    configuration, set up the submission and completion rings, then (for a job runner, which has no
    registrations) open memory window 0 on ``window`` (``(base, size)``) and write ``chunk_beats`` to
    CHUNK_BEATS, then the spill window and, when given, the link retransmission's ``REPLAY_TIMEOUT``."""
    await drv.check_config()
    await drv.configure(layout.sq_base, layout.sq_entries, layout.cq_base, layout.cq_entries)
    if window is not None:
        await drv.add_window(0, *window)
    if chunk_beats is not None:
        await drv.write("CHUNK_BEATS", chunk_beats)
    await drv.set_spill_window(layout.spill_base, layout.spill_entries)
    if replay_timeout is not None:
        await drv.write("REPLAY_TIMEOUT", replay_timeout)


def program_table(programs):
    """The ``programs`` argument of :meth:`~syncfabric.host.driver.AceDriver.configure_comm` from one rank's
    programs (in the order given): a collective's program, or for broadcast and reduce the list of one program
    per root."""
    table = {}
    for prog in programs:
        if prog.collective in ("broadcast", "reduce"):
            table.setdefault(prog.collective, []).append(prog)
        else:
            table[prog.collective] = prog
    return table


async def load_programs(drv, comm, rank, topology, programs):
    """Make ``drv``'s engine rank ``rank`` of communicator ``comm`` on ``topology`` (parsed) and load its
    ``programs`` (:func:`program_table`): the driver sizes the SRAM partitions and places the code."""
    await drv.configure_comm(comm, rank, topology.n_endpoints, program_table(programs), topology)


def descriptor(collective, dtype, op, *, comm, root, tag, count, src, dst, cookie, in_place=False, null=False):
    """The descriptor (fields of ``descriptor_layout()``) of a collective a rank posts; ``null``: the rank
    contributes nothing (partial all-reduce)."""
    return {"collective": collective, "algorithm": 0, "dtype": dtype, "op": op,
            "flags": (DescFlags.IN_PLACE if in_place else 0) | (DescFlags.NULL if null else 0),
            "comm": comm, "root": root, "tag": tag, "count": count, "src": src, "dst": dst, "cookie": cookie}
