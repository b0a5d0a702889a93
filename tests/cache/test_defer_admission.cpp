// SPDX-License-Identifier: Apache-2.0
// EmbeddingConfig::defer_admission: a forward() that leaves its batch's admission to the
// backward() trains the same bits as its twin that admits in the forward, for every cache
// policy and several store formats, with and without a slot index, on one and two threads,
// through prefetch() between forward() and backward(), set_weights(), init_uniform(), flush(),
// reset_stats(), a backward() that throws and is retried, and NonFinite::Skip. Its outputs also equal a plain
// FP32 embedding bag of get_weights() (ref::EmbeddingBag) bit for bit. A forward() that gets
// no backward() admits nothing: it matches the twin's forward_inference(), and a checkpoint
// written while its admission is pending resumes exactly.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

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
          const std::vector<float> want = reference_output(later, b, pooling);
          if (kind == 6) {
            // No backward: the deferring object admits nothing, as forward_inference.
            now.forward_inference(b.indices, b.offsets, o1, pooling, b.weights);
            later.forward(b.indices, b.offsets, o2, pooling, b.weights);
            REQUIRE(ref::same_bits(o1, o2));
            REQUIRE(ref::same_bits(o2, want));
            if (!saved) {  // written with the admission pending: the state before it
              later.save(path);
              saved = true;
              E restored(cfg(true), mpe::HostBackend{threads});
              restored.load(path);
              // The next calls of the saved object and of the restored one are the same.
              const ref::Batch nb = ref::random_batch(rng, kTables, kB, 6, false);
              std::vector<float> o3(out_size);
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
              REQUIRE(ref::same_bits(weights(now), weights(later)));
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
  const auto w0 = ref::random_floats(rng, static_cast<std::size_t>(now.total_rows()) * 8, -1, 1);
  now.set_weights(w0);
  later.set_weights(w0);
  const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * 8;
  std::vector<float> o1(out_size), o2(out_size);
  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 6, false);
    now.forward(b.indices, b.offsets, o1);
    later.forward(b.indices, b.offsets, o2);
    REQUIRE(ref::same_bits(o1, o2));
    auto g = ref::random_floats(rng, out_size, -1, 1);
    if (step % 3 == 1) g[step] = std::numeric_limits<float>::infinity();
    now.backward(g, mpe::Sgd{0.5f});
    later.backward(g, mpe::Sgd{0.5f});
    REQUIRE(ref::same_bits(weights(now), weights(later)));
    REQUIRE(same_stats(now.stats(), later.stats()));
  }
  CHECK(later.stats().skipped_steps == 4);
}

TEST_CASE("defer_admission: without a backward nothing is admitted") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  E e(mpe::EmbeddingConfig{.table_rows = kTables, .dim = 4, .cache_rows = 16, .defer_admission = true});
  const ref::Batch b{{1, 2, 3, 1}, {0, 2, 4, 4, 4, 4, 4}, {}, 2};
  std::vector<float> out(2 * 3 * 4);
  e.forward(b.indices, b.offsets, out);
  CHECK(e.stats().lookups == 0);         // counted when admitted
  e.forward(b.indices, b.offsets, out);  // drops the first batch's admission
  CHECK(e.stats().lookups == 0);
  const mpe::CacheRef c = e.cache_ref();
  for (std::int64_t s = 0; s < c.slots(); ++s) CHECK(c.tags[s] == -1);
  e.backward(std::vector<float>(out.size(), 0.25f), mpe::Sgd{0.1f});
  CHECK(e.stats().lookups == 4);
  CHECK(e.stats().unique_rows == 3);
  CHECK(e.stats().misses == 3);
  CHECK(e.stats().hits == 0);
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
    const auto g = ref::random_floats(rng, out_size, -1, 1);
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
