set -u
T=$OUT/train-reddit; mkdir -p $T
timeout 150 autosage bench --suite training --dataset reddit-like --ops train-gcn,train-sage --modes eager --repeat 10 --out $T --cache $T/decisions.json 2>$T/stderr.log | tail -n 12
tail -n 8 $T/stderr.log; rm -rf $T/decisions.graphs
