set -u
python3 exp_s16/bwthread.py cora 2>&1 | tee $OUT/bwthread.txt | tail -n 20
bash exp_s16/suite1.sh
