// SPDX-License-Identifier: Apache-2.0
// Test harness for the cache tests: drives a real mpe::CachedEmbedding (host backend)
// and the plain-loop reference (reference/cache_simulator.hpp) side by side, and, for
// Fp32 storage, a plain FP32 embedding bag trained with SGD. Every call compares the
// slot of each row of the batch, the whole cache state (tags, LRU scores, dirty bits)
// and the CacheStats counters; with Fp32 storage it also compares the pooled output and
// the weights bit for bit. The host backend runs on one thread unless a test passes
// another (test_cache_zipf compares 1 and 2 threads).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mpe/mpe.hpp>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/cache_simulator.hpp"

namespace mpe_test {

template <class Policy>
struct IsWTinyLfu : std::false_type {};
template <int W>
struct IsWTinyLfu<mpe::WTinyLfu<W>> : std::true_type {};

template <class Policy>
struct IsSecondTouchLru : std::false_type {};
template <int W>
struct IsSecondTouchLru<mpe::SecondTouchLru<W>> : std::true_type {};

template <class Policy>
constexpr SimPolicy sim_policy() {
  if constexpr (IsWTinyLfu<Policy>::value) {
    return SimPolicy::WTinyLfu;
  } else if constexpr (IsSecondTouchLru<Policy>::value) {
    return SimPolicy::SecondTouchLru;
  } else if constexpr (Policy::uses_sketch) {
    return SimPolicy::Lfu;
  } else if constexpr (std::is_same_v<Policy, mpe::DirectMapped>) {
    return SimPolicy::DirectMapped;
  } else {
    return SimPolicy::Lru;
  }
}

/// Bytes of one stored row, from DESIGN.md's formats table (written here, not taken
/// from Storage::data_bytes).
template <class Storage>
std::int64_t design_row_bytes(std::int64_t D) {
  if constexpr (std::is_same_v<Storage, mpe::Fp32>) return 4 * D;
  if constexpr (std::is_same_v<Storage, mpe::Fp16>) return 2 * D;
  if constexpr (std::is_same_v<Storage, mpe::Int8Rowwise>) return D + 8;
  if constexpr (std::is_same_v<Storage, mpe::Int4Rowwise>) return (D + 1) / 2 + 4;
}

/// One batch: T tables x B bags, CSR (table-major), local row ids.
struct TraceBatch {
  std::vector<std::int64_t> indices, offsets;
  std::int64_t B = 0;
};

/// Builds a batch from bags of local rows, bag j = t*B + b.
inline TraceBatch make_batch(std::int64_t T, const std::vector<std::vector<std::int64_t>>& bags) {
  TraceBatch tb;
  tb.B = static_cast<std::int64_t>(bags.size()) / T;
  tb.offsets.push_back(0);
  for (const auto& bag : bags) {
    tb.indices.insert(tb.indices.end(), bag.begin(), bag.end());
    tb.offsets.push_back(static_cast<std::int64_t>(tb.indices.size()));
  }
  return tb;
}

/// Zipf(s) over [0, n) by an inverse-CDF table: rank k has probability proportional
/// to 1 / (k + 1)^s; ranks are scattered over the rows by a seeded Fisher-Yates
/// permutation (so hot rows do not share sets). Draws from std::mt19937_64, whose
/// output sequence the standard fixes.
class ZipfRows {
 public:
  ZipfRows(std::int64_t n, double s, std::uint64_t seed) : gen_(seed), cdf_(static_cast<std::size_t>(n)) {
    double acc = 0.0;
    for (std::int64_t k = 0; k < n; ++k) {
      acc += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[static_cast<std::size_t>(k)] = acc;
    }
    for (auto& c : cdf_) c /= acc;
    perm_.resize(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) perm_[static_cast<std::size_t>(k)] = k;
    for (std::int64_t k = n - 1; k > 0; --k) {
      std::swap(perm_[static_cast<std::size_t>(k)],
                perm_[static_cast<std::size_t>(gen_() % static_cast<std::uint64_t>(k + 1))]);
    }
  }
  std::int64_t next() {
    const double u = static_cast<double>(gen_() >> 11) * 0x1p-53;
    auto k = static_cast<std::size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    if (k >= cdf_.size()) k = cdf_.size() - 1;
    return perm_[k];
  }
  std::uint64_t raw() { return gen_(); }

 private:
  std::mt19937_64 gen_;
  std::vector<double> cdf_;
  std::vector<std::int64_t> perm_;
};

/// Index of the first difference of two vectors, or -1.
template <class A, class B>
std::int64_t first_mismatch(const std::vector<A>& a, const B* b, std::size_t n) {
  if (a.size() != n) return 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(a[i] == b[i])) return static_cast<std::int64_t>(i);
  }
  return -1;
}

template <class Storage, class Policy>
class Harness {
 public:
  using CE = mpe::CachedEmbedding<Storage, Policy, mpe::NearestRounding>;
  static constexpr bool kExact = std::is_same_v<Storage, mpe::Fp32>;

  Harness(std::vector<std::int64_t> table_rows, std::int32_t dim, std::int64_t cache_rows,
          mpe::HostBackend backend = {.num_threads = 1})
      : ce_(make_config(table_rows, dim, cache_rows), backend),
        sim_(sim_policy<Policy>(), Policy::ways, total(table_rows), cache_rows,
             design_row_bytes<Storage>(dim)),
        table_rows_(std::move(table_rows)),
        D_(dim) {
    const std::int64_t rows = total(table_rows_);
    ref_.resize(static_cast<std::size_t>(rows * D_));
    for (std::int64_t i = 0; i < rows * D_; ++i) {
      // Distinct values per row and element, exactly representable, within Int8's range.
      ref_[static_cast<std::size_t>(i)] = static_cast<float>((i * 37) % 201 - 100) * 0.015625f;
    }
    ce_.set_weights(ref_);
    if constexpr (!kExact) ce_.get_weights(ref_);  // the quantized values are the start
    first_.push_back(0);
    for (auto r : table_rows_) first_.push_back(first_.back() + r);
  }

  CE& ce() { return ce_; }
  const CacheSimulator& sim() const { return sim_; }
  std::int64_t T() const { return static_cast<std::int64_t>(table_rows_.size()); }
  std::int64_t first_row(std::int64_t t) const { return first_[static_cast<std::size_t>(t)]; }

  /// Global rows of a batch in index order (table-major).
  std::vector<std::int64_t> global_rows(const TraceBatch& tb) const {
    std::vector<std::int64_t> g;
    for (std::int64_t j = 0; j + 1 < static_cast<std::int64_t>(tb.offsets.size()); ++j) {
      const std::int64_t t = j / tb.B;
      for (auto i = tb.offsets[static_cast<std::size_t>(j)]; i < tb.offsets[static_cast<std::size_t>(j + 1)];
           ++i) {
        g.push_back(first_row(t) + tb.indices[static_cast<std::size_t>(i)]);
      }
    }
    return g;
  }

  /// prefetch() on both; returns the simulator's row -> slot.
  std::map<std::int64_t, std::int64_t> prefetch(const TraceBatch& tb) {
    ce_.prefetch(tb.indices, tb.offsets);
    auto slots = sim_.prefetch(global_rows(tb));
    check_slots(slots, "prefetch");
    check_state("prefetch");
    return slots;
  }

  /// forward() on both (and the FP32 reference bag); returns row -> slot.
  std::map<std::int64_t, std::int64_t> forward(const TraceBatch& tb) {
    last_ = tb;
    output_.assign(static_cast<std::size_t>(tb.B * T() * D_), 0.0f);
    ce_.forward(tb.indices, tb.offsets, output_);
    auto slots = sim_.forward(global_rows(tb));
    check_slots(slots, "forward");
    check_state("forward");
    if constexpr (kExact) {
      std::vector<float> expect(output_.size(), 0.0f);
      for (std::int64_t j = 0; j < tb.B * T(); ++j) {
        const std::int64_t t = j / tb.B, b = j % tb.B;
        float* o = expect.data() + (b * T() + t) * D_;
        for (auto i = tb.offsets[static_cast<std::size_t>(j)];
             i < tb.offsets[static_cast<std::size_t>(j + 1)]; ++i) {
          const std::int64_t r = first_row(t) + tb.indices[static_cast<std::size_t>(i)];
          for (std::int32_t d = 0; d < D_; ++d) o[d] += ref_[static_cast<std::size_t>(r * D_ + d)];
        }
      }
      const auto bad = first_mismatch(expect, output_.data(), output_.size());
      INFO("forward output element " << bad);
      CHECK(bad == -1);  // bit-exact: same additions in the same order
    }
    return slots;
  }

  /// backward() with SGD on both; the gradient is a fixed function of (b, t, d, step).
  void backward(float lr = 0.25f) {
    const TraceBatch& tb = last_;
    std::vector<float> grad(static_cast<std::size_t>(tb.B * T() * D_));
    for (std::size_t i = 0; i < grad.size(); ++i) {
      grad[i] = static_cast<float>(static_cast<std::int64_t>((i * 13 + steps_ * 7) % 9) - 4) * 0.0078125f;
    }
    ce_.backward(grad, mpe::Sgd{lr});
    sim_.backward();
    ++steps_;
    if constexpr (kExact) {
      // Plain embedding-bag backward: per row, the sum of its occurrences' output
      // gradients in position order, then w -= lr * g.
      std::map<std::int64_t, std::vector<float>> g;
      for (std::int64_t j = 0; j < tb.B * T(); ++j) {
        const std::int64_t t = j / tb.B, b = j % tb.B;
        const float* go = grad.data() + (b * T() + t) * D_;
        for (auto i = tb.offsets[static_cast<std::size_t>(j)];
             i < tb.offsets[static_cast<std::size_t>(j + 1)]; ++i) {
          const std::int64_t r = first_row(t) + tb.indices[static_cast<std::size_t>(i)];
          auto [it, fresh] = g.try_emplace(r, std::vector<float>(go, go + D_));
          if (!fresh) {
            for (std::int32_t d = 0; d < D_; ++d) it->second[static_cast<std::size_t>(d)] += go[d];
          }
        }
      }
      for (const auto& [r, gr] : g) {
        for (std::int32_t d = 0; d < D_; ++d) {
          float& w = ref_[static_cast<std::size_t>(r * D_ + d)];
          w -= lr * gr[static_cast<std::size_t>(d)];
        }
      }
      check_weights();
    }
    check_state("backward");
  }

  void flush() {
    ce_.flush();
    sim_.flush();
    check_state("flush");
    if constexpr (kExact) check_weights();
  }

  /// The whole cache state and every counter equal the simulator's.
  void check_state(const char* where) const {
    const mpe::CacheRef c = ce_.cache_ref();
    REQUIRE(c.slots() == sim_.slots());
    const auto n = static_cast<std::size_t>(c.slots());
    const auto t = first_mismatch(sim_.tags(), c.tags, n);
    const auto u = first_mismatch(sim_.last_use(), c.last_use, n);
    const auto d = first_mismatch(sim_.dirty(), c.dirty, n);
    INFO(where << ": first slot differing in tags " << t << ", LRU score " << u << ", dirty " << d);
    if (t >= 0) INFO("tag " << c.tags[t] << " expected " << sim_.tags()[static_cast<std::size_t>(t)]);
    CHECK(t == -1);
    CHECK(u == -1);
    CHECK(d == -1);
    const mpe::CacheStats a = ce_.stats();
    const SimStats& e = sim_.stats();
    CHECK(a.lookups == e.lookups);
    CHECK(a.unique_rows == e.unique_rows);
    CHECK(a.hits == e.hits);
    CHECK(a.misses == e.misses);
    CHECK(a.conflict_misses == e.conflict_misses);
    CHECK(a.evictions == e.evictions);
    CHECK(a.writebacks == e.writebacks);
    CHECK(a.lfu_rejections == e.lfu_rejections);
    CHECK(a.bytes_filled == e.bytes_filled);
    CHECK(a.bytes_written_back == e.bytes_written_back);
  }

  /// get_weights() equals the plain FP32 model bit for bit (Fp32 storage).
  void check_weights() {
    std::vector<float> w(ref_.size());
    ce_.get_weights(w);
    const auto bad = first_mismatch(ref_, w.data(), w.size());
    INFO("weights element " << bad);
    CHECK(bad == -1);  // bit-exact: the same SGD arithmetic on the same values
  }

  const std::vector<float>& output() const { return output_; }

 private:
  static std::int64_t total(const std::vector<std::int64_t>& rows) {
    std::int64_t s = 0;
    for (auto r : rows) s += r;
    return s;
  }
  static mpe::EmbeddingConfig make_config(const std::vector<std::int64_t>& rows, std::int32_t dim,
                                          std::int64_t cache_rows) {
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = rows;
    cfg.dim = dim;
    cfg.cache_rows = cache_rows;
    cfg.seed = 7;
    return cfg;
  }
  void check_slots(const std::map<std::int64_t, std::int64_t>& expect, const char* where) const {
    const mpe::CacheRef c = ce_.cache_ref();
    std::int64_t bad_row = -1, got = 0, want = 0;
    for (const auto& [row, slot] : expect) {
      const std::int64_t s = c.find(row);
      if (s != slot) {
        bad_row = row;
        got = s;
        want = slot;
        break;
      }
    }
    INFO(where << ": row " << bad_row << " has slot " << got << ", simulator says " << want);
    CHECK(bad_row == -1);
  }

  CE ce_;
  CacheSimulator sim_;
  std::vector<std::int64_t> table_rows_;
  std::int32_t D_;
  std::vector<std::int64_t> first_;
  std::vector<float> ref_, output_;
  TraceBatch last_;
  std::uint64_t steps_ = 0;
};

/// A trace of about `accesses` index occurrences: two tables of rows0 and rows1 rows (Zipf(s)
/// each, own seeds), 64 bags per table per batch, bag sizes uniform in [0, 16).
inline std::vector<TraceBatch> two_table_zipf_trace(std::int64_t rows0, std::int64_t rows1,
                                                    std::uint64_t accesses, double s, std::uint64_t seed) {
  ZipfRows z0(rows0, s, seed), z1(rows1, s, seed + 1);
  std::vector<TraceBatch> trace;
  std::uint64_t total = 0;
  while (total < accesses) {
    std::vector<std::vector<std::int64_t>> bags;
    for (int t = 0; t < 2; ++t) {
      for (int b = 0; b < 64; ++b) {
        auto& z = t == 0 ? z0 : z1;
        const auto len = static_cast<int>(z.raw() % 16);
        std::vector<std::int64_t> bag;
        for (int i = 0; i < len; ++i) bag.push_back(z.next());
        total += static_cast<std::uint64_t>(len);
        bags.push_back(std::move(bag));
      }
    }
    trace.push_back(make_batch(2, bags));
  }
  return trace;
}

/// Drives the harness through the trace: every third batch is prefetched while the
/// previous one awaits backward; flush every 10 batches.
template <class H>
void run_trace(H& h, const std::vector<TraceBatch>& trace) {
  for (std::size_t k = 0; k < trace.size(); ++k) {
    h.forward(trace[k]);
    if (k % 3 == 1 && k + 1 < trace.size()) h.prefetch(trace[k + 1]);
    h.backward();
    if (k % 10 == 9) h.flush();
  }
  h.flush();
}

}  // namespace mpe_test
