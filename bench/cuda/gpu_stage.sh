#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the CUDA tests and bench_embedding_cuda (sm_90, every Storage) on a machine
# without a GPU, and stages them with the shared libraries they need in gpu-stage/ for
# bench/cuda/gpu_session.sh on the GPU machine. libstdc++/libgcc are linked statically so
# the binaries do not depend on the GPU machine's compiler runtime.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPE_CUDA_FULL_MATRIX=ON \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
targets=(test_cuda_core test_cuda_int8 test_cuda_int4 test_cuda_state test_cuda_mixed test_cuda_fp32 test_cuda_fp16 test_cuda_fp8
         test_cuda_bf16_int2 test_dist_nccl bench_embedding_cuda)
ninja -C build-gpu -j"${JOBS:-2}" "${targets[@]}"
rm -rf gpu-stage
mkdir -p gpu-stage/bin gpu-stage/lib
for t in "${targets[@]}"; do
  f=$(find build-gpu -type f -name "$t" -perm -u+x | head -1)
  cp "$f" gpu-stage/bin/
  strip gpu-stage/bin/"$t"
done
# Shared libraries the binaries name, other than glibc's and NCCL's (the GPU machine has those).
for lib in $(ldd gpu-stage/bin/* | awk '/=>/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libnccl*) ;;
    *) cp -L "$lib" gpu-stage/lib/ ;;
  esac
done
du -sh gpu-stage
