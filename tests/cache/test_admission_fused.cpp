// SPDX-License-Identifier: Apache-2.0
// The host admission's two orders give the same training: on one HostBackend thread a
// set_local policy runs each set's hits a few sets before its misses in one pass
// (AdmitSet::run_fused); on two threads every set's hits run before any set's misses (two
// launches). Skewed random batches with empty bags and an all-empty batch, small caches
// (conflicts, evictions, dirty write-backs), plain and pipelined (prefetch of batch k+1
// before backward k): outputs, final weights and every counter equal bit for bit. A user
// policy that does not declare set_local (its choose reads a count all sets' hits add to)
// keeps the two launches on one thread too, so it is also thread-count invariant.
#include <doctest/doctest.h>

#include <cstdint>
#include <mpe/mpe.hpp>
#include <random>
#include <vector>

#include "reference/embedding_bag.hpp"
#include "reference/stats_equal.hpp"

namespace {

/// Not set_local: on_hit adds to one word for the whole cache, choose reads it.
struct GlobalHits : mpe::PolicyBase {
  static constexpr int ways = 4;
  static constexpr const char* name = "global_hits";
  struct View {
    std::uint32_t* w = nullptr;
  };
  static std::int64_t meta_words(std::int64_t slots) { return slots > 0 ? 1 : 0; }
  static View view(std::uint32_t* words, std::int64_t) { return {words}; }
  MPE_HOST_DEVICE static void observe(View, std::int64_t, std::uint32_t&, int) {}
  MPE_HOST_DEVICE static std::uint32_t priority(View, std::int64_t, std::uint32_t) { return 0; }
  MPE_HOST_DEVICE static void decay(View, std::int64_t, std::uint64_t) {}
  MPE_HOST_DEVICE static void on_hit(View v, const mpe::CacheRef&, std::int64_t) {
    mpe::detail::atomic_add(v.w, 1u);
  }
  MPE_HOST_DEVICE static mpe::CacheChoice choose(View v, const mpe::CacheRef& c, std::int64_t base,
                                                 std::uint64_t floor, std::int64_t, std::uint32_t) {
    const std::int64_t e = mpe::first_empty_way(c, base);
    if (e >= 0) return {e, false};
    for (int k = 0; k < c.ways; ++k) {  // the victim depends on every set's hits so far
      const std::int64_t s = base + (static_cast<std::int64_t>(*v.w) + k) % c.ways;
      if (!mpe::slot_locked(c, s, floor)) return {s, false};
    }
    return {-1, false};
  }
};

static_assert(mpe::detail::set_local_policy<mpe::Lru<32>> && mpe::detail::set_local_policy<mpe::Lfu<8>> &&
              mpe::detail::set_local_policy<mpe::DirectMapped> &&
              mpe::detail::set_local_policy<mpe::WTinyLfu<8>>);
static_assert(!mpe::detail::set_local_policy<GlobalHits>);

struct Run {
  std::vector<float> outputs, weights;
  mpe::CacheStats stats;
};

template <class S, class C, class Opt>
Run train(int threads, bool pipelined, std::int64_t cache_rows, Opt opt) {
  const std::vector<std::int64_t> tables{3000, 500, 1200};
  constexpr int D = 8, kBatches = 16;
  constexpr std::int64_t B = 48;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = tables;
  cfg.dim = D;
  cfg.cache_rows = cache_rows;
  cfg.seed = 11;
  mpe::CachedEmbedding<S, C, mpe::StochasticRounding> emb(cfg, mpe::HostBackend{.num_threads = threads});
  emb.init_uniform(-0.5f, 0.5f);
  std::mt19937_64 rng(5);
  const auto out_n = static_cast<std::size_t>(B) * tables.size() * D;
  std::vector<ref::Batch> batches;
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < kBatches; ++i) {
    batches.push_back(ref::random_batch(rng, tables, B, i == 3 ? 0 : 10, false));  // batch 3: every bag empty
    grads.push_back(ref::random_floats(rng, out_n, -1, 1));
  }
  Run r;
  if (pipelined) emb.prefetch(batches[0].indices, batches[0].offsets);
  for (int i = 0; i < kBatches; ++i) {
    std::vector<float> out(out_n, 0.0f);
    emb.forward(batches[i].indices, batches[i].offsets, out);
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
    if (pipelined && i + 1 < kBatches) emb.prefetch(batches[i + 1].indices, batches[i + 1].offsets);
    emb.backward(grads[i], opt);
  }
  emb.flush();
  r.weights.resize(static_cast<std::size_t>(emb.total_rows()) * D);
  emb.get_weights(r.weights);
  r.stats = emb.stats();
  return r;
}

template <class S, class C, class Opt>
void one_vs_two_threads(std::int64_t cache_rows, Opt opt) {
  for (const bool pipelined : {false, true}) {
    CAPTURE(pipelined);
    const Run a = train<S, C>(1, pipelined, cache_rows, opt), b = train<S, C>(2, pipelined, cache_rows, opt);
    CHECK(ref::first_diff(a.outputs, b.outputs) == -1);
    CHECK(ref::first_diff(a.weights, b.weights) == -1);
    ref::check_stats_equal(a.stats, b.stats);
    CHECK(a.stats.evictions > 0);  // the cache turned over: admission had work
    CHECK(a.stats.writebacks > 0);
  }
}

}  // namespace

TEST_CASE("admission in one pass (1 thread) = two launches (2 threads): Lru<32>, INT8, SGD") {
  one_vs_two_threads<mpe::Int8Rowwise, mpe::Lru<32>>(256, mpe::Sgd{0.3f});
}
TEST_CASE("admission in one pass (1 thread) = two launches (2 threads): Lfu<8>, INT4, row-wise Adagrad") {
  one_vs_two_threads<mpe::Int4Rowwise, mpe::Lfu<8>>(128, mpe::RowwiseAdagrad{0.3f});
}
TEST_CASE("admission in one pass (1 thread) = two launches (2 threads): W-TinyLFU<8>, FP16, SGD") {
  one_vs_two_threads<mpe::Fp16, mpe::WTinyLfu<8>>(192, mpe::Sgd{0.3f});
}
TEST_CASE("admission in one pass (1 thread) = two launches (2 threads): direct-mapped, INT8, SGD") {
  one_vs_two_threads<mpe::Int8Rowwise, mpe::DirectMapped>(300, mpe::Sgd{0.3f});
}
TEST_CASE("admission in one pass (1 thread) = two launches (2 threads): second-touch LRU<32>, INT8, SGD") {
  one_vs_two_threads<mpe::Int8Rowwise, mpe::SecondTouchLru<32>>(256, mpe::Sgd{0.3f});
}
TEST_CASE("a policy without set_local keeps the two launches: 1 thread = 2 threads") {
  one_vs_two_threads<mpe::Int8Rowwise, GlobalHits>(256, mpe::Sgd{0.3f});
}
