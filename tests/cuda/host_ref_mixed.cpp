// SPDX-License-Identifier: Apache-2.0
// HostBackend side of the CUDA bit-identity test of MixedDimEmbedding, compiled by g++,
// instantiated once and linked into test_cuda_mixed.
#include "mixed_scenario.hpp"

namespace mpe_test {
template MixedResult run_mixed<mpe::HostBackend>(const mpe::HostBackend&, const MixedScenario&);
}  // namespace mpe_test
