// SPDX-License-Identifier: Apache-2.0
// WTinyLfu<W> against the plain-loop reference (reference/cache_simulator.hpp,
// SimPolicy::WTinyLfu): identical slot decisions, cache state and counters after every
// call on Zipf traces (forward, prefetch, backward, flush interleaved; Fp32 outputs and
// weights bit for bit), the policy's own metadata (sketch counters and segments, read
// from its checkpoint section) equal to the reference's, and hand-worked cases of each
// rule (window candidate evicted, window candidate promoted, rejection, conflict,
// protected limit). Also the same decisions with 1 and 2 host threads.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mpe/mpe.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint_common.hpp"
#include "reference/cache_harness.hpp"

using mpe_test::Harness;
using mpe_test::TraceBatch;
using mpe_test::ZipfRows;

static_assert(mpe::CachePolicy<mpe::WTinyLfu<32>>);
static_assert(mpe::CachePolicy<mpe::WTinyLfu<2>>);
static_assert(mpe::WTinyLfu<32>::window_ways == 1 && mpe::WTinyLfu<32>::protected_ways == 24);
static_assert(mpe::WTinyLfu<4>::window_ways == 1 && mpe::WTinyLfu<4>::protected_ways == 2);
static_assert(mpe::WTinyLfu<64>::window_ways == 2 && mpe::WTinyLfu<64>::protected_ways == 49);

namespace {

constexpr std::int32_t kD = 4;
constexpr std::int64_t kRows0 = 3000, kRows1 = 2000;
constexpr std::uint64_t kAccesses = 100000;

std::vector<TraceBatch> zipf_trace(double s, std::uint64_t seed) {
  return mpe_test::two_table_zipf_trace(kRows0, kRows1, kAccesses, s, seed);
}
using mpe_test::run_trace;

/// Offset and length of the payload of the checkpoint section named `name` (walks the
/// framing: header length at offset 12, then str name, u64 length, payload, u32 crc per
/// section).
std::pair<std::size_t, std::size_t> section_at(const std::vector<std::uint8_t>& file,
                                               const std::string& name) {
  std::uint32_t H = 0;
  std::memcpy(&H, file.data() + 12, 4);
  std::size_t p = H;
  for (int i = 0; i < 8; ++i) {
    std::uint16_t n = 0;
    std::memcpy(&n, file.data() + p, 2);
    const std::string got(file.begin() + static_cast<long>(p + 2),
                          file.begin() + static_cast<long>(p + 2 + n));
    p += 2 + n;
    std::uint64_t len = 0;
    std::memcpy(&len, file.data() + p, 8);
    p += 8;
    if (got == name) return {p, static_cast<std::size_t>(len)};
    p += len + 4;
  }
  FAIL("no section " << name);
  return {};
}

std::vector<std::uint8_t> section_of(const std::vector<std::uint8_t>& file, const std::string& name) {
  const auto [at, len] = section_at(file, name);
  return {file.begin() + static_cast<long>(at), file.begin() + static_cast<long>(at + len)};
}

/// The library's policy metadata (from its checkpoint section) equals the reference's:
/// every sketch counter, and the segment of every occupied slot.
template <class H>
void check_metadata(H& h, const std::string& tag) {
  const auto dir = ckt::temp_dir("wtinylfu_" + tag);
  h.ce().save(dir / "c.ckpt");
  const auto sec = section_of(ckt::read_bytes(dir / "c.ckpt"), "wtinylfu");
  const auto& cnt = h.sim().counters();
  const auto& seg = h.sim().segment();
  const auto& tags = h.sim().tags();
  REQUIRE(sec.size() == (cnt.size() * 4 + tags.size() + 3) / 4 * 4);
  std::vector<std::uint32_t> lib(cnt.size());
  std::memcpy(lib.data(), sec.data(), lib.size() * 4);
  CHECK(mpe_test::first_mismatch(cnt, lib.data(), lib.size()) == -1);
  std::int64_t bad = -1;
  for (std::size_t s = 0; s < tags.size() && bad < 0; ++s) {
    if (tags[s] >= 0 && sec[cnt.size() * 4 + s] != seg[s]) bad = static_cast<std::int64_t>(s);
  }
  INFO("first slot whose segment differs: " << bad);
  CHECK(bad == -1);
  std::filesystem::remove_all(dir);
}

/// Rows of the table whose 4 sketch cells differ from each other row's (per line), for a
/// cache of `slots` slots: their estimates are exact counts.
std::vector<std::int64_t> collision_free_rows(std::int64_t slots, std::size_t n) {
  const std::int64_t width = mpe::WTinyLfu<4>::sketch_width(slots);
  std::vector<std::uint32_t> counters(static_cast<std::size_t>(4 * width));
  const mpe::SketchRef ref{counters.data(), width};
  std::vector<std::int64_t> rows;
  for (std::int64_t r = 0; rows.size() < n; ++r) {
    bool ok = true;
    for (auto o : rows) {
      for (int k = 0; k < 4; ++k) ok = ok && ref.cell(r, k) != ref.cell(o, k);
    }
    if (ok) rows.push_back(r);
  }
  return rows;
}

}  // namespace

TEST_CASE_TEMPLATE("WTinyLfu on Zipf traces equals the reference (Fp32: outputs and weights exact)", P,
                   mpe::WTinyLfu<4>, mpe::WTinyLfu<8>, mpe::WTinyLfu<32>) {
  for (const double s : {0.8, 1.05, 1.2}) {
    for (const std::int64_t cache_rows : {64, 500}) {  // about 1 % and 10 % of 5000 rows
      CAPTURE(s);
      CAPTURE(cache_rows);
      Harness<mpe::Fp32, P> h({kRows0, kRows1}, kD, cache_rows);
      const auto trace = zipf_trace(s, 1000 + static_cast<std::uint64_t>(s * 100));
      run_trace(h, trace);
      check_metadata(h, std::to_string(P::ways) + "_" + std::to_string(cache_rows));
      const mpe::CacheStats st = h.ce().stats();
      CHECK(st.lookups >= kAccesses);
      // The traces exercise every rule: hits, evictions, write-backs, rejections.
      CHECK(st.hits > 0);
      CHECK(st.evictions > 0);
      CHECK(st.writebacks > 0);
      CHECK(st.lfu_rejections > 0);
      if (cache_rows == 64 && P::ways == 4) CHECK(st.conflict_misses > 0);
    }
  }
}

TEST_CASE("WTinyLfu, Int8Rowwise store: decisions and byte counters equal the reference's") {
  Harness<mpe::Int8Rowwise, mpe::WTinyLfu<4>> h({kRows0, kRows1}, kD, 250);
  run_trace(h, zipf_trace(1.05, 77));
  const mpe::CacheStats st = h.ce().stats();
  // DESIGN.md: an Int8Rowwise row is D + 8 bytes.
  CHECK(st.bytes_filled == (st.misses - st.conflict_misses - st.lfu_rejections) * (kD + 8));
  CHECK(st.bytes_written_back == st.writebacks * (kD + 8));
}

TEST_CASE("WTinyLfu: the same slots, metadata and bits with 1 and 2 host threads") {
  Harness<mpe::Fp32, mpe::WTinyLfu<8>> one({kRows0, kRows1}, kD, 256, mpe::HostBackend{.num_threads = 1});
  Harness<mpe::Fp32, mpe::WTinyLfu<8>> two({kRows0, kRows1}, kD, 256, mpe::HostBackend{.num_threads = 2});
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
  }
  check_metadata(one, "threads1");
  check_metadata(two, "threads2");
  std::vector<float> wa(static_cast<std::size_t>((kRows0 + kRows1) * kD)), wb(wa.size());
  one.ce().get_weights(wa);
  two.ce().get_weights(wb);
  CHECK(wa == wb);
}

TEST_CASE("WTinyLfu<4>, one set: each rule, worked by hand") {
  // 4 ways: window 1 way, protected at most 2. Rows chosen so that their sketch counters
  // never share a cell: every estimate is the row's exact (conservative) count.
  const auto r = collision_free_rows(4, 7);
  Harness<mpe::Fp32, mpe::WTinyLfu<4>> h({r.back() + 1}, kD, 4);
  REQUIRE(h.ce().num_sets() == 1);
  auto batch = [&](std::vector<std::int64_t> rows) {
    auto slots = h.forward(mpe_test::make_batch(1, {rows}));
    h.backward();
    return slots;
  };
  // Batch 1: 4 misses in ascending row order fill the empty ways: r0 the window (way 0),
  // r1..r3 probation (ways 1..3).
  auto s = batch({r[3], r[1], r[0], r[2]});
  CHECK(s[r[0]] == 0);
  CHECK(s[r[1]] == 1);
  CHECK(s[r[3]] == 3);
  // Batch 2: r1 hits and moves to protected.
  batch({r[1]});
  // Batch 3: r4 (count 1) misses; window candidate r0 (count 1) against main's least
  // recent unlocked probation row r2 (way 2, count 1): not higher, so r0 is evicted and
  // r4 takes way 0 in the window.
  s = batch({r[4]});
  CHECK(s[r[4]] == 0);
  CHECK(h.ce().cache_ref().find(r[0]) == -1);
  CHECK(h.ce().stats().evictions == 1);
  // Batch 4: r0 again (count 2) evicts the window's r4 (count 1 is not higher than r2's).
  s = batch({r[0]});
  CHECK(s[r[0]] == 0);
  // Batch 5: r4 (count 2) misses; window candidate r0 (count 2) beats r2 (count 1): r0
  // moves to probation, r2 is evicted and r4 takes way 2 in the window.
  s = batch({r[4]});
  CHECK(s[r[4]] == 2);
  CHECK(h.ce().cache_ref().find(r[0]) == 0);
  CHECK(h.ce().cache_ref().find(r[2]) == -1);
  CHECK(h.ce().stats().lfu_rejections == 0);
  // Batch 6: r4 hits (window, locked); r5 (count 1) has no window candidate and does not
  // beat probation's least recent r3 (count 1): rejected.
  s = batch({r[4], r[5]});
  CHECK(s[r[5]] == -1);
  CHECK(h.ce().stats().lfu_rejections == 1);
  // Batch 7: r4 (count 4), r0 and r1 (count 3), r3 (count 2) hit in that order: r0 and
  // r3 move to protected, and r3's promotion leaves 3 protected rows (r0, r1, r3, all last
  // used now), so the lowest way's, r0, moves back to probation. Every way is locked: r6
  // is a conflict miss.
  s = batch({r[0], r[1], r[3], r[4], r[6]});
  CHECK(s[r[6]] == -1);
  CHECK(h.ce().stats().conflict_misses == 1);
  CHECK(h.sim().segment() == std::vector<std::uint8_t>{1, 2, 0, 2});  // r0, r1, r4, r3
  check_metadata(h, "by_hand");  // the library's segments and counters are the same
}

TEST_CASE("WTinyLfu checkpoint: section named by the policy; a bad segment is refused, state unchanged") {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {300, 200};
  cfg.dim = 4;
  cfg.cache_rows = 64;
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::WTinyLfu<4>, mpe::StochasticRounding>;
  E e(cfg);
  for (std::uint64_t k = 0; k < 6; ++k) {
    const auto b = ckt::make_batch(cfg, 8, k);
    std::vector<float> out(b.grad.size());
    e.forward(b.indices, b.offsets, out);
    e.backward(b.grad, mpe::Sgd{0.1f});
  }
  const auto dir = ckt::temp_dir("wtinylfu_bad_segment");
  e.save(dir / "ok.ckpt");
  auto bytes = ckt::read_bytes(dir / "ok.ckpt");
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  CHECK(version == 4);
  const auto sec = section_of(bytes, "wtinylfu");
  const std::int64_t slots = e.cache_slots();
  REQUIRE(sec.size() == static_cast<std::size_t>(mpe::WTinyLfu<4>::meta_words(slots) * 4));
  // Find the first occupied slot and give it segment 7; fix every CRC so only the value
  // check can refuse it.
  const mpe::CacheRef c = e.cache_ref();
  std::int64_t slot = 0;
  while (c.tags[slot] < 0) ++slot;
  const std::size_t seg_at = static_cast<std::size_t>(4 * mpe::WTinyLfu<4>::sketch_width(slots) * 4 + slot);
  const std::size_t at = section_at(bytes, "wtinylfu").first;
  REQUIRE(at > 0);
  bytes[at + seg_at] = 7;
  const std::uint32_t crc = mpe::io::checkpoint::crc32c(bytes.data() + at, sec.size());
  std::memcpy(bytes.data() + at + sec.size(), &crc, 4);
  const std::uint32_t file_crc = mpe::io::checkpoint::crc32c(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &file_crc, 4);
  ckt::write_bytes(dir / "bad.ckpt", bytes);
  E f(cfg);
  const auto before = ckt::snapshot(f);
  const std::string why = "section 'wtinylfu': slot " + std::to_string(slot) + " has segment 7";
  CHECK_THROWS_WITH_AS(f.load(dir / "bad.ckpt"), doctest::Contains(why.c_str()), mpe::checkpoint_error);
  CHECK(ckt::snapshot(f) == before);
  E g(cfg);
  g.load(dir / "ok.ckpt");
  CHECK(ckt::snapshot(g) == ckt::snapshot(e));
  std::filesystem::remove_all(dir);
}
