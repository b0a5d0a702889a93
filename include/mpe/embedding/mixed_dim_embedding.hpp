// SPDX-License-Identifier: Apache-2.0
/// @file mpe/embedding/mixed_dim_embedding.hpp
/// @brief `mpe::MixedDimEmbedding`: table-batched embedding bags whose tables have
/// different D (a list of (rows, D) table specs, as FBGEMM's table-batched embeddings and
/// TorchRec take them), built from one CachedEmbedding per distinct D.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpe/backend/host_backend.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/embedding/mixed_dim.hpp"
#include "mpe/detail/kernels/mixed_dim.hpp"
#include "mpe/embedding/cached_embedding.hpp"
#include "mpe/io/checkpoint.hpp"

namespace mpe {

/// One table of a MixedDimEmbedding.
struct TableSpec {
  std::int64_t rows = 0;  ///< rows, >= 1
  std::int32_t dim = 0;   ///< D, elements per row, in [1, 2^20]
};

/// Shape and settings of a MixedDimEmbedding. Fields are only ever appended.
struct MixedDimConfig {
  std::vector<TableSpec> tables;   ///< T >= 1 tables, any mix of D, in output column order
  double cache_fraction = 0.0;     ///< FP32 cache of each D-group, as a fraction of its rows, in [0, 1]
  std::uint64_t seed = 0;          ///< stochastic rounding stream (group g > 0 derives its own)
  std::int32_t row_alignment = 4;  ///< store row padding in bytes (power of two, <= 4096)
  NonFinite non_finite = NonFinite::Throw;  ///< non-finite gradient / per-sample weight handling
  bool slot_index = false;         ///< each group keeps a row -> slot index (EmbeddingConfig::slot_index)
  bool slot_index_in_rows = true;  ///< its entries in the store rows (EmbeddingConfig::slot_index_in_rows)
  /// Each group admits a forward()'s misses in its backward(), or in the call that comes
  /// first among those EmbeddingConfig::defer_admission lists (the next forward() among
  /// them: a backward() that throws before a group admitted leaves that group's batch to
  /// it), so every sequence of calls trains the bits it would without the setting.
  bool defer_admission = false;
  /// The row each table's row 0 counts as in the stochastic-rounding counter, one per table
  /// in `tables` order (EmbeddingConfig::row_keys: >= 0, leaving room for the table's rows);
  /// empty (the default): none. Non-empty: the caller keys every row globally, so every
  /// group uses `seed` unchanged (no derived seed) and group g's EmbeddingConfig::row_keys
  /// are its tables' entries (see the class comment, Numerics).
  std::vector<std::int64_t> row_keys = {};
  /// The column of the full table that each table's column 0 is, one per table in `tables`
  /// order (EmbeddingConfig::column_keys: >= 0, a multiple of 4, column_keys[t] + D_t <=
  /// 2^26); empty (the default): all 0. Group g's EmbeddingConfig::column_keys are its
  /// tables' entries.
  std::vector<std::int64_t> column_keys = {};
  /// Every group's EmbeddingConfig::max_range_growth (finite, in [0, 1]; 0: off; > 0 only
  /// with Int8Rowwise, Int4Rowwise or Int2Rowwise; std::invalid_argument naming
  /// config.max_range_growth otherwise, at construction).
  float max_range_growth = 0.0f;
};

/// Table-batched embedding bags in mixed precision whose T tables have any mix of D.
///
/// **Layout.** Tables are grouped by D: group g holds every table of dimension D_g (groups
/// in order of D's first appearance in `config.tables`, tables inside a group in spec
/// order), and each group is one `CachedEmbedding<Storage, Cache, Rounding, Backend,
/// StatePrecision>` with EmbeddingConfig{its tables' rows, D_g}. A group's FP32 cache
/// holds rows of its own D only: cache_rows_g = max(Ways, round(cache_fraction * rows_g))
/// requested (0 when cache_fraction == 0), slots of 4*D_g bytes plus the policy's
/// metadata; so the FP32 cache costs sum_g slots_g * 4 * D_g bytes, with no padding to
/// the largest D (a single cache with max-D slots would cost slots * 4 * max D). Each
/// group's capacity is fixed by its rows: a hot group cannot borrow slots from a cold one.
/// The store costs sum_t rows_t * Storage::data_bytes(D_t) (each row padded to row_alignment).
///
/// **Shapes.** As CachedEmbedding, with per-table widths: `indices` local to their table,
/// table-major; `offsets` (T*B + 1); output and output gradient (B, sum_t D_t) row-major
/// FP32, table t's vector of sample b at [b*sum D + c_t, +D_t), c_t = D_0 + ... + D_{t-1}
/// (column(t)). Per-sample weights (n) as CachedEmbedding.
///
/// **Numerics.** Without row keys (config.row_keys empty) group 0 uses config.seed and
/// group g > 0 uses seed ^ (0x9e3779b97f4a7c15 * g), its rows keyed by their place in the
/// group. With row keys (config.row_keys, one per table) the caller keys every row
/// globally, so every group uses config.seed unchanged and each group's
/// EmbeddingConfig::row_keys and column_keys are its tables' entries of config.row_keys and
/// config.column_keys: a table then rounds and initializes with the bits it has in any
/// object (sharded or not, grouped with any other tables) that gives it the same seed, row
/// key and column key (docs/numerics.md, section 3). A module whose tables all have one D
/// is exactly one CachedEmbedding with that seed (same bits). Every row's arithmetic is its
/// group's, so the numerics contract holds per row (docs/numerics.md): the same seed and
/// inputs give the same bits whatever the thread count.
///
/// **All or nothing.** A batch is checked whole before any group runs (with one group by
/// the group itself, so one D costs no extra pass and its messages name
/// mpe::CachedEmbedding); backward() checks
/// and prepares every group's step before any group writes one, and applies all of them
/// or (a non-finite or overflowing gradient anywhere) none. With NonFinite::Skip a
/// skipped step is skipped in every group and counted once in stats().skipped_steps.
///
/// **Batches.** B = 0 (offsets = {0}) is a valid, empty batch. Not copyable (each group
/// owns its tables); movable.
///
/// **Memory space and sync.** As CachedEmbedding on `Backend`: with HostBackend every span
/// is host memory and every call returns when its work is done; with a backend whose
/// spans live in its own memory (`Backend::device_spans`: CudaBackend) indices, offsets,
/// per-sample weights, output and grad_output are backend (device or managed) memory,
/// while set_weights / get_weights / init_uniform / save / load take host memory. There,
/// with G groups (G = num_groups()), each call waits on the backend (a copy_to_host) this
/// many times, and only queues the rest of its work:
/// - G = 1: the group's own waits: prefetch(), forward(), forward_inference() and
///   backward() once each (its validation verdict), no extra pass;
/// - G > 1: prefetch(), forward() and forward_inference() 1 + G (one verdict of the whole
///   batch, read with its T + 1 table boundaries, which size each group's share; then each
///   group's own verdict); backward() G + 1 under NonFinite::Throw (a count of grad_output's
///   non-finite elements, then each group's verdict), G under NonFinite::Skip. The split
///   (one backend copy per run of adjacent tables of a group, one offsets pass per group)
///   and the column copies run as backend passes (detail/kernels/mixed_dim.hpp).
/// A refused batch costs more waits (it is copied to the host to name the fault, with
/// HostBackend's message). forward_inference() allocates its split buffers per call and
/// frees them on return (CudaBackend without an allocator: cudaFree, which waits for the
/// device). Errors: std::invalid_argument naming the argument and the value (the object
/// unchanged); std::logic_error for misuse (backward() without a forward(), a changed
/// optimizer). Not thread-safe; const members may run concurrently.
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision = StateFp32, class Backend = HostBackend>
class MixedDimEmbedding {
 public:
  /// The type of each D-group.
  using group_type = CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>;

  /// Builds one group per distinct D (see the class comment). Throws std::invalid_argument
  /// for an empty table list, a table with rows < 1 or D outside [1, 2^20], a
  /// cache_fraction outside [0, 1] or not finite, row_keys or column_keys neither empty nor
  /// one per table or with a value CachedEmbedding refuses (named config.row_keys[t] /
  /// config.column_keys[t], t in spec order), and what CachedEmbedding's constructor throws
  /// for the other fields.
  /// `backend` runs every group (each group keeps a copy: CudaBackend's copies share its
  /// stream and allocator).
  explicit MixedDimEmbedding(const MixedDimConfig& config, Backend backend = Backend{});

  /// The bytes memory() reports, but workspace, for an object built with `config` once it
  /// has applied one backward() step, computed from the configuration alone (nothing is
  /// allocated): the sum over the D-groups of group_type::planned_memory(group's
  /// EmbeddingConfig, S_g), each group's configuration as the constructor builds it (so
  /// cache_rows_g = max(Ways, round(cache_fraction * rows_g)) with cache_fraction > 0), plus
  /// this object's table layout in metadata_bytes. Bytes; workspace_bytes is 0 (per-call
  /// split buffers are not planned). `state_values_per_row(D)` gives S for a group of
  /// dimension D (a std::int32_t), the optimizer's state values per row
  /// (OptimizerRule<Opt>::state_floats(D)). Throws what the constructor throws for `config`
  /// (std::invalid_argument, naming planned_memory), and what group_type::planned_memory
  /// throws for S.
  template <class StateValues>
  requires std::is_invocable_r_v<std::int64_t, StateValues&, std::int32_t>
  static MemoryFootprint planned_memory(const MixedDimConfig& config, StateValues&& state_values_per_row) {
    const detail::MixedLayout L = make_layout(config, "planned_memory");
    MemoryFootprint m;
    for (std::size_t g = 0; g < L.G(); ++g) {
      m += group_type::planned_memory(group_config(config, L, g),
                                      static_cast<std::int64_t>(state_values_per_row(L.group_dim[g])));
    }
    m.metadata_bytes += L.bytes();
    if constexpr (Backend::device_spans) {
      if (L.G() > 1) m.metadata_bytes += device_layout_bytes(L);
    }
    return m;
  }
  /// planned_memory(config, D -> OptimizerRule<Opt>::state_floats(D)): the footprint with
  /// optimizer type Opt (its hyperparameters do not matter).
  template <Optimizer Opt>
  static MemoryFootprint planned_memory(const MixedDimConfig& config, const Opt& optimizer) {
    (void)optimizer;
    return planned_memory(config, [](std::int32_t D) { return OptimizerRule<Opt>::state_floats(D); });
  }

  /// The backend every group runs on (a copy).
  const Backend& backend() const noexcept { return backend_; }

  /// Takes over the other object's groups and state (no copy of a table). The moved-from
  /// object may only be destroyed or assigned to. Not copyable.
  MixedDimEmbedding(MixedDimEmbedding&&) noexcept = default;
  /// Takes over the other object's groups and state; frees this object's.
  MixedDimEmbedding& operator=(MixedDimEmbedding&&) noexcept = default;
  MixedDimEmbedding(const MixedDimEmbedding&) = delete;
  MixedDimEmbedding& operator=(const MixedDimEmbedding&) = delete;

  // ---- training ----

  /// Populates every group's cache for the next forward() with the same batch (one
  /// prefetch ahead, as CachedEmbedding::prefetch). Validates the whole batch first.
  void prefetch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets);

  /// Pooled lookup for training into `output` (B, sum D_t), as CachedEmbedding::forward
  /// per group; remembers the batch for backward(). Throws std::invalid_argument for
  /// malformed offsets, an index outside its table (naming its position and table),
  /// output.size() != B * total_dim(), per-sample weights of the wrong size, non-finite
  /// (unless NonFinite::Skip) or with Mean pooling; nothing changes then.
  void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
               std::span<float> output, Pooling pooling = Pooling::Sum,
               std::span<const float> per_sample_weights = {});

  /// Like forward() but changes nothing (no populate, no stats): for evaluation. Same
  /// validation, except that a non-finite per-sample weight throws std::invalid_argument
  /// (naming its position) even under NonFinite::Skip: there is no step to skip. Uses
  /// per-call buffers, so const calls may run concurrently.
  void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                         std::span<float> output, Pooling pooling = Pooling::Sum,
                         std::span<const float> per_sample_weights = {}) const;

  /// Applies `optimizer` for the last forward() in every group: grad_output (B, sum D_t).
  /// Every group's step is checked and prepared before any is written; a non-finite or
  /// overflowing gradient in any group throws std::invalid_argument (NonFinite::Throw) or
  /// skips the step in every group (NonFinite::Skip, counted once), and nothing is
  /// applied. Throws std::logic_error without a pending forward() or if the optimizer
  /// type changed; std::invalid_argument for a wrong size or unusable parameters.
  template <Optimizer Opt>
  void backward(std::span<const float> grad_output, const Opt& optimizer);

  /// Writes every group's dirty cache rows back to the store (CachedEmbedding::flush: Rounding,
  /// site Flush); rows stay cached. Synchronous; never throws for valid state.
  void flush() {
    for (auto& e : groups_) e.flush();
  }

  // ---- weights ----

  /// Replaces rows [first_row, first_row + weights.size() / D_t) of table t with
  /// `weights` ((rows, D_t) FP32, host memory), as CachedEmbedding::set_weights. Throws
  /// std::invalid_argument for t outside [0, T) and what set_weights throws.
  void set_weights(std::int64_t t, std::span<const float> weights, std::int64_t first_row = 0);

  /// Writes rows [first_row, first_row + out.size() / D_t) of table t into `out`
  /// ((rows, D_t) FP32), read through the cache. Throws like set_weights.
  void get_weights(std::int64_t t, std::span<float> out, std::int64_t first_row = 0) const;

  /// Initializes every row uniformly in [low, high), each group from its own seed
  /// (CachedEmbedding::init_uniform; drops the caches). Throws std::invalid_argument unless
  /// low < high, both finite and within Storage::limit (checked by group 0 before any group
  /// changes).
  void init_uniform(float low, float high) {
    for (auto& e : groups_) e.init_uniform(low, high);
  }

  /// init_uniform() with a range per table: table t's rows uniformly in [low[t], high[t])
  /// (T values each, in spec order), each row drawing what init_uniform(low[t], high[t])
  /// draws for it (CachedEmbedding::init_uniform per table), so with every table at (l, h)
  /// this is init_uniform(l, h) bit for bit. Throws std::invalid_argument, nothing changed,
  /// if low.size() or high.size() is not T or for a table whose range breaks
  /// init_uniform()'s rules (naming the table t and its range).
  void init_uniform(std::span<const float> low, std::span<const float> high);

  // ---- checkpoints ----

  /// The exact state as bytes in host memory: format MPEMIXD1 (docs/checkpoint_format.md,
  /// "Mixed-D container"): magic, version 1, the table specs, then each group's MPECKPT1
  /// checkpoint (io::save_to_bytes) with its length, then a CRC-32C of everything before.
  /// Size: about the sum of the groups' checkpoint sizes (bytes); one group's checkpoint is
  /// held beside the container while it is appended. Throws std::bad_alloc.
  std::vector<std::uint8_t> save_bytes() const;

  /// Replaces the whole state with `bytes` (from save_bytes()) after verifying all of it:
  /// the container (magic, version, table specs equal to this object's, lengths,
  /// checksum) and every group's checkpoint, each loaded into a new group first; only when
  /// all verify are they swapped in. Throws mpe::checkpoint_error naming `source` and the
  /// first fault, or what io::load_from_bytes throws; the object is then unchanged. Needs
  /// memory for a second copy of the groups while loading. The checkpoint's seed replaces
  /// config().seed (training resumes exactly); its cache geometry must equal this object's
  /// (a group's mismatch is named as its num_sets), its cache_fraction is not stored.
  // (Defined here rather than in detail/embedding/mixed_dim_checkpoint.inl: nvcc 13.0's front
  // end repeats the class's default template argument (StatePrecision = StateFp32) on an
  // out-of-class definition whose body holds a template lambda, which the host compiler rejects.)
  void load_bytes(std::span<const std::uint8_t> bytes, const std::string& source = "in-memory checkpoint") {
    const std::string prefix = "mpe::MixedDimEmbedding::load: '" + source + "': ";
    const std::size_t end = bytes.size() < 4 ? 0 : bytes.size() - 4;  // the CRC-32C follows
    detail::ckpt::Cursor c{bytes.data(), end, 0, end, prefix};
    if (bytes.size() < 8 + 4 + 4 + 4 + 4) c.fail("truncated: " + std::to_string(bytes.size()) + " bytes");
    // Structure first (magic, version, lengths: truncation is named as such), then the
    // checksum, then the contents.
    if (std::memcmp(c.take(8, "magic"), kMagic, 8) != 0) c.fail("not an mpe mixed-D checkpoint (bad magic)");
    if (const auto v = c.get<std::uint32_t>("version"); v != kVersion) {
      c.fail("format version " + std::to_string(v) + "; this build reads version " +
             std::to_string(kVersion));
    }
    const auto T = c.get<std::uint32_t>("T");
    const std::uint8_t* specs = c.take(std::size_t{12} * T, "table specs");
    const auto G = c.get<std::uint32_t>("group count");
    std::vector<std::span<const std::uint8_t>> parts;
    for (std::uint32_t g = 0; g < G && g <= groups_.size(); ++g) {
      const auto n = c.get<std::uint64_t>("group length");
      if (n > end - c.pos) {
        c.fail("truncated: group " + std::to_string(g) + " claims " + std::to_string(n) + " bytes, " +
               std::to_string(end - c.pos) + " remain");
      }
      parts.emplace_back(c.take(static_cast<std::size_t>(n), "group bytes"), static_cast<std::size_t>(n));
    }
    if (G == groups_.size() && c.pos != end)
      c.fail(std::to_string(end - c.pos) + " unexpected bytes after the last group");
    std::uint32_t stored_crc;
    std::memcpy(&stored_crc, bytes.data() + end, 4);
    if (const auto crc = io::checkpoint::crc32c(bytes.data(), end); crc != stored_crc) {
      c.fail("checksum mismatch (stored " + std::to_string(stored_crc) + ", computed " + std::to_string(crc) +
             ")");
    }
    if (T != static_cast<std::uint32_t>(layout_.T())) {
      c.fail("table count " + std::to_string(T) + " in the checkpoint, " + std::to_string(layout_.T()) +
             " here");
    }
    for (std::uint32_t t = 0; t < T; ++t) {
      std::int64_t rows;
      std::int32_t dim;
      std::memcpy(&rows, specs + 12 * t, 8);
      std::memcpy(&dim, specs + 12 * t + 8, 4);
      if (rows != layout_.rows[t] || dim != layout_.dims[t]) {
        c.fail("table " + std::to_string(t) + " is (" + std::to_string(rows) + ", " + std::to_string(dim) +
               ") in the checkpoint, (" + std::to_string(layout_.rows[t]) + ", " +
               std::to_string(layout_.dims[t]) + ") here");
      }
    }
    if (G != groups_.size()) {
      c.fail("group count " + std::to_string(G) + " in the checkpoint, " + std::to_string(groups_.size()) +
             " here");
    }
    std::vector<group_type> fresh;
    fresh.reserve(groups_.size());
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      fresh.emplace_back(group_config(g), backend_);
      io::load_from_bytes(
          fresh.back(), parts[g],
          source + " group " + std::to_string(g) + " (D = " + std::to_string(layout_.group_dim[g]) + ")");
    }
    groups_ = std::move(fresh);
    config_.seed = groups_[0].config().seed;  // the checkpoint's, as CachedEmbedding::load does
    pending_ = false;
  }

  /// Writes save_bytes() to `path` atomically (temporary file, fsync, rename, directory
  /// fsync). Throws std::runtime_error (std::system_error) naming the path on I/O failure;
  /// a previous file at `path` is then untouched.
  void save(const std::filesystem::path& path) const;

  /// load_bytes() of the file at `path`. Throws mpe::checkpoint_error naming the path for
  /// an unreadable or bad file, or what load_bytes() throws; the object is then unchanged.
  void load(const std::filesystem::path& path);

  // ---- statistics and memory ----

  /// Counters summed over the groups; skipped_steps counts skipped backward() calls of
  /// this object (each once).
  CacheStats stats() const {
    CacheStats s;
    for (const auto& e : groups_) s += e.stats();
    s.skipped_steps = groups_[0].stats().skipped_steps;  // counted once, in group 0 (see backward())
    return s;
  }
  /// Zeroes every group's counters.
  void reset_stats() {
    for (auto& e : groups_) e.reset_stats();
  }
  /// Bytes as allocated, summed over the groups, plus this object's table layout
  /// (metadata_bytes) and split buffers (workspace_bytes).
  MemoryFootprint memory() const {
    MemoryFootprint m;
    for (const auto& e : groups_) m += e.memory();
    m.metadata_bytes += layout_.bytes() + meta_.bytes();
    for (const auto& b : batches_) m.workspace_bytes += b.bytes();
    m.workspace_bytes += scratch_.dev.bytes();
    return m;
  }

  // ---- introspection ----

  /// The configuration given to the constructor.
  const MixedDimConfig& config() const { return config_; }
  /// T, the number of tables.
  std::int64_t num_tables() const { return layout_.T(); }
  /// sum of D_t: the width of an output row.
  std::int64_t total_dim() const { return layout_.total_dim; }
  /// D of table t. Throws std::invalid_argument for t outside [0, T).
  std::int32_t dim(std::int64_t t) const {
    return static_cast<std::int32_t>(layout_.dims[table_index("dim", t)]);
  }
  /// First output column of table t (D_0 + ... + D_{t-1}).
  std::int64_t column(std::int64_t t) const { return layout_.column[table_index("column", t)]; }
  /// Completed backward() calls (each group's step()).
  std::uint64_t step() const { return groups_[0].step(); }
  /// Number of D-groups (distinct D values).
  std::size_t num_groups() const { return groups_.size(); }
  /// D of group g (elements per row). Throws std::out_of_range for g >= num_groups().
  std::int32_t group_dim(std::size_t g) const { return layout_.group_dim.at(g); }
  /// Tables of group g, in spec order (their local indices in the group are 0, 1, ...).
  /// Throws std::out_of_range for g >= num_groups().
  const std::vector<std::int64_t>& group_tables(std::size_t g) const { return layout_.group_tables.at(g); }
  /// {group index, t's table index inside that group} for table t (e.g. for
  /// io::export_table(group(g), local, ...)). Throws std::invalid_argument for t outside [0, T).
  std::pair<std::size_t, std::int64_t> locate(std::int64_t t) const {
    const std::size_t i = table_index("locate", t);
    return {static_cast<std::size_t>(layout_.group_of[i]), layout_.local[i]};
  }
  /// Group g's CachedEmbedding (for its own introspection, export and import; host memory,
  /// valid until this object is moved, loaded or destroyed). Throws std::out_of_range for
  /// g >= num_groups().
  group_type& group(std::size_t g) { return groups_.at(g); }
  /// Group g's CachedEmbedding (as above, read-only).
  const group_type& group(std::size_t g) const { return groups_.at(g); }

 private:
  /// Where a group's share of a batch lives: host vectors, or backend buffers.
  using batch_type =
      std::conditional_t<Backend::device_spans, detail::MixedDeviceBatch<Backend>, detail::GroupBatch>;
  using scratch_type = detail::MixedScratch<Backend>;

  static constexpr char kMagic[8] = {'M', 'P', 'E', 'M', 'I', 'X', 'D', '1'};
  static constexpr std::uint32_t kVersion = 1;

  [[noreturn]] static void invalid(const char* fn, const std::string& what) {
    throw std::invalid_argument(detail::md_prefix(fn) + what);
  }

  // Validates `config` (std::invalid_argument prefixed with mpe::MixedDimEmbedding::`fn`) and
  // groups its tables by D (see the class comment).
  static detail::MixedLayout make_layout(const MixedDimConfig& config, const char* fn);

  EmbeddingConfig group_config(std::size_t g) const { return group_config(config_, layout_, g); }
  // Group g's EmbeddingConfig as the constructor builds it (also planned_memory's).
  static EmbeddingConfig group_config(const MixedDimConfig& config, const detail::MixedLayout& layout,
                                      std::size_t g);

  std::size_t table_index(const char* fn, std::int64_t t) const;

  void check_table(const char* fn, std::int64_t t, std::int64_t first_row, std::size_t n) const;

  group_type& group_of_table(std::int64_t t) {
    return groups_[static_cast<std::size_t>(layout_.group_of[static_cast<std::size_t>(t)])];
  }
  std::int64_t global_row(std::int64_t t, std::int64_t row) const {
    const auto i = static_cast<std::size_t>(t);
    return groups_[static_cast<std::size_t>(layout_.group_of[i])].table_offset(layout_.local[i]) + row;
  }

  std::string tables_of(std::size_t g) const {
    std::string s = "{";
    for (std::int64_t t : layout_.group_tables[g]) s += (s.size() > 1 ? ", " : "") + std::to_string(t);
    return s + "}";
  }

  /// `training`: a forward (NonFinite::Skip lets its non-finite weights through to the
  /// step's skip); forward_inference refuses them whatever non_finite says, as each group
  /// does, so here in the caller's numbering.
  std::int64_t check(const char* fn, std::span<const std::int64_t> indices,
                     std::span<const std::int64_t> offsets, std::size_t output_size, Pooling pooling,
                     std::span<const float> w, bool training, scratch_type& s) const;

  /// Elements of group g's buffer: (B, k_g * D_g).
  std::size_t group_elements(std::size_t g, std::int64_t B) const {
    return static_cast<std::size_t>(B) * layout_.group_tables[g].size() *
           static_cast<std::size_t>(layout_.group_dim[g]);
  }

  batch_type new_batch() const {
    if constexpr (Backend::device_spans) {
      return batch_type(backend_);
    } else {
      return batch_type{};
    }
  }
  scratch_type new_scratch() const {
    if constexpr (Backend::device_spans) {
      if (groups_.size() > 1) return scratch_type(backend_, layout_.T());
    }
    return scratch_type{};
  }

  /// The whole batch's check (several groups), with messages in the caller's numbering;
  /// returns B. Host spans: detail::check_mixed_batch. Backend spans: one backend pass and
  /// one wait (the fault count and table boundaries into `s`); a fault is named by
  /// detail::check_mixed_batch on a host copy. Throws std::invalid_argument.
  std::int64_t check_batch(const char* fn, std::span<const std::int64_t> indices,
                           std::span<const std::int64_t> offsets, std::span<const float> w,
                           bool weights_finite_required, scratch_type& s) const;
  /// Copies the batch to the host and throws check_mixed_batch's error for it.
  [[noreturn]] void name_batch_fault(const char* fn, std::span<const std::int64_t> indices,
                                     std::span<const std::int64_t> offsets, std::span<const float> w,
                                     bool weights_finite_required) const;
  /// Group g's share of a checked batch into `b` (queued on the backend for backend spans).
  void split(std::size_t g, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
             std::span<const float> w, std::int64_t B, const scratch_type& s, batch_type& b) const;
  /// Group g's (B, k*D_g) buffer into its tables' columns of `output` (B, sum D_t).
  void scatter(std::size_t g, batch_type& b, std::span<float> output, std::int64_t B) const;
  /// Group g's tables' columns of grad_output (B, sum D_t) into b's (B, k*D_g) buffer.
  void gather(std::size_t g, std::span<const float> grad_output, std::int64_t B, batch_type& b) const;
  /// Throws std::invalid_argument naming grad_output's first non-finite element.
  void check_grad_finite(std::span<const float> grad_output);
  /// Group g's first position in the flat table list (detail::MixedMeta::flat).
  std::size_t flat_first(std::size_t g) const {
    std::size_t f = 0;
    for (std::size_t h = 0; h < g; ++h) f += layout_.group_tables[h].size();
    return f;
  }
  /// detail::MixedMeta's arrays as uploaded (3T + G + 1 values), in bytes.
  static std::size_t device_layout_bytes(const detail::MixedLayout& L) {
    return (3 * static_cast<std::size_t>(L.T()) + L.G() + 1) * sizeof(index_t);
  }
  /// The table layout in backend memory (backend spans, several groups).
  detail::MixedMeta device_layout() const;
  /// Uploads the table layout (backend spans, several groups; once, by the constructor).
  void upload_layout();

  /// Runs `run(g, indices, offsets, out, weights)` for every group on its share of a
  /// checked batch and scatters its out into `output`'s columns; group g uses
  /// bufs[g * buf_step] (buf_step 0: one buffer for all). One group: the caller's spans.
  template <class Run>
  void each_group(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                  std::span<float> output, std::span<const float> w, std::int64_t B, const scratch_type& s,
                  batch_type* bufs, std::size_t buf_step, Run&& run) const;

  MixedDimConfig config_;
  detail::MixedLayout layout_;
  Backend backend_;  // each group's copy is made from it (load_bytes builds fresh groups)
  std::vector<group_type> groups_;
  std::vector<batch_type> batches_;  // per group: split batch and column buffer
  // Backend spans, several groups: the table layout in backend memory (detail::MixedMeta)
  // and the verdict of the last prefetch / forward / backward check.
  detail::Buffer<index_t, Backend> meta_;
  scratch_type scratch_;
  bool pending_ = false;
  std::int64_t pending_B_ = 0;
};

}  // namespace mpe

// The member bodies, by concern (detail/embedding/mixed_dim.hpp holds the plumbing they share).
// Each is declared `inline`, as a body written inside the class is, so the compiler treats
// them as in-class definitions.
// clang-format off
#include "mpe/detail/embedding/mixed_dim_setup.inl"
#include "mpe/detail/embedding/mixed_dim_train.inl"
#include "mpe/detail/embedding/mixed_dim_weights.inl"
#include "mpe/detail/embedding/mixed_dim_checkpoint.inl"
#include "mpe/detail/embedding/mixed_dim_device.inl"
// clang-format on
