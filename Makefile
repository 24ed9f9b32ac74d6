PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BACKENDS ?= tensorflow jax torch
PYTEST_ARGS ?=
# Two pytest workers (pytest-xdist), one test file each at a time: the suite is mostly
# single-threaded Python over tiny models, and two workers use both cores of the CI machine
# (measured: the fast tests on TensorFlow took 15.2 CPU-minutes in 8.2 minutes of wall time).
# Modules go out longest first (tests/conftest.py orders them by tests/module_seconds.json);
# `--no-loadscope-reorder` keeps that order (xdist would put the modules of fewest tests last,
# the long two-test kill-and-resume modules among them: TensorFlow 1,223 s, now 1,169 s).
# `make test XDIST=` runs in one process.
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: install test test-durations test-fast lint demo bible docs docs-run notebooks dist-check clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# `make install`: the package with `[dev]`, what `make test`, `lint`, `docs`, `notebooks` and
# `dist-check` need (every backend and extra, pytest, ruff, mkdocs, nbmake, build); each of
# those targets installs it first when pyproject.toml is newer than the last install.
install: $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"
	@touch $(VENV)/.installed $(VENV)/.installed-train

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"
	@touch $@ $(VENV)/.installed-train

# `make demo` alone installs only what training needs (`[train]`: TensorFlow, tf-text, the
# datasets, sacreBLEU; no JAX, PyTorch, docs or notebook tools); after `make install` it has it.
$(VENV)/.installed-train: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[train]"
	@touch $@

# Runs the whole suite once per Keras backend.
test: $(VENV)/.installed
	@set -e; for b in $(BACKENDS); do \
	  echo "=== KERAS_BACKEND=$$b ==="; \
	  KERAS_BACKEND=$$b $(BIN)/python -m pytest -q $(XDIST) --durations=15 $(PYTEST_ARGS) tests; \
	done

# Runs the suite on each backend and records each test module's seconds into
# tests/module_seconds.json (the order in which `make test` hands modules to its workers).
test-durations: $(VENV)/.installed
	@set -e; for b in $(BACKENDS); do \
	  KT_RECORD_MODULE_SECONDS=1 KERAS_BACKEND=$$b $(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS) tests; \
	done

test-fast: $(VENV)/.installed
	@set -e; for b in $(BACKENDS); do \
	  KERAS_BACKEND=$$b $(BIN)/python -m pytest -q -m "not slow" $(XDIST) $(PYTEST_ARGS) tests; \
	done

# ruff, and the package's layering (.ci/check_imports.py: no cycle, no upward or private
# import, no import inside a function that loads no framework).
lint: $(VENV)/.installed
	$(BIN)/ruff check keras_transformer tests
	$(BIN)/python .ci/check_imports.py

# The tiny Transformer learns Spanish -> English number names (configs/demo.toml): ~2-6 minutes
# on 2 CPU cores; prints exact match and BLEU, the samples right, exports runs/demo/saved_model.
demo: $(VENV)/.installed-train
	KERAS_BACKEND=$${KERAS_BACKEND:-tensorflow} $(BIN)/keras-transformer train --config configs/demo.toml

# Spanish -> English on the SWORD Bible (configs/bible.toml) for MINUTES minutes (default 60),
# then test BLEU (sacrebleu). Running it again continues a run the budget stopped.
# On Debian as root, the SWORD modules are installed first when missing (as .ci/run does);
# elsewhere `keras-transformer train` names the packages or $SWORD_PATH if they are absent.
SWORD_PACKAGES = sword-text-sparv sword-text-web
bible: $(VENV)/.installed-train
	@if [ -z "$$SWORD_PATH" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && ! dpkg -s $(SWORD_PACKAGES) >/dev/null 2>&1; then \
	  echo "installing the SWORD Bible modules: apt-get install $(SWORD_PACKAGES)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SWORD_PACKAGES); \
	fi
	KERAS_BACKEND=$${KERAS_BACKEND:-tensorflow} $(BIN)/keras-transformer train --config configs/bible.toml --minutes $${MINUTES:-60}

# Every Python block of README.md and docs/ run as written, the pages that take minutes
# included (tests/test_docs_run.py; `make test` skips those two).
docs-run: $(VENV)/.installed
	KT_DOCS_RUN=all KERAS_BACKEND=tensorflow $(BIN)/python -m pytest -q tests/test_docs_run.py

# Builds the sdist and wheel into dist/, installs the wheel with [jax] and with [tensorflow]
# into clean virtual environments and smoke-tests each outside the checkout.
dist-check: $(VENV)/.installed
	PY=$(BIN)/python bash .ci/check_dist.sh

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache

# Builds the site and fails on any warning. No `-q`: it drops warnings before `--strict`
# counts them, so a quiet strict build passes whatever it finds.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# Executes every example notebook top to bottom under the small configuration.
notebooks: $(VENV)/.installed
	KT_SMALL=1 KERAS_BACKEND=tensorflow $(BIN)/python -m pytest -q --nbmake $(XDIST) examples/
