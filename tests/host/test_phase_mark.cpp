// SPDX-License-Identifier: Apache-2.0
// The profiling hook MPE_PHASE_MARK (mpe/detail/host/phase_mark.hpp): defined before mpe is
// included, it sees forward()'s phases in the documented order, populate's only when the
// forward populates, and its definition changes no result.
#include <string>
#include <vector>

namespace {
std::vector<std::string> g_marks;
}  // namespace
#define MPE_PHASE_MARK(name) g_marks.emplace_back(name)

#include <doctest/doctest.h>

#include <mpe/mpe.hpp>

namespace {
using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding>;

mpe::EmbeddingConfig config(std::int64_t cache_rows) {
  mpe::EmbeddingConfig c;
  c.table_rows = {300, 200};
  c.dim = 8;
  c.cache_rows = cache_rows;
  c.seed = 3;
  return c;
}
}  // namespace

// One host thread (the admission in one pass: "hits" is empty) and two (two launches): the
// same marks.
TEST_CASE("MPE_PHASE_MARK: forward()'s phases in order, populate's only when it populates") {
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    E emb(config(64), mpe::HostBackend{.num_threads = threads});
    emb.init_uniform(-0.5f, 0.5f);
    const std::vector<std::int64_t> indices{1, 5, 299, 7, 0, 199, 5, 3};  // 2 tables x 2 bags
    const std::vector<std::int64_t> offsets{0, 2, 4, 6, 8};
    std::vector<float> out(2 * 2 * 8), grad(out.size(), 0.25f);
    const std::vector<std::string> populate{"begin",  "validate", "dedup", "sort", "hits",
                                            "misses", "count",    "slots", "pool", "end"};
    g_marks.clear();
    emb.forward(indices, offsets, out);
    CHECK(g_marks == populate);
    emb.backward(grad, mpe::Sgd{0.5f});
    // A forward consuming the prefetched batch: populate's marks fired in prefetch().
    g_marks.clear();
    emb.prefetch(indices, offsets);
    CHECK(g_marks == std::vector<std::string>{"dedup", "sort", "hits", "misses", "count"});
    g_marks.clear();
    std::vector<float> again(out.size());
    emb.forward(indices, offsets, again);
    CHECK(g_marks == std::vector<std::string>{"begin", "validate", "slots", "pool", "end"});
    // The hook only observes: each bag is its rows (get_weights) summed in index order by a
    // plain loop, bit for bit (the numerics contract's sum pooling).
    std::vector<float> w(8);
    for (std::size_t b = 0; b < 4; ++b) {
      const std::int64_t t = static_cast<std::int64_t>(b / 2), bag = static_cast<std::int64_t>(b % 2);
      std::vector<float> want(8, 0.0f);
      for (std::int64_t k = offsets[b]; k < offsets[b + 1]; ++k) {
        emb.get_weights(std::span<float>(w), t == 0 ? indices[k] : 300 + indices[k]);
        for (int d = 0; d < 8; ++d) want[d] += w[d];
      }
      for (int d = 0; d < 8; ++d) CHECK(again[(bag * 2 + t) * 8 + d] == want[d]);
    }
  }
}

TEST_CASE("MPE_PHASE_MARK: a table without a cache skips populate") {
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    E emb(config(0), mpe::HostBackend{.num_threads = threads});
    emb.init_uniform(-0.5f, 0.5f);
    const std::vector<std::int64_t> indices{1, 2, 3, 4};
    const std::vector<std::int64_t> offsets{0, 1, 2, 3, 4};
    std::vector<float> out(2 * 2 * 8);
    g_marks.clear();
    emb.forward(indices, offsets, out);
    CHECK(g_marks == std::vector<std::string>{"begin", "validate", "slots", "pool", "end"});
  }
}
