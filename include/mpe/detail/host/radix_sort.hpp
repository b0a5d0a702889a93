// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/radix_sort.hpp
/// @brief Host-only stable LSD radix sort of key/value pairs over the keys' low bits (not
/// public): HostBackend::stable_sort_by_key (any thread count).
///
/// mpe's sort keys are small: global rows (below the total row count, 22 bits for 3M rows)
/// and admission keys (set << 32 | priority). thrust::stable_sort_by_key sorts all 64 bits
/// of an int64 key (8 passes of 8 bits); this sort runs one pass per 11-bit digit of the
/// bits in use and skips a digit all keys share. The digits start at the lowest bit in
/// which two keys differ (bits below it and at or above the highest such bit are the same
/// in every key, so they cannot order two keys): an admission sort whose priorities are
/// all equal (Lru, DirectMapped) sorts the set field in one pass instead of two. A stable
/// sort's result is unique, so it equals Thrust's (and CUB's on a GPU) element for element.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

namespace mpe::detail {

/// Bits of a radix-sort digit: 2,048 buckets, whose counts stay in L1.
inline constexpr int kRadixDigitBits = 11;

/// Sorts values (n) by keys (n) with equal keys in their input order (keys compared as
/// unsigned, like Thrust's order of non-negative keys). The digits sorted are the bits in
/// which the keys differ, found from the keys; where every key and value is below 2^32 the
/// pairs are sorted packed. Scratch: two arrays of n keys and values,
/// kept per thread between calls (not freed, not counted by memory(): 16 bytes per key of
/// the largest sort; 16 more where keys and values fit 32 bits, which are sorted packed).
/// Host only; synchronous.
template <class K, class V>
void radix_sort_pairs(K* keys, V* values, std::size_t n) {
  static_assert(std::is_integral_v<K>, "radix_sort_pairs: integral keys only");
  using UK = std::make_unsigned_t<K>;
  constexpr std::size_t kBuckets = std::size_t{1} << kRadixDigitBits;
  constexpr UK kMask = static_cast<UK>(kBuckets - 1);
  if (n <= 1) return;
  // The bits in which keys differ: [low, high).
  UK any = 0, all = ~UK{0};
  for (std::size_t i = 0; i < n; ++i) {
    any |= static_cast<UK>(keys[i]);
    all &= static_cast<UK>(keys[i]);
  }
  const UK differ = any ^ all;
  if (differ == 0) return;  // every key equal: already stably sorted
  const int low = std::countr_zero(differ);
  const int high = std::bit_width(differ);
  const int passes = (high - low + kRadixDigitBits - 1) / kRadixDigitBits;
  thread_local std::vector<std::size_t> hist;
  hist.assign(static_cast<std::size_t>(passes) * kBuckets, 0);
  // Every digit's bucket counts, one key at a time (one read of the keys).
  const auto count = [&](UK u) {
    for (int p = 0; p < passes; ++p)
      ++hist[static_cast<std::size_t>(p) * kBuckets + ((u >> (low + kRadixDigitBits * p)) & kMask)];
  };
  // Pass p's counts -> first position of each bucket; false when one bucket holds every key
  // (the digit is the same for all: the pass is skipped).
  const auto starts = [&](int p) {
    std::size_t* h = hist.data() + static_cast<std::size_t>(p) * kBuckets;
    std::size_t sum = 0;
    for (std::size_t b = 0; b < kBuckets; ++b) {
      if (h[b] == n) return false;
      const std::size_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    return true;
  };
  // The passes whose digit is not the same in every key, in order (at least the first: it
  // holds bit `low`); each one's counts turned into bucket starts.
  int active[8 * sizeof(K) / kRadixDigitBits + 1] = {};
  const auto active_passes = [&] {
    int a = 0;
    for (int p = 0; p < passes; ++p) {
      if (starts(p)) active[a++] = p;
    }
    return a;
  };
  bool counted = false;
  if constexpr (std::is_integral_v<V> && sizeof(V) <= 8 && sizeof(K) <= 8) {
    // Keys and values below 2^32 (mpe's row and position sorts): each pair packed into one
    // u64 (key << 32 | value), so every pass moves 8 bytes per pair instead of 16; the
    // digits are the key's, so the order is the pair sort's.
    if ((static_cast<std::uint64_t>(any) >> 32) == 0) {  // keys below 2^32 (values checked below)
      thread_local std::vector<std::uint64_t> packed, packed_tmp;
      if (packed.size() < n) packed.resize(n);
      std::uint64_t wide = 0;  // OR of every key and value: both below 2^32?
      for (std::size_t i = 0; i < n; ++i) {
        const auto u = static_cast<UK>(keys[i]);
        const auto v = static_cast<std::uint64_t>(values[i]);
        wide |= static_cast<std::uint64_t>(u) | v;
        packed[i] = static_cast<std::uint64_t>(u) << 32 | (v & 0xffffffffu);
        count(u);
      }
      counted = true;
      if ((wide >> 32) == 0) {
        if (packed_tmp.size() < n) packed_tmp.resize(n);
        std::uint64_t* src = packed.data();
        std::uint64_t* dst = packed_tmp.data();
        const int last = active_passes();
        for (int k = 0; k < last; ++k) {
          const int p = active[k];
          std::size_t* h = hist.data() + static_cast<std::size_t>(p) * kBuckets;
          const int shift = 32 + low + kRadixDigitBits * p;
          if (k + 1 < last) {
            for (std::size_t i = 0; i < n; ++i) dst[h[(src[i] >> shift) & kMask]++] = src[i];
            std::swap(src, dst);
          } else {
            // The last pass unpacks into the caller's arrays (warm, read next).
            for (std::size_t i = 0; i < n; ++i) {
              const std::size_t at = h[(src[i] >> shift) & kMask]++;
              keys[at] = static_cast<K>(src[i] >> 32);
              values[at] = static_cast<V>(src[i] & 0xffffffffu);
            }
          }
        }
        return;
      }
    }
  }
  if (!counted) {
    for (std::size_t i = 0; i < n; ++i) count(static_cast<UK>(keys[i]));
  }
  thread_local std::vector<K> key_tmp;
  thread_local std::vector<V> value_tmp;
  if (key_tmp.size() < n) key_tmp.resize(n);
  if (value_tmp.size() < n) value_tmp.resize(n);
  K* src_k = keys;
  V* src_v = values;
  K* dst_k = key_tmp.data();
  V* dst_v = value_tmp.data();
  const int last = active_passes();
  if (last % 2 == 1) {
    // An odd number of passes: start from a sequential copy, so that the last pass
    // scatters into the caller's arrays (warm) rather than into the cold scratch.
    std::memcpy(dst_k, keys, n * sizeof(K));
    std::memcpy(dst_v, values, n * sizeof(V));
    std::swap(src_k, dst_k);
    std::swap(src_v, dst_v);
  }
  for (int k = 0; k < last; ++k) {
    const int p = active[k];
    std::size_t* h = hist.data() + static_cast<std::size_t>(p) * kBuckets;
    const int shift = low + kRadixDigitBits * p;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = h[(static_cast<UK>(src_k[i]) >> shift) & kMask]++;
      dst_k[at] = src_k[i];
      dst_v[at] = src_v[i];
    }
    std::swap(src_k, dst_k);
    std::swap(src_v, dst_v);
  }
}

}  // namespace mpe::detail
