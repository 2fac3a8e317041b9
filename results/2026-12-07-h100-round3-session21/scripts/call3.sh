set -u
echo "== stacks ($(date +%T))"
timeout 120 python3 exp_s21/stacks.py > $OUT/stacks.txt 2>&1; grep -v -i warn $OUT/stacks.txt | head -n 120
