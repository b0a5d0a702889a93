// SPDX-License-Identifier: Apache-2.0
// EmbeddingConfig::max_range_growth (bounded range growth of a store row's optimizer update):
//  - every store row an SGD step updates equals an independent computation: the old row's
//    bytes decoded here (the plain grid-end formula from the header), the summed gradient
//    in position order, the update with num:: operations, the clamp into [lo - m, hi + m]
//    (m = g * (hi - lo)), then Storage::store<StochasticRounding> with the rounding stream
//    of that update (row, completed steps, site StoreUpdate); rows not updated keep their
//    bytes. INT2 and INT8, g = 0.01 (the clamp binds on some elements, not on others) and
//    g = 0 (the same computation without the clamp: the default keeps the old bits);
//  - the laned path (AsyncHostBackend: CudaBackend's code, 32 emulated lanes) gives
//    HostBackend's bytes with g > 0, for Sgd and for Adagrad (updates from its state);
//  - cached rows are not clamped: a cached table's FP32 rows after a step equal those of
//    the table without the setting, while its store rows differ;
//  - MixedDimEmbedding passes the field to its groups;
//  - NaN, -0.1, 1.5, and 0.01 with an Fp16 or Fp32 store are refused at construction,
//    naming the field, the value and the format.
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

namespace {

const std::vector<std::int64_t> kTables{23, 4, 70};
constexpr std::int64_t kB = 16;

template <class S, class B = mpe::HostBackend>
using Table = mpe::CachedEmbedding<S, mpe::Lru<4>, mpe::StochasticRounding, B>;

mpe::EmbeddingConfig config(std::int32_t D, float growth, std::int64_t cache_rows = 0) {
  mpe::EmbeddingConfig c;
  c.table_rows = kTables;
  c.dim = D;
  c.cache_rows = cache_rows;
  c.seed = 91;
  c.max_range_growth = growth;
  return c;
}

/// The old row's grid ends from its header, as the field's documentation writes them:
/// lo = bias, hi = bias + top * scale (num:: operations), top the largest code.
template <class S>
void grid_ends(const std::uint8_t* row, std::int32_t D, float& lo, float& hi) {
  float scale, bias;
  float top;
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
    std::memcpy(&scale, row + D, 4);  // f32 scale, f32 bias after the D codes
    std::memcpy(&bias, row + D + 4, 4);
    top = 255.0f;
  } else {
    static_assert(std::is_same_v<S, mpe::Int2Rowwise>);
    const std::size_t nb = (static_cast<std::size_t>(D) + 3) / 4;  // FP16 scale, bias after the codes
    std::uint16_t h;
    std::memcpy(&h, row + nb, 2);
    scale = mpe::num::half_to_float(h);
    std::memcpy(&h, row + nb + 2, 2);
    bias = mpe::num::half_to_float(h);
    top = 3.0f;
  }
  lo = bias;
  hi = mpe::num::add(bias, mpe::num::mul(top, scale));
}

/// Per global row, its summed gradient in position order (the first value sets the sum;
/// every row here has fewer than 256 occurrences, so this is the documented order).
std::vector<std::pair<std::int64_t, std::vector<float>>> row_gradients(const ref::Batch& b,
                                                                       const std::vector<float>& grad_out,
                                                                       std::int32_t D) {
  const auto T = static_cast<std::int64_t>(kTables.size());
  std::vector<std::int64_t> first(kTables.size(), 0);
  for (std::size_t t = 1; t < kTables.size(); ++t) first[t] = first[t - 1] + kTables[t - 1];
  std::vector<std::vector<float>> g(static_cast<std::size_t>(first.back() + kTables.back()));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t s = 0; s < b.B; ++s) {
      const std::int64_t j = t * b.B + s;
      for (std::int64_t i = b.offsets[j]; i < b.offsets[j + 1]; ++i) {
        auto& row = g[static_cast<std::size_t>(first[t] + b.indices[i])];
        const float* go = grad_out.data() + (s * T + t) * D;
        if (row.empty()) {
          row.assign(go, go + D);
        } else {
          for (std::int32_t d = 0; d < D; ++d) row[d] = mpe::num::add(row[d], go[d]);
        }
      }
    }
  }
  std::vector<std::pair<std::int64_t, std::vector<float>>> out;
  for (std::size_t r = 0; r < g.size(); ++r)
    if (!g[r].empty()) out.emplace_back(static_cast<std::int64_t>(r), std::move(g[r]));
  return out;
}

/// Counts of the independent check: elements the clamp moved, updated rows it left alone.
struct Binding {
  long clamped = 0, rows_free = 0, rows = 0;
};

/// Trains `steps` SGD steps of a table without a cache, learning rate `big` on even steps
/// and 0.001 on odd ones, and checks every step's store bytes against the independent
/// computation (module comment).
template <class S>
Binding check_store_updates(std::int32_t D, float growth, float big, int steps) {
  CAPTURE(S::name);
  CAPTURE(growth);
  Table<S> emb(config(D, growth));
  std::mt19937_64 rng(5);
  const std::int64_t R = emb.total_rows();
  emb.set_weights(ref::random_floats(rng, static_cast<std::size_t>(R * D), -1, 1));
  const std::size_t stride = emb.state_row_bytes();
  const auto T = static_cast<std::int64_t>(kTables.size());
  Binding bind;
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const float lr = step % 2 == 0 ? big : 0.001f;
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 4, false);
    std::vector<float> out(static_cast<std::size_t>(kB * T * D));
    emb.forward(b.indices, b.offsets, out);
    const std::vector<float> go = ref::random_floats(rng, out.size(), -1, 1);
    std::vector<std::uint8_t> before, after;
    emb.read_store_rows(0, static_cast<std::size_t>(R), before);
    const auto completed = static_cast<std::uint32_t>(emb.step());
    emb.backward(go, mpe::Sgd{lr});
    emb.read_store_rows(0, static_cast<std::size_t>(R), after);

    std::vector<std::uint8_t> expect = before;
    const mpe::num::RowStream stream{91};
    for (const auto& [r, g] : row_gradients(b, go, D)) {
      const std::uint8_t* old = before.data() + static_cast<std::size_t>(r) * stride;
      const typename S::Reader rd(old, D);
      std::vector<float> x(static_cast<std::size_t>(D));
      for (std::int32_t d = 0; d < D; ++d) x[d] = mpe::num::sub(rd[d], mpe::num::mul(lr, g[d]));
      float lo, hi;
      grid_ends<S>(old, D, lo, hi);
      long moved = 0;
      if (growth > 0.0f && hi != lo) {
        const float m = mpe::num::mul(growth, mpe::num::sub(hi, lo));
        const float a = mpe::num::sub(lo, m), z = mpe::num::add(hi, m);
        for (auto& v : x) {
          const float c = std::min(std::max(v, a), z);
          moved += c != v;
          v = c;
        }
      }
      bind.clamped += moved;
      bind.rows_free += moved == 0;
      ++bind.rows;
      const mpe::num::RowRng rrng = stream.at(r, completed, mpe::num::RoundingSite::StoreUpdate);
      S::template store<mpe::StochasticRounding>(x.data(), D,
                                                 expect.data() + static_cast<std::size_t>(r) * stride, rrng);
    }
    for (std::int64_t r = 0; r < R; ++r) {
      CAPTURE(r);
      const auto at = static_cast<std::size_t>(r) * stride;
      REQUIRE(std::memcmp(after.data() + at, expect.data() + at, stride) == 0);
    }
  }
  return bind;
}

template <class S, class B, class Opt>
std::vector<std::uint8_t> train_store(float growth, std::int64_t cache_rows, const Opt& opt, int steps,
                                      std::vector<float>* weights = nullptr) {
  constexpr std::int32_t D = 12;
  Table<S, B> emb(config(D, growth, cache_rows));
  std::mt19937_64 rng(8);
  const std::int64_t R = emb.total_rows();
  emb.set_weights(ref::random_floats(rng, static_cast<std::size_t>(R * D), -1, 1));
  const auto T = static_cast<std::int64_t>(kTables.size());
  for (int step = 0; step < steps; ++step) {
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 4, false);
    std::vector<float> out(static_cast<std::size_t>(kB * T * D));
    emb.forward(b.indices, b.offsets, out);
    emb.backward(ref::random_floats(rng, out.size(), -1, 1), opt);
  }
  if (weights) {
    weights->resize(static_cast<std::size_t>(R * D));
    emb.get_weights(*weights);
  }
  std::vector<std::uint8_t> bytes;
  emb.read_store_rows(0, static_cast<std::size_t>(R), bytes);
  return bytes;
}

template <class S>
void check_refused(float g, const std::string& value) {
  CAPTURE(value);
  try {
    Table<S> emb(config(8, g));
    FAIL("constructed with max_range_growth = " << value);
  } catch (const std::invalid_argument& e) {
    const std::string w = e.what();
    CAPTURE(w);
    CHECK(w.find("config.max_range_growth = " + value) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("max_range_growth: each store update equals the independent clamp and store") {
  // lr 3 on values in [-1, 1] with gradients summing to a few units: most rows' new values
  // leave their old grid by far more than 1 % of its range; lr 0.001 moves them by less.
  SUBCASE("int2, g = 0.01") {
    const Binding b = check_store_updates<mpe::Int2Rowwise>(13, 0.01f, 3.0f, 6);
    CHECK(b.clamped > 0);
    CHECK(b.rows_free > 0);
    CHECK(b.rows_free < b.rows);
  }
  SUBCASE("int8, g = 0.01") {
    const Binding b = check_store_updates<mpe::Int8Rowwise>(13, 0.01f, 3.0f, 6);
    CHECK(b.clamped > 0);
    CHECK(b.rows_free > 0);
  }
  SUBCASE("g = 0: the unclamped computation (the default's bits)") {
    CHECK(check_store_updates<mpe::Int2Rowwise>(13, 0.0f, 3.0f, 4).clamped == 0);
    CHECK(check_store_updates<mpe::Int8Rowwise>(13, 0.0f, 3.0f, 4).clamped == 0);
  }
}

TEST_CASE("max_range_growth: the laned path gives the host's bytes") {
  const mpe::Sgd sgd{3.0f};
  const mpe::Adagrad ada{2.0f};
  for (std::int64_t cache_rows : {0, 16}) {
    CAPTURE(cache_rows);
    const auto host = train_store<mpe::Int2Rowwise, mpe::HostBackend>(0.01f, cache_rows, sgd, 6);
    CHECK(train_store<mpe::Int2Rowwise, ref::AsyncHostBackend>(0.01f, cache_rows, sgd, 6) == host);
    CHECK(train_store<mpe::Int2Rowwise, mpe::HostBackend>(0.0f, cache_rows, sgd, 6) != host);  // it binds
    const auto host_ada = train_store<mpe::Int2Rowwise, mpe::HostBackend>(0.01f, cache_rows, ada, 6);
    CHECK(train_store<mpe::Int2Rowwise, ref::AsyncHostBackend>(0.01f, cache_rows, ada, 6) == host_ada);
    CHECK(train_store<mpe::Int2Rowwise, mpe::HostBackend>(0.0f, cache_rows, ada, 6) != host_ada);
  }
}

TEST_CASE("max_range_growth: cached rows are not clamped") {
  // One step from the same weights: every hit row was filled from the same store row, and
  // its FP32 update is the unbounded one; rows left to the store (conflicts) are clamped.
  constexpr std::int32_t D = 12;
  const auto T = static_cast<std::int64_t>(kTables.size());
  Table<mpe::Int2Rowwise> a(config(D, 0.01f, 40)), u(config(D, 0.0f, 40));
  std::mt19937_64 rng(3);
  const std::int64_t R = a.total_rows();
  const auto w = ref::random_floats(rng, static_cast<std::size_t>(R * D), -1, 1);
  a.set_weights(w);
  u.set_weights(w);
  const ref::Batch b = ref::random_batch(rng, kTables, 3 * kB, 4, false);
  std::vector<float> out(static_cast<std::size_t>(3 * kB * T * D));
  a.forward(b.indices, b.offsets, out);
  u.forward(b.indices, b.offsets, out);
  const auto go = ref::random_floats(rng, out.size(), -1, 1);
  a.backward(go, mpe::Sgd{3.0f});
  u.backward(go, mpe::Sgd{3.0f});
  REQUIRE(a.stats().hits + a.stats().misses > a.stats().conflict_misses);
  REQUIRE(a.stats().conflict_misses > 0);  // some rows were updated in the store
  const mpe::TableState sa = a.state(), su = u.state();
  REQUIRE(sa.tags.size() == su.tags.size());
  CHECK(std::equal(sa.tags.begin(), sa.tags.end(), su.tags.begin()));
  long cached = 0;
  for (std::size_t s = 0; s < sa.tags.size(); ++s) {
    if (sa.tags[s] < 0) continue;
    ++cached;
    CAPTURE(s);
    CHECK(std::memcmp(sa.cache_rows.data() + s * D, su.cache_rows.data() + s * D, D * sizeof(float)) == 0);
  }
  CHECK(cached > 0);
  std::vector<std::uint8_t> sta, stu;
  a.read_store_rows(0, static_cast<std::size_t>(R), sta);
  u.read_store_rows(0, static_cast<std::size_t>(R), stu);
  CHECK(sta != stu);  // the clamp bound on the store rows
}

TEST_CASE("max_range_growth: MixedDimEmbedding passes it to its groups") {
  // One table: group 0 is a CachedEmbedding of that table with the same seed.
  constexpr std::int32_t D = 12;
  mpe::MixedDimConfig mc;
  mc.tables = {{70, D}};
  mc.seed = 91;
  mc.max_range_growth = 0.01f;
  mpe::MixedDimEmbedding<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding> mixed(mc);
  mpe::EmbeddingConfig c = config(D, 0.01f);
  c.table_rows = {70};
  Table<mpe::Int2Rowwise> one(c);
  c.max_range_growth = 0.0f;
  Table<mpe::Int2Rowwise> unbounded(c);
  std::mt19937_64 rng(2);
  const auto w = ref::random_floats(rng, 70 * D, -1, 1);
  mixed.set_weights(0, w);
  one.set_weights(w);
  unbounded.set_weights(w);
  for (int step = 0; step < 5; ++step) {
    const ref::Batch b = ref::random_batch(rng, {70}, kB, 4, false);
    std::vector<float> out(static_cast<std::size_t>(kB * D));
    mixed.forward(b.indices, b.offsets, out);
    one.forward(b.indices, b.offsets, out);
    unbounded.forward(b.indices, b.offsets, out);
    const auto go = ref::random_floats(rng, out.size(), -1, 1);
    mixed.backward(go, mpe::Sgd{3.0f});
    one.backward(go, mpe::Sgd{3.0f});
    unbounded.backward(go, mpe::Sgd{3.0f});
  }
  std::vector<float> wm(70 * D), wo(70 * D), wu(70 * D);
  mixed.get_weights(0, wm);
  one.get_weights(wo);
  unbounded.get_weights(wu);
  CHECK(wm == wo);
  CHECK(wo != wu);

  mc.max_range_growth = 1.5f;
  CHECK_THROWS_WITH_AS((mpe::MixedDimEmbedding<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding>(mc)),
                       doctest::Contains("config.max_range_growth = 1.5"), std::invalid_argument);
  // Named by MixedDimEmbedding itself (before any group is built), the store too.
  mc.max_range_growth = 0.01f;
  CHECK_THROWS_WITH_AS(
      (mpe::MixedDimEmbedding<mpe::Fp16, mpe::Lru<4>, mpe::StochasticRounding>(mc)),
      doctest::Contains("MixedDimEmbedding: config.max_range_growth = 0.01 needs a store with an "
                        "affine per-row grid"),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      (mpe::MixedDimEmbedding<mpe::Fp16, mpe::Lru<4>, mpe::StochasticRounding>::planned_memory(
          mc, [](std::int32_t) { return std::int64_t{0}; })),
      doctest::Contains("this store is fp16"), std::invalid_argument);
}

TEST_CASE("max_range_growth: invalid values and formats are refused at construction") {
  check_refused<mpe::Int2Rowwise>(std::numeric_limits<float>::quiet_NaN(), "nan");
  check_refused<mpe::Int2Rowwise>(std::numeric_limits<float>::infinity(), "inf");
  check_refused<mpe::Int2Rowwise>(-0.1f, "-0.1");
  check_refused<mpe::Int8Rowwise>(1.5f, "1.5");
  check_refused<mpe::Fp16>(0.01f, "0.01");
  check_refused<mpe::Fp32>(0.01f, "0.01");
  // The format is named too.
  CHECK_THROWS_WITH_AS(Table<mpe::Fp16>(config(8, 0.01f)), doctest::Contains("this store is fp16"),
                       std::invalid_argument);
  // Valid ends: 0 with any format, 1 with an affine grid.
  CHECK_NOTHROW(Table<mpe::Fp32>(config(8, 0.0f)));
  CHECK_NOTHROW(Table<mpe::Int4Rowwise>(config(8, 1.0f)));
}
