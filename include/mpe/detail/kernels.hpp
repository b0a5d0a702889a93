// SPDX-License-Identifier: Apache-2.0
/// @file kernels.hpp
/// @brief Per-item functors of CachedEmbedding (not public). Each is trivially copyable
/// and `MPE_HOST_DEVICE`: HostBackend runs them through Thrust's OMP policy, CudaBackend
/// launches them as kernels. Every functor writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/detail/atomics.hpp"
#include "mpe/detail/pool_simd.hpp"
#include "mpe/detail/row_accumulate.hpp"
#include "mpe/detail/state_ref.hpp"
#include "mpe/detail/validation.hpp"
#include "mpe/embedding_ref.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/optim/optimizer.hpp"
#include "mpe/types.hpp"

namespace mpe::detail {

/// Outcome bits of one unique row in populate / backward.
enum Outcome : std::uint8_t {
  kHit = 1,
  kFilled = 2,
  kConflict = 4,
  kRejected = 8,
  kEvicted = 16,
  kWroteBack = 32,
  kSaturated = 64,
};

/// Per bag j = t*B + b: validates its indices against table t's rows, and writes each
/// occurrence's global row and bag. Does nothing when the record says the offsets are
/// malformed (CheckOffsets ran before, in stream order).
struct ExpandBags {
  const index_t* indices;        // (n) local row ids
  const index_t* offsets;        // (T*B + 1)
  const index_t* table_offsets;  // (T + 1) first global row of each table
  index_t B;
  index_t* global_rows;  // (n)
  index_t* bag_of;       // (n)
  CallRecord* rec;       // offsets verdict in; atomic min of the first out-of-range occurrence out
  MPE_HOST_DEVICE void operator()(index_t j) const {
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
    for (index_t i = begin; i < end; ++i) {
      const index_t idx = indices[i];
      const bool ok = static_cast<std::uint64_t>(idx) < rows;
      global_rows[i] = first + (ok ? idx : 0);
      bag_of[i] = j;
      bad |= !ok;
    }
    if (bad) {  // the bag's first out-of-range occurrence
      index_t i = begin;
      while (static_cast<std::uint64_t>(indices[i]) < rows) ++i;
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

/// Forward pooling of bag j = t*B + b into output (B, T*D) at [b*T*D + t*D, +D):
/// elements summed in index order (weighted: add(acc, mul(w, x))); mean multiplies by
/// 1.0f / L; an empty bag gives zeros. Rows come from their cache slot or the store.
/// `slot_of_occ` may be null (no cache): then every row is read from the store; with
/// `lookup` the slot is found by scanning the row's set (forward_inference).
/// On the host the rows kPoolPrefetchAhead occurrences ahead are prefetched, and where the
/// CPU has AVX2 + F16C the bag is pooled by detail::simd::pool_bag (same bits, pinned by
/// tests/test_pool_simd.cpp); elsewhere, and on the device, by the portable loop.
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
        const simd::StoreRows src{store, stride, Storage::data_bytes(D), global_rows, n_all};
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
  MPE_HOST_DEVICE void operator()(index_t j) const {
    if (!open(gate)) return;
    const index_t t = j / B, b = j - (j / B) * B;
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

/// Backward, first pass, for unique row u: g = sum over its occurrences in position order
/// of coef * grad_output[bag] into `grad`; then OptimizerRule<Opt>::step on a copy of the
/// row's state: the new state goes to `new_state` and `grad` is replaced by the update u
/// (applied as w - u). Changes no state of the object: a row whose summed gradient or new
/// state is not finite, or whose update is NaN (float overflow of finite inputs), records
/// its unique index in rec->pos[kOverflow] (smallest u), so the whole step can be refused
/// or skipped before anything is written. Does nothing when grad_output itself failed its
/// check (rec->pos[kGrad]) or the batch failed validation.
template <class Opt>
struct AccumulateRows {
  using Rule = OptimizerRule<Opt>;
  const index_t* uniq;
  const index_t* seg_start;   // (U + 1)
  const index_t* sorted_pos;  // (n)
  const index_t* bag_of;      // (n)
  const float* coef;          // (n), or null for plain sum pooling (coefficient 1)
  const float* grad_output;   // (B, T*D)
  index_t B, T;
  std::int32_t D;
  Opt opt;
  const float* opt_state;     // (rows, S) with S = Rule::state_floats(D); null before the first step: zeros
  float* grad;                // (U, D) workspace: summed gradient, then the update
  float* new_state;           // (U, S) workspace
  const std::uint64_t* step;  // (1) completed backward() calls; this step is *step + 1
  CallRecord* rec;
  const index_t* count;  // (1) U; items u >= U do nothing
  const index_t* gate;   // ok flag of the batch, or null
  // Compact state precision (opt_state is then null): the row's state is read from its
  // cache slot (FP32) or decoded from the store, and stepped in place in new_state.
  StateRef state{};
  CacheRef cache{};
  const index_t* slot_of_unique = nullptr;  // (U) or null
  MPE_HOST_DEVICE void operator()(index_t u) const {
    if (u >= *count || !open(gate) || rec->pos[kGrad] != kNoError) return;
    const index_t r = uniq[u];
    float* g = grad + u * D;
    for (index_t k = seg_start[u]; k < seg_start[u + 1]; ++k) {
      const index_t i = sorted_pos[k];
      const index_t j = bag_of[i];
      const index_t t = j / B, b = j - (j / B) * B;
      const float* go = grad_output + (b * T + t) * D;
      const bool first = k == seg_start[u];
      if (coef) {
        const float c = coef[i];
        if (first) {
          for (std::int32_t d = 0; d < D; ++d) g[d] = num::mul(c, go[d]);
        } else {
          for (std::int32_t d = 0; d < D; ++d) g[d] = num::add(g[d], num::mul(c, go[d]));
        }
      } else if (first) {  // coefficient 1: mul(1, x) == x, the same bits without the multiply
        for (std::int32_t d = 0; d < D; ++d) g[d] = go[d];
      } else {
        for (std::int32_t d = 0; d < D; ++d) g[d] = num::add(g[d], go[d]);
      }
    }
    bool ok = true;
    for (std::int32_t d = 0; d < D; ++d) ok = ok && num::is_finite(g[d]);
    if (!ok) {  // the summed gradient overflowed: keep it (SealBackward reports it)
      atomic_min(&rec->pos[kOverflow], u);
      return;
    }
    const std::int64_t S = Rule::state_floats(D);
    float* st = new_state + u * S;
    if (state.active()) {
      // The same slot lookup as ApplyRows (no populate runs between the two passes).
      index_t s = slot_of_unique ? slot_of_unique[u] : -1;
      if (s < 0 || cache.tags[s] != r) s = cache.find(r);
      state.read(r, s, st);
      Rule::step(opt, st, st, g, D, *step + 1);
    } else if (opt_state) {
      Rule::step(opt, opt_state + r * S, st, g, D, *step + 1);
    } else {  // before the first applied step every state value is 0
      for (std::int64_t k = 0; k < S; ++k) st[k] = 0.0f;
      Rule::step(opt, st, st, g, D, *step + 1);
    }
    for (std::int64_t k = 0; k < S; ++k) ok = ok && num::is_finite(st[k]);
    for (std::int32_t d = 0; d < D; ++d) ok = ok && g[d] == g[d];  // an update of +-inf saturates; NaN never
    if (!ok) atomic_min(&rec->pos[kOverflow], u);
  }
};

/// Backward, second pass, for unique row u (after the verdict; gated on the batch's apply
/// flag): stores the new optimizer state and applies w -= u on the cache row (marked dirty)
/// or on the store row (dequantize, update, quantize with Rounding at site StoreUpdate).
/// The update u and the state come from AccumulateRows.
template <class Storage, class Rounding>
struct ApplyRows {
  const index_t* uniq;
  const index_t* slot_of_unique;  // (U) or null
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  std::int32_t D;
  std::int64_t state_floats;  // S per row
  float* opt_state;           // (rows, S) or null when S = 0
  float* update;              // (U, D) the updates (the store path reuses it as scratch)
  const float* new_state;     // (U, S)
  std::uint64_t seed;
  const std::uint64_t* step;  // (1) completed backward() calls
  std::uint8_t* outcome;      // (U)
  const index_t* count;       // (1) U; items u >= U do nothing
  const index_t* gate;        // apply flag of the batch, or null
  StateRef state{};           // compact state precision (opt_state is then null)
  MPE_HOST_DEVICE void operator()(index_t u) const {
    if (u >= *count || !open(gate)) return;
    const index_t r = uniq[u];
    float* up = update + u * D;
    index_t s = slot_of_unique ? slot_of_unique[u] : -1;
    // A row uncached at forward (conflict or policy rejection) may have been filled since
    // by a prefetch: update it where it lives now, or the store update would be lost.
    if (s < 0 || cache.tags[s] != r) s = cache.find(r);
    if (state.active()) {  // into the cache slot beside the row, or rounded into the store
      state.template write<Rounding>(r, s, new_state + u * state_floats, static_cast<std::uint32_t>(*step));
    } else {
      for (std::int64_t k = 0; k < state_floats; ++k)
        opt_state[r * state_floats + k] = new_state[u * state_floats + k];
    }
    if (s >= 0) {
      // The cached FP32 row keeps to the store format's range (as a store update does),
      // so it never overflows to inf and always round-trips through set_weights. The
      // update is never NaN here (AccumulateRows), so an overflow is +-inf (clamped).
      float* w = cache.row(s);
      bool sat = false;
      for (std::int32_t d = 0; d < D; ++d)
        w[d] = detail::sanitize(num::sub(w[d], up[d]), Storage::limit, sat);
      cache.dirty[s] = 1;
      outcome[u] = sat ? kSaturated : 0;
    } else {
      std::uint8_t* row = store + static_cast<std::size_t>(r) * stride;
      const typename Storage::Reader rd(row, D);
      for (std::int32_t d = 0; d < D; ++d) up[d] = num::sub(rd[d], up[d]);
      const num::RowRng rng{seed, static_cast<std::uint64_t>(r), static_cast<std::uint32_t>(*step),
                            num::RoundingSite::StoreUpdate};
      outcome[u] = Storage::template store<Rounding>(up, D, row, rng) ? kSaturated : 0;
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

/// Reads global rows [first, first + count) through the cache into out (count, D), as
/// EmbeddingRef::read_row does.
template <class Storage>
struct ReadRows {
  EmbeddingRef<Storage> ref;
  index_t first;
  float* out;
  MPE_HOST_DEVICE void operator()(index_t i) const { ref.read_row(first + i, out + i * ref.dim); }
};

/// First element of rows (count, D) that Storage cannot hold (position i*D + d).
template <class Storage>
struct CheckRepresentable {
  const float* src;
  std::int32_t D;
  index_t* bad_pos;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const std::int32_t d = Storage::find_unrepresentable(src + i * D, D);
    if (d >= 0) atomic_min(bad_pos, i * D + d);
  }
};

/// Writes rows [first, first + count) into the store with Rounding (site SetWeights or
/// Init) and drops their cache lines without writing them back.
template <class Storage, class Rounding>
struct WriteRows {
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  index_t first;
  const float* src;  // (count, D)
  std::uint64_t seed;
  const std::uint64_t* step;  // (1) completed backward() calls
  num::RoundingSite site;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const index_t r = first + i;
    const num::RowRng rng{seed, static_cast<std::uint64_t>(r), static_cast<std::uint32_t>(*step), site};
    Storage::template store<Rounding>(src + i * cache.dim, cache.dim,
                                      store + static_cast<std::size_t>(r) * stride, rng);
    if (const index_t s = cache.find(r); s >= 0) cache.drop(s);
  }
};

/// Drops the cache line of slot s if it holds a global row in [first, first + count),
/// without write-back (the rows were replaced in the store).
struct DropRows {
  CacheRef cache;
  index_t first, count;
  MPE_HOST_DEVICE void operator()(index_t s) const {
    const index_t r = cache.tags[s];
    if (r >= first && r < first + count) cache.drop(s);
  }
};

/// Fills rows with uniform values in [low, high) from Philox (counter: the row, step 0,
/// site Init, one block per 4 elements), written to `out` (count, D) in FP32.
struct UniformRows {
  std::uint64_t seed;
  index_t first;
  std::int32_t D;
  float low, high;
  float* out;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const num::RowRng rng{seed ^ 0x9e3779b97f4a7c15ull, static_cast<std::uint64_t>(first + i), 0,
                          num::RoundingSite::Init};
    const float span = num::sub(high, low);
    for (std::int32_t g = 0; 4 * g < D; ++g) {
      const num::Uint4 w = rng.draw(static_cast<std::uint32_t>(g));
      for (std::int32_t d = 4 * g; d < D && d < 4 * g + 4; ++d) {
        const float u = num::mul(static_cast<float>(num::word(w, d - 4 * g) >> 8), 0x1p-24f);
        float v = num::add(low, num::mul(span, u));
        out[i * D + d] = v < high ? v : low;
      }
    }
  }
};

/// Writes back one dirty slot (site Flush) and clears its dirty bit.
template <class Storage, class Rounding>
struct FlushSlots {
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  std::uint64_t seed;
  const std::uint64_t* step;  // (1) completed backward() calls
  std::uint8_t* outcome;      // (slots)
  StateRef state{};           // compact optimizer state: written back with the row
  MPE_HOST_DEVICE void operator()(index_t s) const {
    outcome[s] = 0;
    if (cache.tags[s] < 0 || !cache.dirty[s]) return;
    const index_t r = cache.tags[s];
    const num::RowRng rng{seed, static_cast<std::uint64_t>(r), static_cast<std::uint32_t>(*step),
                          num::RoundingSite::Flush};
    const bool sat = Storage::template store<Rounding>(cache.row(s), cache.dim,
                                                       store + static_cast<std::size_t>(r) * stride, rng);
    state.template write_back<Rounding>(s, r, static_cast<std::uint32_t>(*step),
                                        num::RoundingSite::StateFlush);
    cache.dirty[s] = 0;
    outcome[s] = static_cast<std::uint8_t>(kWroteBack | (sat ? kSaturated : 0));
  }
};

/// Integer tallies of outcome bits (summed exactly by the backend).
struct OutcomeCounts {
  std::uint64_t hits = 0, filled = 0, conflicts = 0, rejected = 0, evicted = 0, wrote_back = 0, saturated = 0;
  MPE_HOST_DEVICE OutcomeCounts operator+(const OutcomeCounts& o) const {
    return {hits + o.hits,       filled + o.filled,         conflicts + o.conflicts, rejected + o.rejected,
            evicted + o.evicted, wrote_back + o.wrote_back, saturated + o.saturated};
  }
};

struct CountOutcome {
  const std::uint8_t* outcome;
  const index_t* count;  // (1) number of valid items, or null: all
  const index_t* gate;   // or null
  MPE_HOST_DEVICE OutcomeCounts operator()(index_t i) const {
    if ((count && i >= *count) || !open(gate)) return {};
    const std::uint8_t c = outcome[i];
    return {
        static_cast<std::uint64_t>((c & kHit) != 0),      static_cast<std::uint64_t>((c & kFilled) != 0),
        static_cast<std::uint64_t>((c & kConflict) != 0), static_cast<std::uint64_t>((c & kRejected) != 0),
        static_cast<std::uint64_t>((c & kEvicted) != 0),  static_cast<std::uint64_t>((c & kWroteBack) != 0),
        static_cast<std::uint64_t>((c & kSaturated) != 0)};
  }
};

/// Counters of a CachedEmbedding that device work updates, in backend memory: the
/// statistics, the step, the cache policy's decay clock and the scratch they are summed in.
struct Counters {
  CacheStats stats;
  std::uint64_t step;         ///< completed backward() calls (Philox counter word)
  std::uint64_t decay_clock;  ///< unique rows since the policy's last decay (policies that decay)
  std::uint64_t decays_due;   ///< decays due after this populate
  std::uint64_t lock_floor;   ///< the running populate's lock floor (SetLockFloor)
  OutcomeCounts tally;        ///< last reduce_to result
};

/// Which call's tally FoldCounts adds to the statistics.
enum class Fold : std::int32_t { Populate, Backward, Flush };

/// Single item: adds the tally (and for populate the lookups and unique rows) to the
/// statistics; backward also advances the step. Nothing when the gate is closed.
struct FoldCounts {
  Counters* c;
  Fold kind;
  index_t n;                // populate: occurrences
  const index_t* unique;    // populate: (1) U, or null without a cache
  std::uint64_t row_bytes;  // Storage::data_bytes(D)
  const index_t* gate;      // or null
  MPE_HOST_DEVICE void operator()(index_t) const {
    if (!open(gate)) return;
    const OutcomeCounts t = c->tally;
    CacheStats& s = c->stats;
    if (kind == Fold::Populate) {
      s.lookups += static_cast<std::uint64_t>(n);
      if (!unique) return;
      const auto U = static_cast<std::uint64_t>(*unique);
      s.unique_rows += U;
      s.hits += t.hits;
      s.misses += U - t.hits;
      s.conflict_misses += t.conflicts;
      s.lfu_rejections += t.rejected;
      s.evictions += t.evicted;
    } else if (kind == Fold::Backward) {
      c->step += 1;
    }
    if (kind != Fold::Backward) {
      s.writebacks += t.wrote_back;
      s.bytes_written_back += t.wrote_back * row_bytes;
    }
    if (kind == Fold::Populate) s.bytes_filled += t.filled * row_bytes;
    s.saturated_rows += t.saturated;
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
