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
	$(BIN)/trials run sweeps/demo.yaml
	$(BIN)/analysis report demo
	@echo "MLflow UI on the same store: $(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db  (then open http://127.0.0.1:5000)"

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q tests
