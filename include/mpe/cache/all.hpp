// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/all.hpp
/// @brief Every cache policy: `Lru<Ways>`, `Lfu<Ways>`, `DirectMapped`, `SecondTouchLru<Ways>`,
/// `WTinyLfu<Ways>`, one header each.
///
// clang-format off
/// What each policy scores (lowest score is evicted first; empty ways before any
/// occupied way; ties to the lowest way index):
///
/// | policy            | score of a resident row                 | admission order of a set's misses     | a miss replaces a victim when   |
/// |-------------------|-----------------------------------------|---------------------------------------|---------------------------------|
/// | Lru<W>            | populate counter of its last batch      | ascending global row                  | always                          |
/// | Lfu<W>            | count-min-sketch estimate, now          | descending estimate, then row         | its estimate > the victim's     |
/// | DirectMapped      | as Lru<1>                               | ascending global row                  | always                          |
/// | SecondTouchLru<W> | as Lru<W>                               | seen before first, then row           | a doorkeeper saw it in an       |
/// |                   |                                         |                                       | earlier batch (two generations, |
/// |                   |                                         |                                       | rotated every slots rows)       |
/// | WTinyLfu<W>       | see mpe/cache/wtinylfu.hpp              | descending estimate, then row         | see mpe/cache/wtinylfu.hpp      |
///
/// Every policy takes an empty way for any miss. A miss that is not admitted (a rejection
/// or a conflict miss) bypasses the cache for its batch: pooled from the store, its update
/// applied to the store, as in a store-only table.
// clang-format on
#pragma once

#include "mpe/cache/direct_mapped.hpp"
#include "mpe/cache/lfu.hpp"
#include "mpe/cache/lru.hpp"
#include "mpe/cache/second_touch_lru.hpp"
#include "mpe/cache/wtinylfu.hpp"

namespace mpe {

/// A list of cache policies (a type list: see KnownCachePolicies).
template <class... Policies>
struct CachePolicyList {};

/// Every cache policy of the library, at `Ways` ways where the policy has a way count (the
/// PyTorch binding's choices are this list at 32 ways). A new policy adds one entry here.
template <int Ways = 32>
using KnownCachePolicies =
    CachePolicyList<Lru<Ways>, Lfu<Ways>, DirectMapped, SecondTouchLru<Ways>, WTinyLfu<Ways>>;

}  // namespace mpe
