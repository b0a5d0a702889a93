// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/batch.hpp
/// @brief From a CSR batch to unique rows: expansion and index validation, the stable sort
/// keys, unique-row extraction, slot lookup, gradient coefficients and the lock floor.
/// Per-item functors of CachedEmbedding (not public): trivially copyable,
/// `MPE_HOST_DEVICE`, run by HostBackend through Thrust and launched as kernels by
/// CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <bit>
#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/prefetch.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/statistics.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"

namespace mpe::detail {

/// Per bag j = t*B + b: validates its indices against table t's rows, and writes each
/// occurrence's global row and bag. Does nothing when the record says the offsets are
/// malformed (CheckOffsets ran before, in stream order). Laned (`for_each_lanes`, which
/// CachedEmbedding uses on a lane_width > 1 backend when bags average 4 or more
/// occurrences): lane `lane` of `lanes` takes occurrences begin + lane, + lanes, ..., so a
/// warp reads and writes a bag's occurrences contiguously; the record's first out-of-range
/// occurrence is the same atomic minimum either way.
struct ExpandBags {
  const index_t* indices;        // (n) local row ids
  const index_t* offsets;        // (T*B + 1)
  const index_t* table_offsets;  // (T + 1) first global row of each table
  index_t B;
  index_t* global_rows;  // (n)
  index_t* bag_of;       // (n)
  CallRecord* rec;       // offsets verdict in; atomic min of the first out-of-range occurrence out
  MPE_HOST_DEVICE void operator()(index_t j) const { (*this)(j, 0, 1); }
  MPE_HOST_DEVICE void operator()(index_t j, std::int32_t lane, std::int32_t lanes) const {
    if (rec->pos[kOffsetsFirst] != kNoError || rec->pos[kOffsetsLast] != kNoError ||
        rec->pos[kOffsetsOrder] != kNoError) {
      return;
    }
    const index_t t = j / B;
    const index_t first = table_offsets[t];
    const auto rows = static_cast<std::uint64_t>(table_offsets[t + 1] - first);
    const index_t begin = offsets[j], end = offsets[j + 1];
    // Branch-free (vectorizable) expansion; an out-of-range index (negative ones wrap to
    // large unsigned values) reads the table's first row and is reported below.
    bool bad = false;
    for (index_t i = begin + lane; i < end; i += lanes) {
      MPE_TRIP();
      const index_t idx = indices[i];
      const bool ok = static_cast<std::uint64_t>(idx) < rows;
      global_rows[i] = first + (ok ? idx : 0);
      bag_of[i] = j;
      bad |= !ok;
    }
    if (bad) {  // the lane's first out-of-range occurrence
      index_t i = begin + lane;
      while (static_cast<std::uint64_t>(indices[i]) < rows) i += lanes;
      atomic_min(&rec->pos[kIndex], i);
    }
  }
};

/// Copies keys and writes the identity permutation (sort input). A batch that failed
/// validation (closed gate) sorts zeros instead of rows never written.
struct PrepareSort {
  const index_t* keys_in;
  index_t* keys;
  index_t* positions;
  const index_t* gate;  // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t i) const {
    keys[i] = open(gate) ? keys_in[i] : 0;
    positions[i] = i;
  }
};

/// heads[i] = 1 where a run of equal sorted keys starts.
struct MarkHeads {
  const index_t* sorted_keys;
  index_t* heads;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    heads[i] = (i == 0 || sorted_keys[i] != sorted_keys[i - 1]) ? 1 : 0;
  }
};

/// Single item after the scan: U = rank[n-1] + heads[n-1] into *count, seg_start[U] = n.
struct CountUnique {
  const index_t* heads;
  const index_t* head_rank;
  index_t n;
  index_t* count;      // (1) U
  index_t* seg_start;  // (U + 1)
  MPE_HOST_DEVICE void operator()(index_t) const {
    const index_t U = head_rank[n - 1] + heads[n - 1];
    *count = U;
    seg_start[U] = n;
  }
};

/// For each run head: unique row and run start; for every sorted position, the
/// occurrence's unique index.
struct ScatterUnique {
  const index_t* sorted_keys;
  const index_t* sorted_pos;
  const index_t* heads;
  const index_t* head_rank;  // exclusive scan of heads
  index_t* uniq;             // (U)
  index_t* seg_start;        // (U + 1)
  index_t* occ_to_unique;    // (n)
  MPE_HOST_DEVICE void operator()(index_t k) const {
    const index_t u = head_rank[k] + heads[k] - 1;
    if (heads[k]) {
      uniq[u] = sorted_keys[k];
      seg_start[u] = k;
    }
    occ_to_unique[sorted_pos[k]] = u;
  }
};

/// Single item (host, one thread): the batch's unique rows by a bitmap over the table's
/// rows instead of a sort, giving what PrepareSort .. ScatterUnique give except `sorted_pos`
/// and `seg_start`: U, the unique rows in ascending order and each occurrence's unique
/// index. (Such a batch's backward scatters its gradients by occ_to_unique and needs no
/// run starts; SealBackward counts an overflowing row's occurrences itself.) Work: n bit
/// sets, a walk of the W words, n rank lookups; sort_unique takes it where
/// W <= kBitmapWordsPerOccurrence * n. A closed gate
/// makes every row 0 (as PrepareSort). Memory: `bits` and `word_rank` hold W entries each;
/// `bits` is all zero on entry and is left all zero.
template <class Paths = PortablePaths>
struct BitmapUnique {
  const index_t* rows;     // (n) global rows, below 64 W
  index_t n;               // > 0
  const index_t* gate;     // batch ok flag, or null
  std::uint64_t* bits;     // (W) bit r % 64 of word r / 64: row r occurs
  index_t* word_rank;      // (W) unique rows in the words before
  index_t W;               // words: ceil(rows of the table / 64)
  index_t* count;          // (1) U
  index_t* uniq;           // (U)
  index_t* occ_to_unique;  // (n)
  /// The pass: Paths::bitmap_unique runs `run` with its popcount (HostPaths: POPCNT where the
  /// host SIMD paths are on).
  void operator()(index_t) const { Paths::bitmap_unique(*this); }
  /// std::popcount (the portable count of run).
  struct PortablePopcount {
    /// The set bits of x.
    [[gnu::always_inline]] inline index_t operator()(std::uint64_t x) const { return std::popcount(x); }
  };
  /// The pass with `popcount` counting a word's set bits; inlined always, so a caller compiled
  /// for POPCNT expands it there.
  template <class Popcount>
  [[gnu::always_inline]] inline void run(Popcount popcount) const {
    // Locals: the stores to bits (uint64_t) could alias the members otherwise.
    const bool ok = open(gate);
    const index_t m = n, words = W;
    const index_t* const in = rows;
    std::uint64_t* const bm = bits;
    index_t* const wr = word_rank;
    index_t* const un = uniq;
    index_t* const o2u = occ_to_unique;
    for (index_t i = 0; i < m; ++i) {
      const auto r = static_cast<std::uint64_t>(ok ? in[i] : 0);
      bm[r >> 6] |= std::uint64_t{1} << (r & 63);
    }
    index_t U = 0;
    for (index_t w = 0; w < words; ++w) {
      wr[w] = U;
      for (std::uint64_t x = bm[w]; x != 0; x &= x - 1) un[U++] = w * 64 + std::countr_zero(x);
    }
    for (index_t i = 0; i < m; ++i) {
      const auto r = static_cast<std::uint64_t>(ok ? in[i] : 0);
      const std::uint64_t below = bm[r >> 6] & ((std::uint64_t{1} << (r & 63)) - 1);
      o2u[i] = wr[r >> 6] + popcount(below);
    }
    for (index_t u = 0; u < U; ++u) bm[un[u] >> 6] = 0;
    *count = U;
  }
};

/// sort_unique dedups by BitmapUnique (host, one thread) while the bitmap's words are at
/// most this many per occurrence (its walk then costs about what the sort's passes do).
inline constexpr index_t kBitmapWordsPerOccurrence = 4;

/// Per-occurrence gradient coefficient: the per-sample weight, or 1/L for mean pooling
/// (plain sum pooling needs none: backward then uses grad_output as it is).
struct Coefficients {
  const index_t* offsets;
  const index_t* bag_of;
  const float* weights;  // (n) or null
  bool mean;
  float* coef;          // (n)
  const index_t* gate;  // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t i) const {
    if (!open(gate)) return;
    if (weights) {
      coef[i] = weights[i];
    } else if (mean) {
      const index_t j = bag_of[i];
      coef[i] = num::div(1.0f, static_cast<float>(offsets[j + 1] - offsets[j]));
    }
  }
};

/// Cache slot of each unique row of a batch, looked up in its set (-1: not resident).
/// Rebuilds a prefetched batch's slot assignment after load(): between a populate and the
/// next one, lines are only ever dropped, so the lookup equals what the populate decided
/// for every row still resident (and a dropped row is read from the store either way).
struct LookupSlots {
  const index_t* uniq;
  CacheRef cache;
  index_t* slot_of_unique;  // (U)
  const index_t* count;     // (1) U
  MPE_HOST_DEVICE void operator()(index_t u) const {
    if (u >= *count) return;
    slot_of_unique[u] = cache.find(uniq[u]);
  }
};

/// Each occurrence's cache slot, looked up in its row's set (-1: not resident), for a pooling
/// that populates nothing (forward_inference): slot_of_occ[i] = cache.find(global_rows[i]).
/// Laned with more than one lane: slot_of_occ must be -1 beforehand and lane `lane` of
/// `lanes` scans ways lane, lane + lanes, ...; a row has at most one slot, so the one lane
/// that finds it writes it. On the host (host_range, one lane) the set kProbeAhead
/// occurrences ahead is prefetched while this one is scanned (Paths::find_in_set: HostPaths
/// scans four tags per compare where the CPU has AVX2), so the scans do not wait on their tags one after
/// another. With a slot index (CacheRef::slot_of_row) each occurrence's slot is one load of it instead (where
/// the host pools by its SIMD path, forward_inference's pooling pass reads the index itself,
/// PoolBags::probe_out, and this pass does not run). Also forward()'s lookup under
/// EmbeddingConfig::defer_admission, with the batch's gate (a failed batch writes nothing).
template <class Paths = PortablePaths>
struct ProbeSlots {
  static constexpr index_t kProbeAhead = 16;
  const index_t* global_rows;     // (n)
  CacheRef cache;                 // num_sets > 0
  index_t* slot_of_occ;           // (n) out; -1 beforehand where lanes scan (more than one, no index)
  const index_t* gate = nullptr;  // batch ok flag, or null (forward_inference: validated)
  MPE_HOST_DEVICE void operator()(index_t i, std::int32_t lane, std::int32_t lanes) const {
    if (!open(gate)) return;
    const index_t r = global_rows[i];
    if (cache.slot_of_row) {  // one load: lane 0 writes it
      if (lane == 0) slot_of_occ[i] = *cache.slot_entry(r);
      return;
    }
    const index_t base = cache.set_of(r) * cache.ways;
    if (lanes == 1) {
      slot_of_occ[i] = cache.find_in_set(base, r);
      return;
    }
    for (std::int32_t w = lane; w < cache.ways; w += lanes) {
      MPE_TRIP();
      if (cache.tags[base + w] == r) slot_of_occ[i] = base + w;
    }
  }
  void host_range(index_t i0, index_t i1) const {
    if (!open(gate)) return;
    if (cache.slot_of_row) {  // the slot index: one load each
      for (index_t i = i0; i < i1; ++i) {
        // An aligned int32 lies in one line: one prefetch, no line loop.
        if (i + kProbeAhead < i1) __builtin_prefetch(cache.slot_entry(global_rows[i + kProbeAhead]));
        slot_of_occ[i] = *cache.slot_entry(global_rows[i]);
      }
      return;
    }
    const std::size_t set_bytes = sizeof(*cache.tags) * static_cast<std::size_t>(cache.ways);
    index_t base[kProbeAhead];  // ring: the set base of occurrence i at i % kProbeAhead
    const auto ahead = [&](index_t i) {
      const index_t b = cache.set_of(global_rows[i]) * cache.ways;
      base[i % kProbeAhead] = b;
      prefetch_lines(cache.tags + b, set_bytes);
    };
    for (index_t i = i0; i < i1 && i < i0 + kProbeAhead; ++i) ahead(i);
    const bool fast = Paths::fast();
    for (index_t i = i0; i < i1; ++i) {
      const index_t b = base[i % kProbeAhead];
      if (i + kProbeAhead < i1) ahead(i + kProbeAhead);
      slot_of_occ[i] = Paths::find_in_set(cache, b, global_rows[i], fast);
    }
  }
};

/// Each occurrence's cache slot for pooling: its unique row's slot from the populate, or -1
/// when the row stayed uncached or (with `check_tags`: the populate ran in an earlier call)
/// set_weights dropped the line since, so the slot's tag is no longer the row. One
/// sequential pass, so pooling follows one index per occurrence.
struct OccurrenceSlots {
  const index_t* global_rows;     // (n)
  const index_t* occ_to_unique;   // (n)
  const index_t* slot_of_unique;  // (U)
  CacheRef cache;
  bool check_tags;
  index_t* slot_of_occ;  // (n)
  const index_t* gate;   // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t i) const {
    if (!open(gate)) return;
    const index_t s = slot_of_unique[occ_to_unique[i]];
    slot_of_occ[i] = (s >= 0 && (!check_tags || cache.tags[s] == global_rows[i])) ? s : -1;
  }
};

/// Single item before a populate: the lock floor is the number of the batch awaiting
/// backward, unless that batch failed validation (Validation::Deferred: it locks nothing),
/// else the populating batch's own number.
struct SetLockFloor {
  Counters* c;
  const index_t* awaiting_flags;  // (kNumFlags) the batch awaiting backward, or null
  std::uint64_t awaiting_id, own_id;
  MPE_HOST_DEVICE void operator()(index_t) const {
    c->lock_floor = (awaiting_flags && awaiting_flags[kFlagOk] != 0) ? awaiting_id : own_id;
  }
};

}  // namespace mpe::detail
