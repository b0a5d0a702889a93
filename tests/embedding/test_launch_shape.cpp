// SPDX-License-Identifier: Apache-2.0
// The launch-shape model of the GPU path, without a GPU. ShapeBackend runs CachedEmbedding's
// asynchronous (CudaBackend) code path on the CPU, item by item and lane by lane, and records
// per kernel (functor type) the grid size and the largest number of iterations one thread
// (one lane of one item) ran of the counted loops (MPE_TRIP: every per-item loop whose trip
// count depends on the batch: a bag's rows, a row's occurrences or partial sums, a set's
// items, a set's ways, the binary search of an item's row). At the GPU point of
// bench/cuda (B = 65,536 bags, L = 32, D = 128, 10M rows, Zipf 1.05, INT8 with a 5 % LRU
// cache, Sgd) the hottest row occurs over 100,000 times in a batch, and no kernel's thread
// runs more than kTripBound iterations: no thread's serial work grows with a row's
// frequency. (Loops over a row's D elements are not counted: D is fixed per table.)
#define MPE_LAUNCH_SHAPE 1
#define MPE_NO_HOST_SIMD 1  // the portable code a GPU thread runs (no host SIMD paths)

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "reference/async_backend.hpp"

namespace {

/// The stated bound on one thread's counted iterations (detail::kSumGroup = 256 terms per
/// group sum, plus its binary search, stay far below it).
constexpr std::int64_t kTripBound = 1024;

struct Shape {
  std::int64_t grid = 0;       // largest launch (items)
  std::int64_t max_trips = 0;  // most counted iterations of one thread
};

/// AsyncHostBackend on one thread that records each launch's shape (see the file comment).
struct ShapeBackend : ref::AsyncHostBackend {
  std::shared_ptr<std::map<std::string, Shape>> shapes = std::make_shared<std::map<std::string, Shape>>();
  ShapeBackend() { num_threads = 1; }

  template <class F>
  void for_each(mpe::index_t n, F f) const {
    Shape& s = (*shapes)[typeid(F).name()];
    s.grid = std::max<std::int64_t>(s.grid, n);
    for (mpe::index_t i = 0; i < n; ++i) {
      mpe::detail::launch_trips = 0;
      f(i);
      s.max_trips = std::max(s.max_trips, mpe::detail::launch_trips);
    }
  }
  template <class F>
  void for_each_lanes(mpe::index_t n, F f) const {
    Shape& s = (*shapes)[typeid(F).name()];
    s.grid = std::max<std::int64_t>(s.grid, n);
    for (mpe::index_t i = 0; i < n; ++i) {
      for (std::int32_t lane = 0; lane < lane_width; ++lane) {
        mpe::detail::launch_trips = 0;
        f(i, lane, lane_width);
        s.max_trips = std::max(s.max_trips, mpe::detail::launch_trips);
      }
    }
  }
};

}  // namespace

namespace {

/// n draws of Zipf(s) over `rows` rows (rank k with weight k^-s; rank k is row
/// (k * 7919 + 13) mod rows, so the hot rows are spread over the table), in B bags of L.
std::vector<std::int64_t> zipf_indices(std::mt19937_64& rng, std::int64_t rows, double s, std::int64_t n) {
  std::vector<double> cdf(static_cast<std::size_t>(rows));
  double acc = 0;
  for (std::int64_t k = 0; k < rows; ++k) cdf[static_cast<std::size_t>(k)] = acc += std::pow(k + 1.0, -s);
  std::uniform_real_distribution<double> u(0.0, acc);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (auto& x : idx) {
    const auto k = static_cast<std::int64_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    x = (std::min(k, rows - 1) * 7919 + 13) % rows;
  }
  return idx;
}

}  // namespace

TEST_CASE("launch shapes at the GPU point: no thread's serial work grows with a row's frequency") {
  constexpr std::int64_t kB = 65536, kL = 32, kRows = 10000000;
  constexpr std::int32_t kD = 128;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {kRows};
  cfg.dim = kD;
  cfg.cache_rows = kRows / 20;  // 5 %
  cfg.seed = 3;
  ShapeBackend be;
  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding, ShapeBackend> e(cfg, be);
  std::mt19937_64 rng(11);
  std::vector<std::int64_t> offsets(kB + 1);
  for (std::int64_t j = 0; j <= kB; ++j) offsets[static_cast<std::size_t>(j)] = j * kL;
  std::vector<float> out(static_cast<std::size_t>(kB) * kD);
  std::vector<float> grad(out.size(), 0.25f);
  std::int64_t hottest = 0;
  for (int step = 0; step < 2; ++step) {  // the second populate evicts and writes back
    const std::vector<std::int64_t> idx = zipf_indices(rng, kRows, 1.05, kB * kL);
    std::map<std::int64_t, std::int64_t> freq;
    for (const std::int64_t r : idx) hottest = std::max(hottest, ++freq[r]);
    e.prefetch(idx, offsets);
    e.forward(idx, offsets, out);
    e.backward(grad, mpe::Sgd{0.01f});
  }
  const mpe::CacheStats st = e.stats();
  CHECK(st.evictions > 0);
  CHECK(st.writebacks > 0);
  CHECK(hottest > 100 * kTripBound);  // a row's occurrences far exceed the bound
  // The kernels of the laned backward, populate and forward all ran.
  const auto ran = [&](const char* part) {
    for (const auto& [name, shape] : *be.shapes)
      if (name.find(part) != std::string::npos && shape.grid > 0) return true;
    return false;
  };
  for (const char* part : {"SumStage", "ApplyScaledLanes", "StoreScaledLanes", "AdmitHitsLanes", "AdmitSet",
                           "WriteBackLanes", "FillLanes", "PoolBags", "ExpandBags"}) {
    CAPTURE(part);
    CHECK(ran(part));
  }
  for (const auto& [name, shape] : *be.shapes) {
    CAPTURE(name);
    CAPTURE(shape.grid);
    CHECK(shape.max_trips <= kTripBound);
    MESSAGE(name << ": grid " << shape.grid << ", most iterations per thread " << shape.max_trips);
  }
}
