// SPDX-License-Identifier: Apache-2.0
// miss_ratio: cache sizing tool. Runs a real mpe::CachedEmbedding (Fp32 store, tiny D,
// host backend, forward only: the decisions do not depend on the values) over Zipf
// traces and reports the miss ratio of each cache policy (LRU, LFU, direct-mapped)
// against the cache size, beside the optimal offline miss ratio (Belady's MIN with
// bypass, fully associative, same capacity) and the compulsory floor.
//
// What is compared (all three columns share one denominator):
//   miss ratio = misses / unique-row lookups, where a unique-row lookup is one distinct
//   row of one batch (CacheStats::misses / CacheStats::unique_rows). The cache works per
//   batch: duplicates inside a batch are one lookup, and a batch's rows all hold their
//   slot together (none is evicted by its own batch).
//   Belady runs per access on the per-batch deduplicated stream: each batch's distinct
//   rows in ascending order, batches in order, a fully associative cache of cache_rows
//   rows that knows the future: on a miss it keeps the cache_rows rows (residents plus
//   the newcomer) whose next use is nearest, and may bypass the newcomer. That is the
//   fewest misses any cache of that size can have on that stream, so it is a lower bound
//   for every policy here, though it is free of the batch constraint above.
//   Compulsory = distinct rows of the whole trace / unique-row lookups (first-time misses
//   no cache can avoid).
//
// Mode --criteo PATH reads Criteo text rows (label, 13 integer, 26 categorical hash
// columns): each categorical column is a table of --criteo-table-rows rows, the row is
// the 32-bit hash mod (table rows - 1) + 1, row 0 for a missing value.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mpe/mpe.hpp>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

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

Trace zipf_trace(std::int64_t rows, double s, std::int64_t batches, std::int64_t bags, std::int64_t pooling,
                 std::uint64_t seed) {
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

Trace criteo_trace(const std::string& path, std::int64_t table_rows, std::int64_t bags) {
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
std::vector<std::int64_t> unique_stream(const Trace& t) {
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
std::uint64_t belady_misses(const std::vector<std::int64_t>& stream, std::int64_t total_rows,
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

struct Result {
  std::uint64_t unique_rows = 0, misses = 0, conflicts = 0;
  double seconds = 0;
};

template <class Policy>
Result run_cache(const Trace& t, std::int64_t cache_rows, int threads) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = t.table_rows;
  cfg.dim = 4;
  cfg.cache_rows = cache_rows;
  mpe::CachedEmbedding<mpe::Fp32, Policy, mpe::NearestRounding> ce(cfg,
                                                                   mpe::HostBackend{.num_threads = threads});
  std::vector<float> out;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& b : t.batches) {
    out.resize((b.offsets.size() - 1) * 4);
    ce.forward(b.indices, b.offsets, out);
  }
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.unique_rows = ce.stats().unique_rows;
  r.misses = ce.stats().misses;
  r.conflicts = ce.stats().conflict_misses;
  return r;
}

std::string pct(std::uint64_t num, std::uint64_t den) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2)
    << (den ? 100.0 * static_cast<double>(num) / static_cast<double>(den) : 0.0) << " %";
  return o.str();
}

void report(const std::string& label, const Trace& t, const std::vector<double>& sizes, int threads) {
  std::int64_t total = 0;
  for (auto r : t.table_rows) total += r;
  const auto stream = unique_stream(t);
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(total), 0);
  std::uint64_t distinct = 0;
  for (auto r : stream) {
    if (!seen[static_cast<std::size_t>(r)]) ++distinct;
    seen[static_cast<std::size_t>(r)] = 1;
  }
  std::uint64_t lookups = 0;
  for (const auto& b : t.batches) lookups += b.indices.size();
  std::cout << "\n### " << label << "\n\n"
            << t.batches.size() << " batches, " << lookups << " lookups, " << stream.size()
            << " unique-row lookups (per batch), " << distinct << " distinct rows of " << total
            << "; compulsory miss ratio " << pct(distinct, stream.size()) << "\n\n"
            << "| cache (% of rows) | rows | LRU<32> | LFU<32> | direct-mapped | Belady (MIN) |\n"
            << "|---:|---:|---:|---:|---:|---:|\n";
  for (const double f : sizes) {
    const auto c = std::max<std::int64_t>(
        32, static_cast<std::int64_t>(std::llround(f / 100.0 * static_cast<double>(total))));
    const Result lru = run_cache<mpe::Lru<32>>(t, c, threads);
    const Result lfu = run_cache<mpe::Lfu<32>>(t, c, threads);
    const Result dm = run_cache<mpe::DirectMapped>(t, c, threads);
    const std::uint64_t opt = belady_misses(stream, total, c);
    if (lru.unique_rows != stream.size() || lfu.unique_rows != stream.size() ||
        dm.unique_rows != stream.size()) {
      throw std::logic_error("unique-row counts disagree with the trace");
    }
    std::cout << "| " << f << " % | " << c << " | " << pct(lru.misses, lru.unique_rows) << " | "
              << pct(lfu.misses, lfu.unique_rows) << " | " << pct(dm.misses, dm.unique_rows) << " | "
              << pct(opt, stream.size()) << " |" << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpe miss_ratio: cache miss ratio vs size for LRU, LFU, direct-mapped and Belady (MIN)"};
  std::int64_t rows = 1000000, bags = 2048, pooling = 32, batches = 100;
  std::vector<double> exponents{0.8, 1.05, 1.2};
  std::vector<double> sizes{0.5, 1, 2, 5, 10, 20};
  std::uint64_t seed = 2024;
  int threads = 1;
  std::string criteo;
  std::int64_t criteo_table_rows = 65536, criteo_bags = 128;
  app.add_option("--rows", rows, "table rows (one table)")->check(CLI::PositiveNumber);
  app.add_option("--bags", bags, "bags per batch (B)")->check(CLI::PositiveNumber);
  app.add_option("--pooling", pooling, "lookups per bag (L)")->check(CLI::PositiveNumber);
  app.add_option("--batches", batches, "batches per trace")->check(CLI::PositiveNumber);
  app.add_option("--exponents", exponents, "Zipf exponents s")->delimiter(',');
  app.add_option("--sizes", sizes, "cache sizes in % of rows")->delimiter(',');
  app.add_option("--seed", seed, "trace seed (std::mt19937_64)");
  app.add_option("--threads", threads, "host threads (1 = sequential)")->check(CLI::PositiveNumber);
  app.add_option("--criteo", criteo, "Criteo text file: run on its 26 categorical columns instead of Zipf");
  app.add_option("--criteo-table-rows", criteo_table_rows, "rows per Criteo table (hash mod rows)")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 30));
  app.add_option("--criteo-bags", criteo_bags, "samples per Criteo batch")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::cout << "command:";
  for (int i = 0; i < argc; ++i) std::cout << ' ' << argv[i];
  std::cout << "\n\nmiss ratio = misses / unique-row lookups (one distinct row of one batch); Belady = MIN "
               "with bypass, fully associative, same rows, per access on the per-batch deduplicated "
               "stream\n";
  const auto t0 = std::chrono::steady_clock::now();
  if (!criteo.empty()) {
    report("Criteo (" + criteo + "), 26 tables x " + std::to_string(criteo_table_rows) + " rows, " +
               std::to_string(criteo_bags) + " samples per batch, 1 lookup per table per sample",
           criteo_trace(criteo, criteo_table_rows, criteo_bags), sizes, threads);
  } else {
    for (const double s : exponents) {
      std::ostringstream label;
      label << "Zipf s = " << s << ", " << rows << " rows, " << batches << " batches of " << bags << " x "
            << pooling << " lookups";
      report(label.str(), zipf_trace(rows, s, batches, bags, pooling, seed), sizes, threads);
    }
  }
  std::cout << "\ntotal " << std::fixed << std::setprecision(1)
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  return 0;
}
