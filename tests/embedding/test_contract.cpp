// SPDX-License-Identifier: Apache-2.0
// Public contract v1: this translation unit includes only <mpe/mpe.hpp> and uses every
// name of DESIGN.md's contract block exactly as written there (types, fields, defaults,
// enumerators, member functions and their argument order). It fails to compile if a
// name is renamed or a signature changes; the values checked are the documented ones.
#include <mpe/mpe.hpp>
// (doctest is the test harness, not part of the contract)
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace {

// ---- EmbeddingConfig: fields, types, defaults ----
static_assert(std::is_same_v<decltype(mpe::EmbeddingConfig::table_rows), std::vector<std::int64_t>>);
static_assert(std::is_same_v<decltype(mpe::EmbeddingConfig::dim), std::int32_t>);
static_assert(std::is_same_v<decltype(mpe::EmbeddingConfig::cache_rows), std::int64_t>);
static_assert(std::is_same_v<decltype(mpe::EmbeddingConfig::seed), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::EmbeddingConfig::row_alignment), std::int32_t>);

// ---- optimizers ----
static_assert(std::is_same_v<decltype(mpe::Sgd::learning_rate), float>);
static_assert(std::is_same_v<decltype(mpe::RowwiseAdagrad::learning_rate), float>);
static_assert(std::is_same_v<decltype(mpe::RowwiseAdagrad::eps), float>);

// ---- CacheStats and MemoryFootprint fields ----
static_assert(std::is_same_v<decltype(mpe::CacheStats::lookups), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::unique_rows), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::hits), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::misses), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::conflict_misses), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::evictions), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::writebacks), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::lfu_rejections), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::saturated_rows), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::bytes_filled), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::CacheStats::bytes_written_back), std::uint64_t>);
static_assert(std::is_same_v<decltype(mpe::MemoryFootprint::store_bytes), std::size_t>);
static_assert(std::is_same_v<decltype(mpe::MemoryFootprint::cache_bytes), std::size_t>);
static_assert(std::is_same_v<decltype(mpe::MemoryFootprint::optimizer_bytes), std::size_t>);
static_assert(std::is_same_v<decltype(mpe::MemoryFootprint::metadata_bytes), std::size_t>);
static_assert(std::is_same_v<decltype(mpe::MemoryFootprint::workspace_bytes), std::size_t>);
static_assert(std::is_same_v<decltype(std::declval<const mpe::MemoryFootprint&>().total()), std::size_t>);

// ---- checkpoint_error is a std::runtime_error ----
static_assert(std::is_base_of_v<std::runtime_error, mpe::checkpoint_error>);

// ---- the class template with its default Backend, and every member's signature ----
using Default = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
static_assert(std::is_same_v<Default, mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>,
                                                           mpe::StochasticRounding, mpe::HostBackend>>);
static_assert(std::is_constructible_v<Default, const mpe::EmbeddingConfig&>);
static_assert(std::is_constructible_v<Default, const mpe::EmbeddingConfig&, mpe::HostBackend>);
static_assert(!std::is_convertible_v<const mpe::EmbeddingConfig&, Default>);  // explicit

template <class E>
concept ContractV1 = requires(E& e, const E& ce, std::span<const float> w, std::span<float> out,
                              std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                              const std::filesystem::path& path) {
  { e.set_weights(w, std::int64_t{0}) } -> std::same_as<void>;
  { e.set_weights(w) } -> std::same_as<void>;
  { ce.get_weights(out, std::int64_t{0}) } -> std::same_as<void>;
  { ce.get_weights(out) } -> std::same_as<void>;
  { e.prefetch(idx, off) } -> std::same_as<void>;
  { e.forward(idx, off, out, mpe::Pooling::Sum, w) } -> std::same_as<void>;
  { e.forward(idx, off, out) } -> std::same_as<void>;
  { ce.forward_inference(idx, off, out, mpe::Pooling::Mean, w) } -> std::same_as<void>;
  { ce.forward_inference(idx, off, out) } -> std::same_as<void>;
  { e.backward(w, mpe::Sgd{0.1f}) } -> std::same_as<void>;
  { e.backward(w, mpe::RowwiseAdagrad{0.1f}) } -> std::same_as<void>;
  { e.flush() } -> std::same_as<void>;
  { ce.save(path) } -> std::same_as<void>;
  { e.load(path) } -> std::same_as<void>;
  { ce.stats() } -> std::same_as<mpe::CacheStats>;
  { e.reset_stats() } -> std::same_as<void>;
  { ce.memory() } -> std::same_as<mpe::MemoryFootprint>;
};
static_assert(ContractV1<Default>);
static_assert(ContractV1<mpe::CachedEmbedding<mpe::Fp32, mpe::Lfu<4>, mpe::NearestRounding>>);
static_assert(ContractV1<mpe::CachedEmbedding<mpe::Fp16, mpe::DirectMapped, mpe::StochasticRounding>>);
static_assert(ContractV1<mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lru<>, mpe::NearestRounding>>);
static_assert(ContractV1<mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<>, mpe::StochasticRounding>>);

}  // namespace

TEST_CASE("contract v1: every name, used as DESIGN.md writes it") {
  mpe::EmbeddingConfig cfg;
  CHECK(cfg.table_rows.empty());
  CHECK(cfg.dim == 0);
  CHECK(cfg.cache_rows == 0);
  CHECK(cfg.seed == 0);
  CHECK(cfg.row_alignment == 4);
  cfg.table_rows = {3, 2};
  cfg.dim = 2;
  cfg.cache_rows = 4;
  cfg.seed = 1;
  cfg.row_alignment = 4;

  const mpe::RowwiseAdagrad adagrad{0.5f};
  CHECK(adagrad.eps == 1e-8f);
  const mpe::Sgd sgd{0.5f};
  CHECK(sgd.learning_rate == 0.5f);

  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding, mpe::HostBackend> emb(
      cfg, mpe::HostBackend{});
  const std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // (5 rows, D = 2), global rows
  emb.set_weights(w, 0);
  std::vector<float> row(2);
  emb.get_weights(row, 3);  // table 1's first row
  CHECK(row == std::vector<float>{7, 8});

  // B = 1, T = 2: table 0 bag {0, 2}, table 1 bag {1}; output (B, T*D)
  const std::vector<std::int64_t> indices{0, 2, 1};
  const std::vector<std::int64_t> offsets{0, 2, 3};
  std::vector<float> out(4);
  emb.prefetch(indices, offsets);
  emb.forward(indices, offsets, out, mpe::Pooling::Sum, {});
  CHECK(out == std::vector<float>{1 + 5, 2 + 6, 9, 10});
  std::vector<float> inf(4);
  emb.forward_inference(indices, offsets, inf, mpe::Pooling::Mean, {});
  CHECK(inf == std::vector<float>{(1 + 5) * 0.5f, (2 + 6) * 0.5f, 9, 10});
  emb.backward(std::vector<float>{1, 1, 1, 1}, sgd);
  emb.get_weights(row, 4);
  CHECK(row == std::vector<float>{9 - 0.5f, 10 - 0.5f});
  emb.flush();

  const mpe::CacheStats s = emb.stats();
  CHECK(s.lookups == 3);
  CHECK(s.unique_rows == s.hits + s.misses);
  // one set of 4 ways, 3 unique rows: all filled, none evicted; flush wrote the 3 dirty rows
  CHECK(s.conflict_misses == 0);
  CHECK(s.lfu_rejections == 0);
  CHECK(s.evictions == 0);
  CHECK(s.misses == 3);
  CHECK(s.bytes_filled == 3 * 2 * sizeof(float));
  CHECK(s.writebacks == 3);
  CHECK(s.bytes_written_back == 3 * 2 * sizeof(float));
  CHECK(s.saturated_rows == 0);
  emb.reset_stats();
  CHECK(emb.stats().lookups == 0);

  const mpe::MemoryFootprint m = emb.memory();
  CHECK(m.total() ==
        m.store_bytes + m.cache_bytes + m.optimizer_bytes + m.metadata_bytes + m.workspace_bytes);

  CHECK_THROWS_AS(emb.backward(std::vector<float>{1, 1, 1, 1}, adagrad), std::logic_error);
  using E = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
  CHECK_THROWS_AS(E{mpe::EmbeddingConfig{}}, std::invalid_argument);
  const mpe::Pooling pools[] = {mpe::Pooling::Sum, mpe::Pooling::Mean};
  CHECK(pools[0] != pools[1]);
}
