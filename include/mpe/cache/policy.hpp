// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/policy.hpp
/// @brief The `CachePolicy` concept: what a cache replacement policy owns (its metadata,
/// its score, its admission rule, its checkpoint section), and `PolicyBase` /
/// `ScoredPolicy`, the defaults a policy builds on.
///
/// The set-admission code (mpe/detail/kernels/admission.hpp) is written once against these
/// hooks; a policy is one header that defines a type satisfying `CachePolicy` and is
/// included from mpe/cache/all.hpp.
///
/// What the cache itself keeps for every policy (not part of a policy's metadata):
/// per slot the tag (i64 global row, -1 empty), the last-use batch number (u64: the
/// populate counter of the last batch that hit or filled the slot; it also decides which
/// slots are locked) and the dirty bit (u8). A policy adds its own metadata: one array of
/// `meta_words(slots)` 32-bit words in the backend's memory, zero-filled at construction,
/// that only the policy's hooks interpret (through its trivially copyable `View`), and
/// that the checkpoint saves byte for byte as the policy's own section.
///
/// Order of one populate (one batch, the batch's unique rows, ascending):
/// 1. `observe(view, row, scratch, 0)` for every unique row, then
///    `observe(view, row, scratch, 1)` for every unique row (only if `observes`); pass 0
///    may only read the metadata, pass 1 may only update it with integer atomics whose
///    result does not depend on their order (the same bits on any thread count and on GPU).
/// 2. `priority(view, row, scratch)` of every unique row (`scratch`: the word its observe
///    passes left, 0 for a policy that does not observe); the misses of one set are
///    admitted in descending priority, ties by ascending row.
/// 3. Per set, sequentially: every hit sets the slot's last use to the batch number, then
///    `on_hit(view, cache, slot)`, in admission order; then every miss, in admission
///    order, asks `choose(...)` for the slot it is filled into. A slot is locked when its
///    last use is at or above the populate's lock floor (rows of this batch, and of the
///    batch awaiting backward during a prefetch): `choose` must never return a locked
///    occupied slot. The admission code writes back a dirty evicted row, fills the slot
///    from the store, sets its tag, last use (batch number) and dirty bit (0).
///    Every set's hits run before any set's misses, unless the policy declares
///    `static constexpr bool set_local = true`: its `on_hit` and `choose` write only the
///    metadata of their own set's slots and read no metadata that another set's admission
///    writes (every built-in policy). Then one host thread runs each set's hits only a few
///    sets before its misses (one pass: the lookups overlap the fills' memory reads), which
///    gives the same result. A policy that declares `static constexpr bool hits_commute =
///    true` (Lru, Lfu, DirectMapped) promises that `on_hit` writes only the hit slot's own
///    metadata, so a set's hits may run in any order: a GPU then looks every item up in
///    parallel (a warp per item, lanes across the ways) and moves the rows of the misses'
///    write-backs and fills in parallel after the decisions, with the same result.
/// 4. The decay clock advances by the number of unique rows; each time it passes
///    `decay_period(slots)` (when not 0), `decay(view, i, times)` runs for every i in
///    [0, decay_items(slots)).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe {

/// What a miss does, as a policy's `choose` decides.
struct CacheChoice {
  /// Slot (`set * ways + way`) the missing row is filled into, evicting the row it holds
  /// (if any); -1: the row stays uncached.
  std::int64_t slot = -1;
  /// With slot -1: true when the policy refused the row although a slot could be freed
  /// (counted in CacheStats::lfu_rejections); false when every way of the set is locked
  /// (a conflict miss, CacheStats::conflict_misses).
  bool rejected = false;
};

/// True when `slot` holds a row that a populate with lock floor `floor` must not evict.
MPE_HOST_DEVICE inline bool slot_locked(const CacheRef& c, std::int64_t slot, std::uint64_t floor) {
  return c.tags[slot] >= 0 && c.last_use[slot] >= floor;
}

/// Lowest empty way of the set starting at slot `base`, or -1.
MPE_HOST_DEVICE inline std::int64_t first_empty_way(const CacheRef& c, std::int64_t base) {
  for (std::int32_t w = 0; w < c.ways; ++w) {
    if (c.tags[base + w] < 0) return base + w;
  }
  return -1;
}

/// A cache replacement policy (checked at compile time). Members (all static):
///
/// - `ways` (int >= 1): ways per set; `name` (const char*): the checkpoint's
///   `cache_policy` string and the name of the policy's checkpoint section.
/// - `View`: trivially copyable view of the policy's metadata, built by
///   `view(words, slots)` from the metadata array (backend memory) and the slot count.
/// - `meta_words(slots)`: 32-bit words of metadata for `slots` slots (0: none).
/// - `observes`, `observe(view, row, scratch, pass)`: per unique row of each batch, before
///   admission (see the file comment for the two passes); `scratch` is one u32 per row
///   kept from pass 0 to pass 1.
/// - `priority(view, row, scratch)`: admission priority (higher is admitted first);
///   `scratch` is what observe left for the row (0 when the policy does not observe).
/// - `on_hit(view, cache, slot)`: a hit's metadata update.
/// - `choose(view, cache, base, floor, row, priority)`: the slot a miss is filled into
///   (the policy updates its own metadata for it), or why it is not cached; must return an
///   empty way or an unlocked occupied way of the set starting at `base`.
/// - `decay_period(slots)`, `decay_items(slots)`, `decay(view, i, times)`: periodic aging.
/// - `check_meta(words, tags, slots)`: host check of a checkpoint's policy section
///   (`words`: host copy of the metadata, `tags`: the `tags` section); returns an empty
///   string when the metadata is one the policy can hold, else what is wrong.
template <class P>
concept CachePolicy = requires(typename P::View v, const CacheRef& c, std::int64_t i, std::uint32_t& scratch,
                               std::uint32_t u, std::uint64_t t, std::uint32_t* words,
                               const std::uint32_t* cwords, const std::int64_t* tags) {
  { P::ways } -> std::convertible_to<int>;
  { P::name } -> std::convertible_to<const char*>;
  { P::meta_words(i) } -> std::same_as<std::int64_t>;
  { P::view(words, i) } -> std::same_as<typename P::View>;
  { P::observes } -> std::convertible_to<bool>;
  P::observe(v, i, scratch, 0);
  { P::priority(v, i, u) } -> std::same_as<std::uint32_t>;
  P::on_hit(v, c, i);
  { P::choose(v, c, i, t, i, u) } -> std::same_as<CacheChoice>;
  { P::decay_period(i) } -> std::same_as<std::uint64_t>;
  { P::decay_items(i) } -> std::same_as<std::int64_t>;
  P::decay(v, i, t);
  { P::check_meta(cwords, tags, i) } -> std::same_as<std::string>;
}
&&(P::ways >= 1) && std::is_trivially_copyable_v<typename P::View>;

/// Defaults for a policy without metadata: no observation, priority 0 (misses admitted by
/// ascending row), nothing on a hit, no decay, nothing to check in a checkpoint.
struct PolicyBase {
  /// Empty view (the policy keeps no metadata).
  struct View {};
  /// No metadata words.
  static std::int64_t meta_words(std::int64_t) { return 0; }
  /// The empty view.
  static View view(std::uint32_t*, std::int64_t) { return {}; }
  /// Nothing is observed before admission.
  static constexpr bool observes = false;
  /// Not called (observes is false).
  MPE_HOST_DEVICE static void observe(View, std::int64_t, std::uint32_t&, int) {}
  /// Every row has priority 0: misses are admitted by ascending row.
  MPE_HOST_DEVICE static std::uint32_t priority(View, std::int64_t, std::uint32_t) { return 0; }
  /// A hit changes no policy metadata (the cache sets the slot's last use).
  MPE_HOST_DEVICE static void on_hit(View, const CacheRef&, std::int64_t) {}
  /// No decay.
  static std::uint64_t decay_period(std::int64_t) { return 0; }
  /// No decay items.
  static std::int64_t decay_items(std::int64_t) { return 0; }
  /// Not called (no decay).
  MPE_HOST_DEVICE static void decay(View, std::int64_t, std::uint64_t) {}
  /// Nothing to check: always the empty string.
  static std::string check_meta(const std::uint32_t*, const std::int64_t*, std::int64_t) { return {}; }
};

/// `choose` from a score and an admission rule, for policies that evict the lowest score:
/// an empty way (the lowest) is always taken; otherwise, among unlocked occupied ways,
/// the one with the lowest `Derived::score(view, cache, slot)` (ties to the lowest way)
/// is the victim, and the miss replaces it only if
/// `Derived::admits(view, priority, victim_score)`; no unlocked way: conflict miss.
/// A policy using this `choose` unchanged whose slot scores do not change while other slots
/// of the set are hit or filled during one admission (Lru: the slot's own last use; Lfu: its
/// row's estimate, which only `observe` changes) may declare
/// `static constexpr bool victims_by_score = true;`: the host admission then reads a set
/// once for all its misses (mpe/detail/kernels/admission.hpp, `SetVictims`, the same slots).
/// Without it `choose` is called miss by miss. One whose `score(view, cache, slot)` is
/// `cache.last_use[slot]` for every slot (Lru, DirectMapped) may also declare
/// `static constexpr bool score_is_last_use = true;`: on an AVX-512 host, for a multiple of
/// 8 ways (Lru<32>; not DirectMapped's one way), SetVictims then reads the last uses of a
/// set without empty ways itself, 8 ways per compare, instead of calling `score`. A false
/// declaration would give different slots on hosts with and without AVX-512.
template <class Derived>
struct ScoredPolicy {
  /// The slot a miss with admission `priority` is filled into in the set starting at slot
  /// `base`, under lock floor `floor` (see the struct comment).
  template <class View>
  MPE_HOST_DEVICE static CacheChoice choose(View v, const CacheRef& c, std::int64_t base, std::uint64_t floor,
                                            std::int64_t, std::uint32_t priority) {
    const std::int64_t e = first_empty_way(c, base);
    if (e >= 0) return {e, false};
    std::int64_t victim = -1;
    std::uint64_t victim_score = 0;
    for (std::int32_t w = 0; w < c.ways; ++w) {
      const std::int64_t s = base + w;
      if (slot_locked(c, s, floor)) continue;
      const std::uint64_t score = Derived::score(v, c, s);
      if (victim < 0 || score < victim_score) {
        victim = s;
        victim_score = score;
      }
    }
    if (victim < 0) return {-1, false};
    if (!Derived::admits(v, priority, victim_score)) return {-1, true};
    return {victim, false};
  }
};

}  // namespace mpe
