# The training suite on the shipped real graphs that call 1 did not run (every model and mode, 20
# epochs, in turns), then reddit-like's eager GCN and SAGE: the table at this commit.
set -u
for g in ${@:-wiki-Vote facebook_combined ca-CondMat bcsstk16 reddit-like}; do
  T=$OUT/train-$g; mkdir -p $T
  echo "== suite $g ($(date +%T))"
  if [ $g = reddit-like ]; then ops=train-gcn,train-sage; modes=eager; cap=110;
  else ops=train-gcn,train-sage,train-gat; modes=eager,captured,compiled,reduce-overhead; cap=80; fi
  timeout $cap autosage bench --suite training --out $T --cache $T/decisions.json --dataset $g --ops $ops \
    --modes $modes --repeat 20 2>>$T/stderr.log >/dev/null
  grep -v -i warn $T/stderr.log | grep -E "train-|Error" | tail -n 5
  rm -rf $T/decisions.graphs
done
