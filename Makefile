# The README's two commands: `make demo` (the main job) and `make test` (the tests).
# Each builds its own virtual environment on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,hf]'
	touch $@

.PHONY: demo test install results
install: $(BIN)/.installed

# Both questions at CPU scale: the seed's system (demo-seed, backbone stage) and the
# paper's architecture (demo, drafter stage), each run, its timed primary response
# (train/step_ms, spec/speedup) measured by the interleaved timing pass, then attributed;
# then the follow-up the tool prints for the open question of question 2 that the cheapest
# two-arm study decides, run as printed to its verdict; then the recap, confirmations included.
# (Question 1's step-time terms are decided or not by the timing noise of the moment, and its
# val/bpb terms need hundreds of blocks: question 2's untimed responses are seeded, so the
# follow-up is the same on every run.) Its spec is the demo's own output (reports/ is rebuilt
# on every run), so a second `make demo` replaces it rather than meeting the last one's.
FOLLOW_UP := reports/demo-follow-up.yaml
demo: $(BIN)/.installed
	$(BIN)/trials run sweeps/demo-seed.yaml
	$(BIN)/trials time demo-seed --rounds 3 --steps 5
	$(BIN)/trials run sweeps/demo.yaml
	$(BIN)/trials time demo --rounds 3 --prompts 4
	@echo; echo "=== Question 1: the seed's system (experiment demo-seed) ==="
	$(BIN)/analysis report demo-seed
	@echo; echo "=== Question 2: the paper's architecture (experiment demo) ==="
	$(BIN)/analysis report demo
	@echo; echo "=== The follow-up: the open question the cheapest study decides, by the commands the tool prints ==="
	@rm -f $(FOLLOW_UP)
	@echo "$(BIN)/analysis plan demo --confirm next --out-spec $(FOLLOW_UP)"; \
	  out=$$($(BIN)/analysis plan demo --confirm next --out-spec $(FOLLOW_UP)) || exit 1; echo "$$out"; \
	  run=$$(echo "$$out" | sed -n 's/^  run it: //p'); \
	  if [ -n "$$run" ]; then echo "$$run"; PATH="$(CURDIR)/$(BIN):$$PATH"; eval "$$run"; fi
	@echo; echo "=== The sweeps and their MLflow links (serve them with: $(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --workers 1) ==="
	@$(BIN)/trials list
	@echo; echo "=== Recap: both questions, answered, and the follow-up ==="
	@$(BIN)/analysis recap demo-seed demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q --durations=20 tests

# The committed study reports, rebuilt from their committed runs with today's renderer.
results: $(BIN)/.installed
	$(BIN)/analysis results
