# Two commands do all set-up on a fresh machine:
#   make run        -> venv + the run install + recommend a path for the default scenario (tripath recommend)
#   make test       -> venv + the run install + the test extra + ruff + the test suite (what CI runs)
# Other targets (`make help` prints this list):
#   make setup      -> venv + the run install only (pip install -e .)
#   make setup-test -> the same + the test extra (pip install -e '.[test]': every extra, pytest, ruff, Playwright)
#   make lint       -> ruff check
#   make bench      -> benchmarks/bench_simulator.py (fast path vs per-iteration reference)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The CPU wheel of torch first: a looser requirement would pull a 3 GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: help setup setup-test run test lint bench

setup: $(VENV)/.installed-run
setup-test: $(VENV)/.installed-test

# One sentinel per install, so either command may come first: the test install builds on the run install, and
# both are redone when pyproject.toml changes (the run sentinel is then newer than the test one).
$(VENV)/.installed-run: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-run
	$(PIP) install -q -e '.[test]'
	touch $@

run: setup
	$(VENV)/bin/tripath recommend data/scenarios/default.toml

lint: setup-test
	$(VENV)/bin/ruff check .

# The real-browser app test needs Debian's Chromium: installed where the machine can, else that test is skipped
# with a warning (scripts/ensure_chromium.sh), so a fresh machine with only Python and make passes.
test: setup-test lint
	@skip=$$(sh scripts/ensure_chromium.sh); TRIPATH_SKIP_BROWSER=$$skip $(VENV)/bin/pytest -q

bench: setup
	$(PY) benchmarks/bench_simulator.py

help:
	@sed -n 's/^#   //p' Makefile
