#!/usr/bin/env bash
# What a new user waits for: end-to-end wall time of `autosage tune`, each in a new process,
#   1. the first tune of each op with an EMPTY kernel cache (CUPY_CACHE_DIR: a fresh folder),
#   2. the same tune again in a new process, kernels on disk but no cached decision (it probes),
#   3. the same tune once more, now a decision-cache hit,
# plus `autosage compile` of every kernel into an empty cache (and, on it, one first tune per op of
# the first graph: kernel_cache "compiled"). One CSV row per command. Column `prebuilt`: "on" when
# the install-time cubins (autosage_cli/_cubins, built where nvcc was present) are current and used,
# "off" when they are missing or stale or AUTOSAGE_PREBUILT=0 (kernels then compile with NVRTC).
#
# Usage: scripts/first_run.sh OUT.csv
#   GRAPHS   graphs to tune, space-separated: a file, or dataset:NAME
#            (default: datasets/bcsstk16.mtx.gz dataset:er-200k, 0.29M and 0.8M nonzeros)
#   AUTOSAGE the command to run (default: autosage; e.g. "python3 -m autosage_cli.cli")
#   PROFILE=1 also profiles one cache-hit tune (cProfile, top 30 by cumulative time) into
#            OUT.hit-profile.txt: where a hit's wall time goes (imports, CUDA init, graph load)
# Needs a GPU; a minute or two on an H200. Progress and per-run wall times go to stderr.
set -euo pipefail
out=${1:?usage: scripts/first_run.sh OUT.csv}
out=$(realpath -m "$out")
cd "$(dirname "$0")/.."                                # datasets/ paths are relative to the repo
graphs=${GRAPHS:-"datasets/bcsstk16.mtx.gz dataset:er-200k"}
autosage=${AUTOSAGE:-autosage}
cases=("spmm 64 1" "sddmm 64 1" "attention 64 4")   # op, width, heads
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
echo "command,op,graph,nnz,kernel_cache,decision_cache,prebuilt,wall_s,compile_ms,modules_prebuilt,modules_compiled,probe_ms,total_ms,decision" >"$out"
prebuilt=$($autosage info --json | python3 -c "import json, os, sys; p = json.load(sys.stdin)['prebuilt_kernels']
print('on' if p['current'] and p['modules'] and os.environ.get('AUTOSAGE_PREBUILT', '1') != '0' else 'off')")

now() { date +%s.%N; }

# row COMMAND OP GRAPH KERNEL_CACHE DECISION_CACHE WALL_S JSON_FILE: one CSV line from tune --json
row() {
  python3 - "$@" >>"$out" <<'EOF'
import csv, json, sys
command, op, graph, kernels, decisions, prebuilt, wall, path = sys.argv[1:9]
doc = json.load(open(path)) if path != "-" else {}
t = doc.get("timings", {})
def ms(key):
    return "" if t.get(key) is None else f"{t[key]:.0f}"
d = doc.get("decision", {})
csv.writer(sys.stdout, lineterminator="\n").writerow(
    [command, op, graph, (doc.get("graph") or {}).get("nnz", ""), kernels, decisions, prebuilt,
     f"{float(wall):.2f}", ms("compile_ms"), t.get("modules_prebuilt", ""), t.get("modules_compiled", ""), ms("probe_ms"), ms("total_ms"),
     d.get("schedule", "") if d else ""])
EOF
}

# tune GRAPH OP WIDTH HEADS KERNEL_DIR DECISIONS KERNEL_STATE DECISION_STATE
tune() {
  local graph=$1 op=$2 k=$3 heads=$4 kdir=$5 decisions=$6 kstate=$7 dstate=$8
  local source=("$graph")
  [[ $graph == dataset:* ]] && source=(--dataset "${graph#dataset:}")
  local args=(tune "${source[@]}" --op "$op" --width "$k")
  [[ $op == attention ]] && args+=(--heads "$heads")
  local t0 t1
  t0=$(now)
  CUPY_CACHE_DIR=$kdir $autosage "${args[@]}" --cache "$decisions" --json >"$work/tune.json" 2>"$work/tune.err" || {
    echo "failed: autosage ${args[*]}" >&2; tail -n 5 "$work/tune.err" >&2; return 1; }
  t1=$(now)
  row "autosage ${args[*]} --json" "$op" "$graph" "$kstate" "$dstate" "$prebuilt" "$(awk "BEGIN{print $t1 - $t0}")" \
      "$work/tune.json"
  echo "$op $graph kernels=$kstate decision=$dstate: $(tail -n 1 "$out" | cut -d, -f7) s" >&2
}

for graph in $graphs; do
  for spec in "${cases[@]}"; do
    read -r op k heads <<<"$spec"
    tag=$op-${graph//[^A-Za-z0-9]/_}
    kdir=$work/kernels-$tag           # empty: the first tune compiles
    mkdir -p "$kdir"
    tune "$graph" "$op" "$k" "$heads" "$kdir" "$work/first-$tag.json" empty miss
    tune "$graph" "$op" "$k" "$heads" "$kdir" "$work/second-$tag.json" warm miss
    tune "$graph" "$op" "$k" "$heads" "$kdir" "$work/second-$tag.json" warm hit
  done
done

if [[ ${PROFILE:-0} == 1 ]]; then
  read -r graph _ <<<"$graphs"
  source=("$graph")
  [[ $graph == dataset:* ]] && source=(--dataset "${graph#dataset:}")
  tag=spmm-${graph//[^A-Za-z0-9]/_}
  python3 -m cProfile -o "$work/hit.prof" -m autosage_cli.cli tune "${source[@]}" --op spmm --width 64 \
      --cache "$work/second-$tag.json" --json >/dev/null 2>&1 || true
  python3 -c "import pstats, sys; pstats.Stats(sys.argv[1], stream=sys.stdout).sort_stats('cumulative').print_stats(30)" \
      "$work/hit.prof" >"${out%.csv}.hit-profile.txt"
  echo "wrote ${out%.csv}.hit-profile.txt" >&2
fi

# Every kernel of every op, ahead of time, into an empty cache.
mkdir -p "$work/kernels-aot"
t0=$(now)
CUPY_CACHE_DIR=$work/kernels-aot $autosage compile --json >"$work/compile.json" 2>/dev/null
t1=$(now)
python3 - "$(awk "BEGIN{print $t1 - $t0}")" "$work/compile.json" "$prebuilt" >>"$out" <<'EOF'
import csv, json, sys
doc = json.load(open(sys.argv[2]))
csv.writer(sys.stdout, lineterminator="\n").writerow(
    [f"autosage compile --json ({doc['kernels']} kernels; {doc['compile_s']:.1f} s of compiler time)", "all", "", "",
     "empty", "", sys.argv[3], f"{float(sys.argv[1]):.2f}", f"{doc['wall_s'] * 1e3:.0f}", "", "", "", "", ""])
EOF
read -r graph _ <<<"$graphs"
for spec in "${cases[@]}"; do
  read -r op k heads <<<"$spec"
  tune "$graph" "$op" "$k" "$heads" "$work/kernels-aot" "$work/after-compile-$op.json" compiled miss
done
echo "wrote $out" >&2
