// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/cache_ref.hpp
/// @brief Trivially copyable views of the FP32 row cache, of the LFU count-min sketch and of
/// the second-touch doorkeeper, usable inside per-item code (host loops or users' own CUDA
/// kernels).
#pragma once

#include <cstdint>

#include "mpe/cache/hash.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe {

/// View of a set-associative FP32 row cache: `num_sets * ways` slots; way w of set k is
/// slot `k * ways + w`. Memory space: the backend's (host memory with HostBackend,
/// device memory with CudaBackend: dereference from device code only). Obtained from
/// CachedEmbedding::cache_ref(); the pointers stay valid until that object is moved or
/// destroyed, the contents change with every call that fills, writes or flushes the
/// cache (the list in EmbeddingRef's comment).
struct CacheRef {
  float* rows = nullptr;              ///< (slots, D) FP32 rows
  std::int64_t* tags = nullptr;       ///< (slots) global row held, -1 if empty
  std::uint64_t* last_use = nullptr;  ///< (slots) populate counter of the last batch using it
  std::uint8_t* dirty = nullptr;      ///< (slots) 1 if the row changed since it was filled
  /// Number of sets; 0 when the object has no cache (then no slot exists and find()
  /// returns -1). A global row can only live in set mix64(row) mod num_sets (set_of()).
  std::int64_t num_sets = 0;
  /// Slots per set (the associativity: the cache policy's compile-time Ways), >= 1.
  std::int32_t ways = 1;
  /// Floats per cached row: the table's embedding dimension D (row(slot) = rows + slot * D).
  std::int32_t dim = 0;
  /// The slot index (EmbeddingConfig::slot_index): row 0's entry, the slot of that global
  /// row or -1 where it is not cached; row r's entry is slot_entry(r), slot_stride int32s
  /// further on. Null without an index. Tags are written through set_tag(), which keeps it
  /// exact.
  std::int32_t* slot_of_row = nullptr;
  /// int32 elements from one row's slot index entry to the next: 1 for a (rows) array, the
  /// store's row stride / 4 where the entries live in the store rows
  /// (EmbeddingConfig::slot_index_in_rows).
  std::int64_t slot_stride = 1;
  /// Row `row`'s slot index entry (requires slot_of_row non-null).
  MPE_HOST_DEVICE std::int32_t* slot_entry(std::int64_t row) const { return slot_of_row + row * slot_stride; }

  /// Total number of slots, num_sets * ways (CachedEmbedding::cache_slots()): the length
  /// of tags, last_use and dirty, and the number of rows in `rows`.
  MPE_HOST_DEVICE std::int64_t slots() const { return num_sets * ways; }
  /// Set of a global row (requires num_sets > 0).
  MPE_HOST_DEVICE std::int64_t set_of(std::int64_t row) const { return set_of_row(row, num_sets); }
  /// Slot holding `row`, or -1 (also -1 when the cache has no sets). O(ways); one load with
  /// a slot index.
  MPE_HOST_DEVICE std::int64_t find(std::int64_t row) const {
    if (num_sets == 0) return -1;
    if (slot_of_row) return *slot_entry(row);
    return find_in_set(set_of(row) * ways, row);
  }
  /// Slot holding `row` among the `ways` slots from `base` (a set's first slot), or -1.
  MPE_HOST_DEVICE std::int64_t find_in_set(std::int64_t base, std::int64_t row) const {
    for (std::int32_t w = 0; w < ways; ++w) {
      if (tags[base + w] == row) return base + w;
    }
    return -1;
  }
  /// Empties a slot without write-back (its row is then read from the store).
  MPE_HOST_DEVICE void drop(std::int64_t slot) const {
    set_tag(slot, -1);
    dirty[slot] = 0;
    last_use[slot] = 0;
  }
  /// Makes `slot` hold global row `row`, or empties it (`row` = -1), keeping the slot index
  /// exact: the row the slot held (if any) is no longer found. Writes the tag and the index
  /// only: the caller fills the FP32 row, its last use and dirty byte.
  MPE_HOST_DEVICE void set_tag(std::int64_t slot, std::int64_t row) const {
    if (slot_of_row) {
      if (tags[slot] >= 0) *slot_entry(tags[slot]) = -1;
      if (row >= 0) *slot_entry(row) = static_cast<std::int32_t>(slot);
    }
    tags[slot] = row;
  }
  /// FP32 row of a slot: D floats.
  MPE_HOST_DEVICE float* row(std::int64_t slot) const { return rows + slot * dim; }
};

/// View of a count-min sketch (Cormode and Muthukrishnan, 2005) of `depth` x `width`
/// 32-bit counters, width a power of two. estimate() never under-counts. Memory space:
/// the backend's (the cache policy's metadata).
struct SketchRef {
  /// Number of hash lines (rows of counters); a row increments one counter in each line.
  static constexpr int depth = 4;
  std::uint32_t* counters = nullptr;  ///< (depth, width)
  /// Counters per line, a power of two (the LFU policies use the smallest one >= 16 and
  /// >= 2 x the cache's slots); 0 when there is no cache, and then cell() and estimate()
  /// must not be called.
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

/// View of a doorkeeper: a blocked Bloom filter of the rows seen in the current and the
/// previous generation, `words` u32 words (a power of two). A row has one word and two bits
/// among its 16: the low half of the word holds the current generation, the high half the
/// previous one, so a test or an insert is one memory access and rotate() (the high half
/// takes the low one, which becomes empty) ages a word with one shift. contains() never
/// misses a row inserted in either generation; with n = `words` distinct rows in one
/// generation it says "seen" for an unseen row with probability 2.4 % (measured:
/// tests/cache/test_admission_rules.cpp; an unblocked filter of the same bits would give
/// 1.4 %), with both generations full about twice that. Memory space: the backend's (the
/// cache policy's metadata).
struct DoorkeeperRef {
  std::uint32_t* bits = nullptr;  ///< (words) the filter's bits
  /// Words, a power of two; 0 when there is no cache, and then word() / contains() must not
  /// be called.
  std::int64_t words = 0;

  /// The row's hash: the low bits pick the word, bits 40 .. 47 the two bits.
  MPE_HOST_DEVICE static std::uint64_t hash(std::int64_t row) {
    return mix64(static_cast<std::uint64_t>(row) ^ 0x2545f4914f6cdd1dULL);
  }
  /// Word holding `row`'s bits.
  MPE_HOST_DEVICE std::int64_t word(std::int64_t row) const {
    return static_cast<std::int64_t>(hash(row) & static_cast<std::uint64_t>(words - 1));
  }
  /// `row`'s two bits in the low (current) half of its word (they may coincide: one bit).
  MPE_HOST_DEVICE static std::uint32_t mask(std::int64_t row) {
    const std::uint64_t h = hash(row);
    return (1u << ((h >> 40) & 15u)) | (1u << ((h >> 44) & 15u));
  }
  /// True when either generation holds both of `row`'s bits (seen, or a false positive).
  MPE_HOST_DEVICE bool contains(std::int64_t row) const {
    const std::uint32_t m = mask(row), w = bits[word(row)];
    return (w & m) == m || ((w >> 16) & m) == m;
  }
  /// Ages word i by one generation: the previous one is forgotten, the current one becomes
  /// the previous one, the current one is empty.
  MPE_HOST_DEVICE void rotate(std::int64_t i) const { bits[i] <<= 16; }
};

}  // namespace mpe
