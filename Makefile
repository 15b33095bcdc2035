# bloomwise: `make demo`, `make test`, `make bench`. Each target creates .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
NATIVE := $(wildcard src/bloomwise/_native/*.pyx src/bloomwise/_native/*.pxd src/bloomwise/_native/*.h)
BUILD_DEPS := "setuptools>=77" wheel "Cython>=3.0.8"

.PHONY: demo test bench build clean

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

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/suite.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info src/bloomwise/_native/*.c src/bloomwise/_native/*.so
