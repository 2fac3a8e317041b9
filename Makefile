PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest

.PHONY: install test test-gpu bench bench-kernels bench-full clean

install:
	$(PYTHON) -m pip install -e '.[test]'

# CPU suite (CI): everything not marked gpu.
test:
	$(PYTEST) -q -m "not gpu" -n 2 --dist loadfile

# GPU suite: run on the H200.
test-gpu:
	$(PYTEST) -q -m gpu -n 8

# Default suite, about a minute on one GPU.
bench:
	autosage bench

bench-kernels:
	autosage bench --suite kernels --all-schedules --oracle

bench-full:
	autosage bench --suite full --oracle

clean:
	rm -rf build dist *.egg-info .pytest_cache
