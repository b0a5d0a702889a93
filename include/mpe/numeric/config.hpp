// SPDX-License-Identifier: Apache-2.0
/// @file config.hpp
/// @brief Compilation-environment macros shared by every mpe header.
///
/// `MPE_HOST_DEVICE` marks the single-source per-item code that the host backend
/// runs under g++ and the CUDA backend launches as kernels under nvcc.
#pragma once

#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
#define MPE_HOST_DEVICE __host__ __device__
#define MPE_DEVICE __device__
#else
#define MPE_HOST_DEVICE
#define MPE_DEVICE
#endif

#define MPE_FORCEINLINE inline

// The numerics contract (DESIGN.md) requires correctly rounded float operations in a
// fixed order. -ffast-math breaks both, so refuse to compile under it.
#if defined(__FAST_MATH__)
#error "mpe: -ffast-math breaks the numerics contract (bit-identical host/GPU results); compile without it"
#endif

#include <cstdint>

namespace mpe {

/// Index type for rows, slots and positions: always 64-bit, so tables past 2^31 rows
/// (or caches past 2^31 floats) never overflow.
using index_t = std::int64_t;

}  // namespace mpe
