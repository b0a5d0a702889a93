// SPDX-License-Identifier: Apache-2.0
// CudaBackend vs HostBackend, bit for bit, with compact optimizer state: Adam with BF16 and
// FP16 state (mpe/optim/state_precision.hpp) over cached/uncached, prefetch and deferred
// scenarios; the state store and the cached FP32 state compared too.
#include <doctest/doctest.h>

#include "compare.hpp"

MPE_TEST_STATE_MATRIX(MPE_TEST_STATE_EXTERN)

#define MPE_TEST_CUDA_STATE_CASE(S, C, R, P)                                             \
  TEST_CASE("CUDA == host, bit for bit, optimizer state: " #S ", " #C ", " #R ", " #P) { \
    mpe_test::check_state_bit_identity<S, C, R, P>();                                    \
  }
MPE_TEST_STATE_MATRIX(MPE_TEST_CUDA_STATE_CASE)
