// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/second_touch_lru.hpp
/// @brief The cache policy `SecondTouchLru<Ways>`: LRU replacement with admission on the
/// second touch (scores: mpe/cache/all.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/lfu.hpp"
#include "mpe/cache/policy.hpp"

namespace mpe {

/// Least recently used replacement with a frequency-sketch admission rule: a missing row
/// takes an empty way whenever its set has one, but replaces a resident row only from its
/// second touch on, that is when its count-min estimate (this batch's touch included) is at
/// least 2. A row the rule refuses stays uncached for the batch (a *bypass*, counted in
/// CacheStats::lfu_rejections): the forward pools it straight from the store and the
/// backward applies its update to the store with the embedding's Rounding, exactly as a
/// store-only table does, so rows touched once (most of a Zipf tail) neither evict a hot
/// row nor cost a fill and a write-back.
///
/// The sketch has Lfu's shape (4 lines x `width` u32 counters, width = the smallest power of
/// two >= max(16, 2 x slots); every unique row of a batch adds 1 in each line before
/// admission) but ages faster: every counter is halved once per `slots` increments (Lfu:
/// 10 x slots), so "second touch" means touched in two batches within about the time the
/// cache takes to see as many unique rows as it has slots, and the sketch stays lightly
/// loaded (at most about slots / width <= 1/2 per counter between halvings, so a first
/// touch rarely reads 2 through collisions). Its checkpoint section is named
/// `second_touch_lru`.
///
/// Admission order of a set's misses: rows seen before (estimate >= 2) first, then the
/// others, each group by ascending row (priority = min(estimate, 2)). The victim is Lru's:
/// the lowest empty way, else the unlocked resident row of least recent use (ties to the
/// lowest way).
template <int Ways = 32>
struct SecondTouchLru : ScoredPolicy<SecondTouchLru<Ways>> {
  static_assert(Ways >= 1 && Ways <= 256, "mpe::SecondTouchLru: Ways must be in [1, 256]");
  static constexpr int ways = Ways;                        ///< ways per set
  static constexpr bool uses_sketch = true;                ///< keeps a count-min sketch
  static constexpr const char* name = "second_touch_lru";  ///< checkpoint name and section name
  /// Estimate from which a miss may replace a resident row.
  static constexpr std::uint32_t kAdmitEstimate = 2;
  using ScoredPolicy<SecondTouchLru<Ways>>::choose;
  /// choose is ScoredPolicy's and the score is the slot's own last use: the admission reads
  /// a set once for all its misses.
  static constexpr bool victims_by_score = true;
  /// The score is the slot's last use: the admission may read the last uses itself.
  static constexpr bool score_is_last_use = true;
  /// on_hit writes nothing and choose reads only the sketch (see CachePolicy: set_local).
  static constexpr bool set_local = true;
  /// on_hit writes nothing: a set's hits may run concurrently (see CachePolicy: hits_commute).
  static constexpr bool hits_commute = true;
  /// The metadata is the sketch (backend memory), as Lfu's.
  using View = SketchRef;
  /// The sketch's counters: Lfu's (4 x its sketch width; 0 without a cache).
  static std::int64_t meta_words(std::int64_t slots) { return Lfu<Ways>::meta_words(slots); }
  /// The sketch over the metadata words.
  static View view(std::uint32_t* words, std::int64_t slots) { return Lfu<Ways>::view(words, slots); }
  /// Every unique row of a batch is counted before admission.
  static constexpr bool observes = true;
  /// Pass 1: +1 in each line, as Lfu's.
  MPE_HOST_DEVICE static void observe(View v, std::int64_t row, std::uint32_t& scratch, int pass) {
    Lfu<Ways>::observe(v, row, scratch, pass);
  }
  /// min(estimate, 2): rows touched before are admitted first.
  MPE_HOST_DEVICE static std::uint32_t priority(View v, std::int64_t row) {
    const std::uint32_t e = v.estimate(row);
    return e < kAdmitEstimate ? e : kAdmitEstimate;
  }
  /// A hit changes no policy metadata (it was counted by observe; the cache sets its last use).
  MPE_HOST_DEVICE static void on_hit(View, const CacheRef&, std::int64_t) {}
  /// Score: the populate counter of the slot's last batch (as Lru's).
  MPE_HOST_DEVICE static std::uint64_t score(View, const CacheRef& c, std::int64_t slot) {
    return c.last_use[slot];
  }
  /// A miss replaces the victim only from its second touch on.
  MPE_HOST_DEVICE static bool admits(View, std::uint32_t priority, std::uint64_t) {
    return priority >= kAdmitEstimate;
  }
  /// Counters halve every `slots` unique rows.
  static std::uint64_t decay_period(std::int64_t slots) { return static_cast<std::uint64_t>(slots); }
  /// Every counter decays.
  static std::int64_t decay_items(std::int64_t slots) { return meta_words(slots); }
  /// Halves counter i `times` times.
  MPE_HOST_DEVICE static void decay(View v, std::int64_t i, std::uint64_t times) {
    Lfu<Ways>::decay(v, i, times);
  }
  /// Any counter values are valid: always the empty string.
  static std::string check_meta(const std::uint32_t*, const std::int64_t*, std::int64_t) { return {}; }
};

}  // namespace mpe
