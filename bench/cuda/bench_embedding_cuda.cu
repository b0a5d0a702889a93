// SPDX-License-Identifier: Apache-2.0
// CudaBackend benchmarks at the base point (bench/README.md): forward, backward (Sgd)
// and populate (prefetch) for Int8Rowwise and Int4Rowwise, with a 5 % Lru<32> cache and
// store only, the store in Device, Managed and HostMapped memory. Each part is timed with
// CUDA events on the backend's stream (manual time). `cuda/step/...` times whole pipelined
// training steps (forward(k), prefetch(k+1), backward(k), 16 per iteration after one
// prefetch of the first batch; no statistics read) with the
// store in HBM, under Validation::Synchronous (one wait per call) and Validation::Deferred
// (no wait): the difference is what the waits cost. `gpu/...` is a point sized for a GPU
// (B = 65536, L = 32, D = 128, 10M rows: 2M lookups and about 285 MB of INT8 rows per
// forward, several times the H200's 60 MiB L2), Device placement, INT8/INT4 with a 5 % cache
// and store only, plus FP16/FP32 stores. Before any benchmark, main() measures the device's
// copy bandwidth (a 2 GiB device-to-device cudaMemcpyAsync, bytes read + written, best of
// 10) and the pinned host-to-device bandwidth; every forward/backward/populate benchmark
// reports `fraction_of_hbm`,
// its bytes_per_second over that measured copy bandwidth (for Managed/HostMapped stores
// only as a scale: their rows cross the interconnect). Without a usable GPU the binary
// prints "MPE_CUDA_SKIP: ..." and exits 0.
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mpe/mpe.cuh>
#include <stdexcept>

#include "../common.hpp"

namespace {
using namespace mpe_bench;
using Placement = mpe::CudaBackend::Placement;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceArray {
  T* p = nullptr;
  std::size_t n = 0;
  explicit DeviceArray(const std::vector<T>& h) : n(h.size()) {
    cuda_ok(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    cuda_ok(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(p); }
  std::span<T> span() { return {p, n}; }
};

struct DeviceBatch {
  DeviceArray<std::int64_t> indices, offsets;
  std::int64_t unique_rows;
  explicit DeviceBatch(const Batch& b) : indices(b.indices), offsets(b.offsets), unique_rows(b.unique_rows) {}
};

/// Device copy bandwidth measured in this process by main() (bytes read + written per s).
double g_hbm_bytes_per_s = 0;

/// Host batches, generated once per (rows, B, L, dist): the GPU-sized points share them
/// across fixtures (16 batches of 2M indices take seconds to draw and sort).
const std::vector<Batch>& batches_for(const Params& p) {
  static std::map<std::string, std::vector<Batch>> memo;
  const std::string key = std::to_string(p.rows) + "/" + std::to_string(p.B) + "/" + std::to_string(p.L) +
                          "/" + std::to_string(p.dist);
  auto it = memo.find(key);
  if (it == memo.end()) {
    it = memo.emplace(key, make_batches(p.rows, p.B, p.L, static_cast<int>(p.dist), kBatches,
                                        1234 + static_cast<std::uint64_t>(p.dist)))
             .first;
  }
  return it->second;
}

/// kStepAdagrad: kStepSync with RowwiseAdagrad (the fixture warmed up with it too).
enum Op : int {
  kForward = 0,
  kBackward = 1,
  kPopulate = 2,
  kStepSync = 3,
  kStepDeferred = 4,
  kStepAdagrad = 5
};
const char* op_name_cuda(int op) {
  return op == kForward       ? "forward"
         : op == kBackward    ? "backward"
         : op == kPopulate    ? "populate"
         : op == kStepAdagrad ? "step_adagrad"
                              : "step";
}
constexpr int kStepsPerIteration = 16;

const char* placement_name(int p) {
  return p == static_cast<int>(Placement::Device)    ? "device"
         : p == static_cast<int>(Placement::Managed) ? "managed"
                                                     : "host_mapped";
}

template <class S, class C>
struct CudaFixture {
  using E = mpe::CachedEmbedding<S, C, mpe::StochasticRounding, mpe::CudaBackend>;
  cudaStream_t stream = nullptr;
  std::unique_ptr<E> emb;
  std::vector<std::unique_ptr<DeviceBatch>> batches;
  std::unique_ptr<DeviceArray<float>> output, grad;
  std::size_t next = 0;
  double setup_s = 0;
  bool adagrad = false;  // trained with RowwiseAdagrad, else Sgd
  CudaFixture(const Params& p, Placement placement, mpe::Validation validation, bool use_adagrad)
      : adagrad(use_adagrad) {
    const auto t0 = Clock::now();
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = {p.rows};
    cfg.dim = static_cast<std::int32_t>(p.D);
    cfg.cache_rows = p.cache_rows();
    cfg.seed = 42;
    cfg.validation = validation;
    mpe::CudaBackend backend;
    backend.stream = stream;
    backend.placement = placement;
    emb = std::make_unique<E>(cfg, backend);
    emb->init_uniform(-0.05f, 0.05f);
    for (const Batch& b : batches_for(p)) {
      batches.push_back(std::make_unique<DeviceBatch>(b));
    }
    output = std::make_unique<DeviceArray<float>>(std::vector<float>(static_cast<std::size_t>(p.B * p.D)));
    std::vector<float> g(static_cast<std::size_t>(p.B * p.D));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : g) x = u(rng);
    grad = std::make_unique<DeviceArray<float>>(g);
    for (std::size_t k = 0; k < batches.size(); ++k) {
      DeviceBatch& b = *batches[k];
      emb->forward(b.indices.span(), b.offsets.span(), output->span());
      backward();
    }
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    emb->reset_stats();
    setup_s = since(t0);
  }
  /// backward() with the fixture's optimizer (RowwiseAdagrad or Sgd) on the fixed gradient.
  void backward() {
    if (adagrad) {
      emb->backward(grad->span(), mpe::RowwiseAdagrad{kLearningRate});
    } else {
      emb->backward(grad->span(), mpe::Sgd{kLearningRate});
    }
  }
  ~CudaFixture() {
    emb.reset();
    if (stream) cudaStreamDestroy(stream);
  }
};

/// The fixture for (S, C, placement, params, validation), built once and kept while
/// consecutive benchmarks share it.
template <class S, class C, int PlacementV>
CudaFixture<S, C>& fixture_for(const Params& p, mpe::Validation validation, bool adagrad = false) {
  using F = CudaFixture<S, C>;
  FixtureSlot& slot = fixture_slot();
  const std::string key = std::string("cuda|") + S::name + C::name + placement_name(PlacementV) + "|" +
                          p.key() + (validation == mpe::Validation::Deferred ? "|deferred" : "") +
                          (adagrad ? "|adagrad" : "");
  if (slot.key != key) {
    slot.holder.reset();
    slot.key.clear();
    slot.holder = std::make_shared<F>(p, static_cast<Placement>(PlacementV), validation, adagrad);
    slot.key = key;
  }
  return *static_cast<F*>(slot.holder.get());
}

/// kStepsPerIteration pipelined training steps between two events; the host never reads
/// anything back (the statistics are not read), so under Validation::Deferred nothing waits.
template <class S, class C, int OpV, int PlacementV>
void bm_cuda_step(benchmark::State& st) {
  const Params p = Params::from(st);
  auto& f = fixture_for<S, C, PlacementV>(
      p, OpV == kStepDeferred ? mpe::Validation::Deferred : mpe::Validation::Synchronous,
      OpV == kStepAdagrad);
  auto& e = *f.emb;
  cudaEvent_t ev[2];
  for (auto& x : ev) cuda_ok(cudaEventCreate(&x), "cudaEventCreate");
  double seconds = 0, indices = 0;
  for (auto _ : st) {
    cuda_ok(cudaEventRecord(ev[0], f.stream), "cudaEventRecord");
    for (int s = 0; s < kStepsPerIteration; ++s) {
      DeviceBatch& b = *f.batches[f.next];
      f.next = (f.next + 1) % f.batches.size();
      DeviceBatch& nb = *f.batches[f.next];
      if (s == 0) e.prefetch(b.indices.span(), b.offsets.span());
      e.forward(b.indices.span(), b.offsets.span(), f.output->span());
      e.prefetch(nb.indices.span(), nb.offsets.span());
      f.backward();
      indices += static_cast<double>(b.indices.n);
    }
    cuda_ok(cudaEventRecord(ev[1], f.stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(ev[1]), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
    seconds += ms * 1e-3;
    st.SetIterationTime(ms * 1e-3);
  }
  e.synchronize();  // valid input: nothing was recorded
  for (auto& x : ev) cudaEventDestroy(x);
  st.counters["steps_per_second"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * kStepsPerIteration / seconds);
  st.counters["indices_per_second"] = benchmark::Counter(indices / seconds);
  st.counters["setup_s"] = f.setup_s;
}

template <class S, class C, int OpV, int PlacementV>
void bm_cuda(benchmark::State& st) {
  const Params p = Params::from(st);
  auto& f = fixture_for<S, C, PlacementV>(p, mpe::Validation::Synchronous);
  auto& e = *f.emb;
  cudaEvent_t ev[4];
  for (auto& x : ev) cuda_ok(cudaEventCreate(&x), "cudaEventCreate");
  const double stride = static_cast<double>(e.store_row_bytes());
  const double lpr = lines_per_row(S::data_bytes(static_cast<std::int32_t>(p.D)), e.store_row_bytes());
  const double out_bytes = static_cast<double>(p.B * p.D) * 4.0;
  const mpe::CacheStats s0 = e.stats();
  double seconds = 0, indices = 0, bytes = 0, rows = 0;
  for (auto _ : st) {
    DeviceBatch& b = *f.batches[f.next];
    const double n = static_cast<double>(b.indices.n);
    const double U = static_cast<double>(b.unique_rows);
    const mpe::CacheStats before = e.stats();
    cuda_ok(cudaEventRecord(ev[0], f.stream), "cudaEventRecord");
    e.prefetch(b.indices.span(), b.offsets.span());
    cuda_ok(cudaEventRecord(ev[1], f.stream), "cudaEventRecord");
    const mpe::CacheStats after = e.stats();
    e.forward(b.indices.span(), b.offsets.span(), f.output->span());
    cuda_ok(cudaEventRecord(ev[2], f.stream), "cudaEventRecord");
    e.backward(f.grad->span(), mpe::Sgd{kLearningRate});
    cuda_ok(cudaEventRecord(ev[3], f.stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(ev[3]), "cudaEventSynchronize");
    float ms = 0;
    const int k = OpV == kPopulate ? 0 : OpV == kForward ? 1 : 2;
    cuda_ok(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]), "cudaEventElapsedTime");
    const double t = ms * 1e-3;
    if (OpV == kForward) {
      bytes += n * stride + out_bytes;
      rows += n;
    } else if (OpV == kBackward) {
      bytes += out_bytes + 2.0 * U * stride;
      rows += U;
    } else {
      const double moved = static_cast<double>(after.bytes_filled - before.bytes_filled +
                                               after.bytes_written_back - before.bytes_written_back);
      bytes += n * 8.0 + moved;
      rows += moved / static_cast<double>(S::data_bytes(static_cast<std::int32_t>(p.D)));
    }
    f.next = (f.next + 1) % f.batches.size();
    indices += n;
    seconds += t;
    st.SetIterationTime(t);
  }
  for (auto& x : ev) cudaEventDestroy(x);
  // fraction_of_limit / fraction_of_stream are against the host's limits (common.hpp):
  // meaningful for HostMapped/Managed stores read over the interconnect only as a scale.
  set_counters(st, indices, bytes, rows, lpr, seconds, 0.0);
  if (g_hbm_bytes_per_s > 0 && seconds > 0) {
    st.counters["fraction_of_hbm"] = benchmark::Counter(bytes / seconds / g_hbm_bytes_per_s);
  }
  const mpe::CacheStats s1 = e.stats();
  mpe::CacheStats d{};
  d.hits = s1.hits - s0.hits;
  d.unique_rows = s1.unique_rows - s0.unique_rows;
  set_hit_rate(st, d);
  st.counters["setup_s"] = f.setup_s;
}

template <class S, class C, int OpV, int PlacementV>
void reg_one(const std::string& prefix, const std::vector<std::int64_t>& args) {
  const std::string name = prefix + "cuda/" + op_name_cuda(OpV) + "/" + S::name + "/" + C::name +
                           std::to_string(C::ways) + "/" + placement_name(PlacementV);
  auto* fn = (OpV == kStepSync || OpV == kStepDeferred || OpV == kStepAdagrad)
                 ? bm_cuda_step<S, C, OpV, PlacementV>
                 : bm_cuda<S, C, OpV, PlacementV>;
  benchmark::RegisterBenchmark(name.c_str(), fn)
      ->ArgNames(arg_names())
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Args(args);
}

template <class S, class C, int PlacementV>
void reg_ops(const std::string& prefix, const std::vector<std::int64_t>& args) {
  reg_one<S, C, kForward, PlacementV>(prefix, args);
  reg_one<S, C, kBackward, PlacementV>(prefix, args);
  reg_one<S, C, kPopulate, PlacementV>(prefix, args);
}

template <class S>
void reg_storage(const std::string& prefix, bool smoke) {
  constexpr int kDev = static_cast<int>(Placement::Device), kMan = static_cast<int>(Placement::Managed),
                kMap = static_cast<int>(Placement::HostMapped);
  for (const std::int64_t pm : {50, 0}) {
    const auto a = smoke ? smoke_args(pm) : base_args(pm);
    reg_ops<S, mpe::Lru<32>, kDev>(prefix, a);
    reg_ops<S, mpe::Lru<32>, kMan>(prefix, a);
    reg_ops<S, mpe::Lru<32>, kMap>(prefix, a);
    reg_one<S, mpe::Lru<32>, kStepSync, kDev>(prefix + "sync/", a);
    reg_one<S, mpe::Lru<32>, kStepDeferred, kDev>(prefix + "deferred/", a);
  }
}
/// The GPU-sized point (Device placement): B = 65536, L = 32, D = 128, 10M rows.
std::vector<std::int64_t> gpu_args(std::int64_t dist, std::int64_t cache_pm) {
  return {65536, 32, 128, 10000000, dist, cache_pm};
}

template <class S>
void reg_gpu_cached(std::int64_t dist) {
  constexpr int kDev = static_cast<int>(Placement::Device);
  for (const std::int64_t pm : {50, 0}) {
    const auto a = gpu_args(dist, pm);
    reg_ops<S, mpe::Lru<32>, kDev>("gpu/", a);
    reg_one<S, mpe::Lru<32>, kStepSync, kDev>("gpu/sync/", a);
    reg_one<S, mpe::Lru<32>, kStepDeferred, kDev>("gpu/deferred/", a);
  }
}

template <class S>
void reg_gpu_store_only(std::int64_t dist) {
  constexpr int kDev = static_cast<int>(Placement::Device);
  reg_one<S, mpe::Lru<32>, kForward, kDev>("gpu/", gpu_args(dist, 0));
  reg_one<S, mpe::Lru<32>, kBackward, kDev>("gpu/", gpu_args(dist, 0));
}

/// The laned store-only pooling kernel alone (detail::PoolBags<S, G>, G rows in flight per
/// lane), launched directly on a store of `rows` rows filled with one byte pattern: the
/// GPU-point forward without validation, dedup or statistics, for choosing
/// detail::kPoolLaneGroup (CachedEmbedding's forward uses PoolBags<S>, G = kPoolLaneGroup).
template <class S, int G>
void bm_pool_group(benchmark::State& st) {
  const Params p = Params::from(st);
  const auto D = static_cast<std::int32_t>(p.D);
  const std::size_t stride = mpe::row_bytes<S>(D, 4);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::uint8_t* store = nullptr;
  const std::size_t store_bytes = stride * static_cast<std::size_t>(p.rows);
  cuda_ok(cudaMalloc(&store, store_bytes), "cudaMalloc");
  cuda_ok(cudaMemset(store, 0x3c, store_bytes), "cudaMemset");  // codes and scale/bias 0x3c3c3c3c
  std::vector<std::unique_ptr<DeviceBatch>> batches;
  for (const Batch& b : batches_for(p)) {
    batches.push_back(std::make_unique<DeviceBatch>(b));
    if (batches.size() == 4) break;
  }
  DeviceArray<float> out(std::vector<float>(static_cast<std::size_t>(p.B * p.D)));
  mpe::CudaBackend be;
  be.stream = stream;
  cudaEvent_t ev[2];
  for (auto& x : ev) cuda_ok(cudaEventCreate(&x), "cudaEventCreate");
  double seconds = 0, bytes = 0, indices = 0;
  std::size_t k = 0;
  for (auto _ : st) {
    DeviceBatch& b = *batches[k++ % batches.size()];
    const mpe::detail::PoolBags<S, G> pool{b.offsets.p, b.indices.p, nullptr, nullptr, mpe::CacheRef{},
                                           store,       stride,      p.B,     1,       D,
                                           false,       out.p,       nullptr};
    cuda_ok(cudaEventRecord(ev[0], stream), "cudaEventRecord");
    be.for_each_lanes(p.B, pool);
    cuda_ok(cudaEventRecord(ev[1], stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(ev[1]), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
    const double n = static_cast<double>(b.indices.n);
    bytes += n * static_cast<double>(stride) + static_cast<double>(p.B * p.D) * 4.0;
    indices += n;
    seconds += ms * 1e-3;
    st.SetIterationTime(ms * 1e-3);
  }
  for (auto& x : ev) cudaEventDestroy(x);
  cudaFree(store);
  cudaStreamDestroy(stream);
  st.counters["bytes_per_second"] = benchmark::Counter(bytes / seconds);
  st.counters["indices_per_second"] = benchmark::Counter(indices / seconds);
  if (g_hbm_bytes_per_s > 0 && seconds > 0) {
    st.counters["fraction_of_hbm"] = benchmark::Counter(bytes / seconds / g_hbm_bytes_per_s);
  }
}

template <class S, int G>
void reg_pool_group(std::int64_t D) {
  const std::string name = std::string("gpu/pool_group/") + S::name + "/G" + std::to_string(G);
  benchmark::RegisterBenchmark(name.c_str(), bm_pool_group<S, G>)
      ->ArgNames(arg_names())
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Args({65536, 32, D, 10000000, kUniform, 0});
}

template <class S>
void reg_pool_groups() {
  for (const std::int64_t D : {128, 64}) {
    reg_pool_group<S, 1>(D);
    reg_pool_group<S, 2>(D);
    reg_pool_group<S, 4>(D);
    reg_pool_group<S, 8>(D);
  }
}

/// Best of 10 timed copies of `bytes` from `src` to `dst` (kind as for cudaMemcpyAsync):
/// bytes per second, counting `count_factor` x bytes (2 for device-to-device: read + write).
double copy_bandwidth(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                      double count_factor) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  double best = 1e30;
  for (int rep = 0; rep < 12; ++rep) {
    cuda_ok(cudaEventRecord(a), "cudaEventRecord");
    cuda_ok(cudaMemcpyAsync(dst, src, bytes, kind), "cudaMemcpyAsync");
    cuda_ok(cudaEventRecord(b), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    if (rep >= 2) best = std::min(best, ms * 1e-3);  // two warm-up copies
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return count_factor * static_cast<double>(bytes) / best;
}

/// Measures the device's copy bandwidth and the pinned host-to-device bandwidth, and
/// records both (GB/s) and the device's name in the benchmark context.
void measure_device() {
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  benchmark::AddCustomContext("mpe_cuda_device", prop.name);
  benchmark::AddCustomContext("mpe_cuda_sms", std::to_string(prop.multiProcessorCount));
  benchmark::AddCustomContext("mpe_cuda_l2_MiB", std::to_string(prop.l2CacheSize >> 20));
  const std::size_t bytes = std::size_t{2} << 30;
  void *d0 = nullptr, *d1 = nullptr, *h = nullptr;
  cuda_ok(cudaMalloc(&d0, bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&d1, bytes), "cudaMalloc");
  cuda_ok(cudaMemset(d0, 0x5a, bytes), "cudaMemset");
  g_hbm_bytes_per_s = copy_bandwidth(d1, d0, bytes, cudaMemcpyDeviceToDevice, 2.0);
  const std::size_t hbytes = std::size_t{512} << 20;
  cuda_ok(cudaHostAlloc(&h, hbytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(h, 0x5a, hbytes);
  const double h2d = copy_bandwidth(d0, h, hbytes, cudaMemcpyHostToDevice, 1.0);
  cudaFreeHost(h);
  cudaFree(d1);
  cudaFree(d0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", g_hbm_bytes_per_s / 1e9);
  benchmark::AddCustomContext("mpe_hbm_copy_GBps", buf);
  std::snprintf(buf, sizeof buf, "%.1f", h2d / 1e9);
  benchmark::AddCustomContext("mpe_h2d_pinned_GBps", buf);
  std::printf("device %s: copy %.1f GB/s (read + write), pinned host-to-device %.1f GB/s\n", prop.name,
              g_hbm_bytes_per_s / 1e9, h2d / 1e9);
}
}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    std::printf("MPE_CUDA_SKIP: no usable CUDA device (%s); bench_embedding_cuda skipped\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 0;
  }
  try {
    measure_device();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_embedding_cuda: %s\n", ex.what());
    return 1;
  }
  for (const bool smoke : {false, true}) {
    reg_storage<mpe::Int8Rowwise>(smoke ? "smoke/" : "", smoke);
    reg_storage<mpe::Int4Rowwise>(smoke ? "smoke/" : "", smoke);
  }
  for (const std::int64_t dist : {std::int64_t{kUniform}, std::int64_t{kZipf105}}) {
    reg_gpu_cached<mpe::Int8Rowwise>(dist);
    reg_gpu_cached<mpe::Int4Rowwise>(dist);
  }
  {  // admission on second touch (issue 39) at the cached Zipf point, beside Lru<32>'s
    constexpr int kDev = static_cast<int>(Placement::Device);
    const auto a = gpu_args(kZipf105, 50);
    reg_ops<mpe::Int8Rowwise, mpe::SecondTouchLru<32>, kDev>("gpu/", a);
    reg_one<mpe::Int8Rowwise, mpe::SecondTouchLru<32>, kStepSync, kDev>("gpu/sync/", a);
    // the optimizer of the README's quick start, whose backward is not laned yet
    reg_one<mpe::Int8Rowwise, mpe::Lru<32>, kStepAdagrad, kDev>("gpu/sync/", a);
  }
  reg_pool_groups<mpe::Int8Rowwise>();
  reg_pool_groups<mpe::Int4Rowwise>();
  reg_pool_groups<mpe::Fp32>();
  reg_gpu_store_only<mpe::Fp16>(kUniform);
  reg_gpu_store_only<mpe::Fp32>(kUniform);
  reg_one<mpe::Int8Rowwise, mpe::Lru<32>, kForward, static_cast<int>(Placement::HostMapped)>(
      "gpu/", gpu_args(kUniform, 0));
  return mpe_bench::run_main(argc, argv);
}
