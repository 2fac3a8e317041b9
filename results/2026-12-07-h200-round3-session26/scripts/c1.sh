# Call 1's experiment: the 2-byte types' short-chunk split shapes on the hub graphs (every native
# schedule timed beside every cuSPARSE algorithm), then cora's training suite.
set -u
B=$OUT/spmm-bf16; mkdir -p $B
echo "== bf16 exhaustive ($(date +%T))"
timeout 150 autosage bench --exhaustive --dataset wiki-Vote --dataset facebook_combined --dataset ca-CondMat \
  --ops spmm --widths 64,128,256 --dtypes bfloat16 --out $B --cache $B/decisions.json 2>$B/stderr.log | tail -n 40
tail -n 5 $B/stderr.log
bash exp_s26/x3.sh ${GRAPHS:-cora}
