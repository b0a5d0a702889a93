// SPDX-License-Identifier: Apache-2.0
// The FP32 row cache against the plain-loop simulator on 100,000-access Zipf traces:
// identical slot decisions, cache state and counters after every call, with forward,
// backward, prefetch (one batch ahead, while the previous batch awaits backward) and
// flush interleaved; Fp32 storage also checks outputs and weights bit for bit against
// a plain FP32 embedding bag, Int8Rowwise storage the byte counters. Also: the same
// decisions and bits with 1 and 2 host threads.
#include <doctest/doctest.h>

#include <cstdint>
#include <mpe/mpe.hpp>
#include <vector>

#include "reference/cache_harness.hpp"

using mpe_test::Harness;
using mpe_test::TraceBatch;
using mpe_test::ZipfRows;

namespace {

constexpr std::int32_t kD = 4;
constexpr std::int64_t kRows0 = 3000, kRows1 = 2000;
constexpr std::uint64_t kAccesses = 100000;

std::vector<TraceBatch> zipf_trace(double s, std::uint64_t seed) {
  return mpe_test::two_table_zipf_trace(kRows0, kRows1, kAccesses, s, seed);
}
using mpe_test::run_trace;

}  // namespace

TEST_CASE_TEMPLATE("Zipf traces: the cache equals the simulator (Fp32: outputs and weights exact)", P,
                   mpe::Lru<4>, mpe::Lfu<4>, mpe::DirectMapped, mpe::Lru<16>, mpe::Lfu<16>,
                   mpe::SecondTouchLru<4>, mpe::SecondTouchLru<16>) {
  for (const double s : {0.8, 1.05, 1.2}) {
    for (const std::int64_t cache_rows : {50, 500}) {  // 1 % and 10 % of 5000 rows
      CAPTURE(s);
      CAPTURE(cache_rows);
      Harness<mpe::Fp32, P> h({kRows0, kRows1}, kD, cache_rows);
      const auto trace = zipf_trace(s, 1000 + static_cast<std::uint64_t>(s * 100));
      run_trace(h, trace);
      const mpe::CacheStats st = h.ce().stats();
      CHECK(st.lookups >= kAccesses);
      // The traces exercise every rule: hits, evictions, write-backs, conflict misses.
      CHECK(st.hits > 0);
      CHECK(st.evictions > 0);
      CHECK(st.writebacks > 0);
      if (cache_rows == 50) CHECK(st.conflict_misses > 0);
      // Sketch and doorkeeper policies refuse misses. SecondTouchLru refuses only where a set
      // still has an unlocked victim once the rows seen before took theirs: at 1 % a batch
      // locks every way of most sets, so there its first touches are conflict misses instead.
      constexpr bool second_touch = mpe_test::IsSecondTouchLru<P>::value;
      if ((P::uses_sketch || second_touch) && (cache_rows == 500 || !second_touch))
        CHECK(st.lfu_rejections > 0);
    }
  }
}

TEST_CASE_TEMPLATE("Zipf traces, Int8Rowwise store: decisions and byte counters equal the simulator's", P,
                   mpe::Lru<4>, mpe::Lfu<4>, mpe::DirectMapped, mpe::SecondTouchLru<4>) {
  Harness<mpe::Int8Rowwise, P> h({kRows0, kRows1}, kD, 250);
  run_trace(h, zipf_trace(1.05, 77));
  const mpe::CacheStats st = h.ce().stats();
  // DESIGN.md: an Int8Rowwise row is D + 8 bytes.
  CHECK(st.bytes_filled == (st.misses - st.conflict_misses - st.lfu_rejections) * (kD + 8));
  CHECK(st.bytes_written_back == st.writebacks * (kD + 8));
}

TEST_CASE_TEMPLATE("the same slots and bits with 1 and 2 host threads", P, mpe::Lru<4>, mpe::Lfu<4>,
                   mpe::DirectMapped, mpe::SecondTouchLru<4>) {
  Harness<mpe::Fp32, P> one({kRows0, kRows1}, kD, 250, mpe::HostBackend{.num_threads = 1});
  Harness<mpe::Fp32, P> two({kRows0, kRows1}, kD, 250, mpe::HostBackend{.num_threads = 2});
  const auto trace = zipf_trace(1.05, 5);
  for (std::size_t k = 0; k < trace.size(); ++k) {
    one.forward(trace[k]);
    two.forward(trace[k]);
    CHECK(one.output() == two.output());
    if (k % 3 == 1 && k + 1 < trace.size()) {
      one.prefetch(trace[k + 1]);
      two.prefetch(trace[k + 1]);
    }
    one.backward();
    two.backward();
    const mpe::CacheRef a = one.ce().cache_ref(), b = two.ce().cache_ref();
    const std::vector<std::int64_t> ta(a.tags, a.tags + a.slots());
    const std::vector<std::uint64_t> ua(a.last_use, a.last_use + a.slots());
    REQUIRE(a.slots() == b.slots());
    CHECK(mpe_test::first_mismatch(ta, b.tags, static_cast<std::size_t>(b.slots())) == -1);
    CHECK(mpe_test::first_mismatch(ua, b.last_use, static_cast<std::size_t>(b.slots())) == -1);
  }
  std::vector<float> wa(static_cast<std::size_t>((kRows0 + kRows1) * kD)), wb(wa.size());
  one.ce().get_weights(wa);
  two.ce().get_weights(wb);
  CHECK(wa == wb);
}
