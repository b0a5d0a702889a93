// SPDX-License-Identifier: Apache-2.0
// detail::radix_sort_pairs (HostBackend::stable_sort_by_key on one thread) against
// std::stable_sort of the same pairs: keys with many duplicates (stability shows), every
// key width from 0 to 64 bits in use, signed and unsigned keys, positions as values (keys
// of <= 32 bits sort packed) and 64-bit values (the pair sort), sizes 0 .. 100,000, and
// HostBackend on one thread (radix) and two (Thrust) giving the same pairs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <mpe/backend/host_backend.hpp>
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
  mpe::detail::radix_sort_pairs(keys.data(), values.data(), n, bits);
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

TEST_CASE("radix_sort_pairs: a key_bits above the keys' width sorts them the same") {
  // key_bits larger than the keys need (64 for 10-bit keys) sorts them all the same.
  std::mt19937_64 rng(8);
  std::vector<std::uint64_t> a = random_keys<std::uint64_t>(rng, 3000, 10), b = a;
  std::vector<std::int64_t> va(a.size()), vb(b.size());
  std::iota(va.begin(), va.end(), 0);
  std::iota(vb.begin(), vb.end(), 0);
  mpe::detail::radix_sort_pairs(a.data(), va.data(), a.size(), 10);
  mpe::detail::radix_sort_pairs(b.data(), vb.data(), b.size(), 64);
  CHECK(a == b);
  CHECK(va == vb);
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
