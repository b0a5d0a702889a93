// SPDX-License-Identifier: Apache-2.0
// Paired before/after driver: loads two builds of pair_lib.cpp (A, B) into one process,
// builds one object from each on the same tables and batches, and times them call by call
// (thread CPU time, the order inside each pair of calls alternating), printing the median
// per-call ratio B / A. The object created second ran a few percent slower in A/A runs on
// the 2-vCPU guest, so run.sh runs both creation orders and reports sqrt(r1 / r2).
//   pair <libA.so> <libB.so> <mode> [rounds]
// modes: step_fp32 / step_int8: the 26-table training step of issue #17 (batches from
// /tmp/batches.bin, written by dump_step_batches.py; FP32 store, or INT8 + 5 % Lru<32>;
// forward + backward, SGD); fwd_int8: forward with populate, INT8 + 5 % Lru<32>, 1M rows,
// B = 2048, L = 32, Zipf 1.05 with scattered hot ranks (16 batches); fwd_store_<format> (fp32,
// fp16, int8, int4): the same forward without a cache; fwd_store_<format>_uniform: uniform rows.
// PAIR_ROWS=<n> in the environment: tables of n rows instead of 1M (fwd modes); PAIR_4K=1 (any
// value but empty or 0): the store and cache on 4 KiB pages (HostBackend::huge_pages off), as
// fbgemm_side_by_side keeps them.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>
using Make = void* (*)(int, const std::int64_t*, int, double, int, std::int64_t);
using Run = void (*)(void*, const std::int64_t*, std::int64_t, const std::int64_t*, std::int64_t);
using Stats = void (*)(void*, double*);
struct Lib {
  Make make;
  Run run;
  Stats stats;
};
Lib load(const char* p) {
  void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "%s\n", dlerror());
    std::exit(1);
  }
  return {(Make)dlsym(h, "pair_make"), (Run)dlsym(h, "pair_run"), (Stats)dlsym(h, "pair_stats")};
}
struct Batch {
  std::vector<std::int64_t> idx, off;
};
double tcpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
int main(int argc, char** argv) {
  Lib L[2] = {load(argv[1]), load(argv[2])};
  std::string mode = argv[3];
  int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  if (mode != "step_fp32" && mode != "step_int8" && mode != "fwd_int8" && mode.rfind("fwd_store_", 0) != 0) {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::vector<std::int64_t> rows;
  std::vector<Batch> bs;
  int kind = 0;
  double frac = 0;
  int train = 1;
  std::int64_t B = 2048;
  if (mode.rfind("step", 0) == 0) {
    std::ifstream f("/tmp/batches.bin", std::ios::binary);
    std::int64_t h[2];
    f.read((char*)h, 16);
    rows.resize(h[0]);
    f.read((char*)rows.data(), 8 * h[0]);
    bs.resize(h[1]);
    for (auto& b : bs) {
      std::int64_t s[2];
      f.read((char*)s, 16);
      b.idx.resize(s[0]);
      b.off.resize(s[1]);
      f.read((char*)b.idx.data(), 8 * s[0]);
      f.read((char*)b.off.data(), 8 * s[1]);
    }
    kind = mode == "step_fp32" ? 0 : 1;
    frac = kind ? 0.05 : 0.0;
  } else {
    // fwd_int8: 1M rows, B=2048 L=32, Zipf 1.05 with scattered hot ranks, INT8 + 5% LRU, forward only.
    // fwd_store_<fp32|fp16|int8|int4>[_uniform]: the same batches (or uniform ones), store only.
    const char* env_rows = std::getenv("PAIR_ROWS");  // table rows (default 1M)
    std::int64_t R = 1000000;
    if (env_rows) {
      char* end = nullptr;
      R = std::strtoll(env_rows, &end, 10);
      if (end == env_rows || *end != '\0' || R < 1) {
        std::fprintf(stderr, "PAIR_ROWS must be a positive integer, got '%s'\n", env_rows);
        return 2;
      }
    }
    rows = {R};
    kind = 1;
    frac = 0.05;
    train = 0;
    bool uniform = false;
    if (mode.rfind("fwd_store_", 0) == 0) {
      const std::string f = mode.substr(10, 4);
      kind = f == "fp32" ? 0 : f == "fp16" ? 3 : f == "int8" ? 1 : f == "int4" ? 4 : -1;
      if (kind < 0) {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
      }
      frac = 0;
      const std::string rest = mode.substr(std::min<std::size_t>(mode.size(), 14));
      if (!rest.empty() && rest != "_uniform") {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
      }
      uniform = !rest.empty();
    }
    const std::int64_t L = 32;
    std::vector<double> cdf(R);
    double s = 0;
    for (std::int64_t i = 0; i < R; ++i) {
      s += 1.0 / std::pow(i + 1.0, 1.05);
      cdf[i] = s;
    }
    std::vector<std::int64_t> perm(R);
    for (std::int64_t i = 0; i < R; ++i) perm[i] = i;
    std::mt19937_64 g(7);
    std::shuffle(perm.begin(), perm.end(), g);
    std::uniform_real_distribution<double> u(0, s);
    bs.resize(16);
    for (auto& b : bs) {
      b.idx.resize(B * L);
      b.off.resize(B + 1);
      for (std::int64_t i = 0; i <= B; ++i) b.off[i] = i * L;
      for (auto& x : b.idx) {
        x = uniform ? static_cast<std::int64_t>(g() % R)
                    : perm[std::lower_bound(cdf.begin(), cdf.end(), u(g)) - cdf.begin()];
      }
    }
  }
  void* o[2];
  for (int k = 0; k < 2; ++k) o[k] = L[k].make(kind, rows.data(), (int)rows.size(), frac, train, B);
  for (auto& b : bs)
    for (int k = 0; k < 2; ++k)
      L[k].run(o[k], b.idx.data(), b.idx.size(), b.off.data(), b.off.size());  // warm-up
  std::vector<double> t[2], r;
  for (int rd = 0; rd < rounds; ++rd)
    for (std::size_t i = 0; i < bs.size(); ++i) {
      double c[2];
      for (int j = 0; j < 2; ++j) {
        const int k = (i + rd + j) % 2;
        const double a = tcpu();
        L[k].run(o[k], bs[i].idx.data(), bs[i].idx.size(), bs[i].off.data(), bs[i].off.size());
        c[k] = tcpu() - a;
        t[k].push_back(c[k]);
      }
      r.push_back(c[1] / c[0]);
    }
  double st[2][4];
  for (int k = 0; k < 2; ++k) L[k].stats(o[k], st[k]);
  std::printf(
      "%s: A %.3f ms  B %.3f ms  B/A median per-call ratio %.3f  (%zu calls; B unique/hits/misses/wb %.0f "
      "%.0f %.0f %.0f total)\n",
      mode.c_str(), med(t[0]), med(t[1]), med(r), r.size(), st[1][0], st[1][1], st[1][2], st[1][3]);
}
