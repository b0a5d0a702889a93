// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/lru.hpp
/// @brief The cache policy `Lru<Ways>`: least recently used (scores: mpe/cache/all.hpp).
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"

namespace mpe {

/// Least recently used, `Ways`-way set-associative (32 ways as FBGEMM by default).
/// Metadata: none beyond the cache's own (the score is the slot's last-use batch number).
template <int Ways = 32>
struct Lru : PolicyBase, ScoredPolicy<Lru<Ways>> {
  static_assert(Ways >= 1 && Ways <= 256, "mpe::Lru: Ways must be in [1, 256]");
  static constexpr int ways = Ways;           ///< ways per set
  static constexpr bool uses_sketch = false;  ///< keeps no count-min sketch
  static constexpr const char* name = "lru";  ///< checkpoint name
  using ScoredPolicy<Lru<Ways>>::choose;
  /// choose is ScoredPolicy's and the score is the slot's own last use: the admission reads
  /// a set once for all its misses.
  static constexpr bool victims_by_score = true;
  /// The score is the slot's last use: the admission may read the last uses itself.
  static constexpr bool score_is_last_use = true;
  /// on_hit and choose touch only their own set's slots (see CachePolicy: set_local).
  static constexpr bool set_local = true;
  /// on_hit writes nothing: a set's hits may run concurrently (see CachePolicy: hits_commute).
  static constexpr bool hits_commute = true;
  /// Score: the populate counter of the slot's last batch.
  MPE_HOST_DEVICE static std::uint64_t score(View, const CacheRef& c, std::int64_t slot) {
    return c.last_use[slot];
  }
  /// Every miss replaces the victim.
  MPE_HOST_DEVICE static bool admits(View, std::uint32_t, std::uint64_t) { return true; }
};

}  // namespace mpe
