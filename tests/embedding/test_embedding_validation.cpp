// SPDX-License-Identifier: Apache-2.0
// Invalid input to CachedEmbedding: each case throws the documented exception type, the
// message names the argument and the offending value, and nothing changes. "Nothing
// changes" is checked against an untouched twin that saw the same history: same
// get_weights bits, same stats, same store/cache/optimizer/metadata bytes, and the same
// outputs, weights and stats after the pending backward and one more training step.
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "reference/embedding_bag.hpp"
#include "reference/stats_equal.hpp"

namespace {

// Int8 store + a small LRU cache + stochastic rounding: the configuration where a stray
// change (a populate, an RNG step, a dirty bit, a quantized write) is most visible.
using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
const std::vector<std::int64_t> kTables{10, 6, 20};
constexpr int kD = 5;
constexpr std::int64_t kB = 4;

mpe::EmbeddingConfig config(mpe::NonFinite nf = mpe::NonFinite::Throw) {
  mpe::EmbeddingConfig c;
  c.table_rows = kTables;
  c.dim = kD;
  c.cache_rows = 8;
  c.seed = 77;
  c.non_finite = nf;
  return c;
}

std::size_t out_size(std::int64_t B) { return static_cast<std::size_t>(B) * kTables.size() * kD; }

/// Runs f, which must throw Ex (or, when exact, exactly Ex and no subclass); each of
/// `parts` must appear in the message.
template <class Ex, bool exact = false, class F>
void expect_throw(F&& f, std::initializer_list<std::string> parts) {
  bool thrown = false;
  try {
    f();
  } catch (const Ex& e) {
    thrown = true;
    if constexpr (exact) CHECK(typeid(e) == typeid(Ex));
    const std::string m = e.what();
    for (const auto& p : parts) CHECK_MESSAGE(m.find(p) != std::string::npos, "'" << p << "' not in: " << m);
  } catch (const std::exception& e) {
    FAIL("wrong exception type: " << typeid(e).name() << ": " << e.what());
  }
  CHECK_MESSAGE(thrown, "no exception");
}

using ref::check_stats_equal;

std::vector<float> weights_of(const E& e) {
  std::vector<float> w(static_cast<std::size_t>(e.total_rows()) * kD);
  e.get_weights(w);
  return w;
}

/// Two embeddings with the same history: set_weights, two training steps, and a third
/// forward awaiting its backward. `victim` receives the bad call, `twin` does not.
struct Twins {
  E victim, twin;
  std::mt19937_64 rng{3};
  ref::Batch pending;
  explicit Twins(mpe::NonFinite nf = mpe::NonFinite::Throw) : victim(config(nf)), twin(config(nf)) {
    const auto w = ref::random_floats(rng, static_cast<std::size_t>(victim.total_rows()) * kD, -1, 1);
    victim.set_weights(w);
    twin.set_weights(w);
    for (int s = 0; s < 3; ++s) {
      pending = ref::random_batch(rng, kTables, kB, 4, false);
      std::vector<float> o1(out_size(kB)), o2(out_size(kB));
      victim.forward(pending.indices, pending.offsets, o1);
      twin.forward(pending.indices, pending.offsets, o2);
      if (s == 2) break;
      const auto g = ref::random_floats(rng, o1.size(), -1, 1);
      victim.backward(g, mpe::RowwiseAdagrad{0.5f});
      twin.backward(g, mpe::RowwiseAdagrad{0.5f});
    }
  }

  /// The victim must be indistinguishable from the twin, now and after training on.
  void check_unchanged(bool pending_backward = true) {
    CHECK(ref::first_diff(weights_of(victim), weights_of(twin)) == -1);
    check_stats_equal(victim.stats(), twin.stats());
    CHECK(victim.step() == twin.step());
    const auto mv = victim.memory(), mt = twin.memory();
    CHECK(mv.store_bytes == mt.store_bytes);
    CHECK(mv.cache_bytes == mt.cache_bytes);
    CHECK(mv.optimizer_bytes == mt.optimizer_bytes);
    CHECK(mv.metadata_bytes == mt.metadata_bytes);
    if (pending_backward) {
      const auto g = ref::random_floats(rng, out_size(kB), -1, 1);
      victim.backward(g, mpe::RowwiseAdagrad{0.5f});
      twin.backward(g, mpe::RowwiseAdagrad{0.5f});
      CHECK(ref::first_diff(weights_of(victim), weights_of(twin)) == -1);
    }
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 4, false);
    std::vector<float> o1(out_size(kB)), o2(out_size(kB));
    victim.forward(b.indices, b.offsets, o1);
    twin.forward(b.indices, b.offsets, o2);
    CHECK(ref::first_diff(o1, o2) == -1);
    const auto g = ref::random_floats(rng, o1.size(), -1, 1);
    victim.backward(g, mpe::RowwiseAdagrad{0.5f});
    twin.backward(g, mpe::RowwiseAdagrad{0.5f});
    CHECK(ref::first_diff(weights_of(victim), weights_of(twin)) == -1);
    check_stats_equal(victim.stats(), twin.stats());
    CHECK(victim.step() == twin.step());
  }
};

// B = 2, T = 3: bags (t0: {1, 9}, {}), (t1: {5}, {0, 0}), (t2: {19}, {3})
const std::vector<std::int64_t> kIdx{1, 9, 5, 0, 0, 19, 3};
const std::vector<std::int64_t> kOff{0, 2, 2, 3, 5, 6, 7};

/// Calls forward, forward_inference and prefetch with the same arguments: all must throw
/// the same way and change nothing.
void expect_all_lookups_reject(const std::vector<std::int64_t>& idx, const std::vector<std::int64_t>& off,
                               std::initializer_list<std::string> parts, bool check_prefetch = true) {
  Twins t;
  std::vector<float> out(out_size((static_cast<std::int64_t>(off.size()) - 1) / 3));
  expect_throw<std::invalid_argument>([&] { t.victim.forward(idx, off, out); }, parts);
  expect_throw<std::invalid_argument>([&] { t.victim.forward_inference(idx, off, out); }, parts);
  if (check_prefetch) expect_throw<std::invalid_argument>([&] { t.victim.prefetch(idx, off); }, parts);
  t.check_unchanged();
}

}  // namespace

TEST_CASE("a valid call on the twins trains identically (the harness itself can see a change)") {
  Twins t;
  // One extra training step on the victim only must be visible to check_unchanged's
  // comparisons: compare directly here.
  const auto g = ref::random_floats(t.rng, out_size(kB), -1, 1);
  t.victim.backward(g, mpe::RowwiseAdagrad{0.5f});
  CHECK(ref::first_diff(weights_of(t.victim), weights_of(t.twin)) != -1);
}

TEST_CASE("an index outside its table is rejected, including index == rows (never the next table)") {
  SUBCASE("index == rows of table 0 (would be global row 10, table 1's first row)") {
    auto idx = kIdx;
    idx[1] = 10;
    expect_all_lookups_reject(idx, kOff, {"indices[1] = 10", "table 0", "10 rows"});
  }
  SUBCASE("index == rows of table 1 (would be table 2's first row)") {
    auto idx = kIdx;
    idx[3] = 6;
    expect_all_lookups_reject(idx, kOff, {"indices[3] = 6", "table 1"});
  }
  SUBCASE("index == rows of the last table") {
    auto idx = kIdx;
    idx[6] = 20;
    expect_all_lookups_reject(idx, kOff, {"indices[6] = 20", "table 2"});
  }
  SUBCASE("negative index") {
    auto idx = kIdx;
    idx[2] = -1;
    expect_all_lookups_reject(idx, kOff, {"indices[2] = -1"});
  }
  SUBCASE("huge index") {
    auto idx = kIdx;
    idx[0] = std::numeric_limits<std::int64_t>::max();
    expect_all_lookups_reject(idx, kOff,
                              {"indices[0] = " + std::to_string(std::numeric_limits<std::int64_t>::max())});
  }
  SUBCASE("two bad indices: the first position is reported") {
    auto idx = kIdx;
    idx[5] = 25;
    idx[4] = -3;
    expect_all_lookups_reject(idx, kOff, {"indices[4] = -3"});
  }
}

TEST_CASE("malformed offsets are rejected") {
  SUBCASE("offsets[0] != 0") {
    auto off = kOff;
    off[0] = 1;
    expect_all_lookups_reject(kIdx, off, {"offsets[0] = 1"});
  }
  SUBCASE("decreasing") {
    auto off = kOff;
    off[3] = 1;  // offsets[2] = 2 > offsets[3] = 1
    expect_all_lookups_reject(kIdx, off, {"offsets[3] = 1", "offsets[2] = 2"});
  }
  SUBCASE("last != indices.size()") {
    auto off = kOff;
    off[6] = 6;
    expect_all_lookups_reject(kIdx, off, {"offsets[6] = 6", "indices.size() = 7"});
  }
  SUBCASE("last beyond indices.size()") {
    auto off = kOff;
    off[6] = 8;
    expect_all_lookups_reject(kIdx, off, {"offsets[6] = 8"});
  }
  SUBCASE("B not whole: offsets.size() - 1 not a multiple of T") {
    const std::vector<std::int64_t> off{0, 2, 2, 3, 7};
    Twins t;
    std::vector<float> out(out_size(1));
    expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, off, out); },
                                        {"offsets.size() = 5", "T = 3"});
    expect_throw<std::invalid_argument>([&] { t.victim.forward_inference(kIdx, off, out); },
                                        {"offsets.size() = 5"});
    expect_throw<std::invalid_argument>([&] { t.victim.prefetch(kIdx, off); }, {"offsets.size() = 5"});
    t.check_unchanged();
  }
  SUBCASE("empty offsets") {
    Twins t;
    std::vector<float> out;
    expect_throw<std::invalid_argument>([&] { t.victim.forward({}, {}, out); }, {"offsets.size() = 0"});
    t.check_unchanged();
  }
}

TEST_CASE("B = 0 is allowed and changes no weight") {
  Twins t;
  const std::vector<std::int64_t> off{0};
  std::vector<float> out;
  t.victim.forward({}, off, out);
  t.victim.backward({}, mpe::RowwiseAdagrad{0.5f});
  t.twin.backward(ref::random_floats(t.rng, out_size(kB), -1, 1), mpe::RowwiseAdagrad{0.5f});
  // the victim's pending batch was replaced by the empty one: weights are the pre-step ones
  CHECK(t.victim.step() == t.twin.step());
}

TEST_CASE("wrong output, gradient and per-sample-weight sizes are rejected") {
  SUBCASE("output too small / too large") {
    for (const std::size_t n : {out_size(2) - 1, out_size(2) + kD}) {
      Twins t;
      std::vector<float> out(n);
      const std::string part = "output.size() = " + std::to_string(n);
      expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, kOff, out); },
                                          {part, "B*T*D", "(B = (offsets.size() - 1) / T)"});
      expect_throw<std::invalid_argument>([&] { t.victim.forward_inference(kIdx, kOff, out); }, {part});
      t.check_unchanged();
    }
  }
  SUBCASE("output size after a matching prefetch") {
    Twins t;
    t.victim.backward(ref::random_floats(t.rng, out_size(kB), -1, 1), mpe::RowwiseAdagrad{0.5f});
    t.twin.backward(ref::random_floats(t.rng, out_size(kB), -1, 1), mpe::RowwiseAdagrad{0.5f});
    std::vector<float> out(3);
    t.victim.prefetch(kIdx, kOff);
    expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, kOff, out); }, {"output.size() = 3"});
  }
  SUBCASE("grad_output of the wrong size") {
    Twins t;
    std::vector<float> g(out_size(kB) + 1, 0.5f);
    expect_throw<std::invalid_argument>([&] { t.victim.backward(g, mpe::RowwiseAdagrad{0.5f}); },
                                        {"grad_output.size() = " + std::to_string(g.size())});
    t.check_unchanged();
  }
  SUBCASE("per_sample_weights of the wrong size") {
    Twins t;
    std::vector<float> out(out_size(2));
    const std::vector<float> w(kIdx.size() - 1, 1.0f);
    expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, kOff, out, mpe::Pooling::Sum, w); },
                                        {"per_sample_weights.size() = 6", "indices.size() = 7"});
    expect_throw<std::invalid_argument>(
        [&] { t.victim.forward_inference(kIdx, kOff, out, mpe::Pooling::Sum, w); },
        {"per_sample_weights.size() = 6"});
    t.check_unchanged();
  }
  SUBCASE("per_sample_weights with mean pooling") {
    Twins t;
    std::vector<float> out(out_size(2));
    const std::vector<float> w(kIdx.size(), 1.0f);
    expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, kOff, out, mpe::Pooling::Mean, w); },
                                        {"per_sample_weights", "Pooling::Sum",
                                         "Pooling::Mean with " + std::to_string(w.size()) + " weights"});
    expect_throw<std::invalid_argument>(
        [&] { t.victim.forward_inference(kIdx, kOff, out, mpe::Pooling::Mean, w); },
        {"per_sample_weights", "Pooling::Mean with " + std::to_string(w.size()) + " weights"});
    t.check_unchanged();
  }
}

TEST_CASE("grad_output: the smallest non-finite position, in empty and occupied bags, on both host paths") {
  // Bags (t, b), table-major: some empty, some with repeated rows. grad_output (B, T*D)
  // holds bag (t, b) at [(b*T + t)*D, + D): empty bags at 5-9, 15-19, 25-29, 40-44, 45-49,
  // 50-54; occupied at 0-4, 10-14, 20-24, 30-34, 35-39, 55-59. One thread sums the
  // gradients in memory order, two gather each row's occurrences in sorted order: each must
  // report the smallest position and change nothing.
  const std::vector<std::int64_t> idx{1, 2, 3, 0, 0, 5, 7, 19, 7};
  const std::vector<std::int64_t> off{0, 2, 2, 3, 3, 3, 5, 6, 6, 7, 7, 7, 9};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::vector<std::size_t>, std::size_t>> cases{
      {{7}, 7}, {{22}, 22}, {{57, 27}, 27}, {{33, 47}, 33}, {{58, 12}, 12}, {{3, 59}, 3}, {{44, 9}, 9}};
  for (const int threads : {1, 2}) {
    for (const auto& [bad, first] : cases) {
      CAPTURE(threads);
      CAPTURE(first);
      E e(config(), mpe::HostBackend{.num_threads = threads});
      std::mt19937_64 rng(5);
      e.set_weights(ref::random_floats(rng, static_cast<std::size_t>(e.total_rows()) * kD, -1, 1));
      std::vector<float> out(out_size(kB));
      e.forward(idx, off, out);
      const auto before = weights_of(e);
      auto g = ref::random_floats(rng, out.size(), -1, 1);
      for (std::size_t k = 0; k < bad.size(); ++k) g[bad[k]] = k % 2 ? inf : nan;
      const float v = g[first];
      expect_throw<std::invalid_argument>(
          [&] { e.backward(g, mpe::Sgd{0.1f}); },
          {"grad_output[" + std::to_string(first) + "] = " + std::to_string(v)});
      CHECK(ref::first_diff(weights_of(e), before) == -1);
      CHECK(e.step() == 0);
      // the forward still awaits its backward, which a finite gradient now completes
      for (const std::size_t k : bad) g[k] = 0.5f;
      e.backward(g, mpe::Sgd{0.1f});
      CHECK(e.step() == 1);
      CHECK(ref::first_diff(weights_of(e), before) != -1);
    }
  }
}

TEST_CASE("non-finite per-sample weights and gradients") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SUBCASE("per_sample_weights: Throw") {
    for (const float bad : {inf, -inf, nan}) {
      Twins t;
      std::vector<float> out(out_size(2));
      std::vector<float> w(kIdx.size(), 1.0f);
      w[4] = bad;
      expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, kOff, out, mpe::Pooling::Sum, w); },
                                          {"per_sample_weights[4] = " + std::to_string(bad)});
      expect_throw<std::invalid_argument>(
          [&] { t.victim.forward_inference(kIdx, kOff, out, mpe::Pooling::Sum, w); },
          {"per_sample_weights[4]"});
      t.check_unchanged();
    }
  }
  SUBCASE("grad_output: Throw") {
    for (const float bad : {inf, -inf, nan}) {
      Twins t;
      auto g = ref::random_floats(t.rng, out_size(kB), -1, 1);
      g[7] = bad;
      expect_throw<std::invalid_argument>([&] { t.victim.backward(g, mpe::RowwiseAdagrad{0.5f}); },
                                          {"grad_output[7] = " + std::to_string(bad), "not finite"});
      t.check_unchanged();  // the forward is still awaiting its backward
    }
  }
  SUBCASE("grad_output: Skip skips the whole step and counts it") {
    Twins t(mpe::NonFinite::Skip);
    auto g = ref::random_floats(t.rng, out_size(kB), -1, 1);
    g[0] = nan;
    const auto before = weights_of(t.victim);
    const auto step = t.victim.step();
    t.victim.backward(g, mpe::RowwiseAdagrad{0.5f});
    CHECK(t.victim.stats().skipped_steps == 1);
    CHECK(t.victim.step() == step);
    CHECK(ref::first_diff(weights_of(t.victim), before) == -1);
    CHECK(t.victim.memory().optimizer_bytes == t.twin.memory().optimizer_bytes);
    // the skipped step consumed the forward
    expect_throw<std::logic_error, true>([&] { t.victim.backward(g, mpe::RowwiseAdagrad{0.5f}); },
                                         {"backward"});
    // the twin skips too (same input), then both train identically
    t.twin.backward(g, mpe::RowwiseAdagrad{0.5f});
    t.check_unchanged(false);
  }
  SUBCASE("per_sample_weights: Skip computes the forward and skips its step") {
    Twins t(mpe::NonFinite::Skip);
    t.victim.backward(ref::random_floats(t.rng, out_size(kB), -1, 1), mpe::RowwiseAdagrad{0.5f});
    std::vector<float> out(out_size(2));
    std::vector<float> w(kIdx.size(), 1.0f);
    w[2] = inf;
    const auto step = t.victim.step();
    const auto skipped = t.victim.stats().skipped_steps;
    t.victim.forward(kIdx, kOff, out, mpe::Pooling::Sum, w);
    // (the forward's populate may write back evicted rows: compare from here on)
    const auto before = weights_of(t.victim);
    // bag 2 (table 1, sample 0) holds the infinite weight: its output is not finite
    CHECK(!std::isfinite(out[1 * kD]));
    t.victim.backward(std::vector<float>(out.size(), 0.25f), mpe::RowwiseAdagrad{0.5f});
    CHECK(t.victim.stats().skipped_steps == skipped + 1);
    CHECK(t.victim.step() == step);
    CHECK(ref::first_diff(weights_of(t.victim), before) == -1);
  }
}

TEST_CASE("backward misuse throws std::logic_error and changes nothing") {
  SUBCASE("backward without forward") {
    E e(config());
    std::vector<float> g(out_size(kB));
    expect_throw<std::logic_error, true>([&] { e.backward(g, mpe::Sgd{0.1f}); }, {"backward", "forward"});
    CHECK(e.step() == 0);
    CHECK(e.memory().optimizer_bytes == 0);
  }
  SUBCASE("a second backward for one forward") {
    Twins t;
    const auto g = ref::random_floats(t.rng, out_size(kB), -1, 1);
    t.victim.backward(g, mpe::RowwiseAdagrad{0.5f});
    t.twin.backward(g, mpe::RowwiseAdagrad{0.5f});
    expect_throw<std::logic_error, true>([&] { t.victim.backward(g, mpe::RowwiseAdagrad{0.5f}); },
                                         {"backward"});
    t.check_unchanged(false);
  }
  SUBCASE("a changed optimizer kind") {
    Twins t;
    const auto g = ref::random_floats(t.rng, out_size(kB), -1, 1);
    expect_throw<std::logic_error, true>([&] { t.victim.backward(g, mpe::Sgd{0.5f}); }, {"optimizer", "sgd"});
    t.check_unchanged();
  }
  SUBCASE("non-finite optimizer parameters") {
    Twins t;
    const auto g = ref::random_floats(t.rng, out_size(kB), -1, 1);
    expect_throw<std::invalid_argument>(
        [&] { t.victim.backward(g, mpe::RowwiseAdagrad{std::numeric_limits<float>::quiet_NaN()}); },
        {"RowwiseAdagrad.learning_rate", "nan"});
    expect_throw<std::invalid_argument>(
        [&] {
          t.victim.backward(g, mpe::RowwiseAdagrad{0.5f, -1.0f});
        },
        {"RowwiseAdagrad.eps", "-1"});
    t.check_unchanged();
  }
}

TEST_CASE("bad configs are rejected with the field and value") {
  auto bad = [](auto edit, std::initializer_list<std::string> parts) {
    mpe::EmbeddingConfig c = config();
    edit(c);
    expect_throw<std::invalid_argument>([&] { E e(c); }, parts);
  };
  bad([](auto& c) { c.table_rows.clear(); }, {"config.table_rows", "empty"});
  bad([](auto& c) { c.table_rows[1] = 0; }, {"config.table_rows[1] = 0"});
  bad([](auto& c) { c.table_rows[2] = -5; }, {"config.table_rows[2] = -5"});
  // Row counts are int64 and the total must stay <= INT64_MAX / 2 (room for index
  // arithmetic): one table over it, and a second table that takes the sum over it.
  bad([](auto& c) { c.table_rows[1] = std::int64_t{1} << 62; },
      {"config.table_rows[1] = 4611686018427387904", "INT64_MAX / 2 = 4611686018427387903"});
  const std::vector<std::int64_t> halves{std::int64_t{1} << 61, std::int64_t{1} << 61};
  bad([&](auto& c) { c.table_rows = halves; },
      {"config.table_rows[1] = 2305843009213693952", "tables before it: 2305843009213693952"});
  // 2^61 rows fit the total, but not a store of 2^61 rows x at least 8 bytes.
  bad([](auto& c) { c.table_rows = {std::int64_t{1} << 61}; },
      {"2305843009213693952 rows", "config.dim = 5", "exceeds PTRDIFF_MAX"});
  {
    // 2^62 - 1 FP32 rows of D = 1: 2^64 - 4 bytes fit size_t, but an allocator rounding that
    // up wraps to a small block (it once crashed here); refused like any store over PTRDIFF_MAX.
    mpe::EmbeddingConfig c = config();
    c.table_rows = {(std::int64_t{1} << 62) - 1};
    c.dim = 1;
    expect_throw<std::invalid_argument>(
        [&] { mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> e(c); },
        {"4611686018427387903 rows x 4 bytes", "exceeds PTRDIFF_MAX"});
  }
  bad([](auto& c) { c.dim = 0; }, {"config.dim = 0"});
  bad([](auto& c) { c.dim = -3; }, {"config.dim = -3"});
  bad([](auto& c) { c.cache_rows = 3; }, {"config.cache_rows = 3", "4"});  // 0 < 3 < Ways = 4
  bad([](auto& c) { c.cache_rows = -1; }, {"config.cache_rows = -1"});
  bad([](auto& c) { c.row_alignment = 3; }, {"config.row_alignment = 3"});
  bad([](auto& c) { c.row_alignment = 0; }, {"config.row_alignment = 0"});
  bad([](auto& c) { c.row_alignment = 8192; }, {"config.row_alignment = 8192"});
  // accepted edge values
  mpe::EmbeddingConfig ok = config();
  ok.cache_rows = 4;
  ok.row_alignment = 1;
  CHECK_NOTHROW(E{ok});
  ok.row_alignment = 4096;
  CHECK_NOTHROW(E{ok});
}

TEST_CASE("set_weights and get_weights reject values and ranges, changing nothing") {
  SUBCASE("non-representable values, per format") {
    const float inf = std::numeric_limits<float>::infinity();
    Twins t;
    std::vector<float> w(2 * kD, 0.5f);
    w[kD + 2] = inf;
    expect_throw<std::invalid_argument>([&] { t.victim.set_weights(w, 3); },
                                        {"weights[7] = inf", "row 4", "int8_rowwise"});
    w[kD + 2] = std::numeric_limits<float>::quiet_NaN();
    expect_throw<std::invalid_argument>([&] { t.victim.set_weights(w, 3); }, {"weights[7]", "row 4"});
    w[kD + 2] = 0x1p127f;  // beyond Int8Rowwise's 2^126 (max - min must stay finite)
    expect_throw<std::invalid_argument>([&] { t.victim.set_weights(w, 3); }, {"weights[7]"});
    t.check_unchanged();
  }
  SUBCASE("Fp16 and Int4 reject |x| > 65504") {
    mpe::EmbeddingConfig c = config();
    mpe::CachedEmbedding<mpe::Fp16, mpe::Lru<4>, mpe::NearestRounding> h(c);
    mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lru<4>, mpe::NearestRounding> q(c);
    std::vector<float> w(kD, 1.0f);
    w[3] = -70000.0f;
    expect_throw<std::invalid_argument>([&] { h.set_weights(w, 2); }, {"weights[3] = -70000", "fp16"});
    expect_throw<std::invalid_argument>([&] { q.set_weights(w, 2); }, {"weights[3] = -70000", "int4"});
    std::vector<float> r(kD);
    h.get_weights(r, 2);
    CHECK(r == std::vector<float>(kD, 0.0f));
    w[3] = 65504.0f;  // the largest FP16 value is accepted
    CHECK_NOTHROW(h.set_weights(w, 2));
    CHECK_NOTHROW(q.set_weights(w, 2));
  }
  SUBCASE("row ranges") {
    Twins t;
    std::vector<float> w(2 * kD, 0.5f);
    expect_throw<std::invalid_argument>([&] { t.victim.set_weights(w, 35); }, {"first_row = 35", "36 rows"});
    expect_throw<std::invalid_argument>([&] { t.victim.set_weights(w, -1); }, {"first_row = -1"});
    std::vector<float> odd(kD + 1, 0.5f);
    expect_throw<std::invalid_argument>([&] { t.victim.set_weights(odd, 0); }, {"weights.size() = 6"});
    std::vector<float> r(2 * kD);
    expect_throw<std::invalid_argument>([&] { t.victim.get_weights(r, 35); }, {"first_row = 35"});
    std::vector<float> rodd(kD - 1);
    expect_throw<std::invalid_argument>([&] { t.victim.get_weights(rodd, 0); }, {"out.size() = 4"});
    t.check_unchanged();
  }
}

TEST_CASE("issue case: every enum argument and field outside its values is rejected") {
  auto bad = [](auto edit, std::initializer_list<std::string> parts) {
    mpe::EmbeddingConfig c = config();
    edit(c);
    expect_throw<std::invalid_argument>([&] { E e(c); }, parts);
  };
  bad([](auto& c) { c.non_finite = static_cast<mpe::NonFinite>(9); },
      {"config.non_finite = 9 is not a NonFinite value"});
  bad([](auto& c) { c.non_finite = static_cast<mpe::NonFinite>(-1); }, {"config.non_finite = -1"});
  bad([](auto& c) { c.validation = static_cast<mpe::Validation>(2); }, {"config.validation = 2"});
  // forward / forward_inference with a Pooling that is not Sum or Mean: rejected before any
  // populate, so cache and stats are unchanged (check_unchanged).
  for (int p : {2, 7, -1}) {
    Twins t;
    std::vector<float> out(out_size(2));
    const auto pooling = static_cast<mpe::Pooling>(p);
    const std::string part = "pooling = " + std::to_string(p) + " is not a Pooling value";
    expect_throw<std::invalid_argument>([&] { t.victim.forward(kIdx, kOff, out, pooling); },
                                        {"forward", part});
    expect_throw<std::invalid_argument>([&] { t.victim.forward_inference(kIdx, kOff, out, pooling); },
                                        {"forward_inference", part});
    t.check_unchanged();
  }
}

TEST_CASE("issue case: table_offset outside [0, T] throws std::invalid_argument naming t") {
  E e(config());
  CHECK(e.table_offset(0) == 0);
  CHECK(e.table_offset(3) == 36);  // T: the total row count
  for (std::int64_t t : {5, 4, -1}) {
    expect_throw<std::invalid_argument, true>([&] { (void)e.table_offset(t); },
                                              {"table_offset", "t = " + std::to_string(t), "[0, 3]"});
  }
}
