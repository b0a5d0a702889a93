// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/avx512/encode.hpp
/// @brief Host-only AVX-512 row-wise quantization of one FP32 row (not public): the bytes
/// of `Int8Rowwise::store` and of the fused N-bit stores (`Int4Rowwise`, `Int2Rowwise`)
/// under StochasticRounding (its Philox draws 16 element groups per register) and
/// NearestRounding. Included by detail/host/dispatch.hpp where MPE_HOST_AVX512 holds; its
/// `store_row` sends every host row write-back, flush, store update and set_weights here
/// where they apply.
///
/// Bits (the numerics contract): the row's min and max are the scalar scan's (the same
/// values in any order; the scan itself runs where one is a zero, whose sign it decides);
/// the scale and its inverse come from the scalar code's own functions (INT8: int8_scale,
/// 255 / range and the exact 2^64 pre-scale of tiny ranges; N-bit: fused_nbit_scale, the
/// FP16 scale and bias);
/// a row with an element that must be sanitized (NaN, inf, beyond the limit), an INT8 row
/// whose scale rounds to 0 and a constant N-bit row take the scalar store. Each element is
/// then computed with the scalar code's correctly rounded operations in the same order,
/// 16 lanes wide: sub, mul (INT8: mul, mul), never fused (no add follows a product), then
/// floor (vrndscaleps toward -inf, which keeps -0 as num::floor does), the exact frac and
/// u = (word >> 8) * 2^-24 and floor + (u < frac), or vrndscaleps to nearest even
/// (num::rint_even); the clamp to [0, 2^N - 1] and the packing into bytes. Philox4x32-10 is
/// integer arithmetic: 32 x 32 -> 64-bit products of even and odd lanes (vpmuludq), the
/// same words as num::philox4x32_10 for each group, interleaved so that element d takes
/// word d mod 4 of group d / 4. tests/host/test_encode_simd.cpp checks them against the
/// scalar code.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "mpe/detail/host/avx512/pool.hpp"
#include "mpe/detail/host/common/encode.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/storage/fused_nbit.hpp"
#include "mpe/storage/int2_rowwise.hpp"
#include "mpe/storage/int4_rowwise.hpp"
#include "mpe/storage/int8_rowwise.hpp"

namespace mpe::detail {

#define MPE_ENCODE512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define MPE_ENCODE512_ROW [[gnu::always_inline]] MPE_ENCODE512_TARGET
// The same for a lambda's call operator (after its parameter list, where Clang takes GNU
// attributes but not a [[gnu::...]] one, which would appertain to the lambda's type).
#define MPE_ENCODE512_LAMBDA __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx2,f16c")))

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

/// The row's sanitized min and max (detail::sanitized_min_max_lanes' values), 16 lanes at a
/// time; false where an element needs sanitizing (NaN, inf, beyond +-limit), which the
/// scalar store handles. The extremes of finite values do not depend on the order, except
/// for the sign of a zero extreme, which the sequential scan decides (the first zero it
/// meets), so it runs where an extreme is zero.
MPE_ENCODE512_ROW inline bool min_max(const float* src, std::int32_t dim, float limit, float& mn, float& mx) {
  const __m512 vlimit = _mm512_set1_ps(limit);
  __m512 lo = _mm512_set1_ps(__builtin_inff()), hi = _mm512_set1_ps(-__builtin_inff());
  for (std::int32_t c = 0; c < dim; c += 16) {
    const std::int32_t m = dim - c < 16 ? dim - c : 16;
    const __mmask16 mask = TailMask::of(m).lanes;
    const __m512 x = _mm512_maskz_loadu_ps(mask, src + c);
    if (_mm512_mask_cmp_ps_mask(mask, _mm512_abs_ps(x), vlimit, _CMP_LE_OQ) != mask) return false;
    lo = _mm512_mask_min_ps(lo, mask, lo, x);
    hi = _mm512_mask_max_ps(hi, mask, hi, x);
  }
  alignas(64) float lanes_lo[16], lanes_hi[16];
  _mm512_store_ps(lanes_lo, lo);
  _mm512_store_ps(lanes_hi, hi);
  return simd::reduce_min_max(lanes_lo, lanes_hi, 16, src, dim, limit, mn, mx);
}

/// The random words of elements [64 k, 64 k + 64) of a row (element groups 16 k .. 16 k + 15,
/// g0 = 16 k), in element order (num::for_each_element's mapping: element d word d mod 4
/// of rng.draw(d / 4), from rng.group_base): words[j] lane l for element 64 k + 16 j + l.
MPE_ENCODE512_ROW inline void row_words(const num::RowRng& rng, std::int32_t g0, __m512i words[4]) {
  const auto k0 = static_cast<std::uint32_t>(rng.seed), k1 = static_cast<std::uint32_t>(rng.seed >> 32);
  const auto site = static_cast<std::uint32_t>(rng.site) << 24;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Element groups counted from the row's group_base (RowRng::draw), wrapping mod 2^32 then 2^24.
  const auto base = static_cast<std::uint32_t>(g0) + rng.group_base;
  const __m512i groups = _mm512_maskz_add_epi32(kAll, _mm512_set1_epi32(static_cast<int>(base)), lane);
  const __m512i w = _mm512_maskz_or_epi32(kAll, _mm512_set1_epi32(static_cast<int>(site)),
                                          _mm512_maskz_and_epi32(kAll, groups, _mm512_set1_epi32(0xffffff)));
  __m512i blocks[4];
  philox16(static_cast<std::uint32_t>(rng.row), static_cast<std::uint32_t>(rng.row >> 32), rng.step, w, k0,
           k1, blocks);
  interleave_words(blocks, words);
}

/// Calls f(c, mask, x, word) for each register of a row of `dim` floats at src: columns
/// [c, c + 16), `mask` their lanes inside the row, x those floats (0 past the row's end) and
/// `word` their random words (row_words; zero unless R is stochastic), in column order.
template <class R, class F>
MPE_ENCODE512_ROW inline void for_each_register(const float* src, std::int32_t dim, const num::RowRng& rng,
                                                F&& f) {
  for (std::int32_t g0 = 0; 4 * g0 < dim; g0 += 16) {
    __m512i words[4] = {};
    if constexpr (R::stochastic) row_words(rng, g0, words);
    for (int j = 0; j < 4; ++j) {
      const std::int32_t c = 4 * g0 + 16 * j;
      if (c >= dim) break;
      const __mmask16 mask = TailMask::of(dim - c < 16 ? dim - c : 16).lanes;
      f(c, mask, _mm512_maskz_loadu_ps(mask, src + c), words[j]);
    }
  }
}

/// R::round(v, word) lane by lane (StochasticRounding: floor, the exact frac, u = (word >> 8)
/// * 2^-24 and floor + (u < frac); NearestRounding: to nearest even), then clamped to
/// [0, top]: the codes as integer-valued floats.
template <class R>
MPE_ENCODE512_ROW inline __m512 round_codes(__m512 v, __m512i word, float top) {
  const __m512 zero = _mm512_setzero_ps(), vtop = _mm512_set1_ps(top);
  __m512 q;
  if constexpr (R::stochastic) {
    const __m512 fl = _mm512_maskz_roundscale_ps(kAll, v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_maskz_sub_round_ps(kAll, v, fl, _MM_FROUND_CUR_DIRECTION);
    const __m512 u = mul(to_float(_mm512_maskz_srli_epi32(kAll, word, 8)), _mm512_set1_ps(0x1p-24f));
    const __mmask16 up = _mm512_cmp_ps_mask(u, frac, _CMP_LT_OQ);
    q = add(fl, _mm512_mask_blend_ps(up, zero, _mm512_set1_ps(1.0f)));
  } else {
    q = _mm512_maskz_roundscale_ps(kAll, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, zero, _CMP_LT_OQ), q, zero);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, vtop, _CMP_GT_OQ), q, vtop);
}

/// Int8Rowwise::store<R>(src, dim, row, rng) (R: StochasticRounding, or NearestRounding:
/// vrndscaleps to nearest, ties to even, as num::rint_even) where the row needs no
/// sanitizing and its scale is positive; returns false (nothing written) otherwise.
template <class R>
MPE_ENCODE512_TARGET inline bool store_int8(const float* src, std::int32_t dim, std::uint8_t* row,
                                            const num::RowRng& rng) {
  float mn, mx;
  if (!min_max(src, dim, Int8Rowwise::limit, mn, mx)) return false;
  const Int8Scale p = int8_scale(num::sub(mx, mn));
  if (!(p.scale > 0.0f)) return false;
  const __m512 vmn = _mm512_set1_ps(mn), vpre = _mm512_set1_ps(p.pre), vinv = _mm512_set1_ps(p.inv);
  for_each_register<R>(
      src, dim, rng, [&](std::int32_t c, __mmask16 mask, __m512 x, __m512i word) MPE_ENCODE512_LAMBDA {
        const __m512 v =
            mul(mul(_mm512_maskz_sub_round_ps(kAll, x, vmn, _MM_FROUND_CUR_DIRECTION), vpre), vinv);
        const __m512i codes = _mm512_maskz_cvttps_epi32(kAll, round_codes<R>(v, word, 255.0f));
        _mm_mask_storeu_epi8(row + c, mask, _mm512_maskz_cvtepi32_epi8(kAll, codes));
      });
  num::store_f32(row + dim, p.scale);
  num::store_f32(row + dim + 4, mn);
  return true;
}

/// FBGEMM's fused N-bit row store (Int4Rowwise, Int2Rowwise: store_fused_nbit_lanes<Bits,
/// R>'s bytes, R StochasticRounding or NearestRounding) where the row needs no sanitizing
/// and its min is below its max; returns false (nothing written) otherwise. The scale and
/// bias are the scalar code's (fused_nbit_scale); each element is R::round(mul(sub(x, bias),
/// inv)) clamped to [0, 2^N - 1], 16 lanes wide (round_codes), and the 16 codes of a
/// register are shifted to their bit position in their byte and summed (the bit fields are
/// disjoint) into 16 / (8 / N) bytes; lanes past the row's end give code 0, as the scalar
/// loop leaves a last byte's unused bits.
template <int Bits, class R>
MPE_ENCODE512_TARGET inline bool store_fused_nbit(const float* src, std::int32_t dim, std::uint8_t* row,
                                                  const num::RowRng& rng, float limit) {
  static_assert(Bits == 2 || Bits == 4, "FBGEMM's fused N-bit rows have N = 2 or 4");
  constexpr std::int32_t kPerByte = 8 / Bits;
  constexpr float kTop = static_cast<float>((1 << Bits) - 1);
  float mn, mx;
  if (!min_max(src, dim, limit, mn, mx) || !(mn < mx)) return false;
  const FusedNbitScale p = fused_nbit_scale<Bits>(mn, mx, limit);
  const __m512 vbias = _mm512_set1_ps(p.bias), vinv = _mm512_set1_ps(p.inv);
  // Lane l's code moves to bit Bits * (l mod kPerByte) of its byte.
  const __m512i shift = Bits == 4 ? _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4)
                                  : _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
  for_each_register<R>(
      src, dim, rng, [&](std::int32_t c, __mmask16 mask, __m512 x, __m512i word) MPE_ENCODE512_LAMBDA {
        const __m512 v = mul(_mm512_maskz_sub_round_ps(kAll, x, vbias, _MM_FROUND_CUR_DIRECTION), vinv);
        const __m512i codes = _mm512_maskz_cvttps_epi32(mask, round_codes<R>(v, word, kTop));
        const __m512i placed = _mm512_maskz_sllv_epi32(kAll, codes, shift);
        // Pairs of lanes summed into the even lane (its 64-bit lane's low byte).
        const __m512i pairs =
            _mm512_maskz_add_epi32(kAll, placed, _mm512_maskz_srli_epi64(kAll8, placed, 32));
        const std::int32_t m = dim - c < 16 ? dim - c : 16;
        const auto bmask = static_cast<__mmask16>((1u << ((m + kPerByte - 1) / kPerByte)) - 1u);
        std::uint8_t* out = row + c / kPerByte;
        if constexpr (Bits == 4) {
          _mm_mask_storeu_epi8(out, bmask, _mm512_maskz_cvtepi64_epi8(kAll8, pairs));
        } else {
          // Quads: lane 4 k + 2's pair onto lane 4 k's (8 bytes down within each 128 bits),
          // then byte 0 of each 128 bits.
          const __m512i quads = _mm512_maskz_add_epi32(kAll, pairs, _mm512_bsrli_epi128(pairs, 8));
          const __m128i b = _mm512_maskz_cvtepi32_epi8(kAll, quads);  // bytes 0, 4, 8, 12 wanted
          const __m128i pick = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
          _mm_mask_storeu_epi8(out, bmask, _mm_shuffle_epi8(b, pick));
        }
      });
  store_fused_nbit_params<Bits>(row, dim, p.scale_h, p.bias_h);
  return true;
}
}  // namespace simd512

#undef MPE_ENCODE512_LAMBDA
#undef MPE_ENCODE512_ROW
#undef MPE_ENCODE512_TARGET
}  // namespace mpe::detail
