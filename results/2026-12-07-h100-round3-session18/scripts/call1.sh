set -u
echo "== ab ($(date +%T))"
timeout 120 python3 exp_s18/ab.py cora pubmed wiki-Vote 2>&1 | grep -v -i warn | tee $OUT/ab.txt
bash exp_s17/suite.sh
