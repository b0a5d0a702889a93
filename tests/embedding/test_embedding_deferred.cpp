// SPDX-License-Identifier: Apache-2.0
// Validation modes and the asynchronous code path of CachedEmbedding, without a GPU:
//  - the same seeded training (prefetch patterns, sum/mean/weighted pooling, empty bags,
//    duplicates, flushes, NonFinite::Skip steps) gives the same bits (outputs, weights,
//    statistics, step) under HostBackend and AsyncHostBackend (CudaBackend's code paths:
//    launches sized by the batch length, sizes and statistics in backend memory), in
//    Validation::Synchronous and Validation::Deferred;
//  - waits per call: Synchronous prefetch/forward/backward wait once (the verdict),
//    Deferred ones never; flush, reset_stats and init_uniform never wait;
//  - Deferred errors: a failing call changes nothing (training afterwards equals a twin
//    that never made the call, bit for bit), synchronize() throws the first error once with
//    the call, its number, the argument and the value, and counts later failures;
//    set_weights() and load() throw it first;
//  - laned kernels: AsyncHostBackend runs for_each_lanes with CudaBackend's 32 lanes (a
//    warp per bag or row), each lane on its element chunks; for every Storage and D = 1,
//    3, 64, 130 (tails, one chunk per lane, a second round of chunks) the bits equal the
//    one-lane host's.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <string>

#include "reference/async_backend.hpp"
#include "reference/embedding_bag.hpp"
#include "reference/policy.hpp"
#include "reference/stats_equal.hpp"

namespace {

using ref::Policy;

const std::vector<std::int64_t> kTables{50, 9, 200};
constexpr int kD = 6;
constexpr std::int64_t kB = 16;
constexpr int kSteps = 36;

struct Run {
  std::vector<float> weights;
  std::vector<float> outputs;
  mpe::CacheStats stats;
  std::uint64_t step = 0;
};

/// One fixed stream of batches and gradients (the same for every run).
struct Stream {
  std::vector<ref::Batch> batches;
  std::vector<std::vector<float>> grads;
  std::vector<float> init;
  explicit Stream(bool with_non_finite, int D = kD) {
    std::mt19937_64 rng(2024);
    init = ref::random_floats(rng, static_cast<std::size_t>(259) * D, -1, 1);
    for (int k = 0; k <= kSteps; ++k) {
      batches.push_back(ref::random_batch(rng, kTables, kB, 5, k % 3 == 1));
      grads.push_back(ref::random_floats(rng, static_cast<std::size_t>(kB) * kTables.size() * D, -1, 1));
      if (with_non_finite && k % 7 == 5) grads.back()[3] = std::numeric_limits<float>::quiet_NaN();
      if (with_non_finite && k % 11 == 4 && !batches.back().weights.empty()) {
        batches.back().weights[0] = std::numeric_limits<float>::infinity();
      }
    }
  }
};

/// kSteps steps of `opt` (row-wise Adagrad by default). Prefetch pattern by step: k % 3 == 0
/// none (but step k may consume the prefetch of step k - 1), 1 prefetch(k) right before
/// forward(k), 2 prefetch(k + 1) between forward(k) and backward(k) (the pipelined pattern).
template <class P, class Backend, class Opt = mpe::RowwiseAdagrad>
Run train(Backend backend, mpe::Validation validation, mpe::NonFinite non_finite, std::int64_t cache_rows,
          int D = kD, Opt opt = mpe::RowwiseAdagrad{0.2f}) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = D;
  cfg.cache_rows = cache_rows;
  cfg.seed = 77;
  cfg.validation = validation;
  cfg.non_finite = non_finite;
  mpe::CachedEmbedding<typename P::storage, typename P::cache, typename P::rounding, Backend> emb(cfg,
                                                                                                  backend);
  const Stream s(non_finite == mpe::NonFinite::Skip, D);
  emb.set_weights(s.init);
  Run r;
  for (int k = 0; k < kSteps; ++k) {
    const ref::Batch& b = s.batches[static_cast<std::size_t>(k)];
    std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * D);
    if (k % 3 == 1) emb.prefetch(b.indices, b.offsets);
    const auto pooling = (k % 3 == 2) ? mpe::Pooling::Mean : mpe::Pooling::Sum;
    emb.forward(b.indices, b.offsets, out, pooling, b.weights);
    if (k % 3 == 2) {
      const ref::Batch& next = s.batches[static_cast<std::size_t>(k + 1)];
      emb.prefetch(next.indices, next.offsets);
    }
    emb.backward(s.grads[static_cast<std::size_t>(k)], opt);
    if (k == kSteps / 2) emb.flush();
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
  }
  emb.synchronize();  // nothing recorded: valid input throughout
  emb.flush();
  r.weights.resize(static_cast<std::size_t>(emb.total_rows()) * D);
  emb.get_weights(r.weights);
  r.stats = emb.stats();
  r.step = emb.step();
  return r;
}

void check_same(const Run& a, const Run& b) {
  CHECK(ref::first_diff(a.outputs, b.outputs) == -1);
  CHECK(ref::first_diff(a.weights, b.weights) == -1);
  ref::check_stats_equal(a.stats, b.stats);
  CHECK(a.step == b.step);
}

}  // namespace

#define MPE_DEFERRED_POLICIES                                               \
  Policy<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding>,                  \
      Policy<mpe::Fp16, mpe::Lfu<4>, mpe::StochasticRounding>,              \
      Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,       \
      Policy<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>,       \
      Policy<mpe::Int8Rowwise, mpe::DirectMapped, mpe::StochasticRounding>, \
      Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding>,          \
      Policy<mpe::Int4Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,       \
      Policy<mpe::Int4Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>

TEST_CASE_TEMPLATE("laned pooling and gradient sums (32 lanes) give the one-lane bits", P,
                   Policy<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp16, mpe::Lfu<4>, mpe::NearestRounding>,
                   Policy<mpe::Bf16, mpe::WTinyLfu<4>, mpe::StochasticRounding>,
                   Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Int4Rowwise, mpe::DirectMapped, mpe::StochasticRounding>,
                   Policy<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp8E4M3Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp8E5M2Rowwise, mpe::Lfu<4>, mpe::NearestRounding>) {
  static_assert(ref::AsyncHostBackend::lane_width == 32);  // CudaBackend::lane_width
  for (const int D : {1, 3, 64, 130}) {
    for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{24}}) {
      CAPTURE(D);
      CAPTURE(cache_rows);
      const Run base =
          train<P>(mpe::HostBackend{}, mpe::Validation::Synchronous, mpe::NonFinite::Throw, cache_rows, D);
      check_same(base, train<P>(ref::AsyncHostBackend{}, mpe::Validation::Synchronous, mpe::NonFinite::Throw,
                                cache_rows, D));
    }
  }
}

TEST_CASE_TEMPLATE("laned backward with every optimizer's FP32 state (32 lanes) gives the one-lane bits", P,
                   Policy<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>,
                   Policy<mpe::Fp16, mpe::Lfu<4>, mpe::NearestRounding>,
                   Policy<mpe::Int4Rowwise, mpe::SecondTouchLru<4>, mpe::StochasticRounding>) {
  // Sgd (no state), Adagrad (D floats a row) and Adam (2 D): the laned apply copies the
  // state and applies the updates AccumulateRows computed, as ApplyRows does on one lane.
  for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{24}}) {
    for (const int D : {5, 64}) {
      CAPTURE(cache_rows);
      CAPTURE(D);
      const auto both = [&](auto opt) {
        const Run base = train<P>(mpe::HostBackend{}, mpe::Validation::Synchronous, mpe::NonFinite::Throw,
                                  cache_rows, D, opt);
        check_same(base, train<P>(ref::AsyncHostBackend{}, mpe::Validation::Synchronous,
                                  mpe::NonFinite::Throw, cache_rows, D, opt));
      };
      both(mpe::Sgd{0.3f});
      both(mpe::Adagrad{0.2f});
      both(mpe::Adam{0.05f});
    }
  }
}

TEST_CASE_TEMPLATE("async code path and deferred validation give the synchronous host bits", P,
                   MPE_DEFERRED_POLICIES) {
  using mpe::NonFinite;
  using mpe::Validation;
  // cache: none, smaller than a batch's unique rows (evictions, conflicts), larger than the table
  for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{24}, std::int64_t{400}}) {
    for (const NonFinite nf : {NonFinite::Throw, NonFinite::Skip}) {
      CAPTURE(cache_rows);
      CAPTURE(static_cast<int>(nf));
      const Run base = train<P>(mpe::HostBackend{}, Validation::Synchronous, nf, cache_rows);
      if (nf == NonFinite::Skip) CHECK(base.stats.skipped_steps > 0);  // the stream holds skips
      if (cache_rows == 24) CHECK(base.stats.evictions > 0);
      check_same(base, train<P>(mpe::HostBackend{}, Validation::Deferred, nf, cache_rows));
      check_same(base, train<P>(ref::AsyncHostBackend{}, Validation::Synchronous, nf, cache_rows));
      check_same(base, train<P>(ref::AsyncHostBackend{}, Validation::Deferred, nf, cache_rows));
    }
  }
}

namespace {

using AsyncEmb =
    mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::StochasticRounding, ref::AsyncHostBackend>;

mpe::EmbeddingConfig small_config(mpe::Validation v) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = kD;
  cfg.cache_rows = 24;
  cfg.seed = 5;
  cfg.validation = v;
  return cfg;
}

}  // namespace

TEST_CASE("waits per call: one verdict read when synchronous, none when deferred") {
  for (const auto v : {mpe::Validation::Synchronous, mpe::Validation::Deferred}) {
    CAPTURE(static_cast<int>(v));
    const long per_call = v == mpe::Validation::Synchronous ? 1 : 0;
    ref::AsyncHostBackend be;
    AsyncEmb emb(small_config(v), be);
    const Stream s(false);
    emb.init_uniform(-0.5f, 0.5f);
    const auto waits = [&] { return be.waits->load(); };
    std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kD);
    for (int k = 0; k < 4; ++k) {
      const ref::Batch& b = s.batches[static_cast<std::size_t>(k)];
      long before = waits();
      if (k % 2 == 1) {
        emb.prefetch(b.indices, b.offsets);
        CHECK(waits() - before == per_call);
        before = waits();
      }
      emb.forward(b.indices, b.offsets, out, mpe::Pooling::Sum, b.weights);  // k odd: the prefetched batch
      CHECK(waits() - before == per_call);
      before = waits();
      emb.backward(s.grads[static_cast<std::size_t>(k)], mpe::Sgd{0.1f});
      CHECK(waits() - before == per_call);
    }
    long before = waits();
    emb.flush();
    emb.reset_stats();
    emb.init_uniform(-0.25f, 0.25f);
    CHECK(waits() - before == 0);
    before = waits();
    emb.forward_inference(s.batches[0].indices, s.batches[0].offsets, out, mpe::Pooling::Sum,
                          s.batches[0].weights);
    CHECK(waits() - before == 1);  // always synchronous (a const call records nothing)
  }
}

namespace {

template <class Backend, class Cache = mpe::Lru<4>>
using Emb = mpe::CachedEmbedding<mpe::Int8Rowwise, Cache, mpe::StochasticRounding, Backend>;

template <class B, class C>
struct Combo {
  using backend = B;
  using cache = C;
};

/// A deferred-validation embedding and its synchronous twin, trained alike; `bad` calls go
/// to the deferred one only, and must change nothing.
template <class Backend, class Cache>
struct DeferredTwins {
  Emb<Backend, Cache> victim{small_config(mpe::Validation::Deferred), Backend{}};
  Emb<mpe::HostBackend, Cache> twin{small_config(mpe::Validation::Synchronous)};
  Stream s{false};
  int k = 0;
  std::vector<float> out = std::vector<float>(static_cast<std::size_t>(kB) * kTables.size() * kD);
  DeferredTwins() {
    victim.set_weights(s.init);
    twin.set_weights(s.init);
    steps(3);
  }
  /// forward(b) on both (outputs compared), then backward(g) on both.
  void both_step(const ref::Batch& b, const std::vector<float>& g) {
    std::vector<float> o2(out.size());
    victim.forward(b.indices, b.offsets, out, mpe::Pooling::Sum, b.weights);
    twin.forward(b.indices, b.offsets, o2, mpe::Pooling::Sum, b.weights);
    CHECK(ref::first_diff(out, o2) == -1);
    victim.backward(g, mpe::RowwiseAdagrad{0.3f});
    twin.backward(g, mpe::RowwiseAdagrad{0.3f});
  }
  void steps(int count) {
    for (int i = 0; i < count; ++i, ++k) {
      both_step(s.batches[static_cast<std::size_t>(k % kSteps)],
                s.grads[static_cast<std::size_t>(k % kSteps)]);
    }
  }
  /// Trains both on, then compares every weight bit, the statistics and the step.
  void check_same_after(int more_steps = 4) {
    steps(more_steps);
    victim.flush();
    twin.flush();
    std::vector<float> a(static_cast<std::size_t>(twin.total_rows()) * kD), b(a.size());
    victim.get_weights(a);
    twin.get_weights(b);
    CHECK(ref::first_diff(a, b) == -1);
    check_state();
  }
  /// Statistics, step and raw state equal.
  void check_state() {
    ref::check_stats_equal(victim.stats(), twin.stats());
    CHECK(victim.step() == twin.step());
    // Raw state, section by section (both in host memory here): store, cache rows, tags,
    // dirty bits, LFU sketch, optimizer state. Last-use scores are left out: a failed
    // deferred call consumes a batch number, which shifts later scores without changing
    // their order (the decisions above show it).
    const mpe::TableState sv = victim.state(), st = twin.state();
    const auto same = [](const char* part, auto a, auto b) {
      CAPTURE(part);
      REQUIRE(a.size_bytes() == b.size_bytes());
      CHECK((a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0));
    };
    same("store", sv.store, st.store);
    same("cache_rows", sv.cache_rows, st.cache_rows);
    same("tags", sv.tags, st.tags);
    same("dirty", sv.dirty, st.dirty);
    same("policy_words", sv.policy_words, st.policy_words);
    same("optimizer_state", sv.optimizer_state, st.optimizer_state);
  }
  /// synchronize() throws std::invalid_argument whose message holds every part; then once
  /// more does not throw.
  void expect_reported(const std::vector<std::string>& parts) {
    bool thrown = false;
    try {
      victim.synchronize();
    } catch (const std::invalid_argument& e) {
      thrown = true;
      const std::string what = e.what();
      for (const auto& p : parts) {
        CAPTURE(what);
        CHECK(what.find(p) != std::string::npos);
      }
    }
    CHECK(thrown);
    CHECK_NOTHROW(victim.synchronize());
  }
};

}  // namespace

TEST_CASE_TEMPLATE("deferred errors change nothing and are thrown once by synchronize()", C,
                   Combo<mpe::HostBackend, mpe::Lru<4>>, Combo<ref::AsyncHostBackend, mpe::Lru<4>>,
                   Combo<ref::AsyncHostBackend, mpe::Lfu<4>>,
                   Combo<ref::AsyncHostBackend, mpe::DirectMapped>) {
  DeferredTwins<typename C::backend, typename C::cache> t;
  const ref::Batch& b = t.s.batches[5];
  const auto& g = t.s.grads[5];
  auto& out = t.out;
  SUBCASE("index outside its table: forward and its backward skipped") {
    auto idx = b.indices;
    idx[2] = 1000;
    const std::vector<float> before = out;
    t.victim.forward(idx, b.offsets, out, mpe::Pooling::Sum, b.weights);
    CHECK(ref::first_diff(out, before) == -1);  // output untouched
    t.victim.backward(g, mpe::RowwiseAdagrad{0.3f});
    t.check_state();  // at once: no later step can hide a difference
    t.check_same_after();
    t.expect_reported({"mpe::CachedEmbedding::forward (deferred, call 7)", "indices[2] = 1000",
                       "outside table 0 (50 rows"});
  }
  SUBCASE("decreasing offsets") {
    auto off = b.offsets;
    off[4] = off[5] + 1;
    t.victim.forward(b.indices, off, out, mpe::Pooling::Sum, b.weights);
    t.victim.backward(g, mpe::RowwiseAdagrad{0.3f});
    t.check_same_after();
    t.expect_reported({"forward (deferred", "offsets[5] = " + std::to_string(off[5]), "non-decreasing"});
  }
  SUBCASE("offsets[0] != 0 and last offset != indices.size()") {
    auto off = b.offsets;
    off[0] = 1;
    t.victim.prefetch(b.indices, off);
    off[0] = 0;
    off.back() += 3;
    t.victim.forward(b.indices, off, out);  // the prefetched sizes, different offsets
    t.victim.backward(g, mpe::RowwiseAdagrad{0.3f});
    t.check_same_after();
    t.expect_reported({"prefetch (deferred, call 7)", "offsets[0] = 1; must be 0", "1 later call failed"});
  }
  SUBCASE("non-finite per-sample weight") {
    std::vector<float> w(b.indices.size(), 0.5f);
    w[1] = std::numeric_limits<float>::infinity();
    t.victim.forward(b.indices, b.offsets, out, mpe::Pooling::Sum, w);
    t.victim.backward(g, mpe::RowwiseAdagrad{0.3f});
    t.check_same_after();
    t.expect_reported({"forward (deferred", "per_sample_weights[1] = inf is not finite"});
  }
  SUBCASE("non-finite gradient: the forward counts, the update does not") {
    auto bad = g;
    bad[9] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> o2(out.size());
    t.victim.forward(b.indices, b.offsets, out, mpe::Pooling::Sum, b.weights);
    t.twin.forward(b.indices, b.offsets, o2, mpe::Pooling::Sum, b.weights);
    t.victim.backward(bad, mpe::RowwiseAdagrad{0.3f});
    CHECK_THROWS_AS(t.twin.backward(bad, mpe::RowwiseAdagrad{0.3f}), std::invalid_argument);
    // the twin's forward still awaits a backward, the victim's was consumed; a new
    // forward replaces both
    t.both_step(b, g);
    t.check_same_after();
    t.expect_reported({"backward (deferred, call 8)", "grad_output[9] = nan is not finite"});
  }
  SUBCASE("a batch of other sizes after prefetch is a new batch, as in synchronous mode") {
    const ref::Batch& other = t.s.batches[6];
    REQUIRE(other.indices.size() != b.indices.size());
    t.victim.prefetch(b.indices, b.offsets);
    t.twin.prefetch(b.indices, b.offsets);
    t.both_step(other, g);
    t.check_same_after();
    CHECK_NOTHROW(t.victim.synchronize());
  }
  SUBCASE("a failed forward awaiting backward locks nothing for the next prefetch") {
    // The prefetched rows belong to the failed batch now awaiting backward; a prefetch must
    // not keep them locked (the synchronous twin never made the call: nothing awaits there).
    auto idx = b.indices;
    idx[1] = (idx[1] + 1) % 9;
    t.victim.prefetch(b.indices, b.offsets);
    t.twin.prefetch(b.indices, b.offsets);
    t.victim.forward(idx, b.offsets, out, mpe::Pooling::Sum, b.weights);  // differs: fails
    for (int k = 7; k < 13; ++k) {  // pipelined: prefetch(k) while the previous batch awaits
      const ref::Batch& c = t.s.batches[static_cast<std::size_t>(k)];
      std::vector<float> o2(out.size());
      t.victim.prefetch(c.indices, c.offsets);
      t.twin.prefetch(c.indices, c.offsets);
      if (k > 7) {
        t.victim.backward(t.s.grads[static_cast<std::size_t>(k - 1)], mpe::RowwiseAdagrad{0.3f});
        t.twin.backward(t.s.grads[static_cast<std::size_t>(k - 1)], mpe::RowwiseAdagrad{0.3f});
      }
      t.victim.forward(c.indices, c.offsets, out, mpe::Pooling::Sum, c.weights);
      t.twin.forward(c.indices, c.offsets, o2, mpe::Pooling::Sum, c.weights);
      CHECK(ref::first_diff(out, o2) == -1);
    }
    t.victim.backward(t.s.grads[12], mpe::RowwiseAdagrad{0.3f});
    t.twin.backward(t.s.grads[12], mpe::RowwiseAdagrad{0.3f});
    t.check_same_after();
    t.expect_reported({"forward (deferred, call 8)", "indices[1] differs"});
  }
  SUBCASE("same sizes, one index different from the prefetched batch") {
    auto idx = b.indices;
    idx[3] = (idx[3] + 1) % 9;  // still inside every table
    t.victim.prefetch(b.indices, b.offsets);
    t.twin.prefetch(b.indices, b.offsets);
    t.victim.forward(idx, b.offsets, out, mpe::Pooling::Sum, b.weights);
    t.victim.backward(g, mpe::RowwiseAdagrad{0.3f});
    t.check_same_after();
    t.expect_reported(
        {"forward (deferred, call 8)", "indices[3] differs from the pending prefetch()'s batch"});
  }
  SUBCASE("set_weights and load throw the recorded error first") {
    auto idx = b.indices;
    idx[0] = -1;
    t.victim.forward(idx, b.offsets, out);
    std::vector<float> row(kD, 0.125f);
    CHECK_THROWS_WITH_AS(t.victim.set_weights(row, 3), doctest::Contains("indices[0] = -1"),
                         std::invalid_argument);
    t.victim.set_weights(row, 3);  // reported once: now it runs
    t.twin.set_weights(row, 3);
    t.victim.forward(idx, b.offsets, out);
    const auto path = std::filesystem::temp_directory_path() / ("mpe_deferred_" + std::to_string(::getpid()));
    t.twin.save(path);
    CHECK_THROWS_WITH_AS(t.victim.load(path), doctest::Contains("indices[0] = -1"), std::invalid_argument);
    t.victim.load(path);
    t.twin.load(path);
    std::filesystem::remove(path);
    t.check_same_after();
    CHECK_NOTHROW(t.victim.synchronize());
  }
}

TEST_CASE("Validation outside the enum is rejected") {
  auto cfg = small_config(static_cast<mpe::Validation>(7));
  CHECK_THROWS_WITH_AS(Emb<mpe::HostBackend>{cfg}, doctest::Contains("config.validation = 7"),
                       std::invalid_argument);
}

TEST_CASE_TEMPLATE("async path with more occurrences than table rows (launch bound = rows)", C, mpe::Lru<2>,
                   mpe::Lfu<2>, mpe::DirectMapped) {
  // 5 rows in all, 48 occurrences per batch: the asynchronous launches are bounded by the
  // row count, not the batch length.
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {3, 2};
  cfg.dim = 5;
  cfg.cache_rows = 2;
  cfg.seed = 9;
  const auto run = [&](auto backend, mpe::Validation v) {
    cfg.validation = v;
    mpe::CachedEmbedding<mpe::Int8Rowwise, C, mpe::StochasticRounding, decltype(backend)> e(cfg, backend);
    e.init_uniform(-1.0f, 1.0f);
    std::mt19937_64 rng(4);
    std::vector<float> outs;
    for (int k = 0; k < 12; ++k) {
      ref::Batch b = ref::random_batch(rng, cfg.table_rows, 4, 11, false);
      std::vector<float> out(4 * 2 * 5);
      if (k % 2) e.prefetch(b.indices, b.offsets);
      e.forward(b.indices, b.offsets, out);
      e.backward(ref::random_floats(rng, out.size(), -1, 1), mpe::Sgd{0.1f});
      outs.insert(outs.end(), out.begin(), out.end());
    }
    e.synchronize();
    std::vector<float> w(25);
    e.get_weights(w);
    outs.insert(outs.end(), w.begin(), w.end());
    return std::make_pair(outs, e.stats());
  };
  const auto base = run(mpe::HostBackend{}, mpe::Validation::Synchronous);
  CHECK(base.second.lookups > 12 * 25);  // batches longer than the table
  for (const auto v : {mpe::Validation::Synchronous, mpe::Validation::Deferred}) {
    const auto other = run(ref::AsyncHostBackend{}, v);
    CHECK(ref::first_diff(base.first, other.first) == -1);
    ref::check_stats_equal(base.second, other.second);
  }
}

TEST_CASE_TEMPLATE("#40 item 7: after save() and load() a deferred error names the uninterrupted run's call",
                   B, mpe::HostBackend, ref::AsyncHostBackend) {
  // The call counter that numbers deferred errors is part of the checkpoint. `run` trains
  // 3 pipelined steps (a prefetch pending at the save), saves, and goes on; `resumed` is a
  // fresh object that loads the file and makes the same calls. The last one fails (an
  // index outside its table): synchronize() must name the same call number in both.
  using E = Emb<B>;
  const Stream s(false);
  const mpe::EmbeddingConfig cfg = small_config(mpe::Validation::Deferred);
  std::vector<float> out(static_cast<std::size_t>(kB) * kTables.size() * kD);
  const auto batch = [&](int k) -> const ref::Batch& { return s.batches[static_cast<std::size_t>(k)]; };
  const auto grad = [&](int k) -> const std::vector<float>& { return s.grads[static_cast<std::size_t>(k)]; };
  const auto path =
      std::filesystem::temp_directory_path() / ("mpe_deferred_calls_" + std::to_string(::getpid()));
  E run(cfg, B{});
  run.set_weights(s.init);
  run.prefetch(batch(0).indices, batch(0).offsets);  // call 1
  for (int k = 0; k < 3; ++k) {                      // calls 2 to 10
    run.forward(batch(k).indices, batch(k).offsets, out, mpe::Pooling::Sum, batch(k).weights);
    run.prefetch(batch(k + 1).indices, batch(k + 1).offsets);
    run.backward(grad(k), mpe::RowwiseAdagrad{0.3f});
  }
  run.save(path);
  E resumed(cfg, B{});
  resumed.load(path);
  std::filesystem::remove(path);
  // forward(3) consumes the pending prefetch (call 11), backward(3) (call 12), then a forward
  // with indices[2] = 1000 (call 13).
  const auto go_on = [&](E& e) {
    e.forward(batch(3).indices, batch(3).offsets, out, mpe::Pooling::Sum, batch(3).weights);
    e.backward(grad(3), mpe::RowwiseAdagrad{0.3f});
    auto idx = batch(4).indices;
    idx[2] = 1000;
    e.forward(idx, batch(4).offsets, out, mpe::Pooling::Sum, batch(4).weights);
    std::string what;
    try {
      e.synchronize();
    } catch (const std::invalid_argument& x) {
      what = x.what();
    }
    return what;
  };
  const std::string uninterrupted = go_on(run);
  const std::string after_load = go_on(resumed);
  CAPTURE(uninterrupted);
  CAPTURE(after_load);
  REQUIRE_FALSE(uninterrupted.empty());
  CHECK(after_load == uninterrupted);
  CHECK(uninterrupted.find("forward (deferred, call 13)") != std::string::npos);
  CHECK(uninterrupted.find("indices[2] = 1000") != std::string::npos);
}
