// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/admission.hpp
/// @brief The set-admission code of CachedEmbedding's populate (not public), written once
/// against the `CachePolicy` hooks (mpe/cache/policy.hpp), by phase: the keys and admission
/// order (here), each set's hits and misses (AdmitSet, here; the victim list of one set in
/// set_victims.hpp), the laned form of both for GPUs (admission_lanes.hpp). Each functor is
/// trivially copyable and `MPE_HOST_DEVICE`, like those of mpe/detail/kernels/all.hpp; a
/// backend's fast paths (fills, tag scans, row stores, victim lists) come in through the
/// `Paths` seam (portable_paths.hpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/detail/kernels/all.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/prefetch.hpp"
#include "mpe/detail/kernels/set_victims.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/warp.hpp"
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
    // priorities[u] holds what observe left for the row (the same buffer), if it observes.
    const std::uint32_t p = P::priority(view, uniq[u], P::observes ? priorities[u] : 0u);
    priorities[u] = p;
    keys[u] = set << 32 | static_cast<std::uint64_t>(~p);
  }
};

/// rows[q] = uniq[order[q]] for q < U: each admission item's row in admission order, so
/// AdmitSet reads rows sequentially. Gathered by a launch of its own: on the host a tight
/// loop whose random reads of uniq overlap one another, where inside AdmitSet's per-set
/// work each would wait on its own.
struct AdmitRows {
  const index_t* uniq;   // (U) unique rows
  const index_t* order;  // (U) unique index of each item, admission order
  const index_t* count;  // (1) U; items q >= U do nothing
  index_t* rows;         // (U) out
  MPE_HOST_DEVICE void operator()(index_t q) const {
    if (q < *count) rows[q] = uniq[order[q]];
  }
};

/// Which half of a set's admission an AdmitSet launch runs.
enum class AdmitPhase : std::uint8_t {
  Hits,   ///< every unique row's slot, hit or -1; hits: last use, then the policy's on_hit
  Misses  ///< the misses, in admission order: choose, write back, fill
};

/// One set of one batch, run once per set (at each run head of the sorted keys), in two
/// launches: AdmitPhase::Hits, then AdmitPhase::Misses; for a set_local_policy on the host on
/// one thread in one pass instead (run_fused, launched by AdmitFused). Hits first (last use =
/// batch number, then the policy's on_hit), then misses in admission order ask the policy for
/// a slot (choose; on the host SetVictims for victims_by_score policies), write back dirty
/// victims (and, with a compact state precision, their FP32 optimizer state) and fill from
/// the store (decoding the filled row's state into its slot). A set's admission writes only
/// its own slots and, for a set_local_policy, reads nothing another set's admission writes,
/// so running every set's hits before any set's misses is the same as running each set's
/// hits and misses in turn, or each set's hits up to kFusedAhead items past the end of the
/// set whose misses run (run_fused). The prefetches (run_fused's store rows of later misses, the
/// sets' metadata) change no bits. With SetVictims (host) a set's misses all take their
/// slots first and the victims' cache rows (with stream_fills only dirty victims', for their
/// write-back) and dirty victims' store rows are prefetched before any is written back or
/// filled: the same slots, since a take reads only the
/// list built at the set's first miss and the policy's view (`admits`), neither of which a
/// write-back or fill changes.
template <class Storage, class Rounding, class P, class Paths = PortablePaths>
struct AdmitSet {
  const std::uint64_t* keys;        // (U) sorted admission keys
  const index_t* order;             // (U) unique index in admission order
  const index_t* count;             // (1) U; items p >= U do nothing
  const index_t* gate;              // batch ok flag, or null
  const index_t* rows;              // (U) row of each item, admission order (AdmitRows)
  const std::uint32_t* priorities;  // (U) by unique index
  CacheRef cache;
  typename P::View view;
  std::uint8_t* store;
  std::size_t stride;
  std::uint64_t batch_id;
  const std::uint64_t* lock_floor;  // (1) slots used by batches numbered >= this are locked
  num::RowStream stream;
  const std::uint64_t* step;  // (1) completed backward() calls
  index_t* slot_of_unique;    // (U)
  std::uint8_t* outcome;      // (U)
  StateRef state{};           // compact optimizer state: moves with its row (inactive: nothing)
  AdmitPhase phase = AdmitPhase::Hits;
  /// Host: fills written by non-temporal stores (Paths::fill_row's `stream`), so a victim's cache
  /// row is not read for ownership before it is overwritten; populate sets it for run_fused,
  /// which fences.
  bool stream_fills = false;
  /// (U) or null. Set (laned backends, after AdmitHitsLanes): the Misses phase only decides
  /// (slots, tags, last uses, dirty flags, outcome codes without kSaturated) and records each
  /// dirty victim's row here; WriteBackLanes and FillLanes then move the rows.
  index_t* evicted = nullptr;
  /// Items (admission order) by which run_fused's hits run ahead of its misses: the reach of
  /// the store-row prefetch into L2 that the hits issue for each miss they find.
  static constexpr index_t kFusedAhead = 4 * kPoolPrefetchAhead;

  /// One past the last item of the set whose items start at p (keys sorted by set).
  MPE_HOST_DEVICE index_t set_end(index_t p, index_t U) const {
    const std::uint64_t set = keys[p] >> 32;
    index_t end = p + 1;
    while (end < U && (keys[end] >> 32) == set) {
      MPE_TRIP();
      ++end;
    }
    return end;
  }

  /// Whether item p (< U) is its set's first: the item that runs the set's phase.
  MPE_HOST_DEVICE bool is_head(index_t p) const { return p == 0 || (keys[p - 1] >> 32) != (keys[p] >> 32); }

  /// First slot of the set of item p (its key's high 32 bits).
  MPE_HOST_DEVICE index_t set_base(index_t p) const {
    return static_cast<index_t>(keys[p] >> 32) * cache.ways;
  }

  /// Host: prefetches the tags and last uses of the set whose items start at p (< U; both
  /// phases read them, 16 bytes a way): the metadata of all sets exceeds the L2 cache.
  MPE_HOST_DEVICE void prefetch_set(index_t p) const {
    const index_t b = set_base(p);
    prefetch_lines(cache.tags + b, sizeof(*cache.tags) * static_cast<std::size_t>(cache.ways));
    prefetch_lines(cache.last_use + b, sizeof(*cache.last_use) * static_cast<std::size_t>(cache.ways));
  }

  /// The hits of the set at items [p, end) (first slot `base`): every item's slot, hit or
  /// -1, in slot_of_unique and outcome kHit or 0; a hit's last use becomes the batch number,
  /// then the policy's on_hit. With `prefetch_missed` (host; run_fused, whose misses run
  /// kFusedAhead items behind) each miss's store row is prefetched into L2 as it is found.
  MPE_HOST_DEVICE void hits(index_t p, index_t end, index_t base, bool simd,
                            bool prefetch_missed = false) const {
    for (index_t q = p; q < end; ++q) {
      MPE_TRIP();
      const index_t u = order[q];
      const index_t s = Paths::find_in_set(cache, base, rows[q], simd);
      slot_of_unique[u] = s;
      outcome[u] = s >= 0 ? kHit : 0;
      if (s >= 0) {
        cache.last_use[s] = batch_id;
        P::on_hit(view, cache, s);
      } else if (prefetch_missed) {
#ifndef __CUDA_ARCH__  // host only (Storage::data_bytes is host code; run_fused is too)
        prefetch_lines<false, true>(store + static_cast<std::size_t>(rows[q]) * stride,
                                    Storage::data_bytes(cache.dim));
#endif
      }
    }
  }

  /// The misses of the set at items [p, end) (first slot `base`; its hits done), in
  /// admission order: choose (SetVictims on the host), write back, fill.
  MPE_HOST_DEVICE void misses(index_t p, index_t end, index_t base, bool simd) const {
    index_t first_miss = p;
    while (first_miss < end && (outcome[order[first_miss]] & kHit)) {
      MPE_TRIP();
      ++first_miss;
    }
    if (first_miss == end) return;
    const std::int32_t D = cache.dim;
    const std::uint64_t floor = *lock_floor;
    constexpr bool by_list = uses_scored_choose<P>;
    // Default-initialized: the arrays are written before they are read (`count` = -1 says
    // nothing is built), so the 32 bytes per way are not zeroed at every set.
    [[maybe_unused]] std::conditional_t<by_list, SetVictims<P, Paths>, NoVictims> victims;
    if constexpr (by_list) {
      // Host: every miss of the set takes its slot first (the list depends only on the
      // set as its first miss finds it, and each slot is handed out once, so the fills
      // below change nothing a later take reads); the victims' cache rows (streamed fills:
      // only dirty ones', to be read by their write-back) and dirty victims' store rows
      // are prefetched, so their fills overlap.
      for (index_t q = first_miss; q < end; ++q) {
        MPE_TRIP();
        const index_t u = order[q];
        if (outcome[u] & kHit) continue;
        const CacheChoice choice = victims.take(view, cache, base, floor, priorities[u]);
        slot_of_unique[u] = choice.slot;
        if (choice.slot < 0) {
          outcome[u] = choice.rejected ? kRejected : kConflict;
          continue;
        }
#ifndef __CUDA_ARCH__
        // A streamed fill does not read the victim's row; a dirty victim's is read (its
        // write-back) before the fill overwrites it.
        const index_t old = cache.tags[choice.slot];  // the victim's row, or -1
        const bool dirty = old >= 0 && cache.dirty[choice.slot];
        if (!stream_fills) {
          prefetch_lines<true>(cache.row(choice.slot), static_cast<std::size_t>(D) * sizeof(float));
        } else if (dirty) {
          prefetch_lines(cache.row(choice.slot), static_cast<std::size_t>(D) * sizeof(float));
        }
        if (dirty) {
          prefetch_lines<true>(store + static_cast<std::size_t>(old) * stride, Storage::data_bytes(D));
        }
        if (cache.slot_of_row) {  // the slot index's two entries set_tag() writes
          __builtin_prefetch(cache.slot_entry(rows[q]), 1);
          if (old >= 0) __builtin_prefetch(cache.slot_entry(old), 1);
        }
#endif
      }
    }
    for (index_t q = first_miss; q < end; ++q) {
      MPE_TRIP();
      const index_t u = order[q];
      if (outcome[u] & kHit) continue;
      CacheChoice choice;
      if constexpr (by_list) {
        if (slot_of_unique[u] < 0) continue;  // rejected or a conflict miss (outcome set)
        choice.slot = slot_of_unique[u];
      } else {
        choice = P::choose(view, cache, base, floor, rows[q], priorities[u]);
      }
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
          if (evicted) {  // deferred to WriteBackLanes
            evicted[u] = old;
          } else {
            const num::RowRng rng =
                stream.at(old, static_cast<std::uint32_t>(*step), num::RoundingSite::WriteBack);
            if (Paths::template store_row<Storage, Rounding>(
                    crow, D, store + static_cast<std::size_t>(old) * stride, rng)) {
              code |= kSaturated;
            }
            if (state.template write_back<Rounding>(victim, old, static_cast<std::uint32_t>(*step),
                                                    num::RoundingSite::StateWriteBack)) {
              code |= kSaturated;
            }
          }
          code |= kWroteBack;
        }
      }
      const index_t row = rows[q];
      if (!evicted) {  // else deferred to FillLanes
        Paths::template fill_row<Storage>(store + static_cast<std::size_t>(row) * stride, D, crow, simd,
                                          stream_fills);
        state.fill(victim, row);
      }
      cache.set_tag(victim, row);
      cache.last_use[victim] = batch_id;
      cache.dirty[victim] = 0;
      slot_of_unique[u] = victim;
      outcome[u] = code;
    }
  }

  /// One launch item per unique row; the head of each set runs the set's phase.
  MPE_HOST_DEVICE void operator()(index_t p) const {
    const index_t U = *count;
    if (p >= U || !open(gate)) return;
    if (!is_head(p)) return;
    const index_t end = set_end(p, U);
    bool simd = false;
#ifndef __CUDA_ARCH__
    simd = Paths::fast();
    if (end < U) prefetch_set(end);  // the next set, a set's work ahead
#endif
    if (phase == AdmitPhase::Hits) {
      hits(p, end, set_base(p), simd);
    } else {
      misses(p, end, set_base(p), simd);
    }
  }

  /// Host, one thread, a set_local_policy: the whole admission in one pass over the sets;
  /// before a set's misses run, the hits of every set starting within kFusedAhead items past
  /// its end have run (the same result as the Hits launch, then the Misses launch; see the
  /// struct comment). The hits' lookups then overlap the fills' memory reads, and each set's
  /// metadata is read twice close together, while it is still in cache. Each miss's store row
  /// is prefetched into L2 only (prefetcht1: page walks and memory reads start early without
  /// filling L1's miss buffers) by the hits that find it, about kFusedAhead items before its
  /// fill (the first sets' misses, whose hits run just before them, a few items before): the
  /// hits pass already holds each item's order, outcome and row, so no second loop reads them
  /// again to prefetch. The fills need no L1 prefetch: they are streamed, not read into L1.
  /// With stream_fills (populate sets it here) the fills are non-temporal stores, fenced
  /// (`sfence`) at the end, so they are visible to every thread before the pass returns.
  void run_fused() const {
    const index_t U = *count;
    if (U <= 0 || !open(gate)) return;
    const bool simd = Paths::fast();
    index_t done = 0;  // items whose set's hits ran: [0, done)
    for (index_t p = 0; p < U;) {
      const index_t end = set_end(p, U);
      const index_t want = end + kFusedAhead < U ? end + kFusedAhead : U;
      while (done < want) {
        const index_t e = set_end(done, U);
        if (e < U) prefetch_set(e);
        hits(done, e, set_base(done), simd, true);
        done = e;
      }
      misses(p, end, set_base(p), simd);
      p = end;
    }
    if (stream_fills) Paths::fence_fills();
  }
};

/// Host, one thread: AdmitSet::run_fused as a single-item launch (HostBackend runs it inline).
template <class Storage, class Rounding, class P, class Paths = PortablePaths>
struct AdmitFused {
  AdmitSet<Storage, Rounding, P, Paths> admit;
  void operator()(index_t) const { admit.run_fused(); }
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
