// SPDX-License-Identifier: Apache-2.0
// A seeded training run written once against the Backend interface, so the same run can
// be compiled by g++ for HostBackend (host_ref_*.cpp) and by nvcc for CudaBackend
// (test_cuda_*.cu), and every result bit compared. Compiles with g++ alone.
#pragma once

#include <cstdint>
#include <cstring>
#include <mpe/mpe.hpp>
#include <span>
#include <string>
#include <vector>

namespace mpe_test {

enum class Opt { Sgd, Adagrad, Adam };
enum class Mode { Sum, Mean, Weighted };

struct Scenario {
  std::int64_t cache_rows = 12;  // 58 rows, 12 slots: hits, evictions, conflict misses
  Opt opt = Opt::Sgd;
  Mode mode = Mode::Sum;
  bool prefetch = false;  // prefetch batch s+1 between forward(s) and backward(s)
  int steps = 5;
  bool deferred = false;         // Validation::Deferred (no wait in prefetch/forward/backward)
  bool slot_index = false;       // EmbeddingConfig::slot_index (the row -> slot index, in the store rows)
  bool defer_admission = false;  // EmbeddingConfig::defer_admission (admitted in backward)
  bool slot_array = false;       // the slot index an array (EmbeddingConfig::slot_index_in_rows = false)
  std::string label() const {
    return "cache_rows=" + std::to_string(cache_rows) +
           (opt == Opt::Sgd       ? " sgd"
            : opt == Opt::Adagrad ? " adagrad"
                                  : " adam") +
           (mode == Mode::Sum    ? " sum"
            : mode == Mode::Mean ? " mean"
                                 : " weighted") +
           (prefetch ? " prefetch" : "") + (deferred ? " deferred" : "") + (slot_index ? " slot_index" : "") +
           (defer_admission ? " defer_admission" : "") + (slot_array ? " slot_array" : "");
  }
};

/// Every scenario the bit-identity tests run (per Storage x Cache x Rounding type).
inline std::vector<Scenario> all_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t c : {std::int64_t{12}, std::int64_t{0}}) {
    for (Opt o : {Opt::Sgd, Opt::Adagrad}) {
      for (Mode m : {Mode::Sum, Mode::Mean, Mode::Weighted}) {
        for (bool p : {false, true}) {
          if (c == 0 && p) continue;  // prefetch has no effect without a cache
          v.push_back(Scenario{c, o, m, p, 5, false});
        }
      }
    }
  }
  // Validation::Deferred: the same bits with every size and statistic kept on the device.
  for (Mode m : {Mode::Sum, Mode::Weighted}) {
    for (bool p : {false, true}) v.push_back(Scenario{12, Opt::Adagrad, m, p, 5, true});
  }
  // The slot index: kept by the device's fills and drops, read by forward_inference; in the
  // store rows, and (the last) an array.
  for (Mode m : {Mode::Sum, Mode::Weighted}) {
    for (bool p : {false, true}) v.push_back(Scenario{12, Opt::Adagrad, m, p, 5, false, true});
  }
  v.push_back(Scenario{12, Opt::Adagrad, Mode::Weighted, true, 5, false, true, false, true});
  // Admission deferred to backward: the forward probes slots (set scan or index) and pools
  // misses from the store; backward deduplicates and admits.
  for (bool index : {false, true}) {
    for (bool p : {false, true})
      v.push_back(Scenario{12, Opt::Adagrad, Mode::Weighted, p, 5, p, index, true});
  }
  return v;
}

/// Adam scenarios of the optimizer-state precision tests (test_cuda_state.cu): with and
/// without a cache and prefetch, sum and weighted pooling; a set_weights mid-run drops
/// dirty cached rows (their compact state is written back, site StateDrop).
inline std::vector<Scenario> state_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t c : {std::int64_t{12}, std::int64_t{0}}) {
    for (Mode m : {Mode::Sum, Mode::Weighted}) {
      for (bool p : {false, true}) {
        if (c == 0 && p) continue;
        v.push_back(Scenario{c, Opt::Adam, m, p, 6, false});
      }
    }
  }
  v.push_back(Scenario{12, Opt::Adam, Mode::Sum, true, 6, true});
  return v;
}

struct Result {
  std::vector<float> outputs;    // every forward() output, steps concatenated
  std::vector<float> inference;  // forward_inference() of the first batch after training
  std::vector<float> weights_before_flush, weights;
  std::vector<std::uint8_t> store;  // raw store bytes after flush()
  std::vector<std::uint8_t>
      state;  // raw optimizer state after flush(): the state store, then the cached FP32 state
  mpe::CacheStats stats;
  std::uint64_t step = 0;
};

struct HostBatch {
  std::vector<std::int64_t> indices, offsets;
  std::vector<float> weights, grad;
};

inline constexpr std::int32_t kDim = 7;  // odd (Int4 nibbles), not a multiple of 4 (Philox groups)
inline constexpr std::int64_t kBags = 6;
inline const std::vector<std::int64_t> kTableRows = {37, 21};

/// splitmix64 stream (the test's own generator, independent of mpe's Philox).
struct TestRng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
  float uniform(float lo, float hi) {  // multiples of 2^-24 * (hi - lo)
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * 0x1p-24f;
  }
};

/// Batch s: bags of 0..4 indices, half of them from a table's 5 hottest rows (repeats and
/// cache hits), the rest uniform (misses, evictions, conflicts).
inline HostBatch make_batch(int s) {
  TestRng rng{0x1234u + static_cast<std::uint64_t>(s) * 7919u};
  HostBatch b;
  b.offsets.push_back(0);
  for (std::size_t t = 0; t < kTableRows.size(); ++t) {
    for (std::int64_t j = 0; j < kBags; ++j) {
      const std::int64_t len = rng.below(5);
      for (std::int64_t k = 0; k < len; ++k) {
        b.indices.push_back(rng.below(2) ? rng.below(5) : rng.below(kTableRows[t]));
        b.weights.push_back(rng.uniform(0.25f, 1.25f));
      }
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
  }
  b.grad.resize(static_cast<std::size_t>(kBags) * kTableRows.size() * kDim);
  for (float& g : b.grad) g = rng.uniform(-0.5f, 0.5f);
  return b;
}

/// A host vector copied into backend memory.
template <class T, class Backend>
mpe::detail::Buffer<T, Backend> to_backend(const Backend& be, const std::vector<T>& v) {
  mpe::detail::Buffer<T, Backend> buf(be, v.size());
  be.copy_from_host(buf.data(), v.data(), v.size() * sizeof(T));
  return buf;
}

template <class T, class Backend>
std::vector<T> to_host(const Backend& be, const T* p, std::size_t n) {
  std::vector<T> v(n);
  be.copy_to_host(v.data(), p, n * sizeof(T));
  return v;
}

template <class Backend>
struct DeviceBatch {
  mpe::detail::Buffer<std::int64_t, Backend> indices, offsets;
  mpe::detail::Buffer<float, Backend> weights, grad, output;
  DeviceBatch(const Backend& be, const HostBatch& h)
      : indices(to_backend(be, h.indices)),
        offsets(to_backend(be, h.offsets)),
        weights(to_backend(be, h.weights)),
        grad(to_backend(be, h.grad)),
        output(be, h.grad.size()) {}
  std::span<const std::int64_t> idx() const { return {indices.data(), indices.size()}; }
  std::span<const std::int64_t> off() const { return {offsets.data(), offsets.size()}; }
};

/// Every weight before and after flush(), then the raw store bytes, into r.
template <class Emb, class Backend>
void read_back(Emb& emb, const Backend& be, Result& r) {
  const auto n = static_cast<std::size_t>(emb.total_rows() * emb.config().dim);
  r.weights_before_flush.resize(n);
  emb.get_weights(r.weights_before_flush);
  emb.flush();
  r.weights.resize(n);
  emb.get_weights(r.weights);
  const auto ref = emb.ref();
  r.store = to_host(be, ref.store, static_cast<std::size_t>(emb.total_rows()) * ref.stride);
}

/// The seeded training run: init_uniform, set_weights of a few rows, `steps` forward /
/// (prefetch) / backward, forward_inference, get_weights, flush, get_weights, store bytes.
template <class Storage, class Cache, class Rounding, class Backend, class Precision = mpe::StateFp32>
Result run_training(const Backend& be, const Scenario& sc) {
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTableRows;
  cfg.dim = kDim;
  cfg.cache_rows = sc.cache_rows;
  cfg.seed = 0xfeedbeefcafeull;
  cfg.validation = sc.deferred ? mpe::Validation::Deferred : mpe::Validation::Synchronous;
  cfg.slot_index = sc.slot_index;
  cfg.slot_index_in_rows = !sc.slot_array;
  cfg.defer_admission = sc.defer_admission;
  mpe::CachedEmbedding<Storage, Cache, Rounding, Backend, Precision> emb(cfg, be);
  emb.init_uniform(-0.5f, 0.5f);
  std::vector<float> w(5 * kDim);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 1.5f;
  emb.set_weights(w, 3);

  using DB = DeviceBatch<Backend>;
  Result r;
  const auto pooling = sc.mode == Mode::Mean ? mpe::Pooling::Mean : mpe::Pooling::Sum;
  std::vector<HostBatch> host;
  for (int s = 0; s <= sc.steps; ++s) host.push_back(make_batch(s));
  for (int s = 0; s < sc.steps; ++s) {
    DB b(be, host[static_cast<std::size_t>(s)]);
    std::span<const float> psw;
    if (sc.mode == Mode::Weighted) psw = {b.weights.data(), b.weights.size()};
    emb.forward(b.idx(), b.off(), {b.output.data(), b.output.size()}, pooling, psw);
    const auto out = to_host(be, b.output.data(), b.output.size());
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
    if (sc.prefetch) {
      DB next(be, host[static_cast<std::size_t>(s + 1)]);
      emb.prefetch(next.idx(), next.off());
    }
    std::span<const float> g{b.grad.data(), b.grad.size()};
    if (sc.opt == Opt::Sgd) {
      emb.backward(g, mpe::Sgd{0.25f});
    } else if (sc.opt == Opt::Adagrad) {
      emb.backward(g, mpe::RowwiseAdagrad{0.1f, 1e-6f});
    } else {
      emb.backward(g, mpe::Adam{0.05f, 0.9f, 0.999f, 1e-6f});
      if (s == 2) emb.set_weights(std::span<const float>(w.data(), 3 * kDim), 2);  // drops rows 2..4
    }
  }
  emb.synchronize();  // valid input: nothing was recorded
  {
    DB b(be, host[0]);
    std::span<const float> psw;
    if (sc.mode == Mode::Weighted) psw = {b.weights.data(), b.weights.size()};
    emb.forward_inference(b.idx(), b.off(), {b.output.data(), b.output.size()}, pooling, psw);
    r.inference = to_host(be, b.output.data(), b.output.size());
  }
  read_back(emb, be, r);
  {
    const mpe::TableState state = emb.state();
    r.state = to_host(be, state.optimizer_state.data(), state.optimizer_state.size());
    const auto c = to_host(be, reinterpret_cast<const std::uint8_t*>(state.cached_optimizer_state.data()),
                           state.cached_optimizer_state.size_bytes());
    r.state.insert(r.state.end(), c.begin(), c.end());
  }
  r.stats = emb.stats();
  r.step = emb.step();
  return r;
}

/// Wide sets: one table of 3,000 rows, D = 16, 96 cache rows (3 sets of 32 ways for a
/// 32-way policy), 8 batches of 8 indices per bag (half from the 96 hottest rows, half
/// uniform), alternately 96 bags and 12: in a large batch each set gets well over 32 items,
/// so a set's items span several warp widths, every way is taken and misses end as
/// conflicts; in a small one a set's misses find unlocked ways and evict (or, for
/// SecondTouchLru and Lfu, are refused). Sgd, sum pooling, with or without a pipelined
/// prefetch; outputs, weights before and after flush, store bytes, counters and step (no
/// inference output and no optimizer state: those stay empty).
template <class Storage, class Cache, class Rounding, class Backend>
Result run_wide(const Backend& be, bool prefetch) {
  constexpr std::int32_t D = 16;
  constexpr std::int64_t kRows = 3000, kLen = 8;
  constexpr int kSteps = 8;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {kRows};
  cfg.dim = D;
  cfg.cache_rows = 96;
  cfg.seed = 0x5eedf00dull;
  mpe::CachedEmbedding<Storage, Cache, Rounding, Backend> emb(cfg, be);
  emb.init_uniform(-0.5f, 0.5f);
  std::vector<HostBatch> host;
  for (int s = 0; s <= kSteps; ++s) {
    TestRng rng{0x77u + static_cast<std::uint64_t>(s) * 104729u};
    const std::int64_t bags = s % 2 == 0 ? 96 : 12;
    HostBatch b;
    for (std::int64_t j = 0; j <= bags; ++j) b.offsets.push_back(j * kLen);
    for (std::int64_t k = 0; k < bags * kLen; ++k) {
      b.indices.push_back(rng.below(2) ? rng.below(96) : rng.below(kRows));
    }
    b.grad.resize(static_cast<std::size_t>(bags * D));
    for (float& g : b.grad) g = rng.uniform(-0.5f, 0.5f);
    host.push_back(std::move(b));
  }
  using DB = DeviceBatch<Backend>;
  Result r;
  for (int s = 0; s < kSteps; ++s) {
    DB b(be, host[static_cast<std::size_t>(s)]);
    emb.forward(b.idx(), b.off(), {b.output.data(), b.output.size()});
    const auto out = to_host(be, b.output.data(), b.output.size());
    r.outputs.insert(r.outputs.end(), out.begin(), out.end());
    if (prefetch) {
      DB next(be, host[static_cast<std::size_t>(s + 1)]);
      emb.prefetch(next.idx(), next.off());
    }
    emb.backward(std::span<const float>{b.grad.data(), b.grad.size()}, mpe::Sgd{0.25f});
  }
  emb.synchronize();
  read_back(emb, be, r);
  r.stats = emb.stats();
  r.step = emb.step();
  return r;
}

}  // namespace mpe_test

// The Cache x Rounding types of the bit-identity matrix, for one Storage: X(Storage,
// Cache, Rounding) per combination.
#define MPE_TEST_MATRIX(X, S)                      \
  X(S, mpe::Lru<4>, mpe::StochasticRounding)       \
  X(S, mpe::Lru<4>, mpe::NearestRounding)          \
  X(S, mpe::Lfu<4>, mpe::StochasticRounding)       \
  X(S, mpe::Lfu<4>, mpe::NearestRounding)          \
  X(S, mpe::DirectMapped, mpe::StochasticRounding) \
  X(S, mpe::DirectMapped, mpe::NearestRounding)    \
  X(S, mpe::WTinyLfu<4>, mpe::StochasticRounding)  \
  X(S, mpe::WTinyLfu<4>, mpe::NearestRounding)     \
  X(S, mpe::SecondTouchLru<4>, mpe::StochasticRounding)

// The 32-way policies of the wide-set test (run_wide): X(Storage, Cache, Rounding).
#define MPE_TEST_WIDE_MATRIX(X)                                         \
  X(mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding)            \
  X(mpe::Int8Rowwise, mpe::SecondTouchLru<32>, mpe::StochasticRounding) \
  X(mpe::Int8Rowwise, mpe::Lfu<32>, mpe::NearestRounding)
#define MPE_TEST_WIDE_INSTANTIATE(S, C, R) \
  template mpe_test::Result mpe_test::run_wide<S, C, R, mpe::HostBackend>(const mpe::HostBackend&, bool);
#define MPE_TEST_WIDE_EXTERN(S, C, R)                                                                     \
  extern template mpe_test::Result mpe_test::run_wide<S, C, R, mpe::HostBackend>(const mpe::HostBackend&, \
                                                                                 bool);

#define MPE_TEST_HOST_INSTANTIATE(S, C, R)                                                             \
  template mpe_test::Result mpe_test::run_training<S, C, R, mpe::HostBackend>(const mpe::HostBackend&, \
                                                                              const mpe_test::Scenario&);
#define MPE_TEST_HOST_EXTERN(S, C, R)                                                 \
  extern template mpe_test::Result mpe_test::run_training<S, C, R, mpe::HostBackend>( \
      const mpe::HostBackend&, const mpe_test::Scenario&);
// Optimizer-state precision P (StateBf16, StateFp16): X(Storage, Cache, Rounding, P).
#define MPE_TEST_STATE_MATRIX(X)                                            \
  X(mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::StateBf16) \
  X(mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding, mpe::StateBf16)    \
  X(mpe::Int8Rowwise, mpe::Lfu<4>, mpe::StochasticRounding, mpe::StateFp16) \
  X(mpe::Fp8E4M3Rowwise, mpe::DirectMapped, mpe::StochasticRounding, mpe::StateBf16)
#define MPE_TEST_STATE_INSTANTIATE(S, C, R, P)                                                            \
  template mpe_test::Result mpe_test::run_training<S, C, R, mpe::HostBackend, P>(const mpe::HostBackend&, \
                                                                                 const mpe_test::Scenario&);
#define MPE_TEST_STATE_EXTERN(S, C, R, P)                                                \
  extern template mpe_test::Result mpe_test::run_training<S, C, R, mpe::HostBackend, P>( \
      const mpe::HostBackend&, const mpe_test::Scenario&);
