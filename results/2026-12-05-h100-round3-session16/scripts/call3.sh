set -u
python3 exp_s16/replay_host.py cora pubmed 2>&1 | tee $OUT/replay-host.txt | tail -n 6
bash exp_s16/reddit.sh
