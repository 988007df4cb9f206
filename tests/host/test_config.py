"""System configuration files: defaults, overrides, and a clear error naming the key for every bad value."""

from fractions import Fraction

import pytest

from syncfabric.host.config import ConfigError, load_config, parse_bytes


def test_defaults_and_a_full_file(tmp_path):
    c = load_config({"topology": "ring:4"})
    assert (c.topology, c.backend, c.clock_mhz, c.memory_bytes) == ("ring:4", "amaranth", 1000.0, 1 << 20)
    assert c.engine.beat_bytes == 16 and c.latency is None and c.rate is None
    path = tmp_path / "sys.yaml"
    path.write_text("topology: torus:2x2x1\nbackend: verilator\nclock_mhz: 500\nseed: 7\n"
                    "engine:\n  profile: medium\n  landing_headers: 8\n"
                    "links:\n  latency: 20\n  rate: 1/8\nmemory:\n  bytes: 2MiB\n")
    c = load_config(str(path))
    assert c.topology == "torus:2x2x1" and c.backend == "verilator" and c.seed == 7
    assert c.engine.n_fsms == 8 and c.engine.landing_headers == 8 and c.engine.n_ports == 6
    assert c.latency == 20 and c.rate == Fraction(1, 8) and c.memory_bytes == 2 << 20
    assert c.cycles_to_us(1000) == 2.0
    assert load_config(str(path), backend="icarus").backend == "icarus"
    assert (c.sram_split, c.buffers) == ("residence", None)
    c = load_config({"topology": "torus:4x2x2", "engine": {"profile": "paper"},
                     "driver": {"sram_split": "ace", "buffers": 16}})
    assert (c.sram_split, c.buffers) == ("ace", 16)
    assert c.step_timeout == 0
    assert load_config({"topology": "ring:2", "driver": {"step_timeout": 5000}}).step_timeout == 5000


@pytest.mark.parametrize("raw, key", [
    ({}, "topology: required"),
    ({"topology": "ring:1x"}, "topology:"),
    ({"topology": 4}, "topology: expected a string"),
    ({"topology": "ring:4", "colour": 1}, "colour: unknown key"),
    ({"topology": "ring:4", "backend": "modelsim"}, "backend: expected one of"),
    ({"topology": "ring:4", "clock_mhz": 0}, "clock_mhz"),
    ({"topology": "ring:4", "engine": {"profile": "huge"}}, "engine.profile"),
    ({"topology": "ring:4", "engine": {"n_fsms": "four"}}, "engine.n_fsms: expected an integer"),
    ({"topology": "ring:4", "engine": {"n_fsm": 4}}, "engine.n_fsm: unknown key"),
    ({"topology": "ring:4", "engine": {"n_fsms": 3}}, "engine: bad ACE configuration"),
    ({"topology": "ring:4", "engine": []}, "engine: expected a mapping"),
    ({"topology": "ring:4", "seed": "x"}, "seed: expected an integer"),
    ({"topology": "ring:4", "links": {"latency": 0}}, "links.latency: must be at least 1"),
    ({"topology": "ring:4", "links": {"rate": 2}}, "links.rate"),
    ({"topology": "ring:4", "links": {"rate": "fast"}}, "links.rate"),
    ({"topology": "ring:4", "links": {"flip": 1}}, "links.flip: expected a probability"),
    ({"topology": "ring:4", "links": {"stall": "often"}}, "links.stall: expected a probability"),
    ({"topology": "ring:4", "links": {"drop": 0.01}}, "links.drop: lost or duplicated flits are recovered only"),
    ({"topology": "ring:4", "links": {"dup": 0.01}}, "links.dup: lost or duplicated flits are recovered only"),
    ({"topology": "switch:4", "engine": {"replay_flits": 64}}, "needs point-to-point links"),
    ({"topology": "ring:4", "engine": {"replay_flits": 12}}, "replay_flits=12 must be 0 or a power of two"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": "/dev/x"}, "engine": {"replay_flits": 64}},
     "do not retransmit"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": "/dev/x"}, "links": {"flip": 0.1}},
     "no fault injection"),
    ({"topology": "ring:4", "memory": {"bytes": "lots"}}, "memory.bytes: expected a size"),
    ({"topology": "ring:4", "memory": {"bytes": 4096}}, "memory.bytes: at least"),
    ({"topology": "ring:4", "memory": {"bytes": "8GiB"}}, "32-bit addresses"),
    ({"topology": "ring:2", "backend": "serial"}, "serial.port: required"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": "/dev/x", "timeout_s": 0}}, "serial.timeout_s"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": "/dev/x", "speed": 9600}},
     "serial.speed: unknown key"),
    ({"topology": "ring:2", "serial": {"port": "/dev/x"}}, "serial: only with backend: serial"),
    ({"topology": "ring:4", "driver": {"sram_split": "bytes"}}, "driver.sram_split: expected one of residence, ace"),
    ({"topology": "ring:4", "driver": {"buffers": 0}}, "driver.buffers: must be at least 1"),
    ({"topology": "ring:4", "driver": {"buffers": 99}}, "driver.buffers: the engine has"),
    ({"topology": "ring:4", "driver": {"split": "ace"}}, "driver.split: unknown key"),
    ({"topology": "ring:4", "driver": {"step_timeout": -1}}, "driver.step_timeout: must be at least 0"),
    ({"topology": "ring:4", "driver": {"step_timeout": 1 << 32}}, "driver.step_timeout: at most"),
    ({"topology": "ring:4", "driver": {"step_timeout": "1ms"}}, "driver.step_timeout: expected an integer"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": []}}, "serial.port: required"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": ["/dev/a", 3]}}, "serial.port: required"),
    ({"topology": "ring:2", "backend": "serial", "serial": {"port": ["/dev/a", "/dev/a"]}}, "listed twice"),
])
def test_bad_configurations_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(")):
        load_config(raw)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config("topology: [ring:4\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config("- a\n- b\n")


def test_binary_and_control_character_files_are_one_line_errors(tmp_path, capsys):
    """A binary file given as the system YAML (a raw 'utf-8 codec' message before) and one with control
    characters (PyYAML's multi-line message) are ConfigErrors naming the file; `bench --system` and `perf
    iteration --workload` print them as one error line, before any simulator starts."""
    from syncfabric.host.cli import main

    binary, control = tmp_path / "bin.yaml", tmp_path / "ctl.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01binary")
    control.write_bytes(b"topology: ring:2\n\x00\x01\x02")
    with pytest.raises(ConfigError, match=r"bin.yaml': not a UTF-8 text \(YAML\) file, byte 0 is b'\\xff'"):
        load_config(str(binary))
    with pytest.raises(ConfigError, match="ctl.yaml: not valid YAML: unacceptable character") as exc:
        load_config(str(control))
    assert "\n" not in str(exc.value)
    for argv in (["bench", "allreduce", "--system"], ["perf", "iteration", "--workload"]):
        for path, msg in ((binary, "not a UTF-8 text (YAML) file"), (control, "not valid YAML")):
            assert main([*argv, str(path)]) == 2
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1 and str(path) in err and msg in err
            assert err.startswith(f"syncfabric {argv[0]}")


def test_sizes():
    assert parse_bytes("64K") == 65536 and parse_bytes("1MiB") == 1 << 20 and parse_bytes(4096) == 4096
    for bad in ("-1", "1 parsec", True, 0, 1.5):
        with pytest.raises(ConfigError):
            parse_bytes(bad)


def test_serial_backend_takes_memory_and_clock_from_the_board_unless_given():
    conf = load_config({"topology": "ring:2", "backend": "serial", "serial": {"port": "/dev/ttyUSB1"}})
    assert conf.memory_bytes is None and conf.serial == {"port": "/dev/ttyUSB1", "baud": 115200,
                                                         "timeout_s": 2.0, "quiet_s": 0.1}
    conf = load_config({"topology": "ring:2", "backend": "serial", "serial": {"port": "p"}, "memory": {"bytes": "16K"}})
    assert conf.memory_bytes == 16384
    # boards joined by link cables: one device per board, in rank order
    conf = load_config({"topology": "ring:2", "backend": "serial", "serial": {"port": ["/dev/a", "/dev/b"]}})
    assert conf.serial["port"] == ["/dev/a", "/dev/b"]


def test_a_missing_serial_device_is_a_clear_error():
    from syncfabric.host.serial import SerialError
    from syncfabric.host.system import System
    with pytest.raises(SerialError, match="cannot open /nonexistent/tty"):
        System({"topology": "ring:2", "backend": "serial", "serial": {"port": "/nonexistent/tty"}})


def test_a_board_too_small_for_the_host_layout_is_refused(monkeypatch):
    """A board built with less memory per endpoint than the host's layout needs is refused when the system
    opens (naming the fix), and its port is closed, instead of failing at the first registration."""
    import syncfabric.host.serial as serial
    from syncfabric.host.system import System

    class TinyBoard:
        n_endpoints, mem_bytes, clk_hz = 2, 4096, 25_000_000
        closed = False

        def __init__(self, *args, **kw):
            TinyBoard.instance = self

        def close(self):
            self.closed = True

    monkeypatch.setattr(serial, "SerialBoard", TinyBoard)
    with pytest.raises(ConfigError, match=r"4096 bytes of memory per endpoint; the host needs at least 8192 .*"
                                          r"--mem-bytes"):
        System({"topology": "ring:2", "backend": "serial", "serial": {"port": "/dev/ttyUSB1"}})
    assert TinyBoard.instance.closed


def test_engine_dtypes():
    conf = load_config({"topology": "ring:2", "engine": {"profile": "board", "dtypes": ["int32", "fp32"]}})
    assert conf.engine.dtypes == ("fp32", "int32") and conf.engine.dtype_mask == 0b1001
    assert conf.engine.supports("fp32") and not conf.engine.supports("bf16") and not conf.engine.supports(9)
    assert load_config({"topology": "ring:2"}).engine.dtypes == ("fp32", "fp16", "bf16", "int32")
    for bad, message in ((["fp8"], "engine: .*unknown dtype 'fp8'"), ("fp32", "engine.dtypes: expected a list"),
                         ([], "engine: .*at least one"), ([1], "engine.dtypes: expected a list")):
        with pytest.raises(ConfigError, match=message):
            load_config({"topology": "ring:2", "engine": {"dtypes": bad}})
