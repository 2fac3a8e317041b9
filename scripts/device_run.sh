#!/usr/bin/env bash
# One call on the lent H200 (the device tool runs it in the repository root, with .whl carried):
# install the carried wheels and the project, then the steps named in STEPS, each cut to what is
# left of DEADLINE_S (the tool stops a call at 600 s). Logs and results come back under $OUT.
#   STEPS    space-separated: tests first_run first_run_nvrtc profile train exp bench (default:
#            tests first_run bench)
#   EXP, EXP_CAP  the exp step's shell command (an experiment script writing under $OUT) and cap (s)
#   BENCH    arguments for `autosage bench` (the results directory is RESULTS)
#   TRAIN_ARGS, TRAIN_CAP  arguments and time cap (s) of the train step (`autosage bench --suite
#            training`, results in $OUT/train)
#   PROFILE_TUNES  for the profile step: ';'-separated `autosage tune` argument lists, each run three times
#            (the first fills the kernel cache) and the second profiled (cProfile: top 70
#            cumulative, top 25 own time) into $OUT/profile-N.txt, then a third unprofiled with
#            -X importtime (importtime-N.txt) and its wall time: where a warm-miss tune's time goes
#   MB_GRAPH, MB_ARGS, MB_CAP  for the minibatch step: the captured mini-batch step's GPU tests, then
#            `autosage bench --suite minibatch --dataset MB_GRAPH MB_ARGS` (results in $OUT/mb-MB_GRAPH)
#            within MB_CAP seconds (default products-like, 420 s)
#   suite0, suite1  steps: the GPU suite's even or odd test files (scripts/gpu_suite_part.sh)
#   RESULTS  results directory of the run (default results/h200-run); its decision cache is
#            RESULTS/decisions.json
set -uo pipefail
start=$(date +%s); deadline=${DEADLINE_S:-570}
left() { echo $(( deadline - ($(date +%s) - start) )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
OUT=${OUT:-/tmp/autosage-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy-cache}
# The image's site-packages hold no bytecode and are read-only, so every process would compile
# NumPy's, SciPy's and pandas' modules again (0.5 s of a tune); a pip-installed environment has
# its bytecode. A writable bytecode cache gives the processes here what an install gives a user.
# (The image sets PYTHONDONTWRITEBYTECODE, too: unset, so that the warm-up below writes it.)
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pycache}
# Install-time cubins built elsewhere (CUBINS_TGZ: a tar.gz of autosage_cli/_cubins) where this
# machine has no nvcc; with nvcc the editable install below builds them itself.
[[ -n ${CUBINS_TGZ:-} && -f ${CUBINS_TGZ:-} ]] && tar xzf "$CUBINS_TGZ" -C autosage_cli
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
# An installed package has its bytecode; the device copy (and the wheels installed --no-compile)
# would otherwise compile every module in every new process (0.55 s of a 1.5 s cache hit there),
# which no user's install pays.
python3 -m compileall -q autosage_cli /tmp/site >>"$OUT/install.log" 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; autosage info
  echo "nvcc: $(command -v nvcc || echo none)"; env | grep -E '^PYTHON|^CUDA' | sort; tail -n 3 "$OUT/install.log"
  } >"$OUT/info.log" 2>&1
# One untimed tune per op on a tiny generated graph: the bytecode cache then holds every module a
# tune imports (the first_run step measures tunes, not Python compiling its own sources).
# A Matrix Market file as well (reading one imports pandas and SciPy), another one than any measured.
for op in "spmm --width 64" "sddmm --width 64" "attention --width 64 --heads 4"; do
  for graph in "--dataset er-200k" "datasets/cora.mtx.gz"; do
    CUPY_CACHE_DIR=/tmp/warm-kernels autosage tune $graph --op $op --cache /tmp/warm.json --json \
        >/dev/null 2>>"$OUT/install.log"; done; done
head -n 30 "$OUT/info.log"
RESULTS=${RESULTS:-results/h200-run}
for step in ${STEPS:-tests first_run bench}; do
  echo "== $step (at $(( $(date +%s) - start )) s, $(left) s left)"
  case $step in
    tests) timeout "$(cap ${TEST_CAP:-330})" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -o addopts="" -rfE \
               ${TEST_ARGS:-} 2>&1 | tee "$OUT/test-gpu.log" | tail -n 45 ;;
    first_run) PROFILE=1 timeout "$(cap 150)" scripts/first_run.sh "$OUT/first_run.csv" 2>"$OUT/first_run.log";
               tail -n 5 "$OUT/first_run.log"; cat "$OUT/first_run.csv" ;;
    first_run_nvrtc)   # the same without the install-time cubins: every kernel compiles with NVRTC
               AUTOSAGE_PREBUILT=0 timeout "$(cap 150)" scripts/first_run.sh "$OUT/first_run-nvrtc.csv" \
                   2>"$OUT/first_run-nvrtc.log"; tail -n 3 "$OUT/first_run-nvrtc.log"; cat "$OUT/first_run-nvrtc.csv" ;;
    train) mkdir -p "$OUT/train"
           timeout "$(cap ${TRAIN_CAP:-150})" autosage bench --suite training --out "$OUT/train" \
               --cache "$OUT/train/decisions.json" ${TRAIN_ARGS:-} 2>"$OUT/train.stderr" | tail -n 40
           tail -n 25 "$OUT/train.stderr" ;;
    profile) n=0; IFS=';' read -ra tunes <<<"${PROFILE_TUNES:-}"
             for t in "${tunes[@]}"; do n=$((n + 1))
               timeout "$(cap 120)" autosage tune $t --cache "$OUT/profile-$n.json" --json >/dev/null 2>&1
               timeout "$(cap 120)" python3 -m cProfile -o "$OUT/profile-$n.prof" -m autosage_cli.cli tune $t \
                   --retune --cache "$OUT/profile-$n.json" >"$OUT/profile-$n.log" 2>&1
               python3 -c "import pstats, sys; s = pstats.Stats(sys.argv[1], stream=sys.stdout); s.sort_stats('cumulative').print_stats(70); s.sort_stats('tottime').print_stats(25)" \
                   "$OUT/profile-$n.prof" >"$OUT/profile-$n.txt" 2>&1; tail -n 8 "$OUT/profile-$n.log"
               # the same miss again, unprofiled, with each import's time (-X importtime) and the wall
               t0=$(date +%s.%N); timeout "$(cap 120)" python3 -X importtime -m autosage_cli.cli tune $t --retune \
                   --cache "$OUT/profile-$n.json" --json >"$OUT/profile-$n.json.out" 2>"$OUT/importtime-$n.txt"
               echo "unprofiled miss: $(awk "BEGIN{print $(date +%s.%N) - $t0}") s wall" | tee -a "$OUT/profile-$n.txt"; done ;;
    exp)   # an experiment script (EXP: a shell command; it writes what it keeps under $OUT)
           timeout "$(cap ${EXP_CAP:-300})" bash -c "${EXP:-true}" 2>&1 | tee "$OUT/exp.log" | tail -n 60 ;;
    minibatch) mb="$OUT/mb-${MB_GRAPH:-products-like}"; mkdir -p "$mb"
           timeout "$(cap 150)" python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" -rfE \
               tests/test_batch_capture_gpu.py 2>&1 | tee "$OUT/test-batch-capture.log" | tail -n 20
           timeout "$(cap ${MB_CAP:-420})" autosage bench --suite minibatch --dataset "${MB_GRAPH:-products-like}" \
               ${MB_ARGS:-} --out "$mb" --cache "$mb/decisions.json" 2>"$mb/stderr.log" | tail -n 30
           tail -n 12 "$mb/stderr.log" ;;
    suite0|suite1) SUITE_CAP=$(cap 300) scripts/gpu_suite_part.sh "$OUT" "${step#suite}" ;;
    bench) mkdir -p "$RESULTS"
           timeout "$(cap 600)" autosage bench ${BENCH:-} --out "$RESULTS" --cache "$RESULTS/decisions.json" \
               2>"$OUT/bench.stderr" | tail -n 60; tail -n 15 "$OUT/bench.stderr"
           tar czf "$OUT/results.tgz" "$RESULTS" ;;
  esac
done
# The device tool returns at most 8 files from $OUT, 16 MiB each: pack everything into one archive,
# but files over 4 MiB (a decision cache's saved batches) only by name and size (big-files.txt).
(cd "$OUT" && find . -type f -size +4M ! -name '*.prof' -printf '%s %p\n' >big-files.txt
 find . -type f -size -4097k ! -name '*.prof' >/tmp/packed.txt
 tar czf /tmp/all.tgz -T /tmp/packed.txt && rm -rf ./* && mv /tmp/all.tgz all.tgz)
echo "done after $(( $(date +%s) - start )) s"
