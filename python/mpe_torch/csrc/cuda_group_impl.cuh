// SPDX-License-Identifier: Apache-2.0
// mpe_torch: make_cuda_group_of<S, C>, GroupImpl over mpe::CudaBackend. Included by the
// cuda_group_<storage>.cu translation units only (nvcc; no torch headers).
#pragma once

#include <mpe/backend/cuda_backend.cuh>

#include "cuda_group.hpp"
#include "group_impl.hpp"

namespace mpe_torch {

inline mpe::CudaBackend cuda_backend(const CudaContext& ctx) {
  mpe::CudaBackend be;
  be.stream = ctx.stream;
  be.device = ctx.device;
  be.allocator = ctx.allocator;
  switch (ctx.placement) {
    case StorePlacement::Device:
      be.placement = mpe::CudaBackend::Placement::Device;
      break;
    case StorePlacement::HostMapped:
      be.placement = mpe::CudaBackend::Placement::HostMapped;
      break;
    case StorePlacement::Managed:
      be.placement = mpe::CudaBackend::Placement::Managed;
      break;
  }
  return be;
}

template <class S, class C>
std::unique_ptr<Group> make_cuda_group_of(const PolicyNames& n, const mpe::MixedDimConfig& cfg,
                                          const CudaContext& ctx) {
  std::unique_ptr<Group> g;
  for_each_type(Roundings{}, [&]<class R>() {
    for_each_type(StatePrecisions{}, [&]<class P>() {
      if constexpr (is_built_cuda<S, C, R, P>())
        if (!g && py_name<R>() == n.rounding && py_name<P>() == n.state_precision)
          g = std::make_unique<GroupImpl<S, C, R, P, mpe::CudaBackend>>(cfg, cuda_backend(ctx));
    });
  });
  return g;
}

}  // namespace mpe_torch
