#!/bin/bash
# The training step through PyTorch: FBGEMM TBE FP32 vs mpe FP32 vs mpe INT8 + 5 % LRU,
# alternating, ROUNDS rounds. Needs build/python-site (the extension of this tree).
cd /work/main/python/examples
OUT=/tmp/r6/torch
ROUNDS=${ROUNDS:-4}
export PYTHONPATH=/work/main/build/python-site OMP_WAIT_POLICY=passive
P=/opt/mpe-venv/bin/python
COMMON="--bench 50 --train-samples 110000 --scale 0.09 --dim 64 --batch-size 2048 --threads 1 --emb-optimizer sgd --quiet"
for i in $(seq ${FIRST:-1} $ROUNDS); do
  for v in fbgemm fp32 int8; do
    case $v in
      fbgemm) A="--emb fbgemm";;
      fp32) A="--emb mpe --storage fp32 --cache none";;
      int8) A="--emb mpe --storage int8 --cache lru --cache-fraction 0.05";;
    esac
    line=$($P torch_dlrm.py $COMMON $A --json $OUT/${v}_$i.json 2>&1 | grep "median" | tail -1)
    echo "$(date -u +%H:%M:%S) $v $i load $(cut -d' ' -f1 /proc/loadavg): $line" >> $OUT/log.txt
  done
done
echo done >> $OUT/log.txt
