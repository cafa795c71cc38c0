# The README's two commands: `make demo` (the main job) and `make test` (the tests).
# Each builds its own virtual environment on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

.PHONY: demo test install
install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/dspark train --preset small

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q tests
