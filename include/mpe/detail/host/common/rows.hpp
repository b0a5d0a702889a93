// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/common/rows.hpp
/// @brief Row sources and prefetch points shared by the host's AVX2 and AVX-512 pooling
/// kernels (not public): `simd::StoreRows` (store rows, or the FP32 cache rows of an
/// all-cached bag), `simd::FnRows` (rows from their slot or the store) and the prefetch of a
/// row's 64-byte lines. The distances come from detail/host/dispatch.hpp. Host only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpe/numeric/config.hpp"

namespace mpe::detail::simd {

/// Prefetch points of one row of `last` + 1 bytes at p: p + last, and p + 64 k for
/// k < lines - 1; `f(address)` is called for each. With lines = row_lines(...) every 64-byte
/// line the row touches gets one (the points p + 64 k step one line each, the last byte's
/// line ends it). `Lines` > 0: that many points in straight-line code; 0: `lines` at run time.
template <std::int32_t Lines, class F>
[[gnu::always_inline]] inline void for_row_lines(const std::uint8_t* p, std::int32_t lines, std::size_t last,
                                                 F&& f) {
  f(p + last);
  if constexpr (Lines > 0) {
    for (std::int32_t k = 0; k + 1 < Lines; ++k) f(p + 64 * static_cast<std::size_t>(k));
  } else {
    for (std::int32_t k = 0; k + 1 < lines; ++k) f(p + 64 * static_cast<std::size_t>(k));
  }
}

/// A read prefetch of a row that pooling reads from one row array (the store, or the FP32
/// cache rows of an all-cached bag): `prefetcht1` (into L2, not L1). Pooling keeps many rows
/// in flight (pool_rows_ahead); L1 prefetches of that many lines would occupy L1's few miss
/// buffers and stall the loop's own loads, while L2 has room for them. Inlined always: a
/// separate function holding only prefetches is "const" to GCC's IPA and its calls are
/// deleted (see prefetch_lines).
struct PrefetchRead {
  [[gnu::always_inline]] inline void operator()(const std::uint8_t* a) const { __builtin_prefetch(a, 0, 2); }
};

/// Prefetches (read, into L2: PrefetchRead) the points of for_row_lines; host only.
template <std::int32_t Lines>
[[gnu::always_inline]] inline void prefetch_row_lines(const std::uint8_t* p, std::int32_t lines,
                                                      std::size_t last) {
  for_row_lines<Lines>(p, lines, last, PrefetchRead{});
}

/// Prefetch points per row for prefetch_row_lines: the most 64-byte lines a row of `bytes`
/// bytes can touch, ceil((bytes + 64 - g) / 64), where g (a power of two, at most 64) divides
/// the store's address and the stride, so every row starts g-aligned, at most 64 - g bytes
/// into a line. 64-byte aligned rows: ceil(bytes / 64); FBGEMM-style INT8 rows of D = 64
/// (72 bytes at a 72-byte stride, g = 8): 2, not 3 (a 72-byte row never straddles 3 lines).
inline std::int32_t row_lines(const std::uint8_t* store, std::size_t stride, std::size_t bytes) {
  const std::size_t a = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(store)) | stride | 64;
  const std::size_t g = a & (~a + 1);  // lowest set bit: the largest power of two dividing both (<= 64)
  return static_cast<std::int32_t>((bytes + 64 - g + 63) / 64);
}

/// Address of row r (stride bytes) of `store`, only to prefetch: computed as an integer, so
/// a row index of -1 (an uncached occurrence of the FP32 cache-row source, PoolBags) gives
/// an address that is never read, not an out-of-range pointer.
[[gnu::always_inline]] inline const std::uint8_t* prefetch_address(const std::uint8_t* store, index_t r,
                                                                   std::size_t stride) {
  return reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(store) +
                                               static_cast<std::uintptr_t>(r) * stride);
}

/// Row source of store-only pooling: occurrence i reads store row rows[i]. The first pass
/// over a bag prefetches the row `dist` occurrences ahead (prefetch_row_lines).
struct StoreRows {
  static constexpr bool may_be_cached = false;
  const std::uint8_t* store;
  std::size_t stride;
  std::size_t bytes;  ///< data bytes of a row (> 0)
  const index_t* rows;
  index_t n;           ///< occurrences of the whole batch (prefetches stop at the last)
  std::int32_t lines;  ///< row_lines(store, stride, bytes)
  index_t dist;        ///< occurrences ahead prefetched: pool_rows_ahead(lines)
  /// The source of rows[0 .. n) of `store`, with its prefetch points and the distance
  /// `ahead(lines)` (detail/host/dispatch.hpp's pool_rows_ahead).
  template <class Ahead>
  static StoreRows of(const std::uint8_t* store, std::size_t stride, std::size_t bytes, const index_t* rows,
                      index_t n, Ahead ahead) {
    const std::int32_t lines = row_lines(store, stride, bytes);
    return StoreRows{store, stride, bytes, rows, n, lines, ahead(lines)};
  }
  [[gnu::always_inline]] inline const std::uint8_t* row(index_t i, bool& cached) const {
    cached = false;
    return store + static_cast<std::size_t>(rows[i]) * stride;
  }
  [[gnu::always_inline]] inline void ahead(index_t i) const {
    if (i + dist < n)
      prefetch_row_lines<0>(prefetch_address(store, rows[i + dist], stride), lines, bytes - 1);
  }
  /// One past the last occurrence before `end` whose row `dist` ahead lies in the batch:
  /// the end of a bag's prefetching loop.
  [[gnu::always_inline]] inline index_t prefetch_stop(index_t end) const {
    return end < n - dist ? end : n - dist;
  }
};

/// Row source from two callables: row(i, cached) and ahead(i) (pooling with a cache).
template <class RowFn, class AheadFn>
struct FnRows {
  static constexpr bool may_be_cached = true;
  RowFn row_fn;
  AheadFn ahead_fn;
  [[gnu::always_inline]] inline const std::uint8_t* row(index_t i, bool& cached) const {
    return row_fn(i, cached);
  }
  [[gnu::always_inline]] inline void ahead(index_t i) const { ahead_fn(i); }
};

}  // namespace mpe::detail::simd
