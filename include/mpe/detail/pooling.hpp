// SPDX-License-Identifier: Apache-2.0
/// @file pooling.hpp
/// @brief Pooling of bags (sum, mean, per-sample weights) from cache slots or the store; the
/// host SIMD path is in pool_simd.hpp and gives the same bits.
/// Per-item functors of CachedEmbedding (not public): trivially copyable,
/// `MPE_HOST_DEVICE`, run by HostBackend through Thrust and launched as kernels by
/// CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/detail/atomics.hpp"
#include "mpe/detail/pool_simd.hpp"
#include "mpe/detail/row_accumulate.hpp"
#include "mpe/detail/state_ref.hpp"
#include "mpe/detail/statistics.hpp"
#include "mpe/detail/validation.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/types.hpp"

namespace mpe::detail {

/// Forward pooling of bag j = t*B + b into output (B, T*D) at [b*T*D + t*D, +D):
/// elements summed in index order (weighted: add(acc, mul(w, x))); mean multiplies by
/// 1.0f / L; an empty bag gives zeros. Rows come from their cache slot or the store.
/// `slot_of_occ` may be null (no cache): then every row is read from the store; with
/// `lookup` the slot is found by scanning the row's set (forward_inference).
/// On the host the rows kPoolPrefetchAhead occurrences ahead are prefetched, and where the
/// CPU has AVX2 + F16C the bag is pooled by detail::simd::pool_bag (same bits, pinned by
/// tests/test_pool_simd.cpp); elsewhere by the portable loop. Launched laned
/// (`for_each_lanes`): with more than one lane (CudaBackend: a warp per bag) each lane
/// sums its element chunks over the bag's rows in registers, in the same row order, so
/// every output element gets the same operations as with one lane.
template <class Storage>
struct PoolBags {
  const index_t* offsets;
  const index_t* global_rows;     // (n)
  const index_t* occ_to_unique;   // (n) or null
  const index_t* slot_of_unique;  // (U) or null
  const float* weights;           // (n) or null
  CacheRef cache;
  bool lookup;
  const std::uint8_t* store;
  std::size_t stride;
  index_t B, T;
  std::int32_t D;
  bool mean;
  float* output;
  const index_t* gate;  // batch ok flag, or null (a failed batch leaves output untouched)
  MPE_HOST_DEVICE index_t slot_of(index_t i, index_t r) const {
    index_t s = -1;
    if (lookup) {
      s = cache.find(r);
    } else if (slot_of_unique) {
      s = slot_of_unique[occ_to_unique[i]];
      if (s >= 0 && cache.tags[s] != r) s = -1;  // line dropped by set_weights after populate
    }
    return s;
  }
  /// Prefetches what pooling occurrence k will read: its cache row when populate gave it a
  /// slot, else its store row (with `lookup`, also its set's tags). Host only.
  MPE_HOST_DEVICE void prefetch_row(index_t k) const {
    const index_t r = global_rows[k];
    if (!lookup && slot_of_unique) {
      const index_t s = slot_of_unique[occ_to_unique[k]];
      if (s >= 0) {
        prefetch_lines(cache.row(s), static_cast<std::size_t>(D) * sizeof(float));
        prefetch_lines(cache.tags + s, sizeof(index_t));  // slot_of compares the slot's tag
        return;
      }
    } else if (lookup && cache.num_sets > 0) {
      prefetch_lines(cache.tags + cache.set_of(r) * cache.ways, static_cast<std::size_t>(cache.ways) * 8);
    }
    prefetch_lines(store + static_cast<std::size_t>(r) * stride, Storage::data_bytes(D));
  }
#if MPE_HOST_SIMD
  /// The AVX2 path of one bag (host): false, doing nothing, where it does not apply.
  bool pool_host_simd(index_t begin, index_t end, float* o) const {
    if constexpr (!simd::has_row<Storage>) {
      (void)begin;
      (void)end;
      (void)o;
      return false;
    } else {
      if (!host_simd_enabled()) return false;
      const index_t n_all = offsets[B * T];
      if (!lookup && !slot_of_unique) {  // store only: no slot to look up
        const std::size_t bytes = Storage::data_bytes(D);
        const simd::StoreRows src{store,       stride, bytes,
                                  global_rows, n_all,  simd::row_lines(store, stride, bytes)};
        if (weights) {
          simd::pool_bag<Storage, true>(src, begin, end, weights, D, o);
        } else {
          simd::pool_bag<Storage, false>(src, begin, end, nullptr, D, o);
        }
        return true;
      }
      const auto row = [this](index_t i, bool& cached) -> const std::uint8_t* {
        const index_t r = global_rows[i];
        const index_t s = slot_of(i, r);
        cached = s >= 0;
        return cached ? reinterpret_cast<const std::uint8_t*>(cache.row(s))
                      : store + static_cast<std::size_t>(r) * stride;
      };
      const auto ahead = [this, n_all](index_t i) {
        if (i + kPoolPrefetchAhead < n_all) prefetch_row(i + kPoolPrefetchAhead);
      };
      const simd::FnRows<decltype(row), decltype(ahead)> src{row, ahead};
      if (weights) {
        simd::pool_bag<Storage, true>(src, begin, end, weights, D, o);
      } else {
        simd::pool_bag<Storage, false>(src, begin, end, nullptr, D, o);
      }
      return true;
    }
  }
#endif
  /// Lane `lane` of `lanes` of bag j: the whole bag (operator()(j)) with one lane, else the
  /// lane's element chunks.
  MPE_HOST_DEVICE void operator()(index_t j, std::int32_t lane, std::int32_t lanes) const {
    if (lanes == 1) {
      (*this)(j);
      return;
    }
    if (!open(gate)) return;
    index_t t, b;
    split_bag(j, B, t, b);
    float* o = output + (b * T + t) * D;
    const index_t begin = offsets[j], end = offsets[j + 1];
    const bool scale = mean && end > begin;
    const float inv = scale ? num::div(1.0f, static_cast<float>(end - begin)) : 1.0f;
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float acc[kLaneChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (index_t i = begin; i < end; ++i) {
        const index_t r = global_rows[i];
        const index_t s = slot_of(i, r);
        const float w = weights ? weights[i] : 1.0f;
        if (s >= 0) {
          accumulate_f32(cache.row(s) + c, m, w, acc, weights != nullptr);
        } else if (weights) {
          accumulate_chunk<Storage, true>(store + static_cast<std::size_t>(r) * stride, D, c, m, w, acc);
        } else {
          accumulate_chunk<Storage, false>(store + static_cast<std::size_t>(r) * stride, D, c, m, w, acc);
        }
      }
      for (std::int32_t k = 0; k < m; ++k) o[c + k] = scale ? num::mul(acc[k], inv) : acc[k];
    }
  }
  /// Bag j with one lane (the host).
  MPE_HOST_DEVICE void operator()(index_t j) const {
    if (!open(gate)) return;
    index_t t, b;
    split_bag(j, B, t, b);
    float* o = output + (b * T + t) * D;
    const index_t begin = offsets[j], end = offsets[j + 1];
    bool done = false;
#if MPE_HOST_SIMD
    done = pool_host_simd(begin, end, o);
#endif
    if (!done) {
      for (std::int32_t d = 0; d < D; ++d) o[d] = 0.0f;
#ifndef __CUDA_ARCH__
      const index_t n_all = offsets[B * T];
#endif
      for (index_t i = begin; i < end; ++i) {
#ifndef __CUDA_ARCH__
        if (i + kPoolPrefetchAhead < n_all) prefetch_row(i + kPoolPrefetchAhead);
#endif
        const index_t r = global_rows[i];
        const index_t s = slot_of(i, r);
        const float w = weights ? weights[i] : 1.0f;
        if (s >= 0) {
          accumulate_f32(cache.row(s), D, w, o, weights != nullptr);
        } else if (weights) {
          RowAccumulate<Storage>::template run<true>(store + static_cast<std::size_t>(r) * stride, D, w, o);
        } else {
          RowAccumulate<Storage>::template run<false>(store + static_cast<std::size_t>(r) * stride, D, w, o);
        }
      }
    }
    if (mean && end > begin) {
      const float inv = num::div(1.0f, static_cast<float>(end - begin));
      for (std::int32_t d = 0; d < D; ++d) o[d] = num::mul(o[d], inv);
    }
  }
};

}  // namespace mpe::detail
