// SPDX-License-Identifier: Apache-2.0
// CudaBackend benchmarks at the base point (bench/RESULTS.md): forward, backward (Sgd)
// and populate (prefetch) for Int8Rowwise and Int4Rowwise, with a 5 % Lru<32> cache and
// store only, the store in Device, Managed and HostMapped memory. Each part is timed with
// CUDA events on the backend's stream (manual time). `cuda/step/...` times whole pipelined
// training steps (prefetch(k+1), forward(k), backward(k); no statistics read) with the
// store in HBM, under Validation::Synchronous (one wait per call) and Validation::Deferred
// (no wait): the difference is what the waits cost. Without a usable GPU the binary prints
// "MPE_CUDA_SKIP: ..." and exits 0.
#include <cuda_runtime.h>

#include <mpe/cuda_backend.cuh>
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

enum Op : int { kForward = 0, kBackward = 1, kPopulate = 2, kStepSync = 3, kStepDeferred = 4 };
const char* op_name_cuda(int op) {
  return op == kForward ? "forward" : op == kBackward ? "backward" : op == kPopulate ? "populate" : "step";
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
  CudaFixture(const Params& p, Placement placement, mpe::Validation validation) {
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
    for (const Batch& b : make_batches(p.rows, p.B, p.L, static_cast<int>(p.dist), kBatches,
                                       1234 + static_cast<std::uint64_t>(p.dist))) {
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
      emb->backward(grad->span(), mpe::Sgd{kLearningRate});
    }
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    emb->reset_stats();
    setup_s = since(t0);
  }
  ~CudaFixture() {
    emb.reset();
    if (stream) cudaStreamDestroy(stream);
  }
};

/// The fixture for (S, C, placement, params, validation), built once and kept while
/// consecutive benchmarks share it.
template <class S, class C, int PlacementV>
CudaFixture<S, C>& fixture_for(const Params& p, mpe::Validation validation) {
  using F = CudaFixture<S, C>;
  FixtureSlot& slot = fixture_slot();
  const std::string key = std::string("cuda|") + S::name + C::name + placement_name(PlacementV) + "|" +
                          p.key() + (validation == mpe::Validation::Deferred ? "|deferred" : "");
  if (slot.key != key) {
    slot.holder.reset();
    slot.key.clear();
    slot.holder = std::make_shared<F>(p, static_cast<Placement>(PlacementV), validation);
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
      p, OpV == kStepDeferred ? mpe::Validation::Deferred : mpe::Validation::Synchronous);
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
      e.backward(f.grad->span(), mpe::Sgd{kLearningRate});
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
  auto* fn = (OpV == kStepSync || OpV == kStepDeferred) ? bm_cuda_step<S, C, OpV, PlacementV>
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
}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    std::printf("MPE_CUDA_SKIP: no usable CUDA device (%s); bench_embedding_cuda skipped\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 0;
  }
  for (const bool smoke : {false, true}) {
    reg_storage<mpe::Int8Rowwise>(smoke ? "smoke/" : "", smoke);
    reg_storage<mpe::Int4Rowwise>(smoke ? "smoke/" : "", smoke);
  }
  return mpe_bench::run_main(argc, argv);
}
