# A/B in one call: the training suite's eager SAGE and GCN on cora and pubmed, this tree (new)
# against 5be67cd (old, exp_s22/old), alternated; then the step's segments with and without pinning.
set -x
REPO=$PWD
AB=$OUT/ab; mkdir -p $AB
ln -sfn $REPO/autosage_cli/_cubins exp_s22/old/autosage_cli/_cubins
ln -sfn $REPO/datasets exp_s22/old/datasets
ab() {   # label tree graph n
  local dir=$AB/$1-$3-$4
  (cd $2 && python3 -c "import autosage_cli; print('$1 imports', autosage_cli.__file__)" &&
   timeout 150 python3 -m autosage_cli.cli bench --suite training --dataset $3 --ops train-sage,train-gcn \
     --modes eager --repeat 40 --out $dir --cache $dir/decisions.json >$dir.stdout 2>$dir.stderr)
  echo "rc=$? $1 $3 $4"; grep -E "sage|gcn" $dir.stdout | tail -4
}
for n in 1; do for graph in ${AB_GRAPHS:-cora pubmed}; do
  ab new $REPO $graph $n; ab old $REPO/exp_s22/old $graph $n
done; done
[ -n "${WITH_SUITE:-}" ] && bash exp_s22/x3.sh cora pubmed
