// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/sharded/setup.inl
/// @brief ShardedEmbedding: construction (plan -> local tables, their row and column keys), the
/// agreement step of every collective call, this rank's argument checks, and the collective
/// statistics and memory (included by mpe/sharded/sharded_embedding.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpe/numeric/float_ops.hpp"

namespace mpe::sharded {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::ShardedEmbedding(
    const EmbeddingConfig& config, ShardingPlan plan, Comm& comm, ShardOptions options)
    : config_(config), plan_(std::move(plan)), comm_(&comm), options_(options) {
  std::string err;
  try {
    plan_.validate();
    if (plan_.world_size != comm.size())
      throw std::invalid_argument("plan.world_size = " + std::to_string(plan_.world_size) +
                                  " but the communicator has " + std::to_string(comm.size()) + " ranks");
    if (plan_.table_rows != config.table_rows || plan_.dim != config.dim)
      throw std::invalid_argument("the plan's tables/dim do not match config.table_rows/config.dim");
    if (const std::string e = mpe::detail::stream_keys_error(config); !e.empty())
      throw std::invalid_argument(e);
    if (const std::string e = mpe::detail::range_growth_error<Storage>(config); !e.empty())
      throw std::invalid_argument(e);
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
      const double share = static_cast<double>(config_.cache_rows) * static_cast<double>(g.first_row.back()) /
                           static_cast<double>(table_off_.back());
      c.cache_rows = std::max<std::int64_t>(static_cast<std::int64_t>(std::ceil(share)), Cache::ways);
    }
    locals_.push_back(std::make_unique<local_type>(c));
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline CacheStats ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::stats_reduced() const {
  const CacheStats s = stats();
  std::array<std::uint64_t, 12> v{s.lookups,      s.unique_rows,        s.hits,
                                  s.misses,       s.conflict_misses,    s.evictions,
                                  s.writebacks,   s.lfu_rejections,     s.saturated_rows,
                                  s.bytes_filled, s.bytes_written_back, s.skipped_steps};
  comm_->allreduce_sum(std::span<std::uint64_t>(v));
  return CacheStats{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]};
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline std::vector<MemoryFootprint>
ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::memory_per_rank() const {
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

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::agree(std::int64_t kind,
                                                                             std::string local_error,
                                                                             std::vector<std::int64_t> params,
                                                                             bool runtime) {
  const int N = comm_->size(), me = comm_->rank();
  // Fixed size whatever the call, so that ranks in different calls still match.
  constexpr std::size_t kMaxParams = 4;
  params.resize(kMaxParams, 0);
  std::vector<std::int64_t> v{local_error.empty() ? 0 : N - me, kind, -kind};
  for (auto p : params) v.push_back(p), v.push_back(-p);
  comm_->allreduce_max(std::span<std::int64_t>(v));
  if (v[1] != -v[2]) throw std::logic_error("ShardedEmbedding: ranks called different collective operations");
  if (v[0] > 0) {
    const int root = N - static_cast<int>(v[0]);
    std::vector<char> buf(2048, '\0');
    if (me == root) std::copy_n(local_error.data(), std::min(local_error.size(), buf.size() - 1), buf.data());
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

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline std::string ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::check_batch(
    const char* fn, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::span<const float> w, Pooling pooling, const std::span<float>* output) const {
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
    for (std::int64_t i = offsets[static_cast<std::size_t>(j)]; i < offsets[static_cast<std::size_t>(j) + 1];
         ++i)
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

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline std::string ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::check_rows(
    const char* fn, std::size_t size, std::int64_t first_row) const {
  const std::string who = std::string(fn) + ": rank " + rank_str() + ": ";
  if (size % static_cast<std::size_t>(D()) != 0)
    return who + "size " + std::to_string(size) + " is not a multiple of D = " + std::to_string(D());
  const std::int64_t n = static_cast<std::int64_t>(size) / D();
  if (first_row < 0 || first_row > total_rows() || n > total_rows() - first_row)
    return who + "rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + n) +
           ") leave [0, " + std::to_string(total_rows()) + ")";
  return {};
}

}  // namespace mpe::sharded
