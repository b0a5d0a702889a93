#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "mpe/mpe.hpp"  // build: c++ -I include -isystem $CUDA_HOME/include/cccl -O3 -DNDEBUG -fopenmp -std=gnu++20 fill_floor.cpp
using namespace mpe;
static void* big(std::size_t bytes, bool thp) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(p, bytes, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 1, bytes);
  return p;
}
int main(int argc, char** argv) {
  const bool thp = argc > 1 && std::strcmp(argv[1], "thp") == 0;
  const std::size_t R = 1000000, S = 49984, ways = 32, D = 64, stride = 72, M = 13238, U = 21644;
  auto* store = static_cast<std::uint8_t*>(big(R * stride, thp));
  auto* cache = static_cast<float*>(big(S * D * 4, thp));
  auto* sink = static_cast<float*>(big(1 << 20, thp));
  std::mt19937_64 g(1);
  for (std::size_t r = 0; r < R; ++r) { float sc = 0.01f, b = -0.5f; std::memcpy(store + r*stride + 64, &sc, 4); std::memcpy(store + r*stride+68, &b, 4);}
  const std::size_t sets = S / ways;
  std::vector<std::pair<std::size_t, std::size_t>> job(M);  // (slot, row)
  std::vector<std::size_t> rows_u(U);
  auto draw = [&] {
    for (auto& j : job) { std::size_t s = g() % sets; j = {s * ways + g() % ways, g() % R}; }
    std::sort(job.begin(), job.end());
    for (auto& r : rows_u) r = g() % R;
  };
  const char* names[] = {"fill_prefw", "fill_nt", "gather_only_M", "gather_U_fbgemm_like"};
  for (int rep = 0; rep < 3; ++rep)
  for (int mode = 0; mode < 4; ++mode) {
    std::vector<double> t;
    for (int it = 0; it < 60; ++it) {
      draw();
      const auto t0 = std::chrono::steady_clock::now();
      const std::size_t n = mode == 3 ? U : M;
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t row = mode == 3 ? rows_u[k] : job[k].second;
        if (k + 64 < n) detail::prefetch_lines<false, true>(store + (mode == 3 ? rows_u[k+64] : job[k + 64].second) * stride, stride);
        if (k + 16 < n) {
          detail::prefetch_lines(store + (mode == 3 ? rows_u[k+16] : job[k + 16].second) * stride, stride);
          if (mode == 0) detail::prefetch_lines<true>(cache + job[k + 16].first * D, D * 4);
        }
        float* dst = mode >= 2 ? sink + (k & 1023) * 0 : cache + job[k].first * D;
        if (mode == 1) detail::simd::decode_row<Int8Rowwise, true>(store + row * stride, D, dst);
        else detail::simd::decode_row<Int8Rowwise>(store + row * stride, D, dst);
      }
      if (mode == 1) _mm_sfence();
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("%s %-22s %.3f ms (min %.3f)\n", thp ? "THP" : "4K ", names[mode], t[t.size() / 2], t[0]);
  }
}
