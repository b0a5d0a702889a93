// SPDX-License-Identifier: Apache-2.0
// Scripted traces for the FP32 row cache's rules (DESIGN.md "Cache semantics"): every
// step is compared with the plain-loop simulator (tags, LRU scores, dirty bits, every
// CacheStats counter, each row's slot) and, with Fp32 storage, the pooled outputs and
// weights with a plain FP32 embedding bag. The hand-derived expectations below follow
// from the rules alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <mpe/mpe.hpp>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "reference/cache_harness.hpp"

using mpe_test::Harness;
using mpe_test::make_batch;
using mpe_test::TraceBatch;

namespace {

constexpr std::int32_t kD = 4;

/// The first `count` global rows >= `from` whose set (of `num_sets`) is `set`.
std::vector<std::int64_t> rows_in_set(std::int64_t num_sets, std::int64_t set, std::size_t count,
                                      std::int64_t from = 0) {
  std::vector<std::int64_t> out;
  for (std::int64_t r = from; out.size() < count; ++r) {
    if (mpe::set_of_row(r, num_sets) == set) out.push_back(r);
  }
  return out;
}

/// One table, one bag holding `rows` (global = local with a single table).
TraceBatch one_bag(const std::vector<std::int64_t>& rows) { return make_batch(1, {rows}); }

/// Two tables, one bag each: global rows below `split` go to table 0, others to table 1.
TraceBatch two_tables(const std::vector<std::int64_t>& rows, std::int64_t split) {
  std::vector<std::int64_t> a, b;
  for (auto r : rows) (r < split ? a : b).push_back(r < split ? r : r - split);
  return make_batch(2, {a, b});
}

}  // namespace

TEST_CASE_TEMPLATE("more misses in one set than ways: the extras are conflict misses, served from the store",
                   P, mpe::Lru<4>, mpe::Lfu<4>, mpe::DirectMapped) {
  constexpr int W = P::ways;
  Harness<mpe::Fp32, P> h({500, 300}, kD, 32);
  const std::int64_t sets = h.ce().num_sets();
  REQUIRE(sets == 32 / W);
  // W + 2 rows of set 1, spread over both tables, plus duplicates.
  auto rows = rows_in_set(sets, 1, W + 2, 400);
  std::vector<std::int64_t> occ = rows;
  occ.push_back(rows[0]);
  occ.push_back(rows.back());
  h.forward(two_tables(occ, 500));
  const mpe::CacheStats s = h.ce().stats();
  CHECK(s.unique_rows == static_cast<std::uint64_t>(W + 2));
  CHECK(s.misses == static_cast<std::uint64_t>(W + 2));
  // The set was empty: W rows take its W ways, the other 2 find every way locked.
  CHECK(s.conflict_misses == 2);
  CHECK(s.evictions == 0);
  if (!P::uses_sketch) {
    // LRU and direct-mapped admit in ascending row order: the W smallest rows are cached.
    for (int i = 0; i < W + 2; ++i) CHECK((h.ce().cache_ref().find(rows[i]) >= 0) == (i < W));
  }
  h.backward();  // cached rows train in FP32, conflict rows in the store (weights checked)
  h.forward(two_tables(occ, 500));
  h.backward();
  h.flush();
}

TEST_CASE_TEMPLATE("duplicates in a batch count once", P, mpe::Lru<4>, mpe::Lfu<4>, mpe::DirectMapped) {
  Harness<mpe::Fp32, P> h({100}, kD, 16);
  const auto tb = make_batch(1, {{5, 5, 9}, {5}, {}, {9, 9}});
  h.forward(tb);
  mpe::CacheStats s = h.ce().stats();
  CHECK(s.lookups == 6);
  CHECK(s.unique_rows == 2);
  CHECK(s.misses == 2);
  CHECK(s.hits == 0);
  h.backward();
  h.forward(tb);
  s = h.ce().stats();
  CHECK(s.lookups == 12);
  CHECK(s.unique_rows == 4);
  CHECK(s.hits == 2);
  h.backward();
}

TEST_CASE_TEMPLATE("a row hit by this batch is never the victim", P, mpe::Lru<4>, mpe::Lfu<4>, mpe::Lru<2>,
                   mpe::DirectMapped) {
  constexpr int W = P::ways;
  Harness<mpe::Fp32, P> h({3000}, kD, 64);
  const std::int64_t sets = h.ce().num_sets();
  const auto cand = rows_in_set(sets, 3, W + 1);
  const std::vector<std::int64_t> R(cand.begin(), cand.begin() + W);
  const std::int64_t x = cand.back();
  h.forward(one_bag(R));
  h.backward();
  // Make x more frequent than every resident without caching it: x is prefetched (twice)
  // while R awaits backward, so its set is locked and x is a conflict miss each time.
  for (int round = 0; round < 4; ++round) {
    h.forward(one_bag(R));
    h.prefetch(one_bag({x}));
    h.prefetch(one_bag({x}));
    h.backward();
    h.forward(one_bag({x}));
    CHECK(h.ce().cache_ref().find(x) == -1);
    h.backward();
  }
  if constexpr (P::uses_sketch) {
    for (auto r : R) REQUIRE(h.sim().estimate(x) > h.sim().estimate(r));
  }
  std::vector<std::int64_t> slots;
  for (auto r : R) slots.push_back(h.ce().cache_ref().find(r));
  const mpe::CacheStats before = h.ce().stats();
  std::vector<std::int64_t> all = R;
  all.push_back(x);
  h.forward(one_bag(all));
  const mpe::CacheStats after = h.ce().stats();
  // Every way holds a row of this batch: x (which beats them on score) is a conflict miss.
  CHECK(after.conflict_misses == before.conflict_misses + 1);
  CHECK(after.evictions == before.evictions);
  CHECK(after.hits == before.hits + static_cast<std::uint64_t>(W));
  CHECK(h.ce().cache_ref().find(x) == -1);
  for (std::size_t i = 0; i < R.size(); ++i) CHECK(h.ce().cache_ref().find(R[i]) == slots[i]);
  h.backward();
}

TEST_CASE_TEMPLATE("equal scores: the lowest way is the victim", P, mpe::Lru<4>, mpe::Lfu<4>, mpe::Lru<8>) {
  constexpr int W = P::ways;
  Harness<mpe::Fp32, P> h({3000}, kD, 128);
  const std::int64_t sets = h.ce().num_sets();
  const auto cand = rows_in_set(sets, 5, W + 1);
  const std::vector<std::int64_t> R(cand.begin(), cand.begin() + W);
  const std::int64_t y = cand.back();
  h.forward(one_bag(R));  // fills ways 0..W-1 (ascending rows for LRU), one batch: equal LRU scores
  h.backward();
  if constexpr (P::uses_sketch) {
    // Precondition of the tie: each resident seen once, no sketch collision.
    for (auto r : R) REQUIRE(h.sim().estimate(r) == 1);
    h.forward(one_bag({y}));  // estimate 1, not above the victim's 1: rejected
    CHECK(h.ce().stats().lfu_rejections == 1);
    h.backward();
  }
  const std::int64_t base = 5 * W;
  const std::int64_t way0 = h.ce().cache_ref().tags[base];
  h.forward(one_bag({y}));
  CHECK(h.ce().cache_ref().find(y) == base);  // way 0 of set 5
  CHECK(h.ce().cache_ref().find(way0) == -1);
  CHECK(h.ce().stats().evictions == 1);
  CHECK(h.ce().stats().writebacks == 1);  // the evicted row was trained: dirty
  h.backward();
}

TEST_CASE("LFU keeps a frequent row through a burst of one-off rows; LRU loses it") {
  Harness<mpe::Fp32, mpe::Lfu<4>> lfu({20000}, kD, 64);
  Harness<mpe::Fp32, mpe::Lru<4>> lru({20000}, kD, 64);
  const std::int64_t sets = lfu.ce().num_sets();
  REQUIRE(sets == lru.ce().num_sets());
  const std::int64_t f = 12345;
  const std::int64_t s = mpe::set_of_row(f, sets);
  const auto others = rows_in_set(sets, s, 48, 13000);
  for (int i = 0; i < 10; ++i) {
    lfu.forward(one_bag({f}));
    lfu.backward();
    lru.forward(one_bag({f}));
    lru.backward();
  }
  bool lru_lost = false;
  for (std::size_t i = 0; i < others.size(); i += 4) {
    const std::vector<std::int64_t> burst(others.begin() + static_cast<std::ptrdiff_t>(i),
                                          others.begin() + static_cast<std::ptrdiff_t>(i + 4));
    lfu.forward(one_bag(burst));
    lfu.backward();
    lru.forward(one_bag(burst));
    lru.backward();
    CHECK(lfu.ce().cache_ref().find(f) >= 0);
    lru_lost = lru_lost || lru.ce().cache_ref().find(f) < 0;
  }
  CHECK(lru_lost);
  CHECK(lru.ce().cache_ref().find(f) == -1);
  CHECK(lfu.ce().stats().lfu_rejections > 0);
  // 58 increments, far below one halving period (10 x 64 slots).
  CHECK(lfu.sim().halvings() == 0);
}

TEST_CASE("the LFU sketch halves every 10 x slots increments") {
  // Tiny cache: 4 sets x 2 ways, halving period 80 increments.
  Harness<mpe::Fp32, mpe::Lfu<2>> h({400}, kD, 8);
  const std::int64_t slots = h.ce().cache_slots();
  REQUIRE(slots == 8);
  // The real cache's LFU sketch (4 lines of 16 counters) is part of cache_bytes.
  const mpe::MemoryFootprint m = h.ce().memory();
  CHECK(m.cache_bytes == static_cast<std::size_t>(slots * (kD * 4 + 8 + 8 + 1) + 4 * 16 * 4));
  // Same trace on a simulator that never halves: it must part ways with the real cache.
  mpe_test::CacheSimulator never(mpe_test::SimPolicy::Lfu, 2, 400, 8, 16, UINT64_MAX);
  mpe_test::ZipfRows z(400, 1.1, 42);
  bool diverged = false;
  for (int k = 0; k < 300; ++k) {
    std::vector<std::int64_t> rows;
    for (int i = 0; i < 12; ++i) rows.push_back(z.next());
    h.forward(one_bag(rows));
    never.forward(rows);
    h.backward();
    never.backward();
    for (std::size_t s = 0; s < static_cast<std::size_t>(slots); ++s) {
      diverged = diverged || never.tags()[s] != h.ce().cache_ref().tags[s];
    }
  }
  const std::uint64_t incr = h.ce().stats().unique_rows;
  CHECK(incr > 20 * 80);  // the trace spans many halving periods
  CHECK(h.sim().halvings() == incr / 80);
  CHECK(diverged);
}

TEST_CASE_TEMPLATE("direct-mapped: a colliding pair alternating misses every time", S, mpe::Fp32,
                   mpe::Int8Rowwise) {
  Harness<S, mpe::DirectMapped> h({1000}, kD, 64);
  REQUIRE(h.ce().num_sets() == 64);
  const auto pair = rows_in_set(64, mpe::set_of_row(17, 64), 2, 17);
  REQUIRE(pair[0] == 17);
  for (int k = 0; k < 6; ++k) {
    h.forward(one_bag({pair[static_cast<std::size_t>(k % 2)]}));
    h.backward();
  }
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(mpe_test::design_row_bytes<S>(kD));
  mpe::CacheStats s = h.ce().stats();
  CHECK(s.hits == 0);
  CHECK(s.misses == 6);
  CHECK(s.evictions == 5);
  CHECK(s.writebacks == 5);
  CHECK(s.bytes_filled == 6 * row_bytes);
  CHECK(s.bytes_written_back == 5 * row_bytes);
  // Both in one batch: pair[1] (resident) is a hit and holds the only way, so pair[0]
  // is a conflict miss, read and updated in the store.
  h.forward(one_bag({pair[1], pair[0]}));
  CHECK(h.ce().cache_ref().find(pair[1]) == mpe::set_of_row(17, 64));
  CHECK(h.ce().cache_ref().find(pair[0]) == -1);
  s = h.ce().stats();
  CHECK(s.hits == 1);
  CHECK(s.conflict_misses == 1);
  CHECK(s.evictions == 5);
  h.backward();
  h.flush();
  CHECK(h.ce().stats().writebacks == 6);  // 5 at eviction + pair[1] at flush
}

TEST_CASE("cache_rows: below Ways is rejected, above the table is clamped") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {7, 3};
  cfg.dim = kD;
  cfg.cache_rows = 3;
  using Lru4 = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
  using Lfu8 = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<8>, mpe::NearestRounding>;
  using Dm = mpe::CachedEmbedding<mpe::Fp32, mpe::DirectMapped, mpe::NearestRounding>;
  CHECK_THROWS_WITH_AS(Lru4{cfg}, doctest::Contains("cache_rows = 3"), std::invalid_argument);
  cfg.cache_rows = 7;
  CHECK_THROWS_WITH_AS(Lfu8{cfg}, doctest::Contains("cache_rows = 7"), std::invalid_argument);
  cfg.cache_rows = 1000;  // 10 rows, rounded up to 12 for 4 ways: 3 sets
  CHECK(Lru4{cfg}.num_sets() == 3);
  CHECK(Lru4{cfg}.cache_slots() == 12);
  CHECK(Dm{cfg}.num_sets() == 10);
  CHECK(Lfu8{cfg}.num_sets() == 2);  // 10 rows rounded up to 16: 2 sets of 8
  cfg.cache_rows = 11;               // floor(11 / 4) = 2 sets
  CHECK(Lru4{cfg}.num_sets() == 2);
  cfg.cache_rows = 0;
  CHECK(Lru4{cfg}.cache_slots() == 0);
  // The simulator follows the same sizing rule.
  CHECK(mpe_test::CacheSimulator(mpe_test::SimPolicy::Lru, 4, 10, 1000, 16).num_sets() == 3);
  // A clamped cache has a slot for every row, but rows map to sets by hash: a set that
  // gets more than 4 of the 10 rows still has conflict misses. Second pass: per set,
  // min(rows of the set, 4) hits.
  Harness<mpe::Fp32, mpe::Lru<4>> h({7, 3}, kD, 1000);
  const auto all = make_batch(2, {{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2}});
  h.forward(all);
  h.backward();
  h.forward(all);
  std::vector<std::uint64_t> per_set(3, 0);
  for (std::int64_t r = 0; r < 10; ++r) ++per_set[static_cast<std::size_t>(mpe::set_of_row(r, 3))];
  std::uint64_t expect_hits = 0;
  for (auto n : per_set) expect_hits += std::min<std::uint64_t>(n, 4);
  CHECK(h.ce().stats().hits == expect_hits);
  h.backward();
}

TEST_CASE_TEMPLATE("prefetch of batch k+1 never evicts batch k's rows before backward(k)", P, mpe::Lru<4>,
                   mpe::Lfu<4>, mpe::DirectMapped) {
  constexpr int W = P::ways;
  Harness<mpe::Fp32, P> h({2000}, kD, 16);
  const std::int64_t sets = h.ce().num_sets();
  const auto cand = rows_in_set(sets, 2, 2 * W);
  const std::vector<std::int64_t> k0(cand.begin(), cand.begin() + W), k1(cand.begin() + W, cand.end());
  SUBCASE("in flight: locked") {
    h.forward(one_bag(k0));
    std::vector<std::int64_t> slots;
    for (auto r : k0) slots.push_back(h.ce().cache_ref().find(r));
    const std::uint64_t lookups = h.ce().stats().lookups;
    h.prefetch(one_bag(k1));
    // Batch k holds every way of the set: each row of k+1 is a conflict miss.
    CHECK(h.ce().stats().conflict_misses == static_cast<std::uint64_t>(W));
    CHECK(h.ce().stats().evictions == 0);
    for (std::size_t i = 0; i < k0.size(); ++i) CHECK(h.ce().cache_ref().find(k0[i]) == slots[i]);
    h.backward();            // updates k's cached FP32 rows (weights checked against the reference)
    h.forward(one_bag(k1));  // uses the prefetch: reads k+1 from the store
    CHECK(h.ce().stats().lookups == lookups + static_cast<std::uint64_t>(W));
    h.backward();
  }
  SUBCASE("after backward: evictable") {
    h.forward(one_bag(k0));
    h.backward();
    h.forward(one_bag(k0));  // LFU: estimates of k0 become 2
    h.backward();
    h.prefetch(one_bag(k1));
    if constexpr (P::uses_sketch) {
      CHECK(h.ce().stats().lfu_rejections == static_cast<std::uint64_t>(W));  // 1 is not above 2
    } else {
      CHECK(h.ce().stats().evictions == static_cast<std::uint64_t>(W));
      for (auto r : k1) CHECK(h.ce().cache_ref().find(r) >= 0);
    }
    h.forward(one_bag(k1));
    h.backward();
  }
  h.flush();
}

TEST_CASE("set_weights between prefetch and forward: forward reads the new weights") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {100};
  cfg.dim = kD;
  cfg.cache_rows = 16;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> ce(cfg);
  std::vector<float> w(100 * kD, 1.0f);
  ce.set_weights(w);
  const std::vector<std::int64_t> idx{3, 8}, off{0, 2};
  std::vector<float> out(kD), grad(kD, 0.0f);
  ce.forward(idx, off, out);
  ce.backward(grad, mpe::Sgd{0.5f});
  ce.prefetch(idx, off);  // both rows hit: their slots are recorded for the forward
  const std::vector<float> row3(kD, 2.5f);
  ce.set_weights(row3, 3);  // drops row 3's cache line
  ce.forward(idx, off, out);
  for (int d = 0; d < kD; ++d) CHECK(out[static_cast<std::size_t>(d)] == 3.5f);  // 2.5 + 1, exact
  ce.backward(std::vector<float>(kD, 1.0f), mpe::Sgd{0.5f});
  std::vector<float> got(2 * kD);
  ce.get_weights(std::span<float>(got).subspan(0, kD), 3);
  ce.get_weights(std::span<float>(got).subspan(kD, kD), 8);
  for (int d = 0; d < kD; ++d) {
    CHECK(got[static_cast<std::size_t>(d)] == 2.0f);       // 2.5 - 0.5 * 1
    CHECK(got[static_cast<std::size_t>(kD + d)] == 0.5f);  // 1 - 0.5 * 1
  }
}

TEST_CASE("backward(k) updates a row that prefetch(k+1) filled after forward(k) left it uncached") {
  // LFU: x is rejected at forward(k) (estimate 2, not above the residents' 2), then the
  // prefetch of k+1 raises its estimate to 3 and fills it. backward(k) must train the
  // cached FP32 copy: an update written to the store would be lost (the harness checks
  // every weight against the plain FP32 model).
  Harness<mpe::Fp32, mpe::Lfu<2>> h({100}, kD, 2);
  REQUIRE(h.ce().num_sets() == 1);
  const std::int64_t a = 10, b = 20, x = 30;
  for (int i = 0; i < 2; ++i) {
    h.forward(one_bag({a, b}));
    h.backward();
  }
  h.forward(one_bag({x}));
  h.backward();
  h.forward(one_bag({x}));
  REQUIRE(h.sim().estimate(x) == 2);
  REQUIRE(h.sim().estimate(a) == 2);
  REQUIRE(h.sim().estimate(b) == 2);
  CHECK(h.ce().cache_ref().find(x) == -1);
  CHECK(h.ce().stats().lfu_rejections == 2);
  h.prefetch(one_bag({x}));
  CHECK(h.ce().cache_ref().find(x) == 0);  // took way 0 (a and b tie at 2)
  h.backward();                            // weights checked: x's update is in the cache
  CHECK(h.ce().cache_ref().dirty[0] == 1);
  h.forward(one_bag({x}));  // uses the prefetch: reads the trained FP32 row
  h.backward();
  h.flush();
}

namespace {
/// A scored policy whose scores do not fit SetVictims' packed keys (>= 2^56): LRU order on
/// last use shifted up, so the list's (score, way) comparison is the one exercised.
struct BigScoreLru : mpe::PolicyBase, mpe::ScoredPolicy<BigScoreLru> {
  // name and ways: required by the CachePolicy concept, not read by this test
  [[maybe_unused]] static constexpr int ways = 8;
  [[maybe_unused]] static constexpr const char* name = "big_score_lru";
  static constexpr bool victims_by_score = true;
  using mpe::ScoredPolicy<BigScoreLru>::choose;
  static std::uint64_t score(View, const mpe::CacheRef& c, std::int64_t slot) {
    return (c.last_use[slot] + 1) << 58;
  }
  static bool admits(View, std::uint32_t, std::uint64_t) { return true; }
};
/// Derives from ScoredPolicy without declaring victims_by_score: asked miss by miss.
struct UndeclaredLru : mpe::PolicyBase, mpe::ScoredPolicy<UndeclaredLru> {
  [[maybe_unused]] static constexpr int ways = 4;
  [[maybe_unused]] static constexpr const char* name = "undeclared_lru";
  using mpe::ScoredPolicy<UndeclaredLru>::choose;
  static std::uint64_t score(View, const mpe::CacheRef& c, std::int64_t slot) { return c.last_use[slot]; }
  static bool admits(View, std::uint32_t, std::uint64_t) { return true; }
};
}  // namespace

// The admission's per-set victim list (detail::SetVictims, used on the host for policies
// declaring victims_by_score) against successive ScoredPolicy::choose calls, which it
// replaces: random sets (empty, locked and unlocked ways, equal scores), random floors and
// miss priorities, each admitted miss filled as the admission fills it. The set is one of
// three (slots base .. base + W), the other two must stay as they are. Last uses and floors
// come in four ranges: small (packed keys); each way small or from 2^56 up (the set's scores
// do not all fit the packed keys); around 2^54 (the packing limit); small or from 2^63 up
// (unsigned comparisons). Each third of the sets runs with the AVX-512 list and minimum
// (score_is_last_use policies with a multiple of 8 ways, sets without empty ways; where the
// CPU has AVX-512), with the AVX2 minimum, and with the scalar loops.
TEST_CASE_TEMPLATE("the per-set victim list gives what successive choose calls give", P, mpe::Lru<4>,
                   mpe::Lru<32>, mpe::Lru<64>, mpe::Lru<256>, mpe::Lfu<8>, mpe::Lfu<32>, mpe::DirectMapped,
                   BigScoreLru, mpe::SecondTouchLru<8>, mpe::SecondTouchLru<32>) {
  static_assert(mpe::detail::uses_scored_choose<P>);
  static_assert(!mpe::detail::uses_scored_choose<mpe::WTinyLfu<32>>);
  static_assert(!mpe::detail::uses_scored_choose<UndeclaredLru>);
  static_assert(mpe::detail::score_is_last_use<mpe::Lru<32>> &&
                mpe::detail::score_is_last_use<mpe::DirectMapped>);
  static_assert(!mpe::detail::score_is_last_use<mpe::Lfu<32>> &&
                !mpe::detail::score_is_last_use<BigScoreLru>);
  constexpr std::int32_t W = P::ways;
  constexpr std::int64_t kSets = 3;
  std::mt19937_64 rng(static_cast<std::uint64_t>(W) * 7 + sizeof(P));
  int compared = 0, rejected = 0, conflicts = 0, filled = 0;
  const bool simd_was = mpe::detail::host_simd_enabled();
  const bool avx512_was = mpe::detail::set_host_avx512(true);
  for (int rep = 0; rep < 6000; ++rep) {
    // AVX-512 (where the CPU has it), AVX2 (where it has that), then the scalar loops
    mpe::detail::set_host_simd(rep % 3 != 2);
    mpe::detail::set_host_avx512(rep % 3 == 0);
    const std::int64_t base = static_cast<std::int64_t>(rng() % kSets) * W;
    const int range = static_cast<int>(rng() % 4);
    // A last use (or, with +1, a floor) in this set's range; few values each: ties.
    const auto use_value = [&] {
      const std::uint64_t low = rng() % 6;
      switch (range) {
        case 1:
          return (rng() % 2 ? std::uint64_t{1} << 56 : 0) + low;
        case 2:
          return (std::uint64_t{1} << 54) - 3 + low;
        case 3:
          return (rng() % 2 ? std::uint64_t{1} << 63 : 0) + low;
        default:
          return low;
      }
    };
    std::vector<float> rows(static_cast<std::size_t>(kSets * W));
    std::vector<std::int64_t> tags(kSets * W);
    std::vector<std::uint64_t> last_use(kSets * W);
    std::vector<std::uint8_t> dirty(kSets * W, 0);
    const int empty_pct = static_cast<int>(rng() % 3) * 20;  // 0, 20 or 40 % empty ways
    for (std::int64_t s = 0; s < kSets * W; ++s) {
      tags[s] = static_cast<int>(rng() % 100) < empty_pct
                    ? -1
                    : 1000 + 10 * s + static_cast<std::int64_t>(rng() % 7);
      last_use[s] = use_value();
    }
    // a filled slot's last use (the batch number) is at or above the floor: locked
    const std::uint64_t floor = use_value() + 1, batch = ~std::uint64_t{0} - 1;
    std::vector<std::uint32_t> words(static_cast<std::size_t>(P::meta_words(kSets * W)));
    for (auto& x : words) x = static_cast<std::uint32_t>(rng() % 5);
    const auto view = P::view(words.data(), kSets * W);
    std::vector<std::int64_t> misses;
    std::vector<std::uint32_t> prio;
    const int k = 1 + static_cast<int>(rng() % (W + 3));
    for (int i = 0; i < k; ++i) {
      misses.push_back(5000 + i);
      prio.push_back(static_cast<std::uint32_t>(rng() % 5));
    }
    // reference: choose on the set as each fill leaves it
    std::vector<std::int64_t> tags_ref = tags;
    std::vector<std::uint64_t> use_ref = last_use;
    const mpe::CacheRef ref{rows.data(), tags_ref.data(), use_ref.data(), dirty.data(), kSets, W, 1};
    std::vector<mpe::CacheChoice> want;
    for (int i = 0; i < k; ++i) {
      const mpe::CacheChoice c = P::choose(view, ref, base, floor, misses[i], prio[i]);
      want.push_back(c);
      if (c.slot >= 0) {
        tags_ref[c.slot] = misses[i];
        use_ref[c.slot] = batch;
      }
    }
    // the victim list, with the same fills
    const mpe::CacheRef got_ref{rows.data(), tags.data(), last_use.data(), dirty.data(), kSets, W, 1};
    mpe::detail::SetVictims<P, mpe::detail::HostPaths> victims;
    for (int i = 0; i < k; ++i) {
      const mpe::CacheChoice c = victims.take(view, got_ref, base, floor, prio[i]);
      CHECK(c.slot == want[i].slot);
      CHECK(c.rejected == want[i].rejected);
      ++compared;
      rejected += c.rejected ? 1 : 0;
      conflicts += (c.slot < 0 && !c.rejected) ? 1 : 0;
      filled += c.slot >= 0 ? 1 : 0;
      CHECK((c.slot == -1 || (c.slot >= base && c.slot < base + W)));
      if (c.slot >= base && c.slot < base + W) {
        tags[c.slot] = misses[i];
        last_use[c.slot] = batch;
      }
    }
    CHECK(tags == tags_ref);
    CHECK(last_use == use_ref);
  }
  mpe::detail::set_host_simd(simd_was);
  mpe::detail::set_host_avx512(avx512_was);
  CHECK(compared > 6000);
  CHECK(filled > 0);
  CHECK(conflicts > 0);
  if constexpr (
      requires { requires P::uses_sketch; } || requires { requires P::uses_doorkeeper; }) {
    CHECK(rejected > 0);  // LFU refuses rows whose estimate is not higher; SecondTouchLru first touches
  }
}
