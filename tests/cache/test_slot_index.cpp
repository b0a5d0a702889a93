// SPDX-License-Identifier: Apache-2.0
// EmbeddingConfig::slot_index: the (rows) row -> slot array stays exactly what the tags say
// (a plain loop over the tags is the reference) through fills, evictions, set_weights'
// drops, prefetch, load() and flush(); and an object with it trains, evaluates and saves
// the same bits as its twin without it, for every cache policy.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <vector>

#include "reference/embedding_bag.hpp"

namespace {

const std::vector<std::int64_t> kTables{40, 7, 150};
constexpr int kD = 5;
constexpr std::int64_t kB = 12;

template <class C>
using Emb = mpe::CachedEmbedding<mpe::Int8Rowwise, C, mpe::StochasticRounding>;

template <class C>
Emb<C> make(bool index) {
  const mpe::EmbeddingConfig cfg{
      .table_rows = kTables, .dim = kD, .cache_rows = 16, .seed = 7, .slot_index = index};
  return Emb<C>(cfg, mpe::HostBackend{1});
}

/// The index an object must hold: each tagged slot's row maps to the slot, every other row
/// to -1, from a plain loop over the tags.
template <class E>
void check_index(const E& e) {
  const mpe::CacheRef c = e.cache_ref();
  REQUIRE(c.slot_of_row != nullptr);
  std::vector<std::int32_t> want(static_cast<std::size_t>(e.total_rows()), -1);
  for (std::int64_t s = 0; s < c.slots(); ++s)
    if (c.tags[s] >= 0) want[static_cast<std::size_t>(c.tags[s])] = static_cast<std::int32_t>(s);
  for (std::int64_t r = 0; r < e.total_rows(); ++r) {
    CAPTURE(r);
    REQUIRE(c.slot_of_row[r] == want[static_cast<std::size_t>(r)]);
    // find() answers from the index; the set scan must agree.
    std::int64_t scan = -1;
    const std::int64_t base = c.set_of(r) * c.ways;
    for (std::int32_t w = 0; w < c.ways; ++w)
      if (c.tags[base + w] == r) scan = base + w;
    REQUIRE(c.find(r) == scan);
  }
}

template <class E>
std::vector<float> weights(const E& e) {
  std::vector<float> w(static_cast<std::size_t>(e.total_rows()) * kD);
  e.get_weights(w);
  return w;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("mpe_slot_index_") + name)).string();
}

}  // namespace

TEST_CASE_TEMPLATE("slot index: exact after every call; same bits as without it", C, mpe::Lru<4>, mpe::Lfu<4>,
                   mpe::DirectMapped, mpe::SecondTouchLru<4>, mpe::WTinyLfu<4>) {
  Emb<C> plain = make<C>(false);
  Emb<C> indexed = make<C>(true);
  CHECK(plain.cache_ref().slot_of_row == nullptr);
  // The index costs 4 B per row of the table and nothing else.
  CHECK(indexed.memory().cache_bytes - plain.memory().cache_bytes ==
        4 * static_cast<std::size_t>(indexed.total_rows()));
  check_index(indexed);  // all -1 before any fill

  std::mt19937_64 rng(5);
  const auto w0 = ref::random_floats(rng, static_cast<std::size_t>(plain.total_rows()) * kD, -1, 1);
  plain.set_weights(w0);
  indexed.set_weights(w0);
  const std::string path = temp_path("mid");
  for (int step = 0; step < 24; ++step) {
    CAPTURE(step);
    const ref::Batch b = ref::random_batch(rng, kTables, kB, 6, step % 3 == 0);
    const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * kD;
    std::vector<float> o1(out_size), o2(out_size);
    if (step % 4 == 1) {
      plain.prefetch(b.indices, b.offsets);
      indexed.prefetch(b.indices, b.offsets);
      check_index(indexed);
    }
    plain.forward(b.indices, b.offsets, o1, mpe::Pooling::Sum, b.weights);
    indexed.forward(b.indices, b.offsets, o2, mpe::Pooling::Sum, b.weights);
    check_index(indexed);
    REQUIRE(o1 == o2);
    const auto g = ref::random_floats(rng, out_size, -1, 1);
    plain.backward(g, mpe::RowwiseAdagrad{0.2f});
    indexed.backward(g, mpe::RowwiseAdagrad{0.2f});
    check_index(indexed);

    // Evaluation through the cache: slots from the index instead of the set scan.
    const ref::Batch e = ref::random_batch(rng, kTables, kB, 6, false);
    plain.forward_inference(e.indices, e.offsets, o1);
    indexed.forward_inference(e.indices, e.offsets, o2);
    REQUIRE(o1 == o2);

    if (step % 5 == 2) {  // set_weights drops the rows' cache lines (WriteRows / DropRows)
      const std::int64_t first = static_cast<std::int64_t>(rng() % 150),
                         count = 1 + static_cast<std::int64_t>(rng() % 30);
      const auto part = ref::random_floats(rng, static_cast<std::size_t>(count) * kD, -1, 1);
      plain.set_weights(part, first);
      indexed.set_weights(part, first);
      check_index(indexed);
    }
    if (step == 11) indexed.save(path);
  }
  REQUIRE(weights(plain) == weights(indexed));

  // load(): the index is rebuilt from the loaded tags, whichever object wrote the file.
  Emb<C> restored = make<C>(true);
  restored.load(path);
  check_index(restored);
  const std::string path_plain = temp_path("plain");
  plain.save(path_plain);
  Emb<C> from_plain = make<C>(true);
  from_plain.load(path_plain);
  check_index(from_plain);
  indexed.load(path_plain);  // an object with a full index, replaced
  check_index(indexed);
  const ref::Batch e = ref::random_batch(rng, kTables, kB, 6, false);
  std::vector<float> o1(static_cast<std::size_t>(kB) * kTables.size() * kD), o2(o1.size()), o3(o1.size());
  plain.forward_inference(e.indices, e.offsets, o1);
  from_plain.forward_inference(e.indices, e.offsets, o2);
  indexed.forward_inference(e.indices, e.offsets, o3);
  CHECK(o1 == o2);
  CHECK(o1 == o3);
  indexed.flush();
  check_index(indexed);
  std::filesystem::remove(path);
  std::filesystem::remove(path_plain);
}
