// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the CUDA module's factory (mpe_torch._C_cuda): Groups over
// MixedDimEmbedding<..., mpe::CudaBackend>. Plain C++ (the CUDA runtime's API header, no torch,
// no nvcc): the binding (g++, torch's CUDA headers) calls it, the cuda_group_<storage>.cu
// translation units (nvcc, no torch headers) define it.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mpe/backend/cuda_allocator.hpp>
#include <string>
#include <vector>

#include "group.hpp"

namespace mpe_torch {

/// Where a CUDA module's store lives (mpe::CudaBackend::Placement); the cache, optimizer
/// state, metadata and workspaces are device memory whatever this says.
enum class StorePlacement {
  Device,      ///< device memory, from `allocator` (torch's caching allocator)
  HostMapped,  ///< pinned host memory mapped into the device (cudaHostAlloc)
  Managed      ///< cudaMallocManaged, preferred location host
};

/// The CudaBackend of a CUDA module's groups: every call's work is queued on `stream` of
/// `device`; `allocator` gives the device memory (all of it but a HostMapped / Managed store).
struct CudaContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  StorePlacement placement = StorePlacement::Device;
  std::shared_ptr<mpe::CudaAllocator> allocator;
};

/// The combinations compiled into the CUDA module (variants.hpp, is_built_cuda), as
/// "storage/cache/rounding/state_precision": a subset of built_combinations().
std::vector<std::string> built_cuda_combinations();

/// make_group's CUDA twin: the same name checks and messages, the groups on `ctx`'s backend.
/// Forward, forward_inference and backward then take device spans (of ctx.device); every
/// other member host memory. export_table / import_table throw std::logic_error.
std::unique_ptr<Group> make_cuda_group(const PolicyNames& names, const mpe::MixedDimConfig& cfg,
                                       const CudaContext& ctx);

/// The CUDA factory of storage S with cache C (nullptr for a rounding or state precision
/// is_built_cuda does not allow). Defined in cuda_group_impl.cuh, instantiated explicitly by
/// the cuda_group_<storage>.cu translation units.
template <class S, class C>
std::unique_ptr<Group> make_cuda_group_of(const PolicyNames& names, const mpe::MixedDimConfig& cfg,
                                          const CudaContext& ctx);

}  // namespace mpe_torch
