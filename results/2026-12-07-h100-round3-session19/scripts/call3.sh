set -u
echo "== diag ($(date +%T))"
timeout 90 python3 exp_s19/diag.py 2>&1 | grep -v -i warn | tee $OUT/diag.txt
T=$OUT/train; mkdir -p $T
echo "== suite ($(date +%T))"
timeout 150 autosage bench --suite training --out $T --cache $T/decisions.json --dataset cora --dataset pubmed --ops gcn,sage --modes eager,compiled --repeat 20 2>>$T/stderr.log | tail -n 30
tail -n 20 $T/stderr.log
rm -rf $T/decisions.graphs
