set -u
echo "== diag2 ($(date +%T))"
timeout 150 python3 exp_s20/diag2.py 2>&1 | grep -v -i warn | tee $OUT/diag2.txt
echo "== bench tiny sddmm ($(date +%T))"
B=$OUT/tiny; mkdir -p $B
timeout 60 autosage bench --dataset /tmp/tiny.mtx --ops sddmm --widths 4,32 --out $B --cache $B/d.json >$B/stdout.log 2>$B/stderr.log
python3 - <<'PY'
import pandas as pd, os
d = pd.read_csv(os.environ["OUT"] + "/tiny/results.csv")
print(d[["k", "backend", "schedule", "status", "rel_error", "ms_median", "error"]].to_string())
PY
T=$OUT/train; mkdir -p $T
echo "== suite ($(date +%T))"
timeout 200 autosage bench --suite training --out $T --cache $T/decisions.json --dataset cora --dataset pubmed --ops gcn,sage --modes eager,compiled,reduce-overhead,captured --repeat 20 2>>$T/stderr.log | tail -n 40
grep -v -i warn $T/stderr.log | tail -n 12
rm -rf $T/decisions.graphs
