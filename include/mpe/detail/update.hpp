// SPDX-License-Identifier: Apache-2.0
/// @file update.hpp
/// @brief backward()'s two passes: AccumulateRows (summed gradient -> the optimizer's update
/// and new state in workspace, checked) and ApplyRows (write to the cache row or the store).
/// Per-item functors of CachedEmbedding (not public): trivially copyable,
/// `MPE_HOST_DEVICE`, run by HostBackend through Thrust and launched as kernels by
/// CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/detail/atomics.hpp"
#include "mpe/detail/row_accumulate.hpp"
#include "mpe/detail/state_ref.hpp"
#include "mpe/detail/statistics.hpp"
#include "mpe/detail/validation.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/optim/optimizer.hpp"
#include "mpe/optim/state_precision.hpp"
#include "mpe/storage/storage.hpp"
#include "mpe/types.hpp"

namespace mpe::detail {

/// Backward, first pass, part 1, for unique row u: its gradient g = the sum over its
/// occurrences, in position order, of coef * grad_output[bag] (coefficient 1 for plain sum
/// pooling) into `grad`. Launched laned: with one lane (the host) the row in one loop; with
/// more (CudaBackend: a warp per row) each lane sums its element chunks in registers,
/// loading kLaneGroup occurrences before adding them in order, so every element gets the
/// same operations. Does nothing when grad_output failed its check (rec->pos[kGrad]) or
/// the batch failed validation; writes only `grad`.
struct SumRowGradients {
  const index_t* seg_start;   // (U + 1)
  const index_t* sorted_pos;  // (n)
  const index_t* bag_of;      // (n)
  const float* coef;          // (n), or null for plain sum pooling (coefficient 1)
  const float* grad_output;   // (B, T*D)
  index_t B, T;
  std::int32_t D;
  float* grad;            // (U, D) workspace: the summed gradient
  const CallRecord* rec;  // rec->pos[kGrad] != kNoError: grad_output failed its check
  const index_t* count;   // (1) U; items u >= U do nothing
  const index_t* gate;    // ok flag of the batch, or null
  /// Row of grad_output for sorted occurrence k, and its coefficient in `cf`.
  MPE_HOST_DEVICE const float* occurrence(index_t k, float& cf) const {
    const index_t i = sorted_pos[k];
    const index_t j = bag_of[i];
    const index_t t = j / B, b = j - (j / B) * B;
    cf = coef ? coef[i] : 1.0f;
    return grad_output + (b * T + t) * D;
  }
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *count || !open(gate) || rec->pos[kGrad] != kNoError) return;
    float* g = grad + u * D;
    const index_t first = seg_start[u], last = seg_start[u + 1];
    if (lanes == 1) {
      for (index_t k = first; k < last; ++k) {
        float c;
        const float* go = occurrence(k, c);
        if (coef) {
          if (k == first) {
            for (std::int32_t d = 0; d < D; ++d) g[d] = num::mul(c, go[d]);
          } else {
            for (std::int32_t d = 0; d < D; ++d) g[d] = num::add(g[d], num::mul(c, go[d]));
          }
        } else if (k == first) {  // coefficient 1: mul(1, x) == x, the same bits without the multiply
          for (std::int32_t d = 0; d < D; ++d) g[d] = go[d];
        } else {
          for (std::int32_t d = 0; d < D; ++d) g[d] = num::add(g[d], go[d]);
        }
      }
      return;
    }
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float acc[kLaneChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
      // Occurrences in groups of kLaneGroup: every load of a group is issued before its
      // adds (a hot row's occurrences are a long chain otherwise); the adds stay in
      // position order.
      for (index_t k0 = first; k0 < last; k0 += kLaneGroup) {
        const float* go[kLaneGroup];
        float cf[kLaneGroup];
        float x[kLaneGroup][kLaneChunk];
        MPE_UNROLL
        for (std::int32_t q = 0; q < kLaneGroup; ++q)
          go[q] = occurrence(k0 + q < last ? k0 + q : last - 1, cf[q]) + c;
        MPE_UNROLL
        for (std::int32_t q = 0; q < kLaneGroup; ++q) {
          MPE_UNROLL
          for (std::int32_t e = 0; e < kLaneChunk; ++e) x[q][e] = e < m ? go[q][e] : 0.0f;
        }
        MPE_UNROLL
        for (std::int32_t q = 0; q < kLaneGroup; ++q) {
          if (k0 + q >= last) break;
          const bool head = k0 + q == first;
          MPE_UNROLL
          for (std::int32_t e = 0; e < kLaneChunk; ++e) {
            if (coef) {
              acc[e] = head ? num::mul(cf[q], x[q][e]) : num::add(acc[e], num::mul(cf[q], x[q][e]));
            } else {
              acc[e] = head ? x[q][e] : num::add(acc[e], x[q][e]);
            }
          }
        }
      }
      for (std::int32_t e = 0; e < m; ++e) g[c + e] = acc[e];
    }
  }
};

/// Backward, first pass, part 2, for unique row u (after SumRowGradients):
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
    const index_t r = uniq[u];
    float* g = grad + u * D;
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
      float* w = cache.row(s);
      bool sat = false;
      for (std::int32_t d = 0; d < D; ++d)
        w[d] = detail::sanitize(num::sub(w[d], up[d]), Storage::limit, sat);
      cache.dirty[s] = 1;
      outcome[u] = sat || state_sat ? kSaturated : 0;
    } else {
      std::uint8_t* row = store + static_cast<std::size_t>(r) * stride;
      const typename Storage::Reader rd(row, D);
      for (std::int32_t d = 0; d < D; ++d) up[d] = num::sub(rd[d], up[d]);
      const num::RowRng rng{seed, static_cast<std::uint64_t>(r), static_cast<std::uint32_t>(*step),
                            num::RoundingSite::StoreUpdate};
      const bool sat = Storage::template store<Rounding>(up, D, row, rng);
      outcome[u] = sat || state_sat ? kSaturated : 0;
    }
  }
};

}  // namespace mpe::detail
