// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/lfu.hpp
/// @brief The cache policy `Lfu<Ways>`: least frequently used by a count-min sketch (scores:
/// mpe/cache/all.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/numeric/atomics.hpp"

namespace mpe {

/// Least frequently used, `Ways`-way set-associative, frequencies estimated by a
/// count-min sketch sized by the cache (not the table).
///
/// Metadata (its checkpoint section `lfu`; `sketch` in checkpoint versions 1 and 2): the
/// sketch, 4 lines x `width` u32 counters, line-major, `width` = the smallest power of two
/// >= max(16, 2 x slots) (32 to 64 bytes per slot from 8 slots, 256 bytes in all below). Every unique row of
/// a batch adds 1 to its counter in each line before admission (mpe::SketchRef::cell gives the positions);
/// every counter is halved once per 10 x slots increments.
template <int Ways = 32>
struct Lfu : ScoredPolicy<Lfu<Ways>> {
  static_assert(Ways >= 1 && Ways <= 256, "mpe::Lfu: Ways must be in [1, 256]");
  static constexpr int ways = Ways;           ///< ways per set
  static constexpr bool uses_sketch = true;   ///< keeps a count-min sketch
  static constexpr const char* name = "lfu";  ///< checkpoint name and section name
  /// choose is ScoredPolicy's and the score (the resident row's estimate) changes only in
  /// observe, before admission: the admission reads a set once for all its misses.
  static constexpr bool victims_by_score = true;
  /// on_hit and choose write nothing and read the sketch, which admission never writes.
  static constexpr bool set_local = true;
  /// on_hit writes nothing: a set's hits may run concurrently (see CachePolicy: hits_commute).
  static constexpr bool hits_commute = true;
  /// The metadata is the sketch (backend memory).
  using View = SketchRef;
  /// Sketch width for `slots` slots.
  static std::int64_t sketch_width(std::int64_t slots) {
    std::int64_t w = 16;
    while (w < 2 * slots) w *= 2;
    return w;
  }
  /// The sketch's counters: 4 x sketch_width(slots) (0 without a cache).
  static std::int64_t meta_words(std::int64_t slots) {
    return slots > 0 ? SketchRef::depth * sketch_width(slots) : 0;
  }
  /// The sketch over the metadata words.
  static View view(std::uint32_t* words, std::int64_t slots) {
    return {words, slots > 0 ? sketch_width(slots) : 0};
  }
  /// Every unique row of a batch is counted before admission.
  static constexpr bool observes = true;
  /// Pass 1: +1 in each line (integer atomics: the result does not depend on order).
  MPE_HOST_DEVICE static void observe(View v, std::int64_t row, std::uint32_t&, int pass) {
    if (pass != 1) return;
    for (int k = 0; k < SketchRef::depth; ++k) detail::atomic_add(&v.counters[v.cell(row, k)], 1u);
  }
  /// Priority and score: the row's estimate now.
  MPE_HOST_DEVICE static std::uint32_t priority(View v, std::int64_t row, std::uint32_t) {
    return v.estimate(row);
  }
  /// A hit changes no policy metadata (it was counted by observe).
  MPE_HOST_DEVICE static void on_hit(View, const CacheRef&, std::int64_t) {}
  /// Score: the resident row's estimate now.
  MPE_HOST_DEVICE static std::uint64_t score(View v, const CacheRef& c, std::int64_t slot) {
    return v.estimate(c.tags[slot]);
  }
  /// A miss replaces the victim only when its estimate is strictly higher.
  MPE_HOST_DEVICE static bool admits(View, std::uint32_t priority, std::uint64_t victim_score) {
    return static_cast<std::uint64_t>(priority) > victim_score;
  }
  /// Counters halve every 10 x slots unique rows.
  static std::uint64_t decay_period(std::int64_t slots) { return static_cast<std::uint64_t>(10 * slots); }
  /// Every counter decays.
  static std::int64_t decay_items(std::int64_t slots) { return meta_words(slots); }
  /// Halves counter i `times` times.
  MPE_HOST_DEVICE static void decay(View v, std::int64_t i, std::uint64_t times) {
    v.counters[i] = times >= 32 ? 0u : v.counters[i] >> times;
  }
  /// Any counter values are valid: always the empty string.
  static std::string check_meta(const std::uint32_t*, const std::int64_t*, std::int64_t) { return {}; }
};

}  // namespace mpe
