// SPDX-License-Identifier: Apache-2.0
// HostBackend side of the CUDA bit-identity tests for Fp8E4M3Rowwise and Fp8E5M2Rowwise,
// compiled by g++ (the host build users run), instantiated once and linked into the CUDA tests.
#include "scenario.hpp"

MPE_TEST_MATRIX(MPE_TEST_HOST_INSTANTIATE, mpe::Fp8E4M3Rowwise)
MPE_TEST_MATRIX(MPE_TEST_HOST_INSTANTIATE, mpe::Fp8E5M2Rowwise)
