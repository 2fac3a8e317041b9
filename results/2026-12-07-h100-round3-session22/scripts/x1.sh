set -x
python3 exp_s22/probe.py cora > $OUT/probe-cora.txt 2>&1; tail -5 $OUT/probe-cora.txt
head -60 $OUT/probe-cora.txt
