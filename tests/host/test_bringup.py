"""One bring-up (``host/bringup.py``): the host API (:class:`System`) and the job layer behind ``syncfabric run``
(``job.bring_up``, ``job.load_programs``) leave an engine's registers, program table and instruction memory
the same, but for what only a job runner sets (its one data window and the chunk size). Over an in-memory
register file, no simulator."""

import asyncio

from syncfabric.hdl.ace.regs import ace_regmap
from syncfabric.host import job as job_mod
from syncfabric.host import system as system_mod
from syncfabric.host.driver import AceDriver
from syncfabric.host.run import job_spec
from syncfabric.host.system import System
from syncfabric.host.transport import Transport

MEM = 1 << 20


class RegFile(Transport):
    """Registers at their reset values (from the map) and a sparse memory."""

    def __init__(self, regmap):
        self.regs = {a: (reg.init >> (32 * h)) & 0xFFFFFFFF
                     for reg in regmap.registers() for h, a in enumerate(reg.addresses)}
        self.mem = {}

    def read_reg(self, addr):
        return self.regs.get(addr, 0)

    def write_reg(self, addr, value):
        self.regs[addr] = value

    def read_mem(self, addr, n):
        return bytes(self.mem.get(addr + i, 0) for i in range(n))

    def write_mem(self, addr, data):
        self.mem.update((addr + i, b) for i, b in enumerate(bytes(data)))

    def wait_irq(self, timeout_cycles=None):
        return False

    def cycles(self):
        return 0


class RegFileSystem:
    """A :class:`System` backend of register files (one per rank)."""

    def __init__(self, n, cfg):
        self.transports = [RegFile(ace_regmap(cfg)) for _ in range(n)]
        self.now = 0

    def close(self):
        pass


def test_the_host_api_and_the_job_layer_bring_an_engine_up_alike(monkeypatch):
    monkeypatch.setattr(system_mod, "_open_backend",
                        lambda config, progress=False: RegFileSystem(4, config.engine))
    with System({"topology": "ring:4", "engine": {"profile": "small"}, "memory": {"bytes": MEM}}) as s:
        s.world.prepare("allreduce")
        api = s.transports
    cfg = s.config.engine
    spec = job_spec("allreduce", "ring:4", 4096, "fp32", "sum")
    job = job_mod.CollectiveJob(spec, cfg)
    regmap = ace_regmap(cfg)
    own = {regmap.addr("CHUNK_BEATS")} | {a for name in ("WIN_BASE", "WIN_SIZE", "WIN_COMMS")
                                          for i in range(cfg.n_windows)
                                          for a in regmap.register(name, i).addresses}
    for rank in range(4):
        tr = RegFile(regmap)
        drv = AceDriver(tr, cfg)
        drv.sram_split = s.drivers[rank].sram_split

        async def flow():
            await job_mod.bring_up(drv, MEM)
            await job_mod.load_programs(drv, rank, [job])
        asyncio.run(flow())
        assert tr.regs.keys() == api[rank].regs.keys()
        differ = sorted(a for a in tr.regs if tr.regs[a] != api[rank].regs[a] and a not in own)
        assert differ == [], f"rank {rank}: registers {[hex(a) for a in differ]} differ"
