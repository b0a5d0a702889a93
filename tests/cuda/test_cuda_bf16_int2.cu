// SPDX-License-Identifier: Apache-2.0
// CudaBackend vs HostBackend, bit for bit, for Bf16 and Int2Rowwise: every Cache x Rounding
// combination, each over Sgd/RowwiseAdagrad x sum/mean/weighted x with/without cache and
// prefetch.
#include <doctest/doctest.h>

#include "compare.hpp"

MPE_TEST_MATRIX(MPE_TEST_HOST_EXTERN, mpe::Bf16)
MPE_TEST_MATRIX(MPE_TEST_HOST_EXTERN, mpe::Int2Rowwise)
MPE_TEST_MATRIX(MPE_TEST_CUDA_CASE, mpe::Bf16)
MPE_TEST_MATRIX(MPE_TEST_CUDA_CASE, mpe::Int2Rowwise)
