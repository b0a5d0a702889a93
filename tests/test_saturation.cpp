// SPDX-License-Identifier: Apache-2.0
// Training past a format's range: cached FP32 rows saturate exactly like store rows
// (never inf, counted), values read back always round-trip through set_weights, and bad
// optimizer parameters are named with their value.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <mpe/mpe.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// One table of 64 rows, D = 4; a batch of one bag holding rows 0..3; gradients of -big
// push every element of those rows towards +inf.
template <class S>
std::vector<float> push_past_limit(std::int64_t cache_rows, float start, float grad, int steps,
                                   mpe::CacheStats* stats = nullptr) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {64};
  cfg.dim = 4;
  cfg.cache_rows = cache_rows;
  mpe::CachedEmbedding<S, mpe::Lru<4>, mpe::NearestRounding> e(cfg);
  std::vector<float> w(64 * 4, start);
  e.set_weights(w);
  const std::vector<std::int64_t> idx = {0, 1, 2, 3}, off = {0, 4};
  std::vector<float> out(4), g(4, grad);
  for (int s = 0; s < steps; ++s) {
    e.forward(idx, off, out);
    e.backward(g, mpe::Sgd{10.0f});
  }
  e.get_weights(w);
  if (stats) *stats = e.stats();
  // whatever was read back must be accepted again
  e.set_weights(w);
  return w;
}

}  // namespace

TEST_CASE_TEMPLATE("a cached row trained past the format's range saturates like a store row", S, mpe::Fp32,
                   mpe::Fp16, mpe::Int8Rowwise, mpe::Fp8E4M3Rowwise, mpe::Fp8E5M2Rowwise) {
  const float start = S::limit / 2;
  const float grad = -S::limit;  // lr 10: the update alone exceeds the limit
  mpe::CacheStats cached_stats, store_stats;
  const auto cached = push_past_limit<S>(8, start, grad, 3, &cached_stats);
  const auto store_only = push_past_limit<S>(0, start, grad, 3, &store_stats);
  for (std::size_t i = 0; i < 16; ++i) {  // rows 0..3 trained
    CHECK(std::isfinite(cached[i]));
    CHECK(cached[i] <= S::limit);
    CHECK(std::isfinite(store_only[i]));
  }
  CHECK(cached_stats.saturated_rows > 0);
  CHECK(store_stats.saturated_rows > 0);
  if constexpr (std::is_same_v<S, mpe::Fp32>) {
    // Fp32: the cache is invisible, saturation included (both clamp to FLT_MAX).
    for (std::size_t i = 0; i < cached.size(); ++i) CHECK(cached[i] == store_only[i]);
    CHECK(cached[0] == FLT_MAX);
  }
}

TEST_CASE("optimizer parameters that cannot be used are named with their value") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {8};
  cfg.dim = 2;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> e(cfg);
  const std::vector<std::int64_t> idx = {1}, off = {0, 1};
  std::vector<float> out(2), g(2, 1.0f);
  e.forward(idx, off, out);
  auto message = [&](auto opt) {
    try {
      e.backward(g, opt);
    } catch (const std::invalid_argument& ex) {
      return std::string(ex.what());
    }
    return std::string("no exception");
  };
  CHECK(message(mpe::Sgd{NAN}).find("Sgd.learning_rate = nan") != std::string::npos);
  CHECK(message(mpe::RowwiseAdagrad{0.1f, -1.0f}).find("RowwiseAdagrad.eps = -1") != std::string::npos);
  CHECK(message(mpe::RowwiseAdagrad{INFINITY}).find("RowwiseAdagrad.learning_rate = inf") !=
        std::string::npos);
  // nothing was consumed: the pending forward still trains
  std::vector<float> before(16), after(16);
  e.get_weights(before);
  e.backward(g, mpe::Sgd{0.5f});
  e.get_weights(after);
  CHECK(after[2] == before[2] - 0.5f);
}
