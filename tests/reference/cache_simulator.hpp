// SPDX-License-Identifier: Apache-2.0
/// @file cache_simulator.hpp
/// @brief Plain-loop reference model of mpe's FP32 row cache (tests only).
///
/// Written from DESIGN.md "Cache semantics" and the implementation choices of the team
/// brief, not from detail/kernels/all.hpp, so that the tests compare two independent
/// readings of the rules. One object models the cache of one CachedEmbedding:
///
/// - A batch is a list of global rows (index occurrences). Each populate advances a
///   counter (the batch id, starting at 1) and works on the batch's unique rows.
/// - set = mpe::set_of_row(row, num_sets) (the spec's mixing hash); num_sets =
///   floor(min(cache_rows, total_rows rounded up to Ways) / Ways); slot = set * Ways + way.
/// - Hits: the row is resident in its set. Its LRU score becomes the batch id.
/// - LFU: before anything else, +1 in each of the 4 count-min lines for every unique row;
///   the estimate of a row is the minimum of its 4 counters (mpe::SketchRef::cell gives
///   the counter positions: that is the spec's hash, reused on purpose).
/// - Misses of one set are admitted in order: LRU / direct-mapped by ascending row; LFU
///   by descending estimate, then ascending row.
/// - Each miss takes a victim in its set: the lowest empty way; otherwise, among ways
///   that are not locked, the lowest score (LRU: batch id of the last use; LFU: the
///   resident row's current estimate), ties to the lowest way. Locked rows: the rows of
///   this batch (hits and rows already filled by it) and, for a prefetch, the rows of the
///   batch awaiting backward. No victim: conflict miss (row stays uncached).
/// - LFU: a miss replaces an occupied victim only if its estimate is strictly higher than
///   the victim's; otherwise it is rejected (uncached). An empty way is always taken.
/// - Eviction of a dirty row (updated by backward since it was filled) is a write-back.
/// - LFU halving: at the end of a populate, every counter is halved once for each
///   multiple of 10 x slots that the cumulative number of increments has passed since
///   construction (DESIGN.md: "all counters halved every 10 x cache_rows increments").
///
/// Second-touch LRU (SimPolicy::SecondTouchLru), from mpe/cache/second_touch_lru.hpp's
/// comment: a doorkeeper of two generations, each the smallest power of two >= max(32,
/// slots) 16-bit words; a row has two bits in one word of each (mpe::DoorkeeperRef::word
/// and ::mask give the positions: the spec's hash, reused on purpose). A row is "seen" when
/// either generation held both its bits before this batch; then every unique row's bits are
/// set in the current generation. Misses of a set: seen rows first, then the others, each
/// by ascending row; LRU's victim; a miss replaces an occupied victim only if seen,
/// otherwise it is rejected (uncached). An empty way is always taken. At the end of a
/// populate whose unique rows take the cumulative count past one or more further multiples
/// of slots, the previous generation is dropped and the current one becomes the previous.
///
/// W-TinyLFU (SimPolicy::WTinyLfu), from the rules in mpe/cache/wtinylfu.hpp's comment:
/// - Sketch as LFU's, but a batch's update is conservative: each unique row's 4 counters
///   become max(counter, estimate before the batch + 1).
/// - Segments per slot: window, probation, protected; window_ways = max(1, Ways / 32),
///   protected at most (Ways - window_ways) * 4 / 5. "Least recent" = lowest last-use
///   batch number, ties to the lowest way.
/// - Hits and misses of a set are taken in descending estimate, then ascending row; a hit
///   moves a probation row to protected and, past the protected limit, moves protected's
///   least recent row (locked or not) back to probation.
/// - A miss takes the lowest empty way (window if the window has room, else probation);
///   else the window's least recent unlocked row (or the missing row) contests main's
///   least recent unlocked probation (else protected) row, strictly higher estimate wins.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mpe/cache/cache_ref.hpp>
#include <mpe/cache/hash.hpp>
#include <set>
#include <stdexcept>
#include <vector>

namespace mpe_test {

enum class SimPolicy { Lru, Lfu, DirectMapped, WTinyLfu, SecondTouchLru };

/// The CacheStats counters the cache decides (same meaning as mpe::CacheStats).
struct SimStats {
  std::uint64_t lookups = 0, unique_rows = 0, hits = 0, misses = 0, conflict_misses = 0, evictions = 0,
                writebacks = 0, lfu_rejections = 0, bytes_filled = 0, bytes_written_back = 0;
};

/// Sketch width the brief chose: the smallest power of two >= max(16, 2 x slots).
inline std::int64_t sim_sketch_width(std::int64_t slots) {
  std::int64_t w = 16;
  while (w < 2 * slots) w *= 2;
  return w;
}

class CacheSimulator {
 public:
  /// `data_bytes`: bytes of one stored row (DESIGN.md formats table), for the byte counters.
  /// `halving_period`: LFU increments between halvings; 0 = the rule's 10 x slots (tests
  /// pass another value only to show that the rule matters).
  CacheSimulator(SimPolicy policy, int ways, std::int64_t total_rows, std::int64_t cache_rows,
                 std::int64_t data_bytes, std::uint64_t halving_period = 0)
      : policy_(policy), ways_(policy == SimPolicy::DirectMapped ? 1 : ways), data_bytes_(data_bytes) {
    if (cache_rows > 0 && cache_rows < ways_) throw std::invalid_argument("cache_rows below ways");
    if (cache_rows > 0) {
      const std::int64_t rounded = (total_rows + ways_ - 1) / ways_ * ways_;
      num_sets_ = std::min(cache_rows, rounded) / ways_;
    }
    const auto slots = static_cast<std::size_t>(num_sets_ * ways_);
    tags_.assign(slots, -1);
    last_use_.assign(slots, 0);
    dirty_.assign(slots, 0);
    segment_.assign(slots, 0);
    if (policy_ == SimPolicy::WTinyLfu) {
      window_ways_ = std::max(1, ways_ / 32);
      protected_ways_ = (ways_ - window_ways_) * 4 / 5;
    }
    if (sketched() && slots > 0) {
      width_ = sim_sketch_width(static_cast<std::int64_t>(slots));
      counters_.assign(static_cast<std::size_t>(mpe::SketchRef::depth * width_), 0);
    }
    if (policy_ == SimPolicy::SecondTouchLru && slots > 0) {
      std::size_t words = 32;
      while (words < slots) words *= 2;
      door_.assign(words, 0);
      door_prev_.assign(words, 0);
    }
    // LFU and W-TinyLFU halve every 10 x slots increments, second-touch LRU every slots.
    const std::uint64_t rule_period =
        static_cast<std::uint64_t>(policy_ == SimPolicy::SecondTouchLru ? slots : 10 * slots);
    period_ = halving_period != 0 ? halving_period : rule_period;
  }

  std::int64_t num_sets() const { return num_sets_; }
  std::int64_t slots() const { return num_sets_ * ways_; }
  std::int64_t sketch_width() const { return width_; }
  const std::vector<std::int64_t>& tags() const { return tags_; }
  const std::vector<std::uint64_t>& last_use() const { return last_use_; }
  const std::vector<std::uint8_t>& dirty() const { return dirty_; }
  /// W-TinyLFU segment per slot (0 window, 1 probation, 2 protected; stale when empty).
  const std::vector<std::uint8_t>& segment() const { return segment_; }
  const std::vector<std::uint32_t>& counters() const { return counters_; }
  /// Whether either generation holds both of `row`'s bits (second-touch LRU only).
  bool door_contains(std::int64_t row) const {
    const mpe::DoorkeeperRef ref{nullptr, static_cast<std::int64_t>(door_.size())};
    const auto w = static_cast<std::size_t>(ref.word(row));
    const std::uint32_t m = mpe::DoorkeeperRef::mask(row);
    return (door_[w] & m) == m || (door_prev_[w] & m) == m;
  }

  const SimStats& stats() const { return stats_; }
  std::uint64_t halvings() const { return halvings_; }

  /// Slot of `row`, or -1.
  std::int64_t find(std::int64_t row) const {
    if (num_sets_ == 0) return -1;
    const std::int64_t base = mpe::set_of_row(row, num_sets_) * ways_;
    for (int w = 0; w < ways_; ++w) {
      if (tags_[static_cast<std::size_t>(base + w)] == row) return base + w;
    }
    return -1;
  }

  /// Count-min estimate of `row` (LFU only).
  std::uint32_t estimate(std::int64_t row) const {
    mpe::SketchRef ref{const_cast<std::uint32_t*>(counters_.data()), width_};
    std::uint32_t m = UINT32_MAX;
    for (int k = 0; k < mpe::SketchRef::depth; ++k)
      m = std::min(m, counters_[static_cast<std::size_t>(ref.cell(row, k))]);
    return m;
  }

  /// forward(): uses the pending prefetch if it had the same rows, else populates `rows`
  /// (global rows, occurrences) with only its own rows locked. The batch then awaits
  /// backward. Returns row -> slot (-1 = uncached).
  std::map<std::int64_t, std::int64_t> forward(const std::vector<std::int64_t>& rows) {
    if (pending_valid_ && rows == pending_rows_) {
      pending_valid_ = false;
      in_flight_ = pending_rows_;
      in_flight_slots_ = pending_slots_;
      awaiting_ = true;
      return in_flight_slots_;
    }
    pending_valid_ = false;
    in_flight_slots_ = populate(rows, {});
    in_flight_ = rows;
    awaiting_ = true;
    return in_flight_slots_;
  }

  /// prefetch(): populates `rows` now, with the rows of the batch awaiting backward
  /// locked as well; a later forward() of the same rows uses this result.
  std::map<std::int64_t, std::int64_t> prefetch(const std::vector<std::int64_t>& rows) {
    pending_slots_ = populate(rows, awaiting_ ? in_flight_ : std::vector<std::int64_t>{});
    pending_rows_ = rows;
    pending_valid_ = true;
    return pending_slots_;
  }

  /// backward(): every row of the batch that holds a slot now (filled at its forward, or
  /// since, by a prefetch) is updated in FP32 and becomes dirty; the others are updated
  /// in the store.
  void backward() {
    for (const auto& [row, slot] : in_flight_slots_) {
      const std::int64_t now = find(row);
      if (now >= 0) dirty_[static_cast<std::size_t>(now)] = 1;
    }
    awaiting_ = false;
  }

  /// flush(): every dirty resident row is written back and becomes clean.
  void flush() {
    for (std::size_t s = 0; s < tags_.size(); ++s) {
      if (tags_[s] >= 0 && dirty_[s]) {
        ++stats_.writebacks;
        stats_.bytes_written_back += static_cast<std::uint64_t>(data_bytes_);
        dirty_[s] = 0;
      }
    }
  }

 private:
  std::map<std::int64_t, std::int64_t> populate(const std::vector<std::int64_t>& rows,
                                                const std::vector<std::int64_t>& also_locked) {
    const std::uint64_t id = ++counter_;
    stats_.lookups += rows.size();
    std::map<std::int64_t, std::int64_t> result;
    if (num_sets_ == 0) return result;
    const std::set<std::int64_t> uniq(rows.begin(), rows.end());
    stats_.unique_rows += uniq.size();
    std::set<std::int64_t> seen;  // second-touch LRU: rows in the doorkeeper before this batch
    if (policy_ == SimPolicy::SecondTouchLru) {
      for (std::int64_t r : uniq)
        if (door_contains(r)) seen.insert(r);
      const mpe::DoorkeeperRef ref{nullptr, static_cast<std::int64_t>(door_.size())};
      for (std::int64_t r : uniq) door_[static_cast<std::size_t>(ref.word(r))] |= mpe::DoorkeeperRef::mask(r);
    }
    if (policy_ == SimPolicy::Lfu) {
      mpe::SketchRef ref{counters_.data(), width_};
      for (std::int64_t r : uniq) {
        for (int k = 0; k < mpe::SketchRef::depth; ++k) ++counters_[static_cast<std::size_t>(ref.cell(r, k))];
      }
    }
    std::set<std::int64_t> locked(uniq);
    locked.insert(also_locked.begin(), also_locked.end());
    if (policy_ == SimPolicy::WTinyLfu) {
      populate_wtinylfu(id, uniq, locked, result);
      return result;
    }

    // Hits, and the misses grouped by set.
    std::map<std::int64_t, std::vector<std::int64_t>> misses_of_set;
    for (std::int64_t r : uniq) {
      const std::int64_t s = find(r);
      if (s >= 0) {
        ++stats_.hits;
        last_use_[static_cast<std::size_t>(s)] = id;
        result[r] = s;
      } else {
        ++stats_.misses;
        misses_of_set[mpe::set_of_row(r, num_sets_)].push_back(r);
      }
    }
    for (auto& [set, misses] : misses_of_set) {
      // Admission order (rows are already ascending).
      if (policy_ == SimPolicy::Lfu) {
        std::stable_sort(misses.begin(), misses.end(),
                         [&](std::int64_t a, std::int64_t b) { return estimate(a) > estimate(b); });
      }
      if (policy_ == SimPolicy::SecondTouchLru) {
        std::stable_partition(misses.begin(), misses.end(),
                              [&](std::int64_t r) { return seen.count(r) > 0; });
      }
      for (std::int64_t r : misses) {
        std::int64_t victim = -1;
        std::uint64_t victim_score = 0;
        bool empty = false;
        for (int w = 0; w < ways_ && !empty; ++w) {
          const std::int64_t s = set * ways_ + w;
          const std::int64_t tag = tags_[static_cast<std::size_t>(s)];
          if (tag < 0) {
            victim = s;
            empty = true;
          }
        }
        for (int w = 0; w < ways_ && !empty; ++w) {
          const std::int64_t s = set * ways_ + w;
          const std::int64_t tag = tags_[static_cast<std::size_t>(s)];
          if (locked.count(tag)) continue;
          const std::uint64_t score =
              policy_ == SimPolicy::Lfu ? estimate(tag) : last_use_[static_cast<std::size_t>(s)];
          if (victim < 0 || score < victim_score) {
            victim = s;
            victim_score = score;
          }
        }
        if (victim < 0) {
          ++stats_.conflict_misses;
          result[r] = -1;
          continue;
        }
        const bool refused = (policy_ == SimPolicy::Lfu && !(estimate(r) > victim_score)) ||
                             (policy_ == SimPolicy::SecondTouchLru && seen.count(r) == 0);
        if (!empty && refused) {
          ++stats_.lfu_rejections;
          result[r] = -1;
          continue;
        }
        const auto v = static_cast<std::size_t>(victim);
        if (!empty) {
          ++stats_.evictions;
          if (dirty_[v]) {
            ++stats_.writebacks;
            stats_.bytes_written_back += static_cast<std::uint64_t>(data_bytes_);
          }
        }
        tags_[v] = r;
        last_use_[v] = id;
        dirty_[v] = 0;
        stats_.bytes_filled += static_cast<std::uint64_t>(data_bytes_);
        result[r] = victim;
      }
    }
    if (sketched()) {
      increments_ += uniq.size();
      while (period_ != UINT64_MAX && increments_ >= (halvings_ + 1) * period_) {
        for (auto& c : counters_) c /= 2;
        ++halvings_;
      }
    }
    if (policy_ == SimPolicy::SecondTouchLru && period_ > 0) {
      increments_ += uniq.size();
      const std::uint64_t passed = increments_ / period_;
      if (passed > periods_) {  // one rotation, however many periods passed
        door_prev_ = door_;
        std::fill(door_.begin(), door_.end(), 0u);
        periods_ = passed;
      }
    }
    return result;
  }

  bool sketched() const { return policy_ == SimPolicy::Lfu || policy_ == SimPolicy::WTinyLfu; }

  /// Least recent occupied slot of segment `seg` in `set` (skipping rows in `locked`
  /// unless it is null), or -1.
  std::int64_t least_recent(std::int64_t set, std::uint8_t seg, const std::set<std::int64_t>* locked) const {
    std::int64_t best = -1;
    for (int w = 0; w < ways_; ++w) {
      const auto s = static_cast<std::size_t>(set * ways_ + w);
      if (tags_[s] < 0 || segment_[s] != seg) continue;
      if (locked && locked->count(tags_[s])) continue;
      if (best < 0 || last_use_[s] < last_use_[static_cast<std::size_t>(best)])
        best = static_cast<std::int64_t>(s);
    }
    return best;
  }
  int segment_count(std::int64_t set, std::uint8_t seg) const {
    int n = 0;
    for (int w = 0; w < ways_; ++w) {
      const auto s = static_cast<std::size_t>(set * ways_ + w);
      if (tags_[s] >= 0 && segment_[s] == seg) ++n;
    }
    return n;
  }

  void populate_wtinylfu(std::uint64_t id, const std::set<std::int64_t>& uniq,
                         const std::set<std::int64_t>& locked, std::map<std::int64_t, std::int64_t>& result) {
    // Conservative update from the estimates before the batch.
    mpe::SketchRef ref{counters_.data(), width_};
    std::map<std::int64_t, std::uint32_t> before;
    for (std::int64_t r : uniq) before[r] = estimate(r);
    for (std::int64_t r : uniq) {
      for (int k = 0; k < mpe::SketchRef::depth; ++k) {
        auto& c = counters_[static_cast<std::size_t>(ref.cell(r, k))];
        c = std::max(c, before[r] + 1);
      }
    }
    std::map<std::int64_t, std::vector<std::int64_t>> rows_of_set;
    for (std::int64_t r : uniq) rows_of_set[mpe::set_of_row(r, num_sets_)].push_back(r);
    for (auto& [set, rows] : rows_of_set) {
      std::stable_sort(rows.begin(), rows.end(),
                       [&](std::int64_t a, std::int64_t b) { return estimate(a) > estimate(b); });
      std::vector<std::int64_t> misses;
      for (std::int64_t r : rows) {
        const std::int64_t s = find(r);
        if (s < 0) {
          misses.push_back(r);
          continue;
        }
        ++stats_.hits;
        last_use_[static_cast<std::size_t>(s)] = id;
        result[r] = s;
        if (segment_[static_cast<std::size_t>(s)] == 1) {
          segment_[static_cast<std::size_t>(s)] = 2;
          if (segment_count(set, 2) > protected_ways_) {
            segment_[static_cast<std::size_t>(least_recent(set, 2, nullptr))] = 1;
          }
        }
      }
      for (std::int64_t r : misses) {
        ++stats_.misses;
        std::int64_t fill = -1;
        std::uint8_t fill_segment = 0;
        for (int w = 0; w < ways_ && fill < 0; ++w) {
          if (tags_[static_cast<std::size_t>(set * ways_ + w)] < 0) fill = set * ways_ + w;
        }
        if (fill >= 0) {
          fill_segment = segment_count(set, 0) < window_ways_ ? 0 : 1;
        } else {
          const std::int64_t cand = least_recent(set, 0, &locked);
          std::int64_t victim = least_recent(set, 1, &locked);
          if (victim < 0) victim = least_recent(set, 2, &locked);
          const std::uint32_t cand_est = estimate(cand >= 0 ? tags_[static_cast<std::size_t>(cand)] : r);
          if (victim >= 0 && cand_est > estimate(tags_[static_cast<std::size_t>(victim)])) {
            fill = victim;
            if (cand >= 0) {
              segment_[static_cast<std::size_t>(cand)] = 1;
              fill_segment = 0;
            } else {
              fill_segment = 1;
            }
          } else if (cand >= 0) {
            fill = cand;
            fill_segment = 0;
          } else {
            if (victim >= 0) {
              ++stats_.lfu_rejections;
            } else {
              ++stats_.conflict_misses;
            }
            result[r] = -1;
            continue;
          }
        }
        const auto v = static_cast<std::size_t>(fill);
        if (tags_[v] >= 0) {
          ++stats_.evictions;
          if (dirty_[v]) {
            ++stats_.writebacks;
            stats_.bytes_written_back += static_cast<std::uint64_t>(data_bytes_);
          }
        }
        tags_[v] = r;
        last_use_[v] = id;
        dirty_[v] = 0;
        segment_[v] = fill_segment;
        stats_.bytes_filled += static_cast<std::uint64_t>(data_bytes_);
        result[r] = fill;
      }
    }
    increments_ += uniq.size();
    while (period_ != UINT64_MAX && increments_ >= (halvings_ + 1) * period_) {
      for (auto& c : counters_) c /= 2;
      ++halvings_;
    }
  }

  SimPolicy policy_;
  int ways_;
  int window_ways_ = 0, protected_ways_ = 0;
  std::vector<std::uint8_t> segment_;
  std::int64_t data_bytes_;
  std::int64_t num_sets_ = 0;
  std::int64_t width_ = 0;
  std::vector<std::int64_t> tags_;
  std::vector<std::uint64_t> last_use_;
  std::vector<std::uint8_t> dirty_;
  std::vector<std::uint32_t> counters_;
  std::vector<std::uint32_t> door_, door_prev_;  // second-touch LRU's generations (16-bit words)
  std::uint64_t periods_ = 0;                    // slots-periods of unique rows passed at the last rotation
  std::uint64_t counter_ = 0, increments_ = 0, halvings_ = 0, period_ = 0;
  SimStats stats_;
  bool awaiting_ = false, pending_valid_ = false;
  std::vector<std::int64_t> in_flight_, pending_rows_;
  std::map<std::int64_t, std::int64_t> in_flight_slots_, pending_slots_;
};

}  // namespace mpe_test
