#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/paired/run.sh BEFORE_INCLUDE AFTER_INCLUDE [mode rounds ...]
# Builds pair_lib.cpp against two mpe include trees (e.g. a `git worktree` of the base
# commit and this one), then runs each mode in both creation orders and prints the
# order-corrected ratio after / before (< 1: after is faster). Step modes need
# /tmp/batches.bin (dump_step_batches.py).
set -e
here=$(cd "$(dirname "$0")" && pwd)
cccl=${CUDA_HOME:-/usr/local/cuda}/include/cccl
flags="-O3 -DNDEBUG -fopenmp -ffp-contract=off -std=gnu++20 -fPIC -shared -fvisibility=hidden -isystem $cccl"
g++ $flags -I"$1" "$here/pair_lib.cpp" -o /tmp/mpe_pair_before.so
g++ $flags -I"$2" "$here/pair_lib.cpp" -o /tmp/mpe_pair_after.so
g++ -O2 -std=gnu++20 "$here/pair_main.cpp" -o /tmp/mpe_pair -ldl
shift 2
modes=${*:-"fwd_int8 6 step_int8 3 step_fp32 3"}
set -- $modes
while [ $# -ge 2 ]; do
  r1=$(OMP_NUM_THREADS=1 /tmp/mpe_pair /tmp/mpe_pair_before.so /tmp/mpe_pair_after.so "$1" "$2")
  r2=$(OMP_NUM_THREADS=1 /tmp/mpe_pair /tmp/mpe_pair_after.so /tmp/mpe_pair_before.so "$1" "$2")
  echo "$r1"
  echo "$r2"
  a=$(echo "$r1" | sed 's/.*ratio \([0-9.]*\).*/\1/')
  b=$(echo "$r2" | sed 's/.*ratio \([0-9.]*\).*/\1/')
  python3 -c "import math; print('$1: after / before = %.3f (order-corrected)' % math.sqrt($a / $b))"
  shift 2
done
