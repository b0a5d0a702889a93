// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/layout.hpp
/// @brief detail::EmbeddingLayout: the sizes of every buffer a CachedEmbedding allocates,
/// derived from its EmbeddingConfig alone (CachedEmbedding::layout_of computes it; the
/// constructor allocates from it and planned_memory() counts it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpe::detail {

/// What a CachedEmbedding's constructor (and its first applied backward()) allocates, in
/// elements of each buffer, computed once from a validated EmbeddingConfig.
struct EmbeddingLayout {
  std::vector<std::int64_t> table_offsets;  ///< (T + 1) first global row of each table, then the total
  std::int64_t total_rows = 0;              ///< rows of all tables
  std::size_t stride = 0;       ///< bytes of one store row (padding and slot-index entry included)
  std::size_t slot_offset = 0;  ///< > 0: byte of the slot-index entry in each store row
  std::int64_t num_sets = 0;    ///< cache sets (0: no cache)
  std::size_t slots = 0;        ///< cache slots, num_sets x Ways
  std::size_t row_keys = 0;     ///< entries of the row-key array: T with config.row_keys, else 0
  std::size_t column_keys = 0;  ///< entries of the column-key array: T with a nonzero column key, else 0
  std::size_t slot_index_entries = 0;  ///< entries of the separate slot-index array: rows, or 0
  std::size_t meta_words = 0;          ///< the cache policy's 32-bit words for `slots`

  /// Bytes of the store: rows x stride.
  std::size_t store_bytes() const { return static_cast<std::size_t>(total_rows) * stride; }
  /// Bytes of the stored optimizer state, allocated by the first applied backward():
  /// `rows` x S values of `value_bytes` each (0 for S = 0).
  static std::size_t state_bytes(std::int64_t rows, std::int64_t S, std::size_t value_bytes) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(S) * value_bytes;
  }
  /// FP32 values of the cached rows' state, allocated with it: `slots` x S with a compact
  /// state precision (`cached`), else 0.
  static std::size_t cached_state_floats(std::size_t slots, std::int64_t S, bool cached) {
    return cached ? slots * static_cast<std::size_t>(S) : 0;
  }
};

}  // namespace mpe::detail
