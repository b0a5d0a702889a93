// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/sharded/exchange.inl
/// @brief ShardedEmbedding: prefetch / forward / forward_inference / backward and the all-to-alls
/// behind them: indices and per-sample weights to the owners, pooled vectors back, output
/// gradients to the owners; FP16/BF16 vectors on the wire (included by
/// mpe/sharded/sharded_embedding.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/optim/all.hpp"

namespace mpe::sharded {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::prefetch(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
  agree(kPrefetch, check_batch("prefetch", indices, offsets, {}, Pooling::Sum, nullptr), {0, 0});
  exchange_batch(indices, offsets, {}, Pooling::Sum, {}, Mode::Prefetch);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::forward(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    Pooling pooling, std::span<const float> per_sample_weights) {
  agree(kForward, check_batch("forward", indices, offsets, per_sample_weights, pooling, &output),
        {static_cast<std::int64_t>(pooling), per_sample_weights.empty() ? 0 : 1});
  exchange_batch(indices, offsets, per_sample_weights, pooling, output, Mode::Train);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::forward_inference(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    Pooling pooling, std::span<const float> per_sample_weights) const {
  auto* self = const_cast<ShardedEmbedding*>(this);  // the communicator is not const; the tables are
  self->agree(kInference,
              check_batch("forward_inference", indices, offsets, per_sample_weights, pooling, &output),
              {static_cast<std::int64_t>(pooling), per_sample_weights.empty() ? 0 : 1});
  self->exchange_batch(indices, offsets, per_sample_weights, pooling, output, Mode::Inference);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
template <Optimizer Opt>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::backward(
    std::span<const float> grad_output, const Opt& optimizer) {
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

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
template <class V>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::a2a(
    std::span<const V> send, const std::vector<std::int64_t>& sc, std::span<V> recv,
    const std::vector<std::int64_t>& rc, bool vectors) {
  std::uint64_t bytes = 0;
  for (int r = 0; r < size(); ++r)
    if (r != rank()) bytes += static_cast<std::uint64_t>(sc[static_cast<std::size_t>(r)]) * sizeof(V);
  (vectors ? comm_stats_.vector_bytes : comm_stats_.index_bytes) += bytes;
  ++comm_stats_.calls;
  comm_->alltoallv(send, std::span<const std::int64_t>(sc), recv, std::span<const std::int64_t>(rc));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::a2a_vectors(
    const std::vector<float>& send, const std::vector<std::int64_t>& sc, std::vector<float>& recv,
    const std::vector<std::int64_t>& rc) {
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

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::exchange_batch(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<const float> w,
    Pooling pooling, std::span<float> output, Mode mode) {
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
      const std::int64_t L = offsets[static_cast<std::size_t>(j) + 1] - offsets[static_cast<std::size_t>(j)];
      const float inv = L > 0 ? num::div(1.0f, static_cast<float>(L)) : 0.0f;
      f.inv_len[static_cast<std::size_t>(j)] = inv;
      if (L == 0) continue;
      float* o = output.data() + static_cast<std::size_t>(j % B) * TD + static_cast<std::size_t>(j / B) * D();
      for (std::int32_t k = 0; k < D(); ++k) o[k] = num::mul(o[k], inv);
    }
  }
  if (mode == Mode::Train) {
    f.valid = true;
    f.B_of = std::move(B_of);
    fwd_ = std::move(f);
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
template <class Optimizer>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::exchange_grad(
    std::span<const float> grad, const Optimizer& opt) {
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

}  // namespace mpe::sharded
