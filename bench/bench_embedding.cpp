// SPDX-License-Identifier: Apache-2.0
// The policy matrix at the base point (bench/README.md): forward, backward (Sgd) and
// populate (prefetch) for every Storage x CachePolicy x Rounding, the no-cache store of
// every Storage x Rounding, and the plain FP32 embedding bag. Each also at a tiny
// "smoke/" point for CI.
#include "ops.hpp"

namespace {
using namespace mpe_bench;

template <class S, class C, class R>
void reg_config(std::int64_t cache_pm) {
  for (const bool smoke : {false, true}) {
    const std::string prefix = smoke ? "smoke/" : "";
    const std::vector<std::vector<std::int64_t>> args{smoke ? smoke_args(cache_pm) : base_args(cache_pm)};
    reg<S, C, R, kForward>(prefix, args);
    reg<S, C, R, kBackward>(prefix, args);
    reg<S, C, R, kPopulate>(prefix, args);
  }
}

template <class S, class R>
void reg_storage_rounding() {
  reg_config<S, mpe::Lru<32>, R>(50);
  reg_config<S, mpe::Lfu<32>, R>(50);
  reg_config<S, mpe::DirectMapped, R>(50);
  reg_config<S, mpe::Lru<32>, R>(0);  // the low-precision store with no cache
}

template <class S>
void reg_storage() {
  reg_storage_rounding<S, mpe::StochasticRounding>();
  reg_storage_rounding<S, mpe::NearestRounding>();
}

void register_all() {
  for (const bool smoke : {false, true}) {
    const std::string prefix = smoke ? "smoke/" : "";
    const std::vector<std::vector<std::int64_t>> args{smoke ? smoke_args(0) : base_args(0)};
    reg_plain<kForward>(prefix, args);
    reg_plain<kBackward>(prefix, args);
  }
  reg_storage<mpe::Fp32>();
  reg_storage<mpe::Fp16>();
  reg_storage<mpe::Int8Rowwise>();
  reg_storage<mpe::Int4Rowwise>();
}
}  // namespace

int main(int argc, char** argv) {
  register_all();
  return mpe_bench::run_main(argc, argv);
}
