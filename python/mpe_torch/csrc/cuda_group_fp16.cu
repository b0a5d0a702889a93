// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C_cuda: the Fp16 instantiations over mpe::CudaBackend: cache Lru<32> (and none),
// stochastic rounding, FP32 state (variants.hpp, is_built_cuda).
#include "cuda_group_impl.cuh"

namespace mpe_torch {
template std::unique_ptr<Group> make_cuda_group_of<mpe::Fp16, mpe::Lru<32>>(const PolicyNames&,
                                                                            const mpe::MixedDimConfig&,
                                                                            const CudaContext&);
}  // namespace mpe_torch
