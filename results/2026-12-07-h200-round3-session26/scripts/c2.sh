# Call 2: pubmed's training suite, reddit-like's eager GCN and SAGE, then the shipped graphs' SpMM table.
set -u
bash exp_s26/x3.sh pubmed reddit-like
B=$OUT/spmm-shipped; mkdir -p $B
echo "== shipped spmm ($(date +%T))"
timeout 200 autosage bench --dataset cora --dataset pubmed --dataset wiki-Vote --dataset facebook_combined \
  --dataset ca-CondMat --dataset bcsstk16 --ops spmm --widths 16,64,128,256 --out $B --cache $B/decisions.json \
  2>$B/stderr.log | tail -n 40
tail -n 5 $B/stderr.log
