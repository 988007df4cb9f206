#!/usr/bin/env python3
"""Refresh ``tests/durations.json`` from the "slowest N durations" section of a ``make test`` log.

``tests/conftest.py`` starts the tests listed there longest first, so that no long simulation starts last
on one worker while the other idles. The figures only order the tests; a stale or missing entry changes the
order, never a result. Usage: ``python scripts/update_test_durations.py ci.log`` (``make test`` prints the
40 slowest tests).
"""
import json
import re
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "tests" / "durations.json"
LINE = re.compile(r"^([\d.]+)s call\s+(\S+)$")


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    found = {}
    for line in Path(argv[1]).read_text(errors="replace").splitlines():
        m = LINE.match(line.strip())
        if m:
            found[m.group(2)] = round(float(m.group(1)), 1)
    if not found:
        sys.exit(f"{argv[1]}: no 'slowest durations' lines (NNN.NNs call tests/...::name)")
    PATH.write_text(json.dumps(dict(sorted(found.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
    print(f"{PATH}: {len(found)} tests, {sum(found.values()):,.0f} s")


if __name__ == "__main__":
    main(sys.argv)
