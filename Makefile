PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest
# Test files for `make test` (default: all of tests/); CI's bare-venv step names a few.
TESTS ?=

.PHONY: install test test-gpu test-readme-gpu bench bench-kernels bench-full clean

# pip hides a build's output: say up front what the minute of nvcc is (pip install -v shows it).
install:
	@echo "autosage: installing; where nvcc is on the PATH this builds the kernels' cubins (about a minute; AUTOSAGE_BUILD_CUBINS=0 skips them)"
	$(PYTHON) -m pip install -e '.[test]'

# CPU suite (CI): everything not marked gpu.
test:
	$(PYTEST) -q -m "not gpu" -n 2 --dist loadfile $(TESTS)

# GPU suite: run on the H200 (about 5 minutes with -n 8). The README's GPU examples run verbatim
# apart (test-readme-gpu): they are minutes of GPU work on their own (the attention suite, a compile
# of every kernel).
test-gpu:
	$(PYTEST) -q -m gpu -n 8 --deselect tests/test_readme_gpu.py::test_the_readme_gpu_examples_run_verbatim

test-readme-gpu:
	$(PYTEST) -q -m gpu tests/test_readme_gpu.py

# Default suite, about a minute on one GPU.
bench:
	autosage bench

bench-kernels:
	autosage bench --suite kernels --all-schedules --oracle

bench-full:
	autosage bench --suite full --oracle

clean:
	rm -rf build dist *.egg-info .pytest_cache
