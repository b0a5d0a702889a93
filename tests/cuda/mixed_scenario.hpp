// SPDX-License-Identifier: Apache-2.0
// A seeded MixedDimEmbedding run written once against the Backend interface (as
// scenario.hpp's CachedEmbedding run): compiled by g++ for HostBackend (host_ref_mixed.cpp)
// and by nvcc for CudaBackend (test_cuda_mixed.cu), and every result bit compared. Three
// D-groups (D 4, 8, 4, 16, 8), an Int8Rowwise store with an Lru<4> cache and stochastic
// rounding, row-wise Adagrad (and one scenario with one group, D 8); refusals (an index outside its table, a
// NaN gradient) are recorded with their message and whether the object's bytes stayed the same.
#pragma once

#include <cstdint>
#include <limits>
#include <mpe/mpe.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "scenario.hpp"

namespace mpe_test {

inline const std::vector<mpe::TableSpec> kMixedSpecs = {{30, 4}, {20, 8}, {25, 4}, {15, 16}, {35, 8}};
inline const std::vector<mpe::TableSpec> kOneDSpecs = {{30, 8}, {20, 8}, {25, 8}};  // one group
inline constexpr std::int64_t kMixedBags = 6;

struct MixedScenario {
  Mode mode = Mode::Sum;
  bool prefetch = false;  // prefetch batch s+1 between forward(s) and backward(s)
  int steps = 5;
  bool one_group = false;  // kOneDSpecs (the caller's spans go to the group as they are)
  const std::vector<mpe::TableSpec>& specs() const { return one_group ? kOneDSpecs : kMixedSpecs; }
  std::string label() const {
    return std::string(mode == Mode::Sum    ? "sum"
                       : mode == Mode::Mean ? "mean"
                                            : "weighted") +
           (prefetch ? " prefetch" : "") + (one_group ? " one group" : "");
  }
};

inline std::vector<MixedScenario> mixed_scenarios() {
  return {{Mode::Sum, false},
          {Mode::Mean, true},
          {Mode::Weighted, false},
          {Mode::Weighted, true},
          {Mode::Weighted, true, 5, true}};
}

struct MixedResult {
  std::vector<float> outputs;            // every forward() output, steps concatenated
  std::vector<float> inference;          // forward_inference() of batch 0 after training
  std::vector<float> weights;            // every table's get_weights(), in table order
  std::vector<std::uint8_t> checkpoint;  // save_bytes() at the end
  std::vector<std::string> refusals;     // the messages of the refused calls
  std::int64_t bad_table = 0;            // the table of the refused index
  std::vector<bool> unchanged;           // per refusal: save_bytes() the same after it
  mpe::CacheStats stats;
  std::uint64_t step = 0;
};

/// Batch s of the mixed run: bags of 0..4 indices per table, half from its 4 hottest rows.
inline HostBatch make_mixed_batch(const std::vector<mpe::TableSpec>& specs, int s, std::int64_t total_dim) {
  TestRng rng{0x5151u + static_cast<std::uint64_t>(s) * 104729u};
  HostBatch b;
  b.offsets.push_back(0);
  for (const auto& spec : specs) {
    for (std::int64_t j = 0; j < kMixedBags; ++j) {
      const std::int64_t len = rng.below(5);
      for (std::int64_t k = 0; k < len; ++k) {
        b.indices.push_back(rng.below(2) ? rng.below(4) : rng.below(spec.rows));
        b.weights.push_back(rng.uniform(0.25f, 1.25f));
      }
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
  }
  b.grad.resize(static_cast<std::size_t>(kMixedBags * total_dim));
  for (float& g : b.grad) g = rng.uniform(-0.5f, 0.5f);
  return b;
}

template <class Backend>
using MixedEmb =
    mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::StateFp32, Backend>;

template <class Backend>
MixedResult run_mixed(const Backend& be, const MixedScenario& sc) {
  const std::vector<mpe::TableSpec>& specs = sc.specs();
  MixedEmb<Backend> emb(mpe::MixedDimConfig{specs, 0.3, 0xabcdef12ull}, be);
  emb.init_uniform(-0.5f, 0.5f);
  using DB = DeviceBatch<Backend>;
  MixedResult r;
  const auto pooling = sc.mode == Mode::Mean ? mpe::Pooling::Mean : mpe::Pooling::Sum;
  const std::int64_t W = emb.total_dim();
  std::vector<HostBatch> host;
  for (int s = 0; s <= sc.steps; ++s) host.push_back(make_mixed_batch(specs, s, W));
  const auto psw_of = [&](const DB& b) {
    return sc.mode == Mode::Weighted ? std::span<const float>(b.weights.data(), b.weights.size())
                                     : std::span<const float>();
  };
  const auto refuse = [&](auto&& call) {
    const auto before = emb.save_bytes();
    try {
      call();
      r.refusals.emplace_back("(not refused)");
    } catch (const std::invalid_argument& e) {
      r.refusals.emplace_back(e.what());
    }
    r.unchanged.push_back(emb.save_bytes() == before);
  };
  for (int s = 0; s < sc.steps; ++s) {
    DB b(be, host[static_cast<std::size_t>(s)]);
    if (s == 1) {  // the last index of the last table that has one set to its row count
      HostBatch bad = host[1];
      std::size_t t = specs.size() - 1;
      while (t > 0 && bad.offsets[(t + 1) * kMixedBags] == bad.offsets[t * kMixedBags]) --t;
      r.bad_table = static_cast<std::int64_t>(t);
      const auto last = static_cast<std::size_t>(bad.offsets[(t + 1) * kMixedBags] - 1);
      bad.indices[last] = specs[t].rows;
      DB d(be, bad);
      refuse([&] { emb.forward(d.idx(), d.off(), {d.output.data(), d.output.size()}, pooling, psw_of(d)); });
    }
    emb.forward(b.idx(), b.off(), {b.output.data(), b.output.size()}, pooling, psw_of(b));
    const auto out = to_host(be, b.output.data(), b.output.size());
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
    if (sc.prefetch) {
      DB next(be, host[static_cast<std::size_t>(s + 1)]);
      emb.prefetch(next.idx(), next.off());
    }
    if (s == 2) {  // a NaN in table 1's columns of sample 3
      HostBatch bad = host[2];
      bad.grad[static_cast<std::size_t>(3 * W + emb.column(1) + 2)] = std::numeric_limits<float>::quiet_NaN();
      DB d(be, bad);
      refuse([&] {
        emb.backward(std::span<const float>(d.grad.data(), d.grad.size()), mpe::RowwiseAdagrad{0.1f});
      });
    }
    emb.backward(std::span<const float>(b.grad.data(), b.grad.size()), mpe::RowwiseAdagrad{0.1f, 1e-6f});
  }
  {
    DB b(be, host[0]);
    emb.forward_inference(b.idx(), b.off(), {b.output.data(), b.output.size()}, pooling, psw_of(b));
    r.inference = to_host(be, b.output.data(), b.output.size());
  }
  for (std::int64_t t = 0; t < emb.num_tables(); ++t) {
    std::vector<float> w(static_cast<std::size_t>(specs[static_cast<std::size_t>(t)].rows * emb.dim(t)));
    emb.get_weights(t, w);
    r.weights.insert(r.weights.end(), w.begin(), w.end());
  }
  r.checkpoint = emb.save_bytes();
  r.stats = emb.stats();
  r.step = emb.step();
  return r;
}

}  // namespace mpe_test
