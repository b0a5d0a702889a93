// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/sharded/weights.inl
/// @brief ShardedEmbedding: set_weights / get_weights / init_uniform over the ranks' pieces
/// (included by mpe/sharded/sharded_embedding.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mpe/detail/kernels/row_io.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"

namespace mpe::sharded {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::set_weights(
    std::span<const float> weights, std::int64_t first_row) {
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

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::get_weights(
    std::span<float> out, std::int64_t first_row) const {
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
    for_fragments(
        d, first_row, count, [&](std::size_t, const Piece& p, std::size_t, std::int64_t g0, std::int64_t n) {
          for (std::int64_t i = 0; i < n; ++i, at += static_cast<std::size_t>(p.cols()))
            std::copy_n(recv.data() + at, p.cols(), out.data() + (g0 - first_row + i) * D() + p.col_begin);
        });
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::init_uniform(float low, float high) {
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

}  // namespace mpe::sharded
