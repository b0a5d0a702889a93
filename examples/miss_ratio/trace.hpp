// SPDX-License-Identifier: Apache-2.0
// Traces (Zipf, Criteo) and Belady's MIN for the miss_ratio tool and its policy
// prototypes (prototype.cpp). Not part of the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <queue>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace miss_ratio {

/// A trace: batches of T tables x B bags (CSR, table-major, local rows) and the global
/// row of every occurrence.
struct Batch {
  std::vector<std::int64_t> indices, offsets, global;
};
struct Trace {
  std::vector<std::int64_t> table_rows;
  std::vector<Batch> batches;
};

/// Zipf(s) over [0, n) by an inverse-CDF table (rank k with probability proportional to
/// 1 / (k + 1)^s), ranks scattered over the rows by a seeded Fisher-Yates permutation.
class ZipfRows {
 public:
  ZipfRows(std::int64_t n, double s, std::uint64_t seed) : gen_(seed), cdf_(static_cast<std::size_t>(n)) {
    double acc = 0.0;
    for (std::int64_t k = 0; k < n; ++k) {
      acc += std::pow(static_cast<double>(k + 1), -s);
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
    return perm_[std::min(k, cdf_.size() - 1)];
  }

 private:
  std::mt19937_64 gen_;
  std::vector<double> cdf_;
  std::vector<std::int64_t> perm_;
};

inline Trace zipf_trace(std::int64_t rows, double s, std::int64_t batches, std::int64_t bags,
                        std::int64_t pooling, std::uint64_t seed) {
  Trace t;
  t.table_rows = {rows};
  ZipfRows z(rows, s, seed);
  for (std::int64_t k = 0; k < batches; ++k) {
    Batch b;
    for (std::int64_t j = 0; j <= bags; ++j) b.offsets.push_back(j * pooling);
    for (std::int64_t i = 0; i < bags * pooling; ++i) b.indices.push_back(z.next());
    b.global = b.indices;
    t.batches.push_back(std::move(b));
  }
  return t;
}

inline Trace criteo_trace(const std::string& path, std::int64_t table_rows, std::int64_t bags) {
  constexpr int kTables = 26;
  Trace t;
  t.table_rows.assign(kTables, table_rows);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::vector<std::int64_t>> samples;  // (lines, 26) local rows
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, '\t')) f.push_back(x);
    f.resize(40);
    std::vector<std::int64_t> s(kTables, 0);
    for (int c = 0; c < kTables; ++c) {
      const std::string& h = f[static_cast<std::size_t>(14 + c)];
      if (!h.empty())
        s[static_cast<std::size_t>(c)] =
            static_cast<std::int64_t>(std::stoull(h, nullptr, 16) %
                                      static_cast<std::uint64_t>(table_rows - 1)) +
            1;
    }
    samples.push_back(std::move(s));
  }
  for (std::size_t first = 0; first < samples.size(); first += static_cast<std::size_t>(bags)) {
    const std::size_t B = std::min<std::size_t>(static_cast<std::size_t>(bags), samples.size() - first);
    Batch b;
    b.offsets.push_back(0);
    for (int c = 0; c < kTables; ++c) {
      for (std::size_t i = 0; i < B; ++i) {
        const std::int64_t r = samples[first + i][static_cast<std::size_t>(c)];
        b.indices.push_back(r);
        b.global.push_back(c * table_rows + r);
        b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
      }
    }
    t.batches.push_back(std::move(b));
  }
  return t;
}

/// The per-batch deduplicated stream (each batch's distinct global rows, ascending).
inline std::vector<std::int64_t> unique_stream(const Trace& t) {
  std::vector<std::int64_t> out;
  for (const auto& b : t.batches) {
    std::vector<std::int64_t> u = b.global;
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    out.insert(out.end(), u.begin(), u.end());
  }
  return out;
}

/// Belady's MIN with bypass: misses of a fully associative cache of `capacity` rows on
/// `stream`. O(n log n) with a lazy max-heap on next use.
inline std::uint64_t belady_misses(const std::vector<std::int64_t>& stream, std::int64_t total_rows,
                                   std::int64_t capacity) {
  const auto n = static_cast<std::int64_t>(stream.size());
  const std::int64_t never = n;  // "no next use"
  std::vector<std::int64_t> next(stream.size()), last(static_cast<std::size_t>(total_rows), never);
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const auto r = static_cast<std::size_t>(stream[static_cast<std::size_t>(i)]);
    next[static_cast<std::size_t>(i)] = last[r];
    last[r] = i;
  }
  std::vector<std::int64_t> resident_next(static_cast<std::size_t>(total_rows), -1);  // -1: not resident
  std::priority_queue<std::pair<std::int64_t, std::int64_t>> heap;                    // (next use, row)
  std::int64_t size = 0;
  std::uint64_t misses = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = stream[static_cast<std::size_t>(i)];
    const std::int64_t nu = next[static_cast<std::size_t>(i)];
    auto& rn = resident_next[static_cast<std::size_t>(r)];
    if (rn >= 0) {
      rn = nu;
      heap.emplace(nu, r);
      continue;
    }
    ++misses;
    if (capacity == 0) continue;
    if (size < capacity) {
      rn = nu;
      heap.emplace(nu, r);
      ++size;
      continue;
    }
    while (resident_next[static_cast<std::size_t>(heap.top().second)] != heap.top().first) heap.pop();
    if (nu < heap.top().first) {  // the farthest resident is used later than the newcomer
      resident_next[static_cast<std::size_t>(heap.top().second)] = -1;
      heap.pop();
      rn = nu;
      heap.emplace(nu, r);
    }  // else bypass: the newcomer is the one used farthest in the future
  }
  return misses;
}

}  // namespace miss_ratio
