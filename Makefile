# bloomwise: `make demo`, `make test`, `make bench`, `make wheel`. Each target creates .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
NATIVE := $(wildcard src/bloomwise/_native/*.pyx src/bloomwise/_native/*.pxd src/bloomwise/_native/*.h)
BUILD_DEPS := "setuptools>=77" wheel "Cython>=3.0.8"

.PHONY: demo test bench bench-full wheel build clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(BUILD_DEPS)

# Editable install: Python changes apply at once; the compiled core is rebuilt when its sources change.
$(VENV)/.installed-%: $(BIN)/python $(NATIVE) pyproject.toml setup.py
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[$*]"
	@touch $@

build: $(VENV)/.installed-test

demo: $(VENV)/.installed-plot
	$(BIN)/python scripts/demo.py

test: $(VENV)/.installed-test
	@bash scripts/system-deps.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The short run (about 10 minutes): the headline table and every target, at fewer sizes and runs (it says which).
bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/suite.py $(BENCH_ARGS)

# The whole suite: every size, rate and run (1-1.5 hours on 2 cores); results in benchmarks/results/.
bench-full: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/suite.py --full $(BENCH_ARGS)

# A manylinux wheel in dist/ (auditwheel repair --strip, Debian's patchelf; no generated C), then installed into a
# fresh virtual environment by tests/test_wheel.py: `bloomwise plan` and every extension module's import.
wheel: $(VENV)/.installed-test
	$(BIN)/python scripts/build_wheel.py --out dist
	BLOOMWISE_WHEEL=dist $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_wheel.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info src/bloomwise/_native/*.c src/bloomwise/_native/*.so
