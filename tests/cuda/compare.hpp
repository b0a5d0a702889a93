// SPDX-License-Identifier: Apache-2.0
// Bit-for-bit comparison of two training runs (host vs CUDA), for the nvcc-compiled tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <mpe/backend/cuda_backend.cuh>
#include <vector>

#include "../reference/stats_equal.hpp"
#include "scenario.hpp"

namespace mpe_test {

template <class T>
std::size_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  }
  return a.size() == b.size() ? static_cast<std::size_t>(-1) : std::min(a.size(), b.size());
}

#define MPE_TEST_SAME_BITS(field)                                             \
  do {                                                                        \
    const std::size_t at = first_difference(host.field, dev.field);           \
    INFO(#field " differs first at element ", at, " of ", host.field.size()); \
    CHECK(host.field.size() == dev.field.size());                             \
    CHECK(at == static_cast<std::size_t>(-1));                                \
  } while (0)

/// Every output, weight and store bit, every counter and the step equal.
inline void check_same(const Result& host, const Result& dev) {
  MPE_TEST_SAME_BITS(outputs);
  MPE_TEST_SAME_BITS(inference);
  MPE_TEST_SAME_BITS(weights_before_flush);
  MPE_TEST_SAME_BITS(weights);
  MPE_TEST_SAME_BITS(store);
  MPE_TEST_SAME_BITS(state);
  ref::check_stats_equal(host.stats, dev.stats);
  CHECK(host.step == dev.step);
}

/// Runs every scenario on HostBackend (compiled by g++ in host_ref_*.cpp) and on
/// CudaBackend, and compares all bits. Also checks that the cached scenarios really
/// exercised hits, evictions and write-backs (else the comparison would prove little).
template <class Storage, class Cache, class Rounding>
void check_bit_identity(const mpe::CudaBackend& cuda = {}) {
  for (const Scenario& sc : all_scenarios()) {
    INFO(sc.label());
    const Result host = run_training<Storage, Cache, Rounding>(mpe::HostBackend{}, sc);
    const Result dev = run_training<Storage, Cache, Rounding>(cuda, sc);
    check_same(host, dev);
    if (sc.cache_rows > 0) {
      CHECK(host.stats.hits > 0);
      CHECK(host.stats.evictions > 0);
      CHECK(host.stats.writebacks > 0);
    }
  }
}

/// Optimizer-state precision P: the Adam scenarios on both backends, every bit equal
/// (weights, store, the compact state and the cached FP32 state).
template <class Storage, class Cache, class Rounding, class P>
void check_state_bit_identity(const mpe::CudaBackend& cuda = {}) {
  for (const Scenario& sc : state_scenarios()) {
    INFO(sc.label());
    const Result host = run_training<Storage, Cache, Rounding, mpe::HostBackend, P>(mpe::HostBackend{}, sc);
    const Result dev = run_training<Storage, Cache, Rounding, mpe::CudaBackend, P>(cuda, sc);
    check_same(host, dev);
    CHECK(!host.state.empty());
    if (sc.cache_rows > 0) CHECK(host.stats.writebacks > 0);
  }
}

/// The wide-set run (run_wide: several warp widths of items per set, every way taken,
/// conflicts) on both backends, without and with a pipelined prefetch: every bit equal, and
/// the run really filled, evicted, wrote back and hit (and, where `refuses`, refused).
template <class Storage, class Cache, class Rounding>
void check_wide_bit_identity(bool refuses, const mpe::CudaBackend& cuda = {}) {
  for (const bool prefetch : {false, true}) {
    INFO("prefetch ", prefetch);
    const Result host = run_wide<Storage, Cache, Rounding>(mpe::HostBackend{}, prefetch);
    const Result dev = run_wide<Storage, Cache, Rounding>(cuda, prefetch);
    check_same(host, dev);  // inference and state: empty on both
    CHECK(host.stats.hits > 0);
    CHECK(host.stats.evictions > 0);
    CHECK(host.stats.writebacks > 0);
    CHECK(host.stats.conflict_misses + host.stats.lfu_rejections > 0);
    if (refuses) CHECK(host.stats.lfu_rejections > 0);
  }
}

}  // namespace mpe_test

#define MPE_TEST_WIDE_CASE(S, C, R)                                            \
  TEST_CASE("CUDA == host, bit for bit, 32-way sets: " #S ", " #C ", " #R) {   \
    mpe_test::check_wide_bit_identity<S, C, R>(std::string(C::name) != "lru"); \
  }

// One doctest case per Cache x Rounding combination of a Storage.
#define MPE_TEST_CUDA_CASE(S, C, R) \
  TEST_CASE("CUDA == host, bit for bit: " #S ", " #C ", " #R) { mpe_test::check_bit_identity<S, C, R>(); }
