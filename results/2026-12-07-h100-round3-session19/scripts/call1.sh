set -u
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind
echo "== prof ($(date +%T))"
timeout 240 python3 exp_s19/prof.py $OUT 2>&1 | grep -v -i warn | tee $OUT/prof.txt
