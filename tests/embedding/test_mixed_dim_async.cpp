// SPDX-License-Identifier: Apache-2.0
// MixedDimEmbedding over a backend whose spans live in backend memory
// (tests/reference/async_backend.hpp: CudaBackend's code paths on the CPU, counting waits)
// against the same object over HostBackend, bit for bit:
//   - a 3-group mix (D {4, 8, 4, 16, 8}) and a one-group case; Sum, Mean and per-sample
//     weights; SGD, row-wise Adagrad and Adagrad over 6 steps; INT8 + Lru +
//     StochasticRounding and FP32 + NearestRounding; prefetch one batch ahead;
//     defer_admission: outputs, forward_inference, get_weights, stats and save_bytes are
//     equal after every step, and a checkpoint saved by either loads into the other;
//   - refusals (an index outside its table, malformed offsets, wrong output / weight /
//     gradient sizes, a non-finite weight or gradient under Throw, a non-finite gradient
//     under Skip) carry HostBackend's message and leave both objects' bytes unchanged;
//   - waits per call, as the class comment states: one group 1 per call; G groups 1 + G
//     per prefetch / forward / forward_inference, G + 1 per backward under Throw (G under
//     Skip).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <vector>

#include "reference/async_backend.hpp"
#include "reference/embedding_bag.hpp"
#include "reference/stats_equal.hpp"

namespace {

using Async = ref::AsyncHostBackend;

const std::vector<mpe::TableSpec> kMixed = {{30, 4}, {20, 8}, {25, 4}, {15, 16}, {35, 8}};  // 3 groups
const std::vector<mpe::TableSpec> kOneD = {{30, 8}, {20, 8}, {25, 8}};                      // 1 group

std::vector<std::int64_t> rows_of(const std::vector<mpe::TableSpec>& specs) {
  std::vector<std::int64_t> r;
  for (const auto& s : specs) r.push_back(s.rows);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The same MixedDimEmbedding over HostBackend and over Async, driven in lockstep.
template <class S, class C, class R>
struct Twin {
  Async be;
  mpe::MixedDimEmbedding<S, C, R> host;
  mpe::MixedDimEmbedding<S, C, R, mpe::StateFp32, Async> dev;
  explicit Twin(const mpe::MixedDimConfig& c) : host(c), dev(c, be) {}

  long waits() const { return be.waits->load(); }
  long G() const { return static_cast<long>(host.num_groups()); }
  /// Waits of a prefetch / forward / forward_inference (the class comment).
  long batch_waits() const { return G() == 1 ? 1 : 1 + G(); }
  long backward_waits() const {
    return G() == 1 ? 1 : G() + (host.config().non_finite == mpe::NonFinite::Throw ? 1 : 0);
  }

  void check_equal_state() {
    for (std::int64_t t = 0; t < host.num_tables(); ++t) {
      CAPTURE(t);
      std::vector<float> a(
          static_cast<std::size_t>(host.config().tables[static_cast<std::size_t>(t)].rows * host.dim(t))),
          b(a.size());
      host.get_weights(t, a);
      dev.get_weights(t, b);
      CHECK(same_bits(a, b));
    }
    ref::check_stats_equal(host.stats(), dev.stats());
    CHECK(host.step() == dev.step());
    CHECK(host.save_bytes() == dev.save_bytes());
  }

  /// forward() on both; the outputs' bits equal, the waits as documented.
  std::vector<float> forward(const ref::Batch& b, mpe::Pooling p) {
    std::vector<float> o1(static_cast<std::size_t>(b.B * host.total_dim())), o2(o1.size(), -7.0f);
    host.forward(b.indices, b.offsets, o1, p, b.weights);
    const long w0 = waits();
    dev.forward(b.indices, b.offsets, o2, p, b.weights);
    CHECK(waits() - w0 == batch_waits());
    CHECK(same_bits(o1, o2));
    return o1;
  }
  void forward_inference(const ref::Batch& b, mpe::Pooling p) {
    std::vector<float> o1(static_cast<std::size_t>(b.B * host.total_dim())), o2(o1.size(), -7.0f);
    host.forward_inference(b.indices, b.offsets, o1, p, b.weights);
    const long w0 = waits();
    dev.forward_inference(b.indices, b.offsets, o2, p, b.weights);
    CHECK(waits() - w0 == batch_waits());
    CHECK(same_bits(o1, o2));
  }
  void prefetch(const ref::Batch& b) {
    host.prefetch(b.indices, b.offsets);
    const long w0 = waits();
    dev.prefetch(b.indices, b.offsets);
    CHECK(waits() - w0 == batch_waits());
  }
  template <class Opt>
  void backward(const std::vector<float>& g, const Opt& opt) {
    host.backward(g, opt);
    const long w0 = waits();
    dev.backward(g, opt);
    CHECK(waits() - w0 == backward_waits());
  }
};

enum class Opt { Sgd, RowwiseAdagrad, Adagrad };

struct Case {
  const std::vector<mpe::TableSpec>* specs;
  mpe::Pooling pooling;
  bool weighted;
  Opt opt;
  bool prefetch;
  bool defer_admission;
};

template <class S, class C, class R>
void train_twins(const Case& k, double cache_fraction) {
  mpe::MixedDimConfig c{*k.specs, cache_fraction, 11};
  c.defer_admission = k.defer_admission;
  Twin<S, C, R> tw(c);
  tw.host.init_uniform(-0.5f, 0.5f);
  tw.dev.init_uniform(-0.5f, 0.5f);
  tw.check_equal_state();
  std::mt19937_64 rng(21);
  const auto rows = rows_of(*k.specs);
  std::vector<ref::Batch> batches;
  for (int s = 0; s < 7; ++s) batches.push_back(ref::random_batch(rng, rows, 6, 5, k.weighted));
  batches[2] = ref::random_batch(rng, rows, 0, 5, k.weighted);  // B = 0: an empty batch
  const auto step = [&](const std::vector<float>& g) {
    switch (k.opt) {
      case Opt::Sgd:
        tw.backward(g, mpe::Sgd{0.1f});
        break;
      case Opt::RowwiseAdagrad:
        tw.backward(g, mpe::RowwiseAdagrad{0.1f});
        break;
      case Opt::Adagrad:
        tw.backward(g, mpe::Adagrad{0.1f});
        break;
    }
  };
  for (int s = 0; s < 6; ++s) {
    CAPTURE(s);
    const ref::Batch& b = batches[static_cast<std::size_t>(s)];
    const auto out = tw.forward(b, k.pooling);
    if (k.prefetch) tw.prefetch(batches[static_cast<std::size_t>(s + 1)]);  // while b awaits backward
    step(ref::random_floats(rng, out.size(), -1, 1));
    tw.forward_inference(batches[static_cast<std::size_t>(s + 1)], k.pooling);
    tw.check_equal_state();
  }
  // A checkpoint saved by either object loads into the other; training goes on in step.
  const auto hb = tw.host.save_bytes();
  const auto db = tw.dev.save_bytes();
  tw.host.load_bytes(db);
  tw.dev.load_bytes(hb);
  tw.check_equal_state();
  const auto out = tw.forward(batches[6], k.pooling);
  step(std::vector<float>(out.size(), 0.25f));
  tw.check_equal_state();
}

}  // namespace

TEST_CASE("mixed D on a backend of device spans: the bits of HostBackend") {
  for (const auto* specs : {&kMixed, &kOneD}) {
    for (const auto& [pooling, weighted] :
         {std::pair{mpe::Pooling::Sum, false}, std::pair{mpe::Pooling::Mean, false},
          std::pair{mpe::Pooling::Sum, true}}) {
      for (const Opt opt : {Opt::Sgd, Opt::RowwiseAdagrad, Opt::Adagrad}) {
        for (const bool prefetch : {false, true}) {
          for (const bool defer : {false, true}) {
            const Case k{specs, pooling, weighted, opt, prefetch, defer};
            CAPTURE(specs->size());
            CAPTURE(static_cast<int>(pooling));
            CAPTURE(weighted);
            CAPTURE(static_cast<int>(opt));
            CAPTURE(prefetch);
            CAPTURE(defer);
            train_twins<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>(k, 0.3);
            if (opt != Opt::Adagrad && !defer)
              train_twins<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>(k, 0.0);
          }
        }
      }
    }
  }
}

namespace {

template <class E>
std::vector<std::vector<float>> all_weights(const E& e) {
  std::vector<std::vector<float>> v;
  for (std::int64_t t = 0; t < e.num_tables(); ++t) {
    v.emplace_back(static_cast<std::size_t>(e.config().tables[static_cast<std::size_t>(t)].rows * e.dim(t)));
    e.get_weights(t, v.back());
  }
  return v;
}

/// Runs `call` on host and dev objects; both throw `E` with the same message, and
/// neither object changes: the same bytes with several groups (checked before any group
/// runs); with one group (its own checks) the same weights and counters, and both
/// objects' bytes equal (the group's checkpoint also counts its calls, a refused one too).
template <class E, class Tw, class Call>
void same_refusal(Tw& tw, Call&& call, const char* needle) {
  const bool several = tw.G() > 1;
  const auto h0 = tw.host.save_bytes();
  const auto d0 = tw.dev.save_bytes();
  const auto w0 = all_weights(tw.host);
  const auto s0 = tw.host.stats();
  std::string mh, md;
  try {
    call(tw.host);
  } catch (const E& e) {
    mh = e.what();
  }
  try {
    call(tw.dev);
  } catch (const E& e) {
    md = e.what();
  }
  CHECK(mh.find(needle) != std::string::npos);
  CHECK(mh == md);
  if (several) {
    CHECK(tw.host.save_bytes() == h0);
    CHECK(tw.dev.save_bytes() == d0);
  } else {
    CHECK(tw.host.save_bytes() == tw.dev.save_bytes());
    CHECK(all_weights(tw.host) == w0);
    CHECK(all_weights(tw.dev) == w0);
    ref::check_stats_equal(tw.host.stats(), s0);
    ref::check_stats_equal(tw.dev.stats(), s0);
  }
}

template <class Tw>
void refusals(Tw& tw, const std::vector<mpe::TableSpec>& specs, bool several) {
  std::mt19937_64 rng(5);
  const auto rows = rows_of(specs);
  const ref::Batch good = ref::random_batch(rng, rows, 4, 4, true);
  const auto W = static_cast<std::size_t>(tw.host.total_dim());
  std::vector<float> out(static_cast<std::size_t>(good.B) * W);
  const auto fwd = [&](const ref::Batch& b, std::span<float> o, std::span<const float> w) {
    return [&b, o, w](auto& e) { e.forward(b.indices, b.offsets, o, mpe::Pooling::Sum, w); };
  };
  // Table 3's last index set to its row count (the caller's table and position named).
  ref::Batch bad = good;
  const std::size_t T = specs.size();
  std::size_t t = T > 3 ? 3 : T - 1;
  while (bad.offsets[(t + 1) * 4] == bad.offsets[t * 4]) t = (t + 1) % T;
  const auto last = static_cast<std::size_t>(bad.offsets[(t + 1) * 4] - 1);
  bad.indices[last] = rows[t];
  const std::string idx_msg = "indices[" + std::to_string(last) + "] = " + std::to_string(rows[t]) +
                              " is outside table " + std::to_string(t);
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), idx_msg.c_str());
  same_refusal<std::invalid_argument>(
      tw, [&](auto& e) { e.prefetch(bad.indices, bad.offsets); }, idx_msg.c_str());
  bad = good;
  bad.indices[0] = -1;
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "indices[0] = -1");
  bad = good;
  bad.offsets[3] = bad.offsets[2] - 1;
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "offsets[");
  bad = good;
  bad.offsets[0] = 1;
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "offsets[0] = 1");
  bad = good;
  bad.indices.push_back(0);
  bad.weights.push_back(1.0f);
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "indices.size()");
  bad = good;
  bad.offsets.push_back(bad.offsets.back());
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "offsets.size()");
  bad = good;
  bad.weights.pop_back();
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "per_sample_weights.size()");
  bad = good;
  bad.weights[1] = std::numeric_limits<float>::quiet_NaN();
  same_refusal<std::invalid_argument>(tw, fwd(bad, out, bad.weights), "per_sample_weights[1] = nan");
  same_refusal<std::invalid_argument>(
      tw,
      [&](auto& e) { e.forward_inference(bad.indices, bad.offsets, out, mpe::Pooling::Sum, bad.weights); },
      "per_sample_weights[1] = nan");
  std::vector<float> small(out.size() - 1);
  same_refusal<std::invalid_argument>(tw, fwd(good, small, good.weights), "output.size()");
  same_refusal<std::logic_error>(
      tw, [&](auto& e) { e.backward(out, mpe::Sgd{0.1f}); }, "no forward()");

  // A pending forward: wrong gradient size, then a NaN in table 1's columns.
  tw.forward(good, mpe::Pooling::Sum);
  same_refusal<std::invalid_argument>(
      tw, [&](auto& e) { e.backward(std::span<const float>(out).first(out.size() - 1), mpe::Sgd{0.1f}); },
      "grad_output.size()");
  std::vector<float> g = ref::random_floats(rng, out.size(), -1, 1);
  g[2 * W + static_cast<std::size_t>(tw.host.column(1)) + 3] = std::numeric_limits<float>::infinity();
  // Several groups name the caller's position; one group, its own (flat) position.
  const std::string nan_msg =
      several ? "grad_output[2, " + std::to_string(tw.host.column(1) + 3) + "] = inf" : "grad_output[";
  same_refusal<std::invalid_argument>(
      tw, [&](auto& e) { e.backward(g, mpe::Sgd{0.1f}); }, nan_msg.c_str());
  // Still pending: a finite gradient applies in both.
  g[2 * W + static_cast<std::size_t>(tw.host.column(1)) + 3] = 0.5f;
  tw.backward(g, mpe::Sgd{0.1f});
  tw.check_equal_state();
}

}  // namespace

TEST_CASE("mixed D on a backend of device spans: refusals carry HostBackend's message, nothing changes") {
  for (const auto* specs : {&kMixed, &kOneD}) {
    CAPTURE(specs->size());
    Twin<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding> tw(mpe::MixedDimConfig{*specs, 0.3, 4});
    tw.host.init_uniform(-1, 1);
    tw.dev.init_uniform(-1, 1);
    refusals(tw, *specs, specs->size() == kMixed.size());
  }
}

TEST_CASE("mixed D on a backend of device spans: NonFinite::Skip skips the step in every group alike") {
  for (const auto* specs : {&kMixed, &kOneD}) {
    CAPTURE(specs->size());
    mpe::MixedDimConfig c{*specs, 0.3, 6};
    c.non_finite = mpe::NonFinite::Skip;
    Twin<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding> tw(c);
    tw.host.init_uniform(-1, 1);
    tw.dev.init_uniform(-1, 1);
    std::mt19937_64 rng(9);
    const auto rows = rows_of(*specs);
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      ref::Batch b = ref::random_batch(rng, rows, 5, 4, true);
      if (s == 1) b.weights[0] = std::numeric_limits<float>::quiet_NaN();  // let through to the skip
      const auto out = tw.forward(b, mpe::Pooling::Sum);
      auto g = ref::random_floats(rng, out.size(), -1, 1);
      if (s == 2)
        g[static_cast<std::size_t>(tw.host.column(static_cast<std::int64_t>(specs->size()) - 1))] = NAN;
      tw.backward(g, mpe::RowwiseAdagrad{0.1f});
      tw.check_equal_state();
    }
    CHECK(tw.host.stats().skipped_steps == 2);
  }
}

TEST_CASE("mixed D on a backend of device spans: memory() counts the split buffers and the layout") {
  using A =
      mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::StateFp32, Async>;
  using H = mpe::MixedDimEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const mpe::MixedDimConfig c{kMixed, 0.3, 1};
  // The layout in backend memory: rows, tables in group order, their columns (T each) and
  // each group's first table (G + 1), 8 bytes each.
  const std::size_t layout = (3 * kMixed.size() + 3 + 1) * 8;
  CHECK(A::planned_memory(c, mpe::Sgd{0.1f}).metadata_bytes ==
        H::planned_memory(c, mpe::Sgd{0.1f}).metadata_bytes + layout);
  Async be;
  A e(c, be);
  H h(c);
  // What the object holds beside its groups.
  const auto own = [](const auto& x) {
    mpe::MemoryFootprint m = x.memory();
    for (std::size_t g = 0; g < x.num_groups(); ++g) {
      m.metadata_bytes -= x.group(g).memory().metadata_bytes;
      m.workspace_bytes -= x.group(g).memory().workspace_bytes;
    }
    return m;
  };
  CHECK(own(e).metadata_bytes == own(h).metadata_bytes + layout);
  CHECK(own(e).workspace_bytes == (2 * kMixed.size() + 2) * 8);  // the verdict: count, T + 1 bounds, T bases
  std::mt19937_64 rng(3);
  const ref::Batch b = ref::random_batch(rng, rows_of(kMixed), 8, 4, false);
  std::vector<float> out(static_cast<std::size_t>(b.B * e.total_dim()));
  e.forward(b.indices, b.offsets, out);
  // At least each group's indices (n in all), offsets (T*B + G) and output columns (B * sum D).
  const auto need =
      (b.indices.size() + kMixed.size() * 8 + 3) * 8 + static_cast<std::size_t>(8 * e.total_dim()) * 4;
  CHECK(own(e).workspace_bytes >= need + (2 * kMixed.size() + 2) * 8);
}
