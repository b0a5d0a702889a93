// SPDX-License-Identifier: Apache-2.0
// CachedEmbedding<Fp32, ...> against the plain FP32 embedding bag of
// tests/reference/embedding_bag.hpp. With Fp32 storage the cache must be invisible: a
// fill copies the row exactly, the cached update w - m*g is the same FP32 operation as
// the store update, and a write-back copies exactly. Because mpe fixes the summation
// orders (DESIGN.md: pooling in index order, a row's gradient over its occurrences in
// position order, Adagrad's mean of squares in one pairwise order) and the reference
// uses the same orders, we demand bit-exact equality: no tolerance.
#include <doctest/doctest.h>
#include <omp.h>

#include <mpe/mpe.hpp>
#include <random>
#include <string>

#include "reference/embedding_bag.hpp"

namespace {

template <class C, class R>
struct Policy {
  using cache = C;
  using rounding = R;
};

enum class Mode { Sum, Mean, Weighted };
enum class Opt { Sgd, Adagrad, ElementAdagrad, Adam };

const std::vector<std::int64_t> kTables{37, 5, 120};  // T = 3 tables of different sizes
constexpr int kDim = 7;                               // odd: not a multiple of Philox's 4-element groups
constexpr std::int64_t kB = 16;

template <class C, class R>
void run_against_reference(std::int64_t cache_rows, Mode mode, Opt opt, std::uint64_t seed,
                           mpe::HostBackend backend = {}) {
  CAPTURE(backend.num_threads);
  CAPTURE(cache_rows);
  CAPTURE(static_cast<int>(mode));
  CAPTURE(static_cast<int>(opt));
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = kDim;
  cfg.cache_rows = cache_rows;
  cfg.seed = seed;
  mpe::CachedEmbedding<mpe::Fp32, C, R> emb(cfg, backend);
  ref::EmbeddingBag bag(kTables, kDim);

  std::mt19937_64 rng(seed);
  bag.weights() = ref::random_floats(rng, bag.weights().size(), -1.0f, 1.0f);
  emb.set_weights(bag.weights());
  const mpe::Pooling pooling = mode == Mode::Mean ? mpe::Pooling::Mean : mpe::Pooling::Sum;
  const float lr = opt == Opt::Sgd ? 0.05f : 0.1f;
  const float eps = 1e-6f;
  std::uint64_t lookups = 0;

  std::vector<float> got(bag.weights().size());
  for (int step = 0; step < 50; ++step) {
    CAPTURE(step);
    // Bags up to 6 long give ~150 occurrences per batch: more than the small caches hold.
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 6, mode == Mode::Weighted);
    lookups += b.indices.size();
    std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kDim, -7.0f);
    emb.forward(b.indices, b.offsets, out, pooling, b.weights);
    const std::vector<float> expect = bag.forward(b, pooling);
    REQUIRE(ref::first_diff(out, expect) == -1);

    const std::vector<float> grad = ref::random_floats(rng, out.size(), -1.0f, 1.0f);
    if (opt == Opt::Sgd) {
      emb.backward(grad, mpe::Sgd{lr});
      bag.sgd(b, pooling, grad, lr);
    } else if (opt == Opt::Adagrad) {
      emb.backward(grad, mpe::RowwiseAdagrad{lr, eps});
      bag.adagrad(b, pooling, grad, lr, eps);
    } else if (opt == Opt::ElementAdagrad) {
      emb.backward(grad, mpe::Adagrad{lr, eps});
      bag.adagrad_elementwise(b, pooling, grad, lr, eps);
    } else {
      emb.backward(grad, mpe::Adam{0.01f, 0.9f, 0.999f, eps});
      bag.adam(b, pooling, grad, 0.01f, 0.9f, 0.999f, eps);
    }
    emb.get_weights(got);
    REQUIRE(ref::first_diff(got, bag.weights()) == -1);
  }
  CHECK(emb.step() == 50);
  const mpe::CacheStats st = emb.stats();
  CHECK(st.lookups == lookups);
  CHECK(st.hits + st.misses == st.unique_rows);
  CHECK(st.saturated_rows == 0);
  if (cache_rows == 0) {
    CHECK(st.unique_rows == 0);  // no cache: populate does no set work
  } else {
    CHECK(st.unique_rows > 0);
    CHECK(st.hits > 0);  // skewed indices repeat across batches
  }
  // cache sets = floor(min(cache_rows, total rows rounded up to Ways) / Ways)
  const std::int64_t W = C::ways, total = 37 + 5 + 120;
  CHECK(emb.num_sets() == std::min(cache_rows, (total + W - 1) / W * W) / W);
  if (cache_rows >= 1000) {
    // Clamped, but still set-associative: a hash spreads 162 rows unevenly over the sets,
    // so conflict misses remain possible; every row is at least looked up.
    CHECK(emb.cache_slots() == (total + W - 1) / W * W);
  }
  // flush writes dirty rows back exactly (Fp32) and changes no value
  emb.flush();
  emb.get_weights(got);
  CHECK(ref::first_diff(got, bag.weights()) == -1);
}

}  // namespace

TEST_CASE_TEMPLATE("Fp32 storage with any cache equals the plain FP32 embedding bag bit for bit", P,
                   Policy<mpe::Lru<4>, mpe::StochasticRounding>, Policy<mpe::Lru<4>, mpe::NearestRounding>,
                   Policy<mpe::Lfu<4>, mpe::StochasticRounding>, Policy<mpe::Lfu<4>, mpe::NearestRounding>,
                   Policy<mpe::DirectMapped, mpe::StochasticRounding>,
                   Policy<mpe::DirectMapped, mpe::NearestRounding>) {
  using C = typename P::cache;
  using R = typename P::rounding;
  // 0: no cache; 4: one set of Lru<4>/Lfu<4> (4 sets direct-mapped); 12: smaller than a
  // batch's unique rows; 1000: larger than the table (clamped to 162 rounded up to Ways).
  // One thread and two: the host sums a row's gradients by two different passes then
  // (backward on one thread reads grad_output in memory order and scatters; with more
  // threads each row gathers its occurrences): both must give the reference's bits.
  for (const int threads : {1, 2}) {
    for (const std::int64_t cache_rows : {0, 4, 12, 1000}) {
      for (const Mode mode : {Mode::Sum, Mode::Mean, Mode::Weighted}) {
        for (const Opt opt : {Opt::Sgd, Opt::Adagrad, Opt::ElementAdagrad, Opt::Adam}) {
          run_against_reference<C, R>(cache_rows, mode, opt, 1234 + static_cast<std::uint64_t>(cache_rows),
                                      mpe::HostBackend{.num_threads = threads});
        }
      }
    }
  }
}

TEST_CASE("Fp32 + Lru<4>: row-wise Adagrad allocates one FP32 per table row on its first backward") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = kDim;
  cfg.cache_rows = 12;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> emb(cfg);
  CHECK(emb.memory().optimizer_bytes == 0);
  std::mt19937_64 rng(5);
  const ref::Batch b = ref::random_batch(rng, kTables, kB, 3, false);
  std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kDim);
  emb.forward(b.indices, b.offsets, out);
  CHECK(emb.memory().optimizer_bytes == 0);  // allocated by backward, not forward
  emb.backward(out, mpe::RowwiseAdagrad{0.1f});
  CHECK(emb.memory().optimizer_bytes == static_cast<std::size_t>(37 + 5 + 120) * sizeof(float));
}

TEST_CASE("Fp32: mean pooling of an empty bag gives zeros, duplicates each contribute") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {4, 3};
  cfg.dim = 3;
  cfg.cache_rows = 2;
  mpe::CachedEmbedding<mpe::Fp32, mpe::DirectMapped, mpe::NearestRounding> emb(cfg);
  // rows 0..6 (global): row r = (r + 1, 2r, -r)
  std::vector<float> w;
  for (int r = 0; r < 7; ++r) w.insert(w.end(), {float(r + 1), float(2 * r), float(-r)});
  emb.set_weights(w);
  // B = 2: table 0 bags {1, 1, 3} and {}; table 1 bags {} and {2}
  const std::vector<std::int64_t> idx{1, 1, 3, 2};
  const std::vector<std::int64_t> off{0, 3, 3, 3, 4};
  std::vector<float> out(2 * 2 * 3, 99.0f);
  emb.forward(idx, off, out, mpe::Pooling::Mean);
  // sample 0: table 0 mean of rows 1,1,3 = ((2+2+4), (2+2+6), (-1-1-3)) * (1/3); table 1 empty
  const float third = 1.0f / 3.0f;
  const std::vector<float> expect{
      8.0f * third, 10.0f * third, -5.0f * third, 0, 0, 0, 0, 0, 0,  // sample 1, table 0: empty
      7.0f,         12.0f,         -6.0f};                           // row 4 + 2 = global 6
  CHECK(ref::first_diff(out, expect) == -1);
  // gradient of ones: each occurrence of row 1 contributes 1/3 (two occurrences)
  const std::vector<float> g(out.size(), 1.0f);
  emb.backward(g, mpe::Sgd{1.0f});
  std::vector<float> row1(3);
  emb.get_weights(row1, 1);
  CHECK(row1[0] == 2.0f - (third + third));
  std::vector<float> row6(3);
  emb.get_weights(row6, 6);
  CHECK(row6[0] == 6.0f);  // 7 - 1 * 1 (a bag of one: coefficient 1/1)
}

TEST_CASE(
    "OpenMP's thread count changing between prefetch, forward and backward keeps the reference's bits") {
  // HostBackend{} (num_threads 0) follows OpenMP's default at each call. A batch whose
  // unique rows came from the one-thread bitmap (no sorted positions) must take the
  // one-thread gradient scatter even when backward runs on two threads; a batch the
  // forward left for a two-thread gather must be sorted (not bitmapped) by a backward on
  // one thread. Each pattern: threads for prefetch, forward, backward (0: no prefetch).
  struct Restore {
    int n = omp_get_max_threads();
    ~Restore() { omp_set_num_threads(n); }
  } restore;
  const int patterns[][3] = {{1, 2, 2}, {1, 1, 2}, {0, 1, 2}, {0, 2, 1}, {2, 1, 1}, {1, 2, 1}};
  for (const auto& pat : patterns) {
    for (const std::int64_t cache_rows : {0, 12}) {
      CAPTURE(pat[0]);
      CAPTURE(pat[1]);
      CAPTURE(pat[2]);
      CAPTURE(cache_rows);
      mpe::EmbeddingConfig cfg;
      cfg.table_rows = kTables;
      cfg.dim = kDim;
      cfg.cache_rows = cache_rows;
      cfg.seed = 99;
      mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding> emb(cfg, mpe::HostBackend{});
      ref::EmbeddingBag bag(kTables, kDim);
      std::mt19937_64 rng(5);
      bag.weights() = ref::random_floats(rng, bag.weights().size(), -1.0f, 1.0f);
      emb.set_weights(bag.weights());
      std::vector<float> got(bag.weights().size());
      for (int step = 0; step < 12; ++step) {
        CAPTURE(step);
        const ref::Batch b = ref::random_batch(rng, kTables, kB, 6, false);
        if (pat[0] > 0) {
          omp_set_num_threads(pat[0]);
          emb.prefetch(b.indices, b.offsets);
        }
        omp_set_num_threads(pat[1]);
        std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kDim);
        emb.forward(b.indices, b.offsets, out);
        REQUIRE(ref::first_diff(out, bag.forward(b, mpe::Pooling::Sum)) == -1);
        const std::vector<float> grad = ref::random_floats(rng, out.size(), -1.0f, 1.0f);
        omp_set_num_threads(pat[2]);
        emb.backward(grad, mpe::Sgd{0.05f});
        bag.sgd(b, mpe::Pooling::Sum, grad, 0.05f);
        emb.get_weights(got);
        REQUIRE(ref::first_diff(got, bag.weights()) == -1);
      }
    }
  }
}
