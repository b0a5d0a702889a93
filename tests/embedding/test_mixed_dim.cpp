// SPDX-License-Identifier: Apache-2.0
// MixedDimEmbedding: tables of D = 1, 3, 16, 64, 130 in one object.
//   - layout: groups in order of first appearance, columns, constructor refusals, not
//     copyable but movable;
//   - Fp32 store, no cache: forward and SGD / row-wise Adagrad training equal a plain FP32
//     embedding bag per table (tests/reference/embedding_bag.hpp, no mpe code), bit for bit;
//   - quantized stores with a cache: each D-group equals a single-D CachedEmbedding fed the
//     group's share of the batch by hand (the columns land where the specs say), and a
//     one-D object equals one CachedEmbedding exactly;
//   - all or nothing: bad input and a gradient that overflows in one group change no group,
//     messages in the caller's numbering; NonFinite::Skip skips every group, counted once;
//   - checkpoints: in-memory and file round trips resume bit-identically (also into an
//     object of another seed); corrupt, truncated and other-spec bytes are refused and
//     change nothing; io::save_to_bytes equals the file save() writes and load_from_bytes
//     refuses a corrupt copy.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/embedding_bag.hpp"

namespace {

const std::vector<mpe::TableSpec> kSpecs = {{40, 16},  {25, 3},  {30, 64}, {50, 1},
                                            {20, 130}, {35, 16}, {15, 3}};

std::vector<std::int64_t> rows_of(const std::vector<mpe::TableSpec>& specs) {
  std::vector<std::int64_t> r;
  for (const auto& s : specs) r.push_back(s.rows);
  return r;
}

/// Plain FP32 reference: one ref::EmbeddingBag (T = 1) per table; columns by a prefix sum
/// of D written here, not taken from mpe.
struct MixedRef {
  std::vector<mpe::TableSpec> specs;
  std::vector<ref::EmbeddingBag> tables;
  std::vector<std::int64_t> col;
  std::int64_t W = 0;
  explicit MixedRef(const std::vector<mpe::TableSpec>& s) : specs(s) {
    for (const auto& t : s) {
      tables.emplace_back(std::vector<std::int64_t>{t.rows}, t.dim);
      col.push_back(W);
      W += t.dim;
    }
  }
  std::vector<float> forward(const ref::Batch& b, mpe::Pooling p) const {
    std::vector<float> out(static_cast<std::size_t>(b.B * W));
    for (std::size_t t = 0; t < tables.size(); ++t) {
      const auto o = tables[t].forward(ref::table_batch(b, static_cast<std::int64_t>(t)), p);
      const auto D = static_cast<std::size_t>(specs[t].dim);
      for (std::size_t s = 0; s < static_cast<std::size_t>(b.B); ++s)
        for (std::size_t d = 0; d < D; ++d)
          out[s * static_cast<std::size_t>(W) + static_cast<std::size_t>(col[t]) + d] = o[s * D + d];
    }
    return out;
  }
  std::vector<float> columns(const std::vector<float>& g, std::size_t t, std::int64_t B) const {
    const auto D = static_cast<std::size_t>(specs[t].dim);
    std::vector<float> o(static_cast<std::size_t>(B) * D);
    for (std::size_t s = 0; s < static_cast<std::size_t>(B); ++s)
      for (std::size_t d = 0; d < D; ++d)
        o[s * D + d] = g[s * static_cast<std::size_t>(W) + static_cast<std::size_t>(col[t]) + d];
    return o;
  }
  void sgd(const ref::Batch& b, mpe::Pooling p, const std::vector<float>& g, float lr) {
    for (std::size_t t = 0; t < tables.size(); ++t)
      tables[t].sgd(ref::table_batch(b, static_cast<std::int64_t>(t)), p, columns(g, t, b.B), lr);
  }
  void adagrad(const ref::Batch& b, mpe::Pooling p, const std::vector<float>& g, float lr, float eps) {
    for (std::size_t t = 0; t < tables.size(); ++t)
      tables[t].adagrad(ref::table_batch(b, static_cast<std::int64_t>(t)), p, columns(g, t, b.B), lr, eps);
  }
};

template <class E>
std::vector<float> weights_of(const E& e, std::int64_t t) {
  std::vector<float> w(
      static_cast<std::size_t>(e.config().tables[static_cast<std::size_t>(t)].rows * e.dim(t)));
  e.get_weights(t, w);
  return w;
}

template <class E>
std::vector<std::vector<float>> all_weights(const E& e) {
  std::vector<std::vector<float>> v;
  for (std::int64_t t = 0; t < e.num_tables(); ++t) v.push_back(weights_of(e, t));
  return v;
}

std::int64_t total_dim(const std::vector<mpe::TableSpec>& specs) {
  std::int64_t w = 0;
  for (const auto& s : specs) w += s.dim;
  return w;
}

template <class E>
std::vector<float> run_forward(E& e, const ref::Batch& b, mpe::Pooling p) {
  std::vector<float> out(static_cast<std::size_t>(b.B * e.total_dim()));
  e.forward(b.indices, b.offsets, out, p, b.weights);
  return out;
}

}  // namespace

TEST_CASE("mixed D: layout, columns and groups") {
  using E = mpe::MixedDimEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
  static_assert(!std::is_copy_constructible_v<E> && !std::is_copy_assignable_v<E>);
  static_assert(std::is_nothrow_move_constructible_v<E> && std::is_nothrow_move_assignable_v<E>);
  E e(mpe::MixedDimConfig{kSpecs, 0.0, 1});
  CHECK(e.num_tables() == 7);
  CHECK(e.total_dim() == 16 + 3 + 64 + 1 + 130 + 16 + 3);
  CHECK(e.num_groups() == 5);  // D = 16, 3, 64, 1, 130 in order of first appearance
  CHECK(e.group_dim(0) == 16);
  CHECK(e.group_dim(4) == 130);
  CHECK(e.group_tables(0) == std::vector<std::int64_t>{0, 5});
  CHECK(e.group_tables(1) == std::vector<std::int64_t>{1, 6});
  CHECK(e.column(4) == 16 + 3 + 64 + 1);
  CHECK(e.locate(6) == std::pair<std::size_t, std::int64_t>{1, 1});
  CHECK(e.group(0).num_tables() == 2);
  CHECK(e.group(0).total_rows() == 40 + 35);
  CHECK_THROWS_AS(E(mpe::MixedDimConfig{}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(E(mpe::MixedDimConfig{{{10, 4}, {0, 8}}}),
                       doctest::Contains("config.tables[1] = {rows 0, dim 8}"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(E(mpe::MixedDimConfig{{{10, 4}}, 1.5}), doctest::Contains("cache_fraction = 1.5"),
                       std::invalid_argument);
}

TEST_CASE("mixed D: Fp32 store equals a plain FP32 embedding bag per table (SGD, row-wise Adagrad)") {
  // Bit for bit: one rounding per operation in the reference's order (DESIGN's numerics
  // contract); compiled with -ffp-contract=off.
  for (const bool adagrad : {false, true}) {
    for (const mpe::Pooling pooling : {mpe::Pooling::Sum, mpe::Pooling::Mean}) {
      CAPTURE(adagrad);
      CAPTURE(static_cast<int>(pooling));
      using E = mpe::MixedDimEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
      E e(mpe::MixedDimConfig{kSpecs, 0.0, 7});
      MixedRef r(kSpecs);
      std::mt19937_64 rng(11);
      for (std::size_t t = 0; t < kSpecs.size(); ++t) {
        const auto w =
            ref::random_floats(rng, static_cast<std::size_t>(kSpecs[t].rows * kSpecs[t].dim), -1, 1);
        e.set_weights(static_cast<std::int64_t>(t), w);
        r.tables[t].weights() = w;
      }
      for (int step = 0; step < 4; ++step) {
        const ref::Batch b = ref::random_batch(rng, rows_of(kSpecs), 6, 5, pooling == mpe::Pooling::Sum);
        const auto out = run_forward(e, b, pooling);
        const auto want = r.forward(b, pooling);
        REQUIRE(ref::first_diff(out, want) == -1);
        const auto g = ref::random_floats(rng, out.size(), -1, 1);
        if (adagrad) {
          e.backward(g, mpe::RowwiseAdagrad{0.1f, 1e-6f});
          r.adagrad(b, pooling, g, 0.1f, 1e-6f);
        } else {
          e.backward(g, mpe::Sgd{0.1f});
          r.sgd(b, pooling, g, 0.1f);
        }
        for (std::int64_t t = 0; t < e.num_tables(); ++t) {
          CAPTURE(t);
          REQUIRE(ref::first_diff(weights_of(e, t), r.tables[static_cast<std::size_t>(t)].weights()) == -1);
        }
      }
      CHECK(e.step() == 4);
      // forward_inference reads the same values and changes nothing.
      const ref::Batch b = ref::random_batch(rng, rows_of(kSpecs), 3, 4, false);
      std::vector<float> inf(static_cast<std::size_t>(b.B * e.total_dim()));
      const auto before = e.stats();
      e.forward_inference(b.indices, b.offsets, inf, pooling);
      CHECK(ref::first_diff(inf, r.forward(b, pooling)) == -1);
      CHECK(e.stats().lookups == before.lookups);
    }
  }
}

TEST_CASE_TEMPLATE("mixed D: each group equals a single-D CachedEmbedding fed its share by hand", S,
                   mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Fp16) {
  using C = mpe::Lru<4>;
  using R = mpe::StochasticRounding;
  using E = mpe::MixedDimEmbedding<S, C, R>;
  using One = mpe::CachedEmbedding<S, C, R>;
  const std::uint64_t seed = 5;
  E e(mpe::MixedDimConfig{kSpecs, 0.2, seed});
  e.init_uniform(-0.5f, 0.5f);
  // The groups by hand: D = 16 {0, 5}, 3 {1, 6}, 64 {2}, 1 {3}, 130 {4}; cache max(4, round(0.2 rows)).
  const std::vector<std::vector<std::size_t>> groups = {{0, 5}, {1, 6}, {2}, {3}, {4}};
  std::vector<One> ones;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    mpe::EmbeddingConfig c;
    std::int64_t rows = 0;
    for (auto t : groups[g]) {
      c.table_rows.push_back(kSpecs[t].rows);
      rows += kSpecs[t].rows;
    }
    c.dim = kSpecs[groups[g][0]].dim;
    c.cache_rows = std::max<std::int64_t>(4, std::llround(0.2 * static_cast<double>(rows)));
    c.seed = g == 0 ? seed : seed ^ (0x9e3779b97f4a7c15ULL * g);
    ones.emplace_back(c);
    ones.back().init_uniform(-0.5f, 0.5f);
    CHECK(e.group(g).cache_slots() == ones.back().cache_slots());
  }
  std::mt19937_64 rng(3);
  const std::int64_t W = total_dim(kSpecs);
  std::int64_t col[7];
  for (std::size_t t = 0, c = 0; t < kSpecs.size(); c += static_cast<std::size_t>(kSpecs[t].dim), ++t)
    col[t] = static_cast<std::int64_t>(c);
  for (int step = 0; step < 5; ++step) {
    const ref::Batch b = ref::random_batch(rng, rows_of(kSpecs), 8, 6, step % 2 == 0);
    if (step == 2) e.prefetch(b.indices, b.offsets);
    const auto out = run_forward(e, b, mpe::Pooling::Sum);
    const auto grad = ref::random_floats(rng, out.size(), -1, 1);
    e.backward(grad, mpe::Sgd{0.05f});
    for (std::size_t g = 0; g < groups.size(); ++g) {
      CAPTURE(g);
      // The group's share: its tables' bags in order, offsets rebased.
      ref::Batch gb;
      gb.B = b.B;
      gb.offsets.push_back(0);
      for (auto t : groups[g]) {
        const ref::Batch tb = ref::table_batch(b, static_cast<std::int64_t>(t));
        const auto base = static_cast<std::int64_t>(gb.indices.size());
        gb.indices.insert(gb.indices.end(), tb.indices.begin(), tb.indices.end());
        gb.weights.insert(gb.weights.end(), tb.weights.begin(), tb.weights.end());
        for (std::size_t i = 1; i < tb.offsets.size(); ++i) gb.offsets.push_back(base + tb.offsets[i]);
      }
      const auto D = static_cast<std::size_t>(kSpecs[groups[g][0]].dim), k = groups[g].size();
      if (step == 2) ones[g].prefetch(gb.indices, gb.offsets);
      std::vector<float> o(static_cast<std::size_t>(b.B) * k * D), go(o.size());
      ones[g].forward(gb.indices, gb.offsets, o, mpe::Pooling::Sum, gb.weights);
      for (std::size_t s = 0; s < static_cast<std::size_t>(b.B); ++s) {
        for (std::size_t i = 0; i < k; ++i) {
          for (std::size_t d = 0; d < D; ++d) {
            const std::size_t at =
                s * static_cast<std::size_t>(W) + static_cast<std::size_t>(col[groups[g][i]]) + d;
            REQUIRE(std::memcmp(&o[(s * k + i) * D + d], &out[at], 4) == 0);
            go[(s * k + i) * D + d] = grad[at];
          }
        }
      }
      ones[g].backward(go, mpe::Sgd{0.05f});
      const auto s1 = ones[g].stats(), s2 = e.group(g).stats();
      CHECK(s1.hits == s2.hits);
      CHECK(s1.misses == s2.misses);
      CHECK(s1.evictions == s2.evictions);
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      const auto t = groups[g][i];
      std::vector<float> w(static_cast<std::size_t>(kSpecs[t].rows * kSpecs[t].dim));
      ones[g].get_weights(w, ones[g].table_offset(static_cast<std::int64_t>(i)));
      CHECK(ref::first_diff(weights_of(e, static_cast<std::int64_t>(t)), w) == -1);
    }
  }
}

TEST_CASE("mixed D: one D is exactly one CachedEmbedding") {
  using E = mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  using One = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const std::vector<mpe::TableSpec> specs = {{60, 16}, {45, 16}, {30, 16}};
  E e(mpe::MixedDimConfig{specs, 0.1, 9});
  One one(mpe::EmbeddingConfig{{60, 45, 30}, 16, std::llround(0.1 * 135), 9});
  e.init_uniform(-1, 1);
  one.init_uniform(-1, 1);
  std::mt19937_64 rng(1);
  for (int step = 0; step < 4; ++step) {
    const ref::Batch b = ref::random_batch(rng, rows_of(specs), 5, 6, true);
    const auto out = run_forward(e, b, mpe::Pooling::Sum);
    std::vector<float> o(out.size());
    one.forward(b.indices, b.offsets, o, mpe::Pooling::Sum, b.weights);
    REQUIRE(ref::first_diff(out, o) == -1);
    const auto g = ref::random_floats(rng, out.size(), -1, 1);
    e.backward(g, mpe::RowwiseAdagrad{0.05f, 1e-8f});
    one.backward(g, mpe::RowwiseAdagrad{0.05f, 1e-8f});
  }
  {
    // A forward refused for its input (one group: the group's own checks refuse it) leaves
    // the earlier forward awaiting its backward, as in the CachedEmbedding.
    const ref::Batch b = ref::random_batch(rng, rows_of(specs), 5, 6, true);
    const auto out = run_forward(e, b, mpe::Pooling::Sum);
    std::vector<float> o(out.size());
    one.forward(b.indices, b.offsets, o, mpe::Pooling::Sum, b.weights);
    ref::Batch bad = b;
    REQUIRE(!bad.indices.empty());
    bad.indices[0] = 60;  // outside every table (60, 45, 30 rows)
    CHECK_THROWS_AS(e.forward(bad.indices, bad.offsets, o, mpe::Pooling::Sum, bad.weights),
                    std::invalid_argument);
    CHECK_THROWS_AS(one.forward(bad.indices, bad.offsets, o, mpe::Pooling::Sum, bad.weights),
                    std::invalid_argument);
    const auto g = ref::random_floats(rng, out.size(), -1, 1);
    e.backward(g, mpe::RowwiseAdagrad{0.05f, 1e-8f});
    one.backward(g, mpe::RowwiseAdagrad{0.05f, 1e-8f});
    CHECK(e.step() == 5);
  }
  std::vector<float> w(static_cast<std::size_t>(135 * 16));
  one.get_weights(w);
  std::vector<float> mine;
  for (std::int64_t t = 0; t < 3; ++t) {
    const auto v = weights_of(e, t);
    mine.insert(mine.end(), v.begin(), v.end());
  }
  CHECK(ref::first_diff(mine, w) == -1);
}

TEST_CASE("mixed D: bad input changes no group") {
  using E = mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  E e(mpe::MixedDimConfig{kSpecs, 0.2, 2});
  e.init_uniform(-1, 1);
  std::mt19937_64 rng(8);
  const ref::Batch good = ref::random_batch(rng, rows_of(kSpecs), 4, 4, false);
  auto out = run_forward(e, good, mpe::Pooling::Sum);
  e.backward(ref::random_floats(rng, out.size(), -1, 1), mpe::Sgd{0.1f});
  const auto w0 = all_weights(e);
  const auto s0 = e.stats();
  const auto bytes0 = e.save_bytes();

  ref::Batch bad = good;
  // The last index of table 4 (D = 130, 20 rows) set to 20.
  const auto last4 = static_cast<std::size_t>(bad.offsets[static_cast<std::size_t>(5 * bad.B)] - 1);
  REQUIRE(bad.offsets[static_cast<std::size_t>(4 * bad.B)] <= static_cast<std::int64_t>(last4));
  bad.indices[last4] = 20;
  std::vector<float> o(out.size());
  const std::string msg = "indices[" + std::to_string(last4) + "] = 20 is outside table 4 (20 rows)";
  CHECK_THROWS_WITH_AS(e.forward(bad.indices, bad.offsets, o), doctest::Contains(msg.c_str()),
                       std::invalid_argument);
  bad = good;
  bad.offsets[3] = bad.offsets[2] - 1;
  CHECK_THROWS_WITH_AS(e.forward(bad.indices, bad.offsets, o), doctest::Contains("offsets[3]"),
                       std::invalid_argument);
  std::vector<float> small(o.size() - 1);
  CHECK_THROWS_WITH_AS(e.forward(good.indices, good.offsets, small), doctest::Contains("output.size()"),
                       std::invalid_argument);
  CHECK_THROWS_AS(e.backward(out, mpe::Sgd{0.1f}), std::logic_error);  // no forward pending
  // A value the store cannot hold, named by the caller's table and row (table 5 is the
  // second table of group 0, whose rows start after table 0's 40).
  std::vector<float> row2(2 * 16, 0.5f);
  row2[16 + 3] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(e.set_weights(5, row2, 7), doctest::Contains("weights[19] = inf (table 5, row 8)"),
                       std::invalid_argument);
  CHECK(e.save_bytes() == bytes0);
  CHECK(all_weights(e) == w0);
  CHECK(e.stats().lookups == s0.lookups);

  // A non-finite gradient in table 2's columns (D = 64): refused before any group steps.
  out = run_forward(e, good, mpe::Pooling::Sum);
  auto g = ref::random_floats(rng, out.size(), -1, 1);
  const std::size_t W = static_cast<std::size_t>(e.total_dim());
  g[1 * W + static_cast<std::size_t>(e.column(2)) + 7] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_msg = "grad_output[1, " + std::to_string(e.column(2) + 7) + "] = nan";
  CHECK_THROWS_WITH_AS(e.backward(g, mpe::Sgd{0.1f}), doctest::Contains(nan_msg.c_str()),
                       std::invalid_argument);
  CHECK(all_weights(e) == w0);
  CHECK(e.step() == 1);
  // A finite gradient whose row sum overflows in group 4 (D = 130) only: every row of
  // table 4 that occurs twice gets 3e38 + 3e38 = inf. No group is stepped.
  ref::Batch twice = good;
  {
    // Make bag 0 of table 4 hold row 0 twice.
    twice = ref::Batch{};
    twice.B = good.B;
    twice.offsets.push_back(0);
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(kSpecs.size()) * good.B; ++j) {
      if (j == 4 * good.B) {
        twice.indices.push_back(0);
        twice.indices.push_back(0);
      } else {
        twice.indices.push_back(j % 3);
      }
      twice.offsets.push_back(static_cast<std::int64_t>(twice.indices.size()));
    }
  }
  out = run_forward(e, twice, mpe::Pooling::Sum);
  const auto w1 = all_weights(e);  // after the forward: its evictions write dirty rows back
  g.assign(out.size(), 0.01f);
  for (std::size_t d = 0; d < 130; ++d) g[0 * W + static_cast<std::size_t>(e.column(4)) + d] = 3e38f;
  // Named in the caller's numbering (table 4 is table 0 of its group; row 0 of table 4 is
  // also hit by bag 18, so 3 occurrences).
  CHECK_THROWS_WITH_AS(e.backward(g, mpe::Sgd{1.0f}),
                       doctest::Contains("occurrence(s); table 4, row 0) overflows"), std::invalid_argument);
  CHECK(e.step() == 1);
  // Nothing was applied: a flush writes the cached rows back; weights read the same.
  CHECK(all_weights(e) == w1);
  // The batch is still awaiting backward: a finite gradient applies to every group.
  g.assign(out.size(), 0.01f);
  e.backward(g, mpe::Sgd{1.0f});
  CHECK(e.step() == 2);
  CHECK(all_weights(e) != w1);
}

TEST_CASE("mixed D: NonFinite::Skip skips every group and counts once") {
  using E = mpe::MixedDimEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
  mpe::MixedDimConfig c{kSpecs, 0.0, 4};
  c.non_finite = mpe::NonFinite::Skip;
  E e(c);
  e.init_uniform(-1, 1);
  std::mt19937_64 rng(2);
  const ref::Batch b = ref::random_batch(rng, rows_of(kSpecs), 4, 4, false);
  const auto w0 = all_weights(e);
  for (const std::int64_t table : {std::int64_t{0}, std::int64_t{4}}) {  // group 0's columns, then group 4's
    CAPTURE(table);
    const auto out = run_forward(e, b, mpe::Pooling::Sum);
    auto g = ref::random_floats(rng, out.size(), -1, 1);
    g[static_cast<std::size_t>(e.column(table))] = std::numeric_limits<float>::infinity();
    e.backward(g, mpe::Sgd{0.1f});
    CHECK(all_weights(e) == w0);
    CHECK(e.step() == 0);
  }
  CHECK(e.stats().skipped_steps == 2);
  // forward_inference refuses a NaN per-sample weight under Skip too (there is no step to
  // skip), naming the caller's position (the last occurrence's; its position inside its
  // group is smaller), with nothing changed.
  ref::Batch wb = b;
  wb.weights.assign(wb.indices.size(), 1.0f);
  const std::size_t p = wb.indices.size() - 1;
  wb.weights[p] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(static_cast<std::size_t>(wb.B * e.total_dim()));
  const std::string want =
      "MixedDimEmbedding::forward_inference: per_sample_weights[" + std::to_string(p) + "] = nan";
  CHECK_THROWS_WITH_AS(e.forward_inference(wb.indices, wb.offsets, out, mpe::Pooling::Sum, wb.weights),
                       doctest::Contains(want.c_str()), std::invalid_argument);
  CHECK(all_weights(e) == w0);
  // A training forward lets it through to the step's skip.
  e.forward(wb.indices, wb.offsets, out, mpe::Pooling::Sum, wb.weights);
  e.backward(std::vector<float>(out.size(), 1.0f), mpe::Sgd{0.1f});
  CHECK(all_weights(e) == w0);
  CHECK(e.stats().skipped_steps == 3);
}

/// The call counter of a CachedEmbedding (the header's `u64 calls`, the last field before
/// `u32 n_sections` and the header CRC; docs/checkpoint_format.md).
template <class G>
std::uint64_t calls_of(const G& g) {
  const std::vector<std::uint8_t> b = mpe::io::save_to_bytes(g);
  std::uint32_t H;
  std::memcpy(&H, b.data() + 12, 4);
  std::uint64_t calls;
  std::memcpy(&calls, b.data() + H - 16, 8);
  return calls;
}

TEST_CASE("mixed D: checkpoints resume bit-identically; bad bytes change nothing") {
  using E = mpe::MixedDimEmbedding<mpe::Int4Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::StateBf16>;
  const mpe::MixedDimConfig cfg{kSpecs, 0.1, 21};
  E a(cfg);
  a.init_uniform(-1, 1);
  std::mt19937_64 rng(4);
  std::vector<ref::Batch> batches;
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < 5; ++i) {
    batches.push_back(ref::random_batch(rng, rows_of(kSpecs), 6, 5, false));
    grads.push_back(ref::random_floats(rng, static_cast<std::size_t>(6 * total_dim(kSpecs)), -1, 1));
  }
  auto train = [&](E& e, int from, int to, std::vector<std::vector<float>>* outs) {
    for (int i = from; i < to; ++i) {
      const auto& b = batches[static_cast<std::size_t>(i)];
      const auto out = run_forward(e, b, mpe::Pooling::Mean);
      if (outs != nullptr) outs->push_back(out);
      e.backward(grads[static_cast<std::size_t>(i)], mpe::Adam{0.01f, 0.9f, 0.999f, 1e-8f});
    }
  };
  train(a, 0, 2, nullptr);
  a.prefetch(batches[2].indices, batches[2].offsets);  // a pending prefetch is part of the state
  const std::vector<std::uint8_t> bytes = a.save_bytes();
  std::vector<std::uint64_t> calls_at_save;  // every group's call counter (#40 item 7)
  for (std::size_t g = 0; g < a.num_groups(); ++g) calls_at_save.push_back(calls_of(a.group(g)));
  CHECK(calls_at_save[0] == 5u);  // 2 forward(), 2 backward(), 1 prefetch()
  const auto dir = std::filesystem::temp_directory_path() / ("mpe_mixed_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  a.save(dir / "a.mpe");
  {
    std::ifstream f(dir / "a.mpe", std::ios::binary);
    const std::vector<std::uint8_t> file((std::istreambuf_iterator<char>(f)),
                                         std::istreambuf_iterator<char>());
    CHECK(file == bytes);
  }
  std::vector<std::vector<float>> want, got_mem, got_file;
  train(a, 2, 5, &want);

  E b(cfg);
  b.load_bytes(bytes);
  CHECK(b.save_bytes() == bytes);
  for (std::size_t g = 0; g < b.num_groups(); ++g) CHECK(calls_of(b.group(g)) == calls_at_save[g]);
  train(b, 2, 5, &got_mem);
  E c(cfg);
  c.load(dir / "a.mpe");
  train(c, 2, 5, &got_file);
  CHECK(got_mem == want);
  CHECK(got_file == want);
  CHECK(all_weights(b) == all_weights(a));
  CHECK(all_weights(c) == all_weights(a));
  CHECK(b.step() == a.step());
  CHECK(b.stats().hits == a.stats().hits);
  CHECK(b.save_bytes() == a.save_bytes());  // the whole state, every group's call counter included
  CHECK(c.save_bytes() == a.save_bytes());

  // Every single-byte corruption site class: header, a group's bytes, the checksum.
  const auto before = b.save_bytes();
  for (const std::size_t at : {std::size_t{3}, std::size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(at);
    auto bad = bytes;
    bad[at] ^= 0x40;
    CHECK_THROWS_AS(b.load_bytes(bad), mpe::checkpoint_error);
    CHECK(b.save_bytes() == before);
  }
  auto cut = bytes;
  cut.resize(cut.size() / 3);
  CHECK_THROWS_WITH_AS(b.load_bytes(cut), doctest::Contains("truncated"), mpe::checkpoint_error);
  CHECK(b.save_bytes() == before);
  // Another seed in the object: the checkpoint's seed is taken (training resumes exactly).
  E d(mpe::MixedDimConfig{kSpecs, 0.1, 99});
  d.load_bytes(bytes);
  CHECK(d.config().seed == 21);
  std::vector<std::vector<float>> got_seed;
  train(d, 2, 5, &got_seed);
  CHECK(got_seed == want);
  // A checkpoint of other specs is refused naming the table.
  auto other_specs = kSpecs;
  other_specs[2].rows = 31;
  E other(mpe::MixedDimConfig{other_specs, 0.1, 21});
  CHECK_THROWS_WITH_AS(b.load_bytes(other.save_bytes()),
                       doctest::Contains("table 2 is (31, 64) in the checkpoint"), mpe::checkpoint_error);
  CHECK(b.save_bytes() == before);
  CHECK_THROWS_AS(b.load(dir / "missing.mpe"), mpe::checkpoint_error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("io::save_to_bytes is the file save() writes; load_from_bytes verifies like load()") {
  using One = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>;
  One a(mpe::EmbeddingConfig{{50, 70}, 24, 16, 3});
  a.init_uniform(-1, 1);
  std::mt19937_64 rng(6);
  const ref::Batch b = ref::random_batch(rng, {50, 70}, 5, 4, false);
  std::vector<float> out(static_cast<std::size_t>(5 * 2 * 24));
  a.forward(b.indices, b.offsets, out);
  a.backward(ref::random_floats(rng, out.size(), -1, 1), mpe::Sgd{0.1f});
  const auto bytes = mpe::io::save_to_bytes(a);
  const auto path =
      std::filesystem::temp_directory_path() / ("mpe_bytes_" + std::to_string(::getpid()) + ".mpe");
  a.save(path);
  std::ifstream f(path, std::ios::binary);
  const std::vector<std::uint8_t> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  CHECK(file == bytes);
  One c(a.config());
  mpe::io::load_from_bytes(c, bytes);
  CHECK(mpe::io::save_to_bytes(c) == bytes);
  auto bad = bytes;
  bad[bad.size() / 2] ^= 1;
  One d(a.config());
  const auto fresh = mpe::io::save_to_bytes(d);
  CHECK_THROWS_WITH_AS(mpe::io::load_from_bytes(d, bad, "my state"), doctest::Contains("'my state'"),
                       mpe::checkpoint_error);
  CHECK(mpe::io::save_to_bytes(d) == fresh);
}
