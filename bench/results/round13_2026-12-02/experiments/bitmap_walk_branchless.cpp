#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <bit>
#include <algorithm>
#include <vector>
#include <random>
using index_t = std::int64_t;
int main(int argc, char** argv) {
  const long R = argc > 1 ? atol(argv[1]) : 1000000; const long n = 65536; const int nb = 16;
  std::vector<double> cdf(R); double acc = 0;
  for (long k = 0; k < R; ++k) cdf[k] = acc += std::pow(k + 1.0, -1.05);
  std::mt19937_64 g(1); std::uniform_real_distribution<double> u(0, acc);
  std::vector<index_t> rows(n * nb);
  for (auto& v : rows) { long k = std::upper_bound(cdf.begin(), cdf.end(), u(g)) - cdf.begin(); if (k >= R) k = R-1; v = (k * 2654435761ull) % R; }
  const long W = (R + 63) / 64;
  std::vector<std::uint64_t> bits(W, 0); std::vector<index_t> wr(W), uniq(n+8), o2u(n);
  double t[4] = {0,0,0,0}; int reps = 400; long chk = 0;
  for (int r = 0; r < reps; ++r) {
    const index_t* in = rows.data() + (r % nb) * n;
    std::uint64_t* bm = bits.data(); index_t* un = uniq.data(); index_t* w_r = wr.data(); index_t* o = o2u.data();
    auto t0 = std::chrono::steady_clock::now();
    for (index_t i = 0; i < n; ++i) { auto x = (std::uint64_t)in[i]; bm[x >> 6] |= std::uint64_t{1} << (x & 63); }
    auto t1 = std::chrono::steady_clock::now();
    index_t U = 0;
    for (index_t w = 0; w < W; ++w) { w_r[w] = U; std::uint64_t x = bm[w]; const index_t base = w * 64; index_t* out = un + U; U += std::popcount(x);
      out[0] = base + std::countr_zero(x); x &= x - 1; out[1] = base + std::countr_zero(x); x &= x - 1; out[2] = base + std::countr_zero(x); x &= x - 1; out[3] = base + std::countr_zero(x); x &= x - 1;
      for (index_t k = 4; x != 0; x &= x - 1) out[k++] = base + std::countr_zero(x); }
    auto t2 = std::chrono::steady_clock::now();
    for (index_t i = 0; i < n; ++i) { auto x = (std::uint64_t)in[i]; o[i] = w_r[x >> 6] + std::popcount(bm[x >> 6] & ((std::uint64_t{1} << (x & 63)) - 1)); }
    auto t3 = std::chrono::steady_clock::now();
    for (index_t k = 0; k < U; ++k) bm[un[k] >> 6] = 0;
    auto t4 = std::chrono::steady_clock::now();
    t[0] += std::chrono::duration<double, std::milli>(t1 - t0).count();
    t[1] += std::chrono::duration<double, std::milli>(t2 - t1).count();
    t[2] += std::chrono::duration<double, std::milli>(t3 - t2).count();
    t[3] += std::chrono::duration<double, std::milli>(t4 - t3).count();
    chk += U + o[n/2];
  }
  std::printf("set %.4f walk %.4f rank %.4f clear %.4f ms chk %ld\n", t[0]/reps, t[1]/reps, t[2]/reps, t[3]/reps, chk);
}
