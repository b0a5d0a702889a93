// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/set_victims.hpp
/// @brief The victims of one set's misses (not public): SetVictims, the slots that
/// ScoredPolicy::choose gives a set's successive misses, from one read of the set, and the
/// policy declarations that allow it (victims_by_score, set_local, score_is_last_use).
/// Used by AdmitSet's Misses phase (admission.hpp). `MPE_HOST_DEVICE`.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe::detail {

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
/// (score_is_last_use) with a multiple of 8 ways, Paths::unlocked_by_last_use may list a set
/// without empty ways itself (HostPaths: 8 ways per compare on an AVX-512 host; the same list;
/// other sets and hosts call P::score). One read of the set and one key compare per take replace a full scan
/// of the set's ways per miss.
template <class P, class Paths = PortablePaths>
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
    if constexpr (score_is_last_use<P> && P::ways % 8 == 0) {
      count = Paths::unlocked_by_last_use(c.tags + base, c.last_use + base, P::ways, floor, base, slot, score,
                                          key, packed);
    }
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
    const bool simd = Paths::has_min_key();
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
      if (Paths::has_min_key()) return static_cast<std::int32_t>(Paths::min_key(key, count) & 0xff);
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

}  // namespace mpe::detail
