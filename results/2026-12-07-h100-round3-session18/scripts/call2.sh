set -u
echo "== ab ($(date +%T))"
timeout 60 python3 exp_s18/ab.py cora pubmed 2>&1 | grep -v -i warn | tee $OUT/ab.txt
T=$OUT/train; mkdir -p $T
run() { local cap=$1; shift; echo "== $* ($(date +%T))"; timeout $cap autosage bench --suite training --out $T --cache $T/decisions.json "$@" 2>>$T/stderr.log | tail -n 12; }
run 90 --dataset cora --dataset pubmed --modes eager,captured --repeat 20
echo "== floor ($(date +%T))"
timeout 60 python3 exp_s18/floor.py pubmed cora 2>&1 | grep -v -i warn | tee $OUT/floor.txt
run 100 --dataset facebook_combined --dataset wiki-Vote --dataset ca-CondMat --dataset bcsstk16 --modes eager,captured --repeat 20
tail -n 30 $T/stderr.log
rm -rf $T/decisions.graphs
