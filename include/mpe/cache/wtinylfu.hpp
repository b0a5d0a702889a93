// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/wtinylfu.hpp
/// @brief `WTinyLfu<Ways>`: the W-TinyLFU replacement policy (a small LRU window, a
/// segmented-LRU main area, admission to main by a frequency sketch) adapted to mpe's
/// set-associative cache and batch populate.
///
/// Each set is split into a window of `window_ways` = max(1, Ways / 32) ways and a main
/// area, itself split into a probation and a protected segment of at most
/// `protected_ways` = (Ways - window_ways) * 4 / 5 ways (the 1 % window and 80 % protected
/// share of W-TinyLFU's usual configuration, rounded per set). Recency within a segment is
/// the slot's last-use batch number (ties: the lowest way is the least recent). Frequencies
/// come from a count-min sketch of the same shape as Lfu's (4 lines x width u32 counters,
/// width the smallest power of two >= max(16, 2 x slots), halved every 10 x slots unique
/// rows), updated by "minimal increment" (conservative update): each unique row of a batch
/// raises each of its 4 counters to at least (its estimate before the batch) + 1, with
/// atomic max, so the result does not depend on order.
///
/// Rules (one set; its hits, then its misses, each in admission order: descending
/// estimate, then ascending row):
/// - Hit: a probation row moves to protected; if protected then holds more than
///   `protected_ways` rows, its least recent row (locked or not) moves back to probation.
/// - Miss, empty way (the lowest): the row fills it, in the window if the window holds
///   fewer than `window_ways` rows, else in probation.
/// - Miss, no empty way: the candidate is the window's least recent unlocked row, or the
///   missing row itself when every window row is locked; the main victim is the least
///   recent unlocked probation row, else the least recent unlocked protected row. If a
///   main victim exists and the candidate's estimate is strictly higher than the victim's,
///   the victim is evicted: a window candidate moves to probation and the missing row takes
///   the victim's way as a window row; a missing-row candidate takes it in probation.
///   Otherwise a window candidate is evicted and the missing row takes its way in the
///   window; with no window candidate the row is rejected (CacheStats::lfu_rejections), or
///   is a conflict miss when no way of the set is unlocked.
///
/// Metadata (checkpoint section `wtinylfu`): the sketch, then one byte per slot (segment:
/// 0 window, 1 probation, 2 protected), padded to whole u32 words; 1 byte per slot plus the
/// sketch's 32 to 64 bytes per slot.
#pragma once

#include <cstdint>
#include <string>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/numeric/atomics.hpp"

namespace mpe {

/// W-TinyLFU, `Ways`-way set-associative (see the file comment for the rules).
template <int Ways = 32>
struct WTinyLfu {
  static_assert(Ways >= 2 && Ways <= 256, "mpe::WTinyLfu: Ways must be in [2, 256]");
  static constexpr int ways = Ways;                ///< ways per set
  static constexpr bool uses_sketch = true;        ///< keeps a count-min sketch
  static constexpr const char* name = "wtinylfu";  ///< checkpoint name and section name
  /// on_hit and choose write only their own set's segment bytes and last uses and read the
  /// sketch, which admission never writes (see CachePolicy: set_local).
  static constexpr bool set_local = true;
  /// Window ways per set.
  static constexpr int window_ways = Ways / 32 > 1 ? Ways / 32 : 1;
  /// Most protected rows per set.
  static constexpr int protected_ways = (Ways - window_ways) * 4 / 5;
  /// Segment byte of a slot.
  enum Segment : std::uint8_t { kWindow = 0, kProbation = 1, kProtected = 2 };

  /// The sketch and the per-slot segments (backend memory).
  struct View {
    SketchRef sketch;                 ///< the frequency sketch
    std::uint8_t* segment = nullptr;  ///< (slots) Segment of each slot
  };
  /// Sketch width for `slots` slots.
  static std::int64_t sketch_width(std::int64_t slots) {
    std::int64_t w = 16;
    while (w < 2 * slots) w *= 2;
    return w;
  }
  /// Sketch counters, then the segment bytes rounded up to whole words (0 without a cache).
  static std::int64_t meta_words(std::int64_t slots) {
    return slots > 0 ? SketchRef::depth * sketch_width(slots) + (slots + 3) / 4 : 0;
  }
  /// The sketch and the segments over the metadata words.
  static View view(std::uint32_t* words, std::int64_t slots) {
    if (slots == 0) return {};
    const std::int64_t width = sketch_width(slots);
    return {{words, width}, reinterpret_cast<std::uint8_t*>(words + SketchRef::depth * width)};
  }

  /// Every unique row of a batch is counted before admission.
  static constexpr bool observes = true;
  /// Pass 0: the estimate before the batch; pass 1: every counter to at least that + 1.
  MPE_HOST_DEVICE static void observe(View v, std::int64_t row, std::uint32_t& scratch, int pass) {
    if (pass == 0) {
      scratch = v.sketch.estimate(row);
      return;
    }
    if (scratch == ~std::uint32_t{0}) return;
    for (int k = 0; k < SketchRef::depth; ++k) {
      detail::atomic_max(&v.sketch.counters[v.sketch.cell(row, k)], scratch + 1u);
    }
  }
  /// Admission priority: the row's estimate after this batch's update.
  MPE_HOST_DEVICE static std::uint32_t priority(View v, std::int64_t row, std::uint32_t) {
    return v.sketch.estimate(row);
  }

  /// Least recent occupied slot of `seg` in the set at `base` (unlocked only when
  /// `unlocked`), or -1.
  MPE_HOST_DEVICE static std::int64_t least_recent(View v, const CacheRef& c, std::int64_t base,
                                                   std::uint8_t seg, bool unlocked, std::uint64_t floor) {
    std::int64_t best = -1;
    for (std::int32_t w = 0; w < c.ways; ++w) {
      const std::int64_t s = base + w;
      if (c.tags[s] < 0 || v.segment[s] != seg || (unlocked && c.last_use[s] >= floor)) continue;
      if (best < 0 || c.last_use[s] < c.last_use[best]) best = s;
    }
    return best;
  }
  /// Occupied slots of `seg` in the set at `base`.
  MPE_HOST_DEVICE static int count(View v, const CacheRef& c, std::int64_t base, std::uint8_t seg) {
    int n = 0;
    for (std::int32_t w = 0; w < c.ways; ++w)
      n += (c.tags[base + w] >= 0 && v.segment[base + w] == seg) ? 1 : 0;
    return n;
  }

  /// A probation hit moves to protected (demoting protected's least recent row past the limit).
  MPE_HOST_DEVICE static void on_hit(View v, const CacheRef& c, std::int64_t slot) {
    if (v.segment[slot] != kProbation) return;
    v.segment[slot] = kProtected;
    const std::int64_t base = slot - slot % c.ways;
    if (count(v, c, base, kProtected) > protected_ways) {
      v.segment[least_recent(v, c, base, kProtected, false, 0)] = kProbation;
    }
  }

  /// The miss rules of the file comment; sets the segments of the slots it moves.
  MPE_HOST_DEVICE static CacheChoice choose(View v, const CacheRef& c, std::int64_t base, std::uint64_t floor,
                                            std::int64_t, std::uint32_t priority) {
    const std::int64_t e = first_empty_way(c, base);
    if (e >= 0) {
      v.segment[e] = count(v, c, base, kWindow) < window_ways ? kWindow : kProbation;
      return {e, false};
    }
    const std::int64_t cand = least_recent(v, c, base, kWindow, true, floor);
    std::int64_t victim = least_recent(v, c, base, kProbation, true, floor);
    if (victim < 0) victim = least_recent(v, c, base, kProtected, true, floor);
    const std::uint32_t cand_estimate = cand >= 0 ? v.sketch.estimate(c.tags[cand]) : priority;
    if (victim >= 0 && cand_estimate > v.sketch.estimate(c.tags[victim])) {
      if (cand >= 0) {
        v.segment[cand] = kProbation;
        v.segment[victim] = kWindow;
      } else {
        v.segment[victim] = kProbation;
      }
      return {victim, false};
    }
    if (cand >= 0) return {cand, false};
    return {-1, victim >= 0};
  }

  /// Counters halve every 10 x slots unique rows.
  static std::uint64_t decay_period(std::int64_t slots) { return static_cast<std::uint64_t>(10 * slots); }
  /// The sketch counters decay (not the segments).
  static std::int64_t decay_items(std::int64_t slots) {
    return slots > 0 ? SketchRef::depth * sketch_width(slots) : 0;
  }
  /// Halves sketch counter i `times` times.
  MPE_HOST_DEVICE static void decay(View v, std::int64_t i, std::uint64_t times) {
    v.sketch.counters[i] = times >= 32 ? 0u : v.sketch.counters[i] >> times;
  }

  /// Every occupied slot's segment is 0, 1 or 2; per set at most window_ways window rows
  /// and protected_ways protected rows.
  static std::string check_meta(const std::uint32_t* words, const std::int64_t* tags, std::int64_t slots) {
    const auto* seg = reinterpret_cast<const std::uint8_t*>(words + SketchRef::depth * sketch_width(slots));
    for (std::int64_t base = 0; base < slots; base += Ways) {
      int window = 0, prot = 0;
      for (std::int64_t s = base; s < base + Ways; ++s) {
        if (tags[s] < 0) continue;
        if (seg[s] > kProtected) {
          return "slot " + std::to_string(s) + " has segment " + std::to_string(seg[s]) + ", outside [0, 2]";
        }
        window += seg[s] == kWindow;
        prot += seg[s] == kProtected;
      }
      if (window > window_ways || prot > protected_ways) {
        return "set " + std::to_string(base / Ways) + " holds " + std::to_string(window) + " window and " +
               std::to_string(prot) + " protected rows (at most " + std::to_string(window_ways) + " and " +
               std::to_string(protected_ways) + ")";
      }
    }
    return {};
  }
};

}  // namespace mpe
