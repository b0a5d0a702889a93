// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the Fp32 instantiations: the other cache policies (Lfu<32>, DirectMapped, SecondTouchLru<32>,
// WTinyLfu<32>), stochastic rounding, FP32 state (variants.hpp, is_built).
#include "group_impl.hpp"

namespace mpe_torch {
template std::unique_ptr<Group> make_group_of<mpe::Fp32, mpe::Lfu<32>>(const PolicyNames&,
                                                                       const mpe::MixedDimConfig&);
template std::unique_ptr<Group> make_group_of<mpe::Fp32, mpe::DirectMapped>(const PolicyNames&,
                                                                            const mpe::MixedDimConfig&);
template std::unique_ptr<Group> make_group_of<mpe::Fp32, mpe::WTinyLfu<32>>(const PolicyNames&,
                                                                            const mpe::MixedDimConfig&);
template std::unique_ptr<Group> make_group_of<mpe::Fp32, mpe::SecondTouchLru<32>>(const PolicyNames&,
                                                                                  const mpe::MixedDimConfig&);
}  // namespace mpe_torch
