set -u
echo "== stream test ($(date +%T))"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" tests/test_torch_gpu.py -k "stream" 2>&1 | tail -n 3
echo "== diag ($(date +%T))"
timeout ${DIAG_CAP:-100} python3 exp_s21/diag.py > $OUT/diag.txt 2>&1; grep -E "median|launches|position" $OUT/diag.txt
for g in wiki-Vote facebook_combined ca-CondMat bcsstk16 reddit-like; do
  T=$OUT/train-$g; mkdir -p $T
  echo "== suite $g ($(date +%T))"
  if [ $g = reddit-like ]; then ops=gcn,sage; modes=eager; cap=110; else ops=gcn,sage,gat; modes=eager,captured,compiled,reduce-overhead; cap=75; fi
  timeout $cap autosage bench --suite training --out $T --cache $T/decisions.json --dataset $g --ops $ops --modes $modes --repeat 20 2>>$T/stderr.log >/dev/null
  grep -v -i warn $T/stderr.log | grep -E "train-|Error" | tail -n 5
  rm -rf $T/decisions.graphs
done
