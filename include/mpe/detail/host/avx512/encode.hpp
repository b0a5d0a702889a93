// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/avx512/encode.hpp
/// @brief Host-only AVX-512 INT8 row-wise quantization of one FP32 row (not public), with
/// the bytes of `Int8Rowwise::store` under StochasticRounding (its Philox draws 16 element
/// groups per register) and NearestRounding. `store_row` dispatches every host row
/// write-back, flush, store update and set_weights to it where it applies.
///
/// Bits (the numerics contract): the row's min and max are the scalar scan's (the same
/// values in any order; the scan itself runs where one is a zero, whose sign it decides);
/// the scale, 255 / range and the exact 2^64 pre-scale of tiny ranges come from the scalar
/// code itself; a row with an element that must be sanitized (NaN, inf, beyond the limit)
/// or whose scale rounds to 0 takes the scalar store. Each element is then computed with
/// the scalar code's correctly rounded operations in the same order, 16 lanes wide: sub,
/// mul, mul (never fused: no add follows a product), then floor (vrndscaleps toward -inf,
/// which keeps -0 as num::floor does), the exact frac and u = (word >> 8) * 2^-24 and
/// floor + (u < frac), or vrndscaleps to nearest even (num::rint_even); the clamp to
/// [0, 255] and the conversion to a byte. Philox4x32-10 is integer arithmetic: 32 x 32 ->
/// 64-bit products of even and odd lanes (vpmuludq), the same words as num::philox4x32_10
/// for each group, interleaved so that element d takes word d mod 4 of group d / 4.
/// tests/host/test_encode_simd.cpp checks both against the scalar code.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/detail/host/avx512/pool.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/storage/int8_rowwise.hpp"

namespace mpe::detail {

#if MPE_HOST_AVX512
#define MPE_ENCODE512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define MPE_ENCODE512_ROW [[gnu::always_inline]] MPE_ENCODE512_TARGET

namespace simd512 {

/// hi:lo = a * m per 32-bit lane (unsigned 64-bit products); m the same in every lane.
MPE_ENCODE512_ROW inline void mulhilo(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  lo = _mm512_maskz_mullo_epi32(kAll, a, m);
  const __m512i even = _mm512_maskz_mul_epu32(kAll8, a, m);  // lanes 0, 2, ...: 64-bit products
  const __m512i odd = _mm512_maskz_mul_epu32(kAll8, _mm512_maskz_srli_epi64(kAll8, a, 32), m);
  // The high words: even lanes' products shifted down into the even lane, odd lanes' in place.
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_maskz_srli_epi64(kAll8, even, 32), odd);
}

/// num::philox4x32_10 of the 16 counters {x, y, z, w[lane]} under key (k0, k1): word i of
/// lane l's block in out[i] lane l.
MPE_ENCODE512_ROW inline void philox16(std::uint32_t x, std::uint32_t y, std::uint32_t z, __m512i w,
                                       std::uint32_t k0, std::uint32_t k1, __m512i out[4]) {
  const __m512i M0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i M1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m512i cx = _mm512_set1_epi32(static_cast<int>(x)), cy = _mm512_set1_epi32(static_cast<int>(y)),
          cz = _mm512_set1_epi32(static_cast<int>(z)), cw = w;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(cx, M0, hi0, lo0);
    mulhilo(cz, M1, hi1, lo1);
    const __m512i nx = _mm512_maskz_xor_epi32(kAll, _mm512_maskz_xor_epi32(kAll, hi1, cy),
                                              _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i nz = _mm512_maskz_xor_epi32(kAll, _mm512_maskz_xor_epi32(kAll, hi0, cw),
                                              _mm512_set1_epi32(static_cast<int>(k1)));
    cx = nx;
    cy = lo1;
    cz = nz;
    cw = lo0;
  }
  out[0] = cx;
  out[1] = cy;
  out[2] = cz;
  out[3] = cw;
}

/// The words of 16 groups (out of philox16) in element order: e[j] lane l is the word of
/// element 16 j + l of the 64, i.e. word (16 j + l) mod 4 of group (16 j + l) / 4.
MPE_ENCODE512_ROW inline void interleave_words(const __m512i in[4], __m512i e[4]) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i xy_lo = _mm512_maskz_permutex2var_epi32(kAll, in[0], lo, in[1]);  // x0 y0 .. x7 y7
  const __m512i xy_hi = _mm512_maskz_permutex2var_epi32(kAll, in[0], hi, in[1]);  // x8 y8 .. x15 y15
  const __m512i zw_lo = _mm512_maskz_permutex2var_epi32(kAll, in[2], lo, in[3]);
  const __m512i zw_hi = _mm512_maskz_permutex2var_epi32(kAll, in[2], hi, in[3]);
  const __m512i first = _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
  e[0] = _mm512_maskz_permutex2var_epi32(kAll, xy_lo, first, zw_lo);   // groups 0 - 3
  e[1] = _mm512_maskz_permutex2var_epi32(kAll, xy_lo, second, zw_lo);  // groups 4 - 7
  e[2] = _mm512_maskz_permutex2var_epi32(kAll, xy_hi, first, zw_hi);   // groups 8 - 11
  e[3] = _mm512_maskz_permutex2var_epi32(kAll, xy_hi, second, zw_hi);  // groups 12 - 15
}

/// Int8Rowwise::store<R>(src, dim, row, rng) (R: StochasticRounding, or NearestRounding:
/// vrndscaleps to nearest, ties to even, as num::rint_even) where the row needs no
/// sanitizing and its scale is positive; returns false (nothing written) otherwise.
template <class R>
MPE_ENCODE512_TARGET inline bool store_int8(const float* src, std::int32_t dim, std::uint8_t* row,
                                            const num::RowRng& rng) {
  // The min and max, 16 lanes at a time: a row with an element the scalar code would
  // sanitize (NaN, inf, beyond the limit) goes to it; the extremes of finite values do not
  // depend on the order, except for the sign of a zero extreme, which the sequential scan
  // decides (the first zero it meets), so it runs where an extreme is zero.
  const __m512 vlimit = _mm512_set1_ps(Int8Rowwise::limit);
  __m512 lo = _mm512_set1_ps(__builtin_inff()), hi = _mm512_set1_ps(-__builtin_inff());
  for (std::int32_t c = 0; c < dim; c += 16) {
    const std::int32_t m = dim - c < 16 ? dim - c : 16;
    const __mmask16 mask = TailMask::of(m).lanes;
    const __m512 x = _mm512_maskz_loadu_ps(mask, src + c);
    if (_mm512_mask_cmp_ps_mask(mask, _mm512_abs_ps(x), vlimit, _CMP_LE_OQ) != mask) return false;
    lo = _mm512_mask_min_ps(lo, mask, lo, x);
    hi = _mm512_mask_max_ps(hi, mask, hi, x);
  }
  bool sat = false;
  alignas(64) float lanes_lo[16], lanes_hi[16];
  _mm512_store_ps(lanes_lo, lo);
  _mm512_store_ps(lanes_hi, hi);
  float mn = lanes_lo[0], mx = lanes_hi[0];
  for (int i = 1; i < 16; ++i) {
    mn = lanes_lo[i] < mn ? lanes_lo[i] : mn;
    mx = lanes_hi[i] > mx ? lanes_hi[i] : mx;
  }
  if (mn == 0.0f || mx == 0.0f) sanitized_min_max(src, dim, Int8Rowwise::limit, mn, mx, sat);
  const float range = num::sub(mx, mn);
  const float scale = num::div(range, 255.0f);
  if (sat || !(scale > 0.0f)) return false;
  float pre = 1.0f;
  float inv = num::div(255.0f, range);
  if (!num::is_finite(inv)) {
    pre = 0x1p64f;
    inv = num::div(255.0f, num::mul(range, pre));
  }
  const __m512 vmn = _mm512_set1_ps(mn), vpre = _mm512_set1_ps(pre), vinv = _mm512_set1_ps(inv);
  const __m512 two24 = _mm512_set1_ps(0x1p-24f), one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps(),
               top = _mm512_set1_ps(255.0f);
  const auto k0 = static_cast<std::uint32_t>(rng.seed), k1 = static_cast<std::uint32_t>(rng.seed >> 32);
  const auto site = static_cast<std::uint32_t>(rng.site) << 24;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::int32_t g0 = 0; 4 * g0 < dim; g0 += 16) {
    __m512i words[4] = {};
    if constexpr (R::stochastic) {
      const __m512i groups = _mm512_maskz_add_epi32(kAll, _mm512_set1_epi32(g0), lane);
      const __m512i w =
          _mm512_maskz_or_epi32(kAll, _mm512_set1_epi32(static_cast<int>(site)),
                                _mm512_maskz_and_epi32(kAll, groups, _mm512_set1_epi32(0xffffff)));
      __m512i blocks[4];
      philox16(static_cast<std::uint32_t>(rng.row), static_cast<std::uint32_t>(rng.row >> 32), rng.step, w,
               k0, k1, blocks);
      interleave_words(blocks, words);
    }
    for (int j = 0; j < 4; ++j) {
      const std::int32_t c = 4 * g0 + 16 * j;
      if (c >= dim) break;
      const std::int32_t m = dim - c < 16 ? dim - c : 16;
      const __mmask16 mask = TailMask::of(m).lanes;
      const __m512 x = _mm512_maskz_loadu_ps(mask, src + c);
      const __m512 v =
          mul(mul(_mm512_maskz_sub_round_ps(kAll, x, vmn, _MM_FROUND_CUR_DIRECTION), vpre), vinv);
      __m512 q;
      if constexpr (R::stochastic) {
        const __m512 fl = _mm512_maskz_roundscale_ps(kAll, v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        const __m512 frac = _mm512_maskz_sub_round_ps(kAll, v, fl, _MM_FROUND_CUR_DIRECTION);
        const __m512 u = mul(to_float(_mm512_maskz_srli_epi32(kAll, words[j], 8)), two24);
        const __mmask16 up = _mm512_cmp_ps_mask(u, frac, _CMP_LT_OQ);
        q = add(fl, _mm512_mask_blend_ps(up, zero, one));
      } else {
        q = _mm512_maskz_roundscale_ps(kAll, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      }
      q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, zero, _CMP_LT_OQ), q, zero);
      q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, top, _CMP_GT_OQ), q, top);
      const __m512i codes = _mm512_maskz_cvttps_epi32(kAll, q);
      _mm_mask_storeu_epi8(row + c, mask, _mm512_maskz_cvtepi32_epi8(kAll, codes));
    }
  }
  num::store_f32(row + dim, scale);
  num::store_f32(row + dim + 4, mn);
  return true;
}

}  // namespace simd512

#undef MPE_ENCODE512_ROW
#undef MPE_ENCODE512_TARGET
#endif  // MPE_HOST_AVX512

/// Storage::store<Rounding>(src, D, row, rng) (the same bytes and saturation flag); on the
/// host, with the AVX-512 path enabled, INT8 row-wise stochastic rounding by
/// simd512::store_int8 where it applies.
template <class Storage, class Rounding>
MPE_HOST_DEVICE inline bool store_row(const float* src, std::int32_t D, std::uint8_t* row,
                                      const num::RowRng& rng) {
#if MPE_HOST_AVX512 && !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<Storage, Int8Rowwise> &&
                (std::is_same_v<Rounding, StochasticRounding> || std::is_same_v<Rounding, NearestRounding>)) {
    if (host_avx512_enabled() && simd512::store_int8<Rounding>(src, D, row, rng)) return false;
  }
#endif
  return Storage::template store<Rounding>(src, D, row, rng);
}

}  // namespace mpe::detail
