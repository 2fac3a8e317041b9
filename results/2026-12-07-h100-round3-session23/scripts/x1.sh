# A/B in one call: the training suite's eager SAGE (and GCN, unchanged: the control) on small real
# graphs, this tree (new: stacked SAGE layers) against b9fbc35 (old, exp_s23/old), alternated.
set -x
REPO=$PWD
AB=$OUT/ab; mkdir -p $AB
ln -sfn $REPO/autosage_cli/_cubins exp_s23/old/autosage_cli/_cubins
ln -sfn $REPO/datasets exp_s23/old/datasets
ab() {   # label tree graph n ops
  local dir=$AB/$1-$3-$4
  (cd $2 && python3 -c "import autosage_cli; print('$1 imports', autosage_cli.__file__)" &&
   timeout 150 python3 -m autosage_cli.cli bench --suite training --dataset $3 --ops $5 \
     --modes eager --repeat 40 --out $dir --cache $dir/decisions.json >$dir.stdout 2>$dir.stderr)
  echo "rc=$? $1 $3 $4"; grep -E "sage|gcn" $dir.stderr | tail -4
}
for n in 1 2; do for graph in ${AB_GRAPHS:-cora pubmed wiki-Vote facebook_combined}; do
  ops=train-sage; [ $n = 1 ] && ops=train-sage,train-gcn
  ab new $REPO $graph $n $ops; ab old $REPO/exp_s23/old $graph $n $ops
done; done
