// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/pooling.hpp
/// @brief Pooling of bags (sum, mean, per-sample weights) from cache slots or the store; the
/// host SIMD path is in detail/host/avx2/pool.hpp (AVX-512: detail/host/avx512/pool.hpp) and gives the same
/// bits. Per-item functors of CachedEmbedding (not public): trivially copyable, `MPE_HOST_DEVICE`, run by
/// HostBackend through Thrust and launched as kernels by CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/host/avx2/pool.hpp"
#include "mpe/detail/host/avx512/pool.hpp"
#include "mpe/detail/kernels/row_accumulate.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/statistics.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"

#if MPE_HOST_SIMD
// AVX2 + F16C members of PoolBags (as detail/host/avx2/pool.hpp's functions; undefined at the end).
#define MPE_POOL_SIMD_TARGET __attribute__((target("avx2,f16c")))
#endif

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
/// Where the CPU has AVX2 + F16C a bag is pooled by detail::simd::pool_bag, and where it
/// also has AVX-512 F/BW/VL a bag read from one row array by detail::simd512::pool_bag (or a
/// table's run of such bags by simd512::pool_bags_run, see pool_range_simd; same bits,
/// pinned by tests/host/test_pool_simd.cpp); elsewhere by the portable loop. A bag whose rows are all
/// cached is pooled as a store-only bag of the FP32 cache rows (the same operations). Launched laned
/// (`for_each_lanes`): with more than one lane (CudaBackend: a warp per bag) each lane
/// sums its element chunks over the bag's rows in registers, in the same row order, so
/// every output element gets the same operations as with one lane; store-only Int8Rowwise
/// bags (D % 4 == 0) load `Group` rows' ids, then their codes, scales and biases, before
/// the first decode and add (pool_store_words), so that many row reads are in flight per
/// lane; other bags take one row at a time (load_chunk, add_chunk).
template <class Storage, int Group = kPoolLaneGroup>
struct PoolBags {
  static_assert(Group >= 1 && Group <= 16, "PoolBags: Group rows in flight per lane, 1 .. 16");
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
  /// the host pools by pool_range_simd (host_simd_path). The storage of slot_of_occ, which is
  /// then not filled beforehand: pool_range_simd reads each occurrence's slot from the index
  /// into it a little ahead of the rows it pools (the index entries prefetched further ahead).
  index_t* probe_out = nullptr;
  MPE_HOST_DEVICE index_t slot_of(index_t i) const { return slot_of_occ ? slot_of_occ[i] : -1; }
  /// Whether the host pools through pool_range_simd now (the CPU has AVX2 + F16C, the path is
  /// on and Storage has a decoder): only then does probe_out pay (forward_inference).
  static bool host_simd_path() {
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<Storage>) return host_simd_enabled();
#endif
    return false;
  }
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
  /// for each, with the SIMD paths' per-bag setup done once for the range.
  void host_range(index_t j0, index_t j1) const {
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<Storage>) {
      if (host_simd_enabled() && open(gate)) {
        pool_range_simd(j0, j1);
        return;
      }
    }
#endif
    for (index_t j = j0; j < j1; ++j) (*this)(j);
  }
#if MPE_HOST_SIMD
  /// The SIMD path of bags [j0, j1) (host, where the CPU has AVX2 + F16C): per bag, store
  /// rows only (no cache), the FP32 cache rows as a store (every row of the bag cached),
  /// both by the AVX-512 kernel where the CPU has it (pool_rows), or each row from its slot
  /// or the store (`row`) by the AVX2 kernel. Two run loops replace the per-bag calls: runs
  /// of one-row bags (pool_single_run), and, on an AVX-512 host, each table's bags of an
  /// unweighted store-only sum of D = 16 .. 128 (simd512::pool_bags_run, where the range
  /// averages more than one row per bag).
  MPE_POOL_SIMD_TARGET void pool_range_simd(index_t j0, index_t j1) const {
    const index_t n_all = offsets[B * T];
    // Slots are read ahead only up to the range's end when this pass fills them (probe_out):
    // beyond it lie another thread's occurrences.
    const index_t n_slots = probe_out ? offsets[j1] : n_all;
    const std::size_t bytes = Storage::data_bytes(D);
    const simd::StoreRows store_src = simd::StoreRows::of(store, stride, bytes, global_rows, n_all);
    const auto* crows = reinterpret_cast<const std::uint8_t*>(cache.rows);
    const std::size_t cbytes = static_cast<std::size_t>(D) * sizeof(float);
    const simd::StoreRows cache_src = simd::StoreRows::of(crows, cbytes, cbytes, slot_of_occ, n_slots);
    // probe_out: occurrences [probed, range end) still to read from the slot index, read up
    // to `lead` occurrences past the rows about to be pooled (as far as any prefetch reads a
    // slot), each index entry prefetched kProbeLead occurrences before it is read.
    index_t probed = offsets[j0];
    const index_t lead = cache_src.dist;
    const auto probe_to = [this, &probed, n_slots](index_t upto) {
      if (!probe_out) return;
      constexpr index_t kProbeLead = 64;
      if (upto > n_slots) upto = n_slots;
      for (; probed < upto; ++probed) {
        // An aligned int32 lies in one line: one prefetch.
        if (probed + kProbeLead < n_slots)
          __builtin_prefetch(cache.slot_entry(global_rows[probed + kProbeLead]));
        probe_out[probed] = *cache.slot_entry(global_rows[probed]);
      }
    };
    const auto row = [this](index_t i, bool& cached) -> const std::uint8_t* {
      const index_t r = global_rows[i];
      const index_t s = slot_of(i);
      cached = s >= 0;
      return cached ? reinterpret_cast<const std::uint8_t*>(cache.row(s))
                    : store + static_cast<std::size_t>(r) * stride;
    };
    // Mixed bags: rows pool_rows_ahead(lines of a cache row) occurrences ahead (most of
    // their rows are cached), into L2 as the one-array kernels do: a bag mixes cached FP32
    // rows and store rows, so the distance is set by the longer (cache) row, and L2 rather
    // than L1 leaves room for the rows still being added (docs/host_kernels.md).
    const index_t mixed_dist = cache_src.dist;
    const auto ahead = [this, n_slots, mixed_dist](index_t i) {
      if (i + mixed_dist < n_slots) prefetch_row<true>(i + mixed_dist);
    };
    const simd::FnRows<decltype(row), decltype(ahead)> mixed_src{row, ahead};
    const bool wide = host_avx512_enabled();
    index_t t, b;
    split_bag(j0, B, t, b);
#if MPE_HOST_AVX512
    // Store rows only, unweighted sums of D = 16 .. 128 (a multiple of 16) columns, a range
    // averaging more than one row per bag (a range of one-row bags, a training step's one
    // index per bag, keeps pool_single_run below; a one-row bag here is add(0, x) either
    // way): each table's run of bags in one loop (simd512::pool_bags_run; the same bits as
    // bag by bag).
    if (wide && !slot_of_occ && !weights && !mean && simd512::bag_run_fits(D) &&
        offsets[j1] - offsets[j0] > j1 - j0) {
      const std::size_t o_stride = static_cast<std::size_t>(T) * static_cast<std::size_t>(D);
      for (index_t j = j0; j < j1;) {
        const index_t k = (j1 - j < B - b) ? j1 - j : B - b;  // bags left in table t
        simd512::pool_bags_run<Storage>(store_src, offsets + j, k, D, output + (b * T + t) * D, o_stride);
        j += k;
        b = 0;
        ++t;
      }
      return;
    }
#endif
    for (index_t j = j0; j < j1; ++j) {
      float* o = output + (b * T + t) * D;
      const index_t begin = offsets[j], end = offsets[j + 1];
      // A run of one-row bags of table t (the output rows T * D floats apart): one loop
      // (simd512::pool_single_rows, or simd::pool_single_rows without AVX-512). Mean
      // pooling leaves a one-row bag's sums as they are (mul(x, 1.0f) is x for every x the
      // sum add(0, .) can give).
      if (end - begin == 1) {
        index_t most = (j1 - j < B - b) ? j1 - j : B - b;
        // Reading the slots: runs of at most kProbeRun bags, so that a table of one-row bags
        // is not read whole before its first row is pooled.
        constexpr index_t kProbeRun = 64;
        if (probe_out && most > kProbeRun) most = kProbeRun;
        index_t k = 1;
        while (k < most && offsets[j + k + 1] - offsets[j + k] == 1) ++k;
        probe_to(begin + k + lead);
        if (slot_of_occ) {
          pool_single_run(wide, mixed_src, begin, k, o);
        } else {
          pool_single_run(wide, store_src, begin, k, o);
        }
        j += k - 1;
        b += k;
        if (b == B) {
          b = 0;
          ++t;
        }
        continue;
      }
      probe_to(end + lead);
      bool all_cached = slot_of_occ != nullptr;
      for (index_t i = begin; all_cached && i < end; ++i) all_cached = slot_of_occ[i] >= 0;
      if (!slot_of_occ) {
        pool_rows<Storage>(wide, store_src, begin, end, o);
      } else if (all_cached) {
        pool_rows<Fp32>(wide, cache_src, begin, end, o);
      } else {
        pool_one<Storage>(mixed_src, begin, end, o);
      }
      if (mean && end > begin) {
        const float inv = num::div(1.0f, static_cast<float>(end - begin));
        for (std::int32_t d = 0; d < D; ++d) o[d] = num::mul(o[d], inv);
      }
      if (++b == B) {
        b = 0;
        ++t;
      }
    }
  }
  /// `count` one-row bags from occurrence i0 of `src` (store_src, or mixed_src with slots),
  /// outputs T * D floats apart from o: by simd512::pool_single_rows where `wide`, else
  /// simd::pool_single_rows (the same bits).
  template <class Src>
  MPE_POOL_SIMD_TARGET void pool_single_run(bool wide, const Src& src, index_t i0, index_t count,
                                            float* o) const {
    const std::size_t o_stride = static_cast<std::size_t>(T) * static_cast<std::size_t>(D);
#if MPE_HOST_AVX512
    if (wide) {
      if (weights) {
        simd512::pool_single_rows<Storage, true>(src, i0, count, weights, D, o, o_stride);
      } else {
        simd512::pool_single_rows<Storage, false>(src, i0, count, nullptr, D, o, o_stride);
      }
      return;
    }
#else
    (void)wide;
#endif
    if (weights) {
      simd::pool_single_rows<Storage, true>(src, i0, count, weights, D, o, o_stride);
    } else {
      simd::pool_single_rows<Storage, false>(src, i0, count, nullptr, D, o, o_stride);
    }
  }
  /// One bag [begin, end) of one row array into o: by simd512::pool_bag where `wide` (the
  /// CPU has AVX-512 and it is on), else by simd::pool_bag.
  template <class S>
  MPE_POOL_SIMD_TARGET void pool_rows(bool wide, const simd::StoreRows& src, index_t begin, index_t end,
                                      float* o) const {
#if MPE_HOST_AVX512
    if (wide) {
      if (weights) {
        simd512::pool_bag<S, true>(src, begin, end, weights, D, o);
      } else {
        simd512::pool_bag<S, false>(src, begin, end, nullptr, D, o);
      }
      return;
    }
#else
    (void)wide;
#endif
    pool_one<S>(src, begin, end, o);
  }
  /// One bag [begin, end) into o by simd::pool_bag, rows decoded as format S.
  template <class S, class Src>
  MPE_POOL_SIMD_TARGET void pool_one(const Src& src, index_t begin, index_t end, float* o) const {
    if (weights) {
      simd::pool_bag<S, true>(src, begin, end, weights, D, o);
    } else {
      simd::pool_bag<S, false>(src, begin, end, nullptr, D, o);
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
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<Storage>) {
      if (host_simd_enabled()) {
        pool_range_simd(j, j + 1);  // mean included
        return;
      }
    }
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

#ifdef MPE_POOL_SIMD_TARGET
#undef MPE_POOL_SIMD_TARGET
#endif
