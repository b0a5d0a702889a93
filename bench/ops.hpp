// SPDX-License-Identifier: Apache-2.0
/// @file ops.hpp
/// @brief The timed operations of mpe::CachedEmbedding (forward, backward with Sgd,
/// populate by prefetch, a whole training step) and the plain FP32 embedding-bag
/// baseline, as Google Benchmark functions over the fixture of common.hpp.
#pragma once

#include "common.hpp"

namespace mpe_bench {

enum Op : int {
  kForward = 0,
  kBackward = 1,
  kPopulate = 2,
  kStep = 3,
  kForwardDirect = 4,
  kForwardInference = 5
};

inline const char* op_name(int op) {
  switch (op) {
    case kForward:
      return "forward";
    case kBackward:
      return "backward";
    case kPopulate:
      return "populate";
    case kStep:
      return "step";
    case kForwardDirect:
      return "forward_direct";
    default:
      return "forward_inference";
  }
}

template <class S, class C, class R>
std::string type_name() {
  return std::string(S::name) + "/" + C::name + std::to_string(C::ways) + "/" + R::name;
}

/// kForward, kBackward, kPopulate: each iteration is one training step prefetch ->
/// forward -> backward(Sgd) on the next batch; only the named part is timed (manual
/// time), so the cache evolves as in training. kStep: forward (populating itself) +
/// backward, timed together, with the store<->cache transfer per step. kForwardDirect:
/// forward() alone (validation, populate if cached, pooling), no backward.
/// kForwardInference: forward_inference() alone.
template <class S, class C, class R, int OpV>
void bm_op(benchmark::State& st) {
  using E = mpe::CachedEmbedding<S, C, R>;
  const Params p = Params::from(st);
  Fixture<E>& f = fixture<E>(type_name<S, C, R>(), p);
  E& e = *f.emb;
  const mpe::CacheStats s0 = e.stats();
  const double stride = static_cast<double>(e.store_row_bytes());
  const double lpr = lines_per_row(S::data_bytes(static_cast<std::int32_t>(p.D)), e.store_row_bytes());
  const double out_bytes = static_cast<double>(p.B * p.D) * 4.0;
  double seconds = 0, cpu = 0, indices = 0, bytes = 0, rows = 0;
  for (auto _ : st) {
    const Batch& b = f.batch();
    const double n = static_cast<double>(b.indices.size());
    const double U = static_cast<double>(b.unique_rows);
    double t = 0;
    if constexpr (OpV == kForward || OpV == kBackward || OpV == kPopulate) {
      const mpe::CacheStats before = e.stats();
      double c0 = cpu_now();
      auto t0 = Clock::now();
      e.prefetch(b.indices, b.offsets);
      const double tp = since(t0), cp = cpu_now() - c0;
      const mpe::CacheStats after = e.stats();
      c0 = cpu_now();
      t0 = Clock::now();
      e.forward(b.indices, b.offsets, f.output);
      benchmark::ClobberMemory();
      const double tf = since(t0), cf = cpu_now() - c0;
      c0 = cpu_now();
      t0 = Clock::now();
      e.backward(f.grad, mpe::Sgd{kLearningRate});
      benchmark::ClobberMemory();
      const double tb = since(t0), cb = cpu_now() - c0;
      if constexpr (OpV == kForward) {
        t = tf;
        cpu += cf;
        bytes += n * stride + out_bytes;
        rows += n;
      } else if constexpr (OpV == kBackward) {
        t = tb;
        cpu += cb;
        bytes += out_bytes + 2.0 * U * stride;
        rows += U;
      } else {
        t = tp;
        cpu += cp;
        const double moved = static_cast<double>(after.bytes_filled - before.bytes_filled +
                                                 after.bytes_written_back - before.bytes_written_back);
        bytes += n * 8.0 + moved;
        rows += moved / static_cast<double>(S::data_bytes(static_cast<std::int32_t>(p.D)));
      }
    } else if constexpr (OpV == kStep) {
      const double c0 = cpu_now();
      const auto t0 = Clock::now();
      e.forward(b.indices, b.offsets, f.output);
      e.backward(f.grad, mpe::Sgd{kLearningRate});
      benchmark::ClobberMemory();
      t = since(t0);
      cpu += cpu_now() - c0;
      bytes += n * stride + out_bytes + out_bytes + 2.0 * U * stride;
      rows += n + U;
    } else if constexpr (OpV == kForwardDirect) {
      const double c0 = cpu_now();
      const auto t0 = Clock::now();
      e.forward(b.indices, b.offsets, f.output);
      benchmark::ClobberMemory();
      t = since(t0);
      cpu += cpu_now() - c0;
      bytes += n * stride + out_bytes;
      rows += n;
    } else {
      const double c0 = cpu_now();
      const auto t0 = Clock::now();
      e.forward_inference(b.indices, b.offsets, f.output);
      benchmark::ClobberMemory();
      t = since(t0);
      cpu += cpu_now() - c0;
      bytes += n * stride + out_bytes;
      rows += n;
    }
    f.advance();
    indices += n;
    seconds += t;
    st.SetIterationTime(t);
  }
  set_counters(st, indices, bytes, rows, lpr, seconds, cpu);
  const mpe::CacheStats s1 = e.stats();
  mpe::CacheStats d{};
  d.hits = s1.hits - s0.hits;
  d.unique_rows = s1.unique_rows - s0.unique_rows;
  set_hit_rate(st, d);
  if constexpr (OpV == kStep) {
    const double it = static_cast<double>(st.iterations());
    st.counters["transfer_bytes_per_step"] =
        benchmark::Counter(static_cast<double>(s1.bytes_filled - s0.bytes_filled + s1.bytes_written_back -
                                               s0.bytes_written_back) /
                           it);
  }
  st.counters["setup_s"] = f.setup_s;
}

// ---------------------------------------------------------------- plain FP32 baseline

/// What a user has without mpe: an FP32 table (rows, D), a plain loop pooling each bag
/// (OpenMP over bags with MPE_BENCH_THREADS), and SGD applied per occurrence in order
/// (sequential: a scatter with duplicates).
struct PlainTable {
  Params p;
  std::vector<float> w;
  std::vector<Batch> batches;
  std::vector<float> output, grad;
  std::size_t next = 0;
  double setup_s = 0;
  explicit PlainTable(const Params& prm) : p(prm) {
    const auto t0 = Clock::now();
    w.resize(static_cast<std::size_t>(p.rows * p.D));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (float& x : w) x = u(rng);
    batches = make_batches(p.rows, p.B, p.L, static_cast<int>(p.dist), kBatches,
                           1234 + static_cast<std::uint64_t>(p.dist));
    output.assign(static_cast<std::size_t>(p.B * p.D), 0.0f);
    grad.resize(output.size());
    std::uniform_real_distribution<float> g(-1.0f, 1.0f);
    for (float& x : grad) x = g(rng);
    setup_s = since(t0);
  }
  void forward(const Batch& b) {
    const std::int64_t B = p.B, D = p.D;
    const std::int64_t* off = b.offsets.data();
    const std::int64_t* idx = b.indices.data();
    float* out = output.data();
    const float* W = w.data();
#pragma omp parallel for num_threads(threads()) schedule(static)
    for (std::int64_t j = 0; j < B; ++j) {
      float* o = out + j * D;
      for (std::int64_t d = 0; d < D; ++d) o[d] = 0.0f;
      for (std::int64_t i = off[j]; i < off[j + 1]; ++i) {
        const float* r = W + idx[i] * D;
        for (std::int64_t d = 0; d < D; ++d) o[d] += r[d];
      }
    }
  }
  void backward(const Batch& b) {
    const std::int64_t B = p.B, D = p.D;
    for (std::int64_t j = 0; j < B; ++j) {
      const float* g = grad.data() + j * D;
      for (std::int64_t i = b.offsets[static_cast<std::size_t>(j)];
           i < b.offsets[static_cast<std::size_t>(j + 1)]; ++i) {
        float* r = w.data() + b.indices[static_cast<std::size_t>(i)] * D;
        for (std::int64_t d = 0; d < D; ++d) r[d] -= kLearningRate * g[d];
      }
    }
  }
};

template <int OpV>
void bm_plain(benchmark::State& st) {
  const Params p = Params::from(st);
  FixtureSlot& s = fixture_slot();
  const std::string key = "plain|" + p.key();
  if (s.key != key) {
    s.holder.reset();
    s.holder = std::make_shared<PlainTable>(p);
    s.key = key;
  }
  PlainTable& f = *static_cast<PlainTable*>(s.holder.get());
  const double row = static_cast<double>(p.D) * 4.0;
  const double lpr = lines_per_row(static_cast<std::size_t>(row), static_cast<std::size_t>(row));
  const double out_bytes = static_cast<double>(p.B * p.D) * 4.0;
  double seconds = 0, cpu = 0, indices = 0, bytes = 0, rows = 0;
  for (auto _ : st) {
    const Batch& b = f.batches[f.next];
    const double n = static_cast<double>(b.indices.size());
    double c0 = cpu_now();
    auto t0 = Clock::now();
    f.forward(b);
    benchmark::ClobberMemory();
    const double tf = since(t0), cf = cpu_now() - c0;
    c0 = cpu_now();
    t0 = Clock::now();
    f.backward(b);
    benchmark::ClobberMemory();
    const double tb = since(t0), cb = cpu_now() - c0;
    double t;
    if constexpr (OpV == kForward) {
      t = tf;
      cpu += cf;
      bytes += n * row + out_bytes;
      rows += n;
    } else if constexpr (OpV == kBackward) {
      t = tb;
      cpu += cb;
      // per occurrence: the row read and written, the gradient row read
      bytes += n * (2.0 * row) + out_bytes;
      rows += n;
    } else {
      t = tf + tb;
      cpu += cf + cb;
      bytes += n * row + out_bytes + n * 2.0 * row + out_bytes;
      rows += 2.0 * n;
    }
    f.next = (f.next + 1) % f.batches.size();
    indices += n;
    seconds += t;
    st.SetIterationTime(t);
  }
  set_counters(st, indices, bytes, rows, lpr, seconds, cpu);
  if constexpr (OpV == kStep) st.counters["transfer_bytes_per_step"] = 0;
  st.counters["setup_s"] = f.setup_s;
}

// ---------------------------------------------------------------- registration

inline benchmark::internal::Benchmark* configure(benchmark::internal::Benchmark* b) {
  return b->ArgNames(arg_names())->UseManualTime()->Unit(benchmark::kMillisecond);
}

template <class S, class C, class R, int OpV>
void reg(const std::string& prefix, const std::vector<std::vector<std::int64_t>>& args) {
  auto* b = benchmark::RegisterBenchmark((prefix + op_name(OpV) + "/" + type_name<S, C, R>()).c_str(),
                                         bm_op<S, C, R, OpV>);
  configure(b);
  for (const auto& a : args) b->Args(a);
}

template <int OpV>
void reg_plain(const std::string& prefix, const std::vector<std::vector<std::int64_t>>& args) {
  auto* b = benchmark::RegisterBenchmark((prefix + op_name(OpV) + "/plain_fp32_bag").c_str(), bm_plain<OpV>);
  configure(b);
  for (const auto& a : args) b->Args(a);
}

}  // namespace mpe_bench
