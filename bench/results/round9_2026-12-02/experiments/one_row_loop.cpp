#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <map>
#include <string>
#include <span>
#include <ctime>
void phase_mark(const char* name);
#define MPE_PHASE_MARK(name) phase_mark(name)
#include "fbgemm/FbgemmEmbedding.h"
#include "mpe/mpe.hpp"
static double now_ms() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
std::map<std::string, double> g_ph; double g_last; bool g_on = false;
void phase_mark(const char* name) { double n = now_ms(); if (g_on) g_ph[name] += n - g_last; g_last = n; }
int main(int argc, char** argv) {
  const long rows = 3000000, D = 64, n = 53248;
  std::mt19937_64 g(1);
  const int S = 40;
  std::vector<std::vector<int64_t>> idx(S, std::vector<int64_t>(n));
  for (auto& v : idx) for (auto& x : v) x = g() % rows;
  std::vector<int64_t> off(n + 1);
  for (long i = 0; i <= n; ++i) off[i] = i;
  std::vector<float> o1(n * D), o3(n * D);
  auto fb = fbgemm::GenerateEmbeddingSpMDM<float, int64_t, int64_t, float>(D, false, false, 16, false, true);
  mpe::EmbeddingConfig cfg; cfg.table_rows = {rows}; cfg.dim = D; cfg.cache_rows = 0; cfg.seed = 1;
  mpe::HostBackend be; be.num_threads = 1; be.huge_pages = getenv("HP") != nullptr;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<32>, mpe::NearestRounding, mpe::HostBackend> emb(cfg, be);
  emb.init_uniform(-0.05f, 0.05f);
  const uint8_t* st = emb.ref().store;
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  double te = 0, tf = 0, tpb = 0, tx[6] = {0};
  int k = 0;
  for (int r = 0; r < reps; ++r) {
    for (int o = 0; o < 6; ++o) {
      int which = (o + r) % 6;
      const auto& ix = idx[k++ % S];
      double a = now_ms();
      if (which == 0) { g_on = r >= 2; g_last = a; emb.forward(std::span<const int64_t>(ix), std::span<const int64_t>(off), std::span<float>(o3)); }
      else if (which == 1) fb(n, n, rows, (const float*)st, ix.data(), off.data(), nullptr, o1.data());
      else if (which == 2) { mpe::CacheRef cr; cr.dim = D;
        mpe::detail::PoolBags<mpe::Fp32> pb{off.data(), ix.data(), nullptr, nullptr, cr, false, st, (size_t)D * 4, n, 1, (int)D, false, o3.data(), nullptr};
        pb.host_range(0, n); }
      else if (which == 3) { const auto src = mpe::detail::simd::StoreRows::of(st, D * 4, D * 4, ix.data(), n);
        for (long j = 0; j < n; ++j) mpe::detail::simd512::pool_bag<mpe::Fp32, false>(src, j, j + 1, nullptr, D, o3.data() + j * D); }
      else if (which == 4) { const float* t = (const float*)st; for (long j = 0; j < n; ++j) {
        if (j + 16 < n) __builtin_prefetch(t + ix[j + 16] * D, 0, 3);
        const float* p = t + ix[j] * D; float* q = o3.data() + j * D;
        for (int k = 0; k < 4; ++k) _mm512_storeu_ps(q + 16 * k, _mm512_loadu_ps(p + 16 * k)); } }
      else { const float* t = (const float*)st; for (long j = 0; j < n; ++j) {
        if (j + 32 < n) { const float* pp = t + ix[j + 32] * D; for (int k = 0; k < 4; ++k) __builtin_prefetch(pp + 16 * k, 0, 2); }
        const float* p = t + ix[j] * D; float* q = o3.data() + j * D;
        for (int k = 0; k < 4; ++k) _mm512_storeu_ps(q + 16 * k, _mm512_loadu_ps(p + 16 * k)); } }
      double b = now_ms();
      if (r >= 2) tx[which] += b - a;
    }
  }
  for (auto& [k2, v] : g_ph) printf("  %s %.3f ms\n", k2.c_str(), v / (reps - 2));
  const char* nm[6] = {"forward", "fbgemm", "PoolBags", "pool_bag loop", "plain t0x1@16", "plain t1x4@32"};
  for (int w = 0; w < 6; ++w) printf("%s %.3f  ", nm[w], tx[w] / (reps - 2));
  printf("ms\n"); (void)te; (void)tf; (void)tpb;
}
