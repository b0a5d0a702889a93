// SPDX-License-Identifier: Apache-2.0
// Training with a quantized store follows the FP32 run on a small learnable task.
//
// Task: T = 2 tables (40, 30 rows), D = 8, B = 32 bags of 1..3 rows (empty bags too);
// targets y = sum-pooled rows of a hidden table W* ~ U[-1, 1]; loss
// L = (0.5 / B) * sum (out - y)^2, grad_output = (out - y) / B, SGD lr 1. The FP32 run
// is the plain reference bag (tests/reference/embedding_bag.hpp); the mixed-precision
// run is CachedEmbedding with a 16-row cache, so most rows train in the store.
//
// Bound. A store write moves each element by at most one quantization step q (nearest:
// |err| <= q/2, variance q^2/12; stochastic: unbiased, variance <= q^2/4). An output
// sums <= 3 rows, so its extra error has variance <= 3 q^2 / 4 and adds, in expectation,
// F = 0.5 * T * D * 3 q^2 / 4 = 6 q^2 to L. The residual norms then differ by at most
// the norm of that error (triangle inequality): |sqrt(L_q) - sqrt(L_32)| <= sqrt(F).
// q for rows in [-1, 1] (range 2): Int8 2/255, Int4 2/15, Int2 2/3, Fp16 2^-10 (relative spacing
// at |x| <= 1), FP8 rows the step of the top binade of the scaled row (x / scale <= FP8_MAX
// with scale = max|x| / FP8_MAX, max|x| <= 1): E4M3 32/448 = 1/14, E5M2 8192/57344 = 1/7
// (smaller elements have smaller steps, so this bounds every element). We allow 2F:
// learned rows may overshoot the range of W*, and one batch of 32 is a small sample of the
// expectation.
#include <doctest/doctest.h>

#include <cmath>
#include <mpe/mpe.hpp>
#include <random>

#include "reference/embedding_bag.hpp"
#include "reference/policy.hpp"

namespace {

const std::vector<std::int64_t> kTables{40, 30};
constexpr int kD = 8;
constexpr std::int64_t kB = 32;
constexpr int kSteps = 200;

double loss_and_grad(const std::vector<float>& out, const std::vector<float>& y, std::vector<float>& g) {
  double L = 0;
  g.resize(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float e = out[i] - y[i];
    L += 0.5 * double(e) * double(e) / kB;
    g[i] = e / static_cast<float>(kB);
  }
  return L;
}

struct Fp32Reference {};

/// Losses of kSteps steps of CachedEmbedding type Emb, or of the plain FP32 reference
/// bag for Emb = Fp32Reference.
template <class Emb>
std::vector<double> train(std::uint64_t seed) {
  std::mt19937_64 rng(1);  // the task and the batches: the same for every run
  ref::EmbeddingBag truth(kTables, kD);
  truth.weights() = ref::random_floats(rng, truth.weights().size(), -1, 1);
  const auto init = ref::random_floats(rng, truth.weights().size(), -0.1f, 0.1f);
  ref::EmbeddingBag fp32(kTables, kD);
  fp32.weights() = init;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = kD;
  cfg.cache_rows = 16;
  cfg.seed = seed;
  auto emb = [&] {
    if constexpr (std::is_same_v<Emb, Fp32Reference>) {
      return 0;
    } else {
      Emb e(cfg);
      e.set_weights(init);
      return e;
    }
  }();
  std::vector<double> losses;
  std::vector<float> g;
  for (int s = 0; s < kSteps; ++s) {
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 3, false);
    const std::vector<float> y = truth.forward(b, mpe::Pooling::Sum);
    if constexpr (std::is_same_v<Emb, Fp32Reference>) {
      losses.push_back(loss_and_grad(fp32.forward(b, mpe::Pooling::Sum), y, g));
      fp32.sgd(b, mpe::Pooling::Sum, g, 1.0f);
    } else {
      std::vector<float> out(y.size());
      emb.forward(b.indices, b.offsets, out);
      losses.push_back(loss_and_grad(out, y, g));
      emb.backward(g, mpe::Sgd{1.0f});
    }
  }
  return losses;
}

}  // namespace

template <class S>
double quant_step() {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) return 2.0 / 255;
  if constexpr (std::is_same_v<S, mpe::Int4Rowwise>) return 2.0 / 15;
  if constexpr (std::is_same_v<S, mpe::Int2Rowwise>) return 2.0 / 3;
  if constexpr (std::is_same_v<S, mpe::Fp8E4M3Rowwise>) return 1.0 / 14;
  if constexpr (std::is_same_v<S, mpe::Fp8E5M2Rowwise>) return 1.0 / 7;
  return std::ldexp(1.0, -10);  // Fp16
}

using ref::Policy;

TEST_CASE_TEMPLATE("quantized training loss follows the FP32 run within the quantization bound", P,
                   Policy<mpe::Fp16, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp16, mpe::Lru<4>, mpe::NearestRounding>,
                   Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding>,
                   Policy<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>,
                   Policy<mpe::Int8Rowwise, mpe::DirectMapped, mpe::StochasticRounding>,
                   Policy<mpe::Int4Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Int4Rowwise, mpe::Lru<4>, mpe::NearestRounding>,
                   Policy<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Int2Rowwise, mpe::Lru<4>, mpe::NearestRounding>,
                   Policy<mpe::Fp8E4M3Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp8E4M3Rowwise, mpe::Lru<4>, mpe::NearestRounding>,
                   Policy<mpe::Fp8E5M2Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp8E5M2Rowwise, mpe::Lru<4>, mpe::NearestRounding>) {
  using E = mpe::CachedEmbedding<typename P::storage, typename P::cache, typename P::rounding>;
  static const std::vector<double> l32 = train<Fp32Reference>(0);
  // the FP32 run learns the task (else following it proves nothing)
  REQUIRE(l32.back() < 1e-3 * l32.front());
  const double q = quant_step<typename P::storage>();
  const double F = 6 * q * q;           // expected extra loss of one quantization (file comment)
  const double tol = std::sqrt(2 * F);  // x2 allowance (file comment)
  for (const std::uint64_t seed : {1u, 2u}) {
    const std::vector<double> lq = train<E>(seed);
    for (int s = 0; s < kSteps; ++s) {
      CAPTURE(s);
      CHECK(std::abs(std::sqrt(lq[static_cast<std::size_t>(s)]) -
                     std::sqrt(l32[static_cast<std::size_t>(s)])) <= tol);
    }
    // and it learns: the last loss is within the floor 2F of zero plus 1 % of the start
    CHECK(lq.back() <= 2 * F + 0.01 * lq.front());
  }
}
