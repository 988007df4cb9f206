"""``yosys-abc`` as YoWASP's SBY expects it, run on the older ABC that ships with Debian's yosys (0.23).

SBY (``abc pdr``) calls ``$ABC -c '<commands>'``. Two differences matter, both handled here and nothing else:

* it passes ``pdr -l`` (log each proved output), an option the older ``pdr`` refuses: dropped when the ABC
  at hand does not list it (SBY still reads the overall "Property proved." line);
* the older ``write_cex -a`` writes the AIGER witness without its ``1`` / ``b0`` header and with ``# DONE``
  glued to the last input line, which ``yosys-witness aiw2yw`` rejects: rewritten into the standard form, so
  that SBY can replay a counterexample into a VCD trace.

Run as ``python abc_compat.py -c '<commands>'`` (SBY's ``ABC`` variable, set by :mod:`formal_helpers`).
"""

import os
import re
import subprocess
import sys

ABC = os.environ.get("SYNCFABRIC_YOSYS_ABC", "yosys-abc")


def _pdr_has_l():
    usage = subprocess.run([ABC, "-c", "pdr -h"], capture_output=True, text=True).stdout
    return re.search(r"^\s*-l\b", usage, re.M) is not None


def _fix_witness(path):
    """Rewrite an old-style AIGER witness (no header, ``# DONE`` glued on) into the standard form."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        text = f.read()
    if text.startswith("1\nb") or text.startswith("0\n"):
        return
    frames = text.replace("# DONE", "\n").split()
    with open(path, "w") as f:
        f.write("1\nb0\n" + "\n".join(frames) + "\n.\n")


def main(argv):
    cmd = argv[argv.index("-c") + 1]
    if "pdr -v -l" in cmd and not _pdr_has_l():
        cmd = cmd.replace("pdr -v -l", "pdr -v")
    rc = subprocess.call([ABC, *argv[:argv.index("-c")], "-c", cmd, *argv[argv.index("-c") + 2:]])
    m = re.search(r"write_cex -a (\S+?);?\s*$", cmd)
    if m:
        _fix_witness(m.group(1))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
