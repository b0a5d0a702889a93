// SPDX-License-Identifier: Apache-2.0
// planned_memory(): the footprint a planner sees before anything is allocated.
//   - CachedEmbedding::planned_memory(config, S) equals memory() of CachedEmbedding(config)
//     after one applied backward() step, field by field (workspace excepted: 0 in the plan),
//     for every cache policy (mpe::KnownCachePolicies<4>) and every state precision (each
//     pair with one of the FP32, FP16, INT8, INT4 and INT2 stores), SGD / row-wise Adagrad /
//     Adam, the slot index off, in the rows and as an array, row keys and column keys (also
//     all-zero column keys, which keep no array) present or not, rows not a multiple of the
//     ways, a cache larger than the rows, no cache, two row alignments and two D; before
//     the step memory() equals the plan but optimizer_bytes (0);
//   - the Optimizer overload equals planned_memory(config, OptimizerRule<Opt>::state_floats(D));
//   - MixedDimEmbedding::planned_memory(config, D -> S) over three D-groups (cache_fraction
//     0, small, 1; keys; slot index) equals memory() after one step, likewise;
//   - a 10^9-row table is planned without allocating it (the formulas by hand);
//   - refusals: planned_memory throws what the constructor throws (the same message after
//     the function's name), and for a negative or overflowing S.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <mpe/mpe.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

template <class S, class C, class P>
struct Combo {
  using storage = S;
  using cache = C;
  using precision = P;
};

void check_equal(const mpe::MemoryFootprint& plan, const mpe::MemoryFootprint& built, bool with_optimizer) {
  CHECK(plan.store_bytes == built.store_bytes);
  CHECK(plan.cache_bytes == built.cache_bytes);
  CHECK(plan.metadata_bytes == built.metadata_bytes);
  if (with_optimizer) {
    CHECK(plan.optimizer_bytes == built.optimizer_bytes);
  } else {
    CHECK(built.optimizer_bytes == 0);
  }
  CHECK(plan.workspace_bytes == 0);
}

/// A batch of B = 3 bags per table touching the first, the last and a middle row of each.
struct Batch {
  std::vector<std::int64_t> indices, offsets{0};
};
Batch batch_for(const std::vector<std::int64_t>& rows) {
  Batch b;
  for (const std::int64_t r : rows) {
    for (int bag = 0; bag < 3; ++bag) {
      b.indices.push_back(bag == 0 ? 0 : bag == 1 ? r - 1 : r / 2);
      if (bag == 2) b.indices.push_back(0);
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
  }
  return b;
}

/// Builds `cfg`, checks the plan before and after one step with `opt`.
template <class E, class Opt>
void check_cached(const mpe::EmbeddingConfig& cfg, const Opt& opt) {
  const std::int64_t S = mpe::OptimizerRule<Opt>::state_floats(cfg.dim);
  const mpe::MemoryFootprint plan = E::planned_memory(cfg, S);
  const mpe::MemoryFootprint by_type = E::planned_memory(cfg, opt);
  CHECK(by_type.total() == plan.total());
  CHECK(by_type.optimizer_bytes == plan.optimizer_bytes);
  E emb(cfg);
  check_equal(plan, emb.memory(), false);
  const Batch b = batch_for(cfg.table_rows);
  const std::size_t T = cfg.table_rows.size();
  std::vector<float> out(3 * T * static_cast<std::size_t>(cfg.dim)), grad(out.size(), 0.125f);
  emb.init_uniform(-0.5f, 0.5f);
  emb.forward(b.indices, b.offsets, out);
  emb.backward(grad, opt);
  REQUIRE(emb.step() == 1);
  check_equal(plan, emb.memory(), true);
  // A second step allocates nothing more.
  emb.forward(b.indices, b.offsets, out);
  emb.backward(grad, opt);
  check_equal(plan, emb.memory(), true);
}

template <class M, class Opt>
void check_mixed(const mpe::MixedDimConfig& cfg, const Opt& opt) {
  const mpe::MemoryFootprint plan =
      M::planned_memory(cfg, [](std::int32_t D) { return mpe::OptimizerRule<Opt>::state_floats(D); });
  const mpe::MemoryFootprint by_type = M::planned_memory(cfg, opt);
  CHECK(by_type.total() == plan.total());
  CHECK(by_type.optimizer_bytes == plan.optimizer_bytes);
  M emb(cfg);
  REQUIRE(emb.num_groups() == 3);
  check_equal(plan, emb.memory(), false);
  std::vector<std::int64_t> rows;
  for (const auto& t : cfg.tables) rows.push_back(t.rows);
  const Batch b = batch_for(rows);
  std::vector<float> out(static_cast<std::size_t>(3 * emb.total_dim())), grad(out.size(), 0.125f);
  emb.init_uniform(-0.5f, 0.5f);
  emb.forward(b.indices, b.offsets, out);
  emb.backward(grad, opt);
  REQUIRE(emb.step() == 1);
  check_equal(plan, emb.memory(), true);
}

/// The text after "mpe::<Class>::<fn>: ".
std::string tail(const std::string& what) {
  const std::size_t at = what.find(": ");
  return at == std::string::npos ? what : what.substr(at + 2);
}

template <class E>
std::string ctor_error(const mpe::EmbeddingConfig& cfg) {
  try {
    E emb(cfg);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

template <class E>
std::string plan_error(const mpe::EmbeddingConfig& cfg, std::int64_t S = 0) {
  try {
    (void)E::planned_memory(cfg, S);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Every cache policy with every state precision, the stores taking turns.
TEST_CASE_TEMPLATE("planned_memory equals memory() after one step", P,
                   Combo<mpe::Fp32, mpe::Lru<4>, mpe::StateFp32>,
                   Combo<mpe::Fp16, mpe::Lru<4>, mpe::StateBf16>,
                   Combo<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StateFp16>,
                   Combo<mpe::Int4Rowwise, mpe::Lfu<4>, mpe::StateFp32>,
                   Combo<mpe::Int2Rowwise, mpe::Lfu<4>, mpe::StateBf16>,
                   Combo<mpe::Fp32, mpe::Lfu<4>, mpe::StateFp16>,
                   Combo<mpe::Fp16, mpe::DirectMapped, mpe::StateFp32>,
                   Combo<mpe::Int8Rowwise, mpe::DirectMapped, mpe::StateBf16>,
                   Combo<mpe::Int4Rowwise, mpe::DirectMapped, mpe::StateFp16>,
                   Combo<mpe::Int2Rowwise, mpe::SecondTouchLru<4>, mpe::StateFp32>,
                   Combo<mpe::Fp32, mpe::SecondTouchLru<4>, mpe::StateBf16>,
                   Combo<mpe::Fp16, mpe::SecondTouchLru<4>, mpe::StateFp16>,
                   Combo<mpe::Int8Rowwise, mpe::WTinyLfu<4>, mpe::StateFp32>,
                   Combo<mpe::Int4Rowwise, mpe::WTinyLfu<4>, mpe::StateBf16>,
                   Combo<mpe::Int2Rowwise, mpe::WTinyLfu<4>, mpe::StateFp16>,
                   Combo<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StateBf16>) {
  using E = mpe::CachedEmbedding<typename P::storage, typename P::cache, mpe::NearestRounding,
                                 mpe::HostBackend, typename P::precision>;
  using M = mpe::MixedDimEmbedding<typename P::storage, typename P::cache, mpe::NearestRounding,
                                   typename P::precision>;
  const std::int64_t W = P::cache::ways;

  SUBCASE("CachedEmbedding") {
    // Rows 21 (not a multiple of 4 ways); caches: none, two sets, not a multiple of the
    // ways, larger than the rows.
    for (const std::int64_t cache_rows : {std::int64_t{0}, 2 * W, 2 * W + 2, 1000 * W}) {
      for (const int D : {5, 16}) {
        for (const int align : {4, 16}) {
          for (const int slot : {0, 1, 2}) {       // off, in the rows, an array
            for (const int keys : {0, 1, 2, 3}) {  // none, row keys, column keys, all-zero column keys
              CAPTURE(cache_rows);
              CAPTURE(D);
              CAPTURE(align);
              CAPTURE(slot);
              CAPTURE(keys);
              mpe::EmbeddingConfig cfg;
              cfg.table_rows = {11, 7, 3};
              cfg.dim = D;
              cfg.cache_rows = cache_rows;
              cfg.row_alignment = align;
              cfg.seed = 7;
              cfg.slot_index = slot > 0;
              cfg.slot_index_in_rows = slot == 1;
              if (keys == 1) cfg.row_keys = {1000, 0, 5000};
              if (keys == 2) cfg.column_keys = {0, 8, 4};
              if (keys == 3) cfg.column_keys = {0, 0, 0};
              check_cached<E>(cfg, mpe::Sgd{0.1f});
              check_cached<E>(cfg, mpe::RowwiseAdagrad{0.1f});
              check_cached<E>(cfg, mpe::Adam{0.01f});
            }
          }
        }
      }
    }
  }

  SUBCASE("MixedDimEmbedding, three D-groups") {
    for (const double fraction : {0.0, 0.2, 1.0}) {
      for (const int slot : {0, 1, 2}) {
        for (const int keys : {0, 1, 2}) {
          CAPTURE(fraction);
          CAPTURE(slot);
          CAPTURE(keys);
          mpe::MixedDimConfig cfg;
          cfg.tables = {{11, 8}, {7, 5}, {30, 8}, {4, 16}, {13, 5}};  // groups D = 8, 5, 16
          cfg.cache_fraction = fraction;
          cfg.seed = 3;
          cfg.slot_index = slot > 0;
          cfg.slot_index_in_rows = slot == 1;
          if (keys == 1) cfg.row_keys = {0, 100, 11, 7000, 200};
          if (keys == 2) cfg.column_keys = {0, 4, 8, 0, 12};
          check_mixed<M>(cfg, mpe::Sgd{0.1f});
          check_mixed<M>(cfg, mpe::RowwiseAdagrad{0.1f});
          check_mixed<M>(cfg, mpe::Adam{0.01f});
        }
      }
    }
  }
}

TEST_CASE("planned_memory of a 10^9-row table allocates nothing") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding, mpe::HostBackend,
                                 mpe::StateBf16>;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {1'000'000'000, 24};
  cfg.dim = 64;
  cfg.cache_rows = 50'000'000;
  cfg.slot_index = true;
  cfg.slot_index_in_rows = false;
  cfg.row_keys = {0, 1'000'000'000};
  const mpe::MemoryFootprint m = E::planned_memory(cfg, mpe::Adam{0.01f});
  const std::size_t rows = 1'000'000'024, slots = 50'000'000, S = 128;
  CHECK(m.store_bytes == rows * 72);
  CHECK(m.cache_bytes == slots * (4 * 64 + 8 + 8 + 1) + rows * 4);  // Lru keeps no words
  CHECK(m.optimizer_bytes == rows * S * 2 + slots * S * 4);
  CHECK(m.metadata_bytes == 3 * 8 + 2 * 8 + sizeof(mpe::detail::Counters));
  CHECK(m.workspace_bytes == 0);
  CHECK(E::planned_memory(cfg, 0).optimizer_bytes == 0);  // SGD
  CHECK(E::planned_memory(cfg, mpe::RowwiseAdagrad{0.1f}).optimizer_bytes == rows * 2 + slots * 4);

  // MixedDimEmbedding: the groups' sum plus the table layout.
  using M = mpe::MixedDimEmbedding<mpe::Int4Rowwise, mpe::Lru<32>, mpe::StochasticRounding>;
  mpe::MixedDimConfig mc;
  mc.tables = {{1'000'000'000, 128}, {5, 16}};
  mc.cache_fraction = 0.01;
  const mpe::MemoryFootprint mm = M::planned_memory(mc, [](std::int32_t) { return std::int64_t{1}; });
  // Group 0: 10^9 rows of 64 + 4 B, 10^7 slots; group 1: 5 rows of 12 B, max(32, 0) = 32
  // requested slots, built min(32, 5 rounded up to 32) = 32.
  CHECK(mm.store_bytes == 1'000'000'000ull * 68 + 5 * 12);
  CHECK(mm.cache_bytes == 10'000'000ull * (4 * 128 + 17) + 32 * (4 * 16 + 17));
  CHECK(mm.optimizer_bytes == (1'000'000'000ull + 5) * 4);
}

TEST_CASE("planned_memory refuses what the constructor refuses") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::NearestRounding>;
  std::vector<std::function<void(mpe::EmbeddingConfig&)>> breaks = {
      [](mpe::EmbeddingConfig& c) { c.table_rows.clear(); },
      [](mpe::EmbeddingConfig& c) { c.dim = 0; },
      [](mpe::EmbeddingConfig& c) { c.cache_rows = -1; },
      [](mpe::EmbeddingConfig& c) { c.cache_rows = 3; },
      [](mpe::EmbeddingConfig& c) { c.row_alignment = 3; },
      [](mpe::EmbeddingConfig& c) { c.table_rows[1] = 0; },
      [](mpe::EmbeddingConfig& c) {
        c.table_rows = {INT64_MAX / 2, 1};
      },
      [](mpe::EmbeddingConfig& c) { c.row_keys = {1}; },
      [](mpe::EmbeddingConfig& c) {
        c.row_keys = {0, -1};
      },
      [](mpe::EmbeddingConfig& c) {
        c.column_keys = {0, 2};
      },
      [](mpe::EmbeddingConfig& c) { c.non_finite = static_cast<mpe::NonFinite>(7); },
      [](mpe::EmbeddingConfig& c) { c.validation = static_cast<mpe::Validation>(7); },
      [](mpe::EmbeddingConfig& c) {
        c.table_rows = {INT64_MAX / 4};
        c.dim = 4096;
      },
  };
  for (std::size_t i = 0; i < breaks.size(); ++i) {
    CAPTURE(i);
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = {10, 20};
    cfg.dim = 8;
    cfg.cache_rows = 8;
    breaks[i](cfg);
    const std::string c = ctor_error<E>(cfg), p = plan_error<E>(cfg);
    REQUIRE_FALSE(c.empty());
    CHECK(c.rfind("mpe::CachedEmbedding::CachedEmbedding: ", 0) == 0);
    CHECK(p.rfind("mpe::CachedEmbedding::planned_memory: ", 0) == 0);
    CHECK(tail(c) == tail(p));
    CHECK_THROWS_AS((void)E::planned_memory(cfg, mpe::Adam{0.01f}), std::invalid_argument);
  }
  mpe::EmbeddingConfig ok;
  ok.table_rows = {10, 20};
  ok.dim = 8;
  CHECK(plan_error<E>(ok, -1).find("state_values_per_row = -1") != std::string::npos);
  ok.table_rows = {std::int64_t{1} << 40};
  CHECK(plan_error<E>(ok, std::int64_t{1} << 40).find("exceeds PTRDIFF_MAX") != std::string::npos);

  using M = mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::NearestRounding>;
  auto zero = [](std::int32_t) { return std::int64_t{0}; };
  mpe::MixedDimConfig mc;
  mc.tables = {{10, 8}, {0, 4}};
  CHECK_THROWS_WITH_AS((void)M::planned_memory(mc, zero),
                       doctest::Contains("mpe::MixedDimEmbedding::planned_memory: config.tables[1]"),
                       std::invalid_argument);
  mc.tables = {{10, 8}};
  mc.cache_fraction = 2.0;
  CHECK_THROWS_AS((void)M::planned_memory(mc, zero), std::invalid_argument);
  mc.cache_fraction = 0.0;
  mc.row_alignment = 6;  // refused by the group, as the constructor's group refuses it
  CHECK_THROWS_WITH_AS((void)M::planned_memory(mc, zero), doctest::Contains("config.row_alignment = 6"),
                       std::invalid_argument);
  CHECK_THROWS_AS(M{mc}, std::invalid_argument);
}
