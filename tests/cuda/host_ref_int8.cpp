// SPDX-License-Identifier: Apache-2.0
// HostBackend side of the CUDA bit-identity tests for Int8Rowwise, compiled by g++ (the host
// build users run), instantiated once and linked into the CUDA tests.
#include "scenario.hpp"

MPE_TEST_MATRIX(MPE_TEST_HOST_INSTANTIATE, mpe::Int8Rowwise)
MPE_TEST_WIDE_MATRIX(MPE_TEST_WIDE_INSTANTIATE)
