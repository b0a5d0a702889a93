// SPDX-License-Identifier: Apache-2.0
// EmbeddingConfig::defer_admission: a forward() that leaves its batch's admission to the
// backward() trains the same bits as its twin that admits in the forward, for every cache
// policy and several store formats, with and without a slot index, on one and two threads,
// through prefetch() between forward() and backward(), set_weights(), init_uniform(), flush(),
// reset_stats(), a backward() that throws and is retried, and NonFinite::Skip. Its outputs also equal a plain
// FP32 embedding bag of get_weights() (ref::EmbeddingBag) bit for bit. A forward() whose
// backward() never comes, or throws (its gradient, its size, its optimizer), has its batch
// admitted by the next forward(), so the twins stay equal (weights, stats, checkpoint bytes),
// also for MixedDimEmbedding; a checkpoint written while an admission is pending holds the
// state before that forward(), and repeating the forward() and backward() after loading it
// gives the bits, stats and checkpoint bytes of the run that did not stop; written after a
// refused call, it also counts that call, so later deferred errors name the uninterrupted
// run's call numbers. io::import_table() between a forward() and its backward() makes the
// pending admission first, from the rows before the import, as the twin's forward() did
// (CachedEmbedding, and a MixedDimEmbedding's group).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mpe/io/checkpoint.hpp>
#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/async_backend.hpp"
#include "reference/embedding_bag.hpp"

namespace {

const std::vector<std::int64_t> kTables{40, 7, 150};
constexpr std::int64_t kB = 12;

template <class S, class C>
struct Combo {
  using Storage = S;
  using Cache = C;
};

bool same_stats(const mpe::CacheStats& a, const mpe::CacheStats& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;  // twelve uint64 counters, no padding
}

template <class E>
std::vector<float> weights(const E& e) {
  std::vector<float> w(static_cast<std::size_t>(e.total_rows()) * static_cast<std::size_t>(e.dim()));
  e.get_weights(w);
  return w;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("mpe_defer_admission_") + name)).string();
}

/// What the forward of `e` must return before its batch moves anything: a plain FP32 bag
/// of the weights as they are (hits pooled from the cache, misses from the store, each the
/// value get_weights reports).
template <class E>
std::vector<float> reference_output(const E& e, const ref::Batch& b, mpe::Pooling pooling) {
  ref::EmbeddingBag bag(kTables, e.dim());
  e.get_weights(bag.weights());
  return bag.forward(b, pooling);
}

/// The twins' common start: the same random weights (D columns) in both.
template <class E>
void same_start(E& now, E& later, std::mt19937_64& rng, int D) {
  const auto w0 = ref::random_floats(rng, static_cast<std::size_t>(now.total_rows()) * D, -1, 1);
  now.set_weights(w0);
  later.set_weights(w0);
}

/// Both twins forward batch b (sum pooling) into o1 / o2 and pool the same bits.
template <class E>
void forward_both(E& now, E& later, const ref::Batch& b, std::vector<float>& o1, std::vector<float>& o2) {
  now.forward(b.indices, b.offsets, o1);
  later.forward(b.indices, b.offsets, o2);
  REQUIRE(ref::same_bits(o1, o2));
}

}  // namespace

TEST_CASE_TEMPLATE("defer_admission: the same bits as admitting in the forward", T,
                   Combo<mpe::Int8Rowwise, mpe::Lru<4>>, Combo<mpe::Int8Rowwise, mpe::Lfu<4>>,
                   Combo<mpe::Int8Rowwise, mpe::DirectMapped>,
                   Combo<mpe::Int8Rowwise, mpe::SecondTouchLru<4>>, Combo<mpe::Int8Rowwise, mpe::WTinyLfu<4>>,
                   Combo<mpe::Fp16, mpe::Lru<4>>, Combo<mpe::Int4Rowwise, mpe::Lru<4>>,
                   Combo<mpe::Int2Rowwise, mpe::SecondTouchLru<4>>) {
  using E = mpe::CachedEmbedding<typename T::Storage, typename T::Cache, mpe::StochasticRounding>;
  for (const int D : {5, 64}) {
    for (const bool index : {false, true}) {
      for (const int threads : {1, 2}) {
        CAPTURE(D);
        CAPTURE(index);
        CAPTURE(threads);
        const auto cfg = [&](bool defer) {
          return mpe::EmbeddingConfig{.table_rows = kTables,
                                      .dim = D,
                                      .cache_rows = 16,
                                      .seed = 11,
                                      .slot_index = index,
                                      .defer_admission = defer};
        };
        E now(cfg(false), mpe::HostBackend{threads});
        E later(cfg(true), mpe::HostBackend{threads});
        std::mt19937_64 rng(static_cast<std::uint64_t>(D * 4 + threads));
        const auto w0 = ref::random_floats(rng, static_cast<std::size_t>(now.total_rows()) * D, -1, 1);
        now.set_weights(w0);
        later.set_weights(w0);
        const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * D;
        std::vector<float> o1(out_size), o2(out_size);
        const std::string path = temp_path("mid");
        bool saved = false;
        ref::Batch carried;  // a batch prefetched between a forward and its backward
        bool have_carried = false;
        for (int step = 0; step < 40; ++step) {
          CAPTURE(step);
          const int kind = step % 8;
          const mpe::Pooling pooling = step % 3 == 2 ? mpe::Pooling::Mean : mpe::Pooling::Sum;
          ref::Batch b = have_carried ? carried
                                      : ref::random_batch(rng, kTables, kB, 6,
                                                          pooling == mpe::Pooling::Sum && step % 3 == 0);
          if (have_carried && pooling == mpe::Pooling::Mean) b.weights.clear();
          have_carried = false;
          if (kind == 1) {  // prefetched first: the prefetch admits; nothing is deferred
            now.prefetch(b.indices, b.offsets);
            later.prefetch(b.indices, b.offsets);
          }
          // The twin has admitted every earlier batch (the deferring one admits a batch left without
          // a backward in this forward, before pooling): its weights are what both pool.
          const std::vector<float> want = reference_output(now, b, pooling);
          if (kind == 6) {
            // No backward: the next forward admits the batch, as the twin's forward did.
            now.forward(b.indices, b.offsets, o1, pooling, b.weights);
            later.forward(b.indices, b.offsets, o2, pooling, b.weights);
            REQUIRE(ref::same_bits(o1, o2));
            REQUIRE(ref::same_bits(o2, want));
            if (!saved) {  // written with the admission pending: the state before the forward
              later.save(path);
              saved = true;
              E restored(cfg(true), mpe::HostBackend{threads});
              restored.load(path);
              // Repeating the forward (and then training on) gives the run that did not stop.
              std::vector<float> o3(out_size);
              restored.forward(b.indices, b.offsets, o3, pooling, b.weights);
              REQUIRE(ref::same_bits(o2, o3));
              const ref::Batch nb = ref::random_batch(rng, kTables, kB, 6, false);
              now.forward(nb.indices, nb.offsets, o1);
              later.forward(nb.indices, nb.offsets, o2);
              restored.forward(nb.indices, nb.offsets, o3);
              REQUIRE(ref::same_bits(o1, o2));
              REQUIRE(ref::same_bits(o2, o3));
              const auto g = ref::random_floats(rng, out_size, -1, 1);
              now.backward(g, mpe::Adagrad{0.1f});
              later.backward(g, mpe::Adagrad{0.1f});
              restored.backward(g, mpe::Adagrad{0.1f});
              REQUIRE(ref::same_bits(weights(later), weights(restored)));
              REQUIRE(same_stats(later.stats(), restored.stats()));
              REQUIRE(mpe::io::save_to_bytes(later) == mpe::io::save_to_bytes(restored));
              REQUIRE(ref::same_bits(weights(now), weights(later)));
              REQUIRE(same_stats(now.stats(), later.stats()));
            }
            continue;
          }
          now.forward(b.indices, b.offsets, o1, pooling, b.weights);
          later.forward(b.indices, b.offsets, o2, pooling, b.weights);
          REQUIRE(ref::same_bits(o1, o2));
          REQUIRE(ref::same_bits(o2, want));
          auto g = ref::random_floats(rng, out_size, -1, 1);
          if (kind == 2 && step % 16 == 2) {  // the next batch prefetched before this one's backward
            // (the step after it then forwards a prefetched batch; every other time not)
            carried = ref::random_batch(rng, kTables, kB, 6, false);
            have_carried = true;
            now.prefetch(carried.indices, carried.offsets);
            later.prefetch(carried.indices, carried.offsets);
          } else if (kind == 3) {  // rows rewritten between forward and backward
            const std::int64_t first = static_cast<std::int64_t>(rng() % 150),
                               count = 1 + static_cast<std::int64_t>(rng() % 40);
            const auto part = ref::random_floats(rng, static_cast<std::size_t>(count) * D, -1, 1);
            now.set_weights(part, first);
            later.set_weights(part, first);
          } else if (kind == 4) {
            now.flush();
            later.flush();
            REQUIRE(same_stats(now.stats(), later.stats()));
          } else if (kind == 5) {
            if (step == 13) {  // every row rewritten and every line dropped
              now.init_uniform(-0.5f, 0.5f);
              later.init_uniform(-0.5f, 0.5f);
            } else {
              now.reset_stats();
              later.reset_stats();
            }
          } else if (kind == 7) {
            // A wrong-sized gradient throws before anything moves; a non-finite one throws
            // after the pending admission ran (where the twin's forward ran it).
            const auto before = weights(later);
            const mpe::CacheStats stats_before = later.stats();
            std::vector<float> short_g(g.begin(), g.end() - 1);
            CHECK_THROWS_AS(later.backward(short_g, mpe::Adagrad{0.1f}), std::invalid_argument);
            REQUIRE(ref::same_bits(weights(later), before));
            REQUIRE(same_stats(later.stats(), stats_before));
            auto bad = g;
            bad[out_size / 2] = std::numeric_limits<float>::quiet_NaN();
            CHECK_THROWS_AS(now.backward(bad, mpe::Adagrad{0.1f}), std::invalid_argument);
            CHECK_THROWS_AS(later.backward(bad, mpe::Adagrad{0.1f}), std::invalid_argument);
            REQUIRE(ref::same_bits(weights(now), weights(later)));
            REQUIRE(same_stats(now.stats(), later.stats()));
          }
          now.backward(g, mpe::Adagrad{0.1f});
          later.backward(g, mpe::Adagrad{0.1f});
          REQUIRE(ref::same_bits(weights(now), weights(later)));
          REQUIRE(same_stats(now.stats(), later.stats()));
        }
        now.flush();
        later.flush();
        REQUIRE(ref::same_bits(weights(now), weights(later)));
        REQUIRE(same_stats(now.stats(), later.stats()));
        std::remove(path.c_str());
      }
    }
  }
}

TEST_CASE("defer_admission: a skipped step (NonFinite::Skip) admits its batch as the twin does") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const auto cfg = [](bool defer) {
    return mpe::EmbeddingConfig{.table_rows = kTables,
                                .dim = 8,
                                .cache_rows = 16,
                                .seed = 3,
                                .non_finite = mpe::NonFinite::Skip,
                                .slot_index = true,
                                .defer_admission = defer};
  };
  E now(cfg(false)), later(cfg(true));
  std::mt19937_64 rng(9);
  same_start(now, later, rng, 8);
  const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * 8;
  std::vector<float> o1(out_size), o2(out_size);
  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    forward_both(now, later, ref::random_batch(rng, kTables, kB, 6, false), o1, o2);
    auto g = ref::random_floats(rng, out_size, -1, 1);
    if (step % 3 == 1) g[step] = std::numeric_limits<float>::infinity();
    now.backward(g, mpe::Sgd{0.5f});
    later.backward(g, mpe::Sgd{0.5f});
    REQUIRE(ref::same_bits(weights(now), weights(later)));
    REQUIRE(same_stats(now.stats(), later.stats()));
  }
  CHECK(later.stats().skipped_steps == 4);
}

TEST_CASE("defer_admission: a forward without a backward is admitted by the next forward") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  E e(mpe::EmbeddingConfig{.table_rows = kTables, .dim = 4, .cache_rows = 16, .defer_admission = true});
  const ref::Batch b{{1, 2, 3, 1}, {0, 2, 4, 4, 4, 4, 4}, {}, 2};
  std::vector<float> out(2 * 3 * 4);
  e.forward(b.indices, b.offsets, out);
  CHECK(e.stats().lookups == 0);  // counted when admitted
  const mpe::CacheRef c = e.cache_ref();
  for (std::int64_t s = 0; s < c.slots(); ++s) CHECK(c.tags[s] == -1);
  // A second forward whose input is invalid throws and leaves the first batch pending.
  const std::vector<std::int64_t> bad_indices{1, 2, 3, 40};
  CHECK_THROWS_AS(e.forward(bad_indices, b.offsets, out), std::invalid_argument);
  CHECK(e.stats().lookups == 0);
  e.forward(b.indices, b.offsets, out);  // admits the first batch, then pools the second
  CHECK(e.stats().lookups == 4);
  CHECK(e.stats().misses == 3);
  std::vector<std::int64_t> tags;
  for (std::int64_t s = 0; s < c.slots(); ++s)
    if (c.tags[s] >= 0) tags.push_back(c.tags[s]);
  std::sort(tags.begin(), tags.end());
  CHECK(tags == std::vector<std::int64_t>{1, 2, 3});
  e.backward(std::vector<float>(out.size(), 0.25f), mpe::Sgd{0.1f});
  CHECK(e.stats().lookups == 8);
  CHECK(e.stats().unique_rows == 6);
  CHECK(e.stats().misses == 3);
  CHECK(e.stats().hits == 3);
}

TEST_CASE("defer_admission: a batch whose backward throws or never comes trains the twin's bits") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  // 0: no backward; 1: a wrong-sized gradient; 2: an invalid optimizer; 3: a NaN gradient;
  // each followed by the next forward() and its backward(), no retry.
  for (int failure = 0; failure < 4; ++failure) {
    for (const bool index : {false, true}) {
      CAPTURE(failure);
      CAPTURE(index);
      const auto cfg = [&](bool defer) {
        return mpe::EmbeddingConfig{.table_rows = kTables,
                                    .dim = 6,
                                    .cache_rows = 16,
                                    .seed = 4,
                                    .slot_index = index,
                                    .defer_admission = defer};
      };
      E now(cfg(false)), later(cfg(true));
      std::mt19937_64 rng(static_cast<std::uint64_t>(31 + failure));
      same_start(now, later, rng, 6);
      const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * 6;
      std::vector<float> o1(out_size), o2(out_size);
      for (int step = 0; step < 10; ++step) {
        CAPTURE(step);
        forward_both(now, later, ref::random_batch(rng, kTables, kB, 6, false), o1, o2);
        auto g = ref::random_floats(rng, out_size, -1, 1);
        if (step % 3 == 1) {
          if (failure == 1) {
            const std::vector<float> short_g(g.begin(), g.end() - 1);
            CHECK_THROWS_AS(now.backward(short_g, mpe::Sgd{0.2f}), std::invalid_argument);
            CHECK_THROWS_AS(later.backward(short_g, mpe::Sgd{0.2f}), std::invalid_argument);
          } else if (failure == 2) {
            CHECK_THROWS_AS(now.backward(g, mpe::Sgd{-1.0f}), std::invalid_argument);
            CHECK_THROWS_AS(later.backward(g, mpe::Sgd{-1.0f}), std::invalid_argument);
          } else if (failure == 3) {
            g[5] = std::numeric_limits<float>::quiet_NaN();
            CHECK_THROWS_AS(now.backward(g, mpe::Sgd{0.2f}), std::invalid_argument);
            CHECK_THROWS_AS(later.backward(g, mpe::Sgd{0.2f}), std::invalid_argument);
          }
          continue;  // the next forward() admits the batch
        }
        now.backward(g, mpe::Sgd{0.2f});
        later.backward(g, mpe::Sgd{0.2f});
        REQUIRE(ref::same_bits(weights(now), weights(later)));
        REQUIRE(same_stats(now.stats(), later.stats()));
        REQUIRE(mpe::io::save_to_bytes(now) == mpe::io::save_to_bytes(later));
      }
    }
  }
}

TEST_CASE("defer_admission: MixedDimEmbedding's groups train the same bits as without it") {
  using E = mpe::MixedDimEmbedding<mpe::Int4Rowwise, mpe::SecondTouchLru<4>, mpe::StochasticRounding>;
  const std::vector<mpe::TableSpec> specs{{40, 16}, {25, 3}, {150, 64}, {7, 16}};
  const auto cfg = [&](bool defer) {
    return mpe::MixedDimConfig{
        .tables = specs, .cache_fraction = 0.1, .seed = 5, .slot_index = true, .defer_admission = defer};
  };
  E now(cfg(false)), later(cfg(true));
  const std::vector<std::int64_t> rows{40, 25, 150, 7};
  std::mt19937_64 rng(21);
  const std::size_t out_size = static_cast<std::size_t>(kB * now.total_dim());
  std::vector<float> o1(out_size), o2(out_size);
  for (int step = 0; step < 16; ++step) {
    CAPTURE(step);
    const ref::Batch b = ref::random_batch(rng, rows, kB, 6, step % 2 == 0);
    now.forward(b.indices, b.offsets, o1, mpe::Pooling::Sum, b.weights);
    later.forward(b.indices, b.offsets, o2, mpe::Pooling::Sum, b.weights);
    REQUIRE(ref::same_bits(o1, o2));
    if (step == 0) {  // the groups defer: nothing counted before the backward
      CHECK(now.stats().lookups > 0);
      CHECK(later.stats().lookups == 0);
    }
    auto g = ref::random_floats(rng, out_size, -1, 1);
    if (step % 5 == 3) {  // a NaN gradient: no group admits, the next forward() does
      g[out_size - 1] = std::numeric_limits<float>::quiet_NaN();
      CHECK_THROWS_AS(now.backward(g, mpe::RowwiseAdagrad{0.3f}), std::invalid_argument);
      CHECK_THROWS_AS(later.backward(g, mpe::RowwiseAdagrad{0.3f}), std::invalid_argument);
      continue;
    }
    now.backward(g, mpe::RowwiseAdagrad{0.3f});
    later.backward(g, mpe::RowwiseAdagrad{0.3f});
    REQUIRE(same_stats(now.stats(), later.stats()));
  }
  for (std::int64_t t = 0; t < 4; ++t) {
    std::vector<float> w1(static_cast<std::size_t>(specs[static_cast<std::size_t>(t)].rows *
                                                   specs[static_cast<std::size_t>(t)].dim)),
        w2(w1.size());
    now.get_weights(t, w1);
    later.get_weights(t, w2);
    CHECK(ref::same_bits(w1, w2));
  }
}

TEST_CASE("defer_admission: io::import_table between forward and backward trains the twin's bits") {
  // The import replaces a table's rows after a forward(): the twin admitted that forward's
  // batch before the import (whose cache lines of the table the import drops), so the
  // deferring object must admit it before the import too, from the rows as they were.
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  for (const bool index : {false, true}) {
    CAPTURE(index);
    const auto cfg = [&](bool defer) {
      return mpe::EmbeddingConfig{.table_rows = kTables,
                                  .dim = 8,
                                  .cache_rows = 16,
                                  .seed = 7,
                                  .slot_index = index,
                                  .defer_admission = defer};
    };
    E now(cfg(false)), later(cfg(true)), source(cfg(false));
    std::mt19937_64 rng(index ? 43 : 41);
    same_start(now, later, rng, 8);
    const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * 8;
    std::vector<float> o1(out_size), o2(out_size);
    for (int step = 0; step < 12; ++step) {
      CAPTURE(step);
      forward_both(now, later, ref::random_batch(rng, kTables, kB, 6, step % 2 == 0), o1, o2);
      // Table t's new rows: FBGEMM fused 8-bit rows exported from another object.
      const std::int64_t t = step % 3;
      const auto rows = static_cast<std::size_t>(kTables[static_cast<std::size_t>(t)]);
      source.set_weights(ref::random_floats(rng, rows * 8, -2, 2), source.table_offset(t));
      const std::vector<std::uint8_t> bytes = mpe::io::export_table(source, t, mpe::interop::FbgemmFused{});
      CHECK(mpe::io::import_table(now, t, mpe::interop::FbgemmFused{}, bytes) == 0);
      CHECK(mpe::io::import_table(later, t, mpe::interop::FbgemmFused{}, bytes) == 0);
      const auto g = ref::random_floats(rng, out_size, -1, 1);
      now.backward(g, mpe::Adagrad{0.1f});
      later.backward(g, mpe::Adagrad{0.1f});
      REQUIRE(ref::same_bits(weights(now), weights(later)));
      REQUIRE(same_stats(now.stats(), later.stats()));
    }
    REQUIRE(mpe::io::save_to_bytes(now) == mpe::io::save_to_bytes(later));
  }
}

TEST_CASE("defer_admission: MixedDimEmbedding, io::import_table into a group between forward and backward") {
  using E = mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  // Groups: D = 16 holds tables 0 and 2 (local 0, 1), D = 3 tables 1 and 3.
  const std::vector<mpe::TableSpec> specs{{40, 16}, {25, 3}, {150, 16}, {7, 3}};
  const auto cfg = [&](bool defer) {
    return mpe::MixedDimConfig{.tables = specs, .cache_fraction = 0.2, .seed = 9, .defer_admission = defer};
  };
  E now(cfg(false)), later(cfg(true)), source(cfg(false));
  now.init_uniform(-0.5f, 0.5f);
  later.init_uniform(-0.5f, 0.5f);
  const std::vector<std::int64_t> rows{40, 25, 150, 7};
  std::mt19937_64 rng(23);
  const std::size_t out_size = static_cast<std::size_t>(kB * now.total_dim());
  std::vector<float> o1(out_size), o2(out_size);
  const auto table_weights = [&rows](const E& e, std::int64_t t) {
    std::vector<float> w(static_cast<std::size_t>(rows[static_cast<std::size_t>(t)] * e.dim(t)));
    e.get_weights(t, w);
    return w;
  };
  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    const ref::Batch b = ref::random_batch(rng, rows, kB, 6, false);
    now.forward(b.indices, b.offsets, o1);
    later.forward(b.indices, b.offsets, o2);
    REQUIRE(ref::same_bits(o1, o2));
    const std::int64_t t = step % 4, g = t % 2, local = t / 2;
    const auto n = static_cast<std::size_t>(rows[static_cast<std::size_t>(t)] * source.dim(t));
    source.set_weights(t, ref::random_floats(rng, n, -2, 2));
    const std::vector<std::uint8_t> bytes =
        mpe::io::export_table(source.group(static_cast<std::size_t>(g)), local, mpe::interop::FbgemmFused{});
    CHECK(mpe::io::import_table(now.group(static_cast<std::size_t>(g)), local, mpe::interop::FbgemmFused{},
                                bytes) == 0);
    CHECK(mpe::io::import_table(later.group(static_cast<std::size_t>(g)), local, mpe::interop::FbgemmFused{},
                                bytes) == 0);
    const auto grad = ref::random_floats(rng, out_size, -1, 1);
    now.backward(grad, mpe::RowwiseAdagrad{0.3f});
    later.backward(grad, mpe::RowwiseAdagrad{0.3f});
    REQUIRE(same_stats(now.stats(), later.stats()));
    for (std::int64_t u = 0; u < 4; ++u) {
      CAPTURE(u);
      REQUIRE(ref::same_bits(table_weights(now, u), table_weights(later, u)));
    }
  }
}

TEST_CASE_TEMPLATE(
    "defer_admission: a checkpoint after a refused call resumes with the uninterrupted run's call numbers", B,
    mpe::HostBackend, ref::AsyncHostBackend) {
  // Calls 1 - 4: two steps; 5: a forward whose admission is pending; 6: a backward refused
  // for its gradient's size; then save(). The checkpoint holds the state before call 5 and
  // counts call 6: the resumed run repeats that forward (call 6 again), then both runs make
  // the backward (call 7) and a forward with an index outside its table (call 8), which
  // synchronize() must name alike.
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, B>;
  const mpe::EmbeddingConfig cfg{.table_rows = kTables,
                                 .dim = 6,
                                 .cache_rows = 16,
                                 .seed = 8,
                                 .validation = mpe::Validation::Deferred,
                                 .defer_admission = true};
  std::mt19937_64 rng(12);
  std::vector<ref::Batch> batches;
  for (int k = 0; k < 4; ++k) batches.push_back(ref::random_batch(rng, kTables, kB, 6, false));
  const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * 6;
  std::vector<float> out(out_size);
  const auto grad = ref::random_floats(rng, out_size, -1, 1);
  const auto path =
      std::filesystem::temp_directory_path() / ("mpe_defer_admission_calls_" + std::to_string(::getpid()));
  E run(cfg, B{});
  run.set_weights(ref::random_floats(rng, static_cast<std::size_t>(run.total_rows()) * 6, -1, 1));
  for (int k = 0; k < 2; ++k) {
    run.forward(batches[static_cast<std::size_t>(k)].indices, batches[static_cast<std::size_t>(k)].offsets,
                out);
    run.backward(grad, mpe::Sgd{0.2f});
  }
  run.forward(batches[2].indices, batches[2].offsets, out);
  const std::vector<float> short_grad(grad.begin(), grad.end() - 1);
  CHECK_THROWS_AS(run.backward(short_grad, mpe::Sgd{0.2f}), std::invalid_argument);
  run.save(path);
  E resumed(cfg, B{});
  resumed.load(path);
  std::filesystem::remove(path);
  resumed.forward(batches[2].indices, batches[2].offsets, out);
  const auto go_on = [&](E& e) {
    e.backward(grad, mpe::Sgd{0.2f});
    auto idx = batches[3].indices;
    idx[1] = 1000;
    e.forward(idx, batches[3].offsets, out);
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
  CHECK(uninterrupted.find("forward (deferred, call 8)") != std::string::npos);
  CHECK(uninterrupted.find("indices[1] = 1000") != std::string::npos);
  CHECK(after_load == uninterrupted);
  REQUIRE(ref::same_bits(weights(run), weights(resumed)));
  REQUIRE(same_stats(run.stats(), resumed.stats()));
}
