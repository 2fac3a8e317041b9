set -u
T=$OUT/train; mkdir -p $T
echo "== suite ($(date +%T))"
timeout ${SUITE_CAP:-150} autosage bench --suite training --out $T --cache $T/decisions.json --dataset cora --dataset pubmed --repeat 20 2>>$T/stderr.log >/dev/null
grep -v -i warn $T/stderr.log | grep -E "train-|Error" | tail -n 10
rm -rf $T/decisions.graphs
echo "== ab ($(date +%T))"
timeout 60 python3 exp_s21/ab.py > $OUT/ab.txt 2>&1; grep -v -i warn $OUT/ab.txt | tail -n 4
