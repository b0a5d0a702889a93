// SPDX-License-Identifier: Apache-2.0
// Forward pooling gives exactly the bits of a plain FP32 embedding bag written here:
// per bag, per element, acc = 0.0f then acc = acc + x_i (or acc + w_i * x_i) in index
// order, mean multiplies by 1.0f / L, where x_i are the row values get_weights() reports
// (the dequantized store row, or the FP32 cache row). This pins the add order of
// detail::PoolBags whatever its host fast path (vectorized dequantize-and-accumulate,
// software prefetch), for every Storage, odd and even D, with and without a cache,
// forward() and forward_inference(), 1 and 2 threads.
#include <doctest/doctest.h>

#include <cstring>
#include <mpe/mpe.hpp>
#include <random>
#include <vector>

namespace {

struct Case {
  std::vector<std::int64_t> indices, offsets;
  std::vector<float> weights;
};

// T tables of `rows` rows, B bags each, random lengths 0..12 (empty bags and duplicates).
Case make_case(std::int64_t T, std::int64_t B, std::int64_t rows, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Case c;
  c.offsets.push_back(0);
  for (std::int64_t j = 0; j < T * B; ++j) {
    const int L = static_cast<int>(rng() % 13);
    for (int k = 0; k < L; ++k)
      c.indices.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(rows)));
    c.offsets.push_back(static_cast<std::int64_t>(c.indices.size()));
  }
  std::uniform_real_distribution<float> w(-2.0f, 2.0f);
  for (std::size_t i = 0; i < c.indices.size(); ++i) c.weights.push_back(w(rng));
  return c;
}

// The plain reference: W is (T*rows, D) as get_weights returns it.
std::vector<float> reference(const Case& c, const std::vector<float>& W, std::int64_t T, std::int64_t B,
                             std::int64_t rows, std::int64_t D, mpe::Pooling pooling, bool weighted) {
  std::vector<float> out(static_cast<std::size_t>(B * T * D));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t j = t * B + b;
      float* o = out.data() + (b * T + t) * D;
      for (std::int64_t d = 0; d < D; ++d) {
        float acc = 0.0f;
        for (std::int64_t i = c.offsets[j]; i < c.offsets[j + 1]; ++i) {
          const float x = W[static_cast<std::size_t>((t * rows + c.indices[i]) * D + d)];
          if (weighted) {
            const float p = c.weights[i] * x;  // one rounding (-ffp-contract=off)
            acc = acc + p;
          } else {
            acc = acc + x;
          }
        }
        const std::int64_t L = c.offsets[j + 1] - c.offsets[j];
        if (pooling == mpe::Pooling::Mean && L > 0) acc = acc * (1.0f / static_cast<float>(L));
        o[d] = acc;
      }
    }
  }
  return out;
}

template <class S>
void check_storage() {
  const std::int64_t T = 2, B = 37, rows = 300;
  for (const std::int32_t D : {1, 3, 8, 16, 17, 31, 64, 130}) {
    for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{64}}) {
      for (const int threads : {1, 2}) {
        CAPTURE(D);
        CAPTURE(cache_rows);
        CAPTURE(threads);
        mpe::EmbeddingConfig cfg;
        cfg.table_rows = {rows, rows};
        cfg.dim = D;
        cfg.cache_rows = cache_rows;
        cfg.seed = 11;
        mpe::CachedEmbedding<S, mpe::Lru<8>, mpe::StochasticRounding> e(cfg, mpe::HostBackend{threads});
        e.init_uniform(-3.0f, 3.0f);
        const Case c = make_case(T, B, rows, static_cast<std::uint32_t>(D * 7 + cache_rows + threads));
        std::vector<float> out(static_cast<std::size_t>(B * T * D));
        std::vector<float> W(static_cast<std::size_t>(T * rows * D));
        struct Mode {
          mpe::Pooling pooling;
          bool weighted;
        };
        for (const Mode m : {Mode{mpe::Pooling::Sum, false}, Mode{mpe::Pooling::Mean, false},
                             Mode{mpe::Pooling::Sum, true}}) {
          CAPTURE(m.weighted);
          CAPTURE(static_cast<int>(m.pooling));
          const std::span<const float> w =
              m.weighted ? std::span<const float>(c.weights) : std::span<const float>();
          // forward(): populates the cache first (rows then read from FP32 slots).
          e.forward(c.indices, c.offsets, out, m.pooling, w);
          e.get_weights(W);
          std::vector<float> ref = reference(c, W, T, B, rows, D, m.pooling, m.weighted);
          CHECK(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) == 0);
          // a training step so cached rows differ from their store rows
          std::vector<float> g(out.size(), 0.25f);
          e.backward(g, mpe::Sgd{0.5f});
          e.get_weights(W);
          ref = reference(c, W, T, B, rows, D, m.pooling, m.weighted);
          std::fill(out.begin(), out.end(), -1.0f);
          e.forward_inference(c.indices, c.offsets, out, m.pooling, w);
          CHECK(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("forward pooling bits: Fp32") { check_storage<mpe::Fp32>(); }
TEST_CASE("forward pooling bits: Fp16") { check_storage<mpe::Fp16>(); }
TEST_CASE("forward pooling bits: Int8Rowwise") { check_storage<mpe::Int8Rowwise>(); }
TEST_CASE("forward pooling bits: Int4Rowwise") { check_storage<mpe::Int4Rowwise>(); }
TEST_CASE("forward pooling bits: Int2Rowwise") { check_storage<mpe::Int2Rowwise>(); }
