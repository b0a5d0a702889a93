// SPDX-License-Identifier: Apache-2.0
// EmbeddingRef (CachedEmbedding::ref()) on the host: every element read through the view
// equals get_weights() bit for bit, for cached (FP32) and uncached (dequantized) rows.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <mpe/mpe.hpp>
#include <type_traits>
#include <vector>

namespace {

static_assert(std::is_trivially_copyable_v<mpe::EmbeddingRef<mpe::Int4Rowwise>>);
static_assert(std::is_trivially_copyable_v<mpe::EmbeddingRef<mpe::Fp16>>);

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

template <class Storage>
void check_ref_matches_get_weights(std::int64_t cache_rows) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {13, 9};
  cfg.dim = 5;
  cfg.cache_rows = cache_rows;
  cfg.seed = 7;
  mpe::CachedEmbedding<Storage, mpe::Lru<4>, mpe::StochasticRounding> emb(cfg);
  emb.init_uniform(-1.0f, 1.0f);
  // Two training steps so that cached rows differ from their stored values (dirty FP32).
  const std::vector<std::int64_t> indices = {0, 3, 3, 12, 1, 0, 8, 2};
  const std::vector<std::int64_t> offsets = {0, 2, 4, 6, 8};  // T = 2, B = 2
  std::vector<float> out(2 * 2 * 5), grad(out.size());
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (int step = 0; step < 2; ++step) {
    emb.forward(indices, offsets, out);
    emb.backward(grad, mpe::Sgd{0.5f});
  }
  const std::int64_t rows = emb.total_rows();
  std::vector<float> expect(static_cast<std::size_t>(rows * cfg.dim));
  emb.get_weights(expect);

  const mpe::EmbeddingRef<Storage> ref = emb.ref();
  REQUIRE(ref.num_tables == 2);
  REQUIRE(ref.dim == 5);
  std::int64_t cached = 0;
  std::vector<float> row(static_cast<std::size_t>(cfg.dim));
  for (std::int64_t t = 0; t < 2; ++t) {
    for (std::int64_t local = 0; local < cfg.table_rows[static_cast<std::size_t>(t)]; ++local) {
      const std::int64_t r = emb.table_offset(t) + local;
      CHECK(ref.global_row(t, local) == r);
      if (ref.cache.find(r) >= 0) ++cached;
      ref.read_row(t, local, row.data());
      for (std::int32_t d = 0; d < cfg.dim; ++d) {
        const float e = expect[static_cast<std::size_t>(r * cfg.dim + d)];
        CHECK(bits(row[static_cast<std::size_t>(d)]) == bits(e));
        CHECK(bits(ref.element(t, local, d)) == bits(e));
        CHECK(bits(ref.element(r, d)) == bits(e));
      }
    }
  }
  // Both read paths must have been exercised.
  if (cache_rows > 0) {
    CHECK(cached > 0);
    CHECK(cached < rows);
  } else {
    CHECK(cached == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("EmbeddingRef reads what get_weights reads", Storage, mpe::Fp32, mpe::Fp16,
                   mpe::Int8Rowwise, mpe::Int4Rowwise) {
  SUBCASE("with a cache") { check_ref_matches_get_weights<Storage>(8); }
  SUBCASE("without a cache") { check_ref_matches_get_weights<Storage>(0); }
}
