// SPDX-License-Identifier: Apache-2.0
// doctest main of the CUDA tests: runs them only when a CUDA device is usable. Without
// one it prints "MPE_CUDA_SKIP: ..." (CTest marks the test skipped by that line) and
// exits 0, so CI machines without a GPU build and "run" the CUDA tests cleanly.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  // Without a driver or device this call returns an error (and may leave count alone):
  // test the error code first, then the count.
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    std::printf("MPE_CUDA_SKIP: no usable CUDA device (cudaGetDeviceCount: %s, %d devices); %s skipped\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "cudaSuccess", e != cudaSuccess ? 0 : count,
                argc > 0 ? argv[0] : "test");
    return 0;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
