// SPDX-License-Identifier: Apache-2.0
// The order of a row's gradient sum (detail/kernels/gradient_sum.hpp, docs/numerics.md) and the
// laned backward (the GPU's kernels, run on the CPU by AsyncHostBackend's 32 lanes):
//  - hot rows (1, 255, 256, 257, 300, 65,537 and 70,000 occurrences in one batch: one to
//    three stages of groups of 256) give, after one Sgd step of an Fp32 store, exactly the
//    weights of an independent level-by-level sum written here, on the host's one-thread
//    scatter path, its two-thread gather path and the laned stages; sum, mean and
//    per-sample-weighted pooling;
//  - the laned Sgd step (SumStage's sum checks, ApplyScaledLanes, StoreScaledLanes) gives
//    the host's bits for every Storage, D = 1, 3, 64, 130, with and without a cache, with
//    saturating updates, and the same refusal (message) for a row sum that overflows;
//  - Storage::store_lanes over 1, 2, 3, 7 and 32 lanes writes store()'s bytes and flag;
//  - GradientTree and sum_stage_bounds against the level-by-level definition.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <vector>

#include "reference/async_backend.hpp"
#include "reference/embedding_bag.hpp"
#include "reference/policy.hpp"
#include "reference/stats_equal.hpp"

namespace {

constexpr std::int64_t kGroup = 256;  // the documented group size (detail::kSumGroup)

/// The documented order, level by level: values (k, D) -> the row's sum (D).
std::vector<float> tree_sum(std::vector<std::vector<float>> level) {
  while (level.size() > 1) {
    std::vector<std::vector<float>> next;
    for (std::size_t g = 0; g < level.size(); g += kGroup) {
      std::vector<float> acc = level[g];
      for (std::size_t i = g + 1; i < std::min(level.size(), g + kGroup); ++i) {
        for (std::size_t d = 0; d < acc.size(); ++d) acc[d] = acc[d] + level[i][d];
      }
      next.push_back(acc);
    }
    level = std::move(next);
  }
  return level[0];
}

/// One table of 8 rows, B bags; row r occurs counts[r] times, spread over the bags in a
/// shuffled order; weights when `weighted`.
ref::Batch hot_batch(std::mt19937_64& rng, const std::vector<std::int64_t>& counts, std::int64_t B,
                     bool weighted) {
  std::vector<std::int64_t> idx;
  for (std::size_t r = 0; r < counts.size(); ++r)
    idx.insert(idx.end(), static_cast<std::size_t>(counts[r]), static_cast<std::int64_t>(r));
  std::shuffle(idx.begin(), idx.end(), rng);
  ref::Batch b;
  b.B = B;
  b.indices = idx;
  const auto n = static_cast<std::int64_t>(idx.size());
  for (std::int64_t j = 0; j <= B; ++j) b.offsets.push_back(j * n / B);
  if (weighted) b.weights = ref::random_floats(rng, idx.size(), 0.25f, 2.0f);
  return b;
}

/// Weights after one Sgd(lr = 0.5) step of an Fp32 store, no cache, under `backend`.
template <class Backend>
std::vector<float> one_step(Backend backend, const ref::Batch& b, const std::vector<float>& init,
                            const std::vector<float>& grad, int D, mpe::Pooling pooling) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {static_cast<std::int64_t>(init.size()) / D};
  cfg.dim = D;
  cfg.cache_rows = 0;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding, Backend> e(cfg, backend);
  e.set_weights(init);
  std::vector<float> out(static_cast<std::size_t>(b.B) * D);
  e.forward(b.indices, b.offsets, out, pooling, b.weights);
  e.backward(grad, mpe::Sgd{0.5f});
  std::vector<float> w(init.size());
  e.get_weights(w);
  return w;
}

}  // namespace

TEST_CASE("hot rows: the gradient sum is the documented tree of groups of 256 on every path") {
  // Occurrences per row: one stage (1, 255, 256), two (257, 300: groups of 256 then their
  // sum), three (65,537 and 70,000: 257 and 274 groups, then 2 groups of those).
  const std::vector<std::int64_t> counts{1, 255, 256, 257, 300, 65537, 70000, 0};
  constexpr int D = 5;
  constexpr std::int64_t B = 1500;
  std::mt19937_64 rng(31);
  const std::vector<float> init = ref::random_floats(rng, counts.size() * D, -1, 1);
  for (const int mode : {0, 1, 2}) {  // sum, mean, weighted sum
    CAPTURE(mode);
    const ref::Batch b = hot_batch(rng, counts, B, mode == 2);
    const std::vector<float> grad = ref::random_floats(rng, static_cast<std::size_t>(B) * D, -1, 1);
    const auto pooling = mode == 1 ? mpe::Pooling::Mean : mpe::Pooling::Sum;
    // The reference: each row's occurrence values in position order, then tree_sum.
    std::vector<std::vector<std::vector<float>>> values(counts.size());
    for (std::int64_t j = 0; j < B; ++j) {
      const std::int64_t begin = b.offsets[static_cast<std::size_t>(j)];
      const std::int64_t end = b.offsets[static_cast<std::size_t>(j + 1)];
      for (std::int64_t i = begin; i < end; ++i) {
        float c = 1.0f;
        if (mode == 1) c = 1.0f / static_cast<float>(end - begin);
        if (mode == 2) c = b.weights[static_cast<std::size_t>(i)];
        std::vector<float> v(D);
        for (int d = 0; d < D; ++d) {
          const float go = grad[static_cast<std::size_t>(j * D + d)];
          v[static_cast<std::size_t>(d)] = mode == 0 ? go : c * go;
        }
        values[static_cast<std::size_t>(b.indices[static_cast<std::size_t>(i)])].push_back(v);
      }
    }
    std::vector<float> expect = init;
    bool order_matters = false;  // the tree differs from a left-to-right sum somewhere
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (values[r].empty()) continue;
      const std::vector<float> s = tree_sum(values[r]);
      std::vector<float> seq = values[r][0];
      for (std::size_t i = 1; i < values[r].size(); ++i)
        for (int d = 0; d < D; ++d)
          seq[static_cast<std::size_t>(d)] += values[r][i][static_cast<std::size_t>(d)];
      for (int d = 0; d < D; ++d) {
        const auto at = r * D + static_cast<std::size_t>(d);
        // w - 0.5 * s: the product is exact (a power of two), one rounding in the difference.
        expect[at] = init[at] - 0.5f * s[static_cast<std::size_t>(d)];
        order_matters = order_matters || seq[static_cast<std::size_t>(d)] != s[static_cast<std::size_t>(d)];
      }
    }
    CHECK(order_matters);  // so the comparisons below can tell the orders apart
    CHECK(ref::first_diff(expect, one_step(mpe::HostBackend{1}, b, init, grad, D, pooling)) == -1);
    CHECK(ref::first_diff(expect, one_step(mpe::HostBackend{2}, b, init, grad, D, pooling)) == -1);
    CHECK(ref::first_diff(expect, one_step(ref::AsyncHostBackend{}, b, init, grad, D, pooling)) == -1);
  }
}

TEST_CASE("GradientTree and the stage bounds follow the level-by-level definition") {
  std::mt19937_64 rng(5);
  for (const std::int64_t k : {257, 512, 513, 65536, 65537, 66000}) {
    CAPTURE(k);
    std::vector<std::vector<float>> v;
    for (std::int64_t i = 0; i < k; ++i) v.push_back(ref::random_floats(rng, 2, -1, 1));
    mpe::detail::GradientTree tree(2);
    for (std::int64_t g = 0; g < k; g += kGroup) {
      std::vector<float> acc = v[static_cast<std::size_t>(g)];
      for (std::int64_t i = g + 1; i < std::min(k, g + kGroup); ++i)
        for (int d = 0; d < 2; ++d)
          acc[static_cast<std::size_t>(d)] += v[static_cast<std::size_t>(i)][static_cast<std::size_t>(d)];
      tree.push(1, acc.data());
    }
    std::vector<float> got(2);
    tree.finish(got.data());
    CHECK(ref::first_diff(got, tree_sum(v)) == -1);
  }
  CHECK(mpe::detail::kSumGroup == kGroup);
  // A row of k occurrences has ceil(k / 256^l) values at level l.
  CHECK(mpe::detail::sum_values_at(70000, 0) == 70000);
  CHECK(mpe::detail::sum_values_at(70000, 1) == 274);
  CHECK(mpe::detail::sum_values_at(70000, 2) == 2);
  CHECK(mpe::detail::sum_values_at(70000, 3) == 1);
  // Bounds: stage 1 always; stage s only when n > 256^(s-1); each bound covers the worst
  // case (every occurrence on one row: 1 + n / 256^s partials, n / 256^(s-1) groups).
  for (const std::int64_t n : {1, 256, 257, 65536, 65537, 2000000}) {
    CAPTURE(n);
    for (int stage = 1; stage <= 4; ++stage) {
      std::int64_t items = 0, partials = 0;
      mpe::detail::sum_stage_bounds(n, std::min<std::int64_t>(n, 1000), stage, items, partials);
      std::int64_t g = 1;
      for (int s = 1; s < stage; ++s) g *= kGroup;
      if (stage > 1 && n <= g) {
        CHECK(items == 0);
        continue;
      }
      const std::int64_t one_row = mpe::detail::sum_values_at(n, stage);  // n occurrences on one row
      CHECK(items >= one_row);
      CHECK(partials >= (one_row > 1 ? one_row : 0));
    }
  }
}

namespace {

struct SgdRun {
  std::vector<float> weights, outputs;
  mpe::CacheStats stats;
};

/// 12 Sgd steps (lr 0.2; steps 4 and 9 at lr 1e38, which saturates rows), sum, mean and
/// weighted pooling, a prefetch every third step.
template <class P, class Backend>
SgdRun train_sgd(Backend backend, int D, std::int64_t cache_rows) {
  const std::vector<std::int64_t> tables{40, 300, 7};
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = tables;
  cfg.dim = D;
  cfg.cache_rows = cache_rows;
  cfg.seed = 123;
  mpe::CachedEmbedding<typename P::storage, typename P::cache, typename P::rounding, Backend> e(cfg, backend);
  std::mt19937_64 rng(8);
  e.set_weights(ref::random_floats(rng, static_cast<std::size_t>(347) * D, -1, 1));
  SgdRun r;
  constexpr std::int64_t B = 24;
  for (int k = 0; k < 12; ++k) {
    const ref::Batch b = ref::random_batch(rng, tables, B, 9, k % 3 == 2);
    std::vector<float> out(static_cast<std::size_t>(B) * tables.size() * D);
    if (k % 3 == 1) e.prefetch(b.indices, b.offsets);
    e.forward(b.indices, b.offsets, out,
              k % 4 == 1 && b.weights.empty() ? mpe::Pooling::Mean : mpe::Pooling::Sum, b.weights);
    const float lr = (k == 4 || k == 9) ? 1e38f : 0.2f;
    e.backward(ref::random_floats(rng, out.size(), -1, 1), mpe::Sgd{lr});
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
  }
  e.flush();
  r.weights.resize(static_cast<std::size_t>(e.total_rows()) * D);
  e.get_weights(r.weights);
  r.stats = e.stats();
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("laned Sgd (sums checked in the stages, rows applied by lanes) gives the host's bits", P,
                   ref::Policy<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding>,
                   ref::Policy<mpe::Fp16, mpe::Lfu<4>, mpe::NearestRounding>,
                   ref::Policy<mpe::Bf16, mpe::WTinyLfu<4>, mpe::StochasticRounding>,
                   ref::Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   ref::Policy<mpe::Int8Rowwise, mpe::DirectMapped, mpe::NearestRounding>,
                   ref::Policy<mpe::Int4Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   ref::Policy<mpe::Fp8E4M3Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   ref::Policy<mpe::Fp8E5M2Rowwise, mpe::Lfu<4>, mpe::NearestRounding>) {
  for (const int D : {1, 3, 64, 130}) {
    for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{40}}) {
      CAPTURE(D);
      CAPTURE(cache_rows);
      const SgdRun base = train_sgd<P>(mpe::HostBackend{1}, D, cache_rows);
      CHECK(base.stats.saturated_rows > 0);  // the lr = 1e38 steps saturate rows
      for (const SgdRun& other : {train_sgd<P>(mpe::HostBackend{2}, D, cache_rows),
                                  train_sgd<P>(ref::AsyncHostBackend{}, D, cache_rows)}) {
        CHECK(ref::first_diff(base.outputs, other.outputs) == -1);
        CHECK(ref::first_diff(base.weights, other.weights) == -1);
        ref::check_stats_equal(base.stats, other.stats);
      }
    }
  }
}

TEST_CASE("laned Sgd refuses a row sum that overflows as the host does, and changes nothing") {
  const auto attempt = [](auto backend) {
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = {6};
    cfg.dim = 3;
    cfg.cache_rows = 2;
    mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<2>, mpe::StochasticRounding, decltype(backend)> e(
        cfg, backend);
    e.init_uniform(-1.0f, 1.0f);
    std::vector<float> before(18), after(18);
    e.get_weights(before);
    const std::vector<std::int64_t> idx{4, 4, 1};
    const std::vector<std::int64_t> off{0, 1, 2, 3};
    std::vector<float> out(9);
    e.forward(idx, off, out);
    // Row 4's two gradients 3e38 sum to +inf; every grad_output value is finite.
    const std::vector<float> g{3e38f, 0.0f, 0.0f, 3e38f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
    std::string what;
    try {
      e.backward(g, mpe::Sgd{0.1f});
    } catch (const std::exception& ex) {
      what = ex.what();
    }
    e.get_weights(after);
    CHECK(ref::first_diff(before, after) == -1);
    CHECK(e.step() == 0);
    return what;
  };
  const std::string host = attempt(mpe::HostBackend{1});
  CHECK(host.find("row 4") != std::string::npos);
  CHECK(attempt(mpe::HostBackend{2}) == host);
  CHECK(attempt(ref::AsyncHostBackend{}) == host);
}

TEST_CASE_TEMPLATE("store_lanes over any lane count writes store()'s bytes and flag", S, mpe::Fp32, mpe::Fp16,
                   mpe::Bf16, mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise, mpe::Fp8E4M3Rowwise,
                   mpe::Fp8E5M2Rowwise) {
  std::mt19937_64 rng(17);
  for (const int D : {1, 3, 4, 5, 64, 127, 130}) {
    for (int kind = 0; kind < 4; ++kind) {  // random, with NaN/inf/huge, constant, tiny range
      CAPTURE(D);
      CAPTURE(kind);
      std::vector<float> src = ref::random_floats(rng, static_cast<std::size_t>(D), -3, 3);
      if (kind == 1) {
        src[static_cast<std::size_t>(D) - 1] = -3e38f;
        src[static_cast<std::size_t>(D) / 2] = std::numeric_limits<float>::infinity();
        src[0] = std::numeric_limits<float>::quiet_NaN();
      }
      if (kind == 2) std::fill(src.begin(), src.end(), 0.75f);
      if (kind == 3)
        for (float& x : src) x = x * 1e-37f;
      for (const bool stochastic : {false, true}) {
        const mpe::num::RowRng rng_row{99, 1234567, 5, mpe::num::RoundingSite::StoreUpdate};
        const std::size_t bytes = S::data_bytes(D);
        std::vector<std::uint8_t> whole(bytes, 0xab);
        const bool sat =
            stochastic ? S::template store<mpe::StochasticRounding>(src.data(), D, whole.data(), rng_row)
                       : S::template store<mpe::NearestRounding>(src.data(), D, whole.data(), rng_row);
        CHECK(sat == (kind == 1));
        for (const int lanes : {1, 2, 3, 7, 32}) {
          CAPTURE(lanes);
          std::vector<std::uint8_t> parts(bytes, 0xcd);  // a different fill: every byte must be written
          bool any = false;
          for (int lane = lanes - 1; lane >= 0; --lane) {  // any order
            any = (stochastic ? mpe::detail::store_lanes<S, mpe::StochasticRounding>(
                                    src.data(), D, parts.data(), rng_row, lane, lanes)
                              : mpe::detail::store_lanes<S, mpe::NearestRounding>(src.data(), D, parts.data(),
                                                                                  rng_row, lane, lanes)) ||
                  any;
          }
          CHECK(any == sat);
          CHECK(std::memcmp(parts.data(), whole.data(), bytes) == 0);
        }
      }
    }
  }
}
