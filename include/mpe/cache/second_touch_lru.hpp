// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/second_touch_lru.hpp
/// @brief The cache policy `SecondTouchLru<Ways>`: LRU replacement with admission on the
/// second touch, decided by a doorkeeper (scores: mpe/cache/all.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/numeric/atomics.hpp"

namespace mpe {

/// Least recently used replacement with a doorkeeper admission rule: a missing row takes an
/// empty way whenever its set has one, but replaces a resident row only on its second
/// touch, that is when the doorkeeper has seen it in an earlier batch (in its current or
/// previous generation). A row the rule refuses stays uncached for the batch (a *bypass*, counted in
/// CacheStats::lfu_rejections): the forward pools it straight from the store and the
/// backward applies its update to the store with the embedding's Rounding, exactly as a
/// store-only table does, so rows touched once (most of a Zipf tail) neither evict a hot
/// row nor cost a fill and a write-back.
///
/// The doorkeeper (mpe::DoorkeeperRef) is a Bloom filter of two generations, two bits a row
/// in one 32-bit word per generation half, sized to the cache: `words` = the smallest power
/// of two >= max(32, slots) (4 to 8 bytes a slot from 32 slots; Lfu's count-min sketch takes
/// 32 to 64 from 8 slots).
/// Before admission every unique row of a batch is looked up (pass 0: seen in either
/// generation before this batch?) and then inserted into the current generation (pass 1,
/// an atomic OR: the same bits in any order). A populate after which the unique rows
/// counted since construction have passed one or more further multiples of `slots` rotates
/// the generations once (the previous one is forgotten): "second touch" means touched in
/// two batches at most about two cache-sizes of unique rows apart, and the rows of the
/// batch just before are always remembered, however many rows a batch has. Its checkpoint
/// section is named `second_touch_lru` (version 4 files from before the doorkeeper held a
/// 4-line sketch there and are refused: their `policy_words` differ).
///
/// Admission order of a set's misses: rows seen before first, then the others, each group
/// by ascending row (priority = 2 if seen, else 1). The victim is Lru's: the lowest empty
/// way, else the unlocked resident row of least recent use (ties to the lowest way).
template <int Ways = 32>
struct SecondTouchLru : ScoredPolicy<SecondTouchLru<Ways>> {
  static_assert(Ways >= 1 && Ways <= 256, "mpe::SecondTouchLru: Ways must be in [1, 256]");
  static constexpr int ways = Ways;                        ///< ways per set
  static constexpr bool uses_sketch = false;               ///< keeps no count-min sketch
  static constexpr bool uses_doorkeeper = true;            ///< keeps a doorkeeper (DoorkeeperRef)
  static constexpr const char* name = "second_touch_lru";  ///< checkpoint name and section name
  /// Priority from which a miss may replace a resident row (seen in an earlier batch).
  static constexpr std::uint32_t kAdmitPriority = 2;
  using ScoredPolicy<SecondTouchLru<Ways>>::choose;
  /// choose is ScoredPolicy's and the score is the slot's own last use: the admission reads
  /// a set once for all its misses.
  static constexpr bool victims_by_score = true;
  /// The score is the slot's last use: the admission may read the last uses itself.
  static constexpr bool score_is_last_use = true;
  /// on_hit writes nothing and choose reads no metadata (see CachePolicy: set_local).
  static constexpr bool set_local = true;
  /// on_hit writes nothing: a set's hits may run concurrently (see CachePolicy: hits_commute).
  static constexpr bool hits_commute = true;
  /// The metadata is the doorkeeper (backend memory).
  using View = DoorkeeperRef;
  /// Doorkeeper words for `slots` slots: the smallest power of two >= max(32, slots).
  static std::int64_t doorkeeper_words(std::int64_t slots) {
    std::int64_t w = 32;
    while (w < slots) w *= 2;
    return w;
  }
  /// The doorkeeper's words (0 without a cache).
  static std::int64_t meta_words(std::int64_t slots) { return slots > 0 ? doorkeeper_words(slots) : 0; }
  /// The doorkeeper over the metadata words.
  static View view(std::uint32_t* words, std::int64_t slots) { return {words, meta_words(slots)}; }
  /// Every unique row of a batch is looked up, then inserted, before admission.
  static constexpr bool observes = true;
  /// Pass 0: scratch = 1 if the row was seen before this batch, else 0. Pass 1: insert it
  /// into the current generation.
  MPE_HOST_DEVICE static void observe(View v, std::int64_t row, std::uint32_t& scratch, int pass) {
    if (pass == 0) {
      scratch = v.contains(row) ? 1u : 0u;
    } else {
      detail::atomic_or(&v.bits[v.word(row)], View::mask(row));
    }
  }
  /// 2 for a row seen before this batch (pass 0's scratch), else 1.
  MPE_HOST_DEVICE static std::uint32_t priority(View, std::int64_t, std::uint32_t seen) { return 1u + seen; }
  /// A hit changes no policy metadata (observe inserted it; the cache sets its last use).
  MPE_HOST_DEVICE static void on_hit(View, const CacheRef&, std::int64_t) {}
  /// Score: the populate counter of the slot's last batch (as Lru's).
  MPE_HOST_DEVICE static std::uint64_t score(View, const CacheRef& c, std::int64_t slot) {
    return c.last_use[slot];
  }
  /// A miss replaces the victim only on its second touch.
  MPE_HOST_DEVICE static bool admits(View, std::uint32_t priority, std::uint64_t) {
    return priority >= kAdmitPriority;
  }
  /// The generations rotate every `slots` unique rows (once per populate, see above).
  static std::uint64_t decay_period(std::int64_t slots) { return static_cast<std::uint64_t>(slots); }
  /// Every word rotates.
  static std::int64_t decay_items(std::int64_t slots) { return meta_words(slots); }
  /// Rotates word i once, however many periods (`times` >= 1) the populate passed.
  MPE_HOST_DEVICE static void decay(View v, std::int64_t i, std::uint64_t) { v.rotate(i); }
  /// Any bits are valid: always the empty string.
  static std::string check_meta(const std::uint32_t*, const std::int64_t*, std::int64_t) { return {}; }
};

}  // namespace mpe
