// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/admission.hpp
/// @brief The set-admission code of CachedEmbedding's populate (not public), written once
/// against the `CachePolicy` hooks (mpe/cache/policy.hpp). Each functor is trivially
/// copyable and `MPE_HOST_DEVICE`, like those of mpe/detail/kernels/all.hpp.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/detail/host/avx2/pool.hpp"
#include "mpe/detail/host/avx512/encode.hpp"
#include "mpe/detail/host/avx512/pool.hpp"
#include "mpe/detail/kernels/all.hpp"
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

/// Decodes store row `src` of format Storage into the D floats at dst (a cache fill):
/// the Reader's values; on the host with AVX2 (`simd`) by detail::simd::decode_row (same bits),
/// with `stream` by non-temporal stores (decode_row's Stream: the same values; the writer
/// must `_mm_sfence` before another thread reads them).
template <class Storage>
MPE_HOST_DEVICE void fill_row(const std::uint8_t* src, std::int32_t D, float* dst, bool simd,
                              bool stream = false) {
#if MPE_HOST_SIMD
  if constexpr (simd::has_row<Storage>) {
    if (simd) {
      if (stream) {
        simd::decode_row<Storage, true>(src, D, dst);
      } else {
        simd::decode_row<Storage>(src, D, dst);
      }
      return;
    }
  }
#else
  (void)simd;
  (void)stream;
#endif
  const typename Storage::Reader rd(src, D);
  for (std::int32_t d = 0; d < D; ++d) dst[d] = rd[d];
}

/// True when P declares `victims_by_score = true` (Lru, Lfu, DirectMapped): its `choose` is
/// ScoredPolicy's, unchanged, and its scores keep ScoredPolicy's contract, so a set's
/// misses may take their slots from SetVictims. Every other policy is asked miss by miss.
template <class P>
inline constexpr bool uses_scored_choose = [] {
  if constexpr (requires { P::victims_by_score; }) {
    return std::is_base_of_v<ScoredPolicy<P>, P> && static_cast<bool>(P::victims_by_score);
  } else {
    return false;
  }
}();

/// True when P declares `set_local = true` (every built-in policy): its admission of one set
/// reads and writes nothing another set's admission writes, so one host thread may run the
/// sets' hits and misses interleaved (AdmitSet::run_fused). Other policies get every set's
/// hits before any set's misses (a policy counting hits across sets may rely on it).
template <class P>
inline constexpr bool set_local_policy = [] {
  if constexpr (requires { P::set_local; }) {
    return static_cast<bool>(P::set_local);
  } else {
    return false;
  }
}();

/// Stand-in for SetVictims where a policy is asked miss by miss (no arrays).
struct NoVictims {};

/// True when P declares `score_is_last_use = true` (Lru, DirectMapped): P::score(view,
/// cache, slot) is cache.last_use[slot] for every slot, so SetVictims may read the last uses
/// itself (on an AVX-512 host, for a multiple of 8 ways, 8 ways per compare).
template <class P>
inline constexpr bool score_is_last_use = requires {
  requires static_cast<bool>(P::score_is_last_use);
};

/// The slots that ScoredPolicy::choose gives one set's successive misses, from one read of
/// the set. choose takes the lowest empty way while one is left, then the unlocked occupied
/// way of lowest (score, way) if `admits` says so. A filled slot is locked (its last use
/// becomes the batch number, which is at or above the lock floor: SetLockFloor takes the
/// floor from this batch or an earlier one), a rejected miss changes nothing, and a slot's
/// score does not change when another slot of its set is filled (what victims_by_score states),
/// so the sequence is: the empty ways in way order, then the unlocked occupied ways by
/// ascending (score, way), each taken by the next admitted miss. Built at the set's first
/// miss (after its hits). On a GPU its arrays sit in the deciding thread's local memory
/// (cached in L1), read once per miss instead of the set's tags and scores.
///
/// The unlocked occupied ways are listed in way order, so (score, position in the list) is
/// (score, way) order. Where every score is below 2^54 and positions fit 8 bits (`packed`),
/// one 64-bit key per entry, score << 8 | position, orders them and the smallest key names
/// its own position: a take finds the lowest key (a SIMD minimum where the host has one) and
/// marks it `kTaken`, with no search for the key's position and no swap. Otherwise the
/// scores are compared in a loop. For a policy whose score is the last use
/// (score_is_last_use) with a multiple of 8 ways, a set without empty ways is listed by
/// simd512::unlocked_by_last_use on an AVX-512 host (the same list; other sets and hosts call
/// P::score). One read of the set and one key compare per take replace a full scan of the
/// set's ways per miss.
template <class P>
struct SetVictims {
  /// Key of an entry handed out: above every packed key, below 2^63 (the AVX2 minimum
  /// compares signed).
  static constexpr std::uint64_t kTaken = 0x7fffffffffffffffULL;
  std::int64_t empty[P::ways];   // the empty ways' slots, way order
  std::int64_t slot[P::ways];    // the unlocked occupied ways' slots, way order
  std::uint64_t score[P::ways];  // their scores
  std::uint64_t key[P::ways];    // packed: score << 8 | position; kTaken once handed out
  std::int32_t empties = 0;      // entries in empty
  std::int32_t next_empty = 0;   // next empty way to hand out
  std::int32_t count = -1;       // entries in slot; -1: not built yet
  std::int32_t left = 0;         // entries in slot not handed out
  std::int32_t lowest = -1;      // position of the lowest entry not handed out; -1: not found yet
  bool packed = P::ways <= 256;  // keys order the entries (see the struct comment)
  bool sorted = false;           // key[] sorted ascending (no SIMD minimum): take key[next]
  std::int32_t next = 0;         // sorted: the next key to hand out

  /// Lists the set at `base` (see the struct comment).
  MPE_HOST_DEVICE void build(typename P::View v, const CacheRef& c, index_t base, std::uint64_t floor) {
#if MPE_HOST_AVX512
    if constexpr (score_is_last_use<P> && P::ways % 8 == 0) {
      if (host_avx512_enabled()) {
        count = simd512::unlocked_by_last_use(c.tags + base, c.last_use + base, P::ways, floor, base, slot,
                                              score, key, packed);
      }
    }
#endif
    if (count < 0) {
      count = 0;
      for (std::int32_t w = 0; w < c.ways; ++w) {
        MPE_TRIP();
        const index_t s = base + w;
        if (c.tags[s] < 0) {
          empty[empties++] = s;
          continue;
        }
        if (c.last_use[s] >= floor) continue;
        const std::uint64_t sc = P::score(v, c, s);
        packed = packed && (sc >> 54) == 0;
        slot[count] = s;
        score[count] = sc;
        key[count] = sc << 8 | static_cast<std::uint64_t>(count);
        ++count;
      }
    }
    if (!packed) {
      for (std::int32_t k = 0; k < count; ++k) key[k] = 0;  // only kTaken is read
    }
    left = count;
#if MPE_HOST_SIMD
    const bool simd = host_simd_enabled();
#else
    const bool simd = false;
#endif
    if (packed && !simd) {
      // Without a SIMD minimum (a GPU thread): the keys sorted once (insertion sort of at
      // most P::ways entries), so each take is the next key instead of a scan of them all.
      for (std::int32_t k = 1; k < count; ++k) {
        const std::uint64_t x = key[k];
        std::int32_t j = k;
        for (; j > 0 && key[j - 1] > x; --j) {
          MPE_TRIP();
          key[j] = key[j - 1];
        }
        key[j] = x;
      }
      sorted = true;
    }
  }

  /// Position of the lowest (score, way) among the entries not handed out (left > 0).
  MPE_HOST_DEVICE std::int32_t find_lowest() const {
    if (packed) {
#if MPE_HOST_AVX512
      if (host_avx512_enabled()) return static_cast<std::int32_t>(simd512::min_key(key, count) & 0xff);
#endif
#if MPE_HOST_SIMD
      if (host_simd_enabled()) return static_cast<std::int32_t>(simd::min_key(key, count) & 0xff);
#endif
      std::uint64_t m = kTaken;
      for (std::int32_t k = 0; k < count; ++k) {
        MPE_TRIP();
        m = key[k] < m ? key[k] : m;
      }
      return static_cast<std::int32_t>(m & 0xff);
    }
    std::int32_t m = -1;
    for (std::int32_t k = 0; k < count; ++k) {
      if (key[k] == kTaken) continue;
      if (m < 0 || score[k] < score[m]) m = k;  // ties: the lower position, the lower way
    }
    return m;
  }

  /// The slot for the next miss of the set at `base` (see the struct comment).
  MPE_HOST_DEVICE CacheChoice take(typename P::View v, const CacheRef& c, index_t base, std::uint64_t floor,
                                   std::uint32_t priority) {
    if (count < 0) build(v, c, base, floor);
    if (next_empty < empties) return {empty[next_empty++], false};
    if (left == 0) return {-1, false};  // every way locked: a conflict miss
    if (sorted) {                       // key[next] is the lowest not handed out; its low byte, its position
      const auto at = static_cast<std::int32_t>(key[next] & 0xff);
      if (!P::admits(v, priority, score[at])) return {-1, true};
      ++next;
      --left;
      return {slot[at], false};
    }
    if (lowest < 0) lowest = find_lowest();
    if (!P::admits(v, priority, score[lowest])) return {-1, true};
    const std::int64_t s = slot[lowest];
    key[lowest] = kTaken;
    --left;
    lowest = -1;
    return {s, false};
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
template <class Storage, class Rounding, class P>
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
  /// Host: fills written by non-temporal stores (fill_row's `stream`), so a victim's cache
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
      const index_t s = find_in_set(cache, base, rows[q], simd);
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
    [[maybe_unused]] std::conditional_t<by_list, SetVictims<P>, NoVictims> victims;
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
            if (store_row<Storage, Rounding>(crow, D, store + static_cast<std::size_t>(old) * stride, rng)) {
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
        fill_row<Storage>(store + static_cast<std::size_t>(row) * stride, D, crow, simd, stream_fills);
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
    simd = host_simd_enabled();
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
    const bool simd = host_simd_enabled();
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
#if MPE_HOST_SIMD
    if (stream_fills) _mm_sfence();
#endif
  }
};

/// True when P declares `hits_commute = true` (Lru, Lfu, DirectMapped): its on_hit writes
/// only the hit slot's own metadata, so a set's hits may run in any order, concurrently
/// (AdmitHitsLanes). Other policies' hits run in admission order, one thread per set.
template <class P>
inline constexpr bool hits_commute = [] {
  if constexpr (requires { P::hits_commute; }) {
    return static_cast<bool>(P::hits_commute);
  } else {
    return false;
  }
}();

/// Laned backends, a hits_commute policy: AdmitPhase::Hits for item q (admission order),
/// the set's ways split over the lanes. The lane holding the row's tag (a row is in at most
/// one way) records the hit: slot, outcome kHit, last use = the batch number, on_hit.
/// slot_of_unique (-1) and outcome (0) are filled before the launch, so a miss writes
/// nothing. Does nothing when the batch failed validation.
template <class P>
struct AdmitHitsLanes {
  const std::uint64_t* keys;  // (U) sorted admission keys (set << 32 | ...)
  const index_t* order;       // (U) unique index of each item
  const index_t* rows;        // (U) row of each item
  const index_t* count;       // (1) U
  const index_t* gate;        // batch ok flag, or null
  CacheRef cache;
  typename P::View view;
  std::uint64_t batch_id;
  index_t* slot_of_unique;  // (U) -1 on entry
  std::uint8_t* outcome;    // (U) 0 on entry
  MPE_HOST_DEVICE void operator()(index_t q, std::int32_t lane, std::int32_t lanes) const {
    if (q >= *count || !open(gate)) return;
    const index_t base = static_cast<index_t>(keys[q] >> 32) * cache.ways;
    const index_t row = rows[q];
    for (std::int32_t w = lane; w < cache.ways; w += lanes) {
      MPE_TRIP();
      if (cache.tags[base + w] != row) continue;
      const index_t s = base + w;
      const index_t u = order[q];
      slot_of_unique[u] = s;
      outcome[u] = kHit;
      cache.last_use[s] = batch_id;
      P::on_hit(view, cache, s);
    }
  }
};

/// Laned backends whose lanes are one warp (warp_lanes), a policy whose misses take their
/// slots from SetVictims (uses_scored_choose) with at most 32 ways: AdmitSet's deciding
/// Misses phase (`set.evicted` set: slots, tags, last uses, dirty flags, outcome codes and
/// evicted rows; WriteBackLanes and FillLanes then move the rows) with a warp per set
/// instead of a thread. Item c covers the admission-order items [c * lanes, (c + 1) * lanes)
/// and decides every set whose first item lies there. Lane w holds way w: one read of the
/// set's tags and last uses, a ballot for the empty ways and the unlocked occupied ones, and
/// each lane's place in SetVictims' order (the empty ways by way, then the unlocked ways by
/// (score, way)) from a comparison with every other lane's score. The set's items are then
/// read 32 at a time and its misses, in admission order, take places 0, 1, 2, ... of that
/// order (a place among the unlocked ways only if P::admits the miss at that way's score; a
/// refused miss takes none; none left: a conflict), the lane of the way taken writing the
/// slot's metadata: the same slots, codes and bits as SetVictims in one thread per set.
/// Where lanes run one after another (no warp), lane 0 runs AdmitSet's misses for each such
/// set instead. The warp code is written against WarpOps (CudaWarp on a GPU), so
/// tests/cache/test_admit_misses_lanes.cpp runs it on a CPU with an emulated warp against
/// AdmitSet, decision by decision.
template <class Storage, class Rounding, class P>
struct AdmitMissesLanes {
  static_assert(P::ways <= 32, "mpe::detail::AdmitMissesLanes: a way per lane of one warp");
  AdmitSet<Storage, Rounding, P> set;  // phase Misses, evicted set
  MPE_HOST_DEVICE void operator()(index_t c, std::int32_t lane, std::int32_t lanes) const {
#ifdef __CUDA_ARCH__
    (void)lanes;  // 32
    chunk(CudaWarp{}, c, lane);
#else
    if (lane != 0) return;
    for (index_t p = c * lanes; p < (c + 1) * lanes; ++p) set(p);  // the heads run their sets
#endif
  }

  /// Item c by a warp (WarpOps: CudaWarp, or the tests' emulation; every lane calls): the
  /// sets whose first item lies in [32 c, 32 c + 32), one after another.
  template <class Warp>
  MPE_HOST_DEVICE void chunk(const Warp& warp, index_t c, std::int32_t lane) const {
    const index_t U = *set.count;
    const index_t p0 = c * 32;
    if (p0 >= U || !open(set.gate)) return;  // the same for every lane
    const index_t p = p0 + lane;
    const bool head = p < U && set.is_head(p);
    for (unsigned heads = warp.ballot(head); heads != 0u; heads &= heads - 1u) {
      decide(warp, p0 + lowest_lane(heads), U, lane);
    }
  }

  /// The set whose items start at p, decided by the warp (see the struct comment).
  template <class Warp>
  MPE_HOST_DEVICE void decide(const Warp& warp, index_t p, index_t U, std::int32_t lane) const {
    const CacheRef& cache = set.cache;
    const std::uint64_t key_set = set.keys[p] >> 32;
    index_t end = p + 1;  // one past the set's last item: 32 keys per step
    for (;; end += 32) {
      const index_t q = end + lane;
      const unsigned out = warp.ballot(q >= U || (set.keys[q] >> 32) != key_set);
      if (out != 0u) {
        end += lowest_lane(out);
        break;
      }
    }
    const index_t base = static_cast<index_t>(key_set) * cache.ways;
    const std::uint64_t floor = *set.lock_floor;
    const bool way = lane < cache.ways;
    const index_t s = base + lane;
    const index_t tag = way ? cache.tags[s] : -1;
    const bool empty = way && tag < 0;
    const bool unlocked = way && tag >= 0 && cache.last_use[s] < floor;
    const std::uint64_t score = unlocked ? P::score(set.view, cache, s) : 0;
    const unsigned empties = warp.ballot(empty), open_ways = warp.ballot(unlocked);
    const std::int32_t n_empty = lane_count(empties), places = n_empty + lane_count(open_ways);
    std::int32_t place = -1;  // this way's place in SetVictims' order; -1: never handed out
    if (empty) place = lane_count(empties & ((1u << lane) - 1u));
    std::int32_t below = 0;  // unlocked ways before this one: lower (score, way)
    for (std::int32_t j = 0; j < 32; ++j) {
      const std::uint64_t sj = warp.shfl(score, j);
      below += ((open_ways >> j) & 1u) != 0u && (sj < score || (sj == score && j < lane)) ? 1 : 0;
    }
    if (unlocked) place = n_empty + below;
    std::int32_t next = 0;  // the next place to hand out
    for (index_t q0 = p; q0 < end; q0 += 32) {
      const index_t q = q0 + lane;
      index_t u = -1, row = -1;
      std::uint32_t priority = 0;
      bool miss = false;
      if (q < end) {
        u = set.order[q];
        miss = (set.outcome[u] & kHit) == 0;
        if (miss) {
          priority = set.priorities[u];
          row = set.rows[q];
        }
      }
      for (unsigned misses = warp.ballot(miss); misses != 0u; misses &= misses - 1u) {
        const std::int32_t i = lowest_lane(misses);
        const index_t ui = warp.shfl(u, i), ri = warp.shfl(row, i);
        const std::uint32_t pi = warp.shfl(priority, i);
        if (next == places) {  // every way locked or taken: a conflict miss
          if (lane == 0) set.outcome[ui] = kConflict;
          continue;
        }
        const std::int32_t at = lowest_lane(warp.ballot(place == next));
        const std::uint64_t at_score = warp.shfl(score, at);
        if (next >= n_empty && !P::admits(set.view, pi, at_score)) {
          if (lane == 0) set.outcome[ui] = kRejected;
          continue;
        }
        ++next;
        if (lane != at) continue;
        std::uint8_t code = kFilled;
        if (tag >= 0) {
          code |= kEvicted;
          if (cache.dirty[s]) {
            set.evicted[ui] = tag;
            code |= kWroteBack;
          }
        }
        cache.set_tag(s, ri);
        cache.last_use[s] = set.batch_id;
        cache.dirty[s] = 0;
        set.slot_of_unique[ui] = s;
        set.outcome[ui] = code;
      }
    }
  }
};

/// Laned backends, after AdmitSet's deciding Misses phase (AdmitSet::evicted): the dirty
/// victim of unique row u (outcome kWroteBack) written back to its store row with Rounding
/// at site WriteBack, each lane storing its element groups (detail::store_lanes; the same
/// bytes as Storage::store), and lane 0 its compact optimizer state. A lane that saturates
/// adds kSaturated to outcome[u] (every such write stores the same value).
template <class Storage, class Rounding>
struct WriteBackLanes {
  const index_t* slot_of_unique;  // (U)
  const index_t* evicted;         // (U) the victim's row, where kWroteBack
  std::uint8_t* outcome;          // (U)
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  num::RowStream stream;      // the rounding streams (seed, row keys)
  const std::uint64_t* step;  // (1) completed backward() calls
  StateRef state;
  const index_t* count;  // (1) U
  const index_t* gate;   // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *count || !open(gate) || !(outcome[u] & kWroteBack)) return;
    const index_t s = slot_of_unique[u], old = evicted[u];
    const num::RowRng rng = stream.at(old, static_cast<std::uint32_t>(*step), num::RoundingSite::WriteBack);
    bool sat = store_lanes<Storage, Rounding>(
        cache.row(s), cache.dim, store + static_cast<std::size_t>(old) * stride, rng, lane, lanes);
    if (lane == 0) {
      sat = state.template write_back<Rounding>(s, old, static_cast<std::uint32_t>(*step),
                                                num::RoundingSite::StateWriteBack) ||
            sat;
    }
    if (sat) outcome[u] = static_cast<std::uint8_t>(outcome[u] | kSaturated);
  }
};

/// Laned backends, after WriteBackLanes: unique row u's fill (outcome kFilled), its store
/// row decoded into its slot by lanes on element chunks (the Reader's values, as fill_row),
/// and lane 0 its compact optimizer state (StateRef::fill).
template <class Storage>
struct FillLanes {
  const index_t* uniq;            // (U)
  const index_t* slot_of_unique;  // (U)
  const std::uint8_t* outcome;    // (U)
  CacheRef cache;
  const std::uint8_t* store;
  std::size_t stride;
  StateRef state;
  const index_t* count;  // (1) U
  const index_t* gate;   // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *count || !open(gate) || !(outcome[u] & kFilled)) return;
    const index_t s = slot_of_unique[u], row = uniq[u];
    const std::int32_t D = cache.dim;
    const std::uint8_t* src = store + static_cast<std::size_t>(row) * stride;
    float* crow = cache.row(s);
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float x[kLaneChunk];
      decode_chunk<Storage>(src, D, c, m, x);
      store_lane_chunk(crow + c, m, x);
    }
    if (lane == 0) state.fill(s, row);
  }
};

/// Host, one thread: AdmitSet::run_fused as a single-item launch (HostBackend runs it inline).
template <class Storage, class Rounding, class P>
struct AdmitFused {
  AdmitSet<Storage, Rounding, P> admit;
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
