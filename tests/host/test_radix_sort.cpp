// SPDX-License-Identifier: Apache-2.0
// detail::radix_sort_pairs (HostBackend::stable_sort_by_key on one thread) against
// std::stable_sort of the same pairs: keys with many duplicates (stability shows), every
// key width from 0 to 64 bits in use, signed and unsigned keys, positions as values (keys
// of <= 32 bits sort packed) and 64-bit values (the pair sort), sizes 0 .. 100,000, and
// HostBackend on one thread (radix) and two (Thrust) giving the same pairs. And
// detail::BitmapUnique (sort_unique's one-thread dedup) against a dedup by std::sort.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <mpe/backend/host_backend.hpp>
#include <mpe/detail/kernels/batch.hpp>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace {

template <class K>
std::vector<K> random_keys(std::mt19937_64& rng, std::size_t n, int bits) {
  std::vector<K> k(n);
  // Few distinct keys when n is large (duplicates test stability); the top bit in use set
  // in some keys (every digit of the width is sorted).
  const std::uint64_t mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  std::vector<std::uint64_t> pool(std::max<std::size_t>(1, n / 8));
  for (auto& p : pool) p = rng() & mask;
  if (bits > 0) pool[0] = mask;  // the largest key of the width
  for (auto& x : k) x = static_cast<K>(pool[rng() % pool.size()]);
  return k;
}

/// Values: positions 0 .. n-1 (keys of <= 32 bits then sort packed, key << 32 | value), or
/// with `wide` random 64-bit values, negative ones included (the pair sort).
template <class K>
void check_against_std(std::size_t n, int bits, std::uint64_t seed, bool wide = false) {
  CAPTURE(n);
  CAPTURE(bits);
  CAPTURE(wide);
  std::mt19937_64 rng(seed);
  std::vector<K> keys = random_keys<K>(rng, n, bits);
  std::vector<std::int64_t> values(n);
  std::iota(values.begin(), values.end(), 0);
  if (wide) {
    for (auto& v : values) v = static_cast<std::int64_t>(rng());
    if (n > 0) values[n - 1] = std::int64_t{1} << 32;  // just past 32 bits
  }
  std::vector<std::pair<K, std::int64_t>> expect(n);
  for (std::size_t i = 0; i < n; ++i) expect[i] = {keys[i], values[i]};
  std::stable_sort(expect.begin(), expect.end(), [](const auto& a, const auto& b) {
    return static_cast<std::make_unsigned_t<K>>(a.first) < static_cast<std::make_unsigned_t<K>>(b.first);
  });
  mpe::detail::radix_sort_pairs(keys.data(), values.data(), n);
  std::size_t bad = n;
  for (std::size_t i = 0; i < n && bad == n; ++i) {
    if (keys[i] != expect[i].first || values[i] != expect[i].second) bad = i;
  }
  CHECK(bad == n);
}

}  // namespace

TEST_CASE("radix_sort_pairs equals std::stable_sort for every key width in use") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3},
                              std::size_t{1000}, std::size_t{100000}}) {
    for (int bits = 0; bits <= 64; bits += (bits < 24 ? 1 : 5)) {
      check_against_std<std::uint64_t>(n, bits, 11 + static_cast<std::uint64_t>(bits));
      if (bits < 64) check_against_std<std::int64_t>(n, bits, 29 + static_cast<std::uint64_t>(bits));
      if (bits <= 32) check_against_std<std::int64_t>(n, bits, 47 + static_cast<std::uint64_t>(bits), true);
    }
  }
  check_against_std<std::uint64_t>(5000, 64, 3);
  check_against_std<std::int64_t>(5000, 63, 4);
}

TEST_CASE(
    "radix_sort_pairs: keys that differ only in a middle field (admission keys) sort as std::stable_sort") {
  // The digits start at the lowest bit in which keys differ: fields of 1 .. 24 varying bits
  // at offsets 0 .. 40 with constant bits below and above them (an admission key is
  // set << 32 | ~priority; Lru's priorities are all equal), one and two digits wide and
  // across a digit boundary; plus every key equal (nothing to sort).
  std::mt19937_64 rng(91);
  for (const std::size_t n : {std::size_t{2}, std::size_t{1000}, std::size_t{60000}}) {
    for (const int width : {1, 5, 11, 12, 22, 24}) {
      for (const int at : {0, 3, 11, 21, 32, 40}) {
        CAPTURE(n);
        CAPTURE(width);
        CAPTURE(at);
        const std::uint64_t field = (std::uint64_t{1} << width) - 1;
        const std::uint64_t constant =
            0x5a5a5a5a5a5a5a5aull & ~(field << at) & ((std::uint64_t{1} << 63) - 1);
        std::vector<std::uint64_t> keys(n);
        for (auto& k : keys) k = constant | ((rng() % (field + 1)) << at);
        std::vector<std::int64_t> values(n);
        std::iota(values.begin(), values.end(), 0);
        std::vector<std::pair<std::uint64_t, std::int64_t>> expect(n);
        for (std::size_t i = 0; i < n; ++i) expect[i] = {keys[i], values[i]};
        std::stable_sort(expect.begin(), expect.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        mpe::detail::radix_sort_pairs(keys.data(), values.data(), n);
        bool same = true;
        for (std::size_t i = 0; i < n; ++i)
          same = same && keys[i] == expect[i].first && values[i] == expect[i].second;
        CHECK(same);
      }
    }
  }
  // One key far above the others (1 << 13 among keys below 8) is ordered too.
  {
    std::vector<std::int64_t> k = {std::int64_t{1} << 13, 0, 5}, v = {0, 1, 2};
    mpe::detail::radix_sort_pairs(k.data(), v.data(), k.size());
    CHECK(k == std::vector<std::int64_t>{0, 5, std::int64_t{1} << 13});
    CHECK(v == std::vector<std::int64_t>{1, 2, 0});
  }
  std::vector<std::uint64_t> equal(500, 0x1234ull << 32);
  std::vector<std::int64_t> pos(500);
  std::iota(pos.begin(), pos.end(), 0);
  const std::vector<std::int64_t> before = pos;
  mpe::detail::radix_sort_pairs(equal.data(), pos.data(), equal.size());
  CHECK(pos == before);
}

TEST_CASE("HostBackend::stable_sort_by_key: one thread (radix) and two (Thrust) give the same pairs") {
  std::mt19937_64 rng(17);
  for (const int bits : {1, 12, 22, 45, 63}) {
    CAPTURE(bits);
    const std::vector<std::int64_t> keys = random_keys<std::int64_t>(rng, 40000, bits);
    std::vector<std::int64_t> k1 = keys, k2 = keys, v1(keys.size()), v2(keys.size());
    std::iota(v1.begin(), v1.end(), 0);
    std::iota(v2.begin(), v2.end(), 0);
    mpe::HostBackend{.num_threads = 1}.stable_sort_by_key(k1.data(), v1.data(),
                                                          static_cast<mpe::index_t>(k1.size()), bits);
    mpe::HostBackend{.num_threads = 2}.stable_sort_by_key(k2.data(), v2.data(),
                                                          static_cast<mpe::index_t>(k2.size()), bits);
    CHECK(k1 == k2);
    CHECK(v1 == v2);
    CHECK(std::is_sorted(k1.begin(), k1.end()));
  }
}

TEST_CASE("BitmapUnique gives the unique rows and each occurrence's unique index") {
  // Reference: the distinct rows by std::sort + std::unique; an occurrence's unique index by
  // binary search. Tables of 1 .. 70,000 rows (word boundaries:
  // rows 63, 64, the last row; a last partial word), batches of 1 .. 20,000 occurrences with
  // few or many distinct rows, a closed gate (every row 0, as PrepareSort), and the bitmap
  // left all zero for the next call (reused across the cases).
  // Both popcount paths: POPCNT (the host SIMD switch on, where the CPU has it) and
  // std::popcount.
  using mpe::index_t;
  const bool simd_before = mpe::detail::host_simd_enabled();
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> bits;
  for (const bool simd : {true, false})
    for (const index_t rows :
         {index_t{1}, index_t{63}, index_t{64}, index_t{65}, index_t{1000}, index_t{70000}}) {
      mpe::detail::set_host_simd(simd);
      const index_t W = (rows + 63) / 64;
      bits.assign(static_cast<std::size_t>(W), 0);
      for (const index_t n : {index_t{1}, index_t{5}, index_t{300}, index_t{20000}}) {
        for (const int distinct : {1, 8, 100000}) {
          for (const bool closed : {false, true}) {
            CAPTURE(simd);
            CAPTURE(rows);
            CAPTURE(n);
            CAPTURE(distinct);
            CAPTURE(closed);
            std::vector<index_t> pool(static_cast<std::size_t>(std::min<index_t>(distinct, rows)));
            for (auto& p : pool) p = static_cast<index_t>(rng() % static_cast<std::uint64_t>(rows));
            pool[0] = rows - 1;
            if (pool.size() > 2 && rows > 64) {
              pool[1] = 63;
              pool[2] = 64;
            }
            std::vector<index_t> occ(static_cast<std::size_t>(n));
            for (auto& x : occ) x = pool[rng() % pool.size()];
            const index_t gate_value = closed ? 0 : 1;
            std::vector<index_t> rank(static_cast<std::size_t>(W)), uniq(static_cast<std::size_t>(n)),
                o2u(static_cast<std::size_t>(n));
            index_t U = -1;
            mpe::detail::BitmapUnique<mpe::detail::HostPaths>{
                occ.data(), n, &gate_value, bits.data(), rank.data(), W, &U, uniq.data(), o2u.data()}(0);
            std::vector<index_t> eff = occ;
            if (closed) std::fill(eff.begin(), eff.end(), 0);
            std::vector<index_t> sorted_eff = eff;
            std::sort(sorted_eff.begin(), sorted_eff.end());
            std::vector<index_t> ref = sorted_eff;
            ref.erase(std::unique(ref.begin(), ref.end()), ref.end());
            REQUIRE(U == static_cast<index_t>(ref.size()));
            CHECK(std::equal(ref.begin(), ref.end(), uniq.begin()));
            bool idx_ok = true;
            for (index_t i = 0; i < n; ++i) {
              const auto u =
                  std::lower_bound(ref.begin(), ref.end(), eff[static_cast<std::size_t>(i)]) - ref.begin();
              idx_ok = idx_ok && o2u[static_cast<std::size_t>(i)] == u;
            }
            CHECK(idx_ok);
            CHECK(std::all_of(bits.begin(), bits.end(), [](std::uint64_t w) { return w == 0; }));
          }
        }
      }
    }
  mpe::detail::set_host_simd(simd_before);
}
