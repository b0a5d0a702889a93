// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the Int4Rowwise instantiations (cache Lru<32> or none x {stochastic, nearest}).
#include "group_impl.hpp"

namespace mpe_torch {
std::unique_ptr<Group> make_group_int4(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  return make_group_for<mpe::Int4Rowwise>(n, cfg);
}
}  // namespace mpe_torch
