# Call 2: the short-chunk split variants. Their GPU tests (every schedule against the reference),
# then SpMM on the hub graphs at wide K with every native schedule timed (--exhaustive) beside
# cuSPARSE, then where a captured SAGE replay's kernel time goes (prof.py), then the training suite's
# SAGE on the two hub graphs.
set -u
timeout 150 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -o addopts="" -rfE tests/test_native_gpu.py \
   tests/test_packed_launch_gpu.py -k "s64c64 or s32c32 or split or twophase or packed" 2>&1 | tail -n 6
B=$OUT/spmm-wide; mkdir -p $B
for g in wiki-Vote facebook_combined ca-CondMat; do
  timeout 100 autosage bench --dataset $g --ops spmm --widths 64,128,256 --exhaustive --out $B --cache $B/decisions.json \
     2>>$B/stderr.log | tail -n 8
done
rm -rf $B/decisions.graphs
timeout 150 python3 exp_s25/prof.py facebook_combined wiki-Vote cora
for g in wiki-Vote facebook_combined; do
  T=$OUT/train-$g; mkdir -p $T
  timeout 70 autosage bench --suite training --out $T --cache $T/decisions.json --dataset $g --ops train-sage \
    --modes eager,captured --repeat 20 2>>$T/stderr.log >/dev/null
  grep -v -i warn $T/stderr.log | grep -E "train-|Error" | tail -n 3; rm -rf $T/decisions.graphs
done
