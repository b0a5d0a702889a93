// SPDX-License-Identifier: Apache-2.0
/// @file mpe/sharded/sharded_embedding.hpp
/// @brief `mpe::sharded::ShardedEmbedding`: table-batched embedding bags sharded over the
/// ranks of a Communicator (MpiComm, NcclComm), one local CachedEmbedding per local
/// dimension on each rank. Data-parallel input, model-parallel tables.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpe/core/types.hpp"
#include "mpe/embedding/cached_embedding.hpp"
#include "mpe/io/checkpoint.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/sharded/comm.hpp"
#include "mpe/sharded/plan.hpp"

namespace mpe::sharded {

/// Wire format of pooled vectors and their gradients in the all-to-alls.
enum class CommPrecision {
  Fp32,  ///< exact (default)
  Fp16,  ///< IEEE half, rounded with the embedding's Rounding policy, saturating at +-65504
  Bf16,  ///< bfloat16, rounded with the embedding's Rounding policy
};

/// The precision's name: "fp32", "fp16" or "bf16" (what comm_precision_from_string reads).
inline const char* to_string(CommPrecision p) {
  return p == CommPrecision::Fp32 ? "fp32" : p == CommPrecision::Fp16 ? "fp16" : "bf16";
}

/// The CommPrecision named "fp32", "fp16" or "bf16" (train_dlrm's `--comm-precision`).
/// Throws std::invalid_argument naming `name` for any other string.
inline CommPrecision comm_precision_from_string(std::string_view name) {
  if (name == "fp32") return CommPrecision::Fp32;
  if (name == "fp16") return CommPrecision::Fp16;
  if (name == "bf16") return CommPrecision::Bf16;
  throw std::invalid_argument("comm_precision_from_string: name = \"" + std::string(name) +
                              "\" is not a precision (fp32, fp16 or bf16)");
}

/// Options of a ShardedEmbedding beyond the (global) EmbeddingConfig.
struct ShardOptions {
  CommPrecision precision = CommPrecision::Fp32;  ///< pooled vectors and output gradients on the wire
};

/// Bytes this rank sent to other ranks in all-to-alls (self-sends excluded), cumulative.
struct CommStats {
  std::uint64_t index_bytes = 0;   ///< indices, bag lengths, per-sample weights, headers
  std::uint64_t vector_bytes = 0;  ///< pooled vectors (forward) and their gradients (backward)
  std::uint64_t calls = 0;         ///< all-to-all calls
  /// All bytes sent: index_bytes + vector_bytes.
  std::uint64_t total() const { return index_bytes + vector_bytes; }
};

/// T tables of dim D sharded over the ranks of `comm` by a ShardingPlan.
///
/// Every call except the introspection members and the local ones (flush(), stats(),
/// reset_stats(), comm_stats(), memory()) is **collective**: all ranks call it in the same
/// order. Each rank passes its own local batch: B_local samples (may differ per
/// rank) of all T tables in the usual CSR (offsets T*B_local + 1, table-major, row ids
/// local to their table), and receives its own (B_local, T*D) FP32 output. The global
/// batch is the concatenation of the ranks' local batches in rank order.
///
/// Forward: the indices (and per-sample weights) of every bag are sent to the owners of
/// the table's rows/columns (MPI_Alltoallv or ncclSend/ncclRecv), each owner pools its
/// pieces for all samples of the global batch in (rank, sample) order with its local
/// CachedEmbedding (always Sum pooling), and the pooled vectors come back. The requester
/// writes table- and column-wise vectors as they are and adds row-wise partial sums
/// starting from 0 in rank order 0..N-1; Mean pooling then multiplies by 1.0f / L (the
/// global bag length), as the single-process pooling does. Backward: the output gradient
/// (times 1/L for Mean) goes back to the owners, which apply their fused optimizer step.
///
/// Numerics against one CachedEmbedding over all tables with the global batch (same
/// seed, Fp32 store, or a store with NearestRounding and no cache; column shards of
/// Int8/Int4 rows have their own scale and bias, so column-wise needs a per-element store):
/// - table-wise: outputs, weights and optimizer state are bit-identical (SGD and
///   RowwiseAdagrad): the owner sees every occurrence in global position order.
/// - row-wise: updates are bit-identical given the same output gradients; a pooled output
///   is bit-identical when all its bag's rows live on one rank, else it differs from
///   index-order summation by float reassociation: |error| <= (L - 1) * 2^-24 * sum|x|.
/// - column-wise: SGD is bit-identical. RowwiseAdagrad's mean over D is taken per shard
///   (each column shard keeps its own accumulator G over its own columns: TorchRec's
///   rule for column-wise sharding), so it equals single-process training only for D
///   owned by one rank.
/// - one rounding stream per row of a table, sharded or not: every local table keys its
///   rows by their row in the global table set (EmbeddingConfig::row_keys: the table's
///   first row there, or config.row_keys[t], plus the piece's first row) and its columns by
///   their column in the full row (EmbeddingConfig::column_keys: config.column_keys[t] plus
///   the piece's first column), so a row is rounded (every store write, site by site) and
///   initialized (init_uniform(), site Init) with the single process's Philox words. With no
///   cache (cache_rows = 0) table- and row-wise plans therefore give one process's bits for
///   every store and rounding (outputs within the row-wise bound above, weights, optimizer
///   state, statistics summed over the ranks). A column piece holds its own scale and bias
///   (quantized stores), and one that does not start at a multiple of 4 columns cannot take
///   the full row's element groups (its column key is 0); a cache per rank decides which
///   rows train in FP32 and when they are rounded into the store from that rank's own
///   lookups: none of these matches the single process's stochastic bits.
///
/// Errors: every rank validates its own input, then all ranks agree (one MPI_Allreduce
/// and, on failure, one broadcast) before anything changes or moves: an invalid index,
/// offset, weight or gradient on any rank makes every rank throw the same
/// std::invalid_argument ("forward: rank 1: indices[3] = 99 is outside table 0 (..)")
/// with no state changed anywhere (under EmbeddingConfig::defer_admission a local table's
/// pending admission is not state of the failed call: it belongs to the earlier forward()
/// and runs at that table's next forward(), prefetch() or successful backward(), as the
/// local CachedEmbedding documents, so the bits equal those without the setting); misuse (backward without
/// forward, ranks calling different operations, disagreeing pooling) throws std::logic_error on every rank.
/// NonFinite::Skip and Validation::Deferred are not supported (std::invalid_argument).
/// Not covered by the agreement: failures of resources after it (std::bad_alloc, an MPI or
/// NCCL error in the exchange itself) throw on the failing rank only; the others may then
/// wait in the next collective (end the job, e.g. MPI_Abort, as for any MPI program).
///
/// Synchronization: every collective call blocks until this rank's part is done (the
/// communicator's calls are blocking: MPI_Alltoallv, or NcclComm's staged exchange, which
/// synchronizes its stream); nothing is left in flight when a call returns. Per call:
/// forward/forward_inference 1 allreduce + 3 all-to-alls (+1 with per-sample weights),
/// backward 1 allreduce + 1 all-to-all, prefetch 1 allreduce + 2 all-to-alls.
///
/// Memory space: host (HostBackend); all spans are host memory. Not thread-safe.
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm,
          class Backend = HostBackend>
class ShardedEmbedding {
  static_assert(std::is_same_v<Backend, HostBackend>,
                "ShardedEmbedding routes batches on the host: only HostBackend is supported so far");

 public:
  /// One local table of this rank: a CachedEmbedding holding the pieces of one local dim.
  using local_type = CachedEmbedding<Storage, Cache, Rounding, Backend>;

  /// `config` describes the global tables (table_rows, dim) and is applied to every local
  /// table (seed, row_alignment); cache_rows is global and split over the local tables in
  /// proportion to their rows (rounded up, at least Cache::ways when > 0). `plan` must match
  /// config (tables, rows, dim) and comm.size(). Collective: throws the same
  /// std::invalid_argument on every rank if any rank's arguments are wrong.
  ShardedEmbedding(const EmbeddingConfig& config, ShardingPlan plan, Comm& comm, ShardOptions options = {});

  // ---- training and evaluation (collective) ----

  /// Routes this rank's batch to the owners and populates their caches for the next
  /// forward() of the same batch (the indices travel again with forward()).
  void prefetch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets);

  /// Pooled lookup for training. indices/offsets/per_sample_weights: this rank's batch as
  /// CachedEmbedding::forward takes it; output: (B_local, T*D) FP32. Remembers the batch
  /// for backward(). Throws (on every rank, nothing changed) as the class documents.
  void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
               std::span<float> output, Pooling pooling = Pooling::Sum,
               std::span<const float> per_sample_weights = {});

  /// Like forward() but changes nothing (forward_inference on every owner): for evaluation.
  void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                         std::span<float> output, Pooling pooling = Pooling::Sum,
                         std::span<const float> per_sample_weights = {}) const;

  /// Sends grad_output ((B_local, T*D) FP32) to the owners, each applies `optimizer` (any
  /// mpe::Optimizer) to its rows for the last forward(). Throws std::logic_error on every
  /// rank without a pending forward or for a changed optimizer; std::invalid_argument for a
  /// wrong size, a non-finite gradient or optimizer parameter on any rank. A finite
  /// gradient that overflows inside an owner's step (CachedEmbedding::backward) is found
  /// only there, after the exchange: that owner throws (or skips) alone and the others
  /// apply their rows (not agreed across ranks).
  template <Optimizer Opt>
  void backward(std::span<const float> grad_output, const Opt& optimizer);

  // ---- weights (collective) ----

  /// Replaces global rows [first_row, first_row + weights.size() / D) ((rows, D) FP32,
  /// host). Every rank passes the same weights; each writes the part it owns (quantized
  /// with Rounding at site SetWeights, cache lines dropped). Throws std::invalid_argument
  /// on every rank (nothing changed) for a bad size or range, or a value that is not
  /// finite or beyond Storage::limit.
  void set_weights(std::span<const float> weights, std::int64_t first_row = 0);

  /// Writes global rows [first_row, first_row + out.size() / D) into `out` ((rows, D)
  /// FP32, host) on every rank: each rank reads the rows and columns it owns (through its
  /// cache) and they are exchanged with one all-to-all. Throws like set_weights.
  void get_weights(std::span<float> out, std::int64_t first_row = 0) const;

  /// Initializes every row uniformly in [low, high) as a single CachedEmbedding with the
  /// same seed does: each local table's init_uniform(), keyed by its pieces' row and column
  /// keys, so a table- or row-wise piece (and a column piece starting at a multiple of 4
  /// columns) draws and stores (Rounding, site Init) exactly the single process's bits for
  /// every store. A column piece starting elsewhere gets the single process's FP32 draw of
  /// its columns (the full row drawn by its row key), stored with set_weights() (Rounding,
  /// site SetWeights). Throws std::invalid_argument like CachedEmbedding::init_uniform, on
  /// every rank (nothing changed).
  void init_uniform(float low, float high);

  /// Writes every local dirty cache row back (local, no communication).
  void flush() {
    for (auto& l : locals_) l->flush();
  }

  // ---- statistics and memory ----

  /// This rank's counters: the sum over its local tables (local, no communication).
  CacheStats stats() const {
    CacheStats s;
    for (const auto& l : locals_) s += l->stats();
    return s;
  }
  /// The counters summed over all ranks (collective: one MPI_Allreduce).
  CacheStats stats_reduced() const;
  /// Zeroes this rank's counters (every local table's CacheStats and comm_stats()); local,
  /// no communication: call it on every rank for consistent stats_reduced().
  void reset_stats() {
    for (auto& l : locals_) l->reset_stats();
    comm_stats_ = {};
  }
  /// Bytes this rank sent in all-to-alls since construction or reset_stats().
  CommStats comm_stats() const { return comm_stats_; }
  /// This rank's allocation (sum over its local tables; local).
  MemoryFootprint memory() const {
    MemoryFootprint m;
    for (const auto& l : locals_) m += l->memory();
    return m;
  }
  /// Every rank's memory() on every rank, indexed by rank (collective: one all-to-all).
  std::vector<MemoryFootprint> memory_per_rank() const;

  // ---- checkpoints (collective) ----

  /// Saves into directory `dir` (created if missing; shared by all ranks): the ranks agree
  /// on a shard name unused in `dir`, `step<S>.save<k>` (k one more than the largest save
  /// number of step S any rank sees there), every rank saves each local table with
  /// CachedEmbedding::save (atomic) as `step<S>.save<k>.rank<r>.group<g>.mpe`, then, once
  /// every rank succeeded, rank 0 writes the manifest `plan.txt` (the plan, policies, comm
  /// precision, step S, optimizer, exchange counter, shard name) atomically: the manifest's
  /// rename is the commit point, and no file the committed manifest names is written
  /// before it, so a crash or a failure on any rank leaves the previous checkpoint loadable
  /// exactly as it was. Throws std::runtime_error on every rank if any rank failed (the
  /// previous manifest stays; the failed attempt's shard files are left behind, unnamed by
  /// any manifest). Files of earlier saves are not removed.
  void save(const std::filesystem::path& dir) const;

  /// Loads a checkpoint written by save() with the same plan and rank count (no
  /// re-sharding: a different plan or world size is a checkpoint_error). Every rank reads
  /// the manifest and its own shard files into new local tables; only when every rank
  /// succeeded are they swapped in, with the manifest's step, optimizer (the one backward()
  /// must continue with, on every rank, tables or not) and exchange counter (the stream of
  /// FP16/BF16 communication's stochastic rounding), so training resumes bit for bit.
  /// Throws mpe::checkpoint_error on every rank (nothing changed anywhere) if the manifest
  /// or any shard fails verification, its comm precision is not options().precision, or
  /// its step is 2^64 - 1 (no further step can be counted).
  void load(const std::filesystem::path& dir);

  /// The options given to the constructor.
  const ShardOptions& options() const { return options_; }

  // ---- introspection (local) ----
  /// The sharding plan given to the constructor.
  const ShardingPlan& plan() const { return plan_; }
  /// The global configuration given to the constructor (cache_rows is the global total).
  const EmbeddingConfig& config() const { return config_; }
  /// This process's rank in [0, size()), the communicator's.
  int rank() const { return comm_->rank(); }
  /// Number of ranks, the communicator's (= plan().world_size).
  int size() const { return comm_->size(); }
  /// T, the number of global tables.
  std::int64_t num_tables() const { return T(); }
  /// D, the global dim (column-wise pieces hold fewer columns).
  std::int32_t dim() const { return config_.dim; }
  /// Rows of all global tables together.
  std::int64_t total_rows() const { return table_off_.back(); }
  /// Completed backward() calls.
  std::uint64_t step() const { return steps_; }
  /// This rank's local tables (one per distinct local dim), and what they hold.
  std::size_t num_local_tables() const { return locals_.size(); }
  /// Local table i in [0, num_local_tables()), local tables in increasing dim order; the
  /// reference is valid until load() (which replaces the local tables). Throws
  /// std::out_of_range for another i.
  const local_type& local(std::size_t i) const { return *locals_.at(i); }
  /// The pieces local table i holds, in table order: piece k is the local table's table k
  /// (its rows in local row order). Throws std::out_of_range for i >= num_local_tables().
  const std::vector<Piece>& local_pieces(std::size_t i) const { return my_groups().at(i).pieces; }

 private:
  struct Group {
    std::int32_t dim = 0;
    std::vector<Piece> pieces;            // table order
    std::vector<std::int64_t> first_row;  // local first row of each piece (+ total)
  };
  enum Kind : std::int64_t {
    kConstruct = 1,
    kPrefetch,
    kForward,
    kInference,
    kBackward,
    kSetWeights,
    kGetWeights,
    kInit,
    kSave,
    kLoad
  };
  enum class Mode { Prefetch, Train, Inference };
  struct Forwarded {
    bool valid = false;
    std::int64_t B = 0;
    bool mean = false;
    std::vector<float> inv_len;      // (T*B) 1/L of each bag (0 for an empty bag), mean only
    std::vector<std::int64_t> B_of;  // B_local of each rank (as seen by the owners)
  };

  std::int64_t T() const { return static_cast<std::int64_t>(config_.table_rows.size()); }
  /// The row that global table t's row 0 is in the rounding streams: config.row_keys[t], or
  /// the table's first row in the table set (the single process's global row).
  std::int64_t row_key(std::int64_t t) const {
    const auto i = static_cast<std::size_t>(t);
    return config_.row_keys.empty() ? table_off_[i] : config_.row_keys[i];
  }
  /// The column of the full row that piece p's column 0 is (config.column_keys[t] + its
  /// first column).
  std::int64_t column_key(const Piece& p) const {
    const auto i = static_cast<std::size_t>(p.table);
    return (config_.column_keys.empty() ? 0 : config_.column_keys[i]) + p.col_begin;
  }
  /// Whether p's column key is one EmbeddingConfig::column_keys can hold (a multiple of 4:
  /// whole element groups); every piece of a table- or row-wise table is.
  bool keyed_columns(const Piece& p) const { return column_key(p) % 4 == 0; }
  std::int32_t D() const { return config_.dim; }
  std::string rank_str() const { return std::to_string(rank()); }
  const std::vector<Group>& my_groups() const { return layouts_[static_cast<std::size_t>(rank())]; }
  static std::int64_t sum(const std::vector<std::int64_t>& v) {
    std::int64_t s = 0;
    for (auto x : v) s += x;
    return s;
  }
  static std::string format_float(float x) { return mpe::format_float(x); }
  static std::string shard_file(const std::string& prefix, int r, std::size_t g) {
    return prefix + ".rank" + std::to_string(r) + ".group" + std::to_string(g) + ".mpe";
  }
  /// 1 + the largest k of the files `step<step>.save<k>.*` in dir (1 if none): a shard name
  /// no earlier save at this step used, so none of a committed checkpoint's files is written.
  static std::int64_t next_save_number(const std::filesystem::path& dir, std::uint64_t step);
  std::string manifest_text(const std::string& shards) const;
  /// A manifest's contents. Version 1 (no optimizer, exchanges, shards lines) names its
  /// shards `step<S>` and has no optimizer (taken from the first backward) and counter 0.
  struct Manifest {
    std::uint64_t step = 0;
    std::string precision, optimizer, shards;
    std::uint64_t exchanges = 0;
    ShardingPlan plan;
  };
  // Defined here rather than in detail/sharded/checkpoint.inl: nvcc 13.0's front end repeats the
  // class's default template argument (Backend = HostBackend) on an out-of-class definition whose
  // body holds a template lambda (KnownOptimizers::visit's), which the host compiler rejects.
  static Manifest parse_manifest(const std::string& text) {
    const auto split = text.find("mpe-sharding-plan");
    int version = 0;
    if (text.rfind("mpe-sharded-checkpoint v1\n", 0) == 0) version = 1;
    if (text.rfind("mpe-sharded-checkpoint v2\n", 0) == 0) version = 2;
    if (version == 0 || split == std::string::npos) throw checkpoint_error("not an mpe sharded manifest");
    const std::size_t head = text.find('\n') + 1;
    std::istringstream meta(text.substr(head, split - head));
    std::map<std::string, std::string> kv;
    for (std::string line; std::getline(meta, line);) {
      const auto sp = line.find(' ');
      if (sp == std::string::npos || !kv.emplace(line.substr(0, sp), line.substr(sp + 1)).second)
        throw checkpoint_error("manifest: malformed line '" + line + "'");
    }
    auto get = [&](const char* key) -> std::string {
      const auto it = kv.find(key);
      if (it == kv.end()) throw checkpoint_error(std::string("manifest: no '") + key + "' line");
      return it->second;
    };
    auto number = [&](const char* key) {
      const std::string v = get(key);
      std::uint64_t x = 0;
      bool ok = !v.empty() && v.size() <= 20;
      for (const char ch : v) ok = ok && ch >= '0' && ch <= '9';
      if (ok) {
        errno = 0;
        x = std::strtoull(v.c_str(), nullptr, 10);
        ok = errno == 0;
      }
      if (!ok) throw checkpoint_error(std::string("manifest: ") + key + " '" + v + "' is not a 64-bit count");
      return x;
    };
    Manifest m;
    m.step = number("step");
    if (m.step == ~std::uint64_t{0})
      throw checkpoint_error("manifest: step = " + std::to_string(m.step) +
                             " cannot be continued (the next backward() would wrap the step counter)");
    const std::string storage = get("storage"), cache = get("cache"), rounding = get("rounding");
    if (storage != Storage::name || cache != Cache::name || rounding != Rounding::name)
      throw checkpoint_error("manifest policies " + storage + "/" + cache + "/" + rounding + " differ from " +
                             Storage::name + "/" + Cache::name + "/" + Rounding::name);
    m.precision = get("comm_precision");
    if (version >= 2) {
      m.optimizer = get("optimizer");
      if (m.optimizer == "none")
        m.optimizer.clear();
      else if (!KnownOptimizers::visit(m.optimizer, []<class>() {}))
        throw checkpoint_error("manifest: optimizer '" + m.optimizer +
                               "' is not an optimizer this build knows");
      m.exchanges = number("exchanges");
      m.shards = get("shards");
      if (m.shards.rfind("step" + std::to_string(m.step) + ".save", 0) != 0 ||
          m.shards.find_first_of("/\\") != std::string::npos)
        throw checkpoint_error("manifest: shards '" + m.shards + "' is not a shard name of step " +
                               std::to_string(m.step));
    } else {
      m.shards = "step" + std::to_string(m.step);
    }
    try {
      m.plan = ShardingPlan::parse(text.substr(split));
    } catch (const std::exception& e) {
      throw checkpoint_error(std::string("manifest: ") + e.what());
    }
    return m;
  }

  /// The agreement step every collective call starts with. `local_error` empty = this
  /// rank is fine; a leading 'L' marks a logic_error, 'C' a checkpoint_error. One
  /// MPI_Allreduce(max) of {lowest failing rank, call kind, params}; on failure the lowest
  /// failing rank broadcasts its message and every rank throws it.
  void agree(std::int64_t kind, std::string local_error, std::vector<std::int64_t> params = {},
             bool runtime = false);

  /// This rank's validation of its batch (empty = valid), in CachedEmbedding's words.
  std::string check_batch(const char* fn, std::span<const std::int64_t> indices,
                          std::span<const std::int64_t> offsets, std::span<const float> w, Pooling pooling,
                          const std::span<float>* output) const;

  std::string check_rows(const char* fn, std::size_t size, std::int64_t first_row) const;

  std::int64_t local_row(std::size_t gi, std::size_t pi, const Piece& p, std::int64_t global) const {
    return my_groups()[gi].first_row[pi] +
           (global - table_off_[static_cast<std::size_t>(p.table)] - p.row_begin);
  }
  /// Calls fn(group, piece, piece index, first global row, row count) for each piece of
  /// rank r intersecting global rows [first, first + count), groups then pieces in order.
  template <class F>
  void for_fragments(int r, std::int64_t first, std::int64_t count, F&& fn) const {
    const auto& groups = layouts_[static_cast<std::size_t>(r)];
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      for (std::size_t pi = 0; pi < groups[gi].pieces.size(); ++pi) {
        const Piece& p = groups[gi].pieces[pi];
        const std::int64_t base = table_off_[static_cast<std::size_t>(p.table)];
        const std::int64_t a = std::max(first, base + p.row_begin),
                           b = std::min(first + count, base + p.row_end);
        if (a < b) fn(gi, p, pi, a, b - a);
      }
  }
  template <class F>
  void for_my_fragments(std::int64_t first, std::int64_t count, F&& fn) const {
    for_fragments(rank(), first, count, std::forward<F>(fn));
  }

  /// Counts messages in bytes (self excluded) and runs the all-to-all.
  template <class V>
  void a2a(std::span<const V> send, const std::vector<std::int64_t>& sc, std::span<V> recv,
           const std::vector<std::int64_t>& rc, bool vectors);

  /// All-to-all of FP32 vectors, on the wire in options_.precision.
  void a2a_vectors(const std::vector<float>& send, const std::vector<std::int64_t>& sc,
                   std::vector<float>& recv, const std::vector<std::int64_t>& rc);

  bool takes(const Piece& p, std::int64_t idx) const {
    return p.kind != ShardKind::Row || (idx >= p.row_begin && idx < p.row_end);
  }

  /// Forward / inference / prefetch after agreement: route indices to the owners, pool
  /// locally, route the vectors back (not for prefetch) and assemble `output`.
  void exchange_batch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                      std::span<const float> w, Pooling pooling, std::span<float> output, Mode mode);

  template <class Optimizer>
  void exchange_grad(std::span<const float> grad, const Optimizer& opt);

  EmbeddingConfig config_;
  ShardingPlan plan_;
  Comm* comm_;
  ShardOptions options_;
  std::vector<std::int64_t> table_off_;      // (T + 1) global first rows
  std::vector<std::vector<Group>> layouts_;  // every rank's local tables
  std::vector<std::unique_ptr<local_type>> locals_;
  Forwarded fwd_;
  std::string opt_name_;  // OptimizerRule::name of the optimizer in use (empty: none yet)
  std::uint64_t steps_ = 0;
  mutable std::uint64_t exchanges_ = 0;
  mutable CommStats comm_stats_;
};

}  // namespace mpe::sharded

// The member bodies, by concern (detail/sharded/setup.inl holds the agreement step the others
// use). Each is declared `inline`, as a body written inside the class is, so the compiler
// treats them as in-class definitions.
// clang-format off
#include "mpe/detail/sharded/setup.inl"
#include "mpe/detail/sharded/exchange.inl"
#include "mpe/detail/sharded/weights.inl"
#include "mpe/detail/sharded/checkpoint.inl"
// clang-format on
