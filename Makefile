# Set-up and the two main jobs. Everything is installed into .venv from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: test report clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files: re-install when pyproject.toml changes.
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

$(VENV)/.report: pyproject.toml $(VENV)/.test
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,report]'
	touch $@

# The suite on CPU with the bounded, derandomized Hypothesis profile; both cores.
test: $(VENV)/.test
	$(BIN)/python -m pytest -n 2 --hypothesis-profile=ci

# The main job: every available backend against the float64 reference on the embedded default grid;
# it prints where the report is (reports/_scratch/default-TIMESTAMP/).
report: $(VENV)/.report
	$(BIN)/rnn-compat report --grid default

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
