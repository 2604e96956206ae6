# The two commands of the README. Each sets up everything it needs on a fresh machine.
#   make demo   the main job on its built-in default: selfattn explain on 一只蓝色怪兽走进森林
#   make test   the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch is pinned in the install command: a CPU build of 2.13.0 lies on this machine's disk,
# and an unpinned resolve could pull a several-GB CUDA build instead.
TORCH  := torch==2.13.0

.PHONY: demo test setup setup-test clean

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check $(TORCH) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q --disable-pip-version-check $(TORCH) -e '.[test]'
	touch $@

demo: setup
	$(BIN)/selfattn explain

test: setup-test
	bash scripts/setup-browser.sh   # Debian chromium + fonts-wqy-microhei for the browser tests
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
