// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/config.hpp
/// @brief Compilation-environment macros shared by every mpe header.
///
/// `MPE_HOST_DEVICE` marks the single-source per-item code that the host backend
/// runs under g++ and the CUDA backend launches as kernels under nvcc.
#pragma once

#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
/// Marks a function compiled for both sides: `__host__ __device__` under nvcc, so the
/// same per-item source runs on the host and in CUDA kernels (bit-identical results);
/// empty under a plain C++ compiler.
#define MPE_HOST_DEVICE __host__ __device__
/// Marks a device-only function: `__device__` under nvcc; empty under a plain C++
/// compiler. Reserved: no mpe header uses it today.
#define MPE_DEVICE __device__
#else
#define MPE_HOST_DEVICE
#define MPE_DEVICE
#endif

#if defined(__CUDA_ARCH__)
/// Asks nvcc to unroll the loop that follows (device code only: loops over compile-time
/// bounds whose arrays must stay in registers); empty in host code.
#define MPE_UNROLL _Pragma("unroll")
#else
/// Asks nvcc to unroll the loop that follows (device code only); empty in host code.
#define MPE_UNROLL
#endif

/// Expands to plain `inline` on every compiler (header-only definitions, ODR-safe across
/// translation units); it forces nothing, the name only marks a hot helper. Reserved: no
/// mpe header uses it today.
#define MPE_FORCEINLINE inline

// The numerics contract (docs/numerics.md) requires correctly rounded float operations in a
// fixed order. -ffast-math breaks both, so refuse to compile under it.
#if defined(__FAST_MATH__)
#error "mpe: -ffast-math breaks the numerics contract (bit-identical host/GPU results); compile without it"
#endif

#include <cstdint>

namespace mpe {

/// Index type for rows, slots and positions: always 64-bit, so tables past 2^31 rows
/// (or caches past 2^31 floats) never overflow.
using index_t = std::int64_t;

#if defined(MPE_LAUNCH_SHAPE) && !defined(__CUDA_ARCH__)
namespace detail {
/// Host builds with MPE_LAUNCH_SHAPE defined (the launch-shape test): iterations of the
/// counted loops run by the calling thread since the backend last reset it.
inline thread_local std::int64_t launch_trips = 0;
}  // namespace detail
#endif

}  // namespace mpe

#if defined(MPE_LAUNCH_SHAPE) && !defined(__CUDA_ARCH__)
/// Counts one iteration of a per-item loop whose trip count depends on the batch (a bag's
/// rows, a row's occurrences, a set's items or ways), for the launch-shape test
/// (tests/embedding/test_launch_shape.cpp); nothing unless MPE_LAUNCH_SHAPE is defined.
#define MPE_TRIP() (++::mpe::detail::launch_trips)
#else
/// Counts one iteration of a per-item loop for the launch-shape test; nothing here.
#define MPE_TRIP() ((void)0)
#endif
