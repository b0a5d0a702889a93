// SPDX-License-Identifier: Apache-2.0
// Compute ceiling of store-only forward_inference (one thread, best of 30 calls, CPU and wall):
// build: g++ -O3 [-march=native] -std=c++20 -fopenmp -ffp-contract=off -DROWS=10000L \
//   -Iinclude -isystem /usr/local/cuda/include/cccl bench/results/pool_micro.cpp -o pool_micro
#include <mpe/mpe.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <ctime>
#include <algorithm>
#include <vector>
static double cpu_now() { timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
template <class S>
void run(long rows, int D) {
  mpe::EmbeddingConfig cfg; cfg.table_rows = {rows}; cfg.dim = D;
  mpe::CachedEmbedding<S, mpe::Lru<32>, mpe::NearestRounding> e(cfg, mpe::HostBackend{1});
  e.init_uniform(-1, 1);
  const long B = 2048, L = 32;
  std::vector<std::int64_t> idx(B * L), off(B + 1);
  std::mt19937_64 rng(1);
  for (auto& i : idx) i = rng() % rows;
  for (long j = 0; j <= B; ++j) off[j] = j * L;
  std::vector<float> out(B * D);
  double best = 1e9, bestw = 1e9;
  for (int k = 0; k < 30; ++k) {
    double c0 = cpu_now(); auto t0 = std::chrono::steady_clock::now();
    e.forward_inference(idx, off, out);
    double c = cpu_now() - c0; double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, c); bestw = std::min(bestw, w);
  }
  std::printf("%s rows=%ld D=%d  best cpu %.1f M idx/s, best wall %.1f M idx/s\n", S::name, rows, D, B * L / best / 1e6, B * L / bestw / 1e6);
}
int main() {
  for (long r : {ROWS}) { run<mpe::Int8Rowwise>(r, 16); run<mpe::Int8Rowwise>(r, 64); run<mpe::Int4Rowwise>(r, 64);}
}
