# Call 1 (short: little device time left): the kept aggregation on / off in alternated processes
# (the training suite's eager GCN and SAGE, 40 epochs) on cora and pubmed, then the whole suite
# (every model and mode, 20 epochs) on cora at this commit.
set -u
AB=$OUT/ab; mkdir -p $AB
ab() {   # arm graph
  local dir=$AB/$1-$2
  timeout 100 python3 exp_s24/arm.py $1 bench --suite training --dataset $2 --ops train-sage,train-gcn \
     --modes eager --repeat 40 --out $dir --cache $dir/decisions.json >$dir.stdout 2>$dir.stderr
  echo "rc=$? $1 $2"; grep -E "train-" $dir.stderr | tail -4; rm -rf $dir/decisions.graphs
}
suite() {
  local T=$OUT/train-$1; mkdir -p $T
  echo "== suite $1 ($(date +%T))"
  timeout 80 autosage bench --suite training --out $T --cache $T/decisions.json --dataset $1 \
    --ops train-gcn,train-sage,train-gat --modes eager,captured,compiled,reduce-overhead --repeat 20 \
    2>>$T/stderr.log >/dev/null
  grep -v -i warn $T/stderr.log | grep -E "train-|Error" | tail -n 5
  rm -rf $T/decisions.graphs
}
for g in cora pubmed; do ab on $g; ab off $g; done
suite cora
for g in wiki-Vote facebook_combined; do ab on $g; ab off $g; done
