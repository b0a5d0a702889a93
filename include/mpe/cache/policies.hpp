// SPDX-License-Identifier: Apache-2.0
/// @file policies.hpp
/// @brief Cache replacement policies: `Lru<Ways>`, `Lfu<Ways>`, `DirectMapped`.
///
// clang-format off
/// What each policy scores (lowest score is evicted first; empty ways before any
/// occupied way; ties to the lowest way index):
///
/// | policy       | score of a resident row                 | admission order of a set's misses | a miss replaces a victim when |
/// |--------------|-----------------------------------------|-----------------------------------|-------------------------------|
/// | Lru<W>       | populate counter of its last batch      | ascending global row              | always                        |
/// | Lfu<W>       | count-min-sketch estimate, now          | descending estimate, then row     | its estimate > the victim's   |
/// | DirectMapped | as Lru<1>                               | ascending global row              | always                        |
// clang-format on
#pragma once

#include <concepts>
#include <cstdint>

namespace mpe {

/// Least recently used, `Ways`-way set-associative (32 ways as FBGEMM by default).
template <int Ways = 32>
struct Lru {
  static_assert(Ways >= 1 && Ways <= 256, "mpe::Lru: Ways must be in [1, 256]");
  static constexpr int ways = Ways;
  static constexpr bool uses_sketch = false;
  static constexpr const char* name = "lru";
};

/// Least frequently used, `Ways`-way set-associative, frequencies estimated by a
/// count-min sketch sized by the cache (not the table).
template <int Ways = 32>
struct Lfu {
  static_assert(Ways >= 1 && Ways <= 256, "mpe::Lfu: Ways must be in [1, 256]");
  static constexpr int ways = Ways;
  static constexpr bool uses_sketch = true;
  static constexpr const char* name = "lfu";
};

/// Direct-mapped: one way per set (each row has exactly one possible slot).
struct DirectMapped {
  static constexpr int ways = 1;
  static constexpr bool uses_sketch = false;
  static constexpr const char* name = "direct_mapped";
};

/// A cache replacement policy (checked at compile time).
template <class P>
concept CachePolicy = requires {
  { P::ways } -> std::convertible_to<int>;
  { P::uses_sketch } -> std::convertible_to<bool>;
  { P::name } -> std::convertible_to<const char*>;
}
&&(P::ways >= 1);

}  // namespace mpe
