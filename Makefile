# Two commands do all the set-up on a fresh machine (Python 3.11+, Java 17):
#   make demo   creates .venv, installs a3m with everything it needs, runs the main job
#   make test   same set-up, runs the whole suite (the docs build included)
#   make docs   the documentation site, docs/_build/html (warnings are errors)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean venv docs native native-check

venv: $(STAMP)

# The compiled fast path (setup.py, mypyc) is rebuilt when a compiled module's source changes
# (the list is a3m/_compiled.py's, which setup.py reads too): pip installs everything else,
# then tools/pgo_build.py builds the compiled modules guided by a short training run (GCC 10
# or later; A3M_PGO=0, or another compiler: one plain build).
COMPILED_SOURCES := $(shell $(PYTHON) -c "import runpy; print(' '.join(runpy.run_path('src/a3m/_compiled.py')['sources']('src')))")
# The native data plane (setup.py, setuptools-rust) likewise when a Rust source changes.
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs native/src/*/*.rs)

$(STAMP): pyproject.toml setup.py tools/pgo_build.py $(COMPILED_SOURCES) $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip wheel 'setuptools>=77' >/dev/null
	A3M_NO_MYPYC_BUILD=1 $(BIN)/python -m pip install -e '.[spark,bench,dev,uvloop,docs,metrics]'
	$(BIN)/python tools/pgo_build.py
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/a3m demo

SOURCES_RUN_SKIP := \
	--deselect tests/test_compiled.py::test_a_failed_compilation_leaves_the_pure_package \
	--deselect tests/sim/test_sim_exon.py::test_long_run_two_nodes_both_directions \
	--deselect tests/sim/test_sim_exon.py::test_address_changes_mid_stream \
	--deselect tests/sim/test_sim_exon.py::test_large_fragmented_messages_under_loss

# Two workers (pytest-xdist): most tests wait on sockets, timers and other processes, not on
# the CPU. The Spark tests share one worker (one JVM at a time), the network-namespace ones
# another group (tests/conftest.py). PARALLEL= runs the suite in one process.
PARALLEL ?= -n 2 --dist loadgroup

# The native crate's own checks, where a Rust toolchain is (without one the set-up warned and
# the Python twins run; the suite below says which path it ran).
CARGO ?= cargo
native-check:
	@if command -v $(CARGO) >/dev/null 2>&1; then \
		cd native && $(CARGO) clippy --all-features --all-targets -- -D warnings \
		&& $(CARGO) test; \
	else echo "no Rust toolchain: cargo test and clippy skipped (the Python data plane runs)"; fi

test: $(STAMP) native-check
	$(BIN)/ruff check src tests tools
	$(BIN)/mypy
	$(MAKE) --no-print-directory docs
	$(BIN)/python -m pytest -q $(PARALLEL)
	# the Python sources of the compiled cores, through their own tests and the simulations,
	# and of the compiled runtime modules, through the drivers' and the node's tests; the
	# longest runs (the same code paths as shorter ones, at length) and the build test (it
	# does not read A3M_PURE_PYTHON) ran above already
	A3M_PURE_PYTHON=1 $(BIN)/python -m pytest -q $(PARALLEL) tests/exon tests/core tests/patterns tests/sim tests/test_compiled.py \
		tests/runtime/test_runtime_driver.py tests/runtime/test_runtime_node.py tests/runtime/test_runtime_aio.py $(SOURCES_RUN_SKIP)

# The site: MyST pages and the API reference from the docstrings (docs/conf.py). Every run
# reads every page again (-E), so a warning is never hidden by an earlier build; -n: every
# cross-reference must resolve; -W --keep-going: all warnings listed, then a failure.
docs: $(STAMP)
	$(BIN)/sphinx-build -E -n -W --keep-going -q -b html docs docs/_build/html

lint: $(STAMP)
	$(BIN)/ruff check src tests tools

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/a3m bench transport --json

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info docs/_build
	find src -name '*.so' -delete
	rm -f src/a3m/_compiled_profile.json

# The native module alone, into the source tree (a Rust edit without the whole set-up):
# cargo builds it, the .so lands where `pip install -e .` puts it.
native: $(STAMP)
	cd native && cargo build --release --features python
	cp native/target/release/liba3m_native.so "src/a3m/_native$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
