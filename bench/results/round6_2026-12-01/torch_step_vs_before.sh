#!/bin/bash
# Before (b5983e5, /tmp/base-site) and after (build/python-site) in alternating processes, with FBGEMM.
cd /work/main/python/examples
OUT=/tmp/r6/torch2
export OMP_WAIT_POLICY=passive
P=/opt/mpe-venv/bin/python
COMMON="--bench 50 --train-samples 110000 --scale 0.09 --dim 64 --batch-size 2048 --threads 1 --emb-optimizer sgd --quiet"
for i in $(seq 1 ${ROUNDS:-6}); do
  for v in fbgemm fp32_after fp32_before int8_after int8_before; do
    case $v in
      fbgemm) A="--emb fbgemm"; S=/work/main/build/python-site;;
      fp32_*) A="--emb mpe --storage fp32 --cache none";;
      int8_*) A="--emb mpe --storage int8 --cache lru --cache-fraction 0.05";;
    esac
    case $v in *_after) S=/work/main/build/python-site;; *_before) S=/tmp/base-site;; esac
    line=$(PYTHONPATH=$S $P torch_dlrm.py $COMMON $A --json $OUT/${v}_$i.json 2>&1 | grep "median" | tail -1)
    echo "$(date -u +%H:%M:%S) $v $i load $(cut -d' ' -f1 /proc/loadavg): $line" >> $OUT/log.txt
  done
done
echo done >> $OUT/log.txt
