set -u
echo "== mt ($(date +%T))"
timeout 200 python3 exp_s21/mt.py > $OUT/mt.txt 2>&1; grep -v -i warn $OUT/mt.txt | head -n 40
