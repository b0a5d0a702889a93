// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the Fp16 instantiations (cache Lru<32> or none x {stochastic, nearest}).
#include "group_impl.hpp"

namespace mpe_torch {
std::unique_ptr<Group> make_group_fp16(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  return make_group_for<mpe::Fp16>(n, cfg);
}
}  // namespace mpe_torch
