// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/prefetch.hpp
/// @brief Host prefetches of the portable per-item functors (not public): the distance in
/// items and the line-by-line prefetch, a no-op in device code. The bits never depend on them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpe/numeric/config.hpp"

namespace mpe::detail {

/// Occurrences ahead whose rows the host prefetches in pooling with a cache, populate and
/// the backward (FBGEMM's default distance), and the least the host's SIMD pooling uses
/// (detail/host/dispatch.hpp, pool_rows_ahead).
#ifdef MPE_POOL_PREFETCH_AHEAD
inline constexpr index_t kPoolPrefetchAhead = MPE_POOL_PREFETCH_AHEAD;
#else
inline constexpr index_t kPoolPrefetchAhead = 16;
#endif

/// Prefetches (read, keep in all levels) every 64-byte line of [p, p + bytes) on the host;
/// a no-op in device code. The rows' bits do not depend on it.
///
/// The empty `asm volatile` is needed: GCC's IPA pure-const analysis treats
/// __builtin_prefetch as free of side effects, so a non-inlined caller whose only effects
/// are prefetches (PoolBags::prefetch_row) was found "const" and its calls deleted as dead
/// code at -O1 and above: no prefetch instruction was left in mpe's forward. The volatile
/// asm emits nothing and keeps them.
/// `Write`: prefetch for writing (the lines are about to be stored to). `L2`: a read
/// prefetch into L2 only (`prefetcht1`), for lines read well after it.
template <bool Write = false, bool L2 = false>
MPE_HOST_DEVICE inline void prefetch_lines(const void* p, std::size_t bytes) {
#ifndef __CUDA_ARCH__
  // One prefetch per 64-byte line the bytes touch (no repeated line).
  const char* c = static_cast<const char*>(p);
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(c) & ~std::uintptr_t{63};
  const std::uintptr_t last =
      (reinterpret_cast<std::uintptr_t>(c) + (bytes ? bytes - 1 : 0)) & ~std::uintptr_t{63};
  for (std::uintptr_t a = first; a <= last; a += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(a), Write ? 1 : 0, L2 && !Write ? 2 : 3);
  asm volatile("");
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace mpe::detail
