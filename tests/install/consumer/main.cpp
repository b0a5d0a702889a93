// SPDX-License-Identifier: Apache-2.0
// A tiny user program of the installed package: one CachedEmbedding, a forward and a
// backward, checked against values known exactly.
#include <cstdint>
#include <cstdio>
#include <mpe/mpe.hpp>
#include <vector>

int main() {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {10, 5};  // T = 2
  cfg.dim = 4;
  cfg.cache_rows = 8;
  cfg.seed = 1;
  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding> emb(cfg);
  // constant rows are exact in Int8Rowwise (scale 0, bias = the value)
  emb.set_weights(std::vector<float>(15 * 4, 0.25f), 0);
  const std::vector<std::int64_t> indices = {1, 3, 2}, offsets = {0, 2, 3};  // B = 1: bags {1, 3}, {2}
  std::vector<float> out(8, -1.0f);
  emb.forward(indices, offsets, out);
  for (int d = 0; d < 8; ++d) {
    const float want = d < 4 ? 0.5f : 0.25f;
    if (out[static_cast<std::size_t>(d)] != want) {
      std::printf("consumer: output[%d] = %g, expected %g\n", d,
                  static_cast<double>(out[static_cast<std::size_t>(d)]), static_cast<double>(want));
      return 1;
    }
  }
  emb.backward(std::vector<float>(8, 1.0f), mpe::Sgd{0.125f});
  std::vector<float> row(4);
  emb.get_weights(row, 1);  // 0.25 - 0.125 * 1, exact in the FP32 cache
  if (row[0] != 0.125f) {
    std::printf("consumer: row 1 after the step = %g, expected 0.125\n", static_cast<double>(row[0]));
    return 1;
  }
  std::printf("mpe consumer OK: forward and backward through the installed package\n");
  return 0;
}
