// SPDX-License-Identifier: Apache-2.0
// Smallest complete use of mpe: an INT8 table with a 5 % LRU cache learns a target
// table through pooled lookups; the loss falls and the cache statistics are printed.
#include <cmath>
#include <cstdio>
#include <mpe/mpe.hpp>
#include <random>
#include <vector>

int main() {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {20000, 5000};  // two tables
  cfg.dim = 16;
  cfg.cache_rows = 1250;  // 5 % of 25,000 rows
  cfg.seed = 42;
  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding> table(cfg);
  table.init_uniform(-0.05f, 0.05f);

  // Target: every row's vector is a fixed random one; the model must learn it from
  // pooled sums alone (squared error on the bag sums).
  const std::int64_t T = 2, B = 256, L = 4, D = cfg.dim;
  std::mt19937_64 rng(7);
  auto target = [](std::int64_t row, std::int64_t d) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(row) + 1.3 * static_cast<double>(d)));
  };
  std::vector<std::int64_t> indices(T * B * L), offsets(T * B + 1);
  std::vector<float> out(B * T * D), grad(out.size());
  for (int step = 0; step <= 300; ++step) {
    for (std::int64_t j = 0; j <= T * B; ++j) offsets[j] = j * L;
    for (std::int64_t t = 0; t < T; ++t) {
      std::geometric_distribution<std::int64_t> skew(t == 0 ? 0.01 : 0.02);  // hot rows first
      for (std::int64_t i = t * B * L; i < (t + 1) * B * L; ++i) {
        indices[i] = skew(rng) % cfg.table_rows[t];
      }
    }
    table.forward(indices, offsets, out);
    double loss = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t d = 0; d < D; ++d) {
          float want = 0;
          for (std::int64_t k = 0; k < L; ++k)
            want += target(table.table_offset(t) + indices[(t * B + b) * L + k], d);
          const float diff = out[(b * T + t) * D + d] - want;
          grad[(b * T + t) * D + d] = diff / static_cast<float>(B);
          loss += 0.5 * diff * diff / B;
        }
      }
    }
    table.backward(grad, mpe::Sgd{0.5f});
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, loss);
  }
  const auto s = table.stats();
  const auto m = table.memory();
  std::printf(
      "hit rate %.3f  (hits %llu, misses %llu, conflict misses %llu, evictions %llu, write-backs %llu)\n",
      static_cast<double>(s.hits) / static_cast<double>(s.hits + s.misses),
      static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
      static_cast<unsigned long long>(s.conflict_misses), static_cast<unsigned long long>(s.evictions),
      static_cast<unsigned long long>(s.writebacks));
  std::printf("embedding memory %zu bytes (store %zu + cache %zu + metadata %zu); FP32 would be %lld bytes\n",
              m.embedding_bytes(), m.store_bytes, m.cache_bytes, m.metadata_bytes,
              static_cast<long long>(table.total_rows() * D * 4));
  return 0;
}
