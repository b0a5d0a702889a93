// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/philox.hpp
/// @brief Counter-based RNG Philox4x32-10 (Salmon et al., "Parallel random numbers:
/// as easy as 1, 2, 3", SC 2011) and mpe's counter layout for stochastic rounding.
///
/// No RNG state is carried: every draw is a pure function of (seed, counter), so the
/// same seed gives the same bits on host and GPU whatever the thread count.
#pragma once

#include <cstdint>

#include "mpe/numeric/config.hpp"

namespace mpe::num {

/// Four 32-bit words: a Philox counter or its output block.
struct Uint4 {
  /// @var x
  /// Word 0 (as RowRng's counter: bits 0..31 of the row).
  /// @var y
  /// Word 1 (as RowRng's counter: bits 32..63 of the row).
  /// @var z
  /// Word 2 (as RowRng's counter: the step).
  /// @var w
  /// Word 3 (as RowRng's counter: `site << 24 | element_group`).
  std::uint32_t x, y, z, w;
};

namespace detail {
MPE_HOST_DEVICE inline void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                      std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}
}  // namespace detail

/// Philox4x32 with 10 rounds on counter `c` and 64-bit key `(k0, k1)`; matches the
/// Random123 reference (and its known-answer vectors).
MPE_HOST_DEVICE inline Uint4 philox4x32_10(Uint4 c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += W0;
      k1 += W1;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo32(M0, c.x, hi0, lo0);
    detail::mulhilo32(M1, c.z, hi1, lo1);
    c = Uint4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
  }
  return c;
}

/// Which operation rounds: part of the Philox counter so that two operations on the
/// same row in the same step never share random bits.
enum class RoundingSite : std::uint32_t {
  SetWeights = 1,   ///< set_weights() quantizing user weights
  StoreUpdate = 2,  ///< optimizer update of a row that has no cache slot
  WriteBack = 3,    ///< eviction of a dirty cache row
  Flush = 4,        ///< flush() of dirty cache rows
  Init = 5,         ///< in-place initializers
  // Optimizer-state writes (compact state precisions, optim/state_precision.hpp): sites of
  // their own, so a row's state and weight streams never share random bits. The element
  // group counts over the row's S state values. (Site 6 is ShardedEmbedding's.)
  StateUpdate = 8,     ///< optimizer step of a row that has no cache slot
  StateWriteBack = 9,  ///< eviction of a dirty cache row: its FP32 state
  StateFlush = 10,     ///< flush() of dirty cache rows: their FP32 state
  StateDrop = 11,      ///< a dirty cached row dropped by set_weights/init_uniform/import
};

/// The stochastic-rounding stream of one row write: the counter of docs/numerics.md,
/// `{row_lo, row_hi, step, site << 24 | element_group}` keyed by the 64-bit seed.
/// One draw yields four 32-bit words, used by elements 4g .. 4g+3.
struct RowRng {
  std::uint64_t seed = 0;  ///< Philox key: k0 = low 32 bits, k1 = high 32 bits
  std::uint64_t row = 0;   ///< global row
  std::uint32_t step = 0;  ///< completed backward() calls (low 32 bits)
  /// Which operation rounds (bits 24..31 of counter word 3).
  RoundingSite site = RoundingSite::SetWeights;
  /// The element group of the row's element 0 in the full row this row is a column slice
  /// of (EmbeddingConfig::column_keys / 4); 0: the row is whole.
  std::uint32_t group_base = 0;

  /// Four random words for element group `group` (elements 4*group .. 4*group+3), counted
  /// from group_base: counter word 3 is `site << 24 | ((group_base + group) mod 2^24)`.
  MPE_HOST_DEVICE Uint4 draw(std::uint32_t group) const {
    const Uint4 c{static_cast<std::uint32_t>(row), static_cast<std::uint32_t>(row >> 32), step,
                  (static_cast<std::uint32_t>(site) << 24) | ((group_base + group) & 0xffffffu)};
    return philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  }
};

/// The rounding streams of one object: the Philox key (its seed), the row each row write
/// counts as and the element group its element 0 counts as. A row is its own key
/// (CachedEmbedding's rows are global rows), unless `row_keys` is given
/// (EmbeddingConfig::row_keys, ShardedEmbedding's local tables): then row r of table t counts
/// as row_keys[t] + (r - table_offsets[t]), the row it is in the table set the object is a
/// piece of, so a piece rounds with that set's bits. Likewise a row's element 0 is element
/// group 0 unless `column_keys` is given (EmbeddingConfig::column_keys, a column slice of a
/// wider table): then table t's rows start at element group column_keys[t] / 4.
struct RowStream {
  std::uint64_t seed = 0;                       ///< Philox key
  const std::int64_t* table_offsets = nullptr;  ///< (T + 1) first row of each table, with row or column keys
  const std::int64_t* row_keys = nullptr;       ///< (T) key of each table's row 0; null: rows are their keys
  std::int64_t tables = 0;                      ///< T, with row or column keys
  /// (T) column of the full table that each table's column 0 is (multiples of 4); null: all 0.
  const std::int64_t* column_keys = nullptr;

  /// Implicit from a seed alone: every row is its own key, every row starts at group 0.
  MPE_HOST_DEVICE constexpr RowStream(std::uint64_t s = 0, const std::int64_t* offsets = nullptr,
                                      const std::int64_t* keys = nullptr, std::int64_t T = 0,
                                      const std::int64_t* columns = nullptr)
      : seed(s), table_offsets(offsets), row_keys(keys), tables(T), column_keys(columns) {}
  /// The table of row r (the last table t with table_offsets[t] <= r); needs table_offsets.
  MPE_HOST_DEVICE std::int64_t table_of(std::int64_t r) const {
    std::int64_t lo = 0, hi = tables - 1;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo + 1) / 2;
      if (table_offsets[mid] <= r) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
  /// The counter row of row r.
  MPE_HOST_DEVICE std::uint64_t key(std::int64_t r) const {
    if (row_keys == nullptr) return static_cast<std::uint64_t>(r);
    const std::int64_t t = table_of(r);
    return static_cast<std::uint64_t>(row_keys[t] + (r - table_offsets[t]));
  }
  /// The stream of a write of row r at `step` by `site` (its row key and, with column keys,
  /// its table's group_base).
  MPE_HOST_DEVICE RowRng at(std::int64_t r, std::uint32_t step, RoundingSite site) const {
    if (row_keys == nullptr && column_keys == nullptr)
      return RowRng{seed, static_cast<std::uint64_t>(r), step, site};
    const std::int64_t t = table_of(r);
    const std::uint64_t row = row_keys == nullptr
                                  ? static_cast<std::uint64_t>(r)
                                  : static_cast<std::uint64_t>(row_keys[t] + (r - table_offsets[t]));
    const std::uint32_t base = column_keys == nullptr ? 0u : static_cast<std::uint32_t>(column_keys[t] / 4);
    return RowRng{seed, row, step, site, base};
  }
};

/// Word `i` (0..3) of a block.
MPE_HOST_DEVICE inline std::uint32_t word(const Uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

/// Calls f(d, word) for the elements of lane `lane` of `lanes` (element groups g = lane,
/// lane + lanes, lane + 2 * lanes, ... of four elements each, in increasing order) with
/// its random word (R stochastic) or 0 (otherwise): element d uses word d mod 4 of
/// rng.draw(d / 4). With one lane every element in order: the one element-to-word mapping
/// of every rounded row write (store formats and optimizer state), whatever the lane count.
template <class R, class F>
MPE_HOST_DEVICE inline void for_each_element_lanes(std::int64_t dim, const RowRng& rng, std::int32_t lane,
                                                   std::int32_t lanes, F&& f) {
  for (std::int64_t g = lane; 4 * g < dim; g += lanes) {
    Uint4 r{0, 0, 0, 0};
    if constexpr (R::stochastic) r = rng.draw(static_cast<std::uint32_t>(g));
    const std::int64_t end = 4 * g + 4 < dim ? 4 * g + 4 : dim;
    for (std::int64_t d = 4 * g; d < end; ++d)
      f(static_cast<std::int32_t>(d), word(r, static_cast<int>(d - 4 * g)));
  }
}

/// Calls f(d, word) for each of `dim` elements in order with its random word (R
/// stochastic) or 0 (otherwise), drawing one block per group of four elements: element d
/// uses word d mod 4 of rng.draw(d / 4) (for_each_element_lanes with one lane).
template <class R, class F>
MPE_HOST_DEVICE inline void for_each_element(std::int64_t dim, const RowRng& rng, F&& f) {
  for_each_element_lanes<R>(dim, rng, 0, 1, static_cast<F&&>(f));
}

}  // namespace mpe::num
