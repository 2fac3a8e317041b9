#!/usr/bin/env bash
# One batched H200 session (device tool): install, GPU tests, then a benchmark, logs under $OUT.
# Usage: scripts/h200_session.sh [bench args...]   (env TESTS="-m gpu" selects tests, BENCH=0 skips)
set -uo pipefail
OUT=${OUT:-/tmp/autosage-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/cupy-cache
start=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; autosage info; } >"$OUT/info.log" 2>&1
cat "$OUT/info.log"
if [ "${TESTS:-gpu}" != "none" ]; then
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -m "${TESTS:-gpu}" -rfE -p no:cacheprovider \
      -o addopts="" -rs --timeout=120 ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/test-gpu.log" | tail -n 60
fi
echo "tests done after $(( $(date +%s) - start )) s"
if [ "${BENCH:-1}" != "0" ]; then
  BENCH_OUT=${BENCH_OUT:-results/h200-run}
  timeout "${BENCH_TIMEOUT:-300}" autosage bench "$@" --out "$BENCH_OUT" 2>"$OUT/bench.stderr" | tee "$OUT/bench.stdout" | tail -n 40
  tail -n 30 "$OUT/bench.stderr"
  tar czf "$OUT/results.tgz" "$BENCH_OUT" 2>/dev/null
fi
echo "session done after $(( $(date +%s) - start )) s"
