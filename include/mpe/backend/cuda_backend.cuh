// SPDX-License-Identifier: Apache-2.0
/// @file mpe/backend/cuda_backend.cuh
/// @brief `CudaBackend`: runs mpe's per-item functors as CUDA kernels on one stream,
/// with CUB for sorting, scanning and integer reductions. Needs nvcc.
///
/// Same results as HostBackend, bit for bit: the per-item code is the same source
/// (float math through the correctly rounded `num::` helpers, `__f*_rn` intrinsics on the
/// device), the sort is a stable radix sort (equal keys keep their order, as
/// thrust::stable_sort_by_key on the host), and the only reductions are over integers.
#pragma once

#ifndef __CUDACC__
#error "mpe/backend/cuda_backend.cuh needs nvcc (CUDA); use HostBackend with a plain C++ compiler"
#endif

#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <memory>
#include <stdexcept>
#include <string>

#include "mpe/backend/cuda_allocator.hpp"
#include "mpe/backend/memory_purpose.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe {

namespace detail {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what) {
  throw std::runtime_error(std::string("mpe::CudaBackend: ") + what + " failed: " + cudaGetErrorName(e) +
                           ": " + cudaGetErrorString(e));
}
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, what);
}

/// Makes `device` current for a scope and restores the caller's device afterwards.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CudaDeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

/// Grid-stride loop: f(i) for every i in [0, n).
template <class F>
__global__ void cuda_for_each_kernel(index_t n, F f) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

/// Grid-stride loop over warps: lane `threadIdx.x % 32` of warp w runs f(i, lane, 32) for
/// every item i = w, w + warps, ... in [0, n).
template <class F>
__global__ void cuda_for_each_lanes_kernel(index_t n, F f) {
  const index_t warps = static_cast<index_t>(gridDim.x) * (blockDim.x / 32);
  const auto lane = static_cast<std::int32_t>(threadIdx.x % 32);
  for (index_t i = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
    f(i, lane, 32);
  }
}

/// Byte fill that works on every device-accessible pointer (device, managed, mapped).
template <int = 0>
__global__ void cuda_fill_kernel(unsigned char* dst, unsigned char value, std::size_t bytes) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += stride) {
    dst[i] = value;
  }
}

/// a + b for the integer aggregates summed by CudaBackend::sum.
struct CudaPlus {
  template <class T>
  MPE_HOST_DEVICE T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

}  // namespace detail

/// The CUDA execution backend: `CachedEmbedding<Storage, Cache, Rounding, CudaBackend>`.
///
/// Memory spaces: with this backend the index, offset, per-sample weight, output and
/// gradient spans passed to CachedEmbedding are device memory (or managed memory);
/// set_weights/get_weights take host spans. The cache, optimizer state, metadata and
/// every workspace are device memory (cudaMalloc, or `allocator` when set); the store
/// follows `placement`.
///
/// Streams and synchronization: all work is queued on `stream` (null = the legacy
/// default stream) of `device`. Callers order their own producers and consumers of
/// those spans on the same stream. copy_to_host and synchronize wait for the stream; CachedEmbedding calls
/// copy_to_host once per prefetch/forward/backward for the validation verdict under Validation::Synchronous
/// (never under Validation::Deferred), and in its synchronizing members (stats, step,
/// get_weights, set_weights, save, load, synchronize). Every other member only queues
/// work: batch sizes (unique rows) and statistics stay in device memory. Temporaries (sort/scan/reduce
/// scratch) come from cudaMallocAsync on `stream` (stream ordered, no device-wide synchronization), or from
/// `allocator`.
///
/// Errors: a failing CUDA call throws std::runtime_error naming the call, with
/// cudaGetErrorName and cudaGetErrorString.
///
/// The object is a small value (copied into every buffer); copies share `allocator`.
struct CudaBackend {
  /// Where the store (every row of every table, Storage format) lives.
  enum class Placement {
    Device,     ///< device memory (cudaMalloc): fastest; the table must fit in HBM
    Managed,    ///< cudaMallocManaged, preferred location host, accessed by the device:
                ///< pages migrate or are read over the interconnect on demand
    HostMapped  ///< pinned host memory mapped into the device (cudaHostAlloc, mapped):
                ///< every store access crosses the interconnect; no device memory used
  };

  cudaStream_t stream = nullptr;  ///< stream every operation is queued on (null: legacy default)
  int device = 0;                 ///< CUDA device ordinal
  /// Where the store lives; every other allocation is device memory whatever this says.
  Placement placement = Placement::Device;
  /// Optional pool for device memory (all purposes; the store only with Placement::Device).
  std::shared_ptr<CudaAllocator> allocator;

  /// Index, offset, output and gradient spans live in device (or managed) memory.
  static constexpr bool device_spans = true;
  /// Work is queued on the stream; reading backend memory waits for it.
  static constexpr bool asynchronous = true;
  static constexpr const char* name = "cuda";  ///< shown in messages and benchmark names
  /// Threads per block of every kernel launched here (for_each, fill_bytes); grids are
  /// capped at 65536 blocks and stride over the rest.
  static constexpr int kBlock = 256;

  /// Allocates `bytes` for `purpose`: the store per `placement`, anything else in device
  /// memory. The pointer is device-accessible. Throws std::runtime_error for a failing
  /// CUDA call, std::invalid_argument for a `placement` that is not a Placement value.
  void* allocate(std::size_t bytes, MemoryPurpose purpose = MemoryPurpose::Workspace) const {
    if (placement != Placement::Device && placement != Placement::Managed &&
        placement != Placement::HostMapped) {
      throw std::invalid_argument(
          "mpe::CudaBackend: placement = " + std::to_string(static_cast<int>(placement)) +
          " is not a Placement value (Device = 0, Managed = 1, HostMapped = 2)");
    }
    detail::CudaDeviceGuard guard(device);
    if (bytes == 0) bytes = 1;
    void* p = nullptr;
    if (purpose == MemoryPurpose::Store && placement == Placement::Managed) {
      detail::cuda_check(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal), "cudaMallocManaged (store)");
      cudaMemLocation host{};
      host.type = cudaMemLocationTypeHost;
      host.id = 0;
      cudaMemLocation dev{};
      dev.type = cudaMemLocationTypeDevice;
      dev.id = device;
      cudaError_t e = cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, host);
      if (e == cudaSuccess) e = cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, dev);
      if (e != cudaSuccess) {
        cudaFree(p);
        detail::cuda_fail(e, "cudaMemAdvise (managed store)");
      }
      return p;
    }
    if (purpose == MemoryPurpose::Store && placement == Placement::HostMapped) {
      detail::cuda_check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                         "cudaHostAlloc (mapped store)");
      void* d = nullptr;
      const cudaError_t e = cudaHostGetDevicePointer(&d, p, 0);
      if (e != cudaSuccess) {
        cudaFreeHost(p);
        detail::cuda_fail(e, "cudaHostGetDevicePointer (mapped store)");
      }
      return d;
    }
    if (allocator) return allocator->allocate(bytes, purpose, stream);
    detail::cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }

  /// Frees memory from allocate() with the same purpose. cudaFree waits for the device.
  void deallocate(void* p, std::size_t bytes,
                  MemoryPurpose purpose = MemoryPurpose::Workspace) const noexcept {
    if (!p) return;
    int previous = device;
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && previous != device && cudaSetDevice(device) == cudaSuccess;
    if (purpose == MemoryPurpose::Store && placement == Placement::HostMapped) {
      cudaPointerAttributes a{};
      void* host = p;
      if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.hostPointer) host = a.hostPointer;
      cudaStreamSynchronize(stream);
      cudaFreeHost(host);
    } else if (purpose == MemoryPurpose::Store && placement == Placement::Managed) {
      cudaFree(p);
    } else if (allocator) {
      allocator->deallocate(p, bytes == 0 ? 1 : bytes, purpose, stream);
    } else {
      cudaFree(p);
    }
    if (switched) cudaSetDevice(previous);
  }

  /// Copies `bytes` from backend (device-accessible) memory to host memory; waits for
  /// the stream, so the data are on the host on return.
  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    if (!bytes) return;
    detail::CudaDeviceGuard guard(device);
    detail::cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                       "cudaMemcpyAsync (to host)");
    detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  /// Copies `bytes` from host memory to backend memory, queued on the stream. Returns once
  /// `src` may be reused: at once for pageable memory (the runtime stages it), after the
  /// copy for pinned memory.
  void copy_from_host(void* dst, const void* src, std::size_t bytes) const {
    if (!bytes) return;
    detail::CudaDeviceGuard guard(device);
    detail::cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                       "cudaMemcpyAsync (from host)");
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
      (void)cudaGetLastError();  // pageable memory on old runtimes: not an error
      return;
    }
    if (a.type == cudaMemoryTypeHost)
      detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  /// Copies between two backend ranges, queued on the stream.
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (!bytes) return;
    detail::CudaDeviceGuard guard(device);
    detail::cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  }
  /// Sets `bytes` of backend memory to `value`, queued on the stream (a kernel, so it works
  /// for device, managed and host-mapped memory alike).
  void fill_bytes(void* dst, int value, std::size_t bytes) const {
    if (!bytes) return;
    detail::CudaDeviceGuard guard(device);
    detail::cuda_fill_kernel<><<<blocks_for(static_cast<index_t>(bytes)), kBlock, 0, stream>>>(
        static_cast<unsigned char*>(dst), static_cast<unsigned char>(value), bytes);
    detail::cuda_check(cudaGetLastError(), "fill kernel launch");
  }
  /// Waits for every operation queued on the stream.
  void synchronize() const {
    detail::CudaDeviceGuard guard(device);
    detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  /// Launches f(i) for every i in [0, n) as one grid-stride kernel on the stream. f is a
  /// trivially copyable functor with an `MPE_HOST_DEVICE` call operator.
  template <class F>
  void for_each(index_t n, F f) const {
    if (n <= 0) return;
    detail::CudaDeviceGuard guard(device);
    detail::cuda_for_each_kernel<<<blocks_for(n), kBlock, 0, stream>>>(n, f);
    detail::cuda_check(cudaGetLastError(), "for_each kernel launch");
  }

  /// A warp per item: laned functors split a row's elements over 32 lanes.
  static constexpr std::int32_t lane_width = 32;
  /// The 32 lanes of an item are one warp (mpe::warp_lanes): functors may use warp shuffles.
  static constexpr bool warp_lanes = true;
  /// Launches f(i, lane, 32) for every item i in [0, n) and lane in [0, 32) as one
  /// grid-stride kernel on the stream, one warp per item (queued; returns before the kernel
  /// runs). f is a trivially copyable laned functor with an `MPE_HOST_DEVICE` call
  /// operator. Throws std::runtime_error when the launch fails.
  template <class F>
  void for_each_lanes(index_t n, F f) const {
    if (n <= 0) return;
    detail::CudaDeviceGuard guard(device);
    const index_t blocks = (n + kBlock / 32 - 1) / (kBlock / 32);
    detail::cuda_for_each_lanes_kernel<<<static_cast<unsigned int>(blocks < 65536 ? blocks : 65536), kBlock,
                                         0, stream>>>(n, f);
    detail::cuda_check(cudaGetLastError(), "for_each_lanes kernel launch");
  }

  /// Stable sort of `values` by `keys` (n each, device memory): CUB's LSD radix sort,
  /// which keeps the input order of equal keys, so it equals the host's
  /// thrust::stable_sort_by_key. Queued on the stream; integral keys only, each in
  /// [0, 2^key_bits): CUB sorts only bits [0, key_bits).
  template <class K, class V>
  void stable_sort_by_key(K* keys, V* values, index_t n, int key_bits = 8 * sizeof(K)) const {
    if (n <= 1) return;
    detail::CudaDeviceGuard guard(device);
    const auto count = static_cast<std::size_t>(n);
    Scratch alt_keys(*this, count * sizeof(K)), alt_values(*this, count * sizeof(V));
    cub::DoubleBuffer<K> k(keys, static_cast<K*>(alt_keys.p));
    cub::DoubleBuffer<V> v(values, static_cast<V*>(alt_values.p));
    std::size_t temp_bytes = 0;
    detail::cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k, v, n, 0, key_bits, stream),
                       "cub::DeviceRadixSort::SortPairs (size)");
    Scratch temp(*this, temp_bytes);
    detail::cuda_check(cub::DeviceRadixSort::SortPairs(temp.p, temp_bytes, k, v, n, 0, key_bits, stream),
                       "cub::DeviceRadixSort::SortPairs");
    if (k.Current() != keys) copy(keys, k.Current(), count * sizeof(K));
    if (v.Current() != values) copy(values, v.Current(), count * sizeof(V));
  }

  /// out[i] = in[0] + ... + in[i-1] (integers: exact); out[0] = 0. Queued on the stream.
  template <class T>
  void exclusive_scan(const T* in, T* out, index_t n) const {
    if (n <= 0) return;
    detail::CudaDeviceGuard guard(device);
    std::size_t temp_bytes = 0;
    detail::cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, in, out, n, stream),
                       "cub::DeviceScan::ExclusiveSum (size)");
    Scratch temp(*this, temp_bytes);
    detail::cuda_check(cub::DeviceScan::ExclusiveSum(temp.p, temp_bytes, in, out, n, stream),
                       "cub::DeviceScan::ExclusiveSum");
  }

  /// *out = sum of f(i) over [0, n) for an integer (or integer-aggregate, all-zero T{})
  /// T, written to device memory `out`: exact, so independent of CUB's order. Queued on the
  /// stream (no wait).
  template <class T, class F>
  void reduce_to(index_t n, F f, T* out) const {
    detail::CudaDeviceGuard guard(device);
    if (n <= 0) {
      detail::cuda_check(cudaMemsetAsync(out, 0, sizeof(T), stream), "cudaMemsetAsync");
      return;
    }
    std::size_t temp_bytes = 0;
    const thrust::counting_iterator<index_t> first(0);
    detail::cuda_check(cub::DeviceReduce::TransformReduce(nullptr, temp_bytes, first, out, n,
                                                          detail::CudaPlus{}, f, T{}, stream),
                       "cub::DeviceReduce::TransformReduce (size)");
    Scratch temp(*this, temp_bytes);
    detail::cuda_check(cub::DeviceReduce::TransformReduce(temp.p, temp_bytes, first, out, n,
                                                          detail::CudaPlus{}, f, T{}, stream),
                       "cub::DeviceReduce::TransformReduce");
  }

 private:
  /// Stream-ordered temporary device memory (cudaMallocAsync/cudaFreeAsync, or the pool).
  struct Scratch {
    const CudaBackend& be;
    void* p = nullptr;
    std::size_t bytes;
    Scratch(const CudaBackend& b, std::size_t n) : be(b), bytes(n == 0 ? 1 : n) {
      if (be.allocator) {
        p = be.allocator->allocate(bytes, MemoryPurpose::Workspace, be.stream);
      } else {
        detail::cuda_check(cudaMallocAsync(&p, bytes, be.stream), "cudaMallocAsync");
      }
    }
    ~Scratch() {
      if (be.allocator) {
        be.allocator->deallocate(p, bytes, MemoryPurpose::Workspace, be.stream);
      } else {
        cudaFreeAsync(p, be.stream);
      }
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
  };

  static unsigned int blocks_for(index_t n) {
    const index_t b = (n + kBlock - 1) / kBlock;
    return static_cast<unsigned int>(b < 65536 ? b : 65536);
  }
};

}  // namespace mpe
