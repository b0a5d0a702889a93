// SPDX-License-Identifier: Apache-2.0
// HostBackend side of the CUDA bit-identity tests of compact optimizer state (Adam with
// BF16/FP16 state), compiled by g++, instantiated once and linked into test_cuda_state.
#include "scenario.hpp"

MPE_TEST_STATE_MATRIX(MPE_TEST_STATE_INSTANTIATE)
