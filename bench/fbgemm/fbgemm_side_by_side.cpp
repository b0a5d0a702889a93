// SPDX-License-Identifier: Apache-2.0
/// @file fbgemm_side_by_side.cpp
/// @brief mpe's store-only forward against FBGEMM's CPU embedding-bag kernels, in ONE
/// process, on identical bytes and identical batches, interleaved call by call.
///
/// - Same bytes: each table is made in mpe (`init_uniform(-0.05, 0.05)`, seed 1) and exported
///   with `mpe::io::export_table(emb, 0, mpe::interop::FbgemmFused{})` (FBGEMM's fused
///   layout: INT8 D x u8 + f32 scale + f32 bias; INT4 ceil(D/2) bytes + f16 scale + f16
///   bias; FP16 / FP32 plain) into a 2 MiB-aligned buffer; the bench checks byte for byte
///   that mpe's store holds the same rows at the same stride. Every variant reads its own
///   copy (FBGEMM: the exported buffer; mpe_fwd / mpe_inf: their objects' stores), so no
///   variant finds rows another one has just brought into the caches.
/// - Same batches: B bags of exactly L int64 indices (offsets 0, L, 2L, ...), sum pooling,
///   FP32 output (B, D). A pool of --pool-batches batches per (rows, dist): uniform =
///   splitmix64 % rows; zipf = Zipf(--zipf-s) by exact inverse CDF over ranks, hot ranks
///   scattered by row = rank * 2654435761 mod rows.
/// - Interleaved: every round runs every variant once on the same batch, the order rotating
///   by one each round; one warm-up pass over the pool, then --reps timed rounds. Each call
///   is timed (steady_clock); a case reports the median per-call time of each variant and
///   the median over rounds of the per-round ratio mpe / FBGEMM, for wall time and for the
///   thread's CPU time (CLOCK_THREAD_CPUTIME_ID: robust to waiting for a core on a loaded
///   machine, not to other processes' use of the caches and memory).
/// - Order-balanced ratio (the last CSV column, and a "# ... by call order" line): the
///   median per-round ratio of the rounds where the variant ran before FBGEMM and of those
///   where it ran after, and their geometric mean. A call is faster when it follows a call of
///   its own library (its rows are still in the caches) than when it follows the other
///   library's: with an untimed step after a call (mpe_step, mpe_step_defer) the rotation
///   makes FBGEMM follow itself in the rounds where it runs first and mpe's step where it
///   runs second, so the per-round ratios form two groups (INT8 + 5 % on the 2-vCPU guest:
///   about 1.9x and 1.1x) and their median falls in either. The geometric mean of the two
///   orders' ratios is also the geometric mean of "each library after itself" and "each
///   after the other", and is stable where the plain median is not.
/// - Tables swapped (--swap-buffers; fbgemm and mpe_fwd only): each library's table is a
///   separate buffer, and at 10M rows two buffers of the same bytes read by the same kernel
///   differ by up to 15 % in one process (their pages' placement in memory: FBGEMM's kernel on
///   mpe's store against FBGEMM's own copy, 0.80 - 1.13 over four processes), which the plain
///   ratio counts as the libraries' difference. With the option mpe_fwd reads a second object
///   (table B) and FBGEMM reads mpe's two stores: in half the rounds FBGEMM reads A and mpe
///   B, in the other half the reverse (two rounds, one per call order, then the other half;
///   the assignment flipped every pass over the pool, its length rounded up to a multiple
///   of 4). The reported ratio is the geometric mean of the
///   two halves' median per-round ratios, in which each table's own speed cancels; a "#" line
///   gives the two halves' thread-CPU ratios.
/// - Agreement: after timing, every variant runs batch 0 and its output is compared with
///   FBGEMM's. Stated bound, per output element: |mpe - fbgemm| <= L * L * 2^-22 * M with
///   M = max |element| of the table (the rows' order and FBGEMM's FMA in the dequantization
///   change the rounding of a sum of L terms, each error below L * 2^-24 * sum |x| <= L *
///   2^-24 * L * M; 4x margin). Exceeding it fails the run (exit code 3).
/// - Limits, measured in the same process before the tables are built (--limit-mib buffer,
///   4 KiB pages unless --thp): sequential read GB/s (sum of uint64 words) and random
///   64-byte-line gather rate (independent loads at precomputed random lines), each the best
///   of 5 passes (a loaded machine only ever makes a pass slower). Reported per
///   variant: useful GB/s = B*L*row_bytes / time; seq_fraction = useful GB/s / sequential
///   GB/s; gather_fraction = rows/s * lines per row / gather lines/s (above 1 when the
///   store fits the caches).
///
/// Variants (--variants): fbgemm (GenerateEmbeddingSpMDM / GenerateEmbeddingSpMDMNBit(4 or 2),
/// prefetch distance 16), mpe_fwd (`CachedEmbedding::forward()`, cache_rows = 0,
/// HostBackend{1}), mpe_fwd_avx2 (the same on its own object with the same bytes, the
/// AVX-512 pooling kernel turned off: the AVX2 kernel, detail::set_host_avx512(false)),
/// mpe_inf (`forward_inference()` on another object with the same bytes), mpe_cached
/// (`forward()` on another object with the same bytes and an Lru<32> FP32 cache of
/// --cache-pct % of the rows, no prefetch(): every call validates, sorts and deduplicates
/// the batch, admits rows (fills and evictions) and pools from the cache and the store: the
/// paper's cached forward, to compare with FBGEMM's store-only kernel on the same batches),
/// mpe_cached_st (the same with SecondTouchLru<32>: a miss replaces a cached row only from its
/// second touch; refused rows are pooled from the store), mpe_cached_inf (`forward_inference()`
/// through mpe_cached's kind of cache on another object, filled by one populating forward() per
/// pool batch before the warm-up: each occurrence's set scanned, rows pooled from their slot
/// or the store, nothing admitted), mpe_step and mpe_step_defer (training steps on objects like
/// mpe_cached's: the timed call is `forward()`, and a `backward()` of SGD at learning rate 0
/// follows each one outside it, timed on its own, so the cache evolves as in training while
/// the weights stay the bytes FBGEMM reads; mpe_step_defer sets EmbeddingConfig::defer_admission,
/// so its forward finds slots and pools, and its backward deduplicates and admits; a
/// "# <variant> <dist> step" line gives both parts). --slot-index gives the cached variants a
/// row -> slot index (EmbeddingConfig::slot_index), in the store rows (--slot-array: in a
/// separate array): forward_inference and mpe_step_defer's forward read each occurrence's
/// slot from it.
///
/// Phases (--phases): the mpe_cached, mpe_cached_st, mpe_step and mpe_step_defer calls of the
/// timed rounds are also timed between mpe's phase marks (`MPE_PHASE_MARK`,
/// mpe/detail/host/phase_mark.hpp, defined by this file before it includes mpe): one
/// "# mpe_cached <dist> phases" line per case with the mean ms per call of each phase (over
/// all those variants' calls) and its share of their sum.
///
/// Output: a readable table and lines prefixed "CSV," (header first).
// --phases: mpe's phase marks (mpe/detail/host/phase_mark.hpp) go to this harness; defined
// before any mpe header is included.
namespace sbs {
void phase_mark(const char* name);
}  // namespace sbs
#define MPE_PHASE_MARK(name) ::sbs::phase_mark(name)

#include <fbgemm/FbgemmEmbedding.h>
#include <fbgemm/Types.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace sbs {

/// --phases: the time between successive phase marks of the timed mpe_cached calls.
struct PhaseClock {
  bool armed = false;  // --phases and inside the timed rounds
  bool on = false;     // an mpe_cached call is running
  std::chrono::steady_clock::time_point last;
  std::map<std::string, double> secs;  // summed seconds by the mark ending the phase
  std::vector<std::string> order;      // mark names in first-seen (call) order
};
PhaseClock g_phases;

void phase_mark(const char* name) {
  if (!g_phases.on) return;
  const auto now = std::chrono::steady_clock::now();
  if (std::strcmp(name, "begin") != 0) {
    const auto [it, inserted] = g_phases.secs.try_emplace(name, 0.0);
    if (inserted) g_phases.order.emplace_back(name);
    it->second += std::chrono::duration<double>(now - g_phases.last).count();
  }
  g_phases.last = now;
}

}  // namespace sbs

namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// CPU time of the calling thread (excludes time the thread waited for a core: on a loaded
/// machine the wall time of a call includes other processes' slices, this does not).
double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// splitmix64 stream (index generation).
struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

bool g_thp = false;  // --thp: MADV_HUGEPAGE on the big buffers of both libraries

/// Anonymous mapping, 2 MiB aligned; MADV_HUGEPAGE with --thp, else MADV_NOHUGEPAGE.
struct BigBuf {
  void* base = nullptr;
  std::size_t map_bytes = 0;
  std::uint8_t* p = nullptr;
  explicit BigBuf(std::size_t n) {
    const std::size_t huge = std::size_t{2} << 20;
    map_bytes = (n + 2 * huge) & ~(huge - 1);
    base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    madvise(base, map_bytes, g_thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    p = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(base) + huge - 1) & ~(huge - 1));
  }
  BigBuf(const BigBuf&) = delete;
  BigBuf& operator=(const BigBuf&) = delete;
  ~BigBuf() { munmap(base, map_bytes); }
};

/// HostBackend whose big allocations follow BigBuf's page policy (the algorithms are
/// HostBackend's), so both libraries read their tables through the same kind of pages.
struct PagedHostBackend : mpe::HostBackend {
  static std::map<void*, std::unique_ptr<BigBuf>>& maps() {
    static std::map<void*, std::unique_ptr<BigBuf>> m;
    return m;
  }
  void* allocate(std::size_t bytes, mpe::MemoryPurpose purpose = mpe::MemoryPurpose::Workspace) const {
    if (bytes < (std::size_t{8} << 20)) return mpe::HostBackend::allocate(bytes, purpose);
    auto b = std::make_unique<BigBuf>(bytes);
    void* p = b->p;
    maps()[p] = std::move(b);
    return p;
  }
  void deallocate(void* p, std::size_t bytes,
                  mpe::MemoryPurpose purpose = mpe::MemoryPurpose::Workspace) const noexcept {
    if (maps().erase(p) == 0) mpe::HostBackend::deallocate(p, bytes, purpose);
  }
};

volatile std::uint64_t g_sink = 0;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// ------------------------------------------------------------------ limits

struct Limits {
  double seq_gbps = 0;       ///< sequential read, best of 5 (least disturbed on a loaded machine)
  double gather_mlines = 0;  ///< random 64-byte lines per second (millions), best of 5
  std::size_t bytes = 0;
};

Limits measure_limits(std::size_t mib) {
  Limits L;
  std::size_t lines = 1;
  while (lines * 2 * 64 <= (mib << 20)) lines *= 2;
  L.bytes = lines * 64;
  BigBuf buf(L.bytes);
  auto* a = reinterpret_cast<std::uint64_t*>(buf.p);
  const std::size_t words = L.bytes / 8;
  for (std::size_t i = 0; i < words; ++i) a[i] = i * 0x9e3779b97f4a7c15ull;
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = clk::now();
    std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t i = 0; i < words; i += 4) {
      s0 += a[i];
      s1 += a[i + 1];
      s2 += a[i + 2];
      s3 += a[i + 3];
    }
    t.push_back(secs(t0, clk::now()));
    g_sink = g_sink + s0 + s1 + s2 + s3;
  }
  L.seq_gbps = static_cast<double>(L.bytes) / *std::min_element(t.begin(), t.end()) / 1e9;
  const std::size_t ng = std::size_t{1} << 22;
  std::vector<std::uint32_t> idx(ng);
  SplitMix64 rng{0x57EA0000ull};
  for (auto& v : idx) v = static_cast<std::uint32_t>(rng.next() & (lines - 1));
  t.clear();
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = clk::now();
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < ng; ++i) s += a[static_cast<std::size_t>(idx[i]) * 8];
    t.push_back(secs(t0, clk::now()));
    g_sink = g_sink + s;
  }
  L.gather_mlines = static_cast<double>(ng) / *std::min_element(t.begin(), t.end()) / 1e6;
  return L;
}

// ----------------------------------------------------------------- options

struct Options {
  std::vector<std::int64_t> rows{1000000, 10000000};
  std::vector<std::int64_t> dims{64};
  std::vector<std::string> precs{"fp32", "fp16", "int8", "int4"};
  std::vector<std::string> dists{"uniform", "zipf"};
  std::vector<std::string> variants{"fbgemm", "mpe_fwd"};
  std::int64_t B = 2048;
  std::int64_t L = 32;
  int reps = 40;
  std::int64_t pool_batches = 16;
  double zipf_s = 1.05;
  double cache_pct = 5.0;  // mpe_cached
  std::size_t limit_mib = 2048;
  int fb_prefetch = 16;
  bool phases = false;      // mpe_cached: time between mpe's phase marks
  bool swap = false;        // --swap-buffers: fbgemm and mpe_fwd trade tables every other pair of rounds
  bool slot_index = false;  // --slot-index: the cached variants keep EmbeddingConfig::slot_index
  bool slot_array = false;  // --slot-array: ... in a separate array (slot_index_in_rows = false)
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<std::int64_t> split_int(const std::string& s) {
  std::vector<std::int64_t> out;
  for (const auto& x : split(s)) out.push_back(std::stoll(x));
  return out;
}

void usage() {
  std::printf(
      "fbgemm_side_by_side [options]   (run with OMP_NUM_THREADS=1)\n"
      "  --rows N,N,...       table rows (default 1000000,10000000)\n"
      "  --dims D,D,...       embedding dims (default 64)\n"
      "  --precs P,...        fp32,fp16,int8,int4,int2 (default: the first four)\n"
      "  --dists X,...        uniform,zipf (default both)\n"
      "  --variants V,...     fbgemm,mpe_fwd,mpe_fwd_avx2,mpe_inf,mpe_cached,mpe_cached_st,mpe_cached_inf,"
      "mpe_step,mpe_step_defer,mpe_step_defer_st "
      "(default "
      "fbgemm,mpe_fwd)\n"
      "  --cache-pct P        mpe_cached's cache size in %% of the rows (default 5)\n"
      "  --slot-index         the cached variants keep a row -> slot index (EmbeddingConfig::slot_index)\n"
      "  --slot-array         ... in a separate array, not in the store rows (slot_index_in_rows = false)\n"
      "  --batch B            bags per batch (default 2048)\n"
      "  --bag L              indices per bag (default 32)\n"
      "  --reps R             timed rounds (default 40)\n"
      "  --pool-batches K     distinct batches cycled (default 16)\n"
      "  --zipf-s S           Zipf exponent (default 1.05)\n"
      "  --limit-mib M        limit-measurement buffer (default 2048)\n"
      "  --fbgemm-prefetch P  FBGEMM's prefetch distance (default 16)\n"
      "  --thp                transparent huge pages for every big buffer\n"
      "  --phases             mpe_cached: mean time per call of each phase (mpe/detail/host/phase_mark.hpp)\n"
      "  --swap-buffers       fbgemm and mpe_fwd only: two tables of the same bytes, A and B; half the\n"
      "                       rounds FBGEMM reads A and mpe B, the other half the reverse; the ratio is\n"
      "                       the geometric mean of the two halves' medians (cancels the tables' own\n"
      "                       speed: their pages' placement in memory)\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--rows") {
      o.rows = split_int(val());
    } else if (a == "--dims") {
      o.dims = split_int(val());
    } else if (a == "--precs") {
      o.precs = split(val());
    } else if (a == "--dists") {
      o.dists = split(val());
    } else if (a == "--variants") {
      o.variants = split(val());
    } else if (a == "--batch") {
      o.B = std::stoll(val());
    } else if (a == "--bag") {
      o.L = std::stoll(val());
    } else if (a == "--reps") {
      o.reps = std::stoi(val());
    } else if (a == "--pool-batches") {
      o.pool_batches = std::stoll(val());
    } else if (a == "--zipf-s") {
      o.zipf_s = std::stod(val());
    } else if (a == "--cache-pct") {
      o.cache_pct = std::stod(val());
    } else if (a == "--limit-mib") {
      o.limit_mib = static_cast<std::size_t>(std::stoll(val()));
    } else if (a == "--fbgemm-prefetch") {
      o.fb_prefetch = std::stoi(val());
    } else if (a == "--thp") {
      g_thp = true;
    } else if (a == "--slot-index") {
      o.slot_index = true;
    } else if (a == "--slot-array") {
      o.slot_array = true;
    } else if (a == "--phases") {
      o.phases = true;
    } else if (a == "--swap-buffers") {
      o.swap = true;
    } else {
      usage();
      std::exit(a == "--help" || a == "-h" ? 0 : 1);
    }
  }
  if (o.swap) {
    const std::vector<std::string> want{"fbgemm", "mpe_fwd"};
    std::vector<std::string> got = o.variants;
    std::sort(got.begin(), got.end());
    if (got != want || o.reps < 4) {
      std::fprintf(stderr,
                   "--swap-buffers needs --variants fbgemm,mpe_fwd (exactly those two) and --reps >= 4\n");
      std::exit(1);
    }
  }
  return o;
}

// ----------------------------------------------------------------- batches

struct Pool {
  std::string dist;
  std::int64_t per_batch = 0, batches = 0;
  std::vector<std::int64_t> idx;
  const std::int64_t* batch(std::int64_t k) const { return idx.data() + (k % batches) * per_batch; }
};

Pool make_pool(const Options& o, std::int64_t rows, const std::string& dist) {
  Pool p;
  p.dist = dist;
  p.per_batch = o.B * o.L;
  p.batches = o.pool_batches;
  p.idx.resize(static_cast<std::size_t>(p.per_batch * p.batches));
  SplitMix64 rng{0x5EED0000ull + (dist == "zipf" ? 16u : 0u) + static_cast<std::uint64_t>(rows)};
  if (dist == "uniform") {
    for (auto& v : p.idx) v = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(rows));
  } else if (dist == "zipf") {
    std::vector<double> cdf(static_cast<std::size_t>(rows));
    double acc = 0;
    for (std::int64_t k = 0; k < rows; ++k)
      cdf[static_cast<std::size_t>(k)] = acc += std::pow(k + 1.0, -o.zipf_s);
    for (auto& v : p.idx) {
      const double u = rng.uniform01() * acc;
      std::int64_t k = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      if (k >= rows) k = rows - 1;
      v = static_cast<std::int64_t>((static_cast<std::uint64_t>(k) * 2654435761ull) %
                                    static_cast<std::uint64_t>(rows));
    }
  } else {
    std::fprintf(stderr, "unknown dist %s\n", dist.c_str());
    std::exit(1);
  }
  return p;
}

// ------------------------------------------------------------------ FBGEMM

using FbFn = std::function<bool(std::int64_t, std::int64_t, std::int64_t, const std::uint8_t*,
                                const std::int64_t*, const std::int64_t*, float*)>;

template <class S>
FbFn make_fbgemm(std::int64_t D, int pf) {
  if constexpr (std::is_same_v<S, mpe::Int4Rowwise> || std::is_same_v<S, mpe::Int2Rowwise>) {
    const int bit_rate = std::is_same_v<S, mpe::Int4Rowwise> ? 4 : 2;
    auto k = fbgemm::GenerateEmbeddingSpMDMNBit<std::int64_t, std::int64_t, float>(bit_rate, D, false, false,
                                                                                   pf, false, true);
    return [k](std::int64_t os, std::int64_t is, std::int64_t ds, const std::uint8_t* in,
               const std::int64_t* ind, const std::int64_t* off,
               float* out) { return k(os, is, ds, in, ind, off, nullptr, out); };
  } else {
    using In =
        std::conditional_t<std::is_same_v<S, mpe::Fp32>, float,
                           std::conditional_t<std::is_same_v<S, mpe::Fp16>, fbgemm::float16, std::uint8_t>>;
    auto k = fbgemm::GenerateEmbeddingSpMDM<In, std::int64_t, std::int64_t, float>(
        D, /*has_weight=*/false, /*normalize_by_lengths=*/false, pf, /*is_weight_positional=*/false,
        /*use_offsets=*/true);
    return [k](std::int64_t os, std::int64_t is, std::int64_t ds, const std::uint8_t* in,
               const std::int64_t* ind, const std::int64_t* off,
               float* out) { return k(os, is, ds, reinterpret_cast<const In*>(in), ind, off, nullptr, out); };
  }
}

// -------------------------------------------------------------------- cases

struct Variant {
  std::string name;
  std::function<void(const std::int64_t*, float*)> run;
  std::function<void()> after;  // untimed by the ratio: run after `run`, timed into after_t
  std::vector<float> out;
  std::vector<double> after_t;
  std::vector<double> t, cpu;  // wall and thread CPU seconds per call
  std::vector<int> pos;        // its place in each round's call order (0: first)
};

Limits g_lim;

double lines_per_row(std::size_t stride, std::size_t row_bytes) {
  double s = 0;
  for (std::size_t r = 0; r < 64; ++r) {
    const std::size_t a = r * stride, b = a + row_bytes - 1;
    s += static_cast<double>(b / 64 - a / 64 + 1);
  }
  return s / 64.0;
}

template <class S>
using StoreOnly = mpe::CachedEmbedding<S, mpe::Lru<32>, mpe::NearestRounding, PagedHostBackend>;
template <class S>
using SecondTouch = mpe::CachedEmbedding<S, mpe::SecondTouchLru<32>, mpe::NearestRounding, PagedHostBackend>;

template <class Emb>
void print_cache_stats(const char* name, const std::string& dist, const Emb& e, int reps) {
  const mpe::CacheStats st = e.stats();
  const double calls = static_cast<double>(reps);
  std::printf(
      "# %s %s: per call %.0f lookups, %.0f unique rows, %.0f hits, %.0f misses (%.0f conflict, %.0f "
      "refused), "
      "%.0f evictions, %.0f write-backs; hit rate %.3f of unique rows\n",
      name, dist.c_str(), static_cast<double>(st.lookups) / calls,
      static_cast<double>(st.unique_rows) / calls, static_cast<double>(st.hits) / calls,
      static_cast<double>(st.misses) / calls, static_cast<double>(st.conflict_misses) / calls,
      static_cast<double>(st.lfu_rejections) / calls, static_cast<double>(st.evictions) / calls,
      static_cast<double>(st.writebacks) / calls,
      st.unique_rows ? static_cast<double>(st.hits) / static_cast<double>(st.unique_rows) : 0.0);
}

bool g_failed = false;

template <class S>
void run_table(const Options& o, const std::string& prec, std::int64_t rows, std::int64_t D) {
  using E = StoreOnly<S>;
  const auto t0 = clk::now();
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {rows};
  cfg.dim = static_cast<std::int32_t>(D);
  cfg.cache_rows = 0;
  cfg.seed = 1;
  PagedHostBackend be;
  be.huge_pages = g_thp;  // HostBackend's own huge pages (its allocations under 8 MiB) follow --thp too
  be.num_threads = 1;
  E emb(cfg, be);
  emb.init_uniform(-0.05f, 0.05f);
  const std::size_t stride = emb.store_row_bytes();
  const std::size_t rb = S::data_bytes(cfg.dim);
  const auto total = static_cast<std::size_t>(rows) * stride;
  BigBuf fbt(total);
  {
    const std::vector<std::uint8_t> ex = mpe::io::export_table(emb, 0, mpe::interop::FbgemmFused{});
    if (ex.size() != total) {
      std::printf("ERROR: exported %zu bytes, mpe store %zu (stride %zu): layouts differ\n", ex.size(), total,
                  stride);
      std::exit(3);
    }
    std::memcpy(fbt.p, ex.data(), total);
  }
  if (std::memcmp(fbt.p, emb.ref().store, total) != 0) {
    std::printf("ERROR: FBGEMM's bytes differ from mpe's store\n");
    std::exit(3);
  }
  float max_abs = 0;  // M of the agreement bound
  {
    std::vector<float> w(static_cast<std::size_t>(D));
    for (std::int64_t r = 0; r < rows; r += std::max<std::int64_t>(1, rows / 4096)) {
      emb.get_weights(std::span<float>(w), r);
      for (float x : w) max_abs = std::max(max_abs, std::fabs(x));
    }
    max_abs *= 1.01f;  // rows not sampled: the init range (0.05) plus quantization
  }
  // --swap-buffers: table B, the same bytes in a second object (FBGEMM reads either object's
  // store: the layouts are identical, checked above); `swap_half` says which half of the
  // rounds runs: 0 = FBGEMM on A (emb), mpe on B; 1 = FBGEMM on B, mpe on A.
  std::unique_ptr<E> emb_b;
  int swap_half = 0;
  if (o.swap) {
    emb_b = std::make_unique<E>(cfg, be);
    mpe::io::import_table(*emb_b, 0, mpe::interop::FbgemmFused{},
                          std::span<const std::uint8_t>(fbt.p, total));
    if (std::memcmp(fbt.p, emb_b->ref().store, total) != 0) {
      std::printf("ERROR: table B's bytes differ from FBGEMM's\n");
      std::exit(3);
    }
  }
  std::unique_ptr<E> emb_inf;
  const auto has = [&](const char* v) {
    return std::find(o.variants.begin(), o.variants.end(), v) != o.variants.end();
  };
  if (has("mpe_inf")) {
    emb_inf = std::make_unique<E>(cfg, be);
    mpe::io::import_table(*emb_inf, 0, mpe::interop::FbgemmFused{},
                          std::span<const std::uint8_t>(fbt.p, total));
  }
  std::unique_ptr<E> emb_avx2;  // mpe_fwd_avx2: its own copy, so it never finds mpe_fwd's rows cached
  if (has("mpe_fwd_avx2")) {
    emb_avx2 = std::make_unique<E>(cfg, be);
    mpe::io::import_table(*emb_avx2, 0, mpe::interop::FbgemmFused{},
                          std::span<const std::uint8_t>(fbt.p, total));
  }
  // mpe_cached / mpe_cached_st: the same bytes behind an FP32 cache of --cache-pct rows, Lru<32> /
  // SecondTouchLru<32>.
  mpe::EmbeddingConfig cc = cfg;
  cc.cache_rows =
      std::max<std::int64_t>(32, static_cast<std::int64_t>(o.cache_pct / 100.0 * static_cast<double>(rows)));
  cc.slot_index = o.slot_index;
  cc.slot_index_in_rows = !o.slot_array;
  const auto cached_copy = [&]<class Emb>(std::unique_ptr<Emb>& e) {
    e = std::make_unique<Emb>(cc, be);
    mpe::io::import_table(*e, 0, mpe::interop::FbgemmFused{}, std::span<const std::uint8_t>(fbt.p, total));
  };
  std::unique_ptr<E> emb_cached;
  std::unique_ptr<SecondTouch<S>> emb_cached_st;
  if (has("mpe_cached")) {
    cached_copy(emb_cached);
    std::printf(
        "# mpe_cached: Lru<32> cache of %lld rows (%.2f %% of the table)%s, forward() populates every call\n",
        static_cast<long long>(emb_cached->cache_slots()),
        100.0 * static_cast<double>(emb_cached->cache_slots()) / static_cast<double>(rows),
        o.slot_index ? (o.slot_array ? " with a slot index array" : " with a slot index in the store rows")
                     : "");
  }
  if (has("mpe_cached_st")) cached_copy(emb_cached_st);
  std::unique_ptr<E> emb_cached_inf;
  if (has("mpe_cached_inf")) cached_copy(emb_cached_inf);
  std::unique_ptr<E> emb_step, emb_step_defer;
  std::unique_ptr<SecondTouch<S>> emb_step_defer_st;
  if (has("mpe_step")) cached_copy(emb_step);
  cc.defer_admission = true;
  if (has("mpe_step_defer")) cached_copy(emb_step_defer);
  if (has("mpe_step_defer_st")) cached_copy(emb_step_defer_st);
  cc.defer_admission = false;
  // The steps' gradient: zeros, at learning rate 0 (the rows keep FBGEMM's bytes).
  const std::vector<float> zero_grad(static_cast<std::size_t>(o.B * D), 0.0f);
  std::printf("# table %s rows=%lld D=%lld: stride %zu B, row data %zu B, identical bytes, built in %.1f s\n",
              prec.c_str(), static_cast<long long>(rows), static_cast<long long>(D), stride, rb,
              secs(t0, clk::now()));
  std::fflush(stdout);

  const std::int64_t B = o.B, n = o.B * o.L;
  std::vector<std::int64_t> offs(static_cast<std::size_t>(B + 1));
  for (std::int64_t i = 0; i <= B; ++i) offs[static_cast<std::size_t>(i)] = i * o.L;
  const FbFn fbk = make_fbgemm<S>(D, o.fb_prefetch);
  const std::span<const std::int64_t> so(offs);

  for (const std::string& dist : o.dists) {
    const Pool pool = make_pool(o, rows, dist);
    std::vector<Variant> vs;
    for (const std::string& v : o.variants) {
      Variant x;
      x.name = v;
      x.out.assign(static_cast<std::size_t>(B * D), 0.0f);
      if (v == "fbgemm") {
        x.run = [&, rows](const std::int64_t* ind, float* out) {
          const std::uint8_t* tab = !o.swap ? fbt.p : swap_half == 0 ? emb.ref().store : emb_b->ref().store;
          if (!fbk(B, n, rows, tab, ind, offs.data(), out)) {
            std::fprintf(stderr, "FBGEMM kernel returned false\n");
            std::exit(2);
          }
        };
      } else if (v == "mpe_fwd") {
        x.run = [&](const std::int64_t* ind, float* out) {
          E& e = o.swap && swap_half == 0 ? *emb_b : emb;
          e.forward(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)), so,
                    std::span<float>(out, static_cast<std::size_t>(B * D)));
        };
      } else if (v == "mpe_fwd_avx2") {
        x.run = [&](const std::int64_t* ind, float* out) {
          const bool was = mpe::detail::set_host_avx512(false);
          emb_avx2->forward(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)), so,
                            std::span<float>(out, static_cast<std::size_t>(B * D)));
          mpe::detail::set_host_avx512(was);
        };
      } else if (v == "mpe_cached") {
        x.run = [&](const std::int64_t* ind, float* out) {
          sbs::g_phases.on = sbs::g_phases.armed;
          emb_cached->forward(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)), so,
                              std::span<float>(out, static_cast<std::size_t>(B * D)));
          sbs::g_phases.on = false;
        };
      } else if (v == "mpe_cached_st") {
        x.run = [&](const std::int64_t* ind, float* out) {
          sbs::g_phases.on = sbs::g_phases.armed;
          emb_cached_st->forward(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)), so,
                                 std::span<float>(out, static_cast<std::size_t>(B * D)));
          sbs::g_phases.on = false;
        };
      } else if (v == "mpe_cached_inf") {
        x.run = [&](const std::int64_t* ind, float* out) {
          emb_cached_inf->forward_inference(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)),
                                            so, std::span<float>(out, static_cast<std::size_t>(B * D)));
        };
      } else if (v == "mpe_step" || v == "mpe_step_defer" || v == "mpe_step_defer_st") {
        const auto step = [&]<class Emb>(Emb* e) {
          x.run = [&, e](const std::int64_t* ind, float* out) {
            sbs::g_phases.on = sbs::g_phases.armed;
            e->forward(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)), so,
                       std::span<float>(out, static_cast<std::size_t>(B * D)));
            sbs::g_phases.on = false;
          };
          x.after = [&, e] { e->backward(zero_grad, mpe::Sgd{0.0f}); };
        };
        if (v == "mpe_step_defer_st") {
          step(emb_step_defer_st.get());
        } else {
          step(v == "mpe_step" ? emb_step.get() : emb_step_defer.get());
        }
      } else if (v == "mpe_inf") {
        x.run = [&](const std::int64_t* ind, float* out) {
          emb_inf->forward_inference(std::span<const std::int64_t>(ind, static_cast<std::size_t>(n)), so,
                                     std::span<float>(out, static_cast<std::size_t>(B * D)));
        };
      } else {
        std::fprintf(stderr, "unknown variant %s\n", v.c_str());
        std::exit(1);
      }
      vs.push_back(std::move(x));
    }
    const auto nv = static_cast<int>(vs.size());
    if (emb_cached_inf) {  // its cache: one populating forward() per pool batch
      std::vector<float> tmp(static_cast<std::size_t>(B * D));
      for (std::int64_t k = 0; k < pool.batches; ++k)
        emb_cached_inf->forward(std::span<const std::int64_t>(pool.batch(k), static_cast<std::size_t>(n)), so,
                                tmp);
    }
    for (swap_half = 0; swap_half < (o.swap ? 2 : 1); ++swap_half)  // warm-up pass over the pool
      for (std::int64_t k = 0; k < pool.batches; ++k)
        for (auto& v : vs) {
          v.run(pool.batch(k), v.out.data());
          if (v.after) v.after();
        }
    std::vector<int> half_of_round;             // --swap-buffers: swap_half of each timed round
    if (emb_cached) emb_cached->reset_stats();  // the timed calls' cache statistics only
    if (emb_cached_st) emb_cached_st->reset_stats();
    if (emb_step) emb_step->reset_stats();
    if (emb_step_defer) emb_step_defer->reset_stats();
    if (emb_step_defer_st) emb_step_defer_st->reset_stats();
    sbs::g_phases.armed = o.phases;
    // --swap-buffers: two rounds (both call orders) per half, so each half has both orders;
    // flipped every `period` rounds (the pool's length rounded up to a multiple of 4, so each
    // period splits evenly), so with 16 batches neither half always reads one batch. Rounds
    // 0, 1 are half 0 and 2, 3 half 1: --reps >= 4 leaves neither half empty.
    const int period = static_cast<int>((pool.batches + 3) / 4 * 4);
    for (int it = 0; it < o.reps; ++it) {
      const std::int64_t* ind = pool.batch(it);
      swap_half = o.swap ? ((it >> 1) + it / period) & 1 : 0;
      half_of_round.push_back(swap_half);
      for (int k = 0; k < nv; ++k) {
        Variant& v = vs[static_cast<std::size_t>((it + k) % nv)];
        const double c0 = thread_cpu();
        const auto a = clk::now();
        v.run(ind, v.out.data());
        v.t.push_back(secs(a, clk::now()));
        v.cpu.push_back(thread_cpu() - c0);
        v.pos.push_back(k);
        if (v.after) {
          const auto a2 = clk::now();
          v.after();
          v.after_t.push_back(secs(a2, clk::now()));
        }
      }
    }
    sbs::g_phases.armed = false;
    if ((emb_cached || emb_cached_st || emb_step || emb_step_defer || emb_step_defer_st) && o.phases) {
      double total = 0;
      for (const auto& kv : sbs::g_phases.secs) total += kv.second;
      std::printf("# mpe_cached %s phases, ms per call (share):", dist.c_str());
      for (const std::string& k : sbs::g_phases.order) {
        const double t = sbs::g_phases.secs[k];
        std::printf(" %s %.3f (%.1f %%)", k.c_str(), t / o.reps * 1e3, total > 0 ? 100.0 * t / total : 0.0);
      }
      std::printf(" | total %.3f\n", total / o.reps * 1e3);
      sbs::g_phases.secs.clear();
      sbs::g_phases.order.clear();
    }
    if (emb_cached) print_cache_stats("mpe_cached", dist, *emb_cached, o.reps);
    if (emb_cached_st) print_cache_stats("mpe_cached_st", dist, *emb_cached_st, o.reps);
    if (emb_step) print_cache_stats("mpe_step", dist, *emb_step, o.reps);
    if (emb_step_defer) print_cache_stats("mpe_step_defer", dist, *emb_step_defer, o.reps);
    if (emb_step_defer_st) print_cache_stats("mpe_step_defer_st", dist, *emb_step_defer_st, o.reps);
    for (auto& v : vs) {
      if (v.after_t.empty()) continue;
      const double f = median(v.t), bw = median(v.after_t);
      std::printf("# %s %s step: forward %.3f ms + backward %.3f ms = %.3f ms (medians)\n", v.name.c_str(),
                  dist.c_str(), f * 1e3, bw * 1e3, (f + bw) * 1e3);
    }
    for (auto& v : vs) {
      v.run(pool.batch(0), v.out.data());
      if (v.after) v.after();
    }
    const Variant* fb = nullptr;
    for (auto& v : vs)
      if (v.name == "fbgemm") fb = &v;
    const double bound = static_cast<double>(o.L * o.L) * 0x1p-22 * max_abs;
    const double lpr = lines_per_row(stride, rb);
    for (auto& v : vs) {
      const double med = median(v.t);
      const double cpu_med = median(v.cpu);
      double diff = 0, ratio = 0, cpu_ratio = 0, order_ratio = 0;
      if (fb) {
        for (std::size_t i = 0; i < v.out.size(); ++i)
          diff = std::max(diff, static_cast<double>(std::fabs(v.out[i] - fb->out[i])));
        std::vector<double> r[2], rc[2];
        for (std::size_t k = 0; k < v.t.size(); ++k) {
          r[half_of_round[k]].push_back(v.t[k] / fb->t[k]);
          rc[half_of_round[k]].push_back(v.cpu[k] / fb->cpu[k]);
        }
        if (o.swap) {  // each table read by each library in half the rounds: geometric mean
          ratio = std::sqrt(median(r[0]) * median(r[1]));
          cpu_ratio = std::sqrt(median(rc[0]) * median(rc[1]));
          if (&v != fb)
            std::printf("# %s %s %s: cpu ratio with mpe on table B %.3f, on table A %.3f\n", prec.c_str(),
                        dist.c_str(), v.name.c_str(), median(rc[0]), median(rc[1]));
        } else {
          ratio = median(r[0]);
          cpu_ratio = median(rc[0]);
        }
        // Order-balanced: the per-round ratios of the rounds where this variant ran before
        // FBGEMM and of those where it ran after, each half's median, their geometric mean.
        std::vector<double> by_order[2], t_order[2], f_order[2];
        for (std::size_t k = 0; k < v.t.size(); ++k) {
          const int after = v.pos[k] > fb->pos[k] ? 1 : 0;
          by_order[after].push_back(v.t[k] / fb->t[k]);
          t_order[after].push_back(v.t[k]);
          f_order[after].push_back(fb->t[k]);
        }
        if (&v == fb) {
          order_ratio = 1.0;
        } else if (!by_order[0].empty() && !by_order[1].empty()) {
          order_ratio = std::sqrt(median(by_order[0]) * median(by_order[1]));
          std::printf(
              "# %s %s %s by call order: before FBGEMM ratio %.3f (%.3f ms, FBGEMM %.3f ms), after "
              "FBGEMM ratio %.3f (%.3f ms, FBGEMM %.3f ms); order-balanced ratio %.3f\n",
              prec.c_str(), dist.c_str(), v.name.c_str(), median(by_order[0]), median(t_order[0]) * 1e3,
              median(f_order[0]) * 1e3, median(by_order[1]), median(t_order[1]) * 1e3,
              median(f_order[1]) * 1e3, order_ratio);
        }
      }
      const bool agree = !fb || diff <= bound;
      if (!agree) g_failed = true;
      const double idx_per_s = static_cast<double>(n) / med;
      const double gbps = idx_per_s * static_cast<double>(rb) / 1e9;
      std::printf(
          "%-5s %9lld D=%-4lld %-8s %-8s %8.3f ms ratio %6.3f | cpu %8.3f ms ratio %6.3f | %7.2f Midx/s "
          "%6.2f GB/s "
          " seq %.3f  gather %.3f  maxdiff %.2e (bound %.2e)%s\n",
          prec.c_str(), static_cast<long long>(rows), static_cast<long long>(D), dist.c_str(), v.name.c_str(),
          med * 1e3, ratio, cpu_med * 1e3, cpu_ratio, idx_per_s / 1e6, gbps, gbps / g_lim.seq_gbps,
          idx_per_s * lpr / (g_lim.gather_mlines * 1e6), diff, bound, agree ? "" : "  DISAGREE");
      std::printf(
          "CSV,%s,%lld,%lld,%s,%s,%lld,%lld,%.4f,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f,%.4f,%.4f,%.3e,%.3e,%d,%.4f\n",
          prec.c_str(), static_cast<long long>(rows), static_cast<long long>(D), dist.c_str(), v.name.c_str(),
          static_cast<long long>(B), static_cast<long long>(o.L), med * 1e3,
          *std::min_element(v.t.begin(), v.t.end()) * 1e3, ratio, cpu_med * 1e3, cpu_ratio, idx_per_s / 1e6,
          gbps, gbps / g_lim.seq_gbps, idx_per_s * lpr / (g_lim.gather_mlines * 1e6), diff, bound,
          agree ? 1 : 0, order_ratio);
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("# fbgemm_side_by_side: B=%lld L=%lld reps=%d pool=%lld batches, zipf s=%.2f, %s pages\n",
              static_cast<long long>(o.B), static_cast<long long>(o.L), o.reps,
              static_cast<long long>(o.pool_batches), o.zipf_s, g_thp ? "THP" : "4 KiB");
  if (std::ifstream f("/proc/loadavg"); f) {
    std::string l;
    std::getline(f, l);
    std::printf("# loadavg at start: %s\n", l.c_str());
  }
  g_lim = measure_limits(o.limit_mib);
  std::printf("# limits (%zu MiB buffer): sequential read %.2f GB/s, random-line gather %.2f M lines/s\n",
              g_lim.bytes >> 20, g_lim.seq_gbps, g_lim.gather_mlines);
  std::printf(
      "CSV,prec,rows,D,dist,variant,B,L,median_ms,min_ms,ratio_vs_fbgemm,cpu_median_ms,cpu_ratio_vs_fbgemm,"
      "Midx_per_s,useful_GBps,seq_fraction,"
      "gather_fraction,max_abs_diff,bound,agree,order_ratio_vs_fbgemm\n");
  std::printf("CSV,limits,%.3f,%.3f\n", g_lim.seq_gbps, g_lim.gather_mlines);
  std::fflush(stdout);
  for (const std::int64_t rows : o.rows) {
    for (const std::int64_t D : o.dims) {
      for (const std::string& p : o.precs) {
        if (p == "fp32") {
          run_table<mpe::Fp32>(o, p, rows, D);
        } else if (p == "fp16") {
          run_table<mpe::Fp16>(o, p, rows, D);
        } else if (p == "int8") {
          run_table<mpe::Int8Rowwise>(o, p, rows, D);
        } else if (p == "int4") {
          run_table<mpe::Int4Rowwise>(o, p, rows, D);
        } else if (p == "int2") {
          run_table<mpe::Int2Rowwise>(o, p, rows, D);
        } else {
          std::fprintf(stderr, "unknown precision %s\n", p.c_str());
          return 1;
        }
      }
    }
  }
  if (std::ifstream f("/proc/loadavg"); f) {
    std::string l;
    std::getline(f, l);
    std::printf("# loadavg at end: %s\n", l.c_str());
  }
  return g_failed ? 3 : 0;
}
