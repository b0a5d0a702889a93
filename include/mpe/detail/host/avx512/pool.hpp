// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/avx512/pool.hpp
/// @brief Host-only AVX-512 kernel of store-only pooling (not public): one bag pooled 16
/// columns per register, chosen at run time, with the bits of the portable path. Also the
/// AVX-512 victim list and minimum of the cache admission (`unlocked_by_last_use`,
/// `min_key`; used by SetVictims in mpe/detail/kernels/admission.hpp).
///
/// Included by detail/host/dispatch.hpp where MPE_HOST_AVX512 holds; there, where the CPU
/// reports AVX-512 F, BW and VL (and the OS saves their state, which
/// `__builtin_cpu_supports` checks), a bag whose rows all come from one row array (the
/// store without a cache, or the FP32 cache rows of a bag that is all hits) is pooled here
/// instead of by the AVX2 kernel (detail/host/avx2/pool.hpp): per row, half the instructions, so the
/// out-of-order window holds twice the rows in flight. The default build stays baseline
/// x86-64 (`__attribute__((target(...)))` on these functions only); `MPE_NO_HOST_SIMD` or
/// `MPE_NO_HOST_AVX512` leaves it out, and `set_host_avx512(false)` turns it off at run
/// time (both in dispatch.hpp). Store-only, unweighted sum bags of D = 16 .. 128 columns (a multiple of 16)
/// are pooled a table's run of bags per call (pool_bags_run), with the register count and the prefetch points
/// chosen once per run.
///
/// Bits (the numerics contract): the same operations as the AVX2 kernel and the portable
/// loop, element by element. Each element is decoded as `Storage::Reader` defines it
/// (simd::Row's formulas, 16 lanes wide; INT4 and INT2 look their element up among the
/// row's 16 and 4 values, each computed by that formula), then one correctly rounded multiply by the
/// weight (weighted) and one correctly rounded add to its column's accumulator, rows in
/// index order. With AVX-512 enabled a compiler may fuse a multiply and an add into an FMA
/// (GCC turns `_mm512_mul_ps` + `_mm512_add_ps` into `vfmadd` under -ffp-contract=fast, its
/// default in GNU mode), so every multiply and add is written with the `_round` intrinsics
/// (`_MM_FROUND_CUR_DIRECTION`), opaque to GCC, and every product passes through an empty
/// `asm` barrier, opaque to Clang too (simd512::mul). Columns past the last full group of 16
/// use masked loads and stores of the same lanes, so no element is read past the row.
/// tests/host/test_pool_simd.cpp checks this kernel against the portable loop for every format.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "mpe/detail/host/common/decode8.hpp"
#include "mpe/detail/host/common/rows.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/storage/all.hpp"

namespace mpe::detail {

#define MPE_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define MPE_AVX512_ROW [[gnu::always_inline]] MPE_AVX512_TARGET

namespace simd512 {

// The operations below go through the zero-masked intrinsics with every lane selected,
// which compile to the plain instructions: GCC 12's unmasked forms start from
// `_mm512_undefined_*` (a self-initialized variable) and trip -Wmaybe-uninitialized.
inline constexpr __mmask16 kAll = 0xffff;
/// Every lane of 8 64-bit lanes.
inline constexpr __mmask8 kAll8 = 0xff;

/// The lanes of a row's last, partial register (its last m = D % 16 columns: the first m
/// lanes) and the bytes holding their codes: ceil(m / 2) for INT4 rows, ceil(m / 4) for INT2.
struct TailMask {
  __mmask16 lanes;
  __mmask16 int4_bytes;
  __mmask16 int2_bytes;
  static TailMask of(std::int32_t m) {
    return TailMask{static_cast<__mmask16>((1u << m) - 1u),
                    static_cast<__mmask16>((1u << ((m + 1) / 2)) - 1u),
                    static_cast<__mmask16>((1u << ((m + 3) / 4)) - 1u)};
  }
};

/// a + b and a * b, correctly rounded, never contracted into an FMA (see the file comment).
/// The product passes through an empty `asm` that claims to change it: Clang folds the
/// `_round` intrinsics with `_MM_FROUND_CUR_DIRECTION` back into plain IR multiplies and adds,
/// which -ffp-contract=fast may fuse; no compiler can fuse across the asm. It emits nothing.
MPE_AVX512_ROW inline __m512 add(__m512 a, __m512 b) {
  return _mm512_maskz_add_round_ps(kAll, a, b, _MM_FROUND_CUR_DIRECTION);
}
MPE_AVX512_ROW inline __m512 mul(__m512 a, __m512 b) {
  __m512 p = _mm512_maskz_mul_round_ps(kAll, a, b, _MM_FROUND_CUR_DIRECTION);
  __asm__("" : "+v"(p));
  return p;
}
/// 16 bytes / 16-bit words zero-extended to 32-bit lanes; 32-bit integers to float (exact
/// below 2^24); 16 FP16 codes to float (vcvtph2ps).
MPE_AVX512_ROW inline __m512i widen_u8(__m128i q) { return _mm512_maskz_cvtepu8_epi32(kAll, q); }
MPE_AVX512_ROW inline __m512i widen_u16(__m256i h) { return _mm512_maskz_cvtepu16_epi32(kAll, h); }
MPE_AVX512_ROW inline __m512 to_float(__m512i x) { return _mm512_maskz_cvtepi32_ps(kAll, x); }
MPE_AVX512_ROW inline __m512 half_to_float(__m256i h) { return _mm512_maskz_cvtph_ps(kAll, h); }

/// Decoder of one row of format S: load(c) = elements [c, c + 16) for pooling (exact, as
/// simd::load8_for_arith defines them); load(c, t) the lanes of the tail t, the others
/// decoded from zero bytes, never read from memory (and never stored: the tail's store is
/// masked).
template <class S>
struct Row;

template <>
struct Row<Fp32> {
  const std::uint8_t* p;
  MPE_AVX512_ROW Row(const std::uint8_t* r, std::int32_t) : p(r) {}
  MPE_AVX512_ROW __m512 load(std::int32_t c) const {
    return _mm512_loadu_ps(p + 4 * static_cast<std::size_t>(c));
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c, const TailMask& t) const {
    return _mm512_maskz_loadu_ps(t.lanes, p + 4 * static_cast<std::size_t>(c));
  }
};

/// FP16: vcvtph2ps, exact for every non-NaN code; a NaN lane differs from the software
/// decode only in the quiet bit, which the first multiply or add sets either way (the
/// argument of simd::load8_for_arith).
template <>
struct Row<Fp16> {
  const std::uint8_t* p;
  MPE_AVX512_ROW Row(const std::uint8_t* r, std::int32_t) : p(r) {}
  MPE_AVX512_ROW __m512 load(std::int32_t c) const {
    return half_to_float(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * static_cast<std::size_t>(c))));
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c, const TailMask& t) const {
    return half_to_float(_mm256_maskz_loadu_epi16(t.lanes, p + 2 * static_cast<std::size_t>(c)));
  }
};

template <>
struct Row<Bf16> {
  const std::uint8_t* p;
  MPE_AVX512_ROW Row(const std::uint8_t* r, std::int32_t) : p(r) {}
  MPE_AVX512_ROW static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, widen_u16(h), 16));
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c) const {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * static_cast<std::size_t>(c))));
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c, const TailMask& t) const {
    return widen(_mm256_maskz_loadu_epi16(t.lanes, p + 2 * static_cast<std::size_t>(c)));
  }
};

/// INT8 row-wise: add(mul(scale, float(q)), bias), FP32 scale and bias after the D codes.
template <>
struct Row<Int8Rowwise> {
  const std::uint8_t* p;
  __m512 scale, bias;
  MPE_AVX512_ROW Row(const std::uint8_t* r, std::int32_t D)
      : p(r), scale(_mm512_set1_ps(num::load_f32(r + D))), bias(_mm512_set1_ps(num::load_f32(r + D + 4))) {}
  MPE_AVX512_ROW __m512 decode(__m128i q) const { return add(mul(scale, to_float(widen_u8(q))), bias); }
  MPE_AVX512_ROW __m512 load(std::int32_t c) const {
    return decode(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c)));
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c, const TailMask& t) const {
    return decode(_mm_maskz_loadu_epi8(t.lanes, p + c));
  }
};

/// add(mul(scale, q), bias) for q = 0 .. 15 of the fused N-bit row at r (S = Int4Rowwise or
/// Int2Rowwise; INT2 looks up lanes 0 .. 3 only): the row's scale and bias decoded as the
/// AVX2 kernel does, then the decode's own multiply and add on each code.
template <class S>
MPE_AVX512_ROW inline __m512 code_values(const std::uint8_t* r, std::int32_t D) {
  const simd::Row<S> r8(r, D);
  const __m512 scale = _mm512_maskz_broadcastss_ps(kAll, _mm256_castps256_ps128(r8.scale));
  const __m512 bias = _mm512_maskz_broadcastss_ps(kAll, _mm256_castps256_ps128(r8.bias));
  const __m512 codes = _mm512_setr_ps(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f,
                                      11.0f, 12.0f, 13.0f, 14.0f, 15.0f);
  return add(mul(scale, codes), bias);
}

/// INT4 row-wise: add(mul(scale, float(q)), bias) with FP16 scale and bias after the
/// (D + 1) / 2 code bytes, low nibble first. The 16 possible values are computed once per
/// row (`table`, by those operations on q = 0 .. 15) and each element is looked up by its
/// code (`vpermps`, a move): the same bits as decoding every element, with 5 instructions
/// per 16 columns (load, shift, interleave, widen, permute) instead of 8 (load, interleave,
/// widen, shift, mask, convert, multiply, add), plus the accumulating add either way: fewer
/// instructions per row keep more rows in flight in the out-of-order window.
template <>
struct Row<Int4Rowwise> {
  const std::uint8_t* p;
  __m512 table;  // table[q] = add(mul(scale, q), bias), q = 0 .. 15
  MPE_AVX512_ROW Row(const std::uint8_t* r, std::int32_t D) : p(r), table(code_values<Int4Rowwise>(r, D)) {}
  /// Elements [c, c + 16) from the 8 bytes at c / 2 (c even): byte k's low nibble is element
  /// 2k, its high nibble (the byte shifted right by 4 within its 16-bit word) element 2k + 1;
  /// each lands in the low 4 bits of a 32-bit lane, the only bits `vpermps` reads.
  MPE_AVX512_ROW __m512 decode(__m128i b) const {
    return lookup(_mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4)));  // b0, b0 >> 4, b1, ...
  }
  /// table[code] for 16 bytes whose low 4 bits are the codes (the high 4 are ignored).
  MPE_AVX512_ROW __m512 lookup(__m128i codes) const {
    return _mm512_maskz_permutexvar_ps(kAll, widen_u8(codes), table);
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c) const {
    return decode(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c / 2)));
  }
  /// The tail's lanes: only the bytes holding their codes are read.
  MPE_AVX512_ROW __m512 load(std::int32_t c, const TailMask& t) const {
    return decode(_mm_maskz_loadu_epi8(t.int4_bytes, p + c / 2));
  }
  /// Elements [c, c + 64) into x[0 .. 4) (c even, c + 64 <= D): load(c + 16 k) for each k
  /// from one 32-byte load, one shift and two interleaves (within each 128-bit lane:
  /// unpacklo holds columns [c, c + 16) and [c + 32, c + 48), unpackhi the other two).
  MPE_AVX512_ROW void load64(std::int32_t c, __m512 (&x)[4]) const {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c / 2));
    const __m256i h = _mm256_srli_epi16(b, 4);
    const __m256i lo = _mm256_unpacklo_epi8(b, h), hi = _mm256_unpackhi_epi8(b, h);
    x[0] = lookup(_mm256_castsi256_si128(lo));
    x[1] = lookup(_mm256_castsi256_si128(hi));
    x[2] = lookup(_mm256_extracti128_si256(lo, 1));
    x[3] = lookup(_mm256_extracti128_si256(hi, 1));
  }
};

/// INT2 row-wise: as INT4, with the row's 4 values in `table` (lanes 0 .. 3; the others are
/// the same formula at q = 4 .. 15 and never looked up) and 16 elements from the 4 code bytes
/// at c / 4: the 32-bit word shifted right by 2 k in lane k, masked to its low 2 bits.
template <>
struct Row<Int2Rowwise> {
  const std::uint8_t* p;
  __m512 table;  // table[q] = add(mul(scale, q), bias), q = 0 .. 3 used
  MPE_AVX512_ROW Row(const std::uint8_t* r, std::int32_t D) : p(r), table(code_values<Int2Rowwise>(r, D)) {}
  /// table[code] for the 16 2-bit fields of w, field k (bits [2 k, 2 k + 2)) in lane k.
  MPE_AVX512_ROW __m512 decode(std::uint32_t w) const {
    const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i v = _mm512_maskz_srlv_epi32(kAll, _mm512_set1_epi32(static_cast<int>(w)), shifts);
    const __m512i q = _mm512_maskz_and_epi32(kAll, v, _mm512_set1_epi32(0x3));
    return _mm512_maskz_permutexvar_ps(kAll, q, table);
  }
  MPE_AVX512_ROW __m512 load(std::int32_t c) const {
    std::uint32_t w;
    __builtin_memcpy(&w, p + c / 4, 4);
    return decode(w);
  }
  /// The tail's lanes: only the bytes holding their codes are read.
  MPE_AVX512_ROW __m512 load(std::int32_t c, const TailMask& t) const {
    return decode(
        static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_maskz_loadu_epi8(t.int2_bytes, p + c / 4))));
  }
};

/// Formats whose Row decodes 64 columns at once (load64).
template <class S>
inline constexpr bool has_load64 = std::is_same_v<S, Int4Rowwise>;

/// acc[v] += x (weighted: w * x) for x = columns [c0 + 16 v, + 16) of one row of format
/// S; with `Tail` the last register loads only the lanes of `tail`.
template <class S, bool Weighted, int NV, bool Tail>
MPE_AVX512_ROW inline void add_row(__m512 (&acc)[NV], const std::uint8_t* row, std::int32_t D,
                                   std::int32_t c0, const TailMask& tail, __m512 w) {
  const Row<S> r(row, D);
  int v = 0;
  if constexpr (has_load64<S>) {
    for (; v + 4 <= NV - (Tail ? 1 : 0); v += 4) {
      __m512 x[4];
      r.load64(c0 + 16 * v, x);
      for (int k = 0; k < 4; ++k) {
        if constexpr (Weighted) x[k] = mul(w, x[k]);
        acc[v + k] = add(acc[v + k], x[k]);
      }
    }
  }
  for (; v < NV; ++v) {
    __m512 x = (Tail && v == NV - 1) ? r.load(c0 + 16 * v, tail) : r.load(c0 + 16 * v);
    if constexpr (Weighted) x = mul(w, x);
    acc[v] = add(acc[v], x);
  }
}

/// Rows [i, stop) of a bag into acc, each after prefetching the row src.dist occurrences
/// ahead (`Lines` points, 0: src.lines at run time); returns stop (or i).
template <class S, bool Weighted, int NV, bool Tail, std::int32_t Lines>
MPE_AVX512_ROW inline index_t prefetched_rows(__m512 (&acc)[NV], const simd::StoreRows& src, index_t i,
                                              index_t stop, const float* weights, std::int32_t D,
                                              std::int32_t c0, const TailMask& tail) {
  const std::uint8_t* const store = src.store;
  const std::size_t stride = src.stride;
  const index_t* const rows = src.rows;
  const std::int32_t lines = src.lines;
  const std::size_t last = src.bytes - 1;
  const index_t dist = src.dist;
  __m512 w = _mm512_setzero_ps();
  for (; i < stop; ++i) {
    simd::prefetch_row_lines<Lines>(simd::prefetch_address(store, rows[i + dist], stride), lines, last);
    if constexpr (Weighted) w = _mm512_set1_ps(weights[i]);
    add_row<S, Weighted, NV, Tail>(acc, store + static_cast<std::size_t>(rows[i]) * stride, D, c0, tail, w);
  }
  return i;
}

/// Rows [i, end) of a bag into acc without prefetching (the bag's last rows, whose rows
/// ahead lie past the batch, or a pass after the first), then acc to the columns [c0, c0 +
/// 16 NV) of o; with `Tail` the last register stores only the lanes of `tail`.
template <class S, bool Weighted, int NV, bool Tail>
MPE_AVX512_ROW inline void finish_columns(__m512 (&acc)[NV], const simd::StoreRows& src, index_t i,
                                          index_t end, const float* weights, std::int32_t D, std::int32_t c0,
                                          const TailMask& tail, float* o) {
  __m512 w = _mm512_setzero_ps();
  for (; i < end; ++i) {
    if constexpr (Weighted) w = _mm512_set1_ps(weights[i]);
    add_row<S, Weighted, NV, Tail>(acc, src.store + static_cast<std::size_t>(src.rows[i]) * src.stride, D, c0,
                                   tail, w);
  }
  for (int v = 0; v < NV; ++v) {
    if (Tail && v == NV - 1) {
      _mm512_mask_storeu_ps(o + c0 + 16 * v, tail.lanes, acc[v]);
    } else {
      _mm512_storeu_ps(o + c0 + 16 * v, acc[v]);
    }
  }
}

/// Columns [c0, c0 + 16 NV) of one bag, rows rows[i] of src for i in [begin, end), into
/// o: NV accumulators in registers; with `Tail` the last one holds only the lanes of
/// `tail` (the row's last D % 16 columns). With `prefetch` each row first prefetches the row
/// src.dist occurrences ahead (every line it touches), while that lies in the
/// batch; straight-line prefetch points for rows touching 1 to 4 lines.
template <class S, bool Weighted, int NV, bool Tail>
MPE_AVX512_TARGET inline void pool_columns(bool prefetch, const simd::StoreRows& src, index_t begin,
                                           index_t end, const float* weights, std::int32_t D, std::int32_t c0,
                                           const TailMask& tail, float* o) {
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  index_t i = begin;
  if (prefetch) {
    const index_t stop = src.prefetch_stop(end);
    if (src.lines == 4) {
      i = prefetched_rows<S, Weighted, NV, Tail, 4>(acc, src, i, stop, weights, D, c0, tail);
    } else if (src.lines == 3) {
      i = prefetched_rows<S, Weighted, NV, Tail, 3>(acc, src, i, stop, weights, D, c0, tail);
    } else if (src.lines == 2) {
      i = prefetched_rows<S, Weighted, NV, Tail, 2>(acc, src, i, stop, weights, D, c0, tail);
    } else if (src.lines == 1) {
      i = prefetched_rows<S, Weighted, NV, Tail, 1>(acc, src, i, stop, weights, D, c0, tail);
    } else {
      i = prefetched_rows<S, Weighted, NV, Tail, 0>(acc, src, i, stop, weights, D, c0, tail);
    }
  }
  finish_columns<S, Weighted, NV, Tail>(acc, src, i, end, weights, D, c0, tail, o);
}

/// pool_columns for NV = nv (1 .. 8) registers.
template <class S, bool Weighted, bool Tail>
MPE_AVX512_TARGET inline void pool_groups(bool prefetch, std::int32_t nv, const simd::StoreRows& src,
                                          index_t begin, index_t end, const float* weights, std::int32_t D,
                                          std::int32_t c0, const TailMask& tail, float* o) {
  switch (nv) {
    case 8:
      return pool_columns<S, Weighted, 8, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    case 7:
      return pool_columns<S, Weighted, 7, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    case 6:
      return pool_columns<S, Weighted, 6, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    case 5:
      return pool_columns<S, Weighted, 5, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    case 4:
      return pool_columns<S, Weighted, 4, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    case 3:
      return pool_columns<S, Weighted, 3, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    case 2:
      return pool_columns<S, Weighted, 2, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
    default:
      return pool_columns<S, Weighted, 1, Tail>(prefetch, src, begin, end, weights, D, c0, tail, o);
  }
}

/// Sum (weighted: sum of w * x) of occurrences [begin, end) of src into o (D floats, any
/// D >= 1): passes of up to 128 columns (8 registers), the last register of the last pass
/// masked to the row's last D % 16 columns. The first pass prefetches ahead; the others
/// find the rows in L1 / L2. An empty bag writes zeros.
template <class S, bool Weighted>
MPE_AVX512_TARGET void pool_bag(const simd::StoreRows& src, index_t begin, index_t end, const float* weights,
                                std::int32_t D, float* o) {
  const std::int32_t groups = (D + 15) / 16;  // registers per row, the last maybe partial
  const std::int32_t rem = D % 16;
  const TailMask tail = TailMask::of(rem);  // used only when rem != 0
  for (std::int32_t g = 0; g < groups; g += 8) {
    const std::int32_t nv = groups - g < 8 ? groups - g : 8;
    const bool has_tail = rem != 0 && g + nv == groups;
    const bool first = g == 0;
    if (has_tail) {
      pool_groups<S, Weighted, true>(first, nv, src, begin, end, weights, D, 16 * g, tail, o);
    } else {
      pool_groups<S, Weighted, false>(first, nv, src, begin, end, weights, D, 16 * g, tail, o);
    }
  }
}

/// `count` consecutive bags of one table from store rows, bag k = occurrences [offsets[k],
/// offsets[k + 1]) of `src` into the D = 16 NV floats at o + k * o_stride, unweighted: each
/// bag is pool_columns' work (prefetch on, no tail, `Lines` prefetch points) in one loop,
/// so the per-bag dispatch of pool_bag (register count, prefetch points, tail) is done once
/// per run instead of once per bag. The same operations in the same order: the same bits.
template <class S, int NV, std::int32_t Lines>
MPE_AVX512_TARGET void pool_bag_run(const simd::StoreRows& src, const index_t* offsets, index_t count,
                                    float* o, std::size_t o_stride) {
  constexpr std::int32_t D = 16 * NV;
  const TailMask tail = TailMask::of(0);
  for (index_t k = 0; k < count; ++k) {
    const index_t begin = offsets[k], end = offsets[k + 1];
    __m512 acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
    const index_t i = prefetched_rows<S, false, NV, false, Lines>(acc, src, begin, src.prefetch_stop(end),
                                                                  nullptr, D, 0, tail);
    finish_columns<S, false, NV, false>(acc, src, i, end, nullptr, D, 0, tail,
                                        o + static_cast<std::size_t>(k) * o_stride);
  }
}

/// pool_bag_run for src.lines prefetch points (1 .. 4, else the run-time loop).
template <class S, int NV>
MPE_AVX512_TARGET void pool_bag_run_lines(const simd::StoreRows& src, const index_t* offsets, index_t count,
                                          float* o, std::size_t o_stride) {
  switch (src.lines) {
    case 1:
      return pool_bag_run<S, NV, 1>(src, offsets, count, o, o_stride);
    case 2:
      return pool_bag_run<S, NV, 2>(src, offsets, count, o, o_stride);
    case 3:
      return pool_bag_run<S, NV, 3>(src, offsets, count, o, o_stride);
    case 4:
      return pool_bag_run<S, NV, 4>(src, offsets, count, o, o_stride);
    default:
      return pool_bag_run<S, NV, 0>(src, offsets, count, o, o_stride);
  }
}

/// Whether pool_bags_run takes rows of D columns: D a multiple of 16, at most 128.
inline bool bag_run_fits(std::int32_t D) { return D % 16 == 0 && D >= 16 && D <= 128; }

/// pool_bag_run_lines<S, N> for the N = NV + 1 (1 .. 8) with 16 N = D; nothing for other D.
template <class S, int... NV>
MPE_AVX512_TARGET void pool_bags_run_nv(std::integer_sequence<int, NV...>, const simd::StoreRows& src,
                                        const index_t* offsets, index_t count, std::int32_t D, float* o,
                                        std::size_t o_stride) {
  (void)((D == 16 * (NV + 1) ? (pool_bag_run_lines<S, NV + 1>(src, offsets, count, o, o_stride), true)
                             : false) ||
         ...);
}

/// pool_bag_run for D = 16 NV (bag_run_fits(D)).
template <class S>
MPE_AVX512_TARGET void pool_bags_run(const simd::StoreRows& src, const index_t* offsets, index_t count,
                                     std::int32_t D, float* o, std::size_t o_stride) {
  pool_bags_run_nv<S>(std::make_integer_sequence<int, 8>{}, src, offsets, count, D, o, o_stride);
}

/// Output element of a one-row bag from x (a row element): add(0, x), weighted add(0, mul(w, x))
/// (pool_bag's operations on a bag of one row, so the same bits).
template <bool Weighted>
MPE_AVX512_ROW inline __m512 single_value(__m512 x, __m512 w) {
  if constexpr (Weighted) x = mul(w, x);
  return add(_mm512_setzero_ps(), x);
}

/// One row of format S at `row` into the D floats at o as a one-row bag (single_value).
template <class S, bool Weighted>
MPE_AVX512_ROW inline void single_row(const std::uint8_t* row, std::int32_t D, const TailMask& tail, __m512 w,
                                      float* o) {
  const Row<S> r(row, D);
  std::int32_t c = 0;
  if constexpr (has_load64<S>) {
    for (; c + 64 <= D; c += 64) {
      __m512 x[4];
      r.load64(c, x);
      for (int k = 0; k < 4; ++k) _mm512_storeu_ps(o + c + 16 * k, single_value<Weighted>(x[k], w));
    }
  }
  for (; c + 16 <= D; c += 16) _mm512_storeu_ps(o + c, single_value<Weighted>(r.load(c), w));
  if (c < D) _mm512_mask_storeu_ps(o + c, tail.lanes, single_value<Weighted>(r.load(c, tail), w));
}

/// `count` bags of one row each (an embedding step's one index per table per sample): bag k's
/// row is occurrence i0 + k of `src` and its output the D floats at o + k * o_stride. `src`
/// is simd::pool_bag's row source: simd::StoreRows (store rows), or simd::FnRows (PoolBags'
/// mixed source: each occurrence from its FP32 cache row or the store, format S), whose
/// `ahead(i)` prefetches as pool_bag's first pass does. Each element is single_value of its
/// row's element: pool_bag's result for a bag of one row, bit for bit
/// (tests/host/test_pool_simd.cpp). One short loop over the run instead of one pool_bag call per
/// bag: pool_bag's per-call setup (~100 instructions) would be paid per row, and while every
/// row's prefetch waits on a page walk that setup fills the reorder buffer, leaving few rows
/// in flight; the loop spends a prefetch, a decode and a store per row.
template <class S, bool Weighted, class Src>
MPE_AVX512_TARGET void pool_single_rows(const Src& src, index_t i0, index_t count, const float* weights,
                                        std::int32_t D, float* o, std::size_t o_stride) {
  const TailMask tail = TailMask::of(D % 16);
  __m512 w = _mm512_setzero_ps();
  for (index_t k = 0; k < count; ++k) {
    const index_t i = i0 + k;
    src.ahead(i);
    if constexpr (Weighted) w = _mm512_set1_ps(weights[i]);
    bool cached = false;
    const std::uint8_t* row = src.row(i, cached);
    float* out = o + static_cast<std::size_t>(k) * o_stride;
    if (Src::may_be_cached && cached) {
      single_row<Fp32, Weighted>(row, D, tail, w, out);
    } else {
      single_row<S, Weighted>(row, D, tail, w, out);
    }
  }
}

/// SetVictims' list of one set whose policy scores a slot by its last use (Lru): the
/// unlocked occupied ways (tag >= 0, last use below `floor`) in way order, 8 ways per
/// compare and compress. Writes slot (base + way), score (the last use) and key (score << 8
/// | position in the list) for each, and clears `packed` where a score is 2^54 or more (the
/// keys then are not used). Returns the list's length, or -1 when a way is empty: the caller
/// then builds that set's list itself, over what was written (and `packed` is unchanged).
/// `ways` is a multiple of 8; each array holds `ways` entries (the 8-lane stores end within
/// them). Host only.
MPE_AVX512_TARGET inline std::int32_t unlocked_by_last_use(const std::int64_t* tags,
                                                           const std::uint64_t* last_use, std::int32_t ways,
                                                           std::uint64_t floor, std::int64_t base,
                                                           std::int64_t* slot, std::uint64_t* score,
                                                           std::uint64_t* key, bool& packed) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i fl = _mm512_set1_epi64(static_cast<long long>(floor));
  const __m512i big = _mm512_set1_epi64(std::int64_t{1} << 54);
  __mmask8 wide = 0, empty = 0;
  std::int32_t n = 0;
  for (std::int32_t w = 0; w < ways; w += 8) {
    empty |= _mm512_mask_cmplt_epi64_mask(kAll8, _mm512_loadu_si512(tags + w), zero);
    const __m512i use = _mm512_loadu_si512(last_use + w);
    const __mmask8 m = _mm512_mask_cmplt_epu64_mask(kAll8, use, fl);  // unlocked (every way occupied)
    wide |= _mm512_mask_cmpge_epu64_mask(m, use, big);
    const __m512i sc = _mm512_maskz_compress_epi64(m, use);
    const __m512i way = _mm512_maskz_compress_epi64(m, _mm512_add_epi64(lanes, _mm512_set1_epi64(w)));
    _mm512_storeu_si512(score + n, sc);
    _mm512_storeu_si512(slot + n, _mm512_add_epi64(way, _mm512_set1_epi64(base)));
    _mm512_storeu_si512(key + n, _mm512_or_si512(_mm512_maskz_slli_epi64(kAll8, sc, 8),
                                                 _mm512_add_epi64(lanes, _mm512_set1_epi64(n))));
    n += __builtin_popcount(static_cast<unsigned>(m));
  }
  if (empty != 0) return -1;
  packed = packed && wide == 0;
  return n;
}

/// The smallest of the n >= 1 keys at `key` (unsigned), 8 per compare.
MPE_AVX512_TARGET inline std::uint64_t min_key(const std::uint64_t* key, std::int32_t n) {
  __m512i m = _mm512_set1_epi64(-1);
  for (std::int32_t k = 0; k < n; k += 8) {
    const __mmask8 in = n - k >= 8 ? kAll8 : static_cast<__mmask8>((1u << (n - k)) - 1u);
    m = _mm512_maskz_min_epu64(kAll8, m, _mm512_mask_loadu_epi64(_mm512_set1_epi64(-1), in, key + k));
  }
  // Halves, quarters, then the two lanes of a quarter: lane 0 ends with the minimum.
  m = _mm512_maskz_min_epu64(kAll8, m, _mm512_maskz_shuffle_i64x2(kAll8, m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm512_maskz_min_epu64(kAll8, m, _mm512_maskz_shuffle_i64x2(kAll8, m, m, _MM_SHUFFLE(2, 3, 0, 1)));
  m = _mm512_maskz_min_epu64(kAll8, m, _mm512_maskz_shuffle_epi32(kAll, m, _MM_PERM_BADC));
  return static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm512_maskz_extracti32x4_epi32(0xf, m, 0)));
}

}  // namespace simd512

#undef MPE_AVX512_ROW
#undef MPE_AVX512_TARGET

}  // namespace mpe::detail
