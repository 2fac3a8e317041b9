#!/usr/bin/env bash
# The reordering benchmark on one GPU (about 6-8 minutes on an H200, with the reorder extra
# installed): SpMM at K = 16 and 64 on products-like in its natural order, then on
# products-like-shuffled in its own order and after each reordering, merged into one results
# directory whose README judges the reordering targets; then GCN and GraphSAGE training epochs on
# products-like-shuffled with and without labelprop. Usage: scripts/reorder_bench.sh [OUT]
#   METHODS  the reorderings of the kernel run (default labelprop,rcm,metis,community)
set -uo pipefail
out=${1:-results/h200-reorder}
methods=${METHODS:-labelprop,rcm,metis,community}
mkdir -p "$out"
autosage bench --dataset products-like --ops spmm --widths 16,64 --out "$out/kernels" \
    --cache "$out/decisions.json" 2>"$out/kernels-natural.log" | tail -n 20
autosage bench --dataset products-like-shuffled --ops spmm --widths 16,64 --reorder "$methods" \
    --out "$out/kernels" --cache "$out/decisions.json" 2>"$out/kernels-shuffled.log" | tail -n 30
autosage bench --suite training --dataset products-like-shuffled --ops gcn,sage --reorder labelprop \
    --out "$out/train" --cache "$out/decisions.json" 2>"$out/train.log" | tail -n 30
tail -n 15 "$out/train.log"
