// SPDX-License-Identifier: Apache-2.0
// The AVX-512 pooling kernel (detail/host/avx512/pool.hpp) instantiated for every format with
// and without per-sample weights, and the host's row stores (AVX-512 and AVX2: INT8, INT4,
// INT2 under stochastic and nearest rounding), compiled by tests/no_fma/check.cmake under
// -ffp-contract=fast: the object must hold no FMA instruction (the numerics contract). The
// AVX2 stores' target has no FMA; their products also pass through an empty asm, so that a
// build with -mfma cannot fuse them either (checked by hand: g++ -mfma fuses only the scalar
// scale rule, which docs/numerics.md asks such builds to compile with -ffp-contract=off).
#include "mpe/detail/host/dispatch.hpp"

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

#if MPE_HOST_SIMD
#define MPE_NO_FMA_STORES(NS, R)                                                                   \
  template bool mpe::detail::NS::store_int8<R>(const float*, std::int32_t, std::uint8_t*,          \
                                               const mpe::num::RowRng&);                           \
  template bool mpe::detail::NS::store_fused_nbit<4, R>(const float*, std::int32_t, std::uint8_t*, \
                                                        const mpe::num::RowRng&, float);           \
  template bool mpe::detail::NS::store_fused_nbit<2, R>(const float*, std::int32_t, std::uint8_t*, \
                                                        const mpe::num::RowRng&, float);
MPE_NO_FMA_STORES(simd, mpe::StochasticRounding)
MPE_NO_FMA_STORES(simd, mpe::NearestRounding)
#if MPE_HOST_AVX512
MPE_NO_FMA_STORES(simd512, mpe::StochasticRounding)
MPE_NO_FMA_STORES(simd512, mpe::NearestRounding)
#endif
#endif
