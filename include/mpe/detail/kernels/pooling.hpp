// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/pooling.hpp
/// @brief Pooling of bags (sum, mean, per-sample weights) from cache slots or the store; a
/// backend's own pooling of a range of bags (HostBackend: the SIMD kernels, through
/// detail/host/dispatch.hpp) comes in through the `Paths` seam and gives the same bits. Per-item functors of
/// CachedEmbedding (not public): trivially copyable, `MPE_HOST_DEVICE`, run by HostBackend through Thrust and
/// launched as kernels by CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/prefetch.hpp"
#include "mpe/detail/kernels/row_accumulate.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/statistics.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"

namespace mpe::detail {

/// Forward pooling of bag j = t*B + b into output (B, T*D) at [b*T*D + t*D, +D):
/// elements summed in index order (weighted: add(acc, mul(w, x))); mean multiplies by
/// 1.0f / L; an empty bag gives zeros. Rows come from their cache slot or the store.
/// `slot_of_occ` (each occurrence's verified slot, OccurrenceSlots) may be null (no cache):
/// then every row is read from the store (forward_inference finds the slots first, by
/// ProbeSlots, or, with a slot index on the host, reads them in this pass: probe_out).
/// On the host the rows ahead are prefetched into L2 (bags read from one row array,
/// store-only or all cached: pool_rows_ahead occurrences ahead of that array's rows; mixed
/// bags: pool_rows_ahead of an FP32 cache row; the portable loop: kPoolPrefetchAhead, into L1).
/// `Paths::pool_range` may pool a range of bags its own way (HostPaths: the AVX2 and AVX-512
/// kernels, same bits, pinned by tests/host/test_pool_simd.cpp, where a bag whose rows are all
/// cached is pooled as a store-only bag of the FP32 cache rows); else the portable loop below
/// pools each bag. Launched laned
/// (`for_each_lanes`): with more than one lane (CudaBackend: a warp per bag) each lane
/// sums its element chunks over the bag's rows in registers, in the same row order, so
/// every output element gets the same operations as with one lane; store-only Int8Rowwise
/// bags (D % 4 == 0) load `Group` rows' ids, then their codes, scales and biases, before
/// the first decode and add (pool_store_words), so that many row reads are in flight per
/// lane; other bags take one row at a time (load_chunk, add_chunk).
template <class Storage, int Group = kPoolLaneGroup, class Paths = PortablePaths>
struct PoolBags {
  static_assert(Group >= 1 && Group <= 16, "PoolBags: Group rows in flight per lane, 1 .. 16");
  using storage_type = Storage;  ///< the store's format (for Paths::pool_range)
  const index_t* offsets;
  const index_t* global_rows;  // (n)
  const index_t* slot_of_occ;  // (n) or null
  const float* weights;        // (n) or null
  CacheRef cache;
  const std::uint8_t* store;
  std::size_t stride;
  index_t B, T;
  std::int32_t D;
  bool mean;
  float* output;
  const index_t* gate;  // batch ok flag, or null (a failed batch leaves output untouched)
  /// (n) or null: forward_inference with a slot index (cache.slot_of_row), set only where
  /// Paths::pool_range pools the bags (host_simd_path). The storage of slot_of_occ, which is
  /// then not filled beforehand: the range pooling reads each occurrence's slot from the index
  /// into it a little ahead of the rows it pools (the index entries prefetched further ahead).
  index_t* probe_out = nullptr;
  MPE_HOST_DEVICE index_t slot_of(index_t i) const { return slot_of_occ ? slot_of_occ[i] : -1; }
  /// Whether Paths::pool_range pools these bags now (HostPaths: the CPU has AVX2 + F16C, the
  /// path is on and Storage has a decoder): only then does probe_out pay (forward_inference).
  static bool host_simd_path() { return Paths::template pools_ranges<Storage>(); }
  /// Prefetches what pooling occurrence k will read: its cache row when it has a slot, else
  /// its store row, into L1 or, with `L2`, into L2 only (`prefetcht1`). Host only.
  template <bool L2 = false>
  MPE_HOST_DEVICE void prefetch_row(index_t k) const {
    const index_t r = global_rows[k];
    if (slot_of_occ) {
      const index_t s = slot_of_occ[k];
      if (s >= 0) {
        prefetch_lines<false, L2>(cache.row(s), static_cast<std::size_t>(D) * sizeof(float));
        return;
      }
    }
    prefetch_lines<false, L2>(store + static_cast<std::size_t>(r) * stride, Storage::data_bytes(D));
  }
  /// Bags [j0, j1) with one lane on the host (HostBackend::for_each_lanes): as operator()(j)
  /// for each, or Paths::pool_range's per-range pooling (its per-bag setup done once).
  void host_range(index_t j0, index_t j1) const {
    if (open(gate) && Paths::pool_range(*this, j0, j1)) return;
    for (index_t j = j0; j < j1; ++j) (*this)(j);
  }
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
    if constexpr (has_chunk_load<Storage> && kLaneChunk == 4) {
      // Int8Rowwise store rows only, D and the stride multiples of 4: every chunk and the
      // scale and bias are aligned words, read without a branch.
      if (!slot_of_occ && D % 4 == 0 && stride % 4 == 0 &&
          (reinterpret_cast<std::uintptr_t>(store) & 3u) == 0) {
        if (weights) {
          pool_store_words<true>(begin, end, o, scale, inv, lane, lanes);
        } else {
          pool_store_words<false>(begin, end, o, scale, inv, lane, lanes);
        }
        return;
      }
    }
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float acc[kLaneChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (index_t i = begin; i < end; ++i) {
        MPE_TRIP();
        float x[kLaneChunk];
        const float w = load_chunk(i, c, m, x);
        add_chunk(x, w, acc);
      }
      if (scale)
        for (std::int32_t k = 0; k < m; ++k) acc[k] = num::mul(acc[k], inv);
      store_lane_chunk(o + c, m, acc);
    }
  }
  /// Laned store-only Int8Rowwise pooling of occurrences [begin, end) into o (D % 4 == 0,
  /// aligned rows): `Group` rows at a time, in three phases with no branch between them so
  /// that no load waits for another: the rows' ids (and weights), then each row's four codes
  /// and its scale and bias, then the decodes and adds in row order (add(mul(scale, q),
  /// bias), as the Reader; the same operations as one row at a time).
  template <bool Weighted>
  MPE_HOST_DEVICE void pool_store_words(index_t begin, index_t end, float* o, bool scale, float inv,
                                        std::int32_t lane, std::int32_t lanes) const {
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      index_t i = begin;
      const auto add_row = [&](std::uint32_t q, float sc, float bi, float w) {
        float x[4];
        decode_int8_word(q, sc, bi, x);
        MPE_UNROLL
        for (std::int32_t e = 0; e < 4; ++e)
          acc[e] = Weighted ? num::add(acc[e], num::mul(w, x[e])) : num::add(acc[e], x[e]);
      };
      for (; i + Group <= end; i += Group) {
        const std::uint8_t* row[Group];
        float w[Group];
        MPE_UNROLL
        for (std::int32_t q = 0; q < Group; ++q) {
          MPE_TRIP();
          row[q] = store + static_cast<std::size_t>(global_rows[i + q]) * stride;
          w[q] = Weighted ? weights[i + q] : 1.0f;
        }
        std::uint32_t code[Group];
        float sc[Group], bi[Group];
        MPE_UNROLL
        for (std::int32_t q = 0; q < Group; ++q) {
          code[q] = load_word(row[q] + c);
          sc[q] = num::bits_float(load_word(row[q] + D));
          bi[q] = num::bits_float(load_word(row[q] + D + 4));
        }
        MPE_UNROLL
        for (std::int32_t q = 0; q < Group; ++q) add_row(code[q], sc[q], bi[q], w[q]);
      }
      for (; i < end; ++i) {
        MPE_TRIP();
        const std::uint8_t* row = store + static_cast<std::size_t>(global_rows[i]) * stride;
        add_row(load_word(row + c), num::bits_float(load_word(row + D)),
                num::bits_float(load_word(row + D + 4)), Weighted ? weights[i] : 1.0f);
      }
      if (scale)
        for (std::int32_t e = 0; e < 4; ++e) acc[e] = num::mul(acc[e], inv);
      store_lane_chunk(o + c, 4, acc);
    }
  }
  /// Laned: elements [c, c + m) of occurrence i's row (its cache row, one 16-byte load in
  /// device code where aligned, or its store row decoded by decode_chunk) into x[0, m) (0
  /// beyond); returns its weight (1 without weights).
  MPE_HOST_DEVICE float load_chunk(index_t i, std::int32_t c, std::int32_t m, float* x) const {
    const index_t r = global_rows[i];
    const index_t s = slot_of(i);
    if (s >= 0) {
      const float* p = cache.row(s) + c;
      load_lane_chunk(p, m, x);
    } else {
      decode_chunk<Storage>(store + static_cast<std::size_t>(r) * stride, D, c, m, x);
    }
    return weights ? weights[i] : 1.0f;
  }
  /// acc[e] = acc[e] + w * x[e] (weighted) or acc[e] + x[e], e < kLaneChunk (the lanes of a
  /// partial chunk add zeros into accumulators they never store).
  MPE_HOST_DEVICE void add_chunk(const float* x, float w, float* acc) const {
    MPE_UNROLL
    for (std::int32_t e = 0; e < kLaneChunk; ++e)
      acc[e] = weights ? num::add(acc[e], num::mul(w, x[e])) : num::add(acc[e], x[e]);
  }
  /// Bag j with one lane (the host).
  MPE_HOST_DEVICE void operator()(index_t j) const {
    if (!open(gate)) return;
#ifndef __CUDA_ARCH__
    if (Paths::pool_range(*this, j, j + 1)) return;  // mean included
#endif
    index_t t, b;
    split_bag(j, B, t, b);
    float* o = output + (b * T + t) * D;
    const index_t begin = offsets[j], end = offsets[j + 1];
    for (std::int32_t d = 0; d < D; ++d) o[d] = 0.0f;
#ifndef __CUDA_ARCH__
    const index_t n_all = offsets[B * T];
#endif
    for (index_t i = begin; i < end; ++i) {
#ifndef __CUDA_ARCH__
      if (i + kPoolPrefetchAhead < n_all) prefetch_row(i + kPoolPrefetchAhead);
#endif
      const index_t r = global_rows[i];
      const index_t s = slot_of(i);
      const float w = weights ? weights[i] : 1.0f;
      if (s >= 0) {
        accumulate_f32(cache.row(s), D, w, o, weights != nullptr);
      } else if (weights) {
        RowAccumulate<Storage>::template run<true>(store + static_cast<std::size_t>(r) * stride, D, w, o);
      } else {
        RowAccumulate<Storage>::template run<false>(store + static_cast<std::size_t>(r) * stride, D, w, o);
      }
    }
    if (mean && end > begin) {
      const float inv = num::div(1.0f, static_cast<float>(end - begin));
      for (std::int32_t d = 0; d < D; ++d) o[d] = num::mul(o[d], inv);
    }
  }
};

}  // namespace mpe::detail
