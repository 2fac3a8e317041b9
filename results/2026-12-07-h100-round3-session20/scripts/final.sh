set -u
T=$OUT/train; mkdir -p $T
echo "== suite ($(date +%T))"
timeout ${SUITE_CAP:-260} autosage bench --suite training --out $T --cache $T/decisions.json ${GRAPHS:---dataset cora --dataset pubmed} --repeat 20 2>>$T/stderr.log | tail -n 45
grep -v -i warn $T/stderr.log | tail -n 16
rm -rf $T/decisions.graphs
