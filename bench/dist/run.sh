#!/usr/bin/env bash
# Runs sharded_step for 1, 2 and 3 ranks, every plan, FP32 and FP16 wire, and appends
# one JSON line per run to OUT (default: <build-dir>/sharded_step.jsonl; see bench/README.md).
#   bench/dist/run.sh build-dir [OUT]
set -euo pipefail
build="${1:-build}"
out="${2:-$build/sharded_step.jsonl}"
flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
: > "$out"
for np in 1 2 3; do
  for plan in table row column auto; do
    for prec in fp32 fp16; do
      [ "$np" = 1 ] && [ "$prec" = fp16 ] && continue  # nothing on the wire
      echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
      OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$build/bench/dist/sharded_step" --plan "$plan" \
        --precision "$prec" --global-batch 2048 --dim 64 --steps 20 --warmup 3 | tee -a "$out"
    done
  done
done
