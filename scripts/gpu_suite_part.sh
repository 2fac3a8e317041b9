#!/usr/bin/env bash
# scripts/gpu_suite_part.sh OUT PART [pytest args]: the GPU suite's odd (PART=1) or even (PART=0)
# test files, for a device call that cannot hold the whole suite (each half takes about two
# minutes at -n 8 on the H200). The README's GPU examples are left out: they take minutes of their
# own (run tests/test_readme_gpu.py in a call of its own).
OUT=$1; PART=$2; shift 2
files=$(ls tests/test_*.py | awk "NR%2==$PART")
timeout "${SUITE_CAP:-300}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -o addopts="" -rfE $files \
  --deselect tests/test_readme_gpu.py::test_the_readme_gpu_examples_run_verbatim "$@" 2>&1 \
  | tee "$OUT/test-gpu-$PART.log" | tail -n 30
