// SPDX-License-Identifier: Apache-2.0
// Determinism and cache-path exactness of CachedEmbedding:
//  - same seed => same weight bits (two runs; HostBackend 1 vs 2 threads); different
//    seeds => different bits under stochastic rounding;
//  - one cache set and more rows in a batch than ways: outputs exact, cached rows
//    updated exactly in FP32, conflict rows updated in the store within one
//    quantization step;
//  - prefetch then forward gives the same bits as forward alone;
//  - prefetching batch k+1 before backward(k) (the pipelined pattern) keeps Fp32
//    storage equal to the plain FP32 reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <mpe/mpe.hpp>
#include <random>

#include "reference/embedding_bag.hpp"

namespace {

template <class S, class C>
struct Policy {
  using storage = S;
  using cache = C;
};

const std::vector<std::int64_t> kTables{50, 9, 200};
constexpr int kD = 6;
constexpr std::int64_t kB = 16;

struct Run {
  std::vector<float> weights;  // final get_weights
  std::vector<float> outputs;  // every forward's output, concatenated
  mpe::CacheStats stats;
};

/// 30 training steps of Adagrad on random batches from a fixed stream; the embedding's
/// seed is `seed`; `prefetch` calls prefetch(b) right before forward(b).
template <class S, class C, class R>
Run train(std::uint64_t seed, mpe::HostBackend backend, bool prefetch, std::int64_t cache_rows = 24) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = kD;
  cfg.cache_rows = cache_rows;
  cfg.seed = seed;
  mpe::CachedEmbedding<S, C, R> emb(cfg, backend);
  std::mt19937_64 rng(99);  // data stream: the same for every run
  emb.set_weights(ref::random_floats(rng, static_cast<std::size_t>(emb.total_rows()) * kD, -1, 1));
  Run r;
  for (int step = 0; step < 30; ++step) {
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 5, false);
    std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kD);
    if (prefetch) emb.prefetch(b.indices, b.offsets);
    emb.forward(b.indices, b.offsets, out);
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
    emb.backward(ref::random_floats(rng, out.size(), -1, 1), mpe::RowwiseAdagrad{0.3f});
  }
  emb.flush();
  r.weights.resize(static_cast<std::size_t>(emb.total_rows()) * kD);
  emb.get_weights(r.weights);
  r.stats = emb.stats();
  return r;
}

void check_same_run(const Run& a, const Run& b) {
  CHECK(ref::first_diff(a.weights, b.weights) == -1);
  CHECK(ref::first_diff(a.outputs, b.outputs) == -1);
  CHECK(a.stats.hits == b.stats.hits);
  CHECK(a.stats.evictions == b.stats.evictions);
  CHECK(a.stats.conflict_misses == b.stats.conflict_misses);
  CHECK(a.stats.lfu_rejections == b.stats.lfu_rejections);
  CHECK(a.stats.writebacks == b.stats.writebacks);
}

}  // namespace

#define MPE_QUANTIZED_POLICIES                                                                          \
  Policy<mpe::Fp16, mpe::Lru<4>>, Policy<mpe::Fp16, mpe::Lfu<4>>, Policy<mpe::Fp16, mpe::DirectMapped>, \
      Policy<mpe::Int8Rowwise, mpe::Lru<4>>, Policy<mpe::Int8Rowwise, mpe::Lfu<4>>,                     \
      Policy<mpe::Int8Rowwise, mpe::DirectMapped>, Policy<mpe::Int4Rowwise, mpe::Lru<4>>,               \
      Policy<mpe::Int4Rowwise, mpe::Lfu<4>>, Policy<mpe::Int4Rowwise, mpe::DirectMapped>

TEST_CASE_TEMPLATE("same seed: same bits across runs and thread counts; other seed: other bits", P,
                   MPE_QUANTIZED_POLICIES) {
  using S = typename P::storage;
  using C = typename P::cache;
  using SR = mpe::StochasticRounding;
  const Run a = train<S, C, SR>(7, mpe::HostBackend{}, false);
  const Run b = train<S, C, SR>(7, mpe::HostBackend{}, false);
  check_same_run(a, b);
  const Run t1 = train<S, C, SR>(7, mpe::HostBackend{.num_threads = 1}, false);
  const Run t2 = train<S, C, SR>(7, mpe::HostBackend{.num_threads = 2}, false);
  check_same_run(a, t1);
  check_same_run(a, t2);
  // Another seed changes the stochastic rounding of every quantized write: with
  // thousands of rounded elements, identical bits would mean the seed is ignored.
  const Run other = train<S, C, SR>(8, mpe::HostBackend{}, false);
  CHECK(ref::first_diff(a.weights, other.weights) != -1);
  // Nearest rounding draws nothing: the seed must not matter.
  const Run n7 = train<S, C, mpe::NearestRounding>(7, mpe::HostBackend{}, false);
  const Run n8 = train<S, C, mpe::NearestRounding>(8, mpe::HostBackend{}, false);
  check_same_run(n7, n8);
  // prefetch then forward gives the same bits as forward alone
  check_same_run(a, train<S, C, SR>(7, mpe::HostBackend{}, true));
  check_same_run(n7, train<S, C, mpe::NearestRounding>(7, mpe::HostBackend{.num_threads = 2}, true));
}

namespace {

/// Largest distance from a value to the stored value of one write of `expect` (one
/// quantization step of the row: the grid spacing a rounding may move a value by).
template <class S>
float one_step(const float* expect, int D) {
  const float mn = *std::min_element(expect, expect + D), mx = *std::max_element(expect, expect + D);
  if constexpr (std::is_same_v<S, mpe::Fp32>) {
    return 0.0f;
  } else if constexpr (std::is_same_v<S, mpe::Fp16>) {
    // FP16 spacing at |x| is at most 2^-10 |x| (normals), 2^-24 (subnormals)
    return std::max(std::abs(mn), std::abs(mx)) * 0x1p-10f + 0x1p-24f;
  } else if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
    // scale = (max - min) / 255; 1e-6 relative slack for the FP32 rounding of scale*q+bias
    return (mx - mn) / 255.0f * 1.0001f + 1e-6f;
  } else {
    // Int4: bias rounded down and scale rounded up to FP16 widen the range by up to
    // 2^-10 relative each; scale = range / 15
    return (mx - mn + 2 * std::max(std::abs(mn), std::abs(mx)) * 0x1p-10f) / 15.0f * 1.001f + 1e-6f;
  }
}

template <class S, class C, class R>
void one_set_case() {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {30};
  cfg.dim = kD;
  cfg.cache_rows = C::ways;  // exactly one set
  cfg.seed = 5;
  mpe::CachedEmbedding<S, C, R> emb(cfg);
  REQUIRE(emb.num_sets() == 1);
  std::mt19937_64 rng(11);
  emb.set_weights(ref::random_floats(rng, 30 * kD, -2, 2));
  ref::EmbeddingBag bag({30}, kD);
  std::vector<std::uint64_t> conflicts_expected;
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    // 7 distinct rows (> 4 ways) with duplicates, B = 3 bags
    std::vector<std::int64_t> rows(30);
    for (int i = 0; i < 30; ++i) rows[static_cast<std::size_t>(i)] = i;
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(7);
    ref::Batch b;
    b.B = 3;
    b.indices = {rows[0], rows[1], rows[2], rows[0], rows[3], rows[4], rows[5], rows[6], rows[3], rows[1]};
    b.offsets = {0, 4, 4, 10};
    emb.get_weights(bag.weights());  // reference state = what the embedding reads
    std::vector<float> out(3 * kD);
    const auto st0 = emb.stats();
    emb.forward(b.indices, b.offsets, out);
    const auto st1 = emb.stats();
    CHECK(st1.unique_rows - st0.unique_rows == 7);
    // one set of W ways: at most W rows of the batch get a slot, the rest are conflict
    // misses (LFU may also reject a miss whose estimate does not beat the victim's)
    const std::uint64_t uncached =
        (st1.conflict_misses - st0.conflict_misses) + (st1.lfu_rejections - st0.lfu_rejections);
    CHECK(uncached >= static_cast<std::uint64_t>(7 - C::ways));
    CHECK(ref::first_diff(out, bag.forward(b, mpe::Pooling::Sum)) == -1);

    // which rows hold a slot now (they are updated in FP32, exactly)
    const mpe::CacheRef c = emb.cache_ref();
    std::vector<bool> cached(30, false);
    int n_cached = 0;
    for (std::int64_t s = 0; s < c.slots(); ++s) {
      if (c.tags[s] >= 0) {
        cached[static_cast<std::size_t>(c.tags[s])] = true;
        n_cached += std::count(rows.begin(), rows.end(), c.tags[s]) > 0 ? 1 : 0;
      }
    }
    CHECK(static_cast<std::uint64_t>(n_cached) == 7 - uncached);
    const auto g = ref::random_floats(rng, out.size(), -1, 1);
    emb.backward(g, mpe::Sgd{0.25f});
    bag.sgd(b, mpe::Pooling::Sum, g, 0.25f);
    std::vector<float> got(30 * kD);
    emb.get_weights(got);
    for (const std::int64_t r : rows) {
      CAPTURE(r);
      const float* e = &bag.weights()[static_cast<std::size_t>(r * kD)];
      const float* w = &got[static_cast<std::size_t>(r * kD)];
      if (cached[static_cast<std::size_t>(r)]) {
        for (int d = 0; d < kD; ++d) CHECK(w[d] == e[d]);  // FP32 cache row: exact
      } else {
        const float tol = one_step<S>(e, kD);  // one store write (see one_step)
        for (int d = 0; d < kD; ++d) CHECK(std::abs(w[d] - e[d]) <= tol);
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("one set, more rows in a batch than ways: exact outputs and updates", P,
                   Policy<mpe::Fp32, mpe::Lru<4>>, Policy<mpe::Fp32, mpe::Lfu<4>>,
                   Policy<mpe::Fp32, mpe::DirectMapped>, MPE_QUANTIZED_POLICIES) {
  using S = typename P::storage;
  using C = typename P::cache;
  one_set_case<S, C, mpe::StochasticRounding>();
  one_set_case<S, C, mpe::NearestRounding>();
  // prefetch then forward == forward alone, also when every batch overflows its one set
  check_same_run(train<S, C, mpe::StochasticRounding>(3, mpe::HostBackend{}, false, C::ways),
                 train<S, C, mpe::StochasticRounding>(3, mpe::HostBackend{}, true, C::ways));
}

TEST_CASE_TEMPLATE("pipelined prefetch (batch k+1 before backward k) keeps Fp32 equal to the reference", C,
                   mpe::Lru<4>, mpe::Lfu<4>, mpe::DirectMapped) {
  // With Fp32 storage the cache is invisible, so whatever prefetch admits early, every
  // update must land on the row the next forward reads: bit-exact vs the reference.
  for (const std::int64_t cache_rows : {4, 24, 1000}) {
    CAPTURE(cache_rows);
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = kTables;
    cfg.dim = kD;
    cfg.cache_rows = cache_rows;
    mpe::CachedEmbedding<mpe::Fp32, C, mpe::StochasticRounding> emb(cfg);
    ref::EmbeddingBag bag(kTables, kD);
    std::mt19937_64 rng(21);
    bag.weights() = ref::random_floats(rng, bag.weights().size(), -1, 1);
    emb.set_weights(bag.weights());
    std::vector<ref::Batch> batches;
    for (int k = 0; k < 41; ++k) batches.push_back(ref::random_batch(rng, kTables, kB, 5, false));
    std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kD), got(bag.weights().size());
    emb.prefetch(batches[0].indices, batches[0].offsets);
    for (int k = 0; k < 40; ++k) {
      CAPTURE(k);
      const ref::Batch& b = batches[static_cast<std::size_t>(k)];
      emb.forward(b.indices, b.offsets, out);
      REQUIRE(ref::first_diff(out, bag.forward(b, mpe::Pooling::Sum)) == -1);
      const ref::Batch& next = batches[static_cast<std::size_t>(k + 1)];
      emb.prefetch(next.indices, next.offsets);  // before this batch's backward
      const auto g = ref::random_floats(rng, out.size(), -1, 1);
      emb.backward(g, mpe::Sgd{0.1f});
      bag.sgd(b, mpe::Pooling::Sum, g, 0.1f);
      emb.get_weights(got);
      REQUIRE(ref::first_diff(got, bag.weights()) == -1);
    }
  }
}
