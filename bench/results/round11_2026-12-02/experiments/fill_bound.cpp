// SPDX-License-Identifier: Apache-2.0
// The cache fills of one cached forward alone (eleventh round of issue #17, not a library
// benchmark): 13,244 random INT8 store rows (72 B, a 1M-row table on 4 KiB pages) decoded to
// FP32 and written, streamed (vmovntps) or not, into 49,984-slot cache rows in set order,
// each row's two lines prefetched into L2 `dist` rows ahead: the memory work of the
// admission of one Zipf batch (INT8 + 5 % LRU), with nothing else between the fills.
// 64 distinct batches, so the rows are not in the L3 cache from an earlier repetition.
// Build: g++ -O2 -mavx512f -mavx512bw -std=c++20 fill_bound.cpp -o fill_bound
// Run:   ./fill_bound <dist> <stream 0|1>   (fill_bound_output.txt)
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
int main(int argc, char** argv) {
  const size_t rows = 1000000, stride = 72, slots = 49984, D = 64;
  const int n = 13244, dist = argc > 1 ? atoi(argv[1]) : 32;
  const bool stream = argc > 2 ? atoi(argv[2]) : 1;
  uint8_t* store =
      (uint8_t*)mmap(nullptr, rows * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(store, rows * stride, MADV_NOHUGEPAGE);
  float* cache = (float*)aligned_alloc(64, slots * D * 4);
  std::mt19937_64 g(1);
  for (size_t i = 0; i < rows * stride; ++i) store[i] = g();
  for (size_t r = 0; r < rows; ++r) {
    float s = 0.01f, b = -1.0f;
    memcpy(store + r * stride + 64, &s, 4);
    memcpy(store + r * stride + 68, &b, 4);
  }
  memset(cache, 0, slots * D * 4);
  std::vector<std::vector<int64_t>> R(64), S(64);
  for (int k = 0; k < 64; ++k) {
    for (int i = 0; i < n; ++i) {
      R[k].push_back(g() % rows);
      S[k].push_back(g() % slots);
    }
    std::sort(S[k].begin(), S[k].end());  // admission goes set by set
  }
  double best = 1e9, sum = 0;
  int cnt = 0;
  for (int rep = 0; rep < 72; ++rep) {
    const auto& r = R[rep % 64];
    const auto& s = S[rep % 64];
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      if (i + dist < n) {
        const uint8_t* p = store + r[i + dist] * stride;
        __builtin_prefetch(p, 0, 2);
        __builtin_prefetch(p + 71, 0, 2);
      }
      const uint8_t* p = store + r[i] * stride;
      float sc, bi;
      memcpy(&sc, p + 64, 4);
      memcpy(&bi, p + 68, 4);
      const __m512 vs = _mm512_set1_ps(sc), vb = _mm512_set1_ps(bi);
      float* dst = cache + s[i] * D;
      for (int c = 0; c < 64; c += 16) {
        __m512 x = _mm512_add_ps(
            _mm512_mul_ps(vs,
                          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p + c))))),
            vb);
        if (stream)
          _mm512_stream_ps(dst + c, x);
        else
          _mm512_store_ps(dst + c, x);
      }
    }
    _mm_sfence();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rep >= 8) {
      best = std::min(best, ms);
      sum += ms;
      ++cnt;
    }
  }
  printf("dist %d stream %d: mean %.3f ms best %.3f ms per %d fills (%.1f ns/fill)\n", dist, stream,
         sum / cnt, best, n, sum / cnt / n * 1e6);
}
