// Minimal INT8 row-gather loop at 10M rows, 4K pages: prefetch schemes.
#include <mpe/detail/pool_avx512.hpp>
#include <immintrin.h>
#include <sys/mman.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <vector>
#include <random>
using i64 = std::int64_t;
static const int S = 72;
template <int Dist, int Mode>  // Mode 0: none, 1: t1 both lines, 2: t0 first line, 3: t0 both, 4: t1 last only
__attribute__((target("avx512f,avx512bw,avx512vl"),noinline)) void run(const std::uint8_t* st, const i64* idx, i64 n, i64 L, float* out) {
  for (i64 b = 0; b < n / L; ++b) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (i64 i = b * L; i < (b + 1) * L; ++i) {
      if (Mode && i + Dist < n) {
        const std::uint8_t* p = st + idx[i + Dist] * S;
        if (Mode == 1 || Mode == 5) { _mm_prefetch((const char*)p + 71, _MM_HINT_T1); _mm_prefetch((const char*)p, _MM_HINT_T1); }
        if (Mode == 2) { _mm_prefetch((const char*)p, _MM_HINT_T0); }
        if (Mode == 3) { _mm_prefetch((const char*)p + 71, _MM_HINT_T0); _mm_prefetch((const char*)p, _MM_HINT_T0); }
        if (Mode == 4) { _mm_prefetch((const char*)p + 71, _MM_HINT_T1); }
      }
      const std::uint8_t* r = st + idx[i] * S;
      const __m512 sc = _mm512_set1_ps(*(const float*)(r + 64)), bi = _mm512_set1_ps(*(const float*)(r + 68));
      if (Mode == 5) {
      a0 = _mm512_add_ps(a0, _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)r))), bi));
      a1 = _mm512_add_ps(a1, _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r+16)))), bi));
      a2 = _mm512_add_ps(a2, _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r+32)))), bi));
      a3 = _mm512_add_ps(a3, _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r+48)))), bi));
      continue; }
      a0 = _mm512_add_ps(a0, _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)r)))), bi));
      a1 = _mm512_add_ps(a1, _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r + 16))))), bi));
      a2 = _mm512_add_ps(a2, _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r + 32))))), bi));
      a3 = _mm512_add_ps(a3, _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r + 48))))), bi));
    }
    _mm512_storeu_ps(out + b * 64, a0); _mm512_storeu_ps(out + b * 64 + 16, a1); _mm512_storeu_ps(out + b * 64 + 32, a2); _mm512_storeu_ps(out + b * 64 + 48, a3);
  }
}
static std::vector<i64> g_off;
static const std::uint8_t* g_st;
__attribute__((noinline)) void run_mpe(const std::uint8_t* st, const i64* idx, i64 n, i64 L, float* out) {
  if (g_off.empty()) { for (i64 k = 0; k <= n / L; ++k) g_off.push_back(k * L); }
  const auto src = mpe::detail::simd::StoreRows::of(st, 72, 72, idx, n);
  mpe::detail::simd512::pool_bags_run<mpe::Int8Rowwise>(src, g_off.data(), n / L, 64, out, 64);
}
int main(int argc, char** argv) {
  const i64 R = argc > 1 ? atol(argv[1]) : 10000000; const bool zipf = argc > 2 ? atoi(argv[2]) : 1;
  const i64 n = 65536, L = 32; const int nb = 16;
  size_t bytes = R * S + 4096; void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(m, bytes, MADV_NOHUGEPAGE); auto* st = (std::uint8_t*)m; for (size_t i = 0; i < bytes; i += 64) st[i] = (std::uint8_t)i;
  std::vector<i64> idx(n * nb); std::mt19937_64 g(7);
  if (zipf) { std::vector<double> cdf(R); double acc = 0; for (i64 k = 0; k < R; ++k) cdf[k] = acc += std::pow(k + 1.0, -1.05);
    std::uniform_real_distribution<double> u(0, acc);
    for (auto& v : idx) { i64 k = std::upper_bound(cdf.begin(), cdf.end(), u(g)) - cdf.begin(); if (k >= R) k = R - 1; v = (i64)(((std::uint64_t)k * 2654435761ull) % R); }
  } else for (auto& v : idx) v = g() % R;
  std::vector<float> out(n / L * 64);
  void* m2 = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(m2, bytes, MADV_NOHUGEPAGE); auto* st2 = (std::uint8_t*)m2; for (size_t i = 0; i < bytes; i += 64) st2[i] = (std::uint8_t)i;
  const bool pollute = argc > 3 ? atoi(argv[3]) : 0;
  using F = void (*)(const std::uint8_t*, const i64*, i64, i64, float*);
  struct V { const char* name; F f; } vs[] = {{"mpe", run_mpe}, {"fma@64", run<64, 5>}, {"t1x2@64", run<64, 1>}, {"t1x2@32", run<32, 1>}, {"t1x2@16", run<16, 1>}, {"t0x1@16", run<16, 2>}, {"t0x2@16", run<16, 3>}, {"t0x2@32", run<32, 3>}, {"t1last@64", run<64, 4>}};
  const int NV = sizeof(vs) / sizeof(vs[0]);
  std::vector<std::vector<double>> t(NV);
  for (int rep = 0; rep < 40; ++rep) for (int v = 0; v < NV; ++v) {
    const i64* in = idx.data() + ((rep * NV + v) % nb) * n;
    if (pollute) run<64, 1>(st2, idx.data() + ((rep * NV + v + 1) % nb) * n, n, L, out.data());
    auto t0 = std::chrono::steady_clock::now(); vs[v].f(st, in, n, L, out.data()); auto t1 = std::chrono::steady_clock::now();
    t[v].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  for (int v = 0; v < NV; ++v) { std::sort(t[v].begin(), t[v].end()); std::printf("%-10s %.3f ms\n", vs[v].name, t[v][t[v].size() / 2]); }
}
