// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/direct_mapped.hpp
/// @brief The cache policy `DirectMapped`: direct-mapped (scores: mpe/cache/all.hpp).
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"

namespace mpe {

/// Direct-mapped: one way per set (each row has exactly one possible slot). Metadata: none.
struct DirectMapped : PolicyBase, ScoredPolicy<DirectMapped> {
  static constexpr int ways = 1;                        ///< one way per set
  static constexpr bool uses_sketch = false;            ///< keeps no count-min sketch
  static constexpr const char* name = "direct_mapped";  ///< checkpoint name
  using ScoredPolicy<DirectMapped>::choose;
  /// choose is ScoredPolicy's and the score is the slot's own last use.
  static constexpr bool victims_by_score = true;
  /// The score is the slot's last use: the admission may read the last uses itself.
  static constexpr bool score_is_last_use = true;
  /// on_hit and choose touch only their own set's slot (see CachePolicy: set_local).
  static constexpr bool set_local = true;
  /// on_hit writes nothing: a set's hits may run concurrently (see CachePolicy: hits_commute).
  static constexpr bool hits_commute = true;
  /// Score: the populate counter of the slot's last batch (as Lru<1>).
  MPE_HOST_DEVICE static std::uint64_t score(View, const CacheRef& c, std::int64_t slot) {
    return c.last_use[slot];
  }
  /// Every miss replaces the unlocked row.
  MPE_HOST_DEVICE static bool admits(View, std::uint32_t, std::uint64_t) { return true; }
};

}  // namespace mpe
