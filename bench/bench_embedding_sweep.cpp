// SPDX-License-Identifier: Apache-2.0
// One factor at a time around the base point (bench/README.md) for Int8Rowwise /
// Lru<32> / StochasticRounding with a cache and as a store only (rows, D, L,
// distribution, cache fraction), and the store-only forward points that FBGEMM's CPU
// kernels are quoted at (forward() with validation, and forward_inference()).
#include "ops.hpp"

namespace {
using namespace mpe_bench;
using I8 = mpe::Int8Rowwise;
using I4 = mpe::Int4Rowwise;
using Lru = mpe::Lru<32>;
using SR = mpe::StochasticRounding;

void register_all() {
  for (const bool cached : {true, false}) {
    for (const auto& a : sweep_args(cached)) {
      reg<I8, Lru, SR, kForward>("sweep/", {a});
      reg<I8, Lru, SR, kBackward>("sweep/", {a});
      reg<I8, Lru, SR, kPopulate>("sweep/", {a});
    }
  }
  // FBGEMM comparison points: store only, L = 32, B = 2048 (dist 0 uniform, 1 Zipf 1.05).
  for (const auto& a : std::vector<std::vector<std::int64_t>>{{2048, 32, 16, 1000000, kUniform, 0},
                                                              {2048, 32, 16, 1000000, kZipf105, 0},
                                                              {2048, 32, 64, 1000000, kUniform, 0},
                                                              {2048, 32, 64, 1000000, kZipf105, 0},
                                                              {2048, 32, 64, 10000000, kUniform, 0},
                                                              {2048, 32, 64, 10000000, kZipf105, 0}}) {
    reg<I8, Lru, SR, kForwardDirect>("fbgemm/", {a});
    reg<I8, Lru, SR, kForwardInference>("fbgemm/", {a});
  }
  for (const auto& a : std::vector<std::vector<std::int64_t>>{{2048, 32, 64, 1000000, kUniform, 0},
                                                              {2048, 32, 64, 10000000, kUniform, 0}}) {
    reg<I4, Lru, SR, kForwardDirect>("fbgemm/", {a});
    reg<I4, Lru, SR, kForwardInference>("fbgemm/", {a});
  }
  // Smoke points for CI.
  for (const bool cached : {true, false}) {
    reg<I8, Lru, SR, kForward>("smoke/", {smoke_args(cached ? 50 : 0)});
    reg<I8, Lru, SR, kBackward>("smoke/", {smoke_args(cached ? 50 : 0)});
    reg<I8, Lru, SR, kPopulate>("smoke/", {smoke_args(cached ? 50 : 0)});
  }
  reg<I8, Lru, SR, kForwardDirect>("smoke/", {smoke_args(0)});
  reg<I4, Lru, SR, kForwardInference>("smoke/", {smoke_args(0)});
}
}  // namespace

int main(int argc, char** argv) {
  register_all();
  return mpe_bench::run_main(argc, argv);
}
