set -u
T=$OUT/train; mkdir -p $T
echo "== suite ($(date +%T))"
timeout ${SUITE_CAP:-230} autosage bench --suite training --out $T --cache $T/decisions.json --dataset cora --dataset pubmed --repeat 20 2>>$T/stderr.log | tail -n 12
grep -v -i warn $T/stderr.log | grep -E "train-|Error|error" | tail -n 16
rm -rf $T/decisions.graphs
exit 0
echo "== diag ($(date +%T))"
timeout ${DIAG_CAP:-90} python3 exp_s21/diag.py > $OUT/diag.txt 2>&1; grep -E "median|launches" $OUT/diag.txt
