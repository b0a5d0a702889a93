// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the Int2Rowwise instantiations: cache Lru<32> (and none) x {stochastic, nearest}, FP32 state
// (variants.hpp, is_built).
#include "group_impl.hpp"

namespace mpe_torch {
template std::unique_ptr<Group> make_group_of<mpe::Int2Rowwise, mpe::Lru<32>>(const PolicyNames&,
                                                                              const mpe::MixedDimConfig&);
}  // namespace mpe_torch
