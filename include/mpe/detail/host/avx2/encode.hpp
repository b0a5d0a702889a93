// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/avx2/encode.hpp
/// @brief Host-only AVX2 row-wise quantization of one FP32 row (not public): the bytes of
/// `Int8Rowwise::store` and of the fused N-bit stores (`Int4Rowwise`, `Int2Rowwise`) under
/// StochasticRounding (its Philox draws 8 element groups per register) and
/// NearestRounding, for CPUs with AVX2 but without AVX-512 (or with the AVX-512 path off).
/// Included by detail/host/dispatch.hpp where MPE_HOST_SIMD holds; its `store_row` sends every
/// host row write-back, flush, store update and set_weights here where it applies.
///
/// Bits (the numerics contract), as the AVX-512 store: the row's min and max are the scalar
/// scan's (the same values in any order; the scan itself runs where one is a zero, whose
/// sign it decides); the scale, pre-scale and inverse are the scalar code's (INT8:
/// int8_scale; N-bit: fused_nbit_scale, the FP16 scale and bias); a row with an element that
/// must be sanitized (NaN, inf, beyond the limit), an INT8 row whose scale rounds to 0 and a
/// constant N-bit row take the scalar store. Each element is then computed with the scalar
/// code's correctly rounded operations in the same order, 8 lanes wide: sub, mul (INT8: mul,
/// mul), each product
/// behind an empty `asm` so that no compiler contracts it with the next subtraction (the
/// target set excludes "fma" as well), then floor (vroundps toward -inf), the exact frac
/// and u = (word >> 8) * 2^-24 and floor + (u < frac), or vroundps to nearest even
/// (num::rint_even); the clamp to [0, 2^N - 1] and the packing into bytes. Philox4x32-10 is integer
/// arithmetic: 32 x 32
/// -> 64-bit products of even and odd lanes (vpmuludq), the same words as
/// num::philox4x32_10 for each group, transposed so that element d takes word d mod 4 of
/// group d / 4. tests/host/test_encode_simd.cpp checks them against the scalar code.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "mpe/detail/host/common/encode.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/storage/fused_nbit.hpp"
#include "mpe/storage/int8_rowwise.hpp"

namespace mpe::detail {

#define MPE_ENCODE256_TARGET __attribute__((target("avx2,f16c")))
#define MPE_ENCODE256_ROW [[gnu::always_inline]] MPE_ENCODE256_TARGET
// The same for a lambda's call operator (Clang takes only GNU attributes there).
#define MPE_ENCODE256_LAMBDA __attribute__((always_inline, target("avx2,f16c")))

namespace simd {

/// a * b, correctly rounded; the empty `asm` keeps the product from being fused with a
/// following add or subtraction.
MPE_ENCODE256_ROW inline __m256 mul_unfused(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  __asm__("" : "+x"(p));
  return p;
}

/// hi:lo = a * m per 32-bit lane (unsigned 64-bit products); m the same in every lane.
MPE_ENCODE256_ROW inline void mulhilo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  lo = _mm256_mullo_epi32(a, m);
  const __m256i even = _mm256_mul_epu32(a, m);  // lanes 0, 2, ...: 64-bit products
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  // The high words: even lanes' products shifted down into the even lane, odd lanes' in place.
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/// num::philox4x32_10 of the 8 counters {x, y, z, w[lane]} under key (k0, k1): word i of
/// lane l's block in out[i] lane l.
MPE_ENCODE256_ROW inline void philox8(std::uint32_t x, std::uint32_t y, std::uint32_t z, __m256i w,
                                      std::uint32_t k0, std::uint32_t k1, __m256i out[4]) {
  const __m256i M0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i M1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m256i cx = _mm256_set1_epi32(static_cast<int>(x)), cy = _mm256_set1_epi32(static_cast<int>(y)),
          cz = _mm256_set1_epi32(static_cast<int>(z)), cw = w;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(cx, M0, hi0, lo0);
    mulhilo(cz, M1, hi1, lo1);
    const __m256i nx = _mm256_xor_si256(_mm256_xor_si256(hi1, cy), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i nz = _mm256_xor_si256(_mm256_xor_si256(hi0, cw), _mm256_set1_epi32(static_cast<int>(k1)));
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

/// The words of 8 groups (out of philox8) in element order: e[j] lane l is the word of
/// element 8 j + l of the 32, i.e. word l mod 4 of group 2 j + l / 4 (a 4 x 8 transpose).
MPE_ENCODE256_ROW inline void interleave_words(const __m256i in[4], __m256i e[4]) {
  const __m256i xy_lo = _mm256_unpacklo_epi32(in[0], in[1]);  // x0 y0 x1 y1 | x4 y4 x5 y5
  const __m256i xy_hi = _mm256_unpackhi_epi32(in[0], in[1]);  // x2 y2 x3 y3 | x6 y6 x7 y7
  const __m256i zw_lo = _mm256_unpacklo_epi32(in[2], in[3]);
  const __m256i zw_hi = _mm256_unpackhi_epi32(in[2], in[3]);
  const __m256i g04 = _mm256_unpacklo_epi64(xy_lo, zw_lo);  // group 0 | group 4
  const __m256i g15 = _mm256_unpackhi_epi64(xy_lo, zw_lo);  // group 1 | group 5
  const __m256i g26 = _mm256_unpacklo_epi64(xy_hi, zw_hi);  // group 2 | group 6
  const __m256i g37 = _mm256_unpackhi_epi64(xy_hi, zw_hi);  // group 3 | group 7
  e[0] = _mm256_permute2x128_si256(g04, g15, 0x20);         // groups 0, 1
  e[1] = _mm256_permute2x128_si256(g26, g37, 0x20);         // groups 2, 3
  e[2] = _mm256_permute2x128_si256(g04, g15, 0x31);         // groups 4, 5
  e[3] = _mm256_permute2x128_si256(g26, g37, 0x31);         // groups 6, 7
}

/// All-ones in lanes [0, m) (m in 1 .. 8), for maskload and blends.
MPE_ENCODE256_ROW inline __m256i lanes_below(std::int32_t m) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// The row's sanitized min and max (detail::sanitized_min_max_lanes' values), 8 lanes at a
/// time; false where an element needs sanitizing (NaN, inf, beyond +-limit), which the
/// scalar store handles. The extremes of finite values do not depend on the order, except
/// for the sign of a zero extreme, which the sequential scan decides, so it runs where an
/// extreme is zero.
MPE_ENCODE256_ROW inline bool min_max(const float* src, std::int32_t dim, float limit, float& mn, float& mx) {
  const __m256 vlimit = _mm256_set1_ps(limit);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 pinf = _mm256_set1_ps(__builtin_inff()), ninf = _mm256_set1_ps(-__builtin_inff());
  __m256 lo = pinf, hi = ninf;
  for (std::int32_t c = 0; c < dim; c += 8) {
    const std::int32_t m = dim - c < 8 ? dim - c : 8;
    const __m256i in = lanes_below(m);
    const __m256 x = _mm256_maskload_ps(src + c, in);  // 0 past the row's end
    const __m256 inside = _mm256_castsi256_ps(in);
    const int live = _mm256_movemask_ps(inside);
    const __m256 ok = _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), vlimit, _CMP_LE_OQ);
    if ((_mm256_movemask_ps(ok) & live) != live) return false;
    lo = _mm256_min_ps(lo, _mm256_blendv_ps(pinf, x, inside));
    hi = _mm256_max_ps(hi, _mm256_blendv_ps(ninf, x, inside));
  }
  alignas(32) float lanes_lo[8], lanes_hi[8];
  _mm256_store_ps(lanes_lo, lo);
  _mm256_store_ps(lanes_hi, hi);
  return reduce_min_max(lanes_lo, lanes_hi, 8, src, dim, limit, mn, mx);
}

/// The random words of elements [32 k, 32 k + 32) of a row (element groups 8 k .. 8 k + 7,
/// g0 = 8 k), in element order (num::for_each_element's mapping: element d word d mod 4 of
/// rng.draw(d / 4), from rng.group_base): words[j] lane l for element 32 k + 8 j + l.
MPE_ENCODE256_ROW inline void row_words(const num::RowRng& rng, std::int32_t g0, __m256i words[4]) {
  const auto k0 = static_cast<std::uint32_t>(rng.seed), k1 = static_cast<std::uint32_t>(rng.seed >> 32);
  const auto site = static_cast<std::uint32_t>(rng.site) << 24;
  // Element groups counted from the row's group_base (RowRng::draw), wrapping mod 2^32 then 2^24.
  const auto base = static_cast<std::uint32_t>(g0) + rng.group_base;
  const __m256i groups =
      _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i w = _mm256_or_si256(_mm256_set1_epi32(static_cast<int>(site)),
                                    _mm256_and_si256(groups, _mm256_set1_epi32(0xffffff)));
  __m256i blocks[4];
  philox8(static_cast<std::uint32_t>(rng.row), static_cast<std::uint32_t>(rng.row >> 32), rng.step, w, k0, k1,
          blocks);
  interleave_words(blocks, words);
}

/// Calls f(c, m, in, x, word) for each register of a row of `dim` floats at src: columns
/// [c, c + m) (m <= 8), `in` all-ones in those lanes, x those floats (0 past the row's end)
/// and `word` their random words (row_words; zero unless R is stochastic), in column order.
template <class R, class F>
MPE_ENCODE256_ROW inline void for_each_register(const float* src, std::int32_t dim, const num::RowRng& rng,
                                                F&& f) {
  for (std::int32_t g0 = 0; 4 * g0 < dim; g0 += 8) {
    __m256i words[4] = {};
    if constexpr (R::stochastic) row_words(rng, g0, words);
    for (int j = 0; j < 4; ++j) {
      const std::int32_t c = 4 * g0 + 8 * j;
      if (c >= dim) break;
      const std::int32_t m = dim - c < 8 ? dim - c : 8;
      const __m256i in = lanes_below(m);
      f(c, m, in, _mm256_maskload_ps(src + c, in), words[j]);
    }
  }
}

/// R::round(v, word) lane by lane (StochasticRounding: floor, the exact frac, u = (word >> 8)
/// * 2^-24 and floor + (u < frac); NearestRounding: to nearest even), then clamped to
/// [0, top]: the codes as integer-valued floats.
template <class R>
MPE_ENCODE256_ROW inline __m256 round_codes(__m256 v, __m256i word, float top) {
  const __m256 zero = _mm256_setzero_ps(), vtop = _mm256_set1_ps(top);
  __m256 q;
  if constexpr (R::stochastic) {
    const __m256 fl = _mm256_round_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_sub_ps(v, fl);
    const __m256 u =
        mul_unfused(_mm256_cvtepi32_ps(_mm256_srli_epi32(word, 8)), _mm256_set1_ps(0x1p-24f));  // exact
    const __m256 up = _mm256_cmp_ps(u, frac, _CMP_LT_OQ);
    q = _mm256_add_ps(fl, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
  } else {
    q = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  q = _mm256_blendv_ps(q, zero, _mm256_cmp_ps(q, zero, _CMP_LT_OQ));
  return _mm256_blendv_ps(q, vtop, _mm256_cmp_ps(q, vtop, _CMP_GT_OQ));
}

/// Int8Rowwise::store<R>(src, dim, row, rng) (R: StochasticRounding, or NearestRounding:
/// vroundps to nearest, ties to even, as num::rint_even) where the row needs no sanitizing
/// and its scale is positive; returns false (nothing written) otherwise.
template <class R>
MPE_ENCODE256_TARGET inline bool store_int8(const float* src, std::int32_t dim, std::uint8_t* row,
                                            const num::RowRng& rng) {
  float mn, mx;
  if (!min_max(src, dim, Int8Rowwise::limit, mn, mx)) return false;
  const Int8Scale p = int8_scale(num::sub(mx, mn));
  if (!(p.scale > 0.0f)) return false;
  const __m256 vmn = _mm256_set1_ps(mn), vpre = _mm256_set1_ps(p.pre), vinv = _mm256_set1_ps(p.inv);
  for_each_register<R>(
      src, dim, rng,
      [&](std::int32_t c, std::int32_t m, __m256i, __m256 x, __m256i word) MPE_ENCODE256_LAMBDA {
        const __m256 v = mul_unfused(mul_unfused(_mm256_sub_ps(x, vmn), vpre), vinv);
        const __m256i codes = _mm256_cvttps_epi32(round_codes<R>(v, word, 255.0f));
        // 32-bit codes (0 .. 255) to bytes: both packs saturate nothing; each
        // 128-bit half keeps its 4 codes in its low 4 bytes.
        const __m256i w16 = _mm256_packus_epi32(codes, codes);
        const __m256i b8 = _mm256_packus_epi16(w16, w16);
        const std::uint64_t bytes =
            static_cast<std::uint32_t>(_mm256_cvtsi256_si32(b8)) |
            static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm256_extract_epi32(b8, 4))) << 32;
        std::memcpy(row + c, &bytes, static_cast<std::size_t>(m));  // little-endian
      });
  num::store_f32(row + dim, p.scale);
  num::store_f32(row + dim + 4, mn);
  return true;
}

/// FBGEMM's fused N-bit row store (Int4Rowwise, Int2Rowwise: store_fused_nbit_lanes<Bits,
/// R>'s bytes, R StochasticRounding or NearestRounding) where the row needs no sanitizing
/// and its min is below its max; returns false (nothing written) otherwise. The scale and
/// bias are the scalar code's (fused_nbit_scale); each element is R::round(mul(sub(x, bias),
/// inv)) clamped to [0, 2^N - 1], 8 lanes wide (round_codes), and the 8 codes of a register
/// are shifted to their bit position in their byte and summed (the bit fields are disjoint)
/// into 8 / (8 / N) bytes; lanes past the row's end give code 0, as the scalar loop leaves
/// a last byte's unused bits.
template <int Bits, class R>
MPE_ENCODE256_TARGET inline bool store_fused_nbit(const float* src, std::int32_t dim, std::uint8_t* row,
                                                  const num::RowRng& rng, float limit) {
  static_assert(Bits == 2 || Bits == 4, "FBGEMM's fused N-bit rows have N = 2 or 4");
  constexpr std::int32_t kPerByte = 8 / Bits;
  constexpr float kTop = static_cast<float>((1 << Bits) - 1);
  float mn, mx;
  if (!min_max(src, dim, limit, mn, mx) || !(mn < mx)) return false;
  const FusedNbitScale p = fused_nbit_scale<Bits>(mn, mx, limit);
  const __m256 vbias = _mm256_set1_ps(p.bias), vinv = _mm256_set1_ps(p.inv);
  // Lane l's code moves to bit Bits * (l mod kPerByte) of its byte.
  const __m256i shift =
      Bits == 4 ? _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4) : _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  // Byte 0 of each of the 128-bit half's byte-holding lanes (INT4: lanes 0, 2; INT2: lane
  // 0) to the half's low bytes.
  const __m256i pick = Bits == 4
                           ? _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0,
                                              8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)
                           : _mm256_setr_epi8(0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                              0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  constexpr std::uint32_t kHalfBytes = 4 / kPerByte;  // bytes a 128-bit half (4 codes) fills
  for_each_register<R>(
      src, dim, rng,
      [&](std::int32_t c, std::int32_t m, __m256i in, __m256 x, __m256i word) MPE_ENCODE256_LAMBDA {
        const __m256 v = mul_unfused(_mm256_sub_ps(x, vbias), vinv);
        const __m256i codes = _mm256_and_si256(_mm256_cvttps_epi32(round_codes<R>(v, word, kTop)), in);
        const __m256i placed = _mm256_sllv_epi32(codes, shift);
        // Pairs of lanes summed into the even lane (its 64-bit lane's low byte);
        // INT2: then the two pairs of each 128 bits into its lane 0.
        __m256i sum = _mm256_add_epi32(placed, _mm256_srli_epi64(placed, 32));
        if constexpr (Bits == 2) sum = _mm256_add_epi32(sum, _mm256_bsrli_epi128(sum, 8));
        const __m256i b = _mm256_shuffle_epi8(sum, pick);
        const std::uint32_t mask = (1u << (8 * kHalfBytes)) - 1u;
        const std::uint32_t bytes = (static_cast<std::uint32_t>(_mm256_cvtsi256_si32(b)) & mask) |
                                    (static_cast<std::uint32_t>(_mm256_extract_epi32(b, 4)) & mask)
                                        << (8 * kHalfBytes);
        std::memcpy(row + c / kPerByte, &bytes, static_cast<std::size_t>((m + kPerByte - 1) / kPerByte));
      });
  store_fused_nbit_params<Bits>(row, dim, p.scale_h, p.bias_h);
  return true;
}

}  // namespace simd

#undef MPE_ENCODE256_LAMBDA
#undef MPE_ENCODE256_ROW
#undef MPE_ENCODE256_TARGET

}  // namespace mpe::detail
