// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the Int8Rowwise instantiations: the other cache policies (Lfu<32>, DirectMapped,
// SecondTouchLru<32>, WTinyLfu<32>), stochastic rounding, FP32 state (variants.hpp, is_built).
#include "group_impl.hpp"

namespace mpe_torch {
template std::unique_ptr<Group> make_group_of<mpe::Int8Rowwise, mpe::Lfu<32>>(const PolicyNames&,
                                                                              const mpe::MixedDimConfig&);
template std::unique_ptr<Group> make_group_of<mpe::Int8Rowwise, mpe::DirectMapped>(
    const PolicyNames&, const mpe::MixedDimConfig&);
template std::unique_ptr<Group> make_group_of<mpe::Int8Rowwise, mpe::WTinyLfu<32>>(
    const PolicyNames&, const mpe::MixedDimConfig&);
template std::unique_ptr<Group> make_group_of<mpe::Int8Rowwise, mpe::SecondTouchLru<32>>(
    const PolicyNames&, const mpe::MixedDimConfig&);
}  // namespace mpe_torch
