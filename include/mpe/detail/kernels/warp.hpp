// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/warp.hpp
/// @brief The warp-wide operations that warp-cooperative functors are written against
/// (not public): CudaWarp maps them to CUDA's intrinsics; the tests supply a host
/// emulation with the same contract (tests/reference/warp_emulation.hpp), so the same
/// functor code is checked on a CPU.
#pragma once

#include <bit>
#include <cstdint>

#include "mpe/numeric/config.hpp"

namespace mpe::detail {

/// Lowest set bit's position of a non-zero lane mask (CUDA: __ffs - 1).
MPE_HOST_DEVICE inline std::int32_t lowest_lane(unsigned mask) {
#ifdef __CUDA_ARCH__
  return __ffs(static_cast<int>(mask)) - 1;
#else
  return std::countr_zero(mask);
#endif
}

/// Set bits of a lane mask (CUDA: __popc).
MPE_HOST_DEVICE inline std::int32_t lane_count(unsigned mask) {
#ifdef __CUDA_ARCH__
  return __popc(mask);
#else
  return std::popcount(mask);
#endif
}

/// The 32 lanes of one converged CUDA warp, every lane taking part in each call (the full
/// mask): `ballot(p)` has bit l set where lane l's p is true; `shfl(v, src)` is lane src's v.
/// A WarpOps type (the emulation in the tests too) has exactly these two members. Device
/// code only: on the host the members are never called (they return 0 and v).
struct CudaWarp {
  MPE_HOST_DEVICE unsigned ballot(bool p) const {
#ifdef __CUDA_ARCH__
    return __ballot_sync(0xffffffffu, p);
#else
    return p ? 1u : 0u;
#endif
  }
  template <class T>
  MPE_HOST_DEVICE T shfl(T v, std::int32_t src) const {
#ifdef __CUDA_ARCH__
    return __shfl_sync(0xffffffffu, v, src);
#else
    (void)src;
    return v;
#endif
  }
};

}  // namespace mpe::detail
