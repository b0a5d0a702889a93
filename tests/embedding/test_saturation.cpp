// SPDX-License-Identifier: Apache-2.0
// Training past a format's range: cached FP32 rows saturate exactly like store rows
// (never inf, counted), values read back always round-trip through set_weights, and bad
// optimizer parameters are named with their value.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <mpe/mpe.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
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
  // A negative learning rate (gradient ascent) is refused for every optimizer; 0 is allowed
  // (it trains nothing; checked at the end).
  CHECK(message(mpe::Sgd{-0.5f}).find("Sgd.learning_rate = -0.5 is negative; must be >= 0") !=
        std::string::npos);
  CHECK(message(mpe::Adagrad{-0.5f}).find("Adagrad.learning_rate = -0.5 is negative") != std::string::npos);
  CHECK(message(mpe::RowwiseAdagrad{-0.5f}).find("RowwiseAdagrad.learning_rate = -0.5 is negative") !=
        std::string::npos);
  CHECK(message(mpe::Adam{-0.5f}).find("Adam.learning_rate = -0.5 is negative") != std::string::npos);
  CHECK(message(mpe::RowwiseAdagrad{0.1f, -1.0f}).find("RowwiseAdagrad.eps = -1") != std::string::npos);
  CHECK(message(mpe::RowwiseAdagrad{INFINITY}).find("RowwiseAdagrad.learning_rate = inf") !=
        std::string::npos);
  // eps = 0 would turn a zero gradient element into 0/0: refused for every Adagrad/Adam form.
  CHECK(message(mpe::RowwiseAdagrad{0.1f, 0.0f}).find("RowwiseAdagrad.eps = 0 must be finite and > 0") !=
        std::string::npos);
  CHECK(message(mpe::Adagrad{0.1f, 0.0f}).find("Adagrad.eps = 0 must be finite and > 0") !=
        std::string::npos);
  CHECK(message(mpe::Adam{0.1f, 0.9f, 0.999f, 0.0f}).find("Adam.eps = 0 must be finite and > 0") !=
        std::string::npos);
  CHECK(message(mpe::Adam{0.1f, 1.0f}).find("Adam.beta1 = 1 must be in [0, 1)") != std::string::npos);
  // nothing was consumed: the pending forward still trains
  std::vector<float> before(16), after(16);
  e.get_weights(before);
  e.backward(g, mpe::Sgd{0.5f});
  e.get_weights(after);
  CHECK(after[2] == before[2] - 0.5f);
  e.forward(idx, off, out);
  e.backward(g, mpe::Sgd{0.0f});
  e.get_weights(before);
  CHECK(before == after);
}

namespace {

// The case: Fp32 weights 0.5, D = 2; row 1 in two bags, row 4 in a third; every
// output gradient `g`. Returns the error message of backward ("" when it did not throw).
struct OverflowRun {
  std::vector<float> before, after;
  mpe::CacheStats stats;
  std::uint64_t step = 0;
  std::size_t optimizer_bytes = 0;
  std::string error;
};

// `threads`: the host threads (1: the batch is deduplicated by BitmapUnique and its
// backward scatters; 2: sorted, the backward gathers), so the error message's occurrence
// count is checked on both paths.
template <class Opt>
OverflowRun overflow_run(std::int64_t cache_rows, mpe::NonFinite nf, mpe::Validation v, float g,
                         const Opt& opt, int threads = 2) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {8};
  cfg.dim = 2;
  cfg.cache_rows = cache_rows;
  cfg.non_finite = nf;
  cfg.validation = v;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> e(
      cfg, mpe::HostBackend{.num_threads = threads});
  OverflowRun r;
  r.before.assign(16, 0.5f);
  e.set_weights(r.before);
  const std::vector<std::int64_t> idx = {1, 1, 4}, off = {0, 1, 2, 3};
  std::vector<float> out(6), grad(6, g);
  e.forward(idx, off, out);
  try {
    e.backward(grad, opt);
    e.synchronize();  // Validation::Deferred reports here
  } catch (const std::invalid_argument& ex) {
    r.error = ex.what();
  }
  r.after.assign(16, 0.0f);
  e.get_weights(r.after);
  r.stats = e.stats();
  r.step = e.step();
  r.optimizer_bytes = e.memory().optimizer_bytes;
  return r;
}

}  // namespace

TEST_CASE("issue case: a gradient that overflows inside the step never turns a row into zeros") {
  for (std::int64_t cache_rows : {0, 4}) {
    for (mpe::Validation v : {mpe::Validation::Synchronous, mpe::Validation::Deferred}) {
      CAPTURE(cache_rows);
      CAPTURE(static_cast<int>(v));
      // Row 1's gradient is 3e38 + 3e38 = inf (float overflow of finite inputs).
      const OverflowRun t =
          overflow_run(cache_rows, mpe::NonFinite::Throw, v, 3e38f, mpe::RowwiseAdagrad{0.01f});
      CHECK(
          t.error.find("row 1 (its gradient summed over 2 occurrence(s); table 0, local row 1) overflows") !=
          std::string::npos);
      CHECK(t.error.find("is inf although grad_output is finite") != std::string::npos);
      CHECK(t.after == t.before);  // no row changed, row 4 (finite) neither
      CHECK(t.step == 0);
      CHECK(t.stats.saturated_rows == 0);
      CHECK(t.optimizer_bytes == 0);  // the first step never ran: no state yet
      const OverflowRun s =
          overflow_run(cache_rows, mpe::NonFinite::Skip, v, 3e38f, mpe::RowwiseAdagrad{0.01f});
      CHECK(s.error.empty());
      CHECK(s.after == s.before);
      CHECK(s.stats.skipped_steps == 1);
      CHECK(s.step == 0);
      // SGD: the same overflow of the summed gradient is refused the same way.
      const OverflowRun sgd = overflow_run(cache_rows, mpe::NonFinite::Throw, v, 3e38f, mpe::Sgd{0.01f});
      CHECK(sgd.error.find(
                "row 1 (its gradient summed over 2 occurrence(s); table 0, local row 1) overflows") !=
            std::string::npos);
      CHECK(sgd.after == sgd.before);
      // Row-wise Adagrad: a finite gradient whose square overflows makes the state inf.
      const OverflowRun sq =
          overflow_run(cache_rows, mpe::NonFinite::Throw, v, 1e20f, mpe::RowwiseAdagrad{0.01f});
      CHECK(
          sq.error.find("row 1 (its gradient summed over 2 occurrence(s); table 0, local row 1) overflows") !=
          std::string::npos);
      CHECK(sq.after == sq.before);
      // One thread (BitmapUnique, scattered backward): the same message and no change.
      for (float big : {3e38f, 1e20f}) {
        const OverflowRun one =
            overflow_run(cache_rows, mpe::NonFinite::Throw, v, big, mpe::RowwiseAdagrad{0.01f}, 1);
        CHECK(one.error.find(
                  "row 1 (its gradient summed over 2 occurrence(s); table 0, local row 1) overflows") !=
              std::string::npos);
        CHECK(one.after == one.before);
      }
      // A gradient that does not overflow trains as before (row 1: 0.5 - 0.01 * 2 = 0.48).
      const OverflowRun ok = overflow_run(cache_rows, mpe::NonFinite::Throw, v, 1.0f, mpe::Sgd{0.01f});
      CHECK(ok.error.empty());
      CHECK(ok.after[2] == 0.5f - 0.01f * 2.0f);
      CHECK(ok.after[8] == 0.5f - 0.01f);
      CHECK(ok.step == 1);
    }
  }
}

TEST_CASE("a refused overflowing step leaves the forward awaiting backward; a finite gradient then trains") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {8};
  cfg.dim = 2;
  cfg.cache_rows = 4;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> e(cfg);
  std::vector<float> w(16, 0.5f);
  e.set_weights(w);
  const std::vector<std::int64_t> idx = {1, 1, 4}, off = {0, 1, 2, 3};
  std::vector<float> out(6), big(6, 3e38f), one(6, 1.0f);
  e.forward(idx, off, out);
  CHECK_THROWS_AS(e.backward(big, mpe::RowwiseAdagrad{0.01f}), std::invalid_argument);
  e.backward(one, mpe::RowwiseAdagrad{0.01f});
  e.get_weights(w);
  // G = mean(2^2) = 4 for row 1: w = 0.5 - 0.01 / (2 + 1e-8) * 2.
  CHECK(w[2] == 0.5f - 0.01f / (2.0f + 1e-8f) * 2.0f);
  CHECK(e.step() == 1);
}

namespace {

float sgd_factor(int d) { return (d % 2 ? -1.0f : 1.0f) * static_cast<float>(1 + d % 4) / 4.0f; }

// Sgd through forward and backward on `threads` host threads: one thread deduplicates by
// BitmapUnique and scatters grad_output, and when no row sum can overflow (the largest
// |grad_output| and |weight| bound every sum) ApplyRows multiplies the sums by the learning
// rate itself; two threads sort, gather and step every row in AccumulateRows first. 16
// rows, D = 33; bags {1, 1}, {4}, {1, 7}; grad_output element d of every bag is
// g * f(d), f(d) = +-(1 + d % 4) / 4.
struct SgdRun {
  std::vector<float> w;
  std::string error;
  std::uint64_t saturated = 0, step = 0;
};

template <class S>
SgdRun sgd_run(int threads, std::int64_t cache_rows, float g, float lr, const std::vector<float>& weights) {
  constexpr int D = 33;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {16};
  cfg.dim = D;
  cfg.cache_rows = cache_rows;
  mpe::CachedEmbedding<S, mpe::Lru<4>, mpe::StochasticRounding> e(cfg,
                                                                  mpe::HostBackend{.num_threads = threads});
  SgdRun r;
  r.w.resize(16 * D);
  for (std::size_t k = 0; k < r.w.size(); ++k) r.w[k] = 0.25f + 0.01f * static_cast<float>(k % 13);
  e.set_weights(r.w);
  const std::vector<std::int64_t> idx = {1, 1, 4, 1, 7}, off = {0, 2, 3, 5};
  std::vector<float> out(3 * D), grad(3 * D);
  for (std::size_t k = 0; k < grad.size(); ++k) grad[k] = g * sgd_factor(static_cast<int>(k % D));
  e.forward(idx, off, out, mpe::Pooling::Sum, weights);
  try {
    e.backward(grad, mpe::Sgd{lr});
  } catch (const std::invalid_argument& ex) {
    r.error = ex.what();
  }
  e.get_weights(r.w);
  r.saturated = e.stats().saturated_rows;
  r.step = e.step();
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "Sgd on one host thread, the learning rate applied in ApplyRows, gives the two-pass step's bits", S,
    mpe::Fp32, mpe::Int8Rowwise) {
  const std::vector<float> none, unit = {1.5f, 1.0f, -1.5f, 0.5f, 2.0f},
                                 huge = {0x1p60f, 1.0f, -1.0f, 0.5f, 2.0f};
  int trained = 0, refused = 0;  // both outcomes must occur: the grid reaches both paths
  // 2^100 is the bound on max|c| * max|g|: 0x1p100 * 1 (f = 1 at d = 3) fuses, 0x1p101
  // does not and its sums stay finite, 3e38 overflows (a refused step on both paths);
  // lr = 1e30 turns some updates into inf (saturated rows on both paths).
  for (float g : {1.0f, 0x1p99f, 0x1p100f, 0x1p101f, 0x1p126f, 3e38f}) {
    for (float lr : {0.01f, 1e30f}) {
      for (const std::vector<float>* wts : {&none, &unit, &huge}) {
        for (std::int64_t cache_rows : {0, 8}) {
          CAPTURE(g);
          CAPTURE(lr);
          CAPTURE(cache_rows);
          CAPTURE(wts->size());
          const SgdRun one = sgd_run<S>(1, cache_rows, g, lr, *wts);
          const SgdRun two = sgd_run<S>(2, cache_rows, g, lr, *wts);
          CHECK(one.error == two.error);
          REQUIRE(one.w.size() == two.w.size());
          CHECK(std::memcmp(one.w.data(), two.w.data(), one.w.size() * sizeof(float)) == 0);
          CHECK(one.saturated == two.saturated);
          CHECK(one.step == two.step);
          if (one.error.empty()) {
            ++trained;
          } else {
            ++refused;
            CHECK(one.error.find("overflows") != std::string::npos);
          }
          if (std::is_same_v<S, mpe::Fp32> && wts->empty() && one.error.empty()) {
            // Exact: the reference below does the same correctly rounded float operations.
            // Independent: row 1 sums its occurrences in position order, (x + x) + x;
            // row 4 takes x; w - lr * sum, saturated to +-FLT_MAX (Fp32 holds every finite value).
            for (int d = 0; d < 33; ++d) {
              const float x = g * sgd_factor(d), w1 = 0.25f + 0.01f * static_cast<float>((33 + d) % 13),
                          w4 = 0.25f + 0.01f * static_cast<float>((4 * 33 + d) % 13);
              const float s = (x + x) + x;
              CHECK(one.w[33 + d] == std::clamp(w1 - lr * s, -FLT_MAX, FLT_MAX));
              CHECK(one.w[4 * 33 + d] == std::clamp(w4 - lr * x, -FLT_MAX, FLT_MAX));
            }
          }
        }
      }
    }
  }
  CHECK(trained > 0);
  CHECK(refused > 0);
}

TEST_CASE("sums_cannot_overflow: the bound on max|coef| * max|grad_output| and the occurrence count") {
  using mpe::detail::sums_cannot_overflow;
  const auto bits = [](float x) { return mpe::num::float_bits(x); };
  const std::uint32_t at_bound[2] = {bits(0x1p100f), bits(1.0f)},
                      above[2] = {bits(0x1.000002p100f), bits(1.0f)},
                      split[2] = {bits(0x1p40f), bits(0x1p60f)},
                      split_above[2] = {bits(0x1p41f), bits(0x1p60f)}, nan[2] = {0x7fc00000u, bits(1.0f)},
                      inf[2] = {0x7f800000u, bits(1.0f)}, inf_times_zero[2] = {0x7f800000u, 0u},
                      unwritten[2] = {0xffffffffu, 0u};
  CHECK(sums_cannot_overflow(at_bound, 1));
  CHECK(sums_cannot_overflow(at_bound, (std::int64_t{1} << 24) - 1));
  CHECK_FALSE(sums_cannot_overflow(at_bound, std::int64_t{1} << 24));  // (1 + 2^-24)^n no longer below e
  CHECK_FALSE(sums_cannot_overflow(above, 1));
  CHECK(sums_cannot_overflow(split, 1000));
  CHECK_FALSE(sums_cannot_overflow(split_above, 1000));
  CHECK_FALSE(sums_cannot_overflow(nan, 1));
  CHECK_FALSE(sums_cannot_overflow(inf, 1));
  CHECK_FALSE(sums_cannot_overflow(inf_times_zero, 1));  // inf * 0 = NaN
  CHECK_FALSE(sums_cannot_overflow(unwritten, 1));       // the scatter did not run (failed batch)
}
