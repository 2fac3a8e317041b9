set -u
echo "== ab ($(date +%T))"
timeout 120 python3 exp_s18/ab.py cora pubmed wiki-Vote 2>&1 | grep -v -i warn | tee $OUT/ab.txt
bash exp_s17/suite.sh
echo "== prof ($(date +%T))"
mkdir -p $OUT/prof
timeout 140 python3 exp_s17/prof.py $OUT/prof > $OUT/prof/prof.txt 2>&1; echo "prof rc=$?"
grep -A8 "^## " $OUT/prof/prof.txt | head -80
