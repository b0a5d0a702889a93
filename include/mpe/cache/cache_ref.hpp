// SPDX-License-Identifier: Apache-2.0
/// @file cache_ref.hpp
/// @brief Trivially copyable views of the FP32 row cache and of the LFU count-min
/// sketch, usable inside per-item code (host loops or users' own CUDA kernels).
#pragma once

#include <cstdint>

#include "mpe/cache/hash.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe {

/// View of a set-associative FP32 row cache: `num_sets * ways` slots; slot s of set k is
/// `k * ways + w`. Memory space: the backend's (host or device).
struct CacheRef {
  float* rows = nullptr;              ///< (slots, D) FP32 rows
  std::int64_t* tags = nullptr;       ///< (slots) global row held, -1 if empty
  std::uint64_t* last_use = nullptr;  ///< (slots) populate counter of the last batch using it
  std::uint8_t* dirty = nullptr;      ///< (slots) 1 if the row changed since it was filled
  std::int64_t num_sets = 0;
  std::int32_t ways = 1;
  std::int32_t dim = 0;

  MPE_HOST_DEVICE std::int64_t slots() const { return num_sets * ways; }
  /// Set of a global row (requires num_sets > 0).
  MPE_HOST_DEVICE std::int64_t set_of(std::int64_t row) const { return set_of_row(row, num_sets); }
  /// Slot holding `row`, or -1 (also -1 when the cache has no sets). O(ways).
  MPE_HOST_DEVICE std::int64_t find(std::int64_t row) const {
    if (num_sets == 0) return -1;
    const std::int64_t base = set_of(row) * ways;
    for (std::int32_t w = 0; w < ways; ++w) {
      if (tags[base + w] == row) return base + w;
    }
    return -1;
  }
  /// Empties a slot without write-back (its row is then read from the store).
  MPE_HOST_DEVICE void drop(std::int64_t slot) const {
    tags[slot] = -1;
    dirty[slot] = 0;
    last_use[slot] = 0;
  }
  /// FP32 row of a slot: D floats.
  MPE_HOST_DEVICE float* row(std::int64_t slot) const { return rows + slot * dim; }
};

/// View of a count-min sketch (Cormode and Muthukrishnan, 2005) of `depth` x `width`
/// 32-bit counters, width a power of two. estimate() never under-counts.
struct SketchRef {
  static constexpr int depth = 4;
  std::uint32_t* counters = nullptr;  ///< (depth, width)
  std::int64_t width = 0;

  /// Counter index of `row` in line k.
  MPE_HOST_DEVICE std::int64_t cell(std::int64_t row, int k) const {
    const std::uint64_t h =
        mix64(static_cast<std::uint64_t>(row) * 4u + static_cast<std::uint64_t>(k) + 0x5bd1e995u);
    return static_cast<std::int64_t>(k) * width +
           static_cast<std::int64_t>(h & static_cast<std::uint64_t>(width - 1));
  }
  /// Minimum over the lines: the frequency estimate of `row`.
  MPE_HOST_DEVICE std::uint32_t estimate(std::int64_t row) const {
    std::uint32_t m = counters[cell(row, 0)];
    for (int k = 1; k < depth; ++k) {
      const std::uint32_t c = counters[cell(row, k)];
      m = c < m ? c : m;
    }
    return m;
  }
};

}  // namespace mpe
