// SPDX-License-Identifier: Apache-2.0
// miss_ratio: cache sizing tool. Runs a real mpe::CachedEmbedding (Fp32 store, tiny D,
// host backend, forward only: the decisions do not depend on the values) over Zipf
// traces and reports the miss ratio of each cache policy (LRU, LFU, direct-mapped, W-TinyLFU)
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
#include <chrono>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <mpe/mpe.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "trace.hpp"

namespace {

using namespace miss_ratio;

struct Result {
  std::uint64_t unique_rows = 0, misses = 0, conflicts = 0, rejections = 0;
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
  r.rejections = ce.stats().lfu_rejections;
  return r;
}

std::string pct(std::uint64_t num, std::uint64_t den) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2)
    << (den ? 100.0 * static_cast<double>(num) / static_cast<double>(den) : 0.0) << " %";
  return o.str();
}

/// (a - b) / den in percentage points.
std::string points(std::uint64_t a, std::uint64_t b, std::uint64_t den) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2)
    << (den ? 100.0 * (static_cast<double>(a) - static_cast<double>(b)) / static_cast<double>(den) : 0.0)
    << " pp";
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
            << "| cache (% of rows) | rows | LRU<32> | LFU<32> | direct-mapped | W-TinyLFU<32> | "
               "SecondTouchLru<32> "
               "(its fills) | Belady (MIN) | W-TinyLFU - Belady |\n"
            << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const double f : sizes) {
    const auto c = std::max<std::int64_t>(
        32, static_cast<std::int64_t>(std::llround(f / 100.0 * static_cast<double>(total))));
    const Result lru = run_cache<mpe::Lru<32>>(t, c, threads);
    const Result lfu = run_cache<mpe::Lfu<32>>(t, c, threads);
    const Result dm = run_cache<mpe::DirectMapped>(t, c, threads);
    const Result wt = run_cache<mpe::WTinyLfu<32>>(t, c, threads);
    const Result st = run_cache<mpe::SecondTouchLru<32>>(t, c, threads);
    const std::uint64_t opt = belady_misses(stream, total, c);
    if (lru.unique_rows != stream.size() || lfu.unique_rows != stream.size() ||
        dm.unique_rows != stream.size() || wt.unique_rows != stream.size() ||
        st.unique_rows != stream.size()) {
      throw std::logic_error("unique-row counts disagree with the trace");
    }
    std::cout << "| " << f << " % | " << c << " | " << pct(lru.misses, lru.unique_rows) << " | "
              << pct(lfu.misses, lfu.unique_rows) << " | " << pct(dm.misses, dm.unique_rows) << " | "
              << pct(wt.misses, wt.unique_rows) << " | " << pct(st.misses, st.unique_rows) << " ("
              << pct(st.misses - st.conflicts - st.rejections, st.unique_rows) << ") | "
              << pct(opt, stream.size()) << " | " << points(wt.misses, opt, stream.size()) << " |"
              << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mpe miss_ratio: cache miss ratio vs size for LRU, LFU, direct-mapped, W-TinyLFU, second-touch LRU and "
      "Belady (MIN)"};
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
