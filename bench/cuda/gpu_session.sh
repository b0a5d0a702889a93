#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One prepared GPU session: every CUDA test, then the CUDA benchmarks (and, with
# NCU_FILTERS, per-kernel Nsight Compute summaries), sized by the *_S limits below. Built elsewhere (no GPU needed to build) and run on the GPU machine:
#
#   here:  bench/cuda/gpu_stage.sh              # builds the CUDA targets into build-gpu/
#                                               # and stages binaries + libs in gpu-stage/
#   there: bash bench/cuda/gpu_session.sh DIR   # DIR = the staged folder; logs to $OUT
#
# Tests run side by side (they need no quiet GPU); compute-sanitizer's memcheck runs on
# SANITIZE_BINS beside them when the machine has it. The benchmarks run last, alone.
# mpe_torch (python/) is built against the machine's own torch beside the tests (CPU work,
# TORCH_BUILD_JOBS compile jobs) and, when it built, its pytest suite runs on the GPU
# (python/tests, the CUDA tests included; TORCH_TEST_S) and bench/torch_step/gpu_step.py
# times its training step at the GPU point (TORCH_STEP_S; 0 skips it).
# Everything is written under $OUT (or ./gpu-out): env.txt, tests.log, sanitizer.log,
# torch.log, bench_gpu.{txt,json}, bench_base.{txt,json}, ncu.txt and <card>.json (h100.json
# or h200.json by nvidia-smi's name: the headline cases, see summarize.py, with the
# mpe_torch step; MPE_COMMIT names the commit); the summary is printed last.
set -u
STAGE=${1:-gpu-stage}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
rm -f "$OUT/ncu.txt"
t0=$(date +%s)
export LD_LIBRARY_PATH="$PWD/$STAGE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL: the toolkit's library is too large to carry; the machine's own libnccl.so.2 is used
# (an H200 machine of this workplace has one in /lib), else the nvidia-nccl wheel's copy.
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit --format=csv
  nvcc --version 2>/dev/null | tail -1
  lscpu | grep -E 'Model name|^CPU\(s\)'
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for b in "$STAGE"/bin/*; do echo "== ldd $b"; ldd "$b" | grep -E 'not found|gomp|benchmark|nccl'; done
} >"$OUT/env.txt" 2>&1

# ---- mpe_torch's build, beside the tests (CPU only); its GPU tests run after them
torch_build=skipped
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  (cd "$REPO/python" && MPE_TORCH_OPT=-O1 MAX_JOBS="${TORCH_BUILD_JOBS:-12}" timeout "${TORCH_BUILD_S:-300}" \
     python3 setup.py build_ext --inplace >"$OUT/torch_build.log" 2>&1; echo "exit $?" >>"$OUT/torch_build.log") &
  torch_build_pid=$!
  torch_build=started
fi

# ---- tests, side by side
pids=()
names=()
for b in "$STAGE"/bin/test_*; do
  n=$(basename "$b")
  (OMP_NUM_THREADS=2 timeout 150 "$b" --duration=false >"$OUT/t_$n.log" 2>&1; echo "exit $?" >>"$OUT/t_$n.log") &
  pids+=($!)
  names+=("$n")
done
# SANITIZE_BINS: the test binaries memcheck runs, one after another (default test_cuda_core
# and test_cuda_int8),
# each for at most SANITIZE_S seconds (default 150).
if command -v compute-sanitizer >/dev/null; then
  (for t in ${SANITIZE_BINS:-test_cuda_core test_cuda_int8}; do
     echo "== memcheck $t"
     OMP_NUM_THREADS=2 timeout "${SANITIZE_S:-150}" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
       "$STAGE/bin/$t" 2>&1
     echo "exit $?"
   done >"$OUT/sanitizer.log") &
  pids+=($!)
else
  echo "compute-sanitizer not found" >"$OUT/sanitizer.log"
fi
for p in "${pids[@]}"; do wait "$p"; done
: >"$OUT/tests.log"
for n in "${names[@]}"; do
  { echo "==================== $n"; cat "$OUT/t_$n.log"; } >>"$OUT/tests.log"
  rm -f "$OUT/t_$n.log"
done

# ---- mpe_torch on the GPU: its pytest suite (the CUDA tests compare with the CPU module)
: >"$OUT/torch.log"
if [ "$torch_build" = started ]; then
  wait "$torch_build_pid"
  tail -5 "$OUT/torch_build.log" >>"$OUT/torch.log"
  if tail -1 "$OUT/torch_build.log" | grep -q '^exit 0$'; then
    (cd "$REPO/python" && PYTHONPATH="$REPO/python" timeout "${TORCH_TEST_S:-150}" \
       python3 -m pytest tests -q -x -p no:cacheprovider -k "${TORCH_TEST_FILTER:-cuda}" 2>&1 | tail -25) >>"$OUT/torch.log"
  fi
else
  echo "mpe_torch: not built (no torch with a visible CUDA device)" >>"$OUT/torch.log"
fi
t1=$(date +%s)

# ---- benchmarks, alone: the GPU-sized point first, then the base point (bench/README.md)
bench() {  # bench NAME FILTER TIMEOUT
  timeout "$3" stdbuf -oL "$STAGE/bin/bench_embedding_cuda" --benchmark_filter="$2" \
    --benchmark_min_time=0.1 --benchmark_counters_tabular=true \
    --benchmark_out="$OUT/$1.json" --benchmark_out_format=json >"$OUT/$1.txt" 2>&1
  echo "exit $?" >>"$OUT/$1.txt"
}
# GPU_BENCH_FILTER / GPU_BENCH_S and BASE_BENCH_S (0: skip) narrow a run to what fits.
bench bench_gpu "${GPU_BENCH_FILTER:-^gpu/}" "${GPU_BENCH_S:-170}"
# mpe_torch's step at the GPU point (bench/torch_step/gpu_step.py), into torch_step.json
if [ "${TORCH_STEP_S:-90}" -gt 0 ] && tail -1 "$OUT/torch_build.log" 2>/dev/null | grep -q '^exit 0$'; then
  PYTHONPATH="$REPO/python" timeout "${TORCH_STEP_S:-90}" python3 "$REPO/bench/torch_step/gpu_step.py" \
    --json "$OUT/torch_step.json" >>"$OUT/torch.log" 2>&1
  echo "gpu_step exit $?" >>"$OUT/torch.log"
fi
if [ "${BASE_BENCH_S:-120}" -gt 0 ]; then
  bench bench_base '^(cuda|sync|deferred)/' "${BASE_BENCH_S:-120}"
fi
# ---- per-kernel time and DRAM bytes (Nsight Compute), one ncu run per benchmark filter in
# NCU_FILTERS (';'-separated; unset: none), at most NCU_LAUNCHES kernel launches each, so a
# call's time can be placed kernel by kernel (bench/cuda/ncu_summary.py; into ncu.txt).
if [ -n "${NCU_FILTERS:-}" ] && ! command -v ncu >/dev/null; then
  echo "ncu not found: no per-kernel summary" >"$OUT/ncu.txt"
elif [ -n "${NCU_FILTERS:-}" ]; then
  copy=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("context",{}).get("mpe_hbm_copy_GBps",0))' \
           "$OUT/bench_gpu.json" 2>/dev/null || echo 0)
  : >"$OUT/ncu.txt"
  IFS=';' read -r -a filters <<<"$NCU_FILTERS"
  for f in "${filters[@]}"; do
    [ -n "$f" ] || continue  # an empty filter would profile every benchmark
    echo "==================== ncu: $f" >>"$OUT/ncu.txt"
    timeout "${NCU_S:-90}" ncu --clock-control none --csv --print-units base --kernel-name-base demangled \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      --launch-count "${NCU_LAUNCHES:-400}" "$STAGE/bin/bench_embedding_cuda" --benchmark_filter="$f" \
      --benchmark_min_time=0.01 >"$OUT/ncu_raw.csv" 2>>"$OUT/ncu.txt"
    echo "exit $?" >>"$OUT/ncu.txt"
    python3 "$(dirname "$0")/ncu_summary.py" "$OUT/ncu_raw.csv" --copy-gbps "${copy:-0}" >>"$OUT/ncu.txt" 2>&1
  done
  rm -f "$OUT/ncu_raw.csv"
fi
t2=$(date +%s)

# ---- summary
echo "tests $((t1 - t0)) s, benchmarks $((t2 - t1)) s"
head -3 "$OUT/env.txt" | tail -2
grep -E '^(====================|\[doctest\] (test cases|assertions)|exit |MPE_CUDA_SKIP)' "$OUT/tests.log"
grep -m 40 -E 'ERROR|FAILED|error:|what\(\)|terminate' "$OUT/tests.log"
grep -E '^== memcheck|ERROR SUMMARY|exit ' "$OUT/sanitizer.log"
cat "$OUT/torch.log"
reports=("$OUT/bench_gpu.txt")
[ -f "$OUT/bench_base.txt" ] && reports+=("$OUT/bench_base.txt")
grep -E '^device|exit ' "${reports[@]}"
[ -f "$OUT/ncu.txt" ] && cut -c1-150 "$OUT/ncu.txt"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$card" in *H100*) card_json=h100.json ;; *H200*) card_json=h200.json ;; *) card_json=gpu.json ;; esac
torch_step=()
[ -s "$OUT/torch_step.json" ] && torch_step=(--torch-step "$OUT/torch_step.json")
python3 "$(dirname "$0")/summarize.py" --json "$OUT/$card_json" --commit "${MPE_COMMIT:-unknown}" "${torch_step[@]}" "${reports[@]}" |
  cut -c1-200
