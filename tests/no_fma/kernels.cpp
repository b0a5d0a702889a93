// SPDX-License-Identifier: Apache-2.0
// The AVX-512 pooling kernel (detail/host/avx512/pool.hpp) instantiated for every format with
// and without per-sample weights, compiled by tests/no_fma/check.cmake under
// -ffp-contract=fast: the object must hold no FMA instruction (the numerics contract).
#include "mpe/detail/host/avx512/pool.hpp"

#if MPE_HOST_AVX512
#define MPE_NO_FMA_KERNELS(S)                                                                               \
  template void mpe::detail::simd512::pool_bag<S, true>(const mpe::detail::simd::StoreRows&, mpe::index_t,  \
                                                        mpe::index_t, const float*, std::int32_t, float*);  \
  template void mpe::detail::simd512::pool_bag<S, false>(const mpe::detail::simd::StoreRows&, mpe::index_t, \
                                                         mpe::index_t, const float*, std::int32_t, float*);
MPE_NO_FMA_KERNELS(mpe::Fp32)
MPE_NO_FMA_KERNELS(mpe::Fp16)
MPE_NO_FMA_KERNELS(mpe::Bf16)
MPE_NO_FMA_KERNELS(mpe::Int8Rowwise)
MPE_NO_FMA_KERNELS(mpe::Int4Rowwise)
#endif
