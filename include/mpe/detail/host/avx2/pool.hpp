// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/avx2/pool.hpp
/// @brief Host-only AVX2 (+F16C) kernels (not public): one bag pooled 8 columns per
/// register, runs of one-row bags, the cache fill's row decode, the tag scan and the
/// minimum of SetVictims' keys, with the bits of the portable code. Included by
/// detail/host/dispatch.hpp where MPE_HOST_SIMD holds, which also chooses them at run time.
///
/// Every function carries `__attribute__((target("avx2,f16c")))`, so the default build stays
/// baseline x86-64. The row decoders are common/decode8.hpp's; the row sources and prefetch
/// points common/rows.hpp's.
///
/// Bits (the numerics contract): every element is decoded exactly as `Storage::Reader`
/// defines it and added to its column's accumulator with one correctly rounded add (weighted:
/// one multiply, then one add), rows in index order per column, as the portable loop does.
/// No FMA: the target set excludes "fma". Accumulators start at +0.0f like the portable
/// loop's zeroed output, columns past the last full group of 8 use the portable per-element
/// code.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "mpe/detail/host/common/decode8.hpp"
#include "mpe/detail/host/common/rows.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/storage/all.hpp"

#define MPE_SIMD_TARGET __attribute__((target("avx2,f16c")))
#define MPE_SIMD_ROW [[gnu::always_inline]] MPE_SIMD_TARGET

namespace mpe::detail::simd {

/// One pooling step on elements [c, c + 8) of a row of format S, as pool_columns does it:
/// out[k] = acc[k] + x (weighted: acc[k] + w * x) with x from load8_for_arith. Lets tests
/// (compiled without AVX2) check the fast decode through the operations that consume it.
template <class S>
MPE_SIMD_TARGET void pool_step8(float* out, const std::uint8_t* row, std::int32_t D, std::int32_t c,
                                const float* acc, float w, bool weighted) {
  const Row<S> r(row, D);
  __m256 x = load8_for_arith<S>(r, c);
  if (weighted) x = _mm256_mul_ps(_mm256_set1_ps(w), x);
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(acc), x));
}

/// acc[v] += x (weighted: w * x) for x = columns [c0 + 8 v, + 8) of one row of format R.
template <class R, bool Weighted, int NV>
[[gnu::always_inline]] MPE_SIMD_TARGET inline void add_row(__m256 (&acc)[NV], const std::uint8_t* row,
                                                           std::int32_t D, std::int32_t c0, __m256 w) {
  const Row<R> r = Row<R>(row, D).at(c0);  // constant offsets below: one address register
  for (int v = 0; v < NV; ++v) {
    __m256 x = load8_for_arith<R>(r, 8 * v);
    if constexpr (Weighted) x = _mm256_mul_ps(w, x);
    acc[v] = _mm256_add_ps(acc[v], x);
  }
}

/// Store-only rows [i, stop) of a bag into acc, each after prefetching the row src.dist
/// occurrences ahead (prefetch_row_lines<Lines>); returns the first row
/// not pooled (stop, or i when i >= stop).
template <class S, bool Weighted, int NV, std::int32_t Lines>
[[gnu::always_inline]] MPE_SIMD_TARGET inline index_t prefetched_rows(__m256 (&acc)[NV], const StoreRows& src,
                                                                      index_t i, index_t stop,
                                                                      const float* weights, std::int32_t D,
                                                                      std::int32_t c0) {
  const std::uint8_t* const store = src.store;
  const std::size_t stride = src.stride;
  const index_t* const rows = src.rows;
  const std::int32_t lines = src.lines;
  const std::size_t last = src.bytes - 1;
  const index_t dist = src.dist;
  __m256 w = _mm256_setzero_ps();
  for (; i < stop; ++i) {
    prefetch_row_lines<Lines>(prefetch_address(store, rows[i + dist], stride), lines, last);
    if constexpr (Weighted) w = _mm256_set1_ps(weights[i]);
    add_row<S, Weighted, NV>(acc, store + static_cast<std::size_t>(rows[i]) * stride, D, c0, w);
  }
  return i;
}

/// Straight-line copies of the prefetching loop exist for 1 .. kUnrolledLines points.
inline constexpr std::int32_t kUnrolledLines = 5;

/// prefetched_rows with Lines = src.lines where that is at most L, else the run-time count
/// (Lines = 0): one test of the count per bag, none per row.
template <class S, bool Weighted, int NV, std::int32_t L = kUnrolledLines>
[[gnu::always_inline]] MPE_SIMD_TARGET inline index_t prefetched_rows_for(__m256 (&acc)[NV],
                                                                          const StoreRows& src, index_t i,
                                                                          index_t stop, const float* weights,
                                                                          std::int32_t D, std::int32_t c0) {
  if constexpr (L == 0) {
    return prefetched_rows<S, Weighted, NV, 0>(acc, src, i, stop, weights, D, c0);
  } else {
    if (src.lines == L) return prefetched_rows<S, Weighted, NV, L>(acc, src, i, stop, weights, D, c0);
    return prefetched_rows_for<S, Weighted, NV, L - 1>(acc, src, i, stop, weights, D, c0);
  }
}

/// acc[v] = 0 and o[8 v, + 8) = acc[v] for every v < NV, in straight-line code: as loops,
/// GCC turns the stores into a memcpy from the accumulators, which then live on the stack
/// and are zeroed by `rep stos` (a third of pooling's time with one row per bag).
template <std::size_t... V>
MPE_SIMD_ROW inline void zero_acc(__m256* acc, std::index_sequence<V...>) {
  ((acc[V] = _mm256_setzero_ps()), ...);
}
template <std::size_t... V>
MPE_SIMD_ROW inline void store_acc(float* o, const __m256* acc, std::index_sequence<V...>) {
  (_mm256_storeu_ps(o + 8 * V, acc[V]), ...);
}

/// Columns [c0, c0 + 8 NV) of one bag: accumulators in registers over the bag's rows in
/// index order. StoreRows: occurrence i reads store row rows[i], and with `Prefetch` the
/// row src.dist occurrences ahead is prefetched first (a loop with prefetches,
/// then one without, so the per-row work is the prefetch points, the row's address and its
/// loads and adds). FnRows: `src.row(i, cached)` gives the row (an FP32 cache row when
/// cached) and, with `Prefetch`, `src.ahead(i)` is called first.
template <class S, bool Weighted, int NV, bool Prefetch, class Src>
MPE_SIMD_TARGET inline void pool_columns(const Src& src, index_t begin, index_t end, const float* weights,
                                         std::int32_t D, std::int32_t c0, float* o) {
  __m256 acc[NV];
  zero_acc(acc, std::make_index_sequence<NV>{});
  __m256 w = _mm256_setzero_ps();
  if constexpr (!Src::may_be_cached) {
    const std::uint8_t* const store = src.store;
    const std::size_t stride = src.stride;
    const index_t* const rows = src.rows;
    index_t i = begin;
    if constexpr (Prefetch) {
      // The loop with prefetches, one copy per common number of prefetch points (no branch
      // on it per row); then the bag's last rows, whose rows ahead lie past the batch.
      const index_t stop = src.prefetch_stop(end);
      i = prefetched_rows_for<S, Weighted, NV>(acc, src, i, stop, weights, D, c0);
    }
    for (; i < end; ++i) {
      if constexpr (Weighted) w = _mm256_set1_ps(weights[i]);
      add_row<S, Weighted, NV>(acc, store + static_cast<std::size_t>(rows[i]) * stride, D, c0, w);
    }
  } else {
    for (index_t i = begin; i < end; ++i) {
      if constexpr (Prefetch) src.ahead(i);
      bool cached = false;
      const std::uint8_t* row = src.row(i, cached);
      if constexpr (Weighted) w = _mm256_set1_ps(weights[i]);
      if (cached) {
        add_row<Fp32, Weighted, NV>(acc, row, D, c0, w);
      } else {
        add_row<S, Weighted, NV>(acc, row, D, c0, w);
      }
    }
  }
  store_acc(o + c0, acc, std::make_index_sequence<NV>{});
}

/// pool_columns for NV = nv (1 .. 8) groups of 8 columns.
template <class S, bool Weighted, bool Prefetch, class Src>
MPE_SIMD_TARGET inline void pool_groups(std::int32_t nv, const Src& src, index_t begin, index_t end,
                                        const float* weights, std::int32_t D, std::int32_t c0, float* o) {
  switch (nv) {
    case 8:
      pool_columns<S, Weighted, 8, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 7:
      pool_columns<S, Weighted, 7, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 6:
      pool_columns<S, Weighted, 6, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 5:
      pool_columns<S, Weighted, 5, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 4:
      pool_columns<S, Weighted, 4, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 3:
      pool_columns<S, Weighted, 3, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 2:
      pool_columns<S, Weighted, 2, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    default:
      pool_columns<S, Weighted, 1, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
  }
}

/// Sum (weighted: sum of w * x) of occurrences [begin, end) into o (D), columns in groups of
/// up to 64 (8 registers) plus a scalar tail (the Reader's per-element code). The first
/// pass over the rows prefetches ahead (StoreRows: prefetched_rows in the column groups,
/// src.ahead in the scalar tail when D < 8; FnRows: src.ahead), the others find the rows
/// in L1/L2.
template <class S, bool Weighted, class Src>
MPE_SIMD_TARGET void pool_bag(const Src& src, index_t begin, index_t end, const float* weights,
                              std::int32_t D, float* o) {
  const std::int32_t full = D / 8;  // whole groups of 8 columns
  bool first = true;
  for (std::int32_t g = 0; g < full; g += 8) {
    const std::int32_t nv = full - g < 8 ? full - g : 8;
    if (first) {
      pool_groups<S, Weighted, true>(nv, src, begin, end, weights, D, 8 * g, o);
    } else {
      pool_groups<S, Weighted, false>(nv, src, begin, end, weights, D, 8 * g, o);
    }
    first = false;
  }
  const std::int32_t t0 = 8 * full;
  if (t0 == D) return;
  for (std::int32_t d = t0; d < D; ++d) o[d] = 0.0f;
  for (index_t i = begin; i < end; ++i) {
    if (first) src.ahead(i);
    bool cached = false;
    const std::uint8_t* row = src.row(i, cached);
    const float w = Weighted ? weights[i] : 1.0f;
    if (Src::may_be_cached && cached) {
      for (std::int32_t d = t0; d < D; ++d) {
        const float x = num::load_f32(row + 4 * static_cast<std::size_t>(d));
        o[d] = Weighted ? num::add(o[d], num::mul(w, x)) : num::add(o[d], x);
      }
    } else {
      const typename S::Reader rd(row, D);
      for (std::int32_t d = t0; d < D; ++d) {
        const float x = rd[d];
        o[d] = Weighted ? num::add(o[d], num::mul(w, x)) : num::add(o[d], x);
      }
    }
  }
}

/// One row of format S at `row` into the D floats at o as a one-row bag: add(0, x), weighted
/// add(0, mul(w, x)), for each element x (pool_bag's operations on a bag of one row: groups
/// of 8 by load8_for_arith, the rest by the Reader, or FP32 loads for S = Fp32).
template <class S, bool Weighted>
[[gnu::always_inline]] MPE_SIMD_TARGET inline void single_row(const std::uint8_t* row, std::int32_t D,
                                                              float w, float* o) {
  const Row<S> r(row, D);
  const __m256 wv = _mm256_set1_ps(w), zero = _mm256_setzero_ps();
  std::int32_t c = 0;
  for (; c + 8 <= D; c += 8) {
    __m256 x = load8_for_arith<S>(r, c);
    if constexpr (Weighted) x = _mm256_mul_ps(wv, x);
    _mm256_storeu_ps(o + c, _mm256_add_ps(zero, x));
  }
  if (c == D) return;
  const typename S::Reader rd(row, D);
  for (; c < D; ++c) {
    const float x = rd[c];
    o[c] = Weighted ? num::add(0.0f, num::mul(w, x)) : num::add(0.0f, x);
  }
}

/// simd512::pool_single_rows's AVX2 twin (hosts without AVX-512), on the same row sources:
/// `count` bags of one row each, bag k's row occurrence i0 + k of `src` and its output
/// o + k * o_stride; each element what pool_bag gives a bag of one row, bit for bit.
template <class S, bool Weighted, class Src>
MPE_SIMD_TARGET void pool_single_rows(const Src& src, index_t i0, index_t count, const float* weights,
                                      std::int32_t D, float* o, std::size_t o_stride) {
  float w = 1.0f;
  for (index_t k = 0; k < count; ++k) {
    const index_t i = i0 + k;
    src.ahead(i);
    if constexpr (Weighted) w = weights[i];
    bool cached = false;
    const std::uint8_t* row = src.row(i, cached);
    float* out = o + static_cast<std::size_t>(k) * o_stride;
    if (Src::may_be_cached && cached) {
      single_row<Fp32, Weighted>(row, D, w, out);
    } else {
      single_row<S, Weighted>(row, D, w, out);
    }
  }
}

/// Decodes one store row of format S (has_row<S>) into D floats at dst: the Reader's values,
/// bit for bit (8-column groups by Row<S>::load8, which is exact, the rest by the Reader;
/// NaN payloads where two NaNs meet in the decode's add are not promised, docs/numerics.md).
/// A cache fill. Pinned by tests/host/test_pool_simd.cpp.
///
/// `Stream`: where dst is 32-byte aligned, the 8-column groups are written with
/// non-temporal stores (`vmovntps`): no read for ownership of the destination lines and no
/// cache pollution, the same values. They are weakly ordered: the calling thread reads them
/// back as usual, but another thread may only after the writer's `_mm_sfence` (the caller's
/// duty; AdmitSet::run_fused issues it once at its end).
template <class S, bool Stream = false>
MPE_SIMD_TARGET void decode_row(const std::uint8_t* src, std::int32_t D, float* dst) {
  const Row<S> r(src, D);
  std::int32_t c = 0;
  if (Stream && (reinterpret_cast<std::uintptr_t>(dst) & 31) == 0) {
    for (; c + 8 <= D; c += 8) _mm256_stream_ps(dst + c, r.load8(c));
  }
  for (; c + 8 <= D; c += 8) _mm256_storeu_ps(dst + c, r.load8(c));
  if (c < D) {
    const typename S::Reader rd(src, D);
    for (; c < D; ++c) dst[c] = rd[c];
  }
}

/// Index of the first of the n 64-bit words at `p` equal to `v`, or -1; four per compare.
template <class T>
MPE_SIMD_TARGET inline std::int32_t find_equal64(const T* p, std::int32_t n, T v) {
  static_assert(sizeof(T) == 8);
  const __m256i want = _mm256_set1_epi64x(static_cast<long long>(v));
  std::int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const int m = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x, want)));
    if (m != 0) return i + __builtin_ctz(static_cast<unsigned>(m));
  }
  for (; i < n; ++i) {
    if (p[i] == v) return i;
  }
  return -1;
}

/// First of the `ways` tags at `tags` equal to `row`, or -1: CacheRef::find_in_set's scan,
/// four tags per compare.
MPE_SIMD_TARGET inline std::int32_t find_tag(const std::int64_t* tags, std::int32_t ways, std::int64_t row) {
  return find_equal64(tags, ways, row);
}

/// The smallest of the n >= 1 keys at `key`, all below 2^63 (SetVictims' packed keys and
/// its mark of a slot handed out), four keys per compare.
MPE_SIMD_TARGET inline std::uint64_t min_key(const std::uint64_t* key, std::int32_t n) {
  std::int32_t k = 0;
  std::uint64_t m = key[0];
  if (n >= 4) {
    __m256i best = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key));
    for (k = 4; k + 4 <= n; k += 4) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key + k));
      best = _mm256_blendv_epi8(best, v, _mm256_cmpgt_epi64(best, v));  // signed: keys < 2^63
    }
    alignas(32) std::uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
    m = lanes[0];
    for (int l = 1; l < 4; ++l) m = lanes[l] < m ? lanes[l] : m;
  }
  for (; k < n; ++k) m = key[k] < m ? key[k] : m;
  return m;
}

}  // namespace mpe::detail::simd

#undef MPE_SIMD_ROW
#undef MPE_SIMD_TARGET
