// SPDX-License-Identifier: Apache-2.0
/// @file mpe/backend/cuda_allocator.hpp
/// @brief `CudaAllocator`: the interface of a device memory pool for CudaBackend. A plain C++
/// header (the CUDA runtime's API header only, no nvcc needed), so code built by a host
/// compiler (e.g. a framework binding) can implement a pool that nvcc-built code uses.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "mpe/backend/memory_purpose.hpp"

namespace mpe {

/// A user-supplied device memory pool for CudaBackend (e.g. a framework's caching
/// allocator). allocate() returns device memory usable on `stream` (or throws);
/// deallocate() may be called while work on `stream` that used the memory is still
/// queued, so the pool must reuse it in stream order (as cudaFreeAsync does).
/// Not used for the store under the Managed and HostMapped placements.
class CudaAllocator {
 public:
  virtual ~CudaAllocator() = default;
  /// Returns `bytes` (>= 1) of device memory for `purpose`, usable by work queued on
  /// `stream` from now on and 64-byte aligned at least (the ExecutionBackend contract);
  /// throws, never returns null, when it cannot.
  virtual void* allocate(std::size_t bytes, MemoryPurpose purpose, cudaStream_t stream) = 0;
  /// Takes back `p` from allocate() (same `bytes`, `purpose` and `stream`). Work on
  /// `stream` that uses `p` may still be queued: reuse it in stream order. Must not throw.
  virtual void deallocate(void* p, std::size_t bytes, MemoryPurpose purpose,
                          cudaStream_t stream) noexcept = 0;
};

}  // namespace mpe
