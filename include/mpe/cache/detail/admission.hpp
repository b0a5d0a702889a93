// SPDX-License-Identifier: Apache-2.0
/// @file admission.hpp
/// @brief The set-admission code of CachedEmbedding's populate (not public), written once
/// against the `CachePolicy` hooks (mpe/cache/policy.hpp). Each functor is trivially
/// copyable and `MPE_HOST_DEVICE`, like those of mpe/detail/kernels.hpp.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/detail/kernels.hpp"
#include "mpe/detail/pool_simd.hpp"
#include "mpe/detail/state_ref.hpp"
#include "mpe/numeric/philox.hpp"

namespace mpe::detail {

/// One pass of the policy's observation of the batch's unique rows (before admission).
template <class P>
struct ObserveRows {
  const index_t* uniq;
  typename P::View view;
  std::uint32_t* scratch;  // (U) one word per row, kept from pass 0 to pass 1
  int pass;
  const index_t* count;  // (1) U; items u >= U do nothing
  const index_t* gate;   // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t u) const {
    if (u >= *count || !open(gate)) return;
    P::observe(view, uniq[u], scratch[u], pass);
  }
};

/// Admission sort keys: set in the high 32 bits, the complemented priority in the low bits
/// (descending priority); the stable sort keeps ascending rows within ties.
template <class P>
struct AdmissionKeys {
  const index_t* uniq;
  typename P::View view;
  std::int64_t num_sets;
  std::uint32_t* priorities;  // (U)
  std::uint64_t* keys;        // (U)
  index_t* order;             // (U)
  const index_t* count;       // (1) U; items u >= U get the largest key (sorted last)
  MPE_HOST_DEVICE void operator()(index_t u) const {
    order[u] = u;
    if (u >= *count) {
      keys[u] = ~std::uint64_t{0};
      return;
    }
    const std::uint64_t set = static_cast<std::uint64_t>(set_of_row(uniq[u], num_sets));
    const std::uint32_t p = P::priority(view, uniq[u]);
    priorities[u] = p;
    keys[u] = set << 32 | static_cast<std::uint64_t>(~p);
  }
};

/// One set of one batch: hits first (last use = batch number, then the policy's on_hit),
/// then misses in admission order ask the policy for a slot (choose), write back dirty
/// victims (and, with a compact state precision, their FP32 optimizer state) and fill from
/// the store (decoding the filled row's state into its slot). Runs once per set (at each run head).
/// On the host every item p also prefetches the store row of the unique row
/// kPoolPrefetchAhead places later in admission order, so the fills' random reads of the
/// store overlap (the row is read only if it misses; the bits do not depend on it).
template <class Storage, class Rounding, class P>
struct AdmitSet {
  const std::uint64_t* keys;        // (U) sorted admission keys
  const index_t* order;             // (U) unique index in admission order
  const index_t* count;             // (1) U; items p >= U do nothing
  const index_t* gate;              // batch ok flag, or null
  const index_t* uniq;              // (U)
  const std::uint32_t* priorities;  // (U)
  CacheRef cache;
  typename P::View view;
  std::uint8_t* store;
  std::size_t stride;
  std::uint64_t batch_id;
  const std::uint64_t* lock_floor;  // (1) slots used by batches numbered >= this are locked
  std::uint64_t seed;
  const std::uint64_t* step;  // (1) completed backward() calls
  index_t* slot_of_unique;    // (U)
  std::uint8_t* outcome;      // (U)
  StateRef state{};           // compact optimizer state: moves with its row (inactive: nothing)

  MPE_HOST_DEVICE void operator()(index_t p) const {
    const index_t U = *count;
    if (p >= U || !open(gate)) return;
#ifndef __CUDA_ARCH__
    if (p + kPoolPrefetchAhead < U) {
      prefetch_lines(store + static_cast<std::size_t>(uniq[order[p + kPoolPrefetchAhead]]) * stride,
                     Storage::data_bytes(cache.dim));
    }
#endif
    const std::uint64_t set = keys[p] >> 32;
    if (p > 0 && (keys[p - 1] >> 32) == set) return;
    index_t end = p + 1;
    while (end < U && (keys[end] >> 32) == set) ++end;
    const index_t base = static_cast<index_t>(set) * cache.ways;
    const std::int32_t D = cache.dim;
    const std::uint64_t floor = *lock_floor;
    for (index_t q = p; q < end; ++q) {
      const index_t u = order[q];
      index_t s = -1;
      for (std::int32_t w = 0; w < cache.ways; ++w) {
        if (cache.tags[base + w] == uniq[u]) s = base + w;
      }
      slot_of_unique[u] = s;
      outcome[u] = s >= 0 ? kHit : 0;
      if (s >= 0) {
        cache.last_use[s] = batch_id;
        P::on_hit(view, cache, s);
      }
    }
    for (index_t q = p; q < end; ++q) {
      const index_t u = order[q];
      if (outcome[u] & kHit) continue;
      const CacheChoice choice = P::choose(view, cache, base, floor, uniq[u], priorities[u]);
      if (choice.slot < 0) {
        outcome[u] = choice.rejected ? kRejected : kConflict;
        continue;
      }
      const index_t victim = choice.slot;
      std::uint8_t code = kFilled;
      float* crow = cache.row(victim);
      if (cache.tags[victim] >= 0) {
        code |= kEvicted;
        if (cache.dirty[victim]) {
          const index_t old = cache.tags[victim];
          const num::RowRng rng{seed, static_cast<std::uint64_t>(old), static_cast<std::uint32_t>(*step),
                                num::RoundingSite::WriteBack};
          if (Storage::template store<Rounding>(crow, D, store + static_cast<std::size_t>(old) * stride,
                                                rng)) {
            code |= kSaturated;
          }
          if (state.template write_back<Rounding>(victim, old, static_cast<std::uint32_t>(*step),
                                                  num::RoundingSite::StateWriteBack)) {
            code |= kSaturated;
          }
          code |= kWroteBack;
        }
      }
      const typename Storage::Reader rd(store + static_cast<std::size_t>(uniq[u]) * stride, D);
      for (std::int32_t d = 0; d < D; ++d) crow[d] = rd[d];
      state.fill(victim, uniq[u]);
      cache.tags[victim] = uniq[u];
      cache.last_use[victim] = batch_id;
      cache.dirty[victim] = 0;
      slot_of_unique[u] = victim;
      outcome[u] = code;
    }
  }
};

/// Single item after a populate of a policy that decays: advances the decay clock by U
/// and sets how many decays are due (one per `period` unique rows).
struct DecayTick {
  Counters* c;
  const index_t* unique;  // (1) U
  std::uint64_t period;
  const index_t* gate;
  MPE_HOST_DEVICE void operator()(index_t) const {
    c->decays_due = 0;
    if (!open(gate)) return;
    c->decay_clock += static_cast<std::uint64_t>(*unique);
    c->decays_due = c->decay_clock / period;
    c->decay_clock -= c->decays_due * period;
  }
};

/// Item i of the policy's decay, `*due` times (0: nothing).
template <class P>
struct Decay {
  typename P::View view;
  const std::uint64_t* due;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const std::uint64_t h = *due;
    if (h == 0) return;
    P::decay(view, i, h);
  }
};

}  // namespace mpe::detail
