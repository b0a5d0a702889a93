// SPDX-License-Identifier: Apache-2.0
// Row and column keys (EmbeddingConfig::row_keys / column_keys, MixedDimConfig's), and
// init_uniform with a range per table: a piece of a table set or a column slice of a table
// rounds stochastically and initializes with exactly the bits of the whole.
//   - column split: a table of D = 64 (FP32, FP16, BF16 store; stochastic rounding; no
//     cache) trained with SGD equals, bit for bit (forward outputs and weights), two
//     objects holding its columns [0, 32) and [32, 64) with column_keys {0} / {32} and the
//     table's row key, fed the same indices and the matching gradient columns; without
//     the column key the second half differs (the key is what makes them equal);
//   - row split: a two-table set equals two one-table objects whose row_keys are the
//     tables' offsets in the set (FP32, FP16, BF16, INT8);
//   - init: a keyed, sliced FP32 object's init_uniform equals the draw written out from
//     num::philox4x32_10 (key seed ^ 0x9e3779b97f4a7c15, counter {row key, 0, 0, 5 << 24 |
//     column key / 4 + d / 4}), and the slice of the full table's init; init_uniform(l, h)
//     equals init_uniform({l, ..}, {h, ..}); each table of a per-table init equals a
//     scalar init at its range;
//   - MixedDimEmbedding with row_keys: every group uses config.seed, and each table (any
//     D group) trains and initializes as a one-table CachedEmbedding with its keys;
//   - refusals: column_keys of the wrong size, negative, not a multiple of 4, or too
//     large; init_uniform ranges of the wrong size or a bad table; MixedDimConfig's keys
//     named in the caller's numbering.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <mpe/mpe.hpp>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/embedding_bag.hpp"

namespace {

template <class S>
using Emb = mpe::CachedEmbedding<S, mpe::Lru<32>, mpe::StochasticRounding>;

constexpr std::uint64_t kSeed = 0x5eed1234abcdULL;

mpe::EmbeddingConfig config(std::vector<std::int64_t> rows, std::int32_t dim,
                            std::vector<std::int64_t> row_keys = {},
                            std::vector<std::int64_t> column_keys = {}) {
  mpe::EmbeddingConfig c;
  c.table_rows = std::move(rows);
  c.dim = dim;
  c.seed = kSeed;
  c.row_keys = std::move(row_keys);
  c.column_keys = std::move(column_keys);
  return c;
}

/// Columns [c0, c0 + w) of a (rows, W) row-major array.
std::vector<float> columns(const std::vector<float>& a, std::size_t W, std::size_t c0, std::size_t w) {
  std::vector<float> o;
  for (std::size_t r = 0; r < a.size() / W; ++r)
    o.insert(o.end(), a.begin() + static_cast<std::ptrdiff_t>(r * W + c0),
             a.begin() + static_cast<std::ptrdiff_t>(r * W + c0 + w));
  return o;
}

template <class E>
std::vector<float> weights(const E& e, std::int64_t first_row, std::int64_t rows) {
  std::vector<float> w(static_cast<std::size_t>(rows * e.config().dim));
  e.get_weights(w, first_row);
  return w;
}

/// The init draw of one element written out from the Philox definition (docs/numerics.md
/// section 3, site Init = 5, step 0): no mpe code but num::philox4x32_10.
float init_value(std::uint64_t row_key, std::int64_t column, float low, float high) {
  const std::uint64_t key = kSeed ^ 0x9e3779b97f4a7c15ULL;
  const mpe::num::Uint4 c{static_cast<std::uint32_t>(row_key), static_cast<std::uint32_t>(row_key >> 32), 0,
                          (5u << 24) | static_cast<std::uint32_t>(column / 4)};
  const mpe::num::Uint4 w =
      mpe::num::philox4x32_10(c, static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
  const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
  const float u = static_cast<float>(words[column % 4] >> 8) * 0x1p-24f;
  const float v = low + (high - low) * u;
  return v < high ? v : low;
}

template <class F>
void check_throws_naming(F&& f, const std::string& a, const std::string& b) {
  try {
    f();
    FAIL("no exception; expected one naming " << a);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find(a) != std::string::npos);
    CHECK(what.find(b) != std::string::npos);
  }
}

/// A set of tables {30, R = 50} x D = 64; table 1 split into columns [0, 32) and [32, 64),
/// each half keyed by its column and the table's row (30) in the set.
template <class S>
void column_split() {
  constexpr std::int64_t R0 = 30, R = 50, B = 12;
  Emb<S> full(config({R0, R}, 64));
  Emb<S> lo(config({R}, 32, {R0}, {0})), hi(config({R}, 32, {R0}, {32}));
  Emb<S> unkeyed(config({R}, 32, {R0}));  // columns [32, 64) without their column key
  full.init_uniform(-0.5f, 0.5f);
  lo.init_uniform(-0.5f, 0.5f);
  hi.init_uniform(-0.5f, 0.5f);
  unkeyed.init_uniform(-0.5f, 0.5f);
  const std::vector<float> w0 = weights(full, R0, R);
  CHECK(ref::same_bits(weights(lo, 0, R), columns(w0, 64, 0, 32)));
  CHECK(ref::same_bits(weights(hi, 0, R), columns(w0, 64, 32, 32)));
  CHECK_FALSE(ref::same_bits(weights(unkeyed, 0, R), columns(w0, 64, 32, 32)));

  std::mt19937_64 rng(11);
  for (int step = 0; step < 6; ++step) {
    const ref::Batch b = ref::random_batch(rng, {R0, R}, B, 5, false);
    const ref::Batch b1 = ref::table_batch(b, 1);
    std::vector<float> out(B * 128), out_lo(B * 32), out_hi(B * 32), out_u(B * 32);
    full.forward(b.indices, b.offsets, out);
    lo.forward(b1.indices, b1.offsets, out_lo);
    hi.forward(b1.indices, b1.offsets, out_hi);
    unkeyed.forward(b1.indices, b1.offsets, out_u);
    CHECK(ref::same_bits(out_lo, columns(out, 128, 64, 32)));
    CHECK(ref::same_bits(out_hi, columns(out, 128, 96, 32)));
    const std::vector<float> g = ref::random_floats(rng, B * 128, -1.0f, 1.0f);
    full.backward(g, mpe::Sgd{0.05f});
    lo.backward(columns(g, 128, 64, 32), mpe::Sgd{0.05f});
    hi.backward(columns(g, 128, 96, 32), mpe::Sgd{0.05f});
    unkeyed.backward(columns(g, 128, 96, 32), mpe::Sgd{0.05f});
  }
  const std::vector<float> w = weights(full, R0, R);
  CHECK(ref::first_diff(weights(lo, 0, R), columns(w, 64, 0, 32)) == -1);
  CHECK(ref::first_diff(weights(hi, 0, R), columns(w, 64, 32, 32)) == -1);
  if constexpr (!std::is_same_v<S, mpe::Fp32>) {  // an FP32 store rounds nothing
    CHECK_FALSE(ref::same_bits(weights(unkeyed, 0, R), columns(w, 64, 32, 32)));
  }
}

/// A two-table set {40, 25} x D = 64 split into two one-table objects keyed by the tables'
/// offsets in the set.
template <class S>
void row_split() {
  constexpr std::int64_t R0 = 40, R1 = 25, B = 10;
  Emb<S> set(config({R0, R1}, 64));
  Emb<S> a(config({R0}, 64, {0})), b(config({R1}, 64, {R0}));
  Emb<S> unkeyed(config({R1}, 64));
  set.init_uniform(-0.25f, 0.25f);
  a.init_uniform(-0.25f, 0.25f);
  b.init_uniform(-0.25f, 0.25f);
  unkeyed.init_uniform(-0.25f, 0.25f);
  CHECK(ref::same_bits(weights(a, 0, R0), weights(set, 0, R0)));
  CHECK(ref::same_bits(weights(b, 0, R1), weights(set, R0, R1)));
  CHECK_FALSE(ref::same_bits(weights(unkeyed, 0, R1), weights(set, R0, R1)));
  std::mt19937_64 rng(5);
  for (int step = 0; step < 6; ++step) {
    const ref::Batch x = ref::random_batch(rng, {R0, R1}, B, 6, false);
    const ref::Batch x0 = ref::table_batch(x, 0), x1 = ref::table_batch(x, 1);
    std::vector<float> out(B * 128), out_a(B * 64), out_b(B * 64);
    set.forward(x.indices, x.offsets, out);
    a.forward(x0.indices, x0.offsets, out_a);
    b.forward(x1.indices, x1.offsets, out_b);
    CHECK(ref::same_bits(out_a, columns(out, 128, 0, 64)));
    CHECK(ref::same_bits(out_b, columns(out, 128, 64, 64)));
    const std::vector<float> g = ref::random_floats(rng, B * 128, -1.0f, 1.0f);
    set.backward(g, mpe::Sgd{0.05f});
    a.backward(columns(g, 128, 0, 64), mpe::Sgd{0.05f});
    b.backward(columns(g, 128, 64, 64), mpe::Sgd{0.05f});
  }
  CHECK(ref::first_diff(weights(a, 0, R0), weights(set, 0, R0)) == -1);
  CHECK(ref::first_diff(weights(b, 0, R1), weights(set, R0, R1)) == -1);
}

}  // namespace

TEST_CASE("column keys: a column split of a table trains with the table's bits") {
  SUBCASE("fp32") { column_split<mpe::Fp32>(); }
  SUBCASE("fp16") { column_split<mpe::Fp16>(); }
  SUBCASE("bf16") { column_split<mpe::Bf16>(); }
}

TEST_CASE("row keys: a table set split into one-table objects trains with the set's bits") {
  SUBCASE("fp32") { row_split<mpe::Fp32>(); }
  SUBCASE("fp16") { row_split<mpe::Fp16>(); }
  SUBCASE("bf16") { row_split<mpe::Bf16>(); }
  SUBCASE("int8") { row_split<mpe::Int8Rowwise>(); }
}

TEST_CASE("init_uniform: keyed draws against the Philox definition; per-table ranges") {
  SUBCASE("a keyed column slice draws the full table's elements") {
    // Table 1 of an object holds columns [40, 60) of a table whose row 0 is row 1000 of a set.
    Emb<mpe::Fp32> e(config({7, 9}, 20, {500, 1000}, {8, 40}));
    e.init_uniform(-2.0f, 3.0f);
    const std::vector<float> w = weights(e, 0, 16);
    for (std::int64_t r = 0; r < 16; ++r) {
      const std::uint64_t key = r < 7 ? 500 + r : 1000 + (r - 7);
      const std::int64_t c0 = r < 7 ? 8 : 40;
      for (std::int64_t d = 0; d < 20; ++d) {
        INFO("row " << r << " element " << d);
        const float want = init_value(key, c0 + d, -2.0f, 3.0f),
                    got = w[static_cast<std::size_t>(r * 20 + d)];
        CHECK(std::memcmp(&want, &got, 4) == 0);
      }
    }
    // The same rows as slices of a full (1000 + 9, 64) table: its columns [40, 60).
    Emb<mpe::Fp32> full(config({1009}, 64));
    full.init_uniform(-2.0f, 3.0f);
    CHECK(ref::same_bits(weights(e, 7, 9), columns(weights(full, 1000, 9), 64, 40, 20)));
  }
  SUBCASE("column keys all 0 are no keys") {
    Emb<mpe::Int8Rowwise> a(config({33, 12}, 24)), b(config({33, 12}, 24, {}, {0, 0}));
    a.init_uniform(-1.0f, 1.0f);
    b.init_uniform(-1.0f, 1.0f);
    CHECK(ref::same_bits(weights(a, 0, 45), weights(b, 0, 45)));
  }
  SUBCASE("init_uniform(l, h) equals one range per table at (l, h); each table its own range") {
    mpe::EmbeddingConfig c = config({70'000, 5, 3}, 12);  // table 0 spans two init chunks
    c.cache_rows = 64;
    Emb<mpe::Int8Rowwise> scalar(c), tables(c);
    scalar.init_uniform(-0.3f, 0.7f);
    const std::vector<float> lo3(3, -0.3f), hi3(3, 0.7f);
    tables.init_uniform(std::span<const float>(lo3), std::span<const float>(hi3));
    CHECK(ref::same_bits(weights(scalar, 0, 70'008), weights(tables, 0, 70'008)));
    const std::vector<float> lo{-0.3f, -1.0f, -0.3f}, hi{0.7f, 2.0f, 0.7f};
    tables.init_uniform(std::span<const float>(lo), std::span<const float>(hi));
    Emb<mpe::Int8Rowwise> t1(c);
    t1.init_uniform(-1.0f, 2.0f);
    CHECK(ref::same_bits(weights(tables, 0, 70'000), weights(scalar, 0, 70'000)));
    CHECK(ref::same_bits(weights(tables, 70'000, 5), weights(t1, 70'000, 5)));
    CHECK(ref::same_bits(weights(tables, 70'005, 3), weights(scalar, 70'005, 3)));
  }
}

TEST_CASE("MixedDimEmbedding with row keys: one seed, each table as a keyed one-table object") {
  mpe::MixedDimConfig c;
  c.tables = {{30, 64}, {20, 32}, {25, 64}};
  c.seed = kSeed;
  c.row_keys = {100, 130, 150};
  c.column_keys = {0, 32, 64};
  mpe::MixedDimEmbedding<mpe::Fp16, mpe::Lru<32>, mpe::StochasticRounding> m(c);
  REQUIRE(m.num_groups() == 2);
  CHECK(m.group(0).config().seed == kSeed);
  CHECK(m.group(1).config().seed == kSeed);
  CHECK(m.group(0).config().row_keys == std::vector<std::int64_t>{100, 150});
  CHECK(m.group(0).config().column_keys == std::vector<std::int64_t>{0, 64});
  CHECK(m.group(1).config().row_keys == std::vector<std::int64_t>{130});
  CHECK(m.group(1).config().column_keys == std::vector<std::int64_t>{32});
  std::vector<Emb<mpe::Fp16>> one;
  for (std::size_t t = 0; t < 3; ++t)
    one.emplace_back(config({c.tables[t].rows}, c.tables[t].dim, {c.row_keys[t]}, {c.column_keys[t]}));
  const std::vector<float> lo{-0.5f, -0.1f, -0.2f}, hi{0.5f, 0.3f, 0.2f};
  m.init_uniform(std::span<const float>(lo), std::span<const float>(hi));
  for (std::size_t t = 0; t < 3; ++t) one[t].init_uniform(lo[t], hi[t]);
  std::mt19937_64 rng(3);
  constexpr std::int64_t B = 8, W = 64 + 32 + 64;
  const std::int64_t col[3] = {0, 64, 96};
  for (int step = 0; step < 5; ++step) {
    const ref::Batch x = ref::random_batch(rng, {30, 20, 25}, B, 4, false);
    std::vector<float> out(B * W);
    m.forward(x.indices, x.offsets, out);
    const std::vector<float> g = ref::random_floats(rng, B * W, -1.0f, 1.0f);
    for (std::size_t t = 0; t < 3; ++t) {
      const ref::Batch xt = ref::table_batch(x, static_cast<std::int64_t>(t));
      const auto D = static_cast<std::size_t>(c.tables[t].dim);
      std::vector<float> o(B * D);
      one[t].forward(xt.indices, xt.offsets, o);
      CHECK(ref::same_bits(o, columns(out, W, static_cast<std::size_t>(col[t]), D)));
      one[t].backward(columns(g, W, static_cast<std::size_t>(col[t]), D), mpe::Sgd{0.05f});
    }
    m.backward(g, mpe::Sgd{0.05f});
  }
  for (std::size_t t = 0; t < 3; ++t) {
    std::vector<float> w(static_cast<std::size_t>(c.tables[t].rows * c.tables[t].dim));
    m.get_weights(static_cast<std::int64_t>(t), w);
    CHECK(ref::first_diff(w, weights(one[t], 0, c.tables[t].rows)) == -1);
  }
  // Without row keys group 1 keeps its derived seed.
  c.row_keys.clear();
  mpe::MixedDimEmbedding<mpe::Fp16, mpe::Lru<32>, mpe::StochasticRounding> derived(c);
  CHECK(derived.group(1).config().seed != kSeed);
}

TEST_CASE("keys and per-table ranges: refusals name the field and value") {
  using E = Emb<mpe::Fp16>;
  check_throws_naming([] { E e(config({4, 5}, 8, {}, {0})); }, "config.column_keys.size() = 1", "T = 2");
  check_throws_naming([] { E e(config({4, 5}, 8, {}, {0, -4})); }, "config.column_keys[1]", "-4");
  check_throws_naming([] { E e(config({4, 5}, 8, {}, {6, 0})); }, "config.column_keys[0]", "6");
  check_throws_naming([] { E e(config({4}, 8, {}, {std::int64_t{1} << 26})); }, "config.column_keys[0]",
                      std::to_string(std::int64_t{1} << 26));
  E e(config({4, 5}, 8));
  e.init_uniform(-1.0f, 1.0f);
  const std::vector<float> before = weights(e, 0, 9);
  const std::vector<float> one{-1.0f}, two{-1.0f, -1.0f}, bad_hi{1.0f, -2.0f};
  check_throws_naming([&] { e.init_uniform(std::span<const float>(one), std::span<const float>(two)); },
                      "low.size() = 1", "T = 2");
  check_throws_naming([&] { e.init_uniform(std::span<const float>(two), std::span<const float>(bad_hi)); },
                      "table 1", "-2");
  const std::vector<float> huge{1e6f, 1e6f}, huge_hi{2e6f, 2e6f};
  check_throws_naming([&] { e.init_uniform(std::span<const float>(huge), std::span<const float>(huge_hi)); },
                      "table 0", "65504");
  CHECK(ref::same_bits(weights(e, 0, 9), before));

  using M = mpe::MixedDimEmbedding<mpe::Fp16, mpe::Lru<32>, mpe::StochasticRounding>;
  mpe::MixedDimConfig c;
  c.tables = {{4, 8}, {5, 12}};
  c.row_keys = {0};
  check_throws_naming([&] { M m(c); }, "config.row_keys.size() = 1", "T = 2");
  c.row_keys = {0, -7};
  check_throws_naming([&] { M m(c); }, "config.row_keys[1]", "-7");
  c.row_keys = {};
  c.column_keys = {0, 2};
  check_throws_naming([&] { M m(c); }, "config.column_keys[1]", "2");
  c.column_keys = {};
  M m(c);
  check_throws_naming([&] { m.init_uniform(std::span<const float>(one), std::span<const float>(two)); },
                      "low.size() = 1", "T = 2");
  check_throws_naming([&] { m.init_uniform(std::span<const float>(two), std::span<const float>(bad_hi)); },
                      "table 1", "-2");
}
