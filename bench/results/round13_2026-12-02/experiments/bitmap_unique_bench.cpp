#include <mpe/detail/batch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <vector>
#include <random>
using namespace mpe;
int main(int argc, char** argv) {
  const long R = argc > 1 ? atol(argv[1]) : 1000000; const long n = 65536; const int nb = 16;
  std::vector<double> cdf(R); double acc = 0;
  for (long k = 0; k < R; ++k) cdf[k] = acc += std::pow(k + 1.0, -1.05);
  std::mt19937_64 g(1); std::uniform_real_distribution<double> u(0, acc);
  std::vector<index_t> rows(n * nb);
  for (auto& v : rows) { long k = std::upper_bound(cdf.begin(), cdf.end(), u(g)) - cdf.begin(); if (k >= R) k = R-1; v = (k * 2654435761ull) % R; }
  const long W = (R + 63) / 64;
  std::vector<std::uint64_t> bits(W, 0); std::vector<index_t> wr(W), uniq(n), o2u(n); index_t cnt = 0;
  double best = 1e9, sum = 0; int reps = 400; long chk = 0;
  for (int r = 0; r < reps; ++r) {
    const index_t* in = rows.data() + (r % nb) * n;
    auto t0 = std::chrono::steady_clock::now();
    detail::BitmapUnique{in, n, nullptr, bits.data(), wr.data(), W, &cnt, uniq.data(), o2u.data()}(0);
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count(); best = std::min(best, ms); sum += ms; chk += cnt + o2u[n/2];
  }
  std::printf("U=%ld best %.4f ms mean %.4f ms chk %ld\n", (long)cnt, best, sum / reps, chk);
}
