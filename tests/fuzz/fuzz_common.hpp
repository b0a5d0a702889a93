// SPDX-License-Identifier: Apache-2.0
// The embeddings the checkpoint fuzzer loads into, and how its seed corpus is made.
#pragma once

#include <mpe/mpe.hpp>

namespace mpe_fuzz {

/// An LFU cache with an INT4 store (every section non-empty) ...
using Lfu4 = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<2>, mpe::StochasticRounding>;
/// ... an INT8 store without a cache (empty cache sections) ...
using NoCache8 = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<2>, mpe::NearestRounding>;
/// ... and the first with BF16 optimizer state (state_precision "bf16": a BF16 `optimizer`
/// section and a non-empty `optimizer_cache`).
using Lfu4Bf16 = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<2>, mpe::StochasticRounding,
                                      mpe::HostBackend, mpe::StateBf16>;

inline mpe::EmbeddingConfig config(bool cache) {
  mpe::EmbeddingConfig c;
  c.table_rows = {6, 3};
  c.dim = 3;
  c.cache_rows = cache ? 4 : 0;
  c.seed = 5;
  return c;
}

/// One training step on a fixed small batch (B = 2).
template <class E>
void step(E& e, int k) {
  const std::int64_t idx[] = {k % 6, (k + 2) % 6, 1, k % 3, 2};
  const std::int64_t off[] = {0, 2, 3, 4, 5};
  float out[2 * 2 * 3];
  float grad[2 * 2 * 3];
  for (int i = 0; i < 12; ++i) grad[i] = 0.1f * static_cast<float>((i * 7 + k) % 5) - 0.2f;
  e.forward(idx, off, out);
  e.backward(grad, mpe::RowwiseAdagrad{0.3f});
}

}  // namespace mpe_fuzz
