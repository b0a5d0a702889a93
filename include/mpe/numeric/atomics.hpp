// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/atomics.hpp
/// @brief Integer atomics usable from per-item code on host and device (not public).
#pragma once

#include <atomic>
#include <cstdint>

#include "mpe/numeric/config.hpp"

namespace mpe {
namespace detail {
/// Atomic integer helpers usable from per-item code on both sides.
MPE_HOST_DEVICE inline void atomic_min(index_t* p, index_t v) {
#ifdef __CUDA_ARCH__
  atomicMin(reinterpret_cast<long long*>(p), static_cast<long long>(v));
#else
  std::atomic_ref<index_t> a(*p);
  index_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
#endif
}
MPE_HOST_DEVICE inline void atomic_add(std::uint32_t* p, std::uint32_t v) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, v);
#else
  std::atomic_ref<std::uint32_t>(*p).fetch_add(v, std::memory_order_relaxed);
#endif
}
MPE_HOST_DEVICE inline void atomic_add(std::uint64_t* p, std::uint64_t v) {
#ifdef __CUDA_ARCH__
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  std::atomic_ref<std::uint64_t>(*p).fetch_add(v, std::memory_order_relaxed);
#endif
}
/// *p |= v; the result does not depend on the order of concurrent calls.
MPE_HOST_DEVICE inline void atomic_or(std::uint32_t* p, std::uint32_t v) {
#ifdef __CUDA_ARCH__
  atomicOr(p, v);
#else
  std::atomic_ref<std::uint32_t>(*p).fetch_or(v, std::memory_order_relaxed);
#endif
}
/// *p = max(*p, v); the result does not depend on the order of concurrent calls.
MPE_HOST_DEVICE inline void atomic_max(std::uint32_t* p, std::uint32_t v) {
#ifdef __CUDA_ARCH__
  atomicMax(p, v);
#else
  std::atomic_ref<std::uint32_t> a(*p);
  std::uint32_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
#endif
}
}  // namespace detail

}  // namespace mpe
