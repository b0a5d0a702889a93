// SPDX-License-Identifier: Apache-2.0
/// @file mpe/embedding/cached_embedding.hpp
/// @brief `mpe::CachedEmbedding`: table-batched embedding bags whose rows live in a
/// low-precision store, with a small FP32 cache of hot rows (Yang, Huang et al.,
/// "Mixed-Precision Embedding Using a Cache", arXiv:2010.11305, 2020).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mpe/backend/backend.hpp"
#include "mpe/backend/buffer.hpp"
#include "mpe/backend/host_backend.hpp"
#include "mpe/cache/all.hpp"
#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/embedding/batch.hpp"
#include "mpe/detail/embedding/layout.hpp"
#include "mpe/detail/kernels/admission.hpp"
#include "mpe/detail/kernels/admission_lanes.hpp"
#include "mpe/detail/kernels/all.hpp"
#include "mpe/embedding/embedding_ref.hpp"
#include "mpe/embedding/table_state.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/optim/state_precision.hpp"
#include "mpe/storage/all.hpp"

namespace mpe {

namespace io {
struct CheckpointFile;  // defined in mpe/io/checkpoint.hpp (the file code sits above the core)
}

/// Table-batched embedding bags in mixed precision.
///
/// Every row of the T tables lives in a store of `Storage` format (row-wise quantized
/// INT8/INT4 or FP8 E4M3/E5M2, FP16, BF16 or FP32). With `cache_rows > 0` a set-associative
/// FP32 cache (`CachePolicy`: Lru<W>, Lfu<W>, DirectMapped, SecondTouchLru<W>, WTinyLfu<W>)
/// holds the hot rows: they are read and trained in FP32; rows without a slot (a policy's
/// admission refused them, or their set had no unlocked way) bypass the cache: they are read
/// and updated in the store directly.
/// Every write to the store rounds with `Rounding` (StochasticRounding, NearestRounding).
/// Optimizer state is held in `StatePrecision` (StateFp32, the default; StateBf16 or
/// StateFp16: 2 bytes per state value, written with `Rounding`, and held in FP32 beside
/// the row while the row is cached; see mpe/optim/state_precision.hpp).
///
/// Shapes: T tables, B bags per table per call, D = dim. `indices` are row ids local to
/// their table, table-major (bag j = t*B + b holds indices[offsets[j] .. offsets[j+1])),
/// `offsets` has T*B + 1 entries; outputs and output gradients are (B, T*D) row-major
/// FP32, sample b's table-t vector at [b*T*D + t*D, +D). Global row = table's first
/// row + local row (table 0 first).
///
/// Memory space: with HostBackend every span is host memory; with CudaBackend the index,
/// offset, weight, output and gradient spans are device (or managed) memory, and
/// set_weights/get_weights take host spans.
///
/// Errors: invalid input throws std::invalid_argument naming the argument and the value,
/// and leaves the object unchanged; misuse (backward without forward, a changed optimizer
/// kind) throws std::logic_error. With config.validation == Validation::Deferred the
/// checks of device-resident values (offsets, indices, per-sample weights, gradients)
/// never wait: a failing call changes nothing and its error is thrown by the next
/// synchronize(), set_weights() or load(). Not thread-safe; const members may run
/// concurrently with each other. Same seed and inputs give the same bits whatever the
/// thread count and validation mode.
///
/// Synchronization (CudaBackend): prefetch(), forward() and backward() wait once for the
/// validation verdict (Validation::Synchronous) or never (Validation::Deferred); every
/// other kernel, sort and statistics update is queued on the backend's stream. flush(),
/// reset_stats() and init_uniform() never wait; stats(), step(), get_weights(), save(),
/// set_weights(), load() and synchronize() do.
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend = HostBackend,
          StatePrecisionPolicy StatePrecision = StateFp32>
class CachedEmbedding {
  static_assert(ExecutionBackend<Backend>,
                "mpe::CachedEmbedding: Backend does not provide the ExecutionBackend members "
                "(mpe/backend/backend.hpp)");

 public:
  using storage_type = Storage;            ///< the store's row format (a StoragePolicy)
  using cache_policy = Cache;              ///< the cache's replacement policy (a CachePolicy)
  using rounding_type = Rounding;          ///< rounding of every write to the store (a RoundingPolicy)
  using backend_type = Backend;            ///< where memory lives and functors run (an ExecutionBackend)
  using state_precision = StatePrecision;  ///< precision of the optimizer state (a StatePrecisionPolicy)
  using state_type = TableState;           ///< what state() reads and restore_state() writes

  /// Builds the store (zero rows: every element reads 0), an empty cache and the
  /// metadata. The cache has num_sets = floor(C / Ways) sets, C = min(cache_rows, total
  /// rows rounded up to Ways). Throws std::invalid_argument for an empty table list, a
  /// table or dim < 1, negative cache_rows, 0 < cache_rows < Ways, or a row_alignment
  /// that is not a power of two in [1, 4096].
  explicit CachedEmbedding(const EmbeddingConfig& config, Backend backend = {});

  /// Takes over the other object's store, cache, optimizer state, counters and pending
  /// batch: no allocation, no copy of backend memory, no wait. The moved-from object may
  /// only be destroyed or assigned to; views taken from it (ref(), cache_ref()) are no
  /// longer valid. Not copyable.
  CachedEmbedding(CachedEmbedding&&) noexcept = default;
  /// Takes over the other object's state as the move constructor does and frees this
  /// object's previous memory (Backend::deallocate: CudaBackend's cudaFree waits for the
  /// device).
  CachedEmbedding& operator=(CachedEmbedding&&) noexcept = default;

  /// Replaces global rows [first_row, first_row + weights.size() / D) with `weights`
  /// ((rows, D) row-major FP32, host memory), quantized with Rounding (site SetWeights),
  /// and drops their cache lines without writing them back. Optimizer state and step are
  /// unchanged (with a compact StatePrecision the FP32 state of a dropped dirty row is
  /// written back, rounded at site StateDrop, as an eviction would). Throws std::invalid_argument if
  /// weights.size() is not a multiple of D, the range leaves the table, or a value cannot be held by Storage
  /// (non-finite, or beyond Storage::limit); nothing changes then.
  void set_weights(std::span<const float> weights, std::int64_t first_row = 0);

  /// Writes global rows [first_row, first_row + out.size() / D) into `out` ((rows, D)
  /// FP32, host memory), read through the cache (cached rows in FP32, others
  /// dequantized). Synchronous. Throws std::invalid_argument like set_weights.
  void get_weights(std::span<float> out, std::int64_t first_row = 0) const;

  /// Initializes every row uniformly in [low, high) from the seed (Philox, site Init) and
  /// stores it with Rounding; drops the cache without write-back. Needs (65536, D) FP32
  /// of workspace, never the whole table. Throws std::invalid_argument unless low < high,
  /// both finite and within Storage::limit.
  void init_uniform(float low, float high);

  /// init_uniform() with a range per table: table t's rows uniformly in [low[t], high[t])
  /// (low and high: T values each, host memory). Each row draws exactly what init_uniform(
  /// low[t], high[t]) draws for it (its row key, its table's column key: the bits of the
  /// same rows in the table set or full table they are a piece of), so with every table at
  /// (l, h) this is init_uniform(l, h) bit for bit. Throws std::invalid_argument, nothing
  /// changed, if low.size() or high.size() is not T, or for a table whose range breaks
  /// init_uniform()'s rules (naming the table and its range).
  void init_uniform(std::span<const float> low, std::span<const float> high);

  /// Populates the cache for the next forward() with the same indices and offsets (one
  /// prefetch ahead: a second prefetch replaces the first). Rows of the batch still
  /// awaiting backward() and of the prefetched batch are never evicted until that
  /// batch's backward. Validates like forward(). No effect without a cache beyond the
  /// validation. Waits once (Validation::Synchronous) or never (Validation::Deferred).
  void prefetch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets);

  /// Pooled lookup for training: populates the cache (unless a matching prefetch did),
  /// then output (B, T*D) = per bag the sum (or mean) of its rows, in index order;
  /// `per_sample_weights` (n) scale each occurrence (Sum pooling only). An empty bag
  /// gives zeros. Remembers the batch for backward(). Throws std::invalid_argument for
  /// malformed offsets (size not T*B + 1, offsets[0] != 0, decreasing, last !=
  /// indices.size()), an index outside its table, output.size() != B*T*D, per-sample
  /// weights of the wrong size, non-finite, or with Mean pooling. With config.non_finite
  /// == NonFinite::Skip, non-finite per-sample weights do not throw: the output holds
  /// what they give, and the next backward() skips the step and counts it.
  /// Validation::Synchronous waits once for the verdict and throws here; under
  /// Validation::Deferred nothing waits, a failing call leaves the object and `output`
  /// unchanged and records the error for synchronize(); a call after prefetch() with the
  /// prefetched batch's sizes must pass the prefetched batch (different contents are a
  /// recorded error).
  void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
               std::span<float> output, Pooling pooling = Pooling::Sum,
               std::span<const float> per_sample_weights = {});

  /// Like forward() but reads through cache and store without changing anything (no
  /// populate, no stats): for evaluation. Same validation, always synchronous (one wait).
  /// With a cache, each occurrence's set is scanned for its row first (workspace: 3 index
  /// arrays of indices.size(), the call's own, so concurrent calls share nothing).
  void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                         std::span<float> output, Pooling pooling = Pooling::Sum,
                         std::span<const float> per_sample_weights = {}) const;

  /// Applies `optimizer` (any mpe::Optimizer: Sgd, RowwiseAdagrad, Adagrad, Adam, ...;
  /// hyperparameters per call, so schedules need nothing else) for the last forward():
  /// per unique row g = sum of its occurrences' output gradients (times per-sample weight
  /// or 1/L) in position order; then OptimizerRule<Opt>::step computes the row's update u
  /// and new state (state_floats(D) values per table row in StatePrecision, allocated at
  /// the first applied step; a compact precision's row is decoded, stepped in FP32 and
  /// rounded back with Rounding at site StateUpdate, a cached row's FP32 state is stepped
  /// in the cache); w -= u on the FP32 cache row (marked dirty) or on the store row
  /// (dequantize, update, quantize with Rounding). grad_output: (B, T*D). Nothing is
  /// applied unless every row's g and new state are finite and no update is NaN (a finite
  /// grad_output can overflow in the sum or the optimizer): such a step is handled as a
  /// non-finite gradient. Throws std::logic_error without a pending forward() or if the
  /// optimizer type changed; std::invalid_argument for a wrong size, a non-finite gradient
  /// or an overflowing step (unless config.non_finite == NonFinite::Skip: then the step is
  /// skipped and counted), or unusable optimizer parameters (a learning rate that is not
  /// finite or is negative, an eps that is not finite or not > 0, Adam betas outside [0, 1):
  /// the message names the field and value). A non-finite gradient waits
  /// once and throws here (Validation::Synchronous) or is recorded for synchronize()
  /// (Validation::Deferred: the step is not applied; a backward of a failed forward applies
  /// nothing).
  template <Optimizer Opt>
  void backward(std::span<const float> grad_output, const Opt& optimizer);

  /// Writes every dirty cache row back to the store (Rounding, site Flush) and clears the
  /// dirty bits; cached rows stay resident in FP32. With a compact StatePrecision their
  /// FP32 optimizer state is written back too (Rounding, site StateFlush).
  void flush();

  /// Writes the exact state to `path` atomically (temporary file, fsync, rename, directory
  /// fsync); waits for queued work. Throws std::runtime_error (std::system_error) on I/O
  /// failure, and for an empty `path` or one naming anything but a regular file (a symbolic
  /// link, directory, FIFO or device: refused before writing); the previous file is then
  /// untouched. Format: docs/checkpoint_format.md.
  /// Forwards to io::save() (mpe/io/checkpoint.hpp, included by mpe/mpe.hpp): a translation
  /// unit that includes only this header gets a compile error naming io::CheckpointFile.
  /// `Io`: leave the default.
  template <class Io = io::CheckpointFile>
  void save(const std::filesystem::path& path) const {
    Io::save(*this, path);
  }

  /// Replaces the state with the checkpoint at `path` after verifying all of it (magic,
  /// version, policies, shapes, checksums, every value in its format's range, the
  /// optimizer's state domain). The state includes the call counter that numbers deferred
  /// errors (synchronize()), so a resumed run names the calls the uninterrupted one would
  /// (a version 1 to 3 file holds no count: the counter becomes the calls it implies, see
  /// docs/checkpoint_format.md). Throws mpe::checkpoint_error for a bad file and
  /// std::invalid_argument naming both precisions when the file's optimizer-state
  /// precision is not StatePrecision (versions 1 and 2 hold FP32 state), leaving the
  /// object unchanged either way; throws a pending deferred error first (like
  /// set_weights()). Forwards to io::load() (see save()).
  template <class Io = io::CheckpointFile>
  void load(const std::filesystem::path& path) {
    Io::load(*this, path);
  }

  // ---- the exact state (checkpoints, copies, importers) ----
  // Every member that changes forward() or backward() results is a part of TableState:
  // state() reads it and restore_state() writes it (tests/io's state twin test fails for a
  // member left out). Checkpoints (mpe/io/checkpoint.hpp) are written and read through
  // these members only.

  /// Every part of the exact training state (see TableState): spans into backend memory
  /// (valid until the next non-const call, move or destruction) and the counters, read from
  /// backend memory. A forward() whose admission is still owed (defer_admission) is left
  /// out as TableState documents. Waits for queued work (the counters and the pending
  /// prefetch's verdict are read); never throws for a valid object but what the reads of
  /// backend memory throw.
  TableState state() const;

  /// Replaces the whole state with `image` (every span in host memory, the store in state
  /// form: see TableState). Checks first that the image is of this table's type and shape
  /// (storage, cache_policy, ways, rounding, state_precision, dim, table_rows), then that every
  /// part has this table's size: store
  /// R * state_row_bytes() bytes with store_stride = state_row_bytes() and no slot-index
  /// entries; cache_rows slots * D; tags, last_use and dirty slots; policy_words
  /// Cache::meta_words(slots); optimizer empty or one of KnownOptimizers with
  /// state_values_per_row its state_floats(D) (0 without one); optimizer_state
  /// R * S * StatePrecision::value_bytes bytes; cached_optimizer_state slots * S with a
  /// compact StatePrecision and a cache, else empty; pending_offsets empty (with
  /// pending_indices empty) or T*B + 1 entries for some B >= 0 forming, with pending_indices,
  /// a valid batch of this table's rows (as prefetch() checks it). A failing check throws
  /// std::invalid_argument naming the part, its size and the expected one, and nothing changes; a pending
  /// deferred validation error is thrown first (like set_weights()). The values are not checked beyond that:
  /// pass an image read by state() from a table of this configuration, or one verified as io::load() verifies
  /// a checkpoint (tags in their sets, values within Storage::limit, the optimizer's domain). Allocates the
  /// optimizer state first (a failure leaves the object unchanged), then copies; the batch awaiting
  /// backward() is dropped and the pending prefetch becomes `image`'s. Adopts image.seed as config().seed.
  /// Synchronous.
  void restore_state(const TableState& image);

  /// Bytes of one store row in state form (TableState::store, checkpoints, exports):
  /// row_bytes<Storage>(D, row_alignment), store_row_bytes() without the slot-index entry
  /// that slot_index_in_rows adds.
  std::size_t state_row_bytes() const { return row_bytes<Storage>(config_.dim, config_.row_alignment); }

  /// Store rows [first_row, first_row + count) in state form into `out`, resized to
  /// (count, state_row_bytes()) bytes (host memory): each row's encoding, then zeros, no
  /// slot-index entry. Rows that are cached (dirty or not) are read as stored: flush() first
  /// for their current values. Synchronous. Throws std::invalid_argument naming the range
  /// when it leaves [0, total_rows()).
  void read_store_rows(std::int64_t first_row, std::size_t count, std::vector<std::uint8_t>& out) const;

  /// Replaces store rows [first_row, first_row + rows.size() / state_row_bytes()) with
  /// `rows` (state form, host memory) and drops their cache lines without write-back (with
  /// a compact StatePrecision the FP32 state of a dropped dirty row is written back, site
  /// StateDrop, as set_weights() does), then adds `saturated_rows` (rows the caller clamped
  /// while encoding them) to stats().saturated_rows. Other rows, lines and batches stay. For
  /// importers of other formats (io::import_table()). A pending admission (defer_admission)
  /// is settled first. Throws std::invalid_argument, nothing changed, when rows.size() is
  /// not a multiple of state_row_bytes(), the range leaves the table, saturated_rows is
  /// negative, or a row is not a state-form row of Storage (non-zero padding, a value that
  /// is not finite or beyond Storage::limit), naming the row. Synchronous.
  void import_store_rows(std::int64_t first_row, std::span<const std::uint8_t> rows,
                         std::int64_t saturated_rows = 0);

  // ---- backward() in phases (containers stepping several tables atomically) ----
  // backward(g, opt) is: `if (prepare_backward(g, opt)) apply_prepared_backward(opt);
  // finish_backward();`. A container that steps all its tables or none (MixedDimEmbedding)
  // prepares every table first and applies only when all prepared steps apply.

  /// backward()'s first phase: validates like backward(), sums the gradients and computes
  /// every row's update and new optimizer state into workspace; changes no weight and no
  /// optimizer state (counts the call; under NonFinite::Skip a skipped step of this table's
  /// own input is counted in stats().skipped_steps). Returns whether the step applies (false:
  /// skipped or, under Validation::Deferred, a failed batch; an asynchronous backend under
  /// Validation::Deferred returns true and gates the apply on the device). Throws what
  /// backward() throws; the batch then still awaits backward().
  template <Optimizer Opt>
  bool prepare_backward(std::span<const float> grad_output, const Opt& optimizer);
  /// backward()'s second phase: writes the step prepare_backward() computed (weights,
  /// optimizer state, step, statistics); `optimizer` is the one given to prepare_backward()
  /// (its type is checked). Throws std::logic_error, nothing changed, unless the last
  /// prepare_backward() since the last forward() returned true and no apply followed, or for
  /// another optimizer type.
  template <Optimizer Opt>
  void apply_prepared_backward(const Opt& optimizer);
  /// Ends the step: the last forward()'s batch no longer awaits backward() (whether its
  /// step was applied or not). No wait, never throws.
  void finish_backward() noexcept;
  /// Adds 1 to stats().skipped_steps (queued): for a container that skips this table's
  /// prepared step because of another table's input.
  void count_skipped_step();

  /// Cumulative counters (see CacheStats). Reads them from backend memory (waits for
  /// queued work).
  CacheStats stats() const { return read_counters().stats; }
  /// Zeroes the counters (queued).
  void reset_stats();

  /// Waits for all queued work; then, under Validation::Deferred, throws the first error
  /// recorded since the last report (std::invalid_argument naming the call, its number
  /// (1-based, counting every prefetch/forward/backward call of this object, continued from
  /// the checkpoint after load()), the argument and the value, and how many later calls
  /// failed their own validation) and clears it. set_weights() and load() throw it the
  /// same way before doing anything (call them again). Under Validation::Synchronous it
  /// only waits.
  void synchronize();

  /// Bytes as allocated, by purpose. optimizer_bytes = rows * S * StatePrecision::value_bytes
  /// (the state store) + slots * S * 4 with a compact precision and a cache (the FP32 state
  /// of cached rows), S = state_floats(D); 0 before the first applied step.
  MemoryFootprint memory() const;

  /// The bytes memory() reports, but workspace, for an object built with `config` once it
  /// has applied one backward() step, computed from the configuration alone (nothing is
  /// allocated; a planner can size a table before building it). All values are bytes:
  /// - store_bytes: total rows x store_row_bytes() (row padding and, with
  ///   slot_index_in_rows, the slot-index entries included);
  /// - cache_bytes: slots x (4D FP32 row + 8 B tag + 8 B last use + 1 B dirty), the cache
  ///   policy's metadata words (4 B each), and the separate slot-index array (4 B a row,
  ///   slot_index with slot_index_in_rows false); 0 without a cache;
  /// - optimizer_bytes: rows x S x StatePrecision::value_bytes, plus slots x S x 4 (the FP32
  ///   state of cached rows) with a compact precision (StateBf16, StateFp16) and a cache;
  /// - metadata_bytes: table offsets ((T + 1) x 8), row keys and column keys (T x 8 each
  ///   when given; column keys all 0 take nothing) and the counters;
  /// - workspace_bytes: 0 (per-call buffers, sized by the batches, are not planned).
  ///
  /// `state_values_per_row` is S, the optimizer's state values per row
  /// (OptimizerRule<Opt>::state_floats(config.dim): 0 for Sgd, 1 for RowwiseAdagrad, 2D for
  /// Adam); before the first step memory().optimizer_bytes is 0. Equal field by field to
  /// memory() of `CachedEmbedding(config)` after its first applied backward() with such an
  /// optimizer. Throws what the constructor throws for `config` (the same
  /// std::invalid_argument, naming planned_memory), and std::invalid_argument for a negative
  /// state_values_per_row or an optimizer state of more than PTRDIFF_MAX bytes.
  static MemoryFootprint planned_memory(const EmbeddingConfig& config, std::int64_t state_values_per_row);
  /// planned_memory(config, OptimizerRule<Opt>::state_floats(config.dim)): the footprint
  /// with optimizer type Opt (its hyperparameters do not matter).
  template <Optimizer Opt>
  static MemoryFootprint planned_memory(const EmbeddingConfig& config, const Opt& optimizer) {
    (void)optimizer;
    if (config.dim < 1) return planned_memory(config, 0);  // throws, naming config.dim
    return planned_memory(config, OptimizerRule<Opt>::state_floats(config.dim));
  }

  // ---- introspection ----
  /// The configuration given to the constructor (host memory, no wait). cache_rows is the
  /// requested capacity (cache_slots() is the one built); load() replaces seed with the
  /// checkpoint's.
  const EmbeddingConfig& config() const { return config_; }
  /// The backend every allocation and call of this object goes through (its own copy of
  /// the constructor's argument).
  const Backend& backend() const { return backend_; }
  /// T, the number of tables (config().table_rows.size()).
  std::int64_t num_tables() const { return static_cast<std::int64_t>(config_.table_rows.size()); }
  /// Rows of all tables together: global rows are [0, total_rows()).
  std::int64_t total_rows() const { return total_rows_; }
  /// D, elements (FP32 values) per row, the same for every table.
  std::int32_t dim() const { return config_.dim; }
  /// Bytes of one stored row including padding.
  std::size_t store_row_bytes() const { return stride_; }
  /// Cache sets: floor(C / Ways), C = min(cache_rows, total rows rounded up to Ways); 0
  /// without a cache.
  std::int64_t num_sets() const { return num_sets_; }
  /// Cache capacity in rows (num_sets * Ways).
  std::int64_t cache_slots() const { return num_sets_ * Cache::ways; }
  /// Completed backward() calls (the `step` of the rounding counter). Reads backend
  /// memory (waits for queued work).
  std::uint64_t step() const { return read_counters().step; }
  /// First global row of table t (t in [0, T]; t = T gives total_rows()). Throws
  /// std::invalid_argument naming t for any other value.
  std::int64_t table_offset(std::int64_t t) const {
    if (t < 0 || t > num_tables()) {
      throw std::invalid_argument("mpe::CachedEmbedding::table_offset: t = " + std::to_string(t) +
                                  " is outside [0, T] = [0, " + std::to_string(num_tables()) + "]");
    }
    return table_offsets_host_[static_cast<std::size_t>(t)];
  }
  /// View of the cache in backend memory (valid until the object is moved or destroyed).
  CacheRef cache_ref() const;
  /// Trivially copyable read view (store, cache, table offsets) for users' own per-item
  /// code or CUDA kernels; memory space and validity as EmbeddingRef documents.
  EmbeddingRef<Storage> ref() const {
    return EmbeddingRef<Storage>{store_.data(),         stride_,      cache_ref(),
                                 table_offsets_.data(), num_tables(), config_.dim};
  }

 private:
  using IBuf = detail::Buffer<index_t, Backend>;
  // Validates `config` as the constructor does (std::invalid_argument prefixed with
  // mpe::CachedEmbedding::`fn`) and gives every size the constructor allocates.
  static detail::EmbeddingLayout layout_of(const EmbeddingConfig& config, const char* fn);
  static constexpr std::size_t kSkipOutputCheck = static_cast<std::size_t>(-1);

  // One batch and its life (detail::BatchStage documents who moves it from which stage).
  using Batch = detail::TableBatch<Backend>;

  index_t check_shapes(const char* fn, std::span<const std::int64_t> indices,
                       std::span<const std::int64_t> offsets, std::span<const float> weights, Pooling pooling,
                       std::size_t output_size) const;
  template <Optimizer Opt>
  void apply_backward(const Opt& optimizer);  // apply_prepared_backward's body (unchecked)
  // Laned backends: every unique row's gradient sum into b.grad in gradient_sum.hpp's
  // order, as stages of laned kernels (SumStage); with check_sums each sum is tested as
  // AccumulateRows would for a ScalesGradient optimizer.
  void sum_stages(Batch& b, const float* grad_output, bool check_sums);
  void check_output_size(const char* fn, std::size_t size, index_t B) const;
  void check_row_range(const char* fn, const char* arg, std::size_t size, std::int64_t first_row) const;
  void queue_checks(detail::CallRecord* rec, std::span<const std::int64_t> indices,
                    std::span<const std::int64_t> offsets, std::span<const float> weights, index_t B,
                    index_t* global_rows, index_t* bag_of) const;
  detail::CallRecord read_record(const detail::CallRecord* rec) const;
  detail::StateRef state_ref() const;
  std::int64_t state_floats() const;
  std::string describe(int check, index_t pos, const index_t* v) const;
  void throw_if_failed(const char* fn, const detail::CallRecord& r, bool skip_non_finite, Batch* drop) const;
  void throw_deferred();
  void prepare_flags(Batch& b, index_t n, index_t B);
  index_t unique_bound(const Batch& b) const;
  // The host's one-thread paths (BitmapUnique, ScatterRowGradients, fill prefetches) apply
  // to HostBackend and to synchronous backends derived from it (a user's allocator or page
  // policy, the side-by-side harness's PagedHostBackend), which must keep HostBackend's
  // threads() and for_each (threads() == 1: items run in order on the calling thread); an
  // asynchronous one stands in for the GPU.
  static constexpr bool host_paths = std::derived_from<Backend, HostBackend> && !Backend::asynchronous;
  // The backend's fast paths (Backend::fast_paths, HostBackend's detail::HostPaths; else the
  // portable code): every functor with a fast form is instantiated with them.
  using Paths = detail::paths_of<Backend>;
  // Whether the host's one-thread passes run now (host_paths and the paths' sequential():
  // HostPaths, threads() == 1): the bitmap dedup, the fused admission and the scatter backward.
  bool sequential_host() const {
    if constexpr (host_paths) {
      return Paths::sequential(backend_);
    } else {
      return false;
    }
  }
  // Whether backward sums gradients with ScatterRowGradients (the host backend on one
  // thread; the forward then keeps a copy of its offsets in the batch).
  bool scatter_backward() const { return sequential_host(); }
  // The unique rows of b (BitmapUnique where `bitmap_ok` and the host runs one thread, else
  // the sort, which also writes sorted_pos).
  void sort_unique(Batch& b, bool bitmap_ok = true);
  void populate(Batch& b, const Batch* awaiting_backward, bool bitmap_ok = true);
  // Without a populate (forward_inference; forward under defer_admission; num_sets_ > 0):
  // each of the n occurrences' slot into slots (n) before pooling (ProbeSlots, gated), or,
  // returning true, nothing, where the host's SIMD pooling reads the slot index itself
  // (PoolBags::probe_out).
  bool probe_slots(const index_t* global_rows, index_t n, index_t* slots, const index_t* gate) const;
  // EmbeddingConfig::defer_admission: runs the populate that forward() left to the batch
  // awaiting backward (nothing if none is left). The one place that settles what is pending:
  // every call that populates, writes rows or replaces state runs it before its first change
  // (its input checked), so the admission sees the state its forward() saw, as the twin
  // without defer_admission admitted it there: prefetch(), forward(), backward(), flush(),
  // reset_stats(), and through write_rows() (set_weights(), init_uniform()) and
  // import_store_rows() (io::import_table()) and restore_state() (load()).
  void admit_pending();
  bool defers_admission() const { return config_.defer_admission && num_sets_ > 0; }
  // Replaces rows [first, first + count) with src (backend memory), rounded at `site`; settles
  // a pending admission first (admit_pending()).
  void write_rows(const float* src_backend, index_t first, index_t count, num::RoundingSite site);
  // init_uniform's draws and writes of tables [t0, t1) from [low, high) (checked).
  void init_rows(std::int64_t t0, std::int64_t t1, float low, float high,
                 detail::Buffer<float, Backend>& buf);
  /// Whether a slot index is kept (in the store rows or an array).
  bool has_slot_index() const { return slot_index_.size() > 0 || (slot_offset_ > 0 && num_sets_ > 0); }
  void reindex_slots();  // the slot index (if kept) re-derived from tags_, after they are replaced
  // Replaces store rows [first, first + count) with `rows` (state form, host memory): each
  // row's slot-index entry (if kept in the rows) becomes -1; settles a pending admission first.
  void write_state_rows(index_t first, std::size_t count, const std::uint8_t* rows);
  // Drops the cache lines of rows [first, first + count) without write-back, keeping the
  // compact optimizer state of dirty ones (KeepStateOfSlots).
  void drop_rows(index_t first, index_t count);
  void restore_pending(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets);
  index_t read_scalar(const index_t* p) const;
  detail::Counters read_counters() const;
  const std::uint64_t* step_ptr() const { return &counters_.data()->step; }
  bool deferred() const { return config_.validation == Validation::Deferred; }
  // The rounding streams: the seed, and config.row_keys / config.column_keys when given
  // (column keys all 0 are left out: the same bits without the table search).
  num::RowStream row_stream() const {
    if (row_keys_.size() == 0 && column_keys_.size() == 0) return num::RowStream{config_.seed};
    return num::RowStream{config_.seed, table_offsets_.data(), row_keys_.size() ? row_keys_.data() : nullptr,
                          num_tables(), column_keys_.size() ? column_keys_.data() : nullptr};
  }
  bool skip_non_finite() const { return config_.non_finite == NonFinite::Skip; }

  EmbeddingConfig config_;
  Backend backend_;
  index_t total_rows_ = 0;
  std::size_t stride_ = 0;
  std::size_t slot_offset_ = 0;  // > 0: the slot index entry's byte in each store row (slot_index_in_rows)
  std::vector<index_t> table_offsets_host_;
  IBuf table_offsets_;                           // (T + 1)
  IBuf row_keys_;                                // (T) config.row_keys, or empty
  IBuf column_keys_;                             // (T) config.column_keys, or empty (also when all 0)
  detail::Buffer<std::uint8_t, Backend> store_;  // (rows, stride)
  index_t num_sets_ = 0;
  detail::Buffer<float, Backend> cache_rows_;         // (slots, D)
  IBuf tags_;                                         // (slots)
  detail::Buffer<std::int32_t, Backend> slot_index_;  // (rows) slot of each row, -1; empty without
  detail::Buffer<std::uint64_t, Backend> last_use_;   // (slots)
  detail::Buffer<std::uint8_t, Backend> dirty_;       // (slots)
  detail::Buffer<std::uint32_t, Backend> meta_;       // (Cache::meta_words(slots)) policy metadata
  detail::Buffer<std::uint8_t, Backend> opt_state_;   // (rows, S) values of StatePrecision
  detail::Buffer<float, Backend> cache_state_;        // (slots, S) FP32 state of cached rows (compact only)
  std::string opt_name_;  // OptimizerRule::name of the optimizer that owns opt_state_ (empty: none yet)
  std::uint64_t populate_counter_ = 0;
  std::uint64_t call_seq_ = 0;  // prefetch/forward/backward calls (numbers deferred errors; checkpointed)
  detail::Buffer<detail::Counters, Backend> counters_;  // (1) stats, step, decay clock
  Batch current_, pending_, staging_;
  detail::Buffer<detail::CallRecord, Backend> record_;       // (1) verdict of the running call
  detail::Buffer<detail::DeferredError, Backend> deferred_;  // (1) first unreported error
  mutable IBuf error_;  // (1) smallest offending position of set_weights' check
  detail::Buffer<std::uint8_t, Backend> flush_outcome_;
};

}  // namespace mpe

// detail/embedding/setup.inl defines the helpers the others use, so it comes first.
// clang-format off
#include "mpe/detail/embedding/setup.inl"
#include "mpe/detail/embedding/checks.inl"
#include "mpe/detail/embedding/lookup.inl"
#include "mpe/detail/embedding/train.inl"
#include "mpe/detail/embedding/weights.inl"
#include "mpe/detail/embedding/state.inl"
// clang-format on
