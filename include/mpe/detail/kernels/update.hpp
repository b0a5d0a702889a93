// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/update.hpp
/// @brief backward()'s two passes: AccumulateRows (summed gradient -> the optimizer's update
/// and new state in workspace, checked) and ApplyRows (write to the cache row or the store).
/// Per-item functors of CachedEmbedding (not public): trivially copyable,
/// `MPE_HOST_DEVICE`, run by HostBackend through Thrust and launched as kernels by
/// CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/gradient_sum.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/prefetch.hpp"
#include "mpe/detail/kernels/range_growth.hpp"
#include "mpe/detail/kernels/row_accumulate.hpp"
#include "mpe/detail/kernels/scatter_gradients.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/statistics.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/detail/kernels/warp.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/optim/optimizer.hpp"
#include "mpe/optim/state_precision.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe::detail {

/// True when every value of x[0, m) is finite. Branch-free over the run (an OR of
/// (bits & 0x7fffffff) + 2^23, whose bit 31 is set exactly for an all-ones exponent), so
/// compilers vectorize it.
MPE_HOST_DEVICE inline bool all_finite(const float* x, std::int64_t m) {
  std::uint32_t acc = 0;
  for (std::int64_t d = 0; d < m; ++d) acc |= (num::float_bits(x[d]) & 0x7fffffffu) + 0x00800000u;
  return (acc >> 31) == 0;
}

/// True when no value of x[0, m) is NaN (|bits| > 0x7f800000, i.e. (bits & 0x7fffffff) +
/// 0x007fffff reaches bit 31); branch-free like all_finite.
MPE_HOST_DEVICE inline bool no_nan(const float* x, std::int64_t m) {
  std::uint32_t acc = 0;
  for (std::int64_t d = 0; d < m; ++d) acc |= (num::float_bits(x[d]) & 0x7fffffffu) + 0x007fffffu;
  return (acc >> 31) == 0;
}

/// w[d] = sanitize(w[d] - u[d], limit) for d < D (detail::sanitize: NaN -> 0, beyond
/// +-limit -> +-limit), u[d] = up[d], or num::mul(lr, up[d]) when Scaled; returns whether a
/// value was changed. The differences are computed in one branch-free pass that also tests
/// them (|x| > limit or NaN: (bits & 0x7fffffff) + (0x7fffffff - bits(limit)) reaches bit
/// 31), and only a row with such a value is sanitized in a second pass: the same values as
/// sanitizing each difference.
template <bool Scaled>
MPE_HOST_DEVICE inline bool sub_update_within_limit(float* w, float lr, const float* up, std::int32_t D,
                                                    float limit) {
  const std::uint32_t margin = 0x7fffffffu - num::float_bits(limit);
  std::uint32_t acc = 0;
  for (std::int32_t d = 0; d < D; ++d) {
    float u = up[d];
    if constexpr (Scaled) u = num::mul(lr, u);
    const float x = num::sub(w[d], u);
    w[d] = x;
    acc |= (num::float_bits(x) & 0x7fffffffu) + margin;
  }
  bool sat = false;
  if ((acc >> 31) != 0) {
    for (std::int32_t d = 0; d < D; ++d) w[d] = detail::sanitize(w[d], limit, sat);
  }
  return sat;
}

/// sub_update_within_limit on one lane's chunk, elements [0, m) of w and up (m <=
/// kLaneChunk): the chunk read and written whole (load_lane_chunk / store_lane_chunk: one
/// 16-byte access each in device code) and computed in registers over kLaneChunk elements.
/// The padding past m is 0 - 0 (or 0 - lr * 0) = 0, within every limit, so the values and
/// the flag are those of the m elements.
template <bool Scaled>
MPE_HOST_DEVICE inline bool sub_update_chunk(float* w, float lr, const float* up, std::int32_t m,
                                             float limit) {
  float x[kLaneChunk], u[kLaneChunk];
  load_lane_chunk(w, m, x);
  load_lane_chunk(up, m, u);
  const bool sat = sub_update_within_limit<Scaled>(x, lr, u, kLaneChunk, limit);
  store_lane_chunk(w, m, x);
  return sat;
}

/// w[d] = sanitize(w[d] - up[d], limit) for d < D; see sub_update_within_limit.
MPE_HOST_DEVICE inline bool sub_within_limit(float* w, const float* up, std::int32_t D, float limit) {
  return sub_update_within_limit<false>(w, 0.0f, up, D, limit);
}

/// sub_within_limit with the update computed on the way, as a ScalesGradient rule (Sgd) does:
/// w[d] = sanitize(w[d] - lr * g[d], limit), the product one correctly rounded num::mul (the
/// same values as OptimizerRule<Sgd>::step followed by sub_within_limit). The product and
/// the difference are one expression here (two passes before): a build with FMA enabled
/// and contraction on may fuse them, which docs/numerics.md already rules out
/// (-ffp-contract=off for such builds; the x86-64 default has no FMA).
MPE_HOST_DEVICE inline bool sub_scaled_within_limit(float* w, float lr, const float* g, std::int32_t D,
                                                    float limit) {
  return sub_update_within_limit<true>(w, lr, g, D, limit);
}

/// Backward, first pass, part 1, on the host (one lane), for unique row u: its gradient g
/// = the sum over its occurrences of coef * grad_output[bag] (coefficient 1 for plain sum
/// pooling) into `grad`, in the order of gradient_sum.hpp: left to right in position order
/// for a row of at most kSumGroup occurrences, by GradientTree for a hotter row. Writes
/// only `grad` and the check of grad_output below. (Other backends run the same order as
/// laned stages: PlanSumStage / SumStage.)
///
/// grad_output's finiteness check is fused here: every value an occurrence reads is tested
/// and the smallest non-finite position goes to rec->pos[kGrad] (atomic_min); the rows of
/// bags without occurrences are tested by CheckEmptyBagGrads. Together they test every
/// value of grad_output at least once (each belongs to one bag), as one pass over it
/// would. The grad_output row of the occurrence kPoolPrefetchAhead places ahead (in
/// sorted order) is prefetched. Does nothing when the batch failed validation.
struct SumRowGradients {
  const index_t* seg_start;   // (U + 1)
  const index_t* sorted_pos;  // (n)
  const index_t* bag_of;      // (n)
  const float* coef;          // (n), or null for plain sum pooling (coefficient 1)
  const float* grad_output;   // (B, T*D)
  index_t B, T;
  std::int32_t D;
  float* grad;           // (U, D) workspace: the summed gradient
  CallRecord* rec;       // rec->pos[kGrad]: first non-finite position of grad_output
  const index_t* count;  // (1) U; items u >= U do nothing
  const index_t* gate;   // ok flag of the batch, or null
  index_t n = 0;         // occurrences (prefetch bound; 0: no prefetch)
  /// Offset into grad_output of the row of sorted occurrence k, and its coefficient in `cf`.
  index_t occurrence(index_t k, float& cf) const {
    const index_t i = sorted_pos[k];
    index_t t, b;
    split_bag(bag_of[i], B, t, b);
    cf = coef ? coef[i] : 1.0f;
    return (b * T + t) * D;
  }
  /// Occurrences [k0, k1) summed left to right into g (D), grad_output checked.
  void sum_run(index_t k0, index_t k1, float* g) const {
    index_t* bad = &rec->pos[kGrad];
    for (index_t k = k0; k < k1; ++k) {
      if (k + kPoolPrefetchAhead < n) {
        float unused;
        prefetch_lines(grad_output + occurrence(k + kPoolPrefetchAhead, unused),
                       static_cast<std::size_t>(D) * sizeof(float));
      }
      float c;
      const index_t at = occurrence(k, c);
      add_occurrence(g, grad_output + at, D, coef, c, k == k0);
      check_finite_run(grad_output + at, D, at, bad);
    }
  }
  void operator()(index_t u, std::int32_t /*lane*/, std::int32_t /*lanes*/) const {
    if (u >= *count || !open(gate)) return;
    float* g = grad + u * D;
    const index_t first = seg_start[u], last = seg_start[u + 1];
    if (last - first <= kSumGroup) {
      sum_run(first, last, g);
      return;
    }
    GradientTree tree(D);  // a hot row: groups of kSumGroup, then the levels above
    for (index_t k0 = first; k0 < last; k0 += kSumGroup) {
      sum_run(k0, k0 + kSumGroup < last ? k0 + kSumGroup : last, g);
      tree.push(1, g);
    }
    tree.finish(g);
  }
};

/// grad_output's finiteness check for the bags without occurrences (the rest is fused into
/// SumRowGradients). Item i in [0, n] tests the rows of the bags strictly between the bags
/// of occurrences i - 1 and i (bag_of is non-decreasing: CSR order; before the first and
/// after the last occurrence, from bag 0 and up to bag B * T). Launch n + 1 items. Does
/// nothing when the batch failed validation (its bag_of is not complete then), as
/// SumRowGradients.
struct CheckEmptyBagGrads {
  const index_t* bag_of;     // (n)
  index_t n;                 // occurrences
  const float* grad_output;  // (B, T*D)
  index_t B, T;
  std::int32_t D;
  index_t* bad;         // (1) smallest non-finite position (atomic_min)
  const index_t* gate;  // ok flag of the batch, or null
  MPE_HOST_DEVICE void operator()(index_t i) const {
    if (!open(gate)) return;
    const index_t lo = i == 0 ? 0 : bag_of[i - 1] + 1;
    const index_t hi = i == n ? B * T : bag_of[i];
    for (index_t j = lo; j < hi; ++j) {
      index_t t, b;
      split_bag(j, B, t, b);
      const index_t at = (b * T + t) * D;
      check_finite_run(grad_output + at, D, at, bad);
    }
  }
};

/// OptimizerRule<Opt>::step on a copy of the row's state with the summed gradient in
/// `grad`: the new state goes to `new_state` and `grad` is replaced by the update u
/// (applied as w - u). Changes no state of the object: a row whose summed gradient or new
/// state is not finite, or whose update is NaN (float overflow of finite inputs), records
/// its unique index in rec->pos[kOverflow] (smallest u), so the whole step can be refused
/// or skipped before anything is written. Does nothing when grad_output itself failed its
/// check (rec->pos[kGrad]) or the batch failed validation.
template <class Opt>
struct AccumulateRows {
  using Rule = OptimizerRule<Opt>;
  const index_t* uniq;
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
#ifndef __CUDA_ARCH__
    // Host: the FP32 state row kPoolPrefetchAhead unique rows ahead (a random read).
    if (opt_state && u + kPoolPrefetchAhead < *count) {
      prefetch_lines(opt_state + uniq[u + kPoolPrefetchAhead] * Rule::state_floats(D),
                     static_cast<std::size_t>(Rule::state_floats(D)) * sizeof(float));
    }
#endif
    const index_t r = uniq[u];
    float* g = grad + u * D;
    bool ok = all_finite(g, D);
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
    ok = all_finite(st, S) && no_nan(g, D);  // an update of +-inf saturates; NaN never
    if (!ok) atomic_min(&rec->pos[kOverflow], u);
  }
};

/// Backward, second pass, for unique row u (after the verdict; gated on the batch's apply
/// flag): stores the new optimizer state and applies w -= u on the cache row (marked dirty)
/// or on the store row (dequantize, update, clamp into the old row's range_box when
/// `growth` > 0, quantize with Rounding at site StoreUpdate). The update u and the state
/// come from AccumulateRows.
template <class Storage, class Rounding, class Paths = PortablePaths>
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
  num::RowStream stream;
  const std::uint64_t* step;  // (1) completed backward() calls
  std::uint8_t* outcome;      // (U)
  const index_t* count;       // (1) U; items u >= U do nothing
  const index_t* gate;        // apply flag of the batch, or null
  StateRef state{};           // compact state precision (opt_state is then null)
  // (1) or null. Set: `update` holds the summed gradients of a step whose optimizer scales
  // the gradient (ScalesGradient, e.g. Sgd) and whose AccumulateRows was skipped
  // (sums_cannot_overflow); the update of element d is num::mul(*lr, g[d]), the rule's own
  // product, computed here (the same bits).
  const float* lr = nullptr;
  // EmbeddingConfig::max_range_growth: > 0, a store row's new values are clamped into the
  // old row's range_box before quantization (cached rows are not).
  float growth = 0.0f;
  /// Host only: prefetches what unique row v will read and write (its cache row, or its
  /// store row, and its FP32 optimizer state), so the random row accesses of the rows
  /// kPoolPrefetchAhead ahead overlap this one's work. The bits do not depend on it.
  MPE_HOST_DEVICE void prefetch(index_t v) const {
    const index_t r = uniq[v];
    const index_t s = slot_of_unique ? slot_of_unique[v] : -1;
    if (s >= 0) {
      prefetch_lines(cache.row(s), static_cast<std::size_t>(D) * sizeof(float));
      prefetch_lines(cache.tags + s, sizeof(index_t));  // the slot's tag, compared below
    } else {
      prefetch_lines(store + static_cast<std::size_t>(r) * stride, Storage::data_bytes(D));
    }
    if (opt_state) prefetch_lines(opt_state + r * state_floats, static_cast<std::size_t>(state_floats) * 4);
  }
  MPE_HOST_DEVICE void operator()(index_t u) const {
    if (u >= *count || !open(gate)) return;
#ifndef __CUDA_ARCH__
    if (u + kPoolPrefetchAhead < *count) prefetch(u + kPoolPrefetchAhead);
#endif
    const index_t r = uniq[u];
    float* up = update + u * D;
    index_t s = slot_of_unique ? slot_of_unique[u] : -1;
    // A row uncached at forward (conflict or policy rejection) may have been filled since
    // by a prefetch: update it where it lives now, or the store update would be lost.
    if (s < 0 || cache.tags[s] != r) s = cache.find(r);
    bool state_sat = false;  // a compact state value saturated (counted with the row)
    if (state.active()) {    // into the cache slot beside the row, or rounded into the store
      state_sat = state.template write<Rounding>(r, s, new_state + u * state_floats,
                                                 static_cast<std::uint32_t>(*step));
    } else {
      for (std::int64_t k = 0; k < state_floats; ++k)
        opt_state[r * state_floats + k] = new_state[u * state_floats + k];
    }
    if (s >= 0) {
      // The cached FP32 row keeps to the store format's range (as a store update does),
      // so it never overflows to inf and always round-trips through set_weights. The
      // update is never NaN here (AccumulateRows), so an overflow is +-inf (clamped).
      const bool sat = lr ? sub_scaled_within_limit(cache.row(s), *lr, up, D, Storage::limit)
                          : sub_within_limit(cache.row(s), up, D, Storage::limit);
      cache.dirty[s] = 1;
      outcome[u] = sat || state_sat ? kSaturated : 0;
    } else {
      std::uint8_t* row = store + static_cast<std::size_t>(r) * stride;
      const typename Storage::Reader rd(row, D);
      if (lr) {
        const float l = *lr;
        for (std::int32_t d = 0; d < D; ++d) up[d] = num::sub(rd[d], num::mul(l, up[d]));
      } else {
        for (std::int32_t d = 0; d < D; ++d) up[d] = num::sub(rd[d], up[d]);
      }
      if (const RangeBox box = range_box<Storage>(rd, growth); box.on) {
        for (std::int32_t d = 0; d < D; ++d) up[d] = box(up[d]);
      }
      const num::RowRng rng = stream.at(r, static_cast<std::uint32_t>(*step), num::RoundingSite::StoreUpdate);
      const bool sat = Paths::template store_row<Storage, Rounding>(up, D, row, rng);
      outcome[u] = sat || state_sat ? kSaturated : 0;
    }
  }
};

/// Backward, second pass, on laned backends (a warp per row on a GPU), part 1 for unique
/// row u, for a step whose `update` holds either the summed gradients of a ScalesGradient
/// optimizer (`scaled`: no state; SumStage checked the sums, AccumulateRows left out) or
/// the updates AccumulateRows computed, with their FP32 optimizer state (not `scaled`; a
/// compact state precision takes ApplyRows). A cached row (marked dirty) gets
/// w = sanitize(w - lr * g), or sanitize(w - update), on each lane's chunks, as ApplyRows
/// does; a store row's new values rd[d] - lr * g[d], or rd[d] - update[d] (clamped into
/// the old row's range_box when `growth` > 0, as ApplyRows), are written over its `update`
/// row for StoreScaledLanes; the lanes copy the row's new state into
/// `opt_state`. Lanes write disjoint elements; any lane that saturates sets
/// outcome[u] = kSaturated (outcome is zeroed before the launch). Gated on the batch's
/// apply flag.
template <class Storage>
struct ApplyScaledLanes {
  const index_t* uniq;            // (U)
  const index_t* slot_of_unique;  // (U) or null
  CacheRef cache;
  const std::uint8_t* store;
  std::size_t stride;
  std::int32_t D;
  float* update;                     // (U, D) summed gradients or updates in; a store row's new values out
  float lr;                          // the rule's gradient_scale (`scaled`)
  std::uint8_t* outcome;             // (U) zeros on entry
  const index_t* count;              // (1) U
  const index_t* gate;               // apply flag of the batch
  bool scaled = true;                // `update` holds gradients to scale by lr, else the updates
  std::int64_t state_floats = 0;     // S per row (not `scaled`)
  float* opt_state = nullptr;        // (rows, S) FP32 optimizer state, or null when S = 0
  const float* new_state = nullptr;  // (U, S) from AccumulateRows
  float growth = 0.0f;               // EmbeddingConfig::max_range_growth (store rows only)
  /// Row u's slot now (as ApplyRows: a row uncached at forward may have been filled since).
  MPE_HOST_DEVICE index_t slot(index_t u, index_t r) const {
    index_t s = slot_of_unique ? slot_of_unique[u] : -1;
    if (s < 0 || cache.tags[s] != r) s = cache.find(r);
    return s;
  }
  /// slot(u, r) found by a warp together (WarpOps: CudaWarp, or the tests' emulation; every
  /// lane calls): where the row needs its set searched, lane l tests ways l, l + 32, ... and
  /// a ballot picks the lowest way holding r (a set holds a row at most once), one
  /// coalesced read of the set's tags instead of `ways` dependent reads in every lane.
  template <class Warp>
  MPE_HOST_DEVICE index_t slot_warp(const Warp& warp, index_t u, index_t r, std::int32_t lane) const {
    const index_t s = slot_of_unique ? slot_of_unique[u] : -1;
    if (s >= 0 && cache.tags[s] == r) return s;
    if (cache.num_sets == 0) return -1;
    if (cache.slot_of_row) return *cache.slot_entry(r);
    const index_t base = cache.set_of(r) * cache.ways;
    for (std::int32_t w0 = 0; w0 < cache.ways; w0 += 32) {
      const std::int32_t w = w0 + lane;
      const unsigned hit = warp.ballot(w < cache.ways && cache.tags[base + w] == r);
      if (hit != 0u) return base + w0 + lowest_lane(hit);
    }
    return -1;
  }
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *count || !open(gate)) return;
    const index_t r = uniq[u];
    apply_at(u, r, slot(u, r), lane, lanes);
  }
  /// Part 1 for unique row u (global row r) at slot s (slot(u, r), -1: a store row).
  MPE_HOST_DEVICE void apply_at(index_t u, index_t r, index_t s, std::int32_t lane,
                                std::int32_t lanes) const {
    float* up = update + u * D;
    const float l = lr;
    for (std::int64_t k = lane; k < state_floats; k += lanes) {
      opt_state[r * state_floats + k] = new_state[u * state_floats + k];
    }
    if (s >= 0) {
      float* w = cache.row(s);
      bool sat = false;
      for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
        const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
        sat = (scaled ? sub_update_chunk<true>(w + c, l, up + c, m, Storage::limit)
                      : sub_update_chunk<false>(w + c, 0.0f, up + c, m, Storage::limit)) ||
              sat;
      }
      if (lane == 0) cache.dirty[s] = 1;
      if (sat) outcome[u] = kSaturated;
      return;
    }
    const std::uint8_t* row = store + static_cast<std::size_t>(r) * stride;
    // Every lane reads the old header before any lane's store_at writes the new one.
    const RangeBox box = range_box<Storage>(row, D, growth);
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float x[kLaneChunk], g[kLaneChunk];
      decode_chunk<Storage>(row, D, c, m, x);  // the Reader's values
      load_lane_chunk(up + c, m, g);
      MPE_UNROLL
      for (std::int32_t e = 0; e < kLaneChunk; ++e) x[e] = num::sub(x[e], scaled ? num::mul(l, g[e]) : g[e]);
      if (box.on) {
        MPE_UNROLL
        for (std::int32_t e = 0; e < kLaneChunk; ++e) x[e] = box(x[e]);
      }
      store_lane_chunk(up + c, m, x);
    }
  }
};

/// Part 2 of ApplyScaledLanes (launched after it), for a unique row u without a cache slot:
/// its new values (the `update` row) quantized into the store with Rounding at site
/// StoreUpdate, each lane writing its element groups (detail::store_lanes; the row's
/// parameters from every element). The same bytes as ApplyRows. Gated on the
/// batch's apply flag.
template <class Storage, class Rounding>
struct StoreScaledLanes {
  ApplyScaledLanes<Storage> apply;  // the same rows and slots
  std::uint8_t* store;
  num::RowStream stream;      // the rounding streams (seed, row keys)
  const std::uint64_t* step;  // (1) completed backward() calls
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *apply.count || !open(apply.gate)) return;
    const index_t r = apply.uniq[u];
    if (apply.slot(u, r) >= 0) return;
    store_at(u, r, lane, lanes);
  }
  /// Part 2 for unique row u (global row r), known to have no cache slot.
  MPE_HOST_DEVICE void store_at(index_t u, index_t r, std::int32_t lane, std::int32_t lanes) const {
    const num::RowRng rng = stream.at(r, static_cast<std::uint32_t>(*step), num::RoundingSite::StoreUpdate);
    const bool sat =
        store_lanes<Storage, Rounding>(apply.update + u * apply.D, apply.D,
                                       store + static_cast<std::size_t>(r) * apply.stride, rng, lane, lanes);
    if (sat) apply.outcome[u] = kSaturated;
  }
};

/// ApplyScaledLanes then StoreScaledLanes in one launch, for a backend whose lanes of an
/// item are one warp (warp_lanes<Backend>) and a Storage with store_lanes: each lane writes
/// its chunks of a store row's new values into `update` and then quantizes those same
/// elements (its element groups are its chunks; the row's min and max, or largest
/// magnitude, come from a warp reduction over the lanes' own elements); a __syncwarp
/// between the parts makes every lane's new values, and every lane's reads of the old
/// scale and bias, complete before any lane quantizes, so a store_lanes that reads the
/// whole row is safe too. The row's slot is looked up once, by the warp together
/// (ApplyScaledLanes::slot_warp: a row left out of the cache, a conflict or an admission
/// refusal, reads its set's tags in one coalesced access instead of `ways` reads in every
/// lane, twice). The same bytes as the two launches. (Lanes that run one after another,
/// tests/reference/async_backend.hpp, take the two launches.)
template <class Storage, class Rounding>
struct ApplyStoreScaledLanes {
  StoreScaledLanes<Storage, Rounding> part;  // its `apply` is part 1
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    const ApplyScaledLanes<Storage>& a = part.apply;
    if (u >= *a.count || !open(a.gate)) return;  // the same for every lane of the item
    const index_t r = a.uniq[u];
#ifdef __CUDA_ARCH__
    const index_t s = a.slot_warp(CudaWarp{}, u, r, lane);
#else
    const index_t s = a.slot(u, r);
#endif
    a.apply_at(u, r, s, lane, lanes);
    if (s >= 0) return;  // the same for every lane of the item
#ifdef __CUDA_ARCH__
    __syncwarp();
#endif
    part.store_at(u, r, lane, lanes);
  }
};

}  // namespace mpe::detail
