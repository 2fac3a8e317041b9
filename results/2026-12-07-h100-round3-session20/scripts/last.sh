set -u
for g in reddit-like wiki-Vote; do
  T=$OUT/train-$g; mkdir -p $T
  echo "== suite $g ($(date +%T))"
  if [ $g = reddit-like ]; then ops=gcn,sage; modes=eager; else ops=gcn,sage,gat; modes=eager,captured,compiled,reduce-overhead; fi
  timeout ${CAP:-150} autosage bench --suite training --out $T --cache $T/decisions.json --dataset $g --ops $ops --modes $modes 2>>$T/stderr.log | tail -n 14
  grep -v -i warn $T/stderr.log | tail -n 8
  rm -rf $T/decisions.graphs
done
