"""System configuration: one YAML file (or dict) describes an emulated system - the topology, the engine
parameters, the links, each endpoint's memory, the simulator backend and the clock used to report time.

Example (every key but ``topology`` is optional; the values shown are the defaults)::

    topology: ring:4          # ring:N, bidir-ring:N, torus:LxVxH or switch:N
    backend: amaranth         # amaranth (no external simulator), verilator or icarus
    clock_mhz: 1000           # engine clock: simulated cycles -> microseconds
    seed: 1
    engine:
      profile: small          # small, medium, paper or board (AceConfig.profile); any AceConfig field
      landing_headers: 8      # overrides it, e.g. dtypes: [fp32, int32] (the element types the ALUs are built for)
    links:
      latency: null           # cycles on every link; null: the topology's own (fast local, slow inter-package)
      rate: null              # flits per cycle on every link, e.g. 1, 0.5 or "1/8"; null: the topology's own
      flip: 0                 # probability that a link flips a random data bit of a flit (fault injection)
      stall: 0                # probability that a link holds its ready low in a cycle
      drop: 0                 # probability that a link loses / duplicates a flit (only with engine.replay_flits,
      dup: 0                  # the link retransmission: docs/engine.md section 15)
    memory:
      bytes: 1MiB             # per endpoint (its emulated NPU memory)
    driver:
      sram_split: residence   # how the driver splits the SRAM's chunk buffers among a program's phases:
                              # residence (in proportion to the time a chunk stays in each) or ace (the paper's)
      buffers: null           # chunk buffers the partitions share; null: all of the engine's (fewer: a smaller SRAM)
      chunk_bytes: max        # max: every collective with the largest chunk the loaded programs allow; auto:
                              # the chunk the model ranks fastest for each collective (host/chunksize.py), the
                              # engines drained when it changes (CHUNK_BEATS is one register for all)
      step_timeout: 0         # cycles a step may wait for its grant before the engine gives its command up
                              # (TIMEOUT) and a link that takes no flit for as long is down; 0: off

A prototype board (``backend: serial``) is reached through its UART bridge; its memory size and clock are read
from the board unless given, and ``engine`` must describe the configuration the board was built with (the
driver checks the engine's CFG registers)::

    topology: ring:2
    backend: serial
    serial:
      port: /dev/ttyUSB0      # required
      baud: 115200            # the rate the board was built for
      timeout_s: 2            # seconds to wait for each response
      quiet_s: 0.1            # after a transmission error: silence to wait for before the next request

Boards joined by their pin-level link ports (a ring, one rank per board: ``syncfabric build --board
ulx3s-85f-ring``) are one system: ``port`` lists every board's device, rank 0's first, in ring order::

    topology: ring:2
    backend: serial
    serial:
      port: [/dev/ttyUSB0, /dev/ttyUSB1]

:func:`load_config` validates everything up front and raises :class:`ConfigError` naming the offending key
(``engine.n_fsms: expected an integer, got 'four'``), so a bad file never reaches the simulator.
"""

import dataclasses
import re
from dataclasses import dataclass, field
from fractions import Fraction

from ..hdl.ace.config import PROFILES, AceConfig
from ..sim.golden.topology import parse as parse_topology

__all__ = ["SystemConfig", "ConfigError", "load_config", "parse_bytes", "BACKENDS", "CHUNK_RULES"]

#: ``driver.chunk_bytes``: the largest chunk for every collective, or the driver's choice per collective.
CHUNK_RULES = ("max", "auto")

#: Backends of the host API: three simulators and a prototype board on a serial port.
BACKENDS = ("amaranth", "verilator", "icarus", "serial")
_TOP_KEYS = ("topology", "backend", "clock_mhz", "seed", "engine", "links", "memory", "serial", "driver")
#: Units of byte sizes (``64K``, ``1MiB``), binary.
SIZE_UNITS = _UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
#: Smallest endpoint memory: below 128 KiB the host uses a compact layout (``host.bringup.memory_layout``).
MIN_MEMORY = 1 << 13


class ConfigError(ValueError):
    """A system configuration is invalid; the message names the key (``engine.n_fsms``) and what is wrong."""


def parse_bytes(value, key="bytes"):
    """``value`` as a byte count: an integer or a string with a binary unit (``"64K"``, ``"1MiB"``, ``"4096"``)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise ConfigError(f"{key}: expected a size such as 4096, 64K or 1MiB, got {value!r}")
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ConfigError(f"{key}: expected a size such as 4096, 64K or 1MiB, got {value!r}")
    if n <= 0:
        raise ConfigError(f"{key}: must be positive, got {value!r}")
    return n


def _rate(value, key):
    if value is None:
        return None
    try:
        r = Fraction(value) if not isinstance(value, bool) else None
    except (ValueError, TypeError, ZeroDivisionError):
        r = None
    if r is None or not 0 < r <= 1:
        raise ConfigError(f"{key}: expected a rate in (0, 1] flits per cycle (1, 0.5 or \"1/8\"), got {value!r}")
    return r


def _int(value, key, lo=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if lo is not None and value < lo:
        raise ConfigError(f"{key}: must be at least {lo}, got {value}")
    return value


def _mapping(value, key):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
    return value


def _unknown(got, allowed, where):
    extra = sorted(set(got) - set(allowed), key=str)
    if extra:
        raise ConfigError(f"{where}{extra[0]}: unknown key; expected one of {', '.join(allowed)}")


@dataclass(frozen=True)
class SystemConfig:
    """A validated system configuration (see the module documentation for the file format).

    ``engine`` is the :class:`~syncfabric.hdl.ace.config.AceConfig` every endpoint instantiates, already
    widened for the topology (ports, routing-table ranks, switch landing channels); ``latency``/``rate``
    override every link's attributes when not None; ``memory_bytes`` is each endpoint's memory."""

    topology: str
    engine: AceConfig
    backend: str = "amaranth"
    clock_mhz: float = 1000.0
    seed: int = 1
    latency: int = None
    rate: Fraction = None
    #: random link faults from the start (``System.set_link_faults``): ``{"flip": p, "stall": p, "drop": p,
    #: "dup": p}``
    faults: dict = None
    memory_bytes: int = 1 << 20
    #: ``backend: serial``: ``{"port": path or [paths], "baud": int, "timeout_s": float, "quiet_s": float}``
    serial: dict = None
    #: the drivers' SRAM partition heuristic (:data:`~syncfabric.sim.golden.partitions.SPLITS`)
    sram_split: str = "residence"
    #: chunk buffers the drivers' partitions share (None: all of the engine's)
    buffers: int = None
    #: how the System picks the chunk: ``"max"`` or ``"auto"`` (:data:`CHUNK_RULES`)
    chunk_bytes: str = "max"
    #: the engines' STEP_TIMEOUT in cycles (``System.set_step_timeout``; 0: off)
    step_timeout: int = 0
    source: dict = field(default=None, compare=False, repr=False)

    @property
    def n_endpoints(self):
        return parse_topology(self.topology).n_endpoints

    def cycles_to_us(self, cycles):
        """Simulated cycles as microseconds at ``clock_mhz``."""
        return cycles / self.clock_mhz

    def replace(self, **kw):
        return dataclasses.replace(self, **kw)


def load_config(source=None, **overrides):
    """A :class:`SystemConfig` from ``source``: a path to a YAML file, a YAML string containing a newline, a
    dict, or None (all defaults; ``topology`` must then come from ``overrides``). ``overrides`` replace
    top-level keys (``backend="verilator"``). Raises :class:`ConfigError` with the offending key."""
    import yaml

    if source is None:
        raw = {}
    elif isinstance(source, dict):
        raw = dict(source)
    elif isinstance(source, str) and "\n" not in source and not source.lstrip().startswith("{"):
        try:
            with open(source) as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read the configuration {source!r}: {e.strerror}") from None
        except UnicodeDecodeError as e:       # a binary file: the codec's message names neither file nor fix
            raise ConfigError(f"cannot read the configuration {source!r}: not a UTF-8 text (YAML) file, byte "
                              f"{e.start} is {e.object[e.start:e.start + 1]!r}") from None
        raw = _yaml(text, source)
    elif isinstance(source, str):
        raw = _yaml(source, "<string>")
    else:
        raise ConfigError(f"expected a YAML path, a YAML string or a dict, got {type(source).__name__}")
    raw = _mapping(raw, "the configuration")
    raw.update({k: v for k, v in overrides.items() if v is not None})
    _unknown(raw, _TOP_KEYS, "")

    if "topology" not in raw:
        raise ConfigError("topology: required (e.g. ring:4, torus:2x2x2 or switch:4)")
    topo_s = raw["topology"]
    if not isinstance(topo_s, str):
        raise ConfigError(f"topology: expected a string such as ring:4, got {topo_s!r}")
    try:
        topo = parse_topology(topo_s)
    except ValueError as e:
        raise ConfigError(f"topology: {e}") from None

    backend = raw.get("backend", "amaranth")
    if backend not in BACKENDS:
        raise ConfigError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    clock = raw.get("clock_mhz", 1000.0)
    if isinstance(clock, bool) or not isinstance(clock, (int, float)) or clock <= 0:
        raise ConfigError(f"clock_mhz: expected a positive number, got {clock!r}")
    seed = _int(raw.get("seed", 1), "seed")

    eng = dict(_mapping(raw.get("engine"), "engine"))
    profile = eng.pop("profile", "small")
    if profile not in PROFILES:
        raise ConfigError(f"engine.profile: expected one of {', '.join(PROFILES)}, got {profile!r}")
    fields = [f.name for f in dataclasses.fields(AceConfig)]
    _unknown(eng, ["profile"] + fields, "engine.")
    for k, v in eng.items():
        if k == "dtypes":
            if isinstance(v, str) or not isinstance(v, (list, tuple)) or \
                    not all(isinstance(d, str) for d in v):
                raise ConfigError(f"engine.dtypes: expected a list of element type names, got {v!r}")
            continue
        _int(v, f"engine.{k}")
    try:
        engine = AceConfig.profile(profile, **eng)
    except ValueError as e:
        raise ConfigError(f"engine: {e}") from None
    from .run import engine_config_for
    try:
        engine = engine_config_for(engine, topo.spec)   # ports and routing-table ranks for the topology
    except ValueError as e:
        raise ConfigError(f"engine: {e}") from None
    if engine.replay_flits and backend == "serial":
        raise ConfigError("engine.replay_flits: a board's pin-level link ports do not retransmit (use 0)")

    links = _mapping(raw.get("links"), "links")
    _unknown(links, ("latency", "rate", "flip", "stall", "drop", "dup"), "links.")
    latency = links.get("latency")
    if latency is not None:
        _int(latency, "links.latency", 1)
    rate = _rate(links.get("rate"), "links.rate")
    faults = {}
    for key in ("flip", "stall", "drop", "dup"):
        v = links.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ConfigError(f"links.{key}: expected a probability in [0, 1), got {v!r}")
        if v:
            faults[key] = float(v)
    if faults and backend == "serial":
        raise ConfigError("links.flip/stall/drop/dup: a board's links have no fault injection (simulator "
                          "backends only)")
    lossy = [k for k in ("drop", "dup") if k in faults]
    if lossy and not engine.replay_flits:
        from .faults import RETRANSMIT_HINT

        raise ConfigError(f"links.{lossy[0]}: lost or duplicated flits are recovered only by link retransmission: "
                          f"{RETRANSMIT_HINT}, engine.replay_flits")

    serial = None
    if backend == "serial":
        ser = dict(_mapping(raw.get("serial"), "serial"))
        _unknown(ser, ("port", "baud", "timeout_s", "quiet_s"), "serial.")
        port = ser.get("port")
        ports = port if isinstance(port, (list, tuple)) else [port]
        if not ports or not all(isinstance(p, str) and p for p in ports):
            raise ConfigError("serial.port: required with backend: serial (the board's device, e.g. /dev/ttyUSB0, "
                              "or a list of them for boards joined by link cables)")
        if len(set(ports)) != len(ports):
            raise ConfigError(f"serial.port: a device is listed twice: {ports}")
        baud = _int(ser.get("baud", 115200), "serial.baud", 1)
        secs = {}
        for key, default in (("timeout_s", 2.0), ("quiet_s", 0.1)):
            v = ser.get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"serial.{key}: expected a positive number of seconds, got {v!r}")
            secs[key] = float(v)
        serial = {"port": ports[0] if isinstance(port, str) else list(ports), "baud": baud, **secs}
    elif "serial" in raw:
        raise ConfigError(f"serial: only with backend: serial (the backend is {backend})")

    mem = _mapping(raw.get("memory"), "memory")
    _unknown(mem, ("bytes",), "memory.")
    # a board's memory is what it was built with: None means "read it from the board"
    mem_default = None if backend == "serial" else 1 << 20
    mem_bytes = parse_bytes(mem["bytes"], "memory.bytes") if "bytes" in mem else mem_default
    if mem_bytes is None:
        pass
    elif mem_bytes < MIN_MEMORY:
        raise ConfigError(f"memory.bytes: at least {MIN_MEMORY} bytes (rings, the spill window and 4 KiB of "
                          f"data), got {mem_bytes}")
    elif mem_bytes > 1 << engine.addr_width:
        raise ConfigError(f"memory.bytes: {mem_bytes} bytes do not fit the engine's {engine.addr_width}-bit "
                          f"addresses")
    from ..sim.golden.partitions import SPLITS

    drv = _mapping(raw.get("driver"), "driver")
    _unknown(drv, ("sram_split", "buffers", "chunk_bytes", "step_timeout"), "driver.")
    step_timeout = _int(drv.get("step_timeout", 0), "driver.step_timeout", 0)
    if step_timeout >= 1 << 32:
        raise ConfigError(f"driver.step_timeout: at most {(1 << 32) - 1} cycles (the register's width), got "
                          f"{step_timeout}")
    chunk_rule = drv.get("chunk_bytes", "max")
    if chunk_rule not in CHUNK_RULES:
        raise ConfigError(f"driver.chunk_bytes: expected one of {', '.join(CHUNK_RULES)}, got {chunk_rule!r}")
    split = drv.get("sram_split", "residence")
    if split not in SPLITS:
        raise ConfigError(f"driver.sram_split: expected one of {', '.join(SPLITS)}, got {split!r}")
    buffers = drv.get("buffers")
    if buffers is not None:
        _int(buffers, "driver.buffers", 1)
        if buffers > engine.n_buffers:
            raise ConfigError(f"driver.buffers: the engine has {engine.n_buffers} chunk buffers, got {buffers}")
    return SystemConfig(topology=topo.spec, engine=engine, backend=backend, clock_mhz=float(clock), seed=seed,
                        latency=latency, rate=rate, faults=faults or None, memory_bytes=mem_bytes, serial=serial,
                        sram_split=split, buffers=buffers, chunk_bytes=chunk_rule, step_timeout=step_timeout,
                        source=raw)


def _yaml(text, where):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {' '.join(str(e).split())}") from None   # one line
