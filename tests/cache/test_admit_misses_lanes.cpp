// SPDX-License-Identifier: Apache-2.0
// The GPU's warp-per-set admission of a set's misses (detail::AdmitMissesLanes, the lanes
// one warp: CudaBackend) decides exactly what the one-thread-per-set AdmitSet decides (its
// Misses phase with SetVictims, the host's and the scalar reference): the warp code runs
// here on a CPU with an emulated warp (reference/warp_emulation.hpp), over random caches and
// batches, and every slot, tag, last use, dirty flag, outcome code, evicted row and slot
// index entry is compared. Sets get 0 to 70 items (several warp widths), a third of them
// hits; ways are empty, locked (used by a batch at or above the lock floor) or free, with
// tied scores; policies of 32 and fewer ways; Lfu and SecondTouchLru refuse misses. The
// backward's slot lookup by a warp (ApplyScaledLanes::slot_warp) finds what CacheRef::find
// finds, at 4, 32 and 64 ways, with and without a slot index.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <mpe/mpe.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "reference/warp_emulation.hpp"

namespace {

using mpe::index_t;

/// One random admission problem: the cache after the batch's hits (AdmitHitsLanes), the
/// batch's items in admission order, and the policy's metadata.
template <class P>
struct Problem {
  static constexpr std::int64_t kSets = 3, kRows = 5000;
  static constexpr std::uint64_t kFloor = 6, kBatch = 12;
  std::vector<index_t> tags, slot_index;
  std::vector<std::uint64_t> last_use;
  std::vector<std::uint8_t> dirty, outcome;
  std::vector<float> rows_fp32;
  std::vector<std::uint32_t> meta, priorities;
  std::vector<std::uint64_t> keys;
  std::vector<index_t> order, rows, slot_of_unique, evicted;
  std::vector<std::int32_t> slot_of_row;
  index_t U = 0, count = 0;
  std::uint64_t floor = kFloor;
  std::uint64_t step = 0;
  bool with_index = false;

  Problem(std::mt19937_64& rng, bool index) : with_index(index) {
    const std::int64_t W = P::ways, slots = kSets * W;
    tags.assign(static_cast<std::size_t>(slots), -1);
    last_use.assign(tags.size(), 0);
    dirty.assign(tags.size(), 0);
    rows_fp32.assign(tags.size(), 0.0f);  // dim 1: never read (the deciding phase moves no row)
    slot_of_row.assign(static_cast<std::size_t>(kRows), -1);
    std::vector<std::vector<index_t>> fresh(kSets);  // each set's rows, shuffled
    for (index_t r = 0; r < kRows; ++r)
      fresh[static_cast<std::size_t>(mpe::set_of_row(r, kSets))].push_back(r);
    for (auto& f : fresh) std::shuffle(f.begin(), f.end(), rng);
    std::uniform_int_distribution<int> pct(0, 99);
    const int empty_pct = std::uniform_int_distribution<int>(0, 3)(rng) * 15;  // 0 .. 45 %
    for (std::int64_t k = 0; k < kSets; ++k) {
      for (std::int64_t w = 0; w < W; ++w) {
        const auto s = static_cast<std::size_t>(k * W + w);
        if (pct(rng) < empty_pct) continue;
        tags[s] = fresh[static_cast<std::size_t>(k)].back();
        fresh[static_cast<std::size_t>(k)].pop_back();
        last_use[s] = std::uniform_int_distribution<std::uint64_t>(0, 9)(rng);  // ties; >= 6 locked
        dirty[s] = static_cast<std::uint8_t>(pct(rng) < 50);
        slot_of_row[static_cast<std::size_t>(tags[s])] = static_cast<std::int32_t>(s);
      }
    }
    meta.assign(static_cast<std::size_t>(P::meta_words(slots)), 0);
    for (auto& m : meta) m = static_cast<std::uint32_t>(rng() % 16);  // sketch counts / doorkeeper bits
    // The batch: per set 0 .. 70 items, a third of them hits on resident rows.
    struct Item {
      std::uint64_t key;
      index_t row;
      std::uint32_t priority;
      index_t slot;  // hit slot, or -1
    };
    std::vector<Item> items;
    const int sizes[] = {0, 1, 5, 31, 32, 33, 45, 70};
    for (std::int64_t k = 0; k < kSets; ++k) {
      std::vector<index_t> resident;
      for (std::int64_t w = 0; w < W; ++w) {
        if (tags[static_cast<std::size_t>(k * W + w)] >= 0) resident.push_back(k * W + w);
      }
      std::shuffle(resident.begin(), resident.end(), rng);
      const int n = sizes[rng() % 8];
      for (int i = 0; i < n; ++i) {
        Item it{};
        it.slot = -1;
        if (pct(rng) < 33 && !resident.empty()) {
          it.slot = resident.back();
          resident.pop_back();
          it.row = tags[static_cast<std::size_t>(it.slot)];
        } else {
          it.row = fresh[static_cast<std::size_t>(k)].back();
          fresh[static_cast<std::size_t>(k)].pop_back();
        }
        it.priority =
            static_cast<std::uint32_t>(rng() % 4);  // Lfu: vs scores 0 .. 15; SecondTouchLru: 2+ admits
        it.key = static_cast<std::uint64_t>(k) << 32 | static_cast<std::uint32_t>(~it.priority);
        items.push_back(it);
      }
    }
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.key < b.key; });
    U = count = static_cast<index_t>(items.size());
    // Unique index u: a random permutation of the admission order (as the sort leaves it).
    order.resize(items.size());
    std::iota(order.begin(), order.end(), index_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    priorities.assign(items.size(), 0);
    outcome.assign(items.size(), 0);
    slot_of_unique.assign(items.size(), -1);
    evicted.assign(items.size(), -7);
    for (std::size_t q = 0; q < items.size(); ++q) {
      const auto u = static_cast<std::size_t>(order[q]);
      keys.push_back(items[q].key);
      rows.push_back(items[q].row);
      priorities[u] = items[q].priority;
      if (items[q].slot >= 0) {  // AdmitHitsLanes' work
        outcome[u] = mpe::detail::kHit;
        slot_of_unique[u] = items[q].slot;
        last_use[static_cast<std::size_t>(items[q].slot)] = kBatch;
      }
    }
  }

  mpe::detail::AdmitSet<mpe::Int8Rowwise, mpe::NearestRounding, P> admit() {
    mpe::CacheRef c;
    c.rows = rows_fp32.data();
    c.tags = tags.data();
    c.last_use = last_use.data();
    c.dirty = dirty.data();
    c.num_sets = kSets;
    c.ways = P::ways;
    c.dim = 1;
    c.slot_of_row = with_index ? slot_of_row.data() : nullptr;
    mpe::detail::AdmitSet<mpe::Int8Rowwise, mpe::NearestRounding, P> a{};
    a.keys = keys.data();
    a.order = order.data();
    a.count = &count;
    a.gate = nullptr;
    a.rows = rows.data();
    a.priorities = priorities.data();
    a.cache = c;
    a.view = P::view(meta.data(), kSets * P::ways);
    a.store = nullptr;  // the deciding phase moves no row
    a.stride = 0;
    a.batch_id = kBatch;
    a.lock_floor = &floor;
    a.step = &step;
    a.slot_of_unique = slot_of_unique.data();
    a.outcome = outcome.data();
    a.phase = mpe::detail::AdmitPhase::Misses;
    a.evicted = evicted.data();
    return a;
  }
};

template <class P>
void check_policy(int trials) {
  std::mt19937_64 rng(0xad517 + P::ways);
  std::uint64_t conflicts = 0, refusals = 0, evictions = 0;
  for (int t = 0; t < trials; ++t) {
    const bool index = t % 2 == 1;
    Problem<P> ref(rng, index);
    Problem<P> warp = ref;
    {  // the reference: AdmitSet's Misses phase, each item (the heads decide their set)
      const auto a = ref.admit();
      for (index_t p = 0; p < ref.U; ++p) a(p);
    }
    {  // the warp code, chunk by chunk as CudaBackend launches it
      const mpe::detail::AdmitMissesLanes<mpe::Int8Rowwise, mpe::NearestRounding, P> lanes{warp.admit()};
      ::ref::EmulatedWarp w;
      for (index_t c = 0; c * 32 < warp.U; ++c) {
        w.run([&](const ::ref::EmulatedWarp::Lane& ops, int lane) { lanes.chunk(ops, c, lane); });
      }
      REQUIRE(!w.broken());
    }
    INFO("trial ", t, " ways ", P::ways, " index ", index, " items ", ref.U);
    CHECK(warp.tags == ref.tags);
    CHECK(warp.last_use == ref.last_use);
    CHECK(warp.dirty == ref.dirty);
    CHECK(warp.slot_of_unique == ref.slot_of_unique);
    CHECK(warp.outcome == ref.outcome);
    CHECK(warp.evicted == ref.evicted);  // -7 where nothing was written back
    CHECK(warp.slot_of_row == ref.slot_of_row);
    for (std::uint8_t o : ref.outcome) {
      conflicts += (o & mpe::detail::kConflict) != 0;
      refusals += (o & mpe::detail::kRejected) != 0;
      evictions += (o & mpe::detail::kEvicted) != 0;
    }
  }
  // The problems reached every kind of decision (else the comparison proves little).
  CHECK(conflicts > 0);
  CHECK(evictions > 0);
  if (std::string(P::name) != "lru") CHECK(refusals > 0);
}

}  // namespace

TEST_CASE("AdmitMissesLanes (a warp per set) decides as AdmitSet: Lru<32>") {
  check_policy<mpe::Lru<32>>(12);
}
TEST_CASE("AdmitMissesLanes (a warp per set) decides as AdmitSet: Lru<4>") { check_policy<mpe::Lru<4>>(8); }
TEST_CASE("AdmitMissesLanes (a warp per set) decides as AdmitSet: SecondTouchLru<32>") {
  check_policy<mpe::SecondTouchLru<32>>(12);
}
TEST_CASE("AdmitMissesLanes (a warp per set) decides as AdmitSet: Lfu<32>") {
  check_policy<mpe::Lfu<32>>(12);
}
TEST_CASE("AdmitMissesLanes (a warp per set) decides as AdmitSet: Lfu<8>") { check_policy<mpe::Lfu<8>>(8); }

TEST_CASE("ApplyScaledLanes::slot_warp (a warp searches the set) finds what CacheRef::find finds") {
  std::mt19937_64 rng(91);
  for (const std::int32_t ways : {4, 32, 64}) {
    for (const bool index : {false, true}) {
      constexpr std::int64_t kSets = 5, kRows = 2000;
      const std::int64_t slots = kSets * ways;
      std::vector<index_t> tags(static_cast<std::size_t>(slots), -1);
      std::vector<std::int32_t> slot_of_row(static_cast<std::size_t>(kRows), -1);
      for (index_t r = 0; r < kRows; ++r) {  // about half the rows resident, in their sets
        if (rng() % 2 != 0) continue;
        const index_t base = mpe::set_of_row(r, kSets) * ways;
        for (std::int32_t w = 0; w < ways; ++w) {
          if (tags[static_cast<std::size_t>(base + w)] < 0) {
            tags[static_cast<std::size_t>(base + w)] = r;
            slot_of_row[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(base + w);
            break;
          }
        }
      }
      // The batch's unique rows; slot_of_unique from the forward: right, stale (the slot now
      // holds another row) or -1.
      std::vector<index_t> uniq, slot_of_unique;
      for (index_t r = 0; r < kRows; r += 7) {
        uniq.push_back(r);
        const std::int32_t s = slot_of_row[static_cast<std::size_t>(r)];
        const auto pick = rng() % 3;
        slot_of_unique.push_back(pick == 0 ? s : pick == 1 ? static_cast<index_t>(rng() % slots) : -1);
      }
      mpe::CacheRef c;
      c.tags = tags.data();
      c.num_sets = kSets;
      c.ways = ways;
      c.slot_of_row = index ? slot_of_row.data() : nullptr;
      mpe::detail::ApplyScaledLanes<mpe::Int8Rowwise> a{};
      a.uniq = uniq.data();
      a.slot_of_unique = slot_of_unique.data();
      a.cache = c;
      std::vector<index_t> found(uniq.size(), -9);
      ::ref::EmulatedWarp w;
      w.run([&](const ::ref::EmulatedWarp::Lane& ops, int lane) {
        for (std::size_t u = 0; u < uniq.size(); ++u) {
          const index_t s = a.slot_warp(ops, static_cast<index_t>(u), uniq[u], lane);
          if (lane == 0) found[u] = s;
        }
      });
      REQUIRE(!w.broken());
      std::size_t resident = 0;
      for (std::size_t u = 0; u < uniq.size(); ++u) {
        INFO("ways ", ways, " index ", index, " row ", uniq[u]);
        CHECK(found[u] == c.find(uniq[u]));
        CHECK(found[u] == slot_of_row[static_cast<std::size_t>(uniq[u])]);
        resident += found[u] >= 0;
      }
      CHECK(resident > 0);
      CHECK(resident < uniq.size());
    }
  }
}
