# syncfabric: `make demo` runs the main job, `make test` runs the test suite. Both set up what they need first.
VENV    ?= .venv
PYTHON  ?= python3
JOBS    ?= auto
PYTEST_ARGS ?=
STAMP   := $(VENV)/.syncfabric-setup

export AMARANTH_USE_YOSYS := builtin

.PHONY: setup demo test test-slow test-all clean clean-cache

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh Makefile
	sh scripts/setup.sh "$(VENV)" "$(PYTHON)" test,fpga,perf,torch
	@touch $@

demo: setup
	$(VENV)/bin/syncfabric demo

# The default suite: everything except the long sweeps (marked slow), in parallel; it includes one small
# bitstream build and one small area/power report (the fpga marker).
test: setup
	$(VENV)/bin/python -m pytest -n $(JOBS) --dist worksteal -m "not slow" --durations=40 $(PYTEST_ARGS)

# Long sweeps and full vector counts (e.g. 100,000 random ALU beats per dtype/op on both simulators).
test-slow: setup
	$(VENV)/bin/python -m pytest -n $(JOBS) --dist worksteal -m slow $(PYTEST_ARGS)

test-all: setup
	$(VENV)/bin/python -m pytest -n $(JOBS) --dist worksteal $(PYTEST_ARGS)

clean:
	rm -rf build .pytest_cache .hypothesis

# The Verilator blocks (engines) every clone on this machine shares (~/.cache/syncfabric/verilator-blocks, or
# SYNCFABRIC_BLOCK_CACHE); not while a simulation runs.
clean-cache: setup
	$(VENV)/bin/python -c "import shutil; from syncfabric.host.transports.verilator_blocks import block_cache; \
	d = block_cache(); shutil.rmtree(d, ignore_errors=True); print('removed', d)"
