# The two commands of the README:
#   make run    set up .venv (first time) and run the main job on the bundled data
#   make test   set up .venv (first time) and run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test bench setup clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# CPU build first: a bare "torch" would pull several GB of CUDA packages.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/fullrank train configs/lm/shakespeare_char.yaml resume=auto

test: $(STAMP)
	$(BIN)/ruff check src tests bench docs/img
	$(BIN)/ruff format --check src tests bench docs/img
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 -q

# side-by-side benchmarks against the peers (installs them first; about half an hour on 2 cores)
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/run.py
	$(BIN)/python bench/scaling.py

clean:
	rm -rf $(VENV) runs .pytest_cache
