// SPDX-License-Identifier: Apache-2.0
/// @file mpe/core/types.hpp
/// @brief Public value types of contract v1: EmbeddingConfig, Pooling, CacheStats,
/// MemoryFootprint, checkpoint_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace mpe {

/// What to do with a non-finite gradient or per-sample weight.
enum class NonFinite {
  Throw,  ///< throw std::invalid_argument, change nothing (default)
  Skip,   ///< skip the whole step (no update, step not advanced), count it in stats
};

/// When invalid device-resident input (offsets, indices, per-sample weights, gradients)
/// is reported. Size and configuration errors always throw at once.
enum class Validation {
  /// Each prefetch/forward/backward checks its input on the backend and waits once for
  /// the verdict (one device-to-host read with CudaBackend); invalid input throws there.
  Synchronous,
  /// Nothing waits: a call with invalid input records the error in backend memory and is
  /// skipped there (no cache fill, no output written, no update, statistics and step
  /// unchanged) but keeps its place in the call sequence (a failed forward's backward
  /// applies nothing; a failed backward consumes its forward; a failed prefetch replaces
  /// the pending one). The first recorded error is thrown by the next synchronize(),
  /// set_weights() or load(), which then do not run. A forward() after a prefetch() whose
  /// batch has the prefetched sizes is taken to be the prefetched batch (checked on the
  /// backend: different contents are a recorded error).
  Deferred,
};

/// Shape and settings of a table-batched embedding. Fields are only ever appended.
struct EmbeddingConfig {
  std::vector<std::int64_t> table_rows;             ///< rows of each table (T >= 1 tables, each >= 1)
  std::int32_t dim = 0;                             ///< D, the same for every table, >= 1
  std::int64_t cache_rows = 0;                      ///< FP32 cache capacity in rows; 0 = no cache
  std::uint64_t seed = 0;                           ///< stochastic rounding stream
  std::int32_t row_alignment = 4;                   ///< store row padding in bytes (power of two, <= 4096)
  NonFinite non_finite = NonFinite::Throw;          ///< non-finite gradient / per-sample weight handling
  Validation validation = Validation::Synchronous;  ///< when invalid input is reported
  /// The row each table's row 0 counts as in the stochastic-rounding counter (>= 0, one per
  /// table); empty (the default): table_offset(t), the row itself. For an object that holds
  /// pieces of a larger table set (ShardedEmbedding's local tables): the pieces' first rows
  /// there, so that a piece rounds with the bits the whole set would (docs/numerics.md).
  /// Configuration, not state: checkpoints do not hold it.
  std::vector<std::int64_t> row_keys = {};
  /// Keep a slot index: an int32 entry per row holding the row's cache slot, or -1 where the
  /// row is not cached, kept exact by every fill, eviction and drop (4 B per row of the
  /// table, in the store rows or an array: slot_index_in_rows; memory space: the backend's).
  /// CacheRef::find() and forward_inference() then find a row's slot with one load instead
  /// of hashing it to its set and scanning the set's tags. Outputs and trained bits are the
  /// same with or without it. Configuration, not state: checkpoints do not hold it and
  /// load() rebuilds it from the cache's tags. Ignored without a cache; with one it needs
  /// fewer than 2^31 slots (std::invalid_argument naming config.slot_index otherwise).
  bool slot_index = false;
  /// Where the slot index lives (with slot_index and a cache). true (default): in the store
  /// rows, one int32 entry at byte round_up(Storage::data_bytes(dim), 4) of each row, which
  /// widens the row stride (store_row_bytes()) to round_up(that + 4, max(row_alignment, 4))
  /// and leaves no separate array (INT8, D = 64: 76 B a row instead of 72 B plus a 4 B
  /// entry; with row_alignment 16, 80 B either way, the entry in the padding); counted in
  /// MemoryFootprint::store_bytes. A lookup of an uncached row then reads its entry from a
  /// line of the store row it reads anyway. false: a separate (rows) array, counted in
  /// MemoryFootprint::cache_bytes. Outputs, trained bits, save()'s bytes and export_table()
  /// are the same either way: checkpoints and exports hold the rows' data without the
  /// entries, and load() and import_table() rewrite them. The entries share the store's
  /// memory space and placement (a CUDA store in managed or host-mapped memory holds them
  /// there too). Configuration, not state.
  bool slot_index_in_rows = true;
  /// Admit a forward()'s misses when its backward() runs instead of inside the forward.
  /// forward() then only finds each occurrence's slot (one load with slot_index, else a scan
  /// of the row's set) and pools cached rows from the cache and the others straight from the
  /// store; the deduplication, admission, evictions, write-backs and fills of its batch run
  /// at the start of its backward() (after its size and optimizer checks), or earlier in
  /// the first of these called before that backward(): the next forward() (once its input
  /// is validated), prefetch(), set_weights(), init_uniform(), io::import_table(), load(),
  /// flush() or reset_stats().
  /// Every batch a forward() pooled is therefore admitted, in order, whether or not its
  /// backward() comes or succeeds (a backward() that throws, for its gradient, its size or
  /// its optimizer, leaves the admission to the next of those calls), so outputs, trained
  /// bits and stats() after any of these calls are the same as without the setting (a fill
  /// decodes a store row with the operations pooling uses, and the admissions keep their
  /// order). Between a forward() and the call that admits its batch, what reads the
  /// weights (forward_inference(), get_weights(), stats(), save()) sees them before that
  /// admission: a row its admission would evict is still cached in FP32, not yet rounded
  /// into the store. load() settles a pending admission, then replaces the whole state and
  /// drops the awaiting batch. Ignored without a cache. Configuration, not state:
  /// checkpoints do not hold it; a checkpoint written between forward() and the admission
  /// holds the state before that forward() (its populate number and call not yet counted;
  /// calls after it, refused ones included, counted), so loading it and repeating the
  /// forward() and backward() trains the bits of the run that did not stop, and later
  /// deferred errors name the calls it would.
  bool defer_admission = false;
  /// The column of the full table that each table's column 0 is, in the stochastic-rounding
  /// counter (one per table, each >= 0 and a multiple of 4 so that element groups line up,
  /// column_keys[t] + dim <= 2^26); empty (the default): all 0. For an object that holds a
  /// column slice [c0, c0 + dim) of a wider table (column-wise sharding): c0, so that the
  /// slice's element d rounds (and init_uniform() draws) with the bits of the full table's
  /// element c0 + d (element group column_keys[t] / 4 + d / 4, docs/numerics.md). Applies to
  /// the weights only: a compact optimizer state precision (StateBf16, StateFp16) rounds a
  /// row's S state values from element group 0 whatever the column key. Configuration, not
  /// state: checkpoints do not hold it.
  std::vector<std::int64_t> column_keys = {};
  /// Bounded range growth of a store row's optimizer update, g (finite, in [0, 1]; 0, the
  /// default: off, every bit as without it). When backward() updates a row in the store
  /// (a row without a cache slot; not a cached row, and not set_weights(), init_uniform(),
  /// write-backs, flush(), imports or load()), let lo and hi be the old row's grid ends from
  /// its header: lo = bias, hi = num::add(num::mul(scale, top), bias) (the values of codes
  /// 0 and top: top = 255 for Int8Rowwise, 15 for Int4Rowwise, 3 for Int2Rowwise), and
  /// m = num::mul(g, num::sub(hi, lo)). Each new value x (old value minus the update) is
  /// clamped into [num::sub(lo, m), num::add(hi, m)] before the row is quantized with the
  /// table's Rounding (the same random words as without it), so each end of the row's grid
  /// moves out by at most about g times its range per update, while it may narrow freely.
  /// No clamp for a constant old row (hi == lo). With few levels (INT2) and stochastic
  /// rounding, an unbounded row widens on most updates and re-rounds every element each
  /// time; g = 0.01 keeps such rows trainable at high learning rates (docs/numerics.md).
  /// The same bits on every backend and thread count. g > 0 needs a store with an affine
  /// per-row grid (Int8Rowwise, Int4Rowwise, Int2Rowwise). Configuration, not state:
  /// checkpoints do not hold it. Errors: std::invalid_argument naming
  /// config.max_range_growth, its value and the store format, at construction, for NaN,
  /// +-inf, a value outside [0, 1], or a value > 0 with another store format.
  float max_range_growth = 0.0f;
};

/// How a bag's rows are combined: `Sum` adds them in index order (each times its
/// per-sample weight when weights are given); `Mean` multiplies that sum by 1.0f / L, L the
/// bag's length (no per-sample weights). An empty bag gives zeros either way.
enum class Pooling { Sum, Mean };

/// Cumulative counters since construction or reset_stats(); load() restores the counters
/// saved with the checkpoint, so a resumed run counts exactly as an uninterrupted one.
struct CacheStats {
  // Without a cache (cache_rows = 0) only lookups, saturated_rows and skipped_steps move.
  std::uint64_t lookups = 0;          ///< index occurrences populated
  std::uint64_t unique_rows = 0;      ///< unique rows per batch, summed over batches
  std::uint64_t hits = 0;             ///< unique rows found in the cache
  std::uint64_t misses = 0;           ///< unique rows not found (filled, conflict or rejected)
  std::uint64_t conflict_misses = 0;  ///< misses left uncached: their set had no free way
  std::uint64_t evictions = 0;        ///< resident rows replaced by a miss
  std::uint64_t writebacks = 0;       ///< dirty rows written to the store (eviction or flush)
  /// Misses the policy's admission refused (Lfu, WTinyLfu: estimate not above the victim's;
  /// SecondTouchLru: a first touch); they bypass the cache.
  std::uint64_t lfu_rejections = 0;
  std::uint64_t saturated_rows = 0;      ///< row writes that clamped values into the format range (the row's
                                         ///< weights, or its compact BF16/FP16 optimizer state)
  std::uint64_t bytes_filled = 0;        ///< store bytes read to fill cache rows (+ 2S compact state)
  std::uint64_t bytes_written_back = 0;  ///< store bytes written by write-backs (+ 2S compact state)
  std::uint64_t skipped_steps = 0;       ///< backward() steps skipped for non-finite input (NonFinite::Skip)
  /// Adds another object's counters field by field (e.g. the groups or shards of one table set).
  CacheStats& operator+=(const CacheStats& o) {
    lookups += o.lookups;
    unique_rows += o.unique_rows;
    hits += o.hits;
    misses += o.misses;
    conflict_misses += o.conflict_misses;
    evictions += o.evictions;
    writebacks += o.writebacks;
    lfu_rejections += o.lfu_rejections;
    saturated_rows += o.saturated_rows;
    bytes_filled += o.bytes_filled;
    bytes_written_back += o.bytes_written_back;
    skipped_steps += o.skipped_steps;
    return *this;
  }
};

/// Bytes as allocated (memory()), or as a configuration will allocate them (the static
/// planned_memory() of CachedEmbedding and MixedDimEmbedding: workspace 0).
struct MemoryFootprint {
  std::size_t store_bytes = 0;      ///< low-precision store: rows x padded row bytes
  std::size_t cache_bytes = 0;      ///< FP32 rows + tags + last-use scores + dirty bits + LFU sketch
  std::size_t optimizer_bytes = 0;  ///< optimizer state (after the first backward)
  std::size_t metadata_bytes = 0;   ///< table offsets, rounding-stream row keys, counters
  std::size_t workspace_bytes = 0;  ///< per-call workspace currently held
  /// "Embedding memory" as the memory accounting of docs/architecture.md counts it: store +
  /// cache + metadata.
  std::size_t embedding_bytes() const { return store_bytes + cache_bytes + metadata_bytes; }
  /// Every byte above.
  std::size_t total() const {
    return store_bytes + cache_bytes + optimizer_bytes + metadata_bytes + workspace_bytes;
  }
  /// Adds another footprint field by field (e.g. the shards of a sharded table).
  MemoryFootprint& operator+=(const MemoryFootprint& o) {
    store_bytes += o.store_bytes;
    cache_bytes += o.cache_bytes;
    optimizer_bytes += o.optimizer_bytes;
    metadata_bytes += o.metadata_bytes;
    workspace_bytes += o.workspace_bytes;
    return *this;
  }
};

/// Thrown by load() for a checkpoint file that fails verification. (The FBGEMM/TorchRec
/// importers take bytes as arguments and throw std::invalid_argument.)
class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mpe
