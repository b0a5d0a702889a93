// SPDX-License-Identifier: Apache-2.0
/// @file common.hpp
/// @brief Shared machinery of mpe's benchmarks: seeded index traces (uniform, Zipf by an
/// inverse-CDF table), the memory limits measured in the same process (STREAM-like
/// sequential read bandwidth, random 64-byte-line gather rate over a buffer far larger
/// than the last-level cache), a persistent table fixture, and the counters defined in
/// bench/README.md.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mpe/mpe.hpp>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace mpe_bench {

// ---------------------------------------------------------------- settings

/// Threads of the HostBackend and of the limit measurements: MPE_BENCH_THREADS (default 1).
inline int threads() {
  static const int t = [] {
    const char* e = std::getenv("MPE_BENCH_THREADS");
    const int v = e ? std::atoi(e) : 1;
    return v >= 1 ? v : 1;
  }();
  return t;
}

/// Size of the limit-measurement buffer in MiB (0 = automatic: 4 x LLC, at least 1 GiB,
/// at most 4 GiB and a quarter of the available memory). Set by --mpe_limit_mib=N.
inline std::size_t& limit_mib() {
  static std::size_t v = 0;
  return v;
}

inline std::size_t llc_bytes() {
  long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v <= 0) v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return v > 0 ? static_cast<std::size_t>(v) : (std::size_t{32} << 20);
}

inline std::size_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::size_t{8} << 30;
}

// ---------------------------------------------------------------- limits

/// Limits of this machine measured in this process (once, on first use).
struct Limits {
  double stream_bytes_per_s = 0;  ///< sequential read bandwidth (sum of uint64 words)
  double gather_lines_per_s = 0;  ///< independent random 64-byte-line reads per second
  std::size_t buffer_bytes = 0;   ///< buffer both were measured on
};

namespace detail {
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline Limits measure_limits() {
  Limits L;
  std::size_t bytes;
  if (limit_mib() > 0) {
    bytes = limit_mib() << 20;
  } else {
    bytes = std::max<std::size_t>(4 * llc_bytes(), std::size_t{1} << 30);
    bytes = std::min<std::size_t>(bytes, std::size_t{4} << 30);
    bytes = std::min<std::size_t>(bytes, mem_available_bytes() / 4);
  }
  // Power-of-two number of 64-byte lines, so a random line is a mask away.
  std::size_t lines = 1;
  while (lines * 2 * 64 <= bytes) lines *= 2;
  bytes = lines * 64;
  L.buffer_bytes = bytes;
  const std::size_t words = bytes / 8;
  std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[words]);
  const int nt = threads();
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::size_t i = 0; i < words; ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;
  std::uint64_t sink = 0;

  // STREAM-like read: sum all words (4 independent accumulators per thread), best of 3.
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp for schedule(static)
      for (std::size_t i = 0; i < words; i += 4) {
        a0 += buf[i];
        a1 += buf[i + 1];
        a2 += buf[i + 2];
        a3 += buf[i + 3];
      }
      total += a0 + a1 + a2 + a3;
    }
    best = std::min(best, seconds_since(t0));
    sink += total;
  }
  L.stream_bytes_per_s = static_cast<double>(bytes) / best;

  // Random line gather: independent loads (addresses never depend on loaded data, so
  // the core keeps as many misses in flight as it can), best of 3.
  const std::size_t per_thread = std::min<std::size_t>(std::size_t{1} << 24, lines);
  best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      std::uint64_t x = 0x2545f4914f6cdd1dull ^ (static_cast<std::uint64_t>(omp_get_thread_num() + 1) << 32) ^
                        static_cast<std::uint64_t>(rep);
      std::uint64_t acc = 0;
      for (std::size_t k = 0; k < per_thread; ++k) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc += buf[(x & (lines - 1)) * 8];
      }
      total += acc;
    }
    best = std::min(best, seconds_since(t0));
    sink += total;
  }
  L.gather_lines_per_s = static_cast<double>(per_thread) * nt / best;
  benchmark::DoNotOptimize(sink);
  return L;
}
}  // namespace detail

inline const Limits& limits() {
  static const Limits L = detail::measure_limits();
  return L;
}

/// Average 64-byte lines touched by one row of `row_bytes` at stride `stride` from a
/// 64-byte-aligned base (rows may straddle lines).
inline double lines_per_row(std::size_t row_bytes, std::size_t stride) {
  double s = 0;
  for (std::size_t r = 0; r < 64; ++r) {
    const std::size_t o = (r * stride) % 64;
    s += static_cast<double>((o + row_bytes + 63) / 64);
  }
  return s / 64.0;
}

// ---------------------------------------------------------------- traces

enum Dist : int { kUniform = 0, kZipf105 = 1, kZipf120 = 2 };

inline const char* dist_name(int d) {
  return d == kUniform ? "uniform" : d == kZipf105 ? "zipf1.05" : "zipf1.2";
}

/// Seeded row sampler: uniform, or Zipf(s) over ranks 1..rows by inverse CDF (binary
/// search in a table of the cumulative probabilities), rank k mapped to row (a*k + c) mod
/// rows with gcd(a, rows) = 1, so hot rows are scattered over the table.
class RowSampler {
 public:
  RowSampler(std::int64_t rows, int dist) : rows_(rows), dist_(dist) {
    if (dist != kUniform) {
      const double s = dist == kZipf105 ? 1.05 : 1.2;
      cdf_.resize(static_cast<std::size_t>(rows));
      double acc = 0;
      for (std::int64_t k = 0; k < rows; ++k) {
        acc += std::pow(static_cast<double>(k + 1), -s);
        cdf_[static_cast<std::size_t>(k)] = acc;
      }
      for (double& c : cdf_) c /= acc;
      a_ = static_cast<std::uint64_t>(0x9e3779b97f4a7c15ull % static_cast<std::uint64_t>(rows));
      if (a_ == 0) a_ = 1;
      while (std::gcd(a_, static_cast<std::uint64_t>(rows)) != 1) ++a_;
    }
  }
  template <class Rng>
  std::int64_t operator()(Rng& rng) const {
    if (dist_ == kUniform) return std::uniform_int_distribution<std::int64_t>(0, rows_ - 1)(rng);
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    auto k = static_cast<std::int64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    if (k >= rows_) k = rows_ - 1;
    const unsigned __int128 m = static_cast<unsigned __int128>(a_) * static_cast<std::uint64_t>(k) + 12345u;
    return static_cast<std::int64_t>(m % static_cast<std::uint64_t>(rows_));
  }

 private:
  std::int64_t rows_;
  int dist_;
  std::vector<double> cdf_;
  std::uint64_t a_ = 1;
};

/// One batch in CSR form for T = 1 table: B bags of exactly L indices.
struct Batch {
  std::vector<std::int64_t> indices, offsets;
  std::int64_t unique_rows = 0;
};

inline std::vector<Batch> make_batches(std::int64_t rows, std::int64_t B, std::int64_t L, int dist, int count,
                                       std::uint64_t seed) {
  RowSampler sampler(rows, dist);
  std::mt19937_64 rng(seed);
  std::vector<Batch> out(static_cast<std::size_t>(count));
  for (Batch& b : out) {
    b.indices.resize(static_cast<std::size_t>(B * L));
    b.offsets.resize(static_cast<std::size_t>(B + 1));
    for (std::int64_t j = 0; j <= B; ++j) b.offsets[static_cast<std::size_t>(j)] = j * L;
    for (auto& i : b.indices) i = sampler(rng);
    std::vector<std::int64_t> s = b.indices;
    std::sort(s.begin(), s.end());
    b.unique_rows = std::unique(s.begin(), s.end()) - s.begin();
  }
  return out;
}

// ---------------------------------------------------------------- parameters

/// One benchmark point. Arguments (in ArgNames order): B, L, D, rows, dist, cache per
/// mille of rows.
struct Params {
  std::int64_t B, L, D, rows, dist, cache_pm;
  static Params from(const benchmark::State& st) {
    return {st.range(0), st.range(1), st.range(2), st.range(3), st.range(4), st.range(5)};
  }
  std::int64_t cache_rows() const { return rows * cache_pm / 1000; }
  std::string key() const {
    return std::to_string(B) + "/" + std::to_string(L) + "/" + std::to_string(D) + "/" +
           std::to_string(rows) + "/" + std::to_string(dist) + "/" + std::to_string(cache_pm);
  }
};

inline const std::vector<std::string>& arg_names() {
  static const std::vector<std::string> n{"B", "L", "D", "rows", "dist", "cache_pm"};
  return n;
}

/// Base point: B = 2048, L = 32, D = 64, 1M rows, Zipf 1.05, 5 % cache (50 per mille).
inline std::vector<std::int64_t> base_args(std::int64_t cache_pm = 50) {
  return {2048, 32, 64, 1000000, kZipf105, cache_pm};
}
/// Smoke point for CI: tiny table and batch.
inline std::vector<std::int64_t> smoke_args(std::int64_t cache_pm = 50) {
  return {64, 8, 16, 10000, kZipf105, cache_pm};
}

/// One-factor-at-a-time sweep around the base point (the base itself first).
inline std::vector<std::vector<std::int64_t>> sweep_args(bool cached) {
  const std::int64_t c = cached ? 50 : 0;
  std::vector<std::vector<std::int64_t>> v{base_args(c)};
  for (std::int64_t r : {100000, 10000000}) v.push_back({2048, 32, 64, r, kZipf105, c});
  for (std::int64_t d : {16, 128}) v.push_back({2048, 32, d, 1000000, kZipf105, c});
  v.push_back({2048, 1, 64, 1000000, kZipf105, c});
  for (std::int64_t d : {kUniform, kZipf120}) v.push_back({2048, 32, 64, 1000000, d, c});
  if (cached) {
    for (std::int64_t pm : {0, 10}) v.push_back({2048, 32, 64, 1000000, kZipf105, pm});
  }
  return v;
}

// ---------------------------------------------------------------- the table fixture

constexpr int kBatches = 16;  ///< distinct batches cycled through
constexpr float kLearningRate = 0.01f;

template <class E>
struct Fixture {
  Params p;
  std::unique_ptr<E> emb;
  std::vector<Batch> batches;
  std::vector<float> output, grad;
  std::size_t next = 0;
  double setup_s = 0;

  explicit Fixture(const Params& prm) : p(prm) {
    const auto t0 = std::chrono::steady_clock::now();
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = {p.rows};
    cfg.dim = static_cast<std::int32_t>(p.D);
    cfg.cache_rows = p.cache_rows();
    cfg.seed = 42;
    emb = std::make_unique<E>(cfg, mpe::HostBackend{threads()});
    emb->init_uniform(-0.05f, 0.05f);
    batches = make_batches(p.rows, p.B, p.L, static_cast<int>(p.dist), kBatches,
                           1234 + static_cast<std::uint64_t>(p.dist));
    output.assign(static_cast<std::size_t>(p.B * p.D), 0.0f);
    grad.resize(output.size());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> g(-1.0f, 1.0f);
    for (float& x : grad) x = g(rng);
    // Warm up: one pass over every batch, so the cache is in steady state.
    for (int k = 0; k < kBatches; ++k) step();
    emb->reset_stats();
    setup_s = detail::seconds_since(t0);
  }
  const Batch& batch() const { return batches[next]; }
  void advance() { next = (next + 1) % batches.size(); }
  /// One untimed training step (forward with populate, backward with Sgd).
  void step() {
    const Batch& b = batch();
    emb->forward(b.indices, b.offsets, output);
    emb->backward(grad, mpe::Sgd{kLearningRate});
    advance();
  }
};

/// Keeps the last fixture alive, so the benchmarks of one configuration (registered one
/// after another) share its table; a different configuration replaces it.
struct FixtureSlot {
  std::string key;
  std::shared_ptr<void> holder;
};
inline FixtureSlot& fixture_slot() {
  static FixtureSlot s;
  return s;
}

template <class E>
Fixture<E>& fixture(const std::string& type_name, const Params& p) {
  FixtureSlot& s = fixture_slot();
  const std::string key = type_name + "|" + p.key();
  if (s.key != key) {
    s.holder.reset();  // free the previous table before building the next
    s.key.clear();
    s.holder = std::make_shared<Fixture<E>>(p);
    s.key = key;
  }
  return *static_cast<Fixture<E>*>(s.holder.get());
}

// ---------------------------------------------------------------- timing helpers

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// CPU seconds of the whole process (all threads): on a shared, loaded machine the
/// wall-clock time includes waiting for a core; CPU time does not.
inline double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Sets the counters of bench/README.md from totals over the timed iterations: `indices`
/// looked up, `bytes` moved (defined per operation in bench/README.md), `rows` read from the
/// store (for fraction_of_limit, with `lines_per_row_v` lines each), `seconds` timed (wall),
/// `cpu_seconds` the process CPU time of the same parts.
inline void set_counters(benchmark::State& st, double indices, double bytes, double rows,
                         double lines_per_row_v, double seconds, double cpu_seconds) {
  if (seconds <= 0) return;
  if (cpu_seconds > 0) st.counters["indices_per_cpu_second"] = benchmark::Counter(indices / cpu_seconds);
  st.counters["indices_per_second"] = benchmark::Counter(indices / seconds);
  st.counters["bytes_per_second"] = benchmark::Counter(bytes / seconds);
  const Limits& L = limits();
  st.counters["fraction_of_limit"] =
      benchmark::Counter(rows / seconds * lines_per_row_v / L.gather_lines_per_s);
  st.counters["fraction_of_stream"] = benchmark::Counter(bytes / seconds / L.stream_bytes_per_s);
}

inline void set_hit_rate(benchmark::State& st, const mpe::CacheStats& s) {
  st.counters["hit_rate"] = benchmark::Counter(
      s.unique_rows ? static_cast<double>(s.hits) / static_cast<double>(s.unique_rows) : 0.0);
}

// ---------------------------------------------------------------- main

inline void add_context() {
  const Limits& L = limits();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.3f", L.stream_bytes_per_s / 1e9);
  benchmark::AddCustomContext("mpe_stream_read_GBps", buf);
  std::snprintf(buf, sizeof buf, "%.1f", L.gather_lines_per_s / 1e6);
  benchmark::AddCustomContext("mpe_gather_Mlines_per_s", buf);
  benchmark::AddCustomContext("mpe_limit_buffer_MiB", std::to_string(L.buffer_bytes >> 20));
  benchmark::AddCustomContext("mpe_threads", std::to_string(threads()));
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string t;
  std::getline(thp, t);
  benchmark::AddCustomContext("mpe_thp", t);
}

/// main() of every mpe benchmark: Google Benchmark's flags plus --mpe_limit_mib=N.
inline int run_main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mpe_limit_mib=", 0) == 0) {
      limit_mib() = static_cast<std::size_t>(std::stoull(a.substr(16)));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 1;
    }
  }
  add_context();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace mpe_bench

#define MPE_BENCH_MAIN() \
  int main(int argc, char** argv) { return mpe_bench::run_main(argc, argv); }
