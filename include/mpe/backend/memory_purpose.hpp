// SPDX-License-Identifier: Apache-2.0
/// @file mpe/backend/memory_purpose.hpp
/// @brief `MemoryPurpose`: what an allocation holds, so a backend can place it (e.g.
/// CudaBackend puts only the store in managed or host-mapped memory) and users' memory
/// pools can tell allocations apart.
#pragma once

namespace mpe {

/// What a backend allocation holds. Backends may ignore it (HostBackend does).
enum class MemoryPurpose {
  Workspace,  ///< per-call scratch (batch buffers, sort temporaries, error flags)
  Store,      ///< the low-precision store: every row of every table
  Cache,      ///< FP32 cache rows, tags, scores, dirty bits, LFU sketch
  Optimizer,  ///< optimizer state
  Metadata,   ///< table offsets and sizes
};

}  // namespace mpe
