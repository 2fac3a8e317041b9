set -u
T=$OUT/train; mkdir -p $T
run() { local cap=$1; shift; echo "== $* ($(date +%T))"; timeout $cap autosage bench --suite training --out $T --cache $T/decisions.json "$@" 2>>$T/stderr.log | tail -n 12; }
run 180 --dataset cora --dataset pubmed --modes eager,captured,compiled --repeat 20
run 160 --dataset facebook_combined --dataset wiki-Vote --dataset ca-CondMat --dataset bcsstk16 --modes eager,captured --repeat 20
tail -n 30 $T/stderr.log
rm -rf $T/decisions.graphs
