// SPDX-License-Identifier: Apache-2.0
// Quantized stores (Fp16, Int8Rowwise, Int4Rowwise, Fp8E4M3Rowwise, Fp8E5M2Rowwise) x
// caches (Lru<4>, Lfu<4>, DirectMapped) x rounding (stochastic, nearest):
//  - forward() equals the plain FP32 embedding bag evaluated on get_weights() taken just
//    before it, bit for bit: both read the same FP32 values (cached FP32 rows, or the
//    store dequantized as scale * q + bias, or scale * fp8 code) and sum them in the same
//    documented order;
//  - forward_inference() gives the same bits as forward() and changes nothing: weight
//    bits, stats, memory (every field, workspace included) and the cache view.
#include <doctest/doctest.h>

#include <cstring>
#include <mpe/mpe.hpp>
#include <random>

#include "reference/embedding_bag.hpp"
#include "reference/policy.hpp"

namespace {

using ref::Policy;

const std::vector<std::int64_t> kTables{23, 4, 70};
constexpr int kD = 9;  // odd: Int4's last byte holds one element
constexpr std::int64_t kB = 12;

bool same_memory(const mpe::MemoryFootprint& a, const mpe::MemoryFootprint& b) {
  return a.store_bytes == b.store_bytes && a.cache_bytes == b.cache_bytes &&
         a.optimizer_bytes == b.optimizer_bytes && a.metadata_bytes == b.metadata_bytes &&
         a.workspace_bytes == b.workspace_bytes;
}

bool same_stats(const mpe::CacheStats& a, const mpe::CacheStats& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;  // all uint64 fields, no padding
}

/// Snapshot of the cache view: tags, scores, dirty bits and FP32 rows.
struct CacheSnapshot {
  std::vector<std::int64_t> tags;
  std::vector<std::uint64_t> last_use;
  std::vector<std::uint8_t> dirty;
  std::vector<float> rows;
  bool operator==(const CacheSnapshot&) const = default;
};
CacheSnapshot snapshot(const mpe::CacheRef& c) {
  const auto n = static_cast<std::size_t>(c.slots());
  CacheSnapshot s{{c.tags, c.tags + n}, {c.last_use, c.last_use + n}, {c.dirty, c.dirty + n}, {}};
  s.rows.assign(c.rows, c.rows + n * static_cast<std::size_t>(c.dim));
  return s;
}

template <class S, class C, class R>
void check_forward_on_get_weights(std::int64_t cache_rows, mpe::Pooling pooling, bool weighted) {
  CAPTURE(cache_rows);
  CAPTURE(weighted);
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = kD;
  cfg.cache_rows = cache_rows;
  cfg.seed = 17;
  mpe::CachedEmbedding<S, C, R> emb(cfg);
  ref::EmbeddingBag bag(kTables, kD);
  std::mt19937_64 rng(4);
  emb.set_weights(ref::random_floats(rng, bag.weights().size(), -3, 3));
  const std::size_t nout = static_cast<std::size_t>(kB) * kTables.size() * kD;
  for (int step = 0; step < 30; ++step) {
    CAPTURE(step);
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 5, weighted);
    emb.get_weights(bag.weights());
    const std::vector<float> expect = bag.forward(b, pooling);

    const auto st = emb.stats();
    const auto mem = emb.memory();
    const CacheSnapshot cache = snapshot(emb.cache_ref());
    std::vector<float> inf(nout, -1.0f), out(nout, -2.0f), after(bag.weights().size());
    emb.forward_inference(b.indices, b.offsets, inf, pooling, b.weights);
    CHECK(ref::first_diff(inf, expect) == -1);
    emb.get_weights(after);
    CHECK(ref::first_diff(after, bag.weights()) == -1);
    CHECK(same_stats(emb.stats(), st));
    CHECK(same_memory(emb.memory(), mem));
    CHECK(snapshot(emb.cache_ref()) == cache);

    emb.forward(b.indices, b.offsets, out, pooling, b.weights);
    REQUIRE(ref::first_diff(out, expect) == -1);
    emb.backward(ref::random_floats(rng, nout, -1, 1), mpe::Sgd{0.2f});
  }
  // after a flush, forward_inference still equals the reference on get_weights
  emb.flush();
  const ref::Batch b = ref::random_batch(rng, kTables, kB, 5, weighted);
  emb.get_weights(bag.weights());
  std::vector<float> inf(nout);
  emb.forward_inference(b.indices, b.offsets, inf, pooling, b.weights);
  CHECK(ref::first_diff(inf, bag.forward(b, pooling)) == -1);
}

}  // namespace

#define MPE_CACHES_AND_ROUNDINGS(S)                                                                  \
  Policy<S, mpe::Lru<4>, mpe::StochasticRounding>, Policy<S, mpe::Lru<4>, mpe::NearestRounding>,     \
      Policy<S, mpe::Lfu<4>, mpe::StochasticRounding>, Policy<S, mpe::Lfu<4>, mpe::NearestRounding>, \
      Policy<S, mpe::DirectMapped, mpe::StochasticRounding>,                                         \
      Policy<S, mpe::DirectMapped, mpe::NearestRounding>

TEST_CASE_TEMPLATE("quantized store: forward == FP32 bag on get_weights(); forward_inference changes nothing",
                   P, MPE_CACHES_AND_ROUNDINGS(mpe::Fp16), MPE_CACHES_AND_ROUNDINGS(mpe::Int8Rowwise),
                   MPE_CACHES_AND_ROUNDINGS(mpe::Int4Rowwise), MPE_CACHES_AND_ROUNDINGS(mpe::Fp8E4M3Rowwise),
                   MPE_CACHES_AND_ROUNDINGS(mpe::Fp8E5M2Rowwise)) {
  using S = typename P::storage;
  using C = typename P::cache;
  using R = typename P::rounding;
  for (const std::int64_t cache_rows : {0, 8, 400}) {
    check_forward_on_get_weights<S, C, R>(cache_rows, mpe::Pooling::Sum, false);
    check_forward_on_get_weights<S, C, R>(cache_rows, mpe::Pooling::Mean, false);
    check_forward_on_get_weights<S, C, R>(cache_rows, mpe::Pooling::Sum, true);
  }
}
