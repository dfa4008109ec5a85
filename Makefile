# Set-up and the two main jobs. Everything is installed into .venv from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: test report test-cudnn-host clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files: re-install when pyproject.toml changes.
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

$(VENV)/.report: pyproject.toml $(VENV)/.test
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,report]'
	touch $@

# The suite on CPU with the bounded, derandomized Hypothesis profile; both cores, one process each. One BLAS and
# OpenMP thread a process: two workers each spinning a pool as wide as the machine would share its two cores
# four ways (OpenBLAS's threads busy-wait), and no test judges speed (benchmarks/ choose their own threads).
# Bytecode is written even where the machine sets PYTHONDONTWRITEBYTECODE: the suite starts hundreds of Python
# processes (report workers, CLI runs, the GPU dry runs' pytest), and each would otherwise compile every module
# it imports, pytest's assertion rewriting of the test modules and of Hypothesis included, from source again.
SUITE_THREADS := env -u PYTHONDONTWRITEBYTECODE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
test: $(VENV)/.test
	$(BIN)/ruff check --quiet .
	$(SUITE_THREADS) $(BIN)/python -m pytest -n 2 --hypothesis-profile=ci

# cuDNN's host side on a CPU, no GPU needed: the ctypes declarations against cuDNN's headers, the descriptors
# the backend builds, statuses and error strings. Installs the nvidia-cudnn-cu13 wheel (0.5 GB) without its
# cuBLAS dependency, which nothing on the host side loads; `make test` runs these tests too once it is there.
$(VENV)/.cudnn-host: $(VENV)/.test
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps 'nvidia-cudnn-cu13>=9,<10'
	touch $@

test-cudnn-host: $(VENV)/.cudnn-host
	$(SUITE_THREADS) $(BIN)/python -m pytest -n 2 --hypothesis-profile=ci \
		compat_tests/tests/gpu/test_cudnn_headers.py compat_tests/tests/gpu/test_cudnn_backend.py

# The main job: every available backend against the float64 reference on the embedded default grid;
# it prints where the report is (reports/_scratch/default-TIMESTAMP/).
report: $(VENV)/.report
	$(BIN)/rnn-compat report --grid default

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
