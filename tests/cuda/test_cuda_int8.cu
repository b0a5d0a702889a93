// SPDX-License-Identifier: Apache-2.0
// CudaBackend vs HostBackend, bit for bit, for Int8Rowwise: every Cache x Rounding combination,
// each over Sgd/RowwiseAdagrad x sum/mean/weighted x with/without cache and prefetch.
#include <doctest/doctest.h>

#include "compare.hpp"

MPE_TEST_MATRIX(MPE_TEST_HOST_EXTERN, mpe::Int8Rowwise)
MPE_TEST_MATRIX(MPE_TEST_CUDA_CASE, mpe::Int8Rowwise)
// 32-way sets: a set's misses decided by a warp (AdmitMissesLanes), several warp widths of
// items per set.
MPE_TEST_WIDE_MATRIX(MPE_TEST_WIDE_EXTERN)
MPE_TEST_WIDE_MATRIX(MPE_TEST_WIDE_CASE)
