// SPDX-License-Identifier: Apache-2.0
/// @file mpe/embedding/table_state.hpp
/// @brief `mpe::TableState`: every part of a CachedEmbedding's exact training state, as
/// spans and scalars (CachedEmbedding::state() reads it, restore_state() writes it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "mpe/core/types.hpp"

namespace mpe {

/// Every part of a CachedEmbedding's training state that its forward() and backward()
/// results depend on: two tables of one configuration whose states are equal part for part
/// give the same bits from then on (docs/numerics.md). Checkpoints (mpe/io/checkpoint.hpp,
/// docs/checkpoint_format.md) are this state in a file; a member that changes results and
/// is not here breaks exact resume (tests/io's state twin test fails then).
///
/// Shapes, with R = total rows, D = dim, slots = cache_slots() (0 without a cache),
/// S = state_values_per_row, P = the table's StatePrecision, T = tables:
/// - the rows (store, cache) and the cache metadata, in element order of the table's
///   buffers;
/// - the optimizer state, empty (and `optimizer` empty) before the first applied step;
/// - the counters, the seed and the pending prefetch.
///
/// A value of this type is a view: it owns no row or metadata memory (only `optimizer`).
/// - From CachedEmbedding::state(): every span points into the table's backend memory
///   (device memory with CudaBackend) and is valid until the table's next non-const call, move
///   or destruction; `store` holds the rows as the store does (`store_stride` apart, with
///   slot-index entries when `store_holds_slot_index`): read_store_rows() gives them in
///   state form.
/// - To CachedEmbedding::restore_state(): every span in host memory, the store in state form
///   (`store_stride` = state_row_bytes(), `store_holds_slot_index` false).
///
/// Exact resume: a state taken between steps (after backward(), a prefetch() may be pending)
/// resumes bit for bit. A forward() whose admission is still owed (EmbeddingConfig::
/// defer_admission, a forward() that used no prefetch(): it ran, its backward() has not) is
/// not part of the state either: nothing of it has changed the buffers yet, `populate_counter`
/// and `calls` leave it out (they count it once its admission runs), so the state is the one
/// before that forward(), and a table restored from it repeats it. Any other forward() whose
/// backward() has not run (its populate made, by itself or by the prefetch() it used; or a
/// prepare_backward() that ran the owed admission) is in the counters and buffers, and its
/// batch is not: such a state restores, but repeating that forward() does not give the
/// uninterrupted run's bits.
///
/// The image names what its bytes mean (its policies, D and table rows, as a checkpoint's
/// header does): restore_state() refuses an image of another type or shape before looking at
/// any part's size.
struct TableState {
  // ---- identity: what the bytes mean ----
  /// Storage::name of the table the image is of (state() sets each name to the policy's
  /// static string; restore_state() refuses an image whose names are not its own).
  std::string_view storage;
  std::string_view cache_policy;             ///< Cache::name
  std::string_view rounding;                 ///< Rounding::name
  std::string_view state_precision;          ///< StatePrecision::name
  std::int32_t ways = 0;                     ///< Cache::ways
  std::int32_t dim = 0;                      ///< D, elements per row
  std::span<const std::int64_t> table_rows;  ///< (T) rows of each table (host memory)

  // ---- rows ----
  /// Store rows: (R, store_stride) bytes, row r at [r * store_stride, + store_stride).
  /// In state form each row is its Storage encoding (Storage::data_bytes(D) bytes) followed
  /// by zeros up to state_row_bytes() = row_bytes<Storage>(D, row_alignment).
  std::span<const std::uint8_t> store;
  /// Bytes from one row of `store` to the next (state form: state_row_bytes()).
  std::size_t store_stride = 0;
  /// Whether the rows of `store` hold slot-index entries (EmbeddingConfig::slot_index with
  /// slot_index_in_rows): then they are not in state form (state() only).
  bool store_holds_slot_index = false;
  /// (slots, D) FP32 rows of the cache, slot-major; an empty slot's row is never read.
  std::span<const float> cache_rows;
  /// (slots) global row held by each slot, -1 for an empty slot.
  std::span<const std::int64_t> tags;
  /// (slots) populate number of each slot's last use (at most populate_counter).
  std::span<const std::uint64_t> last_use;
  /// (slots) 1 where the cached row differs from its store row (written back on eviction
  /// or flush()), else 0.
  std::span<const std::uint8_t> dirty;
  /// (Cache::meta_words(slots)) the cache policy's metadata words (sketches, admission
  /// windows); empty for policies that keep none (Lru, DirectMapped).
  std::span<const std::uint32_t> policy_words;

  // ---- optimizer ----
  /// OptimizerRule<Opt>::name of the optimizer that owns the state (one of
  /// KnownOptimizers); empty before the first applied backward().
  std::string optimizer;
  /// S = OptimizerRule<Opt>::state_floats(D): 0 for Sgd or before the first step, 1 for
  /// RowwiseAdagrad, D for Adagrad, 2D for Adam.
  std::uint32_t state_values_per_row = 0;
  /// (R, S) state values in P's format (P::value_bytes each: R * S * P::value_bytes bytes).
  /// With a compact P (StateBf16, StateFp16) a cached row's current state is in
  /// `cached_optimizer_state`; its row here is what was last written back.
  std::span<const std::uint8_t> optimizer_state;
  /// (slots, S) FP32 state of the cached rows with a compact P and a cache; empty with
  /// StateFp32, without a cache or before the first step.
  std::span<const float> cached_optimizer_state;

  // ---- counters ----
  CacheStats stats{};                  ///< stats(): cumulative counters
  std::uint64_t step = 0;              ///< step(): completed backward() calls (the rounding counter)
  std::uint64_t decay_clock = 0;       ///< unique rows since the policy's last decay (below its period)
  std::uint64_t populate_counter = 0;  ///< populates run (prefetch() or forward()): numbers last_use
  /// prefetch/forward/backward calls made (numbers deferred errors, see synchronize()); at
  /// least populate_counter.
  std::uint64_t calls = 0;
  std::uint64_t seed = 0;  ///< EmbeddingConfig::seed: the Philox key of every rounding

  // ---- the pending prefetch ----
  /// The batch of a prefetch() not yet consumed by forward() (its cache fills are already in
  /// the buffers): `pending_indices` (n) and `pending_offsets` (T*B + 1) as prefetch() took
  /// them (a valid batch); both empty when none is pending.
  std::span<const std::int64_t> pending_indices;
  std::span<const std::int64_t> pending_offsets;  ///< see pending_indices
};

}  // namespace mpe
