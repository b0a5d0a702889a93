// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C_cuda: the CUDA module's registry (variants.hpp, is_built_cuda; registry.hpp).
#include "cuda_group.hpp"
#include "registry.hpp"

namespace mpe_torch {

std::vector<std::string> built_cuda_combinations() { return registry::combinations<CudaVariants>(); }

std::unique_ptr<Group> make_cuda_group(const PolicyNames& n, const mpe::MixedDimConfig& cfg,
                                       const CudaContext& ctx) {
  return registry::dispatch<CudaVariants>(
      n, [&]<class S, class C>() { return make_cuda_group_of<S, C>(n, cfg, ctx); });
}

}  // namespace mpe_torch
