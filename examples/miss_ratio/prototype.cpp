// SPDX-License-Identifier: Apache-2.0
// prototype: plain-loop models of candidate fourth cache policies (S3-FIFO, W-TinyLFU,
// ARC) adapted to mpe's cache (set-associative, Ways = 32, batch populate: a batch's
// rows all hold their slot until the batch is done), beside models of Lru<32> and
// Lfu<32> that follow the library's rules. Used to choose the fourth policy by
// measurement; the chosen one is then implemented in the library and measured by
// miss_ratio itself. Same traces, same denominator (unique-row lookups) as miss_ratio.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <mpe/cache/cache_ref.hpp>
#include <mpe/cache/hash.hpp>
#include <string>
#include <vector>

#include "trace.hpp"

namespace {

using namespace miss_ratio;

constexpr int W = 32;

enum class Kind { Lru, Lfu, S3Fifo, WTinyLfu, Arc };

struct Knobs {
  int small_ways = 3;           // S3-FIFO: target ways of the small FIFO queue per set
  int promote = 1;              // S3-FIFO: hits in S needed to move to M
  bool s_locked_bypass = true;  // S3-FIFO: no unlocked S entry and S at target: bypass
  bool ghost_first = true;      // S3-FIFO: admit ghost hits before other misses
  int max_freq = 3;             // S3-FIFO: 2-bit frequency
  int window_ways = 1;          // W-TinyLFU: window LRU ways per set
  int protected_ways = 24;      // W-TinyLFU: protected SLRU segment ways per set
  bool conservative = false;    // W-TinyLFU / LFU: conservative-update sketch
  int sketch_mult = 2;          // sketch width >= mult x slots
  bool batch_stamps = false;    // W-TinyLFU: recency = batch id (ties to the lowest way)
};

/// One model of the cache over a whole trace; returns misses.
class Sim {
 public:
  Sim(Kind k, std::int64_t total_rows, std::int64_t cache_rows, Knobs kn) : kind_(k), kn_(kn) {
    const std::int64_t rounded = (total_rows + W - 1) / W * W;
    sets_ = std::min(cache_rows, rounded) / W;
    const auto slots = static_cast<std::size_t>(sets_ * W);
    tag_.assign(slots, -1);
    lock_.assign(slots, 0);
    stamp_.assign(slots, 0);
    q_.assign(slots, 0);
    freq_.assign(slots, 0);
    ghost_.assign(slots * 2, -1);
    ghost_head_.assign(static_cast<std::size_t>(sets_), 0);
    p_.assign(static_cast<std::size_t>(sets_), 0);
    width_ = 16;
    while (width_ < kn_.sketch_mult * static_cast<std::int64_t>(slots)) width_ *= 2;
    cm_.assign(static_cast<std::size_t>(4 * width_), 0);
    period_ = 10 * slots;
  }

  std::uint64_t misses() const { return misses_; }

  void batch(std::vector<std::int64_t> rows) {
    ++id_;
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    const bool sketch = kind_ == Kind::Lfu || kind_ == Kind::WTinyLfu;
    if (sketch) increment(rows);
    std::vector<std::pair<std::int64_t, std::int64_t>> by_set;  // (set, row)
    for (auto r : rows) by_set.emplace_back(mpe::set_of_row(r, sets_), r);
    std::stable_sort(by_set.begin(), by_set.end(), [](auto a, auto b) { return a.first < b.first; });
    std::size_t i = 0;
    while (i < by_set.size()) {
      std::size_t e = i;
      while (e < by_set.size() && by_set[e].first == by_set[i].first) ++e;
      std::vector<std::int64_t> ms;
      const std::int64_t base = by_set[i].first * W;
      for (std::size_t k = i; k < e; ++k) {
        const std::int64_t s = find(base, by_set[k].second);
        if (s >= 0) {
          hit(base, s);
        } else {
          ms.push_back(by_set[k].second);
        }
      }
      order(base, ms);
      for (auto r : ms) miss(base, r);
      i = e;
    }
    if (sketch) {
      incs_ += rows.size();
      while (incs_ >= period_) {
        for (auto& c : cm_) c /= 2;
        incs_ -= period_;
      }
    }
  }

 private:
  std::int64_t find(std::int64_t base, std::int64_t r) const {
    for (int w = 0; w < W; ++w)
      if (tag_[base + w] == r) return base + w;
    return -1;
  }
  std::uint32_t est(std::int64_t r) const {
    mpe::SketchRef ref{const_cast<std::uint32_t*>(cm_.data()), width_};
    return ref.estimate(r);
  }
  void increment(const std::vector<std::int64_t>& rows) {
    mpe::SketchRef ref{cm_.data(), width_};
    if (!kn_.conservative) {
      for (auto r : rows)
        for (int k = 0; k < 4; ++k) ++cm_[ref.cell(r, k)];
      return;
    }
    std::vector<std::uint32_t> m(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) m[i] = est(rows[i]);
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (int k = 0; k < 4; ++k) {
        auto& c = cm_[ref.cell(rows[i], k)];
        c = std::max(c, m[i] + 1);
      }
  }
  bool in_ghost(std::int64_t base, std::int64_t r) const {
    for (int g = 0; g < 2 * W; ++g)
      if (ghost_[2 * base + g] == r) return true;
    return false;
  }
  void ghost_remove(std::int64_t base, std::int64_t r) {
    for (int g = 0; g < 2 * W; ++g)
      if (ghost_[2 * base + g] == r) ghost_[2 * base + g] = -1;
  }
  void ghost_add(std::int64_t base, std::int64_t r, int cap) {
    const std::int64_t set = base / W;
    auto& h = ghost_head_[set];
    ghost_[2 * base + h] = r;
    h = static_cast<std::uint8_t>((h + 1) % cap);
  }
  void hit(std::int64_t base, std::int64_t s) {
    ++clock_;
    lock_[s] = id_;
    switch (kind_) {
      case Kind::Lru:
      case Kind::Lfu:
        stamp_[s] = id_;
        break;
      case Kind::S3Fifo:
        freq_[s] = static_cast<std::uint8_t>(std::min<int>(freq_[s] + 1, kn_.max_freq));
        break;
      case Kind::WTinyLfu:
        if (q_[s] == 1) {  // probation -> protected
          q_[s] = 2;
          int prot = 0;
          for (int w = 0; w < W; ++w) prot += q_[base + w] == 2 && tag_[base + w] >= 0;
          if (prot > kn_.protected_ways) {
            const std::int64_t d = oldest(base, 2, false);
            if (d >= 0) q_[d] = 1;
          }
        }
        stamp_[s] = kn_.batch_stamps ? id_ : clock_;
        break;
      case Kind::Arc:
        q_[s] = 1;  // T2
        stamp_[s] = clock_;
        break;
    }
  }
  /// Oldest (lowest stamp) occupied slot of queue q; unlocked only if `unlocked`.
  std::int64_t oldest(std::int64_t base, int q, bool unlocked) const {
    std::int64_t v = -1;
    for (int w = 0; w < W; ++w) {
      const std::int64_t s = base + w;
      if (tag_[s] < 0 || q_[s] != q || (unlocked && lock_[s] == id_)) continue;
      if (v < 0 || stamp_[s] < stamp_[v]) v = s;
    }
    return v;
  }
  int count(std::int64_t base, int q) const {
    int n = 0;
    for (int w = 0; w < W; ++w) n += tag_[base + w] >= 0 && q_[base + w] == q;
    return n;
  }
  std::int64_t empty(std::int64_t base) const {
    for (int w = 0; w < W; ++w)
      if (tag_[base + w] < 0) return base + w;
    return -1;
  }
  void order(std::int64_t base, std::vector<std::int64_t>& ms) {
    if (kind_ == Kind::Lfu || kind_ == Kind::WTinyLfu) {
      std::stable_sort(ms.begin(), ms.end(), [&](auto a, auto b) { return est(a) > est(b); });
    } else if (kind_ == Kind::S3Fifo && kn_.ghost_first) {
      std::stable_sort(ms.begin(), ms.end(),
                       [&](auto a, auto b) { return in_ghost(base, a) > in_ghost(base, b); });
    }
  }
  void fill(std::int64_t s, std::int64_t r, int q) {
    tag_[s] = r;
    lock_[s] = id_;
    stamp_[s] = ++clock_;
    if (kn_.batch_stamps) stamp_[s] = id_;
    q_[s] = static_cast<std::uint8_t>(q);
    freq_[s] = 0;
  }
  void miss(std::int64_t base, std::int64_t r) {
    ++misses_;
    switch (kind_) {
      case Kind::Lru: {
        std::int64_t v = empty(base);
        if (v < 0)
          for (int w = 0; w < W; ++w) {
            const std::int64_t s = base + w;
            if (lock_[s] == id_) continue;
            if (v < 0 || stamp_[s] < stamp_[v]) v = s;
          }
        if (v >= 0) fill(v, r, 0), stamp_[v] = id_;
        return;
      }
      case Kind::Lfu: {
        std::int64_t v = empty(base);
        if (v >= 0) {
          fill(v, r, 0);
          return;
        }
        std::uint32_t ve = 0;
        for (int w = 0; w < W; ++w) {
          const std::int64_t s = base + w;
          if (lock_[s] == id_) continue;
          const auto e = est(tag_[s]);
          if (v < 0 || e < ve) v = s, ve = e;
        }
        if (v >= 0 && est(r) > ve) fill(v, r, 0);
        return;
      }
      case Kind::S3Fifo: {
        const bool g = in_ghost(base, r);
        std::int64_t v = empty(base);
        if (v < 0) v = s3_victim(base, g);
        if (v < 0) return;
        if (g) ghost_remove(base, r);
        fill(v, r, g ? 1 : 0);
        return;
      }
      case Kind::WTinyLfu: {
        std::int64_t v = empty(base);
        if (v >= 0) {
          fill(v, r, count(base, 0) < kn_.window_ways ? 0 : 1);
          return;
        }
        // Candidate: the window's LRU (r takes its place in the window), else r itself.
        const std::int64_t c = oldest(base, 0, true);
        std::int64_t mv = oldest(base, 1, true);
        if (mv < 0) mv = oldest(base, 2, true);
        const std::int64_t cand_row = c >= 0 ? tag_[c] : r;
        if (mv >= 0 && est(cand_row) > est(tag_[mv])) {
          if (c >= 0) {  // window LRU moves to probation, r fills the main victim's way as window
            q_[c] = 1;
            if (!kn_.batch_stamps) stamp_[c] = ++clock_;
            fill(mv, r, 0);
          } else {
            fill(mv, r, 1);
          }
        } else if (c >= 0) {
          fill(c, r, 0);  // the window candidate loses and is evicted
        }
        return;
      }
      case Kind::Arc: {
        const std::int64_t set = base / W;
        const bool b1 = in_ghost_q(base, r, 0), b2 = in_ghost_q(base, r, 1);
        int& p = p_[set];
        if (b1) p = std::min(W, p + 1);
        if (b2) p = std::max(0, p - 1);
        std::int64_t v = empty(base);
        if (v < 0) {
          const int t1 = count(base, 0);
          std::int64_t a = oldest(base, 0, true), b = oldest(base, 1, true);
          if ((t1 > 0 && t1 >= std::max(1, p) && a >= 0) || b < 0) {
            v = a;
          } else {
            v = b;
          }
          if (v < 0) return;
          ghost_add(base, tag_[v] * 2 + q_[v], 2 * W);  // B1 (from T1) or B2 (from T2)
        }
        fill(v, r, (b1 || b2) ? 1 : 0);
        return;
      }
    }
  }
  bool in_ghost_q(std::int64_t base, std::int64_t r, int q) const {
    for (int g = 0; g < 2 * W; ++g)
      if (ghost_[2 * base + g] == r * 2 + q) return true;
    return false;
  }
  std::int64_t s3_victim(std::int64_t base, bool ghost_hit) {
    (void)ghost_hit;
    for (int guard = 0; guard < 8 * W; ++guard) {
      const int small = count(base, 0);
      std::int64_t sv = oldest(base, 0, true);
      if (small >= kn_.small_ways && sv < 0 && kn_.s_locked_bypass) return -1;
      if (small >= kn_.small_ways && sv >= 0) {
        if (freq_[sv] >= kn_.promote) {
          q_[sv] = 1;
          freq_[sv] = 0;
          stamp_[sv] = ++clock_;
          continue;
        }
        ghost_add(base, tag_[sv], W);
        return sv;
      }
      std::int64_t mv = oldest(base, 1, true);
      if (mv < 0) {
        if (sv >= 0) {
          ghost_add(base, tag_[sv], W);
          return sv;
        }
        return -1;
      }
      if (freq_[mv] > 0) {
        --freq_[mv];
        stamp_[mv] = ++clock_;
        continue;
      }
      return mv;
    }
    return -1;
  }

  Kind kind_;
  Knobs kn_;
  std::int64_t sets_ = 0, width_ = 0;
  std::vector<std::int64_t> tag_, ghost_;
  std::vector<std::uint64_t> lock_, stamp_;
  std::vector<std::uint8_t> q_, freq_, ghost_head_;
  std::vector<int> p_;
  std::vector<std::uint32_t> cm_;
  std::uint64_t id_ = 0, clock_ = 0, misses_ = 0, incs_ = 0, period_ = 0;
};

std::uint64_t run(Kind k, const Trace& t, std::int64_t total, std::int64_t c, Knobs kn) {
  Sim s(k, total, c, kn);
  for (const auto& b : t.batches) s.batch(b.global);
  return s.misses();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prototypes of a fourth cache policy"};
  std::int64_t rows = 1000000, bags = 2048, pooling = 32, batches = 100, criteo_rows = 65536,
               criteo_bags = 128;
  std::vector<double> exponents{0.8, 1.05, 1.2}, sizes{1, 5};
  std::string criteo, variants = "lru,lfu,s3fifo,wtinylfu,arc";
  Knobs kn;
  app.add_option("--rows", rows);
  app.add_option("--batches", batches);
  app.add_option("--exponents", exponents)->delimiter(',');
  app.add_option("--sizes", sizes)->delimiter(',');
  app.add_option("--criteo", criteo);
  app.add_option("--criteo-table-rows", criteo_rows);
  app.add_option("--criteo-bags", criteo_bags);
  app.add_option("--small-ways", kn.small_ways);
  app.add_option("--promote", kn.promote);
  app.add_option("--bypass", kn.s_locked_bypass);
  app.add_option("--ghost-first", kn.ghost_first);
  app.add_option("--max-freq", kn.max_freq);
  app.add_option("--window-ways", kn.window_ways);
  app.add_option("--protected-ways", kn.protected_ways);
  app.add_option("--conservative", kn.conservative);
  app.add_option("--sketch-mult", kn.sketch_mult);
  app.add_option("--policies", variants);
  app.add_option("--batch-stamps", kn.batch_stamps);
  CLI11_PARSE(app, argc, argv);
  std::vector<Trace> traces;
  std::vector<std::string> labels;
  if (!criteo.empty()) {
    traces.push_back(criteo_trace(criteo, criteo_rows, criteo_bags));
    labels.push_back("criteo table_rows=" + std::to_string(criteo_rows));
  } else {
    for (double s : exponents) {
      traces.push_back(zipf_trace(rows, s, batches, bags, pooling, 2024));
      labels.push_back("zipf " + std::to_string(s));
    }
  }
  const std::pair<const char*, Kind> all[] = {{"lru", Kind::Lru},
                                              {"lfu", Kind::Lfu},
                                              {"s3fifo", Kind::S3Fifo},
                                              {"wtinylfu", Kind::WTinyLfu},
                                              {"arc", Kind::Arc}};
  for (std::size_t i = 0; i < traces.size(); ++i) {
    std::int64_t total = 0;
    for (auto r : traces[i].table_rows) total += r;
    const auto stream = unique_stream(traces[i]);
    for (double f : sizes) {
      const auto c = std::max<std::int64_t>(32, std::llround(f / 100.0 * static_cast<double>(total)));
      std::cout << labels[i] << " size " << f << "% (" << c << " rows):";
      for (auto [name, k] : all) {
        if (variants.find(name) == std::string::npos) continue;
        std::cout << " " << name << " " << std::fixed << std::setprecision(2)
                  << 100.0 * static_cast<double>(run(k, traces[i], total, c, kn)) /
                         static_cast<double>(stream.size());
      }
      std::cout << " belady "
                << 100.0 * static_cast<double>(belady_misses(stream, total, c)) /
                       static_cast<double>(stream.size())
                << std::endl;
    }
  }
}
