// SPDX-License-Identifier: Apache-2.0
/// @file mpe/sharded/sharded_embedding.hpp
/// @brief `mpe::sharded::ShardedEmbedding`: table-batched embedding bags sharded over the
/// ranks of a Communicator (MpiComm, NcclComm), one local CachedEmbedding per local
/// dimension on each rank. Data-parallel input, model-parallel tables.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "mpe/embedding/cached_embedding.hpp"
#include "mpe/sharded/comm.hpp"
#include "mpe/sharded/plan.hpp"
#include "mpe/io/checkpoint.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/core/types.hpp"

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
  ShardedEmbedding(const EmbeddingConfig& config, ShardingPlan plan, Comm& comm, ShardOptions options = {})
      : config_(config), plan_(std::move(plan)), comm_(&comm), options_(options) {
    std::string err;
    try {
      plan_.validate();
      if (plan_.world_size != comm.size())
        throw std::invalid_argument("plan.world_size = " + std::to_string(plan_.world_size) +
                                    " but the communicator has " + std::to_string(comm.size()) + " ranks");
      if (plan_.table_rows != config.table_rows || plan_.dim != config.dim)
        throw std::invalid_argument("the plan's tables/dim do not match config.table_rows/config.dim");
      if (const std::string e = mpe::detail::stream_keys_error(config); !e.empty()) throw std::invalid_argument(e);
      if (config.non_finite != NonFinite::Throw || config.validation != Validation::Synchronous)
        throw std::invalid_argument("only NonFinite::Throw and Validation::Synchronous are supported");
    } catch (const std::exception& e) {
      err = "ShardedEmbedding: rank " + std::to_string(comm.rank()) + ": " + e.what();
    }
    agree(kConstruct, err);
    table_off_.assign(1, 0);
    for (auto r : config_.table_rows) table_off_.push_back(table_off_.back() + r);
    layouts_.resize(static_cast<std::size_t>(comm.size()));
    for (int r = 0; r < comm.size(); ++r) {
      std::map<std::int32_t, Group> by_dim;
      for (const Piece& p : plan_.pieces_of(r)) by_dim[p.cols()].pieces.push_back(p);
      for (auto& [d, g] : by_dim) {
        g.dim = d;
        g.first_row.assign(1, 0);
        for (const Piece& p : g.pieces) g.first_row.push_back(g.first_row.back() + p.rows());
        layouts_[static_cast<std::size_t>(r)].push_back(std::move(g));
      }
    }
    for (const Group& g : my_groups()) {
      EmbeddingConfig c = config_;
      c.dim = g.dim;
      c.table_rows.clear();
      c.row_keys.clear();
      c.column_keys.clear();
      for (const Piece& p : g.pieces) {
        c.table_rows.push_back(p.rows());
        // Rounding streams keyed by the row and column in the global tables: one process's bits.
        c.row_keys.push_back(row_key(p.table) + p.row_begin);
        c.column_keys.push_back(keyed_columns(p) ? column_key(p) : 0);
      }
      c.cache_rows = 0;
      if (config_.cache_rows > 0) {
        const double share = static_cast<double>(config_.cache_rows) *
                             static_cast<double>(g.first_row.back()) / static_cast<double>(table_off_.back());
        c.cache_rows = std::max<std::int64_t>(static_cast<std::int64_t>(std::ceil(share)), Cache::ways);
      }
      locals_.push_back(std::make_unique<local_type>(c));
    }
  }

  // ---- training and evaluation (collective) ----

  /// Routes this rank's batch to the owners and populates their caches for the next
  /// forward() of the same batch (the indices travel again with forward()).
  void prefetch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
    agree(kPrefetch, check_batch("prefetch", indices, offsets, {}, Pooling::Sum, nullptr), {0, 0});
    exchange_batch(indices, offsets, {}, Pooling::Sum, {}, Mode::Prefetch);
  }

  /// Pooled lookup for training. indices/offsets/per_sample_weights: this rank's batch as
  /// CachedEmbedding::forward takes it; output: (B_local, T*D) FP32. Remembers the batch
  /// for backward(). Throws (on every rank, nothing changed) as the class documents.
  void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
               std::span<float> output, Pooling pooling = Pooling::Sum,
               std::span<const float> per_sample_weights = {}) {
    agree(kForward, check_batch("forward", indices, offsets, per_sample_weights, pooling, &output),
          {static_cast<std::int64_t>(pooling), per_sample_weights.empty() ? 0 : 1});
    exchange_batch(indices, offsets, per_sample_weights, pooling, output, Mode::Train);
  }

  /// Like forward() but changes nothing (forward_inference on every owner): for evaluation.
  void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                         std::span<float> output, Pooling pooling = Pooling::Sum,
                         std::span<const float> per_sample_weights = {}) const {
    auto* self = const_cast<ShardedEmbedding*>(this);  // the communicator is not const; the tables are
    self->agree(kInference,
                check_batch("forward_inference", indices, offsets, per_sample_weights, pooling, &output),
                {static_cast<std::int64_t>(pooling), per_sample_weights.empty() ? 0 : 1});
    self->exchange_batch(indices, offsets, per_sample_weights, pooling, output, Mode::Inference);
  }

  /// Sends grad_output ((B_local, T*D) FP32) to the owners, each applies `optimizer` (any
  /// mpe::Optimizer) to its rows for the last forward(). Throws std::logic_error on every
  /// rank without a pending forward or for a changed optimizer; std::invalid_argument for a
  /// wrong size, a non-finite gradient or optimizer parameter on any rank. A finite
  /// gradient that overflows inside an owner's step (CachedEmbedding::backward) is found
  /// only there, after the exchange: that owner throws (or skips) alone and the others
  /// apply their rows (not agreed across ranks).
  template <Optimizer Opt>
  void backward(std::span<const float> grad_output, const Opt& optimizer) {
    std::string err;
    const std::string name = OptimizerRule<Opt>::name;
    if (!fwd_.valid) {
      err = "Lbackward: rank " + rank_str() + ": no forward() awaiting backward()";
    } else if (!opt_name_.empty() && opt_name_ != name) {
      err = "Lbackward: rank " + rank_str() + ": optimizer changed from " + opt_name_ + " to " + name;
    } else if (const std::string oe = OptimizerRule<Opt>::check(optimizer); !oe.empty()) {
      err = "backward: rank " + rank_str() + ": " + oe;
    } else if (grad_output.size() != static_cast<std::size_t>(fwd_.B) * T() * D()) {
      err = "backward: rank " + rank_str() + ": grad_output.size() = " + std::to_string(grad_output.size()) +
            ", expected B*T*D = " + std::to_string(static_cast<std::size_t>(fwd_.B) * T() * D());
    } else {
      for (std::size_t i = 0; i < grad_output.size(); ++i)
        if (!num::is_finite(grad_output[i])) {
          err = "backward: rank " + rank_str() + ": grad_output[" + std::to_string(i) +
                "] = " + format_float(grad_output[i]) + " is not finite";
          break;
        }
    }
    std::uint64_t name_hash = 14695981039346656037ull;  // FNV-1a of the optimizer's name: ranks must agree
    for (const char ch : name) name_hash = (name_hash ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    agree(kBackward, err, {static_cast<std::int64_t>(name_hash >> 1)});
    exchange_grad(grad_output, optimizer);
  }

  // ---- weights (collective) ----

  /// Replaces global rows [first_row, first_row + weights.size() / D) ((rows, D) FP32,
  /// host). Every rank passes the same weights; each writes the part it owns (quantized
  /// with Rounding at site SetWeights, cache lines dropped). Throws std::invalid_argument
  /// on every rank (nothing changed) for a bad size or range, or a value that is not
  /// finite or beyond Storage::limit.
  void set_weights(std::span<const float> weights, std::int64_t first_row = 0) {
    std::string err = check_rows("set_weights", weights.size(), first_row);
    for (std::size_t i = 0; err.empty() && i < weights.size(); ++i)
      if (!num::is_finite(weights[i]) || weights[i] > Storage::limit || weights[i] < -Storage::limit)
        err = "set_weights: rank " + rank_str() + ": weights[" + std::to_string(i) +
              "] = " + format_float(weights[i]) + " is not finite or beyond the format's limit " +
              format_float(Storage::limit);
    agree(kSetWeights, err, {first_row, static_cast<std::int64_t>(weights.size())});
    const std::int64_t count = static_cast<std::int64_t>(weights.size()) / D();
    for_my_fragments(first_row, count,
                     [&](std::size_t gi, const Piece& p, std::size_t pi, std::int64_t g0, std::int64_t n) {
                       std::vector<float> buf(static_cast<std::size_t>(n) * p.cols());
                       for (std::int64_t i = 0; i < n; ++i)
                         std::copy_n(weights.data() + (g0 - first_row + i) * D() + p.col_begin, p.cols(),
                                     buf.data() + i * p.cols());
                       locals_[gi]->set_weights(buf, local_row(gi, pi, p, g0));
                     });
  }

  /// Writes global rows [first_row, first_row + out.size() / D) into `out` ((rows, D)
  /// FP32, host) on every rank: each rank reads the rows and columns it owns (through its
  /// cache) and they are exchanged with one all-to-all. Throws like set_weights.
  void get_weights(std::span<float> out, std::int64_t first_row = 0) const {
    auto* self = const_cast<ShardedEmbedding*>(this);
    self->agree(kGetWeights, check_rows("get_weights", out.size(), first_row),
                {first_row, static_cast<std::int64_t>(out.size())});
    const std::int64_t count = static_cast<std::int64_t>(out.size()) / D();
    std::vector<float> mine;
    for_my_fragments(first_row, count,
                     [&](std::size_t gi, const Piece& p, std::size_t pi, std::int64_t g0, std::int64_t n) {
                       const std::size_t at = mine.size();
                       mine.resize(at + static_cast<std::size_t>(n) * p.cols());
                       locals_[gi]->get_weights(std::span<float>(mine.data() + at, mine.size() - at),
                                                local_row(gi, pi, p, g0));
                     });
    const int N = size();
    std::vector<float> send;
    std::vector<std::int64_t> sc(static_cast<std::size_t>(N), static_cast<std::int64_t>(mine.size())),
        rc(sc.size());
    for (int r = 0; r < N; ++r) send.insert(send.end(), mine.begin(), mine.end());
    for (int d = 0; d < N; ++d) {
      std::int64_t n = 0;
      for_fragments(
          d, first_row, count,
          [&](std::size_t, const Piece& p, std::size_t, std::int64_t, std::int64_t k) { n += k * p.cols(); });
      rc[static_cast<std::size_t>(d)] = n;
    }
    std::vector<float> recv(static_cast<std::size_t>(sum(rc)));
    comm_->alltoallv(std::span<const float>(send), std::span<const std::int64_t>(sc), std::span<float>(recv),
                     std::span<const std::int64_t>(rc));
    std::size_t at = 0;
    for (int d = 0; d < N; ++d)
      for_fragments(d, first_row, count,
                    [&](std::size_t, const Piece& p, std::size_t, std::int64_t g0, std::int64_t n) {
                      for (std::int64_t i = 0; i < n; ++i, at += static_cast<std::size_t>(p.cols()))
                        std::copy_n(recv.data() + at, p.cols(),
                                    out.data() + (g0 - first_row + i) * D() + p.col_begin);
                    });
  }

  /// Initializes every row uniformly in [low, high) as a single CachedEmbedding with the
  /// same seed does: each local table's init_uniform(), keyed by its pieces' row and column
  /// keys, so a table- or row-wise piece (and a column piece starting at a multiple of 4
  /// columns) draws and stores (Rounding, site Init) exactly the single process's bits for
  /// every store. A column piece starting elsewhere gets the single process's FP32 draw of
  /// its columns (the full row drawn by its row key), stored with set_weights() (Rounding,
  /// site SetWeights). Throws std::invalid_argument like CachedEmbedding::init_uniform, on
  /// every rank (nothing changed).
  void init_uniform(float low, float high) {
    std::string err;
    if (!num::is_finite(low) || !num::is_finite(high) || !(low < high) || low < -Storage::limit ||
        high > Storage::limit)
      err = "init_uniform: rank " + rank_str() + ": [low, high) = [" + format_float(low) + ", " +
            format_float(high) + ") must be finite, non-empty and within the format's limit";
    agree(kInit, err);
    for (std::size_t gi = 0; gi < locals_.size(); ++gi) {
      locals_[gi]->init_uniform(low, high);
      const Group& g = my_groups()[gi];
      for (std::size_t pi = 0; pi < g.pieces.size(); ++pi) {
        const Piece& p = g.pieces[pi];
        if (keyed_columns(p)) continue;
        // A column piece its column key cannot place: the full rows' draws (the core's
        // UniformRows, keyed by the row alone), its columns written with set_weights().
        constexpr std::int64_t kChunk = 16384;
        std::vector<float> row(static_cast<std::size_t>(D())), buf;
        for (std::int64_t r0 = p.row_begin; r0 < p.row_end; r0 += kChunk) {
          const std::int64_t n = std::min(kChunk, p.row_end - r0);
          buf.resize(static_cast<std::size_t>(n) * p.cols());
          for (std::int64_t i = 0; i < n; ++i) {
            const mpe::detail::UniformRows draw{
                num::RowStream{config_.seed}, row_key(p.table) + r0 + i, D(), low, high, row.data()};
            draw(0);
            std::copy_n(row.data() + p.col_begin, p.cols(), buf.data() + i * p.cols());
          }
          locals_[gi]->set_weights(buf, g.first_row[pi] + (r0 - p.row_begin));
        }
      }
    }
  }

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
  CacheStats stats_reduced() const {
    const CacheStats s = stats();
    std::array<std::uint64_t, 12> v{s.lookups,      s.unique_rows,        s.hits,
                                    s.misses,       s.conflict_misses,    s.evictions,
                                    s.writebacks,   s.lfu_rejections,     s.saturated_rows,
                                    s.bytes_filled, s.bytes_written_back, s.skipped_steps};
    comm_->allreduce_sum(std::span<std::uint64_t>(v));
    return CacheStats{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]};
  }
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
  std::vector<MemoryFootprint> memory_per_rank() const {
    const MemoryFootprint m = memory();
    const int N = size();
    std::vector<std::uint64_t> send, recv(static_cast<std::size_t>(N) * 5);
    for (int r = 0; r < N; ++r)
      send.insert(send.end(),
                  {m.store_bytes, m.cache_bytes, m.optimizer_bytes, m.metadata_bytes, m.workspace_bytes});
    std::vector<std::int64_t> c(static_cast<std::size_t>(N), 5);
    comm_->alltoallv(std::span<const std::uint64_t>(send), std::span<const std::int64_t>(c),
                     std::span<std::uint64_t>(recv), std::span<const std::int64_t>(c));
    std::vector<MemoryFootprint> out(static_cast<std::size_t>(N));
    for (std::size_t r = 0; r < out.size(); ++r) {
      const std::uint64_t* v = recv.data() + 5 * r;
      out[r] = MemoryFootprint{v[0], v[1], v[2], v[3], v[4]};
    }
    return out;
  }

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
  void save(const std::filesystem::path& dir) const {
    auto* self = const_cast<ShardedEmbedding*>(this);
    std::string err;
    std::vector<std::int64_t> attempt{1};
    try {
      std::filesystem::create_directories(dir);
      attempt[0] = next_save_number(dir, steps_);
    } catch (const std::exception& e) {
      err = "save: rank " + rank_str() + ": " + e.what();
    }
    self->agree(kSave, err, {}, /*runtime=*/true);
    comm_->allreduce_max(std::span<std::int64_t>(attempt));  // every rank's view of dir
    const std::string prefix = "step" + std::to_string(steps_) + ".save" + std::to_string(attempt[0]);
    try {
      for (std::size_t gi = 0; gi < locals_.size(); ++gi)
        locals_[gi]->save(dir / shard_file(prefix, rank(), gi));
    } catch (const std::exception& e) {
      err = "save: rank " + rank_str() + ": " + e.what();
    }
    self->agree(kSave, err, {}, /*runtime=*/true);
    err.clear();
    if (rank() == 0) {
      try {
        const std::filesystem::path tmp = dir / "plan.txt.tmp";
        {
          std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
          f << manifest_text(prefix);
          f.flush();
          if (!f) throw std::system_error(errno, std::generic_category(), "writing " + tmp.string());
        }
        std::filesystem::rename(tmp, dir / "plan.txt");
      } catch (const std::exception& e) {
        err = "save: rank 0: manifest: " + std::string(e.what());
      }
    }
    self->agree(kSave, err, {}, /*runtime=*/true);
  }

  /// Loads a checkpoint written by save() with the same plan and rank count (no
  /// re-sharding: a different plan or world size is a checkpoint_error). Every rank reads
  /// the manifest and its own shard files into new local tables; only when every rank
  /// succeeded are they swapped in, with the manifest's step, optimizer (the one backward()
  /// must continue with, on every rank, tables or not) and exchange counter (the stream of
  /// FP16/BF16 communication's stochastic rounding), so training resumes bit for bit.
  /// Throws mpe::checkpoint_error on every rank (nothing changed anywhere) if the manifest
  /// or any shard fails verification, its comm precision is not options().precision, or
  /// its step is 2^64 - 1 (no further step can be counted).
  void load(const std::filesystem::path& dir) {
    std::string err;
    std::vector<std::unique_ptr<local_type>> fresh;
    Manifest m;
    try {
      std::ifstream f(dir / "plan.txt", std::ios::binary);
      if (!f) throw checkpoint_error("cannot read manifest " + (dir / "plan.txt").string());
      std::ostringstream s;
      s << f.rdbuf();
      m = parse_manifest(s.str());
      if (m.precision != sharded::to_string(options_.precision))
        throw checkpoint_error("manifest comm_precision " + m.precision + " differs from this object's " +
                               sharded::to_string(options_.precision) + " (ShardOptions::precision)");
      if (m.plan.world_size != plan_.world_size)
        throw checkpoint_error("checkpoint has " + std::to_string(m.plan.world_size) + " ranks, this run " +
                               std::to_string(plan_.world_size) + " (re-sharding is not supported)");
      if (!(m.plan == plan_)) throw checkpoint_error("checkpoint's sharding plan differs from this object's");
      for (std::size_t gi = 0; gi < locals_.size(); ++gi) {
        auto l = std::make_unique<local_type>(locals_[gi]->config());
        l->load(dir / shard_file(m.shards, rank(), gi));
        fresh.push_back(std::move(l));
      }
    } catch (const std::exception& e) {
      err = "Cload: rank " + rank_str() + ": " + e.what();
    }
    agree(kLoad, err);
    locals_ = std::move(fresh);
    steps_ = m.step;
    opt_name_ = m.optimizer;
    exchanges_ = m.exchanges;
    fwd_ = {};
  }

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
  static std::int64_t next_save_number(const std::filesystem::path& dir, std::uint64_t step) {
    const std::string head = "step" + std::to_string(step) + ".save";
    std::int64_t k = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string n = entry.path().filename().string();
      if (n.rfind(head, 0) != 0) continue;
      std::int64_t v = 0;
      std::size_t i = head.size();
      for (; i < n.size() && n[i] >= '0' && n[i] <= '9' && v < (std::int64_t{1} << 58); ++i)
        v = 10 * v + (n[i] - '0');
      if (i > head.size()) k = std::max(k, v);
    }
    return k + 1;
  }
  std::string manifest_text(const std::string& shards) const {
    return "mpe-sharded-checkpoint v2\nstep " + std::to_string(steps_) + "\nstorage " + Storage::name +
           "\ncache " + Cache::name + "\nrounding " + Rounding::name + "\ncomm_precision " +
           sharded::to_string(options_.precision) + "\noptimizer " +
           (opt_name_.empty() ? "none" : opt_name_) + "\nexchanges " + std::to_string(exchanges_) +
           "\nshards " + shards + "\n" + plan_.to_string();
  }
  /// A manifest's contents. Version 1 (no optimizer, exchanges, shards lines) names its
  /// shards `step<S>` and has no optimizer (taken from the first backward) and counter 0.
  struct Manifest {
    std::uint64_t step = 0;
    std::string precision, optimizer, shards;
    std::uint64_t exchanges = 0;
    ShardingPlan plan;
  };
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
             bool runtime = false) {
    const int N = comm_->size(), me = comm_->rank();
    // Fixed size whatever the call, so that ranks in different calls still match.
    constexpr std::size_t kMaxParams = 4;
    params.resize(kMaxParams, 0);
    std::vector<std::int64_t> v{local_error.empty() ? 0 : N - me, kind, -kind};
    for (auto p : params) v.push_back(p), v.push_back(-p);
    comm_->allreduce_max(std::span<std::int64_t>(v));
    if (v[1] != -v[2])
      throw std::logic_error("ShardedEmbedding: ranks called different collective operations");
    if (v[0] > 0) {
      const int root = N - static_cast<int>(v[0]);
      std::vector<char> buf(2048, '\0');
      if (me == root)
        std::copy_n(local_error.data(), std::min(local_error.size(), buf.size() - 1), buf.data());
      comm_->broadcast(std::span<char>(buf), root);
      std::string msg(buf.data());
      const char tag = msg.empty() ? ' ' : msg[0];
      if (tag == 'L') throw std::logic_error(msg.substr(1));
      if (tag == 'C') throw checkpoint_error(msg.substr(1));
      if (runtime) throw std::runtime_error(msg);
      throw std::invalid_argument(msg);
    }
    for (std::size_t i = 0; i < params.size(); ++i)
      if (v[3 + 2 * i] != -v[4 + 2 * i])
        throw std::logic_error("ShardedEmbedding: ranks disagree on argument " + std::to_string(i) +
                               " of the collective call (pooling, per-sample weights, optimizer, range)");
  }

  /// This rank's validation of its batch (empty = valid), in CachedEmbedding's words.
  std::string check_batch(const char* fn, std::span<const std::int64_t> indices,
                          std::span<const std::int64_t> offsets, std::span<const float> w, Pooling pooling,
                          const std::span<float>* output) const {
    const std::string who = std::string(fn) + ": rank " + rank_str() + ": ";
    const std::int64_t t_count = T();
    if (offsets.empty() || (offsets.size() - 1) % static_cast<std::size_t>(t_count) != 0)
      return who + "offsets.size() = " + std::to_string(offsets.size()) +
             " is not T*B + 1 (T = " + std::to_string(t_count) + ")";
    const std::int64_t B = static_cast<std::int64_t>(offsets.size() - 1) / t_count;
    if (offsets[0] != 0) return who + "offsets[0] = " + std::to_string(offsets[0]) + " must be 0";
    for (std::size_t j = 1; j < offsets.size(); ++j)
      if (offsets[j] < offsets[j - 1])
        return who + "offsets[" + std::to_string(j) + "] = " + std::to_string(offsets[j]) +
               " is less than offsets[" + std::to_string(j - 1) + "] = " + std::to_string(offsets[j - 1]);
    if (offsets.back() != static_cast<std::int64_t>(indices.size()))
      return who + "offsets[" + std::to_string(offsets.size() - 1) + "] = " + std::to_string(offsets.back()) +
             " must equal indices.size() = " + std::to_string(indices.size());
    for (std::int64_t j = 0; j < t_count * B; ++j) {
      const std::int64_t t = j / std::max<std::int64_t>(B, 1);
      const std::int64_t rows = config_.table_rows[static_cast<std::size_t>(t)];
      for (std::int64_t i = offsets[static_cast<std::size_t>(j)];
           i < offsets[static_cast<std::size_t>(j) + 1]; ++i)
        if (indices[static_cast<std::size_t>(i)] < 0 || indices[static_cast<std::size_t>(i)] >= rows)
          return who + "indices[" + std::to_string(i) +
                 "] = " + std::to_string(indices[static_cast<std::size_t>(i)]) + " is outside table " +
                 std::to_string(t) + " (" + std::to_string(rows) + " rows; bag " + std::to_string(j) + ")";
    }
    if (!w.empty()) {
      if (pooling == Pooling::Mean) return who + "per_sample_weights need Pooling::Sum";
      if (w.size() != indices.size())
        return who + "per_sample_weights.size() = " + std::to_string(w.size()) +
               ", expected indices.size() = " + std::to_string(indices.size());
      for (std::size_t i = 0; i < w.size(); ++i)
        if (!num::is_finite(w[i]))
          return who + "per_sample_weights[" + std::to_string(i) + "] = " + format_float(w[i]) +
                 " is not finite";
    }
    if (output && output->size() != static_cast<std::size_t>(B * t_count * D()))
      return who + "output.size() = " + std::to_string(output->size()) +
             ", expected B*T*D = " + std::to_string(B * t_count * D());
    return {};
  }

  std::string check_rows(const char* fn, std::size_t size, std::int64_t first_row) const {
    const std::string who = std::string(fn) + ": rank " + rank_str() + ": ";
    if (size % static_cast<std::size_t>(D()) != 0)
      return who + "size " + std::to_string(size) + " is not a multiple of D = " + std::to_string(D());
    const std::int64_t n = static_cast<std::int64_t>(size) / D();
    if (first_row < 0 || first_row > total_rows() || n > total_rows() - first_row)
      return who + "rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + n) +
             ") leave [0, " + std::to_string(total_rows()) + ")";
    return {};
  }

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
           const std::vector<std::int64_t>& rc, bool vectors) {
    std::uint64_t bytes = 0;
    for (int r = 0; r < size(); ++r)
      if (r != rank()) bytes += static_cast<std::uint64_t>(sc[static_cast<std::size_t>(r)]) * sizeof(V);
    (vectors ? comm_stats_.vector_bytes : comm_stats_.index_bytes) += bytes;
    ++comm_stats_.calls;
    comm_->alltoallv(send, std::span<const std::int64_t>(sc), recv, std::span<const std::int64_t>(rc));
  }

  /// All-to-all of FP32 vectors, on the wire in options_.precision.
  void a2a_vectors(const std::vector<float>& send, const std::vector<std::int64_t>& sc,
                   std::vector<float>& recv, const std::vector<std::int64_t>& rc) {
    recv.assign(static_cast<std::size_t>(sum(rc)), 0.0f);
    if (options_.precision == CommPrecision::Fp32) {
      a2a(std::span<const float>(send), sc, std::span<float>(recv), rc, true);
      return;
    }
    const bool half = options_.precision == CommPrecision::Fp16;
    std::vector<std::uint16_t> s(send.size()), r(recv.size());
    // Stochastic rounding words: Philox keyed by the seed (salted), counter {element block
    // of this rank's message, rank, exchange number, site 6}: the same on every run.
    const num::RowRng base{config_.seed ^ 0x5bd1e9955bd1e995ull, 0, static_cast<std::uint32_t>(exchanges_),
                           num::RoundingSite{6}};
    for (std::size_t i = 0; i < send.size(); i += 4) {
      num::Uint4 w{};
      if constexpr (Rounding::stochastic) {
        num::RowRng rng = base;
        rng.row = (static_cast<std::uint64_t>(rank()) << 40) | (i / 4);
        w = rng.draw(0);
      }
      for (std::size_t k = i; k < std::min(i + 4, send.size()); ++k) {
        const std::uint32_t word = num::word(w, static_cast<int>(k - i));
        s[k] = half ? num::float_to_half<Rounding>(send[k], word).bits
                    : num::float_to_bf16<Rounding>(send[k], word).bits;
      }
    }
    ++exchanges_;
    a2a(std::span<const std::uint16_t>(s), sc, std::span<std::uint16_t>(r), rc, true);
    for (std::size_t k = 0; k < r.size(); ++k)
      recv[k] = half ? num::half_to_float(r[k]) : num::bf16_to_float(r[k]);
  }

  bool takes(const Piece& p, std::int64_t idx) const {
    return p.kind != ShardKind::Row || (idx >= p.row_begin && idx < p.row_end);
  }

  /// Forward / inference / prefetch after agreement: route indices to the owners, pool
  /// locally, route the vectors back (not for prefetch) and assemble `output`.
  void exchange_batch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                      std::span<const float> w, Pooling pooling, std::span<float> output, Mode mode) {
    const int N = size();
    const std::int64_t Tn = T(), B = static_cast<std::int64_t>(offsets.size() - 1) / Tn;
    const bool has_w = !w.empty();
    // 1. Messages: to rank d, for its groups and pieces in order, the bag lengths of the B
    //    samples, then the indices (row-wise: rebased to the piece's first row), weights.
    std::vector<std::vector<std::int64_t>> msg(static_cast<std::size_t>(N));
    std::vector<std::vector<float>> wmsg(static_cast<std::size_t>(N));
    for (int d = 0; d < N; ++d) {
      auto& m = msg[static_cast<std::size_t>(d)];
      m.push_back(B);
      std::vector<std::int64_t> idx;
      for (const Group& g : layouts_[static_cast<std::size_t>(d)])
        for (const Piece& p : g.pieces)
          for (std::int64_t b = 0; b < B; ++b) {
            const std::size_t j = static_cast<std::size_t>(p.table * B + b);
            std::int64_t L = 0;
            for (std::int64_t i = offsets[j]; i < offsets[j + 1]; ++i) {
              const std::int64_t x = indices[static_cast<std::size_t>(i)];
              if (!takes(p, x)) continue;
              idx.push_back(x - p.row_begin);
              if (has_w) wmsg[static_cast<std::size_t>(d)].push_back(w[static_cast<std::size_t>(i)]);
              ++L;
            }
            m.push_back(L);
          }
      m.insert(m.end(), idx.begin(), idx.end());
    }
    // 2. Sizes, then the messages.
    std::vector<std::int64_t> two(static_cast<std::size_t>(N), 2), hsend,
        hrecv(2 * static_cast<std::size_t>(N));
    for (int d = 0; d < N; ++d) {
      hsend.push_back(static_cast<std::int64_t>(msg[static_cast<std::size_t>(d)].size()));
      hsend.push_back(static_cast<std::int64_t>(wmsg[static_cast<std::size_t>(d)].size()));
    }
    a2a(std::span<const std::int64_t>(hsend), two, std::span<std::int64_t>(hrecv), two, false);
    std::vector<std::int64_t> sc(static_cast<std::size_t>(N)), rc(sc.size()), wsc(sc.size()), wrc(sc.size());
    std::vector<std::int64_t> send, wtmp;
    std::vector<float> wsend;
    for (int d = 0; d < N; ++d) {
      const auto u = static_cast<std::size_t>(d);
      sc[u] = static_cast<std::int64_t>(msg[u].size());
      wsc[u] = static_cast<std::int64_t>(wmsg[u].size());
      rc[u] = hrecv[2 * u];
      wrc[u] = hrecv[2 * u + 1];
      send.insert(send.end(), msg[u].begin(), msg[u].end());
      wsend.insert(wsend.end(), wmsg[u].begin(), wmsg[u].end());
    }
    std::vector<std::int64_t> recv(static_cast<std::size_t>(sum(rc)));
    std::vector<float> wrecv(static_cast<std::size_t>(sum(wrc)));
    a2a(std::span<const std::int64_t>(send), sc, std::span<std::int64_t>(recv), rc, false);
    if (has_w) a2a(std::span<const float>(wsend), wsc, std::span<float>(wrecv), wrc, false);

    // 3. Owner side: one local batch per group, bags ordered (piece, rank, sample).
    const auto& groups = my_groups();
    std::vector<std::int64_t> B_of(static_cast<std::size_t>(N)), msg_at(static_cast<std::size_t>(N)),
        w_at(static_cast<std::size_t>(N));
    {
      std::int64_t at = 0, wat = 0;
      for (int s = 0; s < N; ++s) {
        msg_at[static_cast<std::size_t>(s)] = at;
        w_at[static_cast<std::size_t>(s)] = wat;
        B_of[static_cast<std::size_t>(s)] =
            rc[static_cast<std::size_t>(s)] > 0 ? recv[static_cast<std::size_t>(at)] : 0;
        at += rc[static_cast<std::size_t>(s)];
        wat += wrc[static_cast<std::size_t>(s)];
      }
    }
    const std::int64_t Bg = sum(B_of);
    std::vector<std::vector<float>> local_out(groups.size());
    {
      // Per source: cursor over its lengths and indices, in (group, piece, sample) order.
      std::vector<std::int64_t> len_cur(static_cast<std::size_t>(N)), idx_cur(static_cast<std::size_t>(N));
      for (int s = 0; s < N; ++s) {
        const auto u = static_cast<std::size_t>(s);
        std::int64_t lens = 0;
        for (const Group& g : groups) lens += static_cast<std::int64_t>(g.pieces.size()) * B_of[u];
        len_cur[u] = msg_at[u] + 1;
        idx_cur[u] = msg_at[u] + 1 + lens;
      }
      std::vector<std::int64_t> widx_cur = w_at;
      for (std::size_t gi = 0; gi < groups.size(); ++gi) {
        const Group& g = groups[gi];
        const std::size_t np = g.pieces.size();
        // Sources' lengths for this group are contiguous per source: (piece, sample).
        std::vector<std::int64_t> loff{0}, lidx;
        std::vector<float> lw;
        std::vector<std::vector<std::int64_t>> start(np,
                                                     std::vector<std::int64_t>(static_cast<std::size_t>(N)));
        std::vector<std::int64_t> l_base = len_cur, i_base = idx_cur, w_base = widx_cur;
        for (int s = 0; s < N; ++s) {  // index start of (piece, s)
          const auto u = static_cast<std::size_t>(s);
          std::int64_t at = i_base[u];
          for (std::size_t pi = 0; pi < np; ++pi) {
            start[pi][u] = at;
            for (std::int64_t b = 0; b < B_of[u]; ++b)
              at += recv[static_cast<std::size_t>(l_base[u] + static_cast<std::int64_t>(pi) * B_of[u] + b)];
          }
          len_cur[u] += static_cast<std::int64_t>(np) * B_of[u];
          widx_cur[u] += at - i_base[u];
          idx_cur[u] = at;
        }
        for (std::size_t pi = 0; pi < np; ++pi)
          for (int s = 0; s < N; ++s) {
            const auto u = static_cast<std::size_t>(s);
            std::int64_t at = start[pi][u];
            for (std::int64_t b = 0; b < B_of[u]; ++b) {
              const std::int64_t L =
                  recv[static_cast<std::size_t>(l_base[u] + static_cast<std::int64_t>(pi) * B_of[u] + b)];
              lidx.insert(lidx.end(), recv.begin() + at, recv.begin() + at + L);
              if (has_w)
                lw.insert(lw.end(), wrecv.begin() + (w_base[u] + (at - i_base[u])),
                          wrecv.begin() + (w_base[u] + (at - i_base[u]) + L));
              at += L;
              loff.push_back(loff.back() + L);
            }
          }
        local_type& emb = *locals_[gi];
        if (mode == Mode::Prefetch) {
          emb.prefetch(lidx, loff);
          continue;
        }
        local_out[gi].assign(static_cast<std::size_t>(Bg) * np * static_cast<std::size_t>(g.dim), 0.0f);
        if (mode == Mode::Train)
          emb.forward(lidx, loff, local_out[gi], Pooling::Sum, lw);
        else
          emb.forward_inference(lidx, loff, local_out[gi], Pooling::Sum, lw);
      }
    }
    if (mode == Mode::Prefetch) return;

    // 4. Vectors back: to rank s, for each group, piece, sample of s: dim floats.
    std::vector<float> vsend, vrecv;
    std::vector<std::int64_t> vsc(static_cast<std::size_t>(N)), vrc(static_cast<std::size_t>(N));
    {
      std::int64_t off = 0;
      for (int s = 0; s < N; ++s) {
        const auto u = static_cast<std::size_t>(s);
        const std::size_t before = vsend.size();
        for (std::size_t gi = 0; gi < groups.size(); ++gi) {
          const std::size_t np = groups[gi].pieces.size(), dl = static_cast<std::size_t>(groups[gi].dim);
          for (std::size_t pi = 0; pi < np; ++pi)
            for (std::int64_t b = 0; b < B_of[u]; ++b) {
              const float* src = local_out[gi].data() + (static_cast<std::size_t>(off + b) * np + pi) * dl;
              vsend.insert(vsend.end(), src, src + dl);
            }
        }
        vsc[u] = static_cast<std::int64_t>(vsend.size() - before);
        off += B_of[u];
      }
      for (int d = 0; d < N; ++d) {
        std::int64_t n = 0;
        for (const Group& g : layouts_[static_cast<std::size_t>(d)])
          n += static_cast<std::int64_t>(g.pieces.size()) * g.dim * B;
        vrc[static_cast<std::size_t>(d)] = n;
      }
    }
    a2a_vectors(vsend, vsc, vrecv, vrc);

    // 5. Assemble: table/column pieces copied, row-wise partials summed from 0 in rank order.
    std::fill(output.begin(), output.end(), 0.0f);
    const std::size_t TD = static_cast<std::size_t>(Tn) * static_cast<std::size_t>(D());
    std::size_t at = 0;
    for (int d = 0; d < N; ++d)
      for (const Group& g : layouts_[static_cast<std::size_t>(d)])
        for (const Piece& p : g.pieces)
          for (std::int64_t b = 0; b < B; ++b, at += static_cast<std::size_t>(g.dim)) {
            float* o = output.data() + static_cast<std::size_t>(b) * TD +
                       static_cast<std::size_t>(p.table) * static_cast<std::size_t>(D()) +
                       static_cast<std::size_t>(p.col_begin);
            if (p.kind == ShardKind::Row)
              for (std::int32_t k = 0; k < g.dim; ++k)
                o[k] = num::add(o[k], vrecv[at + static_cast<std::size_t>(k)]);
            else
              std::copy_n(vrecv.data() + at, g.dim, o);
          }
    Forwarded f;
    f.B = B;
    f.mean = pooling == Pooling::Mean;
    if (f.mean) {
      f.inv_len.resize(static_cast<std::size_t>(Tn * B));
      for (std::int64_t j = 0; j < Tn * B; ++j) {
        const std::int64_t L =
            offsets[static_cast<std::size_t>(j) + 1] - offsets[static_cast<std::size_t>(j)];
        const float inv = L > 0 ? num::div(1.0f, static_cast<float>(L)) : 0.0f;
        f.inv_len[static_cast<std::size_t>(j)] = inv;
        if (L == 0) continue;
        float* o =
            output.data() + static_cast<std::size_t>(j % B) * TD + static_cast<std::size_t>(j / B) * D();
        for (std::int32_t k = 0; k < D(); ++k) o[k] = num::mul(o[k], inv);
      }
    }
    if (mode == Mode::Train) {
      f.valid = true;
      f.B_of = std::move(B_of);
      fwd_ = std::move(f);
    }
  }

  template <class Optimizer>
  void exchange_grad(std::span<const float> grad, const Optimizer& opt) {
    const int N = size();
    const std::int64_t B = fwd_.B;
    const std::size_t TD = static_cast<std::size_t>(T()) * static_cast<std::size_t>(D());
    // To rank d: for each group, piece, own sample: the piece's columns of the gradient
    // (times 1/L for Mean pooling, the single-process coefficient).
    std::vector<float> send, recv;
    std::vector<std::int64_t> sc(static_cast<std::size_t>(N)), rc(static_cast<std::size_t>(N));
    for (int d = 0; d < N; ++d) {
      const std::size_t before = send.size();
      for (const Group& g : layouts_[static_cast<std::size_t>(d)])
        for (const Piece& p : g.pieces)
          for (std::int64_t b = 0; b < B; ++b) {
            const float* src = grad.data() + static_cast<std::size_t>(b) * TD +
                               static_cast<std::size_t>(p.table) * static_cast<std::size_t>(D()) +
                               static_cast<std::size_t>(p.col_begin);
            if (fwd_.mean) {
              const float inv = fwd_.inv_len[static_cast<std::size_t>(p.table * B + b)];
              for (std::int32_t k = 0; k < p.cols(); ++k) send.push_back(num::mul(inv, src[k]));
            } else {
              send.insert(send.end(), src, src + p.cols());
            }
          }
      sc[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(send.size() - before);
    }
    const auto& groups = my_groups();
    for (int s = 0; s < N; ++s) {
      std::int64_t n = 0;
      for (const Group& g : groups)
        n += static_cast<std::int64_t>(g.pieces.size()) * g.dim * fwd_.B_of[static_cast<std::size_t>(s)];
      rc[static_cast<std::size_t>(s)] = n;
    }
    a2a_vectors(send, sc, recv, rc);
    // Owner: (Bg, np*dim) per group, samples in (rank, sample) order.
    const std::int64_t Bg = sum(fwd_.B_of);
    std::vector<std::vector<float>> lg(groups.size());
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      lg[gi].resize(static_cast<std::size_t>(Bg) * groups[gi].pieces.size() *
                    static_cast<std::size_t>(groups[gi].dim));
    std::size_t at = 0;
    std::int64_t off = 0;
    for (int s = 0; s < N; ++s) {
      const std::int64_t Bs = fwd_.B_of[static_cast<std::size_t>(s)];
      for (std::size_t gi = 0; gi < groups.size(); ++gi) {
        const std::size_t np = groups[gi].pieces.size(), dl = static_cast<std::size_t>(groups[gi].dim);
        for (std::size_t pi = 0; pi < np; ++pi)
          for (std::int64_t b = 0; b < Bs; ++b, at += dl)
            std::copy_n(recv.data() + at, dl,
                        lg[gi].data() + (static_cast<std::size_t>(off + b) * np + pi) * dl);
      }
      off += Bs;
    }
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      locals_[gi]->backward(std::span<const float>(lg[gi]), opt);
    opt_name_ = OptimizerRule<Optimizer>::name;
    fwd_ = {};
    ++steps_;
  }

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
