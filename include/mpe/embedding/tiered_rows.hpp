// SPDX-License-Identifier: Apache-2.0
/// @file mpe/embedding/tiered_rows.hpp
/// @brief `TieredRows`: a frequency-tiered id -> physical-row map placed in front of one
/// table (hot ids own a private row, cold ids share hashed rows; docs/architecture.md,
/// "Frequency tiers").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/hash.hpp"
#include "mpe/core/types.hpp"
#include "mpe/io/checkpoint_format.hpp"

namespace mpe {

/// Configuration of a TieredRows map. The fields marked "0: default" are resolved by the
/// constructor (TieredRows::config() returns the resolved values). The constructor throws
/// std::invalid_argument naming the first field out of its range and its value.
struct TieredRowsConfig {
  /// Logical ids of the table: ids are in [0, ids). Range: >= 1.
  std::int64_t ids = 0;
  /// P: private rows, physical rows [0, P), one per hot id. Range: [0, min(ids, 2^31 - 1)].
  /// 0 gives a pure hashed table (every id shares, every promotion is refused).
  std::int64_t private_rows = 0;
  /// S: shared rows, physical rows [P, P + S). A cold id uses row
  /// P + (mix64(id ^ seed) mod S) (mpe::mix64, the id and seed as u64). Range:
  /// [1, 2^62 - P].
  std::int64_t shared_rows = 0;
  /// A cold id whose sketch estimate (after the batch's +1) reaches promote_at takes the
  /// lowest free private row. Range: [1, 255] (the sketch's u8 counters saturate at 255).
  std::uint32_t promote_at = 4;
  /// At a decay, a hot id whose exact count (after halving) is below demote_below gives its
  /// private row back (0: hot ids are never demoted). Range: <= promote_at.
  std::uint32_t demote_below = 2;
  /// Counted lookups (unique ids per map() call) between decays; 0: default
  /// 10 * max(P, 16). Range: >= 0.
  std::int64_t decay_every = 0;
  /// W: u8 counters per line of the count-min sketch (4 lines); 0: default, the smallest
  /// power of two >= max(64, P). Range: 0 or a power of two in [1, 2^30].
  std::int64_t sketch_width = 0;
  /// Seeds the shared-row hash (above) and the sketch's key (TieredRows::sketch_key()).
  std::uint64_t seed = 0;
};

/// Counters of a TieredRows map since construction, the last reset_stats() or the state a
/// load_bytes() restored. Every field counts events of map() only (lookup() and row_of()
/// count nothing).
/// Each saturates at INT64_MAX (a loaded state's counters may start anywhere in
/// [0, INT64_MAX]).
struct TieredRowsStats {
  std::int64_t lookups = 0;          ///< id occurrences mapped (every occurrence, repeats included)
  std::int64_t private_lookups = 0;  ///< occurrences mapped to a private row
  std::int64_t shared_lookups = 0;   ///< occurrences mapped to a shared row
  std::int64_t promotions = 0;       ///< cold ids given a private row (Moves written)
  std::int64_t demotions = 0;        ///< hot ids that gave their private row back at a decay
  std::int64_t decays = 0;           ///< decays run
  std::int64_t refused_promotions =
      0;  ///< unique ids of a batch that reached promote_at with no free private row
};

/// Frequency-tiered id -> physical-row map for ONE table of a CachedEmbedding or
/// MixedDimEmbedding, which stores the physical rows (physical_rows() of them; the caller
/// adds the table's first global row). Hot ids own one of P private rows; cold ids share
/// S rows by hashing; ids are promoted by a count-min sketch's estimate and demoted by
/// their exact count at periodic decays (the CAFE scheme, SIGMOD 2024).
///
/// The rules, exactly (the unit is a "counted lookup": one unique id of one map() call):
/// - A cold id's frequency lives in a count-min sketch of 4 lines x W u8 counters
///   (W = config().sketch_width), line-major: the id's counter in line k is element
///   SketchRef{counters, W}.cell(sketch_key(id), k) = k * W + (mix64(key * 4 + k + 0x5bd1e995) &
///   (W - 1)) (u64 arithmetic), key = sketch_key(id) = id ^ (i64)mix64(seed ^ 0x9e3779b97f4a7c15)
///   (SketchRef's cell formula; the counters themselves are u8 here, not SketchRef's u32).
///   Its estimate is the minimum of its 4 counters. A hot id's frequency is an exact u32
///   count kept beside its row; its sketch counters are not incremented while it is hot.
/// - map() runs, in order: (1) validation; (2) the decay check: if the counted lookups
///   since the last decay (the decay clock) are >= decay_every, decay once: every sketch
///   counter c becomes c >> 1, every hot id's count n becomes n >> 1, then every hot id with
///   n < demote_below is demoted (its row returns to the free rows; no Move), ++decays, and
///   the clock is set to 0 (one decay per call at most, however far the clock is past
///   decay_every); (3) the unique ids of the batch, ascending: a hot id's count += 1
///   (saturating at 2^32 - 1); a cold id's 4 counters += 1 each (saturating at 255), then if the
///   minimum of its 4 counters >= promote_at: with a free private row, it takes the lowest
///   one (a Move {id, shared row, private row}, ++promotions; its exact count starts at that
///   estimate), else ++refused_promotions (again at each later batch holding it while its
///   estimate stays >= promote_at and no row is free); the clock += the number of unique
///   ids; (4) rows[i] for every occurrence from the map after step 3, and the lookup stats.
/// - Same configuration and same sequence of map() batches give the same rows, moves,
///   stats and save_bytes(), on every host (no threads, no randomness beyond `seed`).
///
/// Memory space: host. Every member is synchronous and runs on the calling thread. Not
/// thread-safe: const members may run concurrently with each other only.
class TieredRows {
 public:
  /// A promotion of map(): the id's weights are to be copied from its shared row to its
  /// new private row (copy_moved_rows()). Rows are physical rows of the table.
  struct Move {
    std::int64_t id = 0;        ///< the promoted logical id
    std::int64_t from_row = 0;  ///< its shared row, in [P, P + S)
    std::int64_t to_row = 0;    ///< its private row, in [0, P)
  };

  /// Builds an empty map (every id cold, every private row free, sketch zero, stats zero).
  /// Throws std::invalid_argument naming the first TieredRowsConfig field out of range and
  /// its value (field ranges: TieredRowsConfig). Allocates the sketch (4 * W bytes), the
  /// per-row owner and count arrays and the hot-id index (memory_bytes()).
  explicit TieredRows(const TieredRowsConfig& config);

  /// `config` with decay_every and sketch_width resolved (what config() of a map built from it
  /// returns), checked as the constructor checks it, allocating nothing: a planner can size a
  /// 10^9-id map before building it. Throws std::invalid_argument as the constructor.
  static TieredRowsConfig resolve(const TieredRowsConfig& config);
  /// memory_bytes() of a map built from `config` (4 W + 12 P + 4 C), allocating nothing.
  /// Throws std::invalid_argument as the constructor.
  static std::size_t planned_memory_bytes(const TieredRowsConfig& config);

  /// The configuration with decay_every and sketch_width resolved (never 0).
  const TieredRowsConfig& config() const { return cfg_; }
  /// P + S: rows the embedding table must have for this map.
  std::int64_t physical_rows() const { return cfg_.private_rows + cfg_.shared_rows; }
  /// Number of ids holding a private row now, in [0, P].
  std::int64_t hot_ids() const { return hot_count_; }
  /// The 64-bit key of `id` in the sketch: id ^ (i64)mix64(seed ^ 0x9e3779b97f4a7c15). No
  /// validation (any id).
  std::int64_t sketch_key(std::int64_t id) const { return id ^ sketch_salt_; }
  /// The shared row of `id`: P + (mix64((u64)id ^ seed) mod S). No validation (any id).
  std::int64_t shared_row_of(std::int64_t id) const {
    return cfg_.private_rows + static_cast<std::int64_t>(mix64(static_cast<std::uint64_t>(id) ^ cfg_.seed) %
                                                         static_cast<std::uint64_t>(cfg_.shared_rows));
  }

  /// Training lookup: counts the batch, promotes and decays by the rules of the class
  /// comment, then maps. ids: (n) logical ids, host memory, repeats allowed; rows: (n) out,
  /// physical rows in [0, P + S). last_moves() then holds this call's promotions (empty if
  /// none), replacing the previous call's. Throws std::invalid_argument when rows.size() !=
  /// ids.size() (naming both sizes) and std::out_of_range for the first id outside
  /// [0, ids), naming "ids[i]", the value and the range; nothing changes then (neither the
  /// state, the stats nor last_moves()). An empty batch still runs the decay check.
  void map(std::span<const std::int64_t> ids, std::span<std::int64_t> rows);

  /// Read-only lookup (inference, evaluation): writes rows[i] as map() would from the
  /// current state (private row of a hot id, else its shared row), counting, promoting and
  /// decaying nothing, stats untouched. Shapes and errors as map().
  void lookup(std::span<const std::int64_t> ids, std::span<std::int64_t> rows) const;

  /// Physical row of one id now (as lookup()). Throws std::out_of_range naming "id", the
  /// value and the range [0, ids) for an id outside it.
  std::int64_t row_of(std::int64_t id) const;

  /// Promotions of the last map() call, ascending id (at most P; empty before the first
  /// call and after load_bytes()). The span is valid until the next map() or load_bytes().
  std::span<const Move> last_moves() const { return moves_; }

  /// Copies each last move's weights inside `emb`: global row table_first_row + from_row
  /// -> table_first_row + to_row, one row of config().dim floats at a time through
  /// `emb.get_weights(std::span<float>, first_row)` and `emb.set_weights(std::span<const
  /// float>, first_row)` (CachedEmbedding's; for MixedDimEmbedding use the callable
  /// overload). Call after map() and before the batch's forward(). A demoted id needs no
  /// copy (it returns to its shared row, which kept training); a private row's old weights
  /// are overwritten at its next promotion. Weights only: set_weights keeps the private
  /// row's optimizer state (zero at its first promotion, a former owner's later), and a
  /// shared row read from the FP32 cache is quantized into the private row's store format.
  /// Synchronous (as the embedding's get/set).
  /// Throws std::invalid_argument for table_first_row < 0, and what the embedding's calls
  /// throw (a row range outside the table); moves before a failing one are applied.
  template <class Emb>
  void copy_moved_rows(Emb& emb, std::int64_t table_first_row) const {
    copy_moved_rows(
        static_cast<std::int64_t>(emb.config().dim), table_first_row,
        [&emb](std::span<float> out, std::int64_t row) { emb.get_weights(out, row); },
        [&emb](std::span<const float> in, std::int64_t row) { emb.set_weights(in, row); });
  }

  /// As copy_moved_rows(emb, table_first_row) through callables: for each last move,
  /// `get(std::span<float> row_out, std::int64_t global_row)` fills `dim` floats of global
  /// row table_first_row + from_row, then `set(std::span<const float> row, std::int64_t
  /// global_row)` writes them to table_first_row + to_row (e.g. MixedDimEmbedding's
  /// get_weights(t, out, row) / set_weights(t, in, row) with first row 0). Throws
  /// std::invalid_argument for dim < 1 or table_first_row < 0, and what the callables throw.
  template <class Get, class Set>
  void copy_moved_rows(std::int64_t dim, std::int64_t table_first_row, Get&& get, Set&& set) const;

  /// Counters since construction, reset_stats() or load_bytes().
  const TieredRowsStats& stats() const { return stats_; }
  /// Zeroes stats(); the map, sketch and decay clock are unchanged.
  void reset_stats() { stats_ = {}; }

  /// Host bytes of the tiering metadata, exactly 4 W + 12 P + 4 C: the sketch (4 * W u8),
  /// per private row its owner (i64 id, -1 when free) and exact count (u32), and the hot-id
  /// index (open addressing, C i32 private-row numbers, C = the smallest power of two
  /// >= 2 * P, 0 for P = 0). The free rows need no list (the lowest free row is derived
  /// from the owners). With the default W, 24 to 36 bytes per private row for P >= 64
  /// (P = 1000: 4096 + 12000 + 8192 = 24288 bytes). Does not count the embedding rows,
  /// last_moves() or map()'s per-call scratch (the batch's unique ids).
  std::size_t memory_bytes() const;

  /// The exact state as bytes ("MPETIER1", version 2), all integers little-endian, at
  /// these offsets: 0 `char magic[8]`; 8 `u32 version`; 12 `u64 total_bytes` (the whole
  /// buffer); 20 `i64 ids`, 28 `i64 private_rows`, 36 `i64 shared_rows`, 44 `u32
  /// promote_at`, 48 `u32 demote_below`, 52 `i64 decay_every`, 60 `i64 sketch_width`, 68
  /// `u64 seed` (the resolved config); 76 `i64 decay_clock` (counted lookups since the last
  /// decay); 84 `u8 sketch[4 * W]` (line-major); then at 84 + 4 W `i64 n_hot` and n_hot
  /// entries `{i64 id, i32 row, u32 count}` in ascending id; `i64 n_free` and n_free `i32`
  /// free rows ascending; 7 `i64` stats in TieredRowsStats' order; last `u32 crc` = CRC-32C
  /// (io::checkpoint::crc32c) of every byte before it. Size: 84 + 4 W + 16 + 16 n_hot +
  /// 4 n_free + 56 + 4 bytes. (Version 1, with u32 sketch counters, is no longer written
  /// nor read.)
  std::vector<std::uint8_t> save_bytes() const;

  /// Replaces the whole state (map, sketch, decay clock, stats; last_moves() becomes empty)
  /// with `bytes` from save_bytes() of an object of the same configuration, after verifying
  /// all of it: size (at least the header; equal to total_bytes: "truncated"), magic,
  /// version (2 only; version 1 is refused, naming it), CRC-32C, each config field equal to this object's
  /// resolved config (naming the field and both values), decay_clock >= 0, n_hot in [0, P] and n_free = P -
  /// n_hot, hot ids ascending (so unique) and in [0, ids), hot rows in [0, P) and unique, hot counts >=
  /// demote_below, free rows ascending, in [0, P) and none a hot row (so exactly the complement), stats >= 0,
  /// the sizes adding up to total_bytes. Throws mpe::checkpoint_error naming what is wrong; the object is
  /// then unchanged.
  void load_bytes(std::span<const std::uint8_t> bytes);

 private:
  std::int64_t find(std::int64_t id) const;        // private row of a hot id, or -1
  std::uint64_t find_slot(std::int64_t id) const;  // index slot of a hot id (it must be hot)
  void insert(std::int32_t row);                   // indexes owner_[row]
  void erase_slot(std::uint64_t slot);
  void check_ids(std::span<const std::int64_t> ids, std::span<std::int64_t> rows, const char* fn) const;
  void decay();

  TieredRowsConfig cfg_;
  std::int64_t sketch_salt_ = 0;
  std::vector<std::uint8_t> sketch_;  // (4, W), saturating at 255
  std::vector<std::int64_t> owner_;   // (P): the hot id holding each private row, -1: free
  std::vector<std::uint32_t> count_;  // (P): that id's exact count (0 when free)
  std::vector<std::int32_t> index_;   // hot ids -> private row: linear probing on owner_[row]'s id,
                                      // power-of-two capacity, -1: empty
  std::int64_t hot_count_ = 0;
  std::int64_t lowest_free_ = 0;  // the lowest free private row (P: none); every row below is held
  std::int64_t decay_clock_ = 0;
  TieredRowsStats stats_;
  std::vector<Move> moves_;
  std::vector<std::int64_t> scratch_;  // map(): the batch's unique ids
};

}  // namespace mpe

#include "mpe/detail/embedding/tiered_rows.inl"
