// SPDX-License-Identifier: Apache-2.0
// The paper's measurement (Yang, Huang et al., arXiv:2010.11305): for every
// configuration at the base point, the training step time (forward with populate +
// backward with Sgd) and the bytes moved between store and cache per step
// (stats().bytes_filled + bytes_written_back), next to the no-cache stores and the plain
// FP32 embedding bag.
#include "ops.hpp"

namespace {
using namespace mpe_bench;

template <class S, class R>
void reg_storage_rounding(const std::string& prefix, bool smoke) {
  auto args = [&](std::int64_t pm) {
    return std::vector<std::vector<std::int64_t>>{smoke ? smoke_args(pm) : base_args(pm)};
  };
  reg<S, mpe::Lru<32>, R, kStep>(prefix, args(50));
  reg<S, mpe::Lfu<32>, R, kStep>(prefix, args(50));
  reg<S, mpe::DirectMapped, R, kStep>(prefix, args(50));
  reg<S, mpe::Lru<32>, R, kStep>(prefix, args(0));
}

template <class S>
void reg_storage(const std::string& prefix, bool smoke) {
  reg_storage_rounding<S, mpe::StochasticRounding>(prefix, smoke);
  reg_storage_rounding<S, mpe::NearestRounding>(prefix, smoke);
}

void register_all() {
  for (const bool smoke : {false, true}) {
    const std::string prefix = smoke ? "smoke/paper/" : "paper/";
    reg_plain<kStep>(prefix, {smoke ? smoke_args(0) : base_args(0)});
    reg_storage<mpe::Fp32>(prefix, smoke);
    reg_storage<mpe::Fp16>(prefix, smoke);
    reg_storage<mpe::Int8Rowwise>(prefix, smoke);
    reg_storage<mpe::Int4Rowwise>(prefix, smoke);
  }
}
}  // namespace

int main(int argc, char** argv) {
  register_all();
  return mpe_bench::run_main(argc, argv);
}
