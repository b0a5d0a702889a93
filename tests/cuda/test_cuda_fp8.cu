// SPDX-License-Identifier: Apache-2.0
// CudaBackend vs HostBackend, bit for bit, for Fp8E4M3Rowwise and Fp8E5M2Rowwise: every
// Cache x Rounding combination, each over Sgd/RowwiseAdagrad x sum/mean/weighted x
// with/without cache and prefetch.
#include <doctest/doctest.h>

#include "compare.hpp"

MPE_TEST_MATRIX(MPE_TEST_HOST_EXTERN, mpe::Fp8E4M3Rowwise)
MPE_TEST_MATRIX(MPE_TEST_HOST_EXTERN, mpe::Fp8E5M2Rowwise)
MPE_TEST_MATRIX(MPE_TEST_CUDA_CASE, mpe::Fp8E4M3Rowwise)
MPE_TEST_MATRIX(MPE_TEST_CUDA_CASE, mpe::Fp8E5M2Rowwise)
